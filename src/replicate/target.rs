//! Where a replica lives: `s3://BUCKET/PREFIX`, the endpoint and the credentials (the usual
//! `AWS_*` environment variables, overridden by what the caller sets), and the shipping
//! interval and remote retention.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};

use super::ReplicateError;

/// The default time between shipping rounds.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// The default remote retention of manifests (format-spec.md §12.6).
pub const DEFAULT_RETAIN: Duration = Duration::from_secs(24 * 3600);
/// The default log bytes shipped between two index snapshots (format-spec.md §12.7).
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 64 << 20;
/// The default shortest time between two index snapshots.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(60);

/// A replica: an S3 bucket and a prefix in it, how to reach it, and how often to ship.
///
/// ```
/// use sessionlog::replicate::ReplicaTarget;
/// let t = ReplicaTarget::s3("s3://backups/agents/host-1")?
///     .endpoint("http://127.0.0.1:9000")
///     .allow_http(true);
/// assert_eq!(t.bucket(), "backups");
/// assert_eq!(t.prefix(), "agents/host-1");
/// # Ok::<(), sessionlog::replicate::ReplicateError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ReplicaTarget {
    url: String,
    bucket: String,
    prefix: String,
    endpoint: Option<String>,
    allow_http: Option<bool>,
    region: Option<String>,
    credentials: Option<(String, String)>,
    interval: Duration,
    retain: Duration,
    snapshot_every: u64,
    snapshot_interval: Duration,
    use_snapshots: bool,
}

