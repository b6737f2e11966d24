//! Reading JSON with errors that name the source, line, column and field.

use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// Parses `text`; on failure the error names `source`, the line and column,
/// and serde's description (which names the field and value).
pub(crate) fn parse<T: DeserializeOwned>(text: &str, source: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|error| {
        Error::invalid(
            format!("{source}:{}:{}", error.line(), error.column()),
            error.to_string(),
        )
    })
}

/// Prefixes a validation error with the source it came from.
pub(crate) fn within(source: &str, error: Error) -> Error {
    match error {
        Error::InvalidInput { context, message } => Error::InvalidInput {
            context: format!("{source}: {context}"),
            message,
        },
        other => other,
    }
}
