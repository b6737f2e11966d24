//! The runtime's error type.

use std::path::PathBuf;

/// The runtime's errors outside a plan's execution ([`crate::exec::ExecError`]
/// there): reading graphs and files, preparing a run, the spill store, and
/// the planner's, wrapped. More variants may come: a `match` on it needs a
/// wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file whose content cannot be used, or a request that does not fit
    /// it: names the file, the field and the value.
    #[error("{}: {field}: {message}", path.display())]
    InvalidInput {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error(transparent)]
    Planner(#[from] fateplan_planner::Error),
    /// A plan's execution failed ([`crate::train::train`]'s error), so
    /// that one `Result` of this type runs a whole pipeline: load,
    /// prepare, plan, train. Whole, to match.
    #[error(transparent)]
    Exec(#[from] crate::exec::ExecError),
    /// A tier's byte budget would be exceeded (checked before any I/O).
    #[error(
        "tier {tier}: {what} needs {} but {} of the budget of {} are in use",
        fateplan_planner::units::bytes_exact(*.needed_bytes),
        fateplan_planner::units::bytes_exact(*.used_bytes),
        fateplan_planner::units::bytes_exact(*.budget_bytes)
    )]
    ResourcesExhausted {
        tier: &'static str,
        what: String,
        needed_bytes: u64,
        used_bytes: u64,
        budget_bytes: u64,
    },
    /// Setting up or tearing down the spill store failed.
    #[error("{}: {what}: {source}", path.display())]
    SpillIo {
        path: PathBuf,
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Reading, writing or reserving a spilled block failed: names the
    /// spill file, the key, the request that failed and the OS error.
    #[error(
        "{}: {op} key {key} ({block_bytes} bytes): {bytes} bytes at offset {offset}: {source}",
        path.display()
    )]
    SpillBlockIo {
        path: PathBuf,
        op: &'static str,
        key: u64,
        block_bytes: u64,
        offset: u64,
        bytes: u64,
        #[source]
        source: std::io::Error,
    },
    /// A spilled block read back differs from what was written.
    #[error(
        "{}: key {key}: checksum mismatch in the {bytes} bytes at offset {offset}: \
         expected crc32c {expected:#010x}, read {actual:#010x}; the spill file was \
         modified or the device corrupted it",
        path.display()
    )]
    SpillChecksum {
        path: PathBuf,
        key: u64,
        offset: u64,
        bytes: u64,
        expected: u32,
        actual: u32,
    },
    /// A run made on the way (the profile's measurements train) that
    /// failed for a reason of its own, such as the memory it needs:
    /// `what` it was, and the executor's error, `failure` (out of memory,
    /// said with advice for a measurement rather than for a training
    /// run's plan; not this error's `source`, whose words would follow
    /// with the training run's).
    #[error("{what}: {}", run_failure(failure))]
    Run {
        what: String,
        failure: Box<crate::exec::ExecError>,
    },
    /// Refused before it was read, drawn or partitioned: what `path`'s
    /// `field` makes takes more memory than the process can take, said
    /// as [`Error::InvalidInput`] says its refusals, with the figures.
    #[error("{}: {field}: {refusal}", path.display())]
    TooLarge {
        path: PathBuf,
        field: String,
        refusal: crate::memory::OverMemory,
    },
    /// The allocator had not the memory for `what` (`bytes` of it): a
    /// graph read or drawn larger than what the process has left, beyond
    /// the check made before (its arrays alone are counted there).
    #[error(
        "out of memory: {} for {what} could not be allocated: more than this process has \
         left; free memory, or raise its limit, or take a smaller graph",
        fateplan_planner::units::format_bytes(*.bytes)
    )]
    OutOfMemory { bytes: u64, what: String },
    #[error("internal error (a bug in fateplan): {0}")]
    Internal(String),
}

