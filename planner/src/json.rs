//! Reading JSON with errors that name the source, line, column and field.

use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// Parses `text`; on failure the error names `source`, the line and column,
/// the field's path (`budgets.hbm_bytes`, `tensors[3].fate`) where the
/// value is at fault, and serde's description of the value.
pub(crate) fn parse<T: DeserializeOwned>(text: &str, source: &str) -> Result<T> {
    let at = |error: &serde_json::Error| format!("{source}:{}:{}", error.line(), error.column());
    // serde's message without the line and column it ends with: `at` says them.
    let said = |error: &serde_json::Error| {
        let message = error.to_string();
        let place = format!(" at line {} column {}", error.line(), error.column());
        message
            .strip_suffix(&place)
            .map_or(message.clone(), str::to_string)
    };
    // A byte-order mark (editors on Windows write one) is not JSON's; the
    // text after it is read.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = known_path(&error.path().to_string()).to_string();
        let inner = error.into_inner();
        let context = if path.is_empty() {
            at(&inner)
        } else {
            format!("{}: field {path}", at(&inner))
        };
        let mut message = said(&inner);
        // serde_json reads a whole number past u64 as a float: said so.
        let most = match () {
            _ if message.ends_with("expected u64") => Some("2^64 - 1"),
            _ if message.ends_with("expected u32") => Some("2^32 - 1"),
            _ => None,
        };
        if let Some(most) = most.filter(|_| message.starts_with("invalid type: floating point")) {
            message.push_str(&format!(
                " (the field takes a whole number written in digits, at most {most}; a \
                 fraction, an exponent such as 1e9, or a number past 2^64 - 1 is read as a \
                 floating point one)"
            ));
        }
        match other_kind::<T>(text) {
            Some(note) => Error::invalid(context, format!("{message}; {note}")),
            None => Error::invalid(context, message),
        }
    })?;
    // Nothing but white space after the value.
    deserializer
        .end()
        .map_err(|error| Error::invalid(at(&error), said(&error)))?;
    Ok(value)
}

/// Where `text` is a fateplan file of another kind than `T` (a profile
/// given as a plan, say), told by its top-level fields: a note saying
/// which, and how that kind is given.
fn other_kind<T>(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    // The type read, as the files call it (a node-link DAG is a workload).
    let wanted = match std::any::type_name::<T>().rsplit("::").next()? {
        "NodeLink" => "workload".to_string(),
        name => name.to_ascii_lowercase(),
    };
    let Some(fields) = value.as_object() else {
        let held = match value {
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::Bool(_) => "a boolean",
            _ => "null",
        };
        return Some(format!(
            "a {wanted} is a JSON object ({{...}}), and the file holds {held}"
        ));
    };
    let kinds: [(&str, [&str; 3], &str); 2] = [
        (
            "plan",
            ["policy", "workload", "schedule"],
            "`fateplan simulate PLAN` or `train --plan PLAN`",
        ),
        ("profile", ["device", "host", "pcie"], "--profile"),
    ];
    let (kind, keys, given) = kinds
        .into_iter()
        .find(|(_, keys, _)| keys.iter().all(|k| fields.contains_key(*k)))?;
    (wanted != kind).then(|| {
        format!(
            "the file is a {kind} (it has the fields {}), not a {wanted}: a {kind} is given by \
             {given}",
            keys.join(", ")
        )
    })
}

/// The part of a field path that names fields: without the segments
/// `serde_path_to_error` writes `?` for (a key the text ended before) and
/// without its `.` for the whole document, which a syntax error or a
/// missing field (serde names it) has.
fn known_path(path: &str) -> &str {
    let mut path = path;
    while let Some(rest) = path.strip_suffix(".?") {
        path = rest;
    }
    if path == "." || path == "?" {
        ""
    } else {
        path
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Outer {
        inner: Vec<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Inner {
        bytes: u64,
    }

    fn error(text: &str) -> String {
        parse::<Outer>(text, "f.json").unwrap_err().to_string()
    }

    #[test]
    fn an_error_names_the_field_s_path_where_one_is_known() {
        let wrong = error(r#"{"inner": [{"bytes": 1}, {"bytes": "lots"}]}"#);
        assert!(
            wrong.contains("f.json:1:41: field inner[1].bytes: invalid type"),
            "{wrong}"
        );
        // Cut short inside an object: the path stops at what was read.
        let cut = error(r#"{"inner": [{"bytes": 1}, {"#);
        assert!(cut.contains("f.json:1:26: field inner[1]: EOF"), "{cut}");
        // A syntax error before any field: no path.
        let syntax = error("{,}");
        assert!(
            syntax.contains("f.json:1:2: key must be a string"),
            "{syntax}"
        );
        let trailing = error(r#"{"inner": []} x"#);
        assert!(
            trailing.contains("f.json:1:15: trailing characters"),
            "{trailing}"
        );
        // The place is said once, before the message.
        assert!(!wrong.contains(" at line "), "{wrong}");
        // A whole number past u64, which serde_json reads as a float.
        let large = error(r#"{"inner": [{"bytes": 100000000000000000000}]}"#);
        assert!(
            large.contains(
                "expected u64 (the field takes a whole number written in digits, at most 2^64 - 1"
            ),
            "{large}"
        );
        // As is an exponent, however small its value.
        let exponent = error(r#"{"inner": [{"bytes": 1e3}]}"#);
        assert!(
            exponent
                .contains("floating point `1000.0`, expected u64 (the field takes a whole number"),
            "{exponent}"
        );
    }

    #[test]
    fn a_file_of_another_kind_is_named() {
        let profile = include_str!("../../profiles/cpu-small.json");
        let message = parse::<crate::plan::Plan>(profile, "p.json")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("p.json:")
                && message.contains("the file is a profile (it has the fields device, host, pcie), not a plan: a profile is given by --profile"),
            "{message}"
        );
        // A file of the kind asked for, or of no kind known, has no note.
        let message = parse::<Outer>(r#"{"inner": [{"bytes": -1}]}"#, "o.json")
            .unwrap_err()
            .to_string();
        assert!(!message.contains("the file is a"), "{message}");
        // A file that is not an object at all says what it holds.
        let message = parse::<crate::plan::Plan>("[]", "a.json")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("a.json:1:2")
                && message.contains("a plan is a JSON object ({...}), and the file holds an array"),
            "{message}"
        );
        let broken = profile.replacen("\"pcie\"", "\"pcie_link\"", 1);
        let message = parse::<crate::Profile>(&broken, "p.json")
            .unwrap_err()
            .to_string();
        assert!(!message.contains("the file is a"), "{message}");
        // A profile with a bad value, read as a profile: its own error.
        let bad = profile.replacen("\"format_version\": 1", "\"format_version\": \"one\"", 1);
        assert_ne!(bad, profile);
        let message = parse::<crate::Profile>(&bad, "p.json")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("format_version") && !message.contains("the file is a"),
            "{message}"
        );
    }

    #[test]
    fn a_byte_order_mark_before_the_text_is_passed_over() {
        let read = parse::<Outer>("\u{feff}{\"inner\": [{\"bytes\": 7}]}", "f.json").unwrap();
        assert_eq!(read.inner[0].bytes, 7);
    }
}
