//! Reading JSON with errors that name the source, line, column and field.

use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// Parses `text`; on failure the error names `source`, the line and column,
/// the field's path (`budgets.hbm_bytes`, `tensors[3].fate`) where the
/// value is at fault, and serde's description of the value.
pub(crate) fn parse<T: DeserializeOwned>(text: &str, source: &str) -> Result<T> {
    let at = |error: &serde_json::Error| format!("{source}:{}:{}", error.line(), error.column());
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        // "." is the whole document: a syntax error, or a missing field
        // serde names itself.
        let context = if path == "." {
            at(&inner)
        } else {
            format!("{}: field {path}", at(&inner))
        };
        Error::invalid(context, inner.to_string())
    })?;
    // Nothing but white space after the value.
    deserializer
        .end()
        .map_err(|error| Error::invalid(at(&error), error.to_string()))?;
    Ok(value)
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