/// An empty buffer with room for `len` values, or [`Error::OutOfMemory`]
/// of `what` it is for where the allocator has not the memory: a graph
/// too large for what is left is an error, not the process's end.
pub(crate) fn room<T>(len: usize, what: impl FnOnce() -> String) -> Result<Vec<T>> {
    crate::exec::data::room_for(len).map_err(|_| Error::OutOfMemory {
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        what: what(),
    })
}

/// `len` zeros, or [`Error::OutOfMemory`] as [`room`].
pub(crate) fn zeroed<T: bytemuck::Zeroable>(
    len: usize,
    what: impl FnOnce() -> String,
) -> Result<Vec<T>> {
    crate::exec::data::zeros(len).map_err(|_| Error::OutOfMemory {
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        what: what(),
    })
}

/// What a run made on the way says of `error`: out of memory, what
/// frees memory for a measurement (its plan is the profile's own, not a
/// user's to budget); any other error as it is.
fn run_failure(error: &crate::exec::ExecError) -> String {
    match error {
        crate::exec::ExecError::OutOfMemory { bytes, during } => format!(
            "{}: the measurement takes more than this process has left; measure less \
             (`fateplan profile --quick`, or a smaller --graph), or free memory, or raise its \
             limit",
            crate::exec::unallocated(*bytes, during.as_deref())
        ),
        other => other.to_string(),
    }
}

impl Error {
    /// The error of `what` (a run made on the way) that failed with
    /// `error`: [`Error::Internal`] where the executor's is, else
    /// [`Error::Run`], so that a run out of memory is not called a bug.
    pub(crate) fn of_run(what: &str, error: crate::exec::ExecError) -> Self {
        match error {
            crate::exec::ExecError::Internal(why) => Error::Internal(format!("{what}: {why}")),
            failure => Error::Run {
                what: what.into(),
                failure: Box::new(failure),
            },
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ExecError;

    /// A buffer for a graph the allocator cannot give is an error naming
    /// what it was for, with its bytes.
    #[test]
    fn a_graph_s_buffer_out_of_memory_is_an_error() {
        let too_many = usize::MAX / 8;
        let error = room::<u64>(too_many, || "the sources of g's edges".into()).unwrap_err();
        assert!(
            matches!(&error, Error::OutOfMemory { bytes, what }
                if *bytes == too_many as u64 * 8 && what == "the sources of g's edges"),
            "{error:?}"
        );
        assert!(
            error.to_string().starts_with("out of memory: ")
                && error
                    .to_string()
                    .contains("for the sources of g's edges could not be"),
            "{error}"
        );
        let error = zeroed::<f32>(too_many, || "the features of g".into()).unwrap_err();
        assert!(matches!(error, Error::OutOfMemory { .. }), "{error:?}");
        assert_eq!(room::<u64>(3, String::new).unwrap().capacity(), 3);
        assert_eq!(zeroed::<f32>(3, String::new).unwrap(), [0.0; 3]);
    }

    /// A run made on the way that ran out of memory says so under what
    /// it was; only the executor's own bugs are called one.
    #[test]
    fn a_run_on_the_way_keeps_its_error() {
        let out = Error::of_run("the measurement", ExecError::out_of_memory(1 << 20));
        assert!(matches!(out, Error::Run { .. }), "{out:?}");
        assert!(
            out.to_string()
                .starts_with("the measurement: out of memory: 1.00 MiB for a tensor"),
            "{out}"
        );
        // Its advice is a measurement's, not a training plan's, and no
        // cause follows it with the training run's.
        assert!(out.to_string().contains("profile --quick"), "{out}");
        assert!(!out.to_string().contains("--hbm-budget"), "{out}");
        assert!(std::error::Error::source(&out).is_none());
        let bug = Error::of_run("the measurement", ExecError::Internal("x".into()));
        assert_eq!(
            bug.to_string(),
            "internal error (a bug in fateplan): the measurement: x"
        );
    }
}
