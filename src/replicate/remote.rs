//! The object-store calls the replicator and restore make, with their errors named.

use std::sync::Arc;

use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};

use super::ReplicateError;

/// An object store and the replica's prefix in it.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    pub store: Arc<dyn ObjectStore>,
    pub prefix: ObjectPath,
    /// `s3://BUCKET/PREFIX`, for messages.
    pub url: String,
}

/// What a conditional put found.
pub(crate) enum Conditional {
    /// Written; the new ETag.
    Written(Option<String>),
    /// The condition failed (the object exists, or changed).
    Refused,
    /// The server does not support the condition.
    Unsupported,
}

fn remote_error(op: &'static str, object: &ObjectPath, e: object_store::Error) -> ReplicateError {
    ReplicateError::Remote {
        op,
        object: object.to_string(),
        detail: e.to_string(),
    }
}

impl Remote {
    /// Writes `bytes` to `path` (replacing an object of the same name: parts and manifests
    /// are written once, or again with the same bytes).
    pub async fn put(&self, path: &ObjectPath, bytes: Vec<u8>) -> Result<(), ReplicateError> {
        match self.store.put(path, PutPayload::from(bytes)).await {
            Ok(_) => Ok(()),
            Err(e @ object_store::Error::NotFound { .. }) => Err(self.no_bucket(e)),
            Err(e) => Err(remote_error("uploading", path, e)),
        }
    }

    /// An upload answered "not found": the bucket is missing.
    fn no_bucket(&self, e: object_store::Error) -> ReplicateError {
        let bucket = self
            .url
            .strip_prefix("s3://")
            .and_then(|r| r.split('/').next())
            .unwrap_or(&self.url)
            .to_owned();
        ReplicateError::NoBucket {
            bucket,
            detail: e.to_string(),
        }
    }

    /// Writes `bytes` to `path` only if it does not exist (`etag: None`) or still has `etag`.
    pub async fn put_if(
        &self,
        path: &ObjectPath,
        bytes: Vec<u8>,
        etag: Option<String>,
    ) -> Result<Conditional, ReplicateError> {
        let mode = match etag {
            None => PutMode::Create,
            Some(e) => PutMode::Update(UpdateVersion {
                e_tag: Some(e),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(path, PutPayload::from(bytes), opts)
            .await
        {
            Ok(r) => Ok(Conditional::Written(r.e_tag)),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(Conditional::Refused),
            Err(
                object_store::Error::NotImplemented { .. }
                | object_store::Error::NotSupported { .. },
            ) => Ok(Conditional::Unsupported),
            Err(e @ object_store::Error::NotFound { .. }) => Err(self.no_bucket(e)),
            Err(e) => Err(remote_error("uploading", path, e)),
        }
    }

    /// Reads `path` whole, with its ETag; `None` when it does not exist.
    pub async fn get(
        &self,
        path: &ObjectPath,
    ) -> Result<Option<(Vec<u8>, Option<String>)>, ReplicateError> {
        let got = match self.store.get(path).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(remote_error("downloading", path, e)),
        };
        let etag = got.meta.e_tag.clone();
        let bytes = got
            .bytes()
            .await
            .map_err(|e| remote_error("downloading", path, e))?;
        Ok(Some((bytes.to_vec(), etag)))
    }

    /// Every object below `path`.
    pub async fn list(&self, path: &ObjectPath) -> Result<Vec<ObjectMeta>, ReplicateError> {
        self.store
            .list(Some(path))
            .try_collect()
            .await
            .map_err(|e| remote_error("listing", path, e))
    }

    /// Deletes `path` (a missing object is not an error).
    pub async fn delete(&self, path: &ObjectPath) -> Result<(), ReplicateError> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(remote_error("deleting", path, e)),
        }
    }
}