impl ReplicaTarget {
    /// Parses `s3://BUCKET[/PREFIX]`. The prefix's segments must be valid object names (no
    /// empty segment, no `.` or `..`, no control characters); a trailing `/` is ignored.
    pub fn s3(url: &str) -> Result<ReplicaTarget, ReplicateError> {
        let bad = |reason: &str| ReplicateError::Url {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| bad("it does not start with s3://"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("the bucket name is empty"));
        }
        // S3's bucket naming rules (3-63 characters, lower case, digits, '.', '-'), loosened
        // to what S3-compatible servers accept as well (upper case, '_').
        if bucket.len() > 63
            || !bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        {
            return Err(bad(
                "the bucket name may hold only letters, digits, '.', '-' and '_' (at most 63)",
            ));
        }
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        if !prefix.is_empty() {
            if prefix.chars().any(|c| c.is_control()) {
                return Err(bad("the prefix holds a control character"));
            }
            if prefix.len() > 512 {
                return Err(bad("the prefix is longer than 512 bytes"));
            }
            ObjectPath::parse(prefix)
                .map_err(|e| bad(&format!("the prefix is not a valid object name ({e})")))?;
            if prefix
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == "..")
            {
                return Err(bad("the prefix has an empty, '.' or '..' segment"));
            }
        }
        Ok(ReplicaTarget {
            url: url.to_owned(),
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            endpoint: None,
            allow_http: None,
            region: None,
            credentials: None,
            interval: DEFAULT_INTERVAL,
            retain: DEFAULT_RETAIN,
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            snapshot_interval: DEFAULT_SNAPSHOT_INTERVAL,
            use_snapshots: true,
        })
    }

    /// The endpoint URL of an S3-compatible server (`http://127.0.0.1:9000`); default the
    /// `AWS_ENDPOINT_URL` environment variable, else AWS.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// Allows plain `http://` endpoints; default the `AWS_ALLOW_HTTP` environment variable.
    pub fn allow_http(mut self, yes: bool) -> Self {
        self.allow_http = Some(yes);
        self
    }

    /// The region; default `AWS_REGION`, else `us-east-1`.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Static credentials; default `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (or the
    /// other sources the AWS SDKs read: web identity, container and instance metadata).
    pub fn credentials(mut self, key_id: impl Into<String>, secret: impl Into<String>) -> Self {
        self.credentials = Some((key_id.into(), secret.into()));
        self
    }

    /// Time between shipping rounds (default 1 s; at least 10 ms).
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every.max(Duration::from_millis(10));
        self
    }

    /// How long manifests are kept on the remote (default 24 h, format-spec.md §12.6).
    pub fn retain(mut self, window: Duration) -> Self {
        self.retain = window;
        self
    }

    /// Ships an index snapshot (format-spec.md §12.7) once at least `bytes` of log were
    /// shipped since the last one (default 64 MiB; 0: never), at most once per
    /// [`ReplicaTarget::snapshot_interval`], and when the replicator stops after shipping
    /// anything since the last one.
    pub fn snapshot_every(mut self, bytes: u64) -> Self {
        self.snapshot_every = bytes;
        self
    }

    /// The shortest time between two index snapshots while shipping (default 60 s).
    pub fn snapshot_interval(mut self, every: Duration) -> Self {
        self.snapshot_interval = every;
        self
    }

    /// Whether a restore starts from an index snapshot when the replica holds one that
    /// matches (default true); false rebuilds the index from the whole log.
    pub fn use_snapshots(mut self, yes: bool) -> Self {
        self.use_snapshots = yes;
        self
    }

    /// The log bytes between index snapshots (0: none are shipped).
    pub fn snapshot_bytes(&self) -> u64 {
        self.snapshot_every
    }

    /// The shortest time between index snapshots.
    pub fn snapshot_period(&self) -> Duration {
        self.snapshot_interval
    }

    /// Whether a restore uses index snapshots.
    pub fn uses_snapshots(&self) -> bool {
        self.use_snapshots
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix inside the bucket (empty: the bucket's root).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The time between shipping rounds.
    pub fn shipping_interval(&self) -> Duration {
        self.interval
    }

    /// The remote retention window.
    pub fn retention(&self) -> Duration {
        self.retain
    }

    /// The prefix as an object path.
    pub(crate) fn prefix_path(&self) -> ObjectPath {
        ObjectPath::from_iter(self.prefix.split('/').filter(|s| !s.is_empty()))
    }

    /// Builds the S3 client: the environment first, then what was set here. Requests time out
    /// (5 s to connect, 60 s in all) and are retried briefly by the client; longer outages are
    /// the shipping loop's business (it backs off and reports).
    pub(crate) fn build(&self) -> Result<Arc<dyn ObjectStore>, ReplicateError> {
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&self.bucket)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                "5s",
            )
            .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), "60s")
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(50),
                    max_backoff: Duration::from_millis(500),
                    base: 2.0,
                },
                max_retries: 2,
                retry_timeout: Duration::from_secs(10),
            });
        if std::env::var_os("AWS_REGION").is_none() && self.region.is_none() {
            b = b.with_region("us-east-1");
        }
        if let Some(r) = &self.region {
            b = b.with_region(r);
        }
        if let Some(e) = &self.endpoint {
            b = b.with_endpoint(e);
            if e.starts_with("http://") && self.allow_http.is_none() {
                // An explicit http:// endpoint is a choice the caller made.
                b = b.with_allow_http(true);
            }
        }
        if let Some(yes) = self.allow_http {
            b = b.with_allow_http(yes);
        }
        if let Some((id, secret)) = &self.credentials {
            b = b.with_access_key_id(id).with_secret_access_key(secret);
        }
        let store = b
            .build()
            .map_err(|e| ReplicateError::Client(e.to_string()))?;
        Ok(Arc::new(store))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = ReplicaTarget::s3("s3://b/p/q/").expect("valid");
        assert_eq!((t.bucket(), t.prefix()), ("b", "p/q"));
        assert_eq!(t.prefix_path().as_ref(), "p/q");
        let t = ReplicaTarget::s3("s3://b").expect("valid");
        assert_eq!(t.prefix(), "");
        for bad in [
            "b/p",
            "s3://",
            "s3:///p",
            "s3://b/../x",
            "s3://b/a//c",
            "s3://b/./x",
            "s3://b/a\nb",
            "s3://b c/x",
            "http://b/x",
        ] {
            assert!(ReplicaTarget::s3(bad).is_err(), "{bad}");
        }
    }
}
