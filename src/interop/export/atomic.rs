//! Export's file helpers: I/O error context, directory creation, and the conversion of an
//! [`AtomicFile`](crate::interop::atomic::AtomicFile) failure.

use std::path::Path;

use super::ExportError;
use crate::interop::atomic::AtomicError;

pub(super) fn io(path: &Path, context: &'static str) -> impl FnOnce(std::io::Error) -> ExportError {
    let path = path.to_owned();
    move |source| ExportError::Io {
        path,
        context,
        source,
    }
}

impl From<AtomicError> for ExportError {
    fn from(e: AtomicError) -> Self {
        match e {
            AtomicError::Exists(path) => ExportError::TargetExists { path },
            AtomicError::Io {
                path,
                context,
                source,
            } => ExportError::Io {
                path,
                context,
                source,
            },
        }
    }
}

/// Creates `dir` and its missing parents (mode 0700 for the new ones, as dsh does).
pub(super) fn create_dirs(dir: &Path) -> Result<(), ExportError> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
        .map_err(io(dir, "cannot create the directory"))
}
