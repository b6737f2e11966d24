//! io_uring backend: one ring owned by the I/O thread; reads and writes
//! at explicit offsets, no registered buffers (registering more than a
//! few MiB needs a raised RLIMIT_MEMLOCK, and O_DIRECT gains little from it).

use io_uring::{opcode, types, IoUring, Probe};

use super::engine::{OpKind, Submission};

pub(crate) struct UringBackend {
    ring: IoUring,
    /// Pushed and not yet completed.
    in_flight: usize,
}

impl UringBackend {
    /// A ring with room for `queue_depth` requests (the completion queue
    /// is twice that, so it never overflows).
    /// Fails as setting up the ring fails (EPERM under a seccomp filter,
    /// ENOSYS on old kernels), or with ENOTSUP when the kernel lacks the
    /// read and write opcodes (before 5.6).
    pub fn new(queue_depth: u32) -> std::io::Result<UringBackend> {
        let ring = IoUring::new(queue_depth.next_power_of_two())?;
        let mut probe = Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::Read::CODE) || !probe.is_supported(opcode::Write::CODE) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this kernel's io_uring has no read/write opcodes",
            ));
        }
        Ok(UringBackend { ring, in_flight: 0 })
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub fn push(&mut self, submission: Submission) -> std::io::Result<()> {
        let fd = types::Fd(submission.fd);
        let entry = match submission.kind {
            OpKind::Read => opcode::Read::new(fd, submission.ptr, submission.len)
                .offset(submission.file_offset)
                .build(),
            OpKind::Write => opcode::Write::new(fd, submission.ptr, submission.len)
                .offset(submission.file_offset)
                .build(),
        }
        .user_data(submission.id);
        // The scheduler keeps at most queue_depth requests in flight, so
        // the queue has room after at most one submit.
        for _ in 0..2 {
            // SAFETY: the buffer behind `ptr` stays alive and unmoved until
            // this request's completion is reaped (see `Submission`).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.in_flight += 1;
                return Ok(());
            }
            self.submit()?;
        }
        Err(std::io::Error::other(
            "the io_uring submission queue stayed full",
        ))
    }

    fn submit(&mut self) -> std::io::Result<()> {
        match self.ring.submit() {
            Ok(_) => Ok(()),
            Err(e) if is_transient(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Submits everything pushed, waits for one completion, and collects
    /// every completion available.
    pub fn wait(&mut self, completions: &mut Vec<(u64, i32)>) -> std::io::Result<()> {
        match self.ring.submit_and_wait(1) {
            Ok(_) => {}
            // Interrupted, or the completion queue is busy: reap what is
            // there; the engine's loop calls again.
            Err(e) if is_transient(&e) => {}
            Err(e) => return Err(e),
        }
        for entry in self.ring.completion() {
            self.in_flight -= 1;
            completions.push((entry.user_data(), entry.result()));
        }
        Ok(())
    }
}

fn is_transient(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}
