//! The runtime's error type.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file whose content cannot be used: names the file, the field and the value.
    #[error("{}: {field}: {message}", path.display())]
    InvalidInput {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error(transparent)]
    Planner(#[from] fateplan_planner::Error),
}

impl Error {
    pub(crate) fn invalid(
        path: &std::path::Path,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::InvalidInput {
            path: path.to_path_buf(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
