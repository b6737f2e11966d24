//! pread/pwrite backend, for kernels or sandboxes without io_uring: each
//! request runs to completion when pushed, one at a time.

use super::engine::{OpKind, Submission};

#[derive(Default)]
pub(crate) struct SyncBackend {
    done: Vec<(u64, i32)>,
}

impl SyncBackend {
    pub fn in_flight(&self) -> usize {
        self.done.len()
    }

    pub fn push(&mut self, submission: Submission) {
        let len = submission.len as usize;
        let offset = submission.file_offset as libc::off_t;
        // SAFETY: `ptr` is valid for `len` bytes for the duration of the
        // call (see `Submission`).
        let result = unsafe {
            match submission.kind {
                OpKind::Read => libc::pread(submission.fd, submission.ptr.cast(), len, offset),
                OpKind::Write => libc::pwrite(submission.fd, submission.ptr.cast(), len, offset),
            }
        };
        let result = if result < 0 {
            -std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        } else {
            // At most `len`, which fits in u32 and was cut to at most 64 MiB.
            result as i32
        };
        self.done.push((submission.id, result));
    }

    pub fn drain(&mut self, completions: &mut Vec<(u64, i32)>) {
        completions.append(&mut self.done);
    }
}
