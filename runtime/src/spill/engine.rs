//! The I/O thread: takes block requests over a bounded channel, cuts them
//! into aligned requests of at most `request_bytes`, keeps up to
//! `queue_depth` of them in flight on its backend, resubmits the rest of
//! short transfers and retries EINTR/EAGAIN (bounded), and reports each
//! block's outcome through its [`OpState`].
//!
//! Injected faults ([`Faults`]) act here, between the scheduler and the
//! backend, so both backends see them exactly as the kernel would report
//! them.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::aligned::{AlignedBuf, ALIGN_BYTES};
use super::fallback::SyncBackend;
use super::uring::UringBackend;
use super::Faults;

/// Retries of one request that made no progress (EINTR, EAGAIN, a
/// zero-byte write) before its block fails.
pub const MAX_RETRIES: u32 = 8;
/// Block requests waiting in the channel before `write`/`read` block.
pub(crate) const CHANNEL_CAPACITY: usize = 256;
/// Requests taken from the channel per pass of the loop.
const INTAKE_PER_PASS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// Whether a request reads or writes.
pub enum OpKind {
    Read,
    Write,
}

/// Part of a block: `len` bytes at `file_offset`, from `buf_offset` in the
/// block's buffer. All three aligned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    pub file_offset: u64,
    pub buf_offset: u64,
    pub len: u64,
}

/// Why a block's I/O failed, and where.
#[derive(Clone, Debug)]
pub(crate) struct IoFailure {
    pub cause: Cause,
    /// File offset of the request that failed.
    pub file_offset: u64,
    /// Bytes of that request not yet transferred.
    pub bytes: u64,
}

#[derive(Clone, Debug)]
pub(crate) enum Cause {
    Os(i32),
    /// A read returned 0 bytes: the file is shorter than the block.
    Eof,
    /// Retried `MAX_RETRIES` times without progress; the last errno if any.
    NoProgress(Option<i32>),
    /// The I/O thread stopped before the block finished.
    Stopped(String),
}

impl IoFailure {
    pub fn to_io_error(&self) -> std::io::Error {
        use std::io::{Error, ErrorKind};
        match &self.cause {
            Cause::Os(errno) => Error::from_raw_os_error(*errno),
            Cause::Eof => Error::new(
                ErrorKind::UnexpectedEof,
                "the spill file ended inside the block",
            ),
            Cause::NoProgress(last) => Error::new(
                ErrorKind::WriteZero,
                format!(
                    "no progress after {MAX_RETRIES} retries{}",
                    match last {
                        Some(errno) => format!(" ({})", Error::from_raw_os_error(*errno)),
                        None => String::new(),
                    }
                ),
            ),
            Cause::Stopped(why) => Error::other(format!("the spill I/O thread stopped: {why}")),
        }
    }
}

/// Outcome slot of one block request, shared by the ticket, the index and
/// the I/O thread.
#[derive(Default)]
pub(crate) struct OpState {
    slot: Mutex<Slot>,
    done: Condvar,
}

#[derive(Default)]
struct Slot {
    finished: bool,
    buf: Option<AlignedBuf>,
    failure: Option<IoFailure>,
}

impl OpState {
    pub fn finish(&self, buf: Option<AlignedBuf>, failure: Option<IoFailure>) {
        let mut slot = lock(&self.slot);
        if slot.finished {
            return;
        }
        slot.finished = true;
        slot.buf = buf;
        slot.failure = failure;
        drop(slot);
        self.done.notify_all();
    }

    pub fn is_finished(&self) -> bool {
        lock(&self.slot).finished
    }

    pub fn failure(&self) -> Option<IoFailure> {
        lock(&self.slot).failure.clone()
    }

    /// Blocks until the I/O thread has finished the request (it always
    /// does: a request dropped anywhere, in the channel too, is finished as
    /// failed).
    pub fn wait_finished(&self) {
        let mut slot = lock(&self.slot);
        while !slot.finished {
            slot = self
                .done
                .wait(slot)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Waits, then takes the buffer (once) and the failure.
    pub fn take(&self) -> (Option<AlignedBuf>, Option<IoFailure>) {
        self.wait_finished();
        let mut slot = lock(&self.slot);
        (slot.buf.take(), slot.failure.clone())
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing in the spill store panics while holding a lock; if something
    // did, the data it guards is still consistent at every await point.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One block to read or write. `buf` is taken by the scheduler that
/// serves it; a request dropped with its buffer (left in the channel when
/// the I/O thread stopped, or handed back by a failed send) finishes its
/// state as failed, so that no waiter hangs.
pub(crate) struct Request {
    pub kind: OpKind,
    pub buf: Option<AlignedBuf>,
    pub segments: Vec<Segment>,
    pub logical_bytes: u64,
    pub state: Arc<OpState>,
    /// The engine's [`Engine::stop_reason`], for the failure.
    pub stop: StopReason,
}

impl Drop for Request {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            let why = self
                .stop
                .get()
                .unwrap_or_else(|| "it ended before taking the request".into());
            self.state.finish(Some(buf), Some(stopped(&why)));
        }
    }
}

/// Why the I/O thread stopped before it was asked to, once it has: its
/// backend failed, or a bug.
#[derive(Clone, Default)]
pub(crate) struct StopReason(Arc<Mutex<Option<String>>>);

impl StopReason {
    pub fn get(&self) -> Option<String> {
        lock(&self.0).clone()
    }

    fn say(&self, why: &str) {
        lock(&self.0).get_or_insert_with(|| why.to_string());
    }
}

/// Counters the store reports.
#[derive(Default)]
pub(crate) struct Stats {
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
}

pub(crate) struct EngineConfig {
    pub fd: RawFd,
    pub queue_depth: u32,
    pub request_bytes: u64,
    pub faults: Faults,
}

/// One aligned request for a backend. `ptr` stays valid until the
/// backend reports the request's completion: the op owning the buffer is
/// neither dropped nor moved out while a request of it is in flight.
pub(crate) struct Submission {
    pub id: u64,
    pub kind: OpKind,
    pub fd: RawFd,
    pub ptr: *mut u8,
    pub len: u32,
    pub file_offset: u64,
}

/// The backends, behind one closed enum.
pub(crate) enum Backend {
    Uring(Box<UringBackend>),
    Sync(SyncBackend),
}

impl Backend {
    fn push(&mut self, submission: Submission) -> std::io::Result<()> {
        match self {
            Backend::Uring(backend) => backend.push(submission),
            Backend::Sync(backend) => {
                backend.push(submission);
                Ok(())
            }
        }
    }

    /// Submits what was pushed and waits for at least one completion,
    /// appending `(id, result)` pairs (result as the kernel reports it:
    /// bytes transferred, or a negated errno).
    fn wait(&mut self, completions: &mut Vec<(u64, i32)>) -> std::io::Result<()> {
        match self {
            Backend::Uring(backend) => backend.wait(completions),
            Backend::Sync(backend) => {
                backend.drain(completions);
                Ok(())
            }
        }
    }

    fn in_flight(&self) -> usize {
        match self {
            Backend::Uring(backend) => backend.in_flight(),
            Backend::Sync(backend) => backend.in_flight(),
        }
    }
}

/// Handle to the I/O thread. Dropping it lets the thread finish every
/// request already sent, then joins it.
pub(crate) struct Engine {
    sender: Option<SyncSender<Request>>,
    thread: Option<JoinHandle<()>>,
    stopped: StopReason,
}

impl Engine {
    pub fn start(
        backend: Backend,
        config: EngineConfig,
        stats: Arc<Stats>,
    ) -> std::io::Result<Engine> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(CHANNEL_CAPACITY);
        let stopped = StopReason::default();
        let note = StopNote(stopped.clone());
        let thread = std::thread::Builder::new()
            .name("fateplan-spill-io".into())
            .spawn(move || run(backend, config, stats, receiver, note))?;
        Ok(Engine {
            sender: Some(sender),
            thread: Some(thread),
            stopped,
        })
    }

    /// Why the I/O thread stopped, where it stopped on its own (its
    /// backend failed, or a bug): what a request failed by it says.
    pub fn stop_reason(&self) -> StopReason {
        self.stopped.clone()
    }

    /// Hands a request to the thread (blocking while the channel is full);
    /// gives it back if the thread has stopped.
    pub fn send(&self, request: Request) -> Result<(), Request> {
        match &self.sender {
            Some(sender) => sender.send(request).map_err(|e| e.0),
            None => Err(request),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            // The thread catches nothing: a panic there is a bug already
            // reported on stderr, and every request it held is finished as
            // failed by the ops' drop.
            let _ = thread.join();
        }
    }
}

/// The I/O thread's [`StopReason`]: what `run` says, or, where the
/// thread unwinds from a panic (its last parameter, so dropped before the
/// channel's requests), that it did.
struct StopNote(StopReason);

impl Drop for StopNote {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.say("the I/O thread panicked (a bug in fateplan)");
        }
    }
}

fn run(
    mut backend: Backend,
    config: EngineConfig,
    stats: Arc<Stats>,
    receiver: Receiver<Request>,
    note: StopNote,
) {
    let mut sched = Scheduler::new(config, stats);
    // Dropped before `sched` where the thread unwinds from a panic, so
    // that the ops it holds fail with the panic's reason.
    let _panicking = StopNote(note.0.clone());
    if let Err(error) = serve(&mut backend, &mut sched, &receiver) {
        // The backend failed as a whole: requests in flight may still be
        // in the kernel's hands, so their buffers are leaked, not freed.
        let why = format!("the I/O backend failed: {error}");
        note.0.say(&why);
        sched.abandon(&why, backend.in_flight() > 0);
        // Bounded by the channel's capacity; a request a sender puts in
        // after the last of these is finished as failed when the channel
        // drops it (`Request`'s drop), and later sends fail.
        while let Ok(mut request) = receiver.try_recv() {
            request
                .state
                .finish(request.buf.take(), Some(stopped(&why)));
        }
    }
}

pub(crate) fn stopped(why: &str) -> IoFailure {
    IoFailure {
        cause: Cause::Stopped(why.to_string()),
        file_offset: 0,
        bytes: 0,
    }
}

fn serve(
    backend: &mut Backend,
    sched: &mut Scheduler,
    receiver: &Receiver<Request>,
) -> std::io::Result<()> {
    let mut disconnected = false;
    let mut completions = Vec::new();
    loop {
        if sched.is_idle() {
            if disconnected {
                return Ok(());
            }
            match receiver.recv() {
                Ok(request) => sched.add(request),
                Err(_) => return Ok(()),
            }
        }
        for _ in 0..INTAKE_PER_PASS {
            match receiver.try_recv() {
                Ok(request) => sched.add(request),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    disconnected = true;
                    break;
                }
            }
        }
        if let Some(after) = sched.config.faults.backend_fails_after {
            if sched.submissions >= after && !sched.is_idle() {
                return Err(std::io::Error::other("injected: the ring failed"));
            }
        }
        if let Some(after) = sched.config.faults.io_thread_panics_after {
            if sched.submissions >= after && !sched.is_idle() {
                panic!("injected: the spill I/O thread panics");
            }
        }
        while let Some(submission) = sched.next_submission() {
            backend.push(submission)?;
        }
        if sched.complete_immediate() {
            continue;
        }
        if backend.in_flight() > 0 {
            completions.clear();
            backend.wait(&mut completions)?;
            for &(id, result) in &completions {
                sched.complete(id as usize, result);
            }
        }
    }
}

/// A block being transferred.
struct Op {
    kind: OpKind,
    buf: Option<AlignedBuf>,
    segments: Vec<Segment>,
    logical_bytes: u64,
    state: Arc<OpState>,
    /// Next segment to cut requests from, and the bytes of it already cut.
    next_segment: usize,
    next_offset: u64,
    /// Requests of this op holding a slot.
    in_flight: u32,
    failure: Option<IoFailure>,
    /// Set when the backend may still own requests of this op: its buffer
    /// must then never be freed.
    leak_buffer: bool,
    /// The engine's stop reason: what an op dropped unfinished says.
    stop: StopReason,
}

impl Op {
    fn all_cut(&self) -> bool {
        self.next_segment >= self.segments.len()
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        // A request still in flight may be in the kernel's hands (the
        // thread unwinding from a panic): its buffer is never freed.
        if self.leak_buffer || self.in_flight > 0 {
            std::mem::forget(self.buf.take());
        }
        // Finishing twice is a no-op: this only fires for ops dropped
        // unfinished (a failed backend or a bug), so no waiter hangs.
        self.state.finish(
            self.buf.take(),
            Some(self.failure.clone().unwrap_or_else(|| {
                stopped(
                    &self
                        .stop
                        .get()
                        .unwrap_or_else(|| "the request was dropped before it finished".into()),
                )
            })),
        );
    }
}

/// One aligned request, from submission until fully transferred.
struct Chunk {
    op: usize,
    file_offset: u64,
    buf_offset: u64,
    len: u64,
    retries: u32,
    last_errno: Option<i32>,
}

struct Scheduler {
    config: EngineConfig,
    stats: Arc<Stats>,
    ops: Vec<Option<Op>>,
    free_ops: Vec<usize>,
    /// Ops with requests left to cut, oldest first.
    to_cut: VecDeque<usize>,
    /// At most `queue_depth` slots.
    chunks: Vec<Option<Chunk>>,
    free_chunks: Vec<usize>,
    /// Chunks to submit again (short transfer or transient error).
    to_resubmit: VecDeque<usize>,
    /// Completions made up by an injected fault, never seen by the backend.
    immediate: VecDeque<(usize, i32)>,
    submissions: u64,
    write_bytes_accepted: u64,
}

impl Scheduler {
    fn new(config: EngineConfig, stats: Arc<Stats>) -> Scheduler {
        Scheduler {
            config,
            stats,
            ops: Vec::new(),
            free_ops: Vec::new(),
            to_cut: VecDeque::new(),
            chunks: Vec::new(),
            free_chunks: Vec::new(),
            to_resubmit: VecDeque::new(),
            immediate: VecDeque::new(),
            submissions: 0,
            write_bytes_accepted: 0,
        }
    }

    fn is_idle(&self) -> bool {
        self.free_ops.len() == self.ops.len()
    }

    fn chunks_in_use(&self) -> usize {
        self.chunks.len() - self.free_chunks.len()
    }

    fn add(&mut self, mut request: Request) {
        let op = Op {
            kind: request.kind,
            buf: request.buf.take(),
            segments: std::mem::take(&mut request.segments),
            logical_bytes: request.logical_bytes,
            state: request.state.clone(),
            next_segment: 0,
            next_offset: 0,
            in_flight: 0,
            failure: None,
            leak_buffer: false,
            stop: request.stop.clone(),
        };
        let id = match self.free_ops.pop() {
            Some(id) => {
                self.ops[id] = Some(op);
                id
            }
            None => {
                self.ops.push(Some(op));
                self.ops.len() - 1
            }
        };
        self.to_cut.push_back(id);
        self.maybe_finish(id);
    }

    /// The next request for the backend, if a slot is free and there is
    /// work; requests an injected fault answers go to `immediate`.
    fn next_submission(&mut self) -> Option<Submission> {
        // Bounded: each pass either returns, or consumes a resubmission or
        // a cut; both are finite.
        loop {
            let id = if let Some(id) = self.to_resubmit.pop_front() {
                id
            } else {
                if self.chunks_in_use() >= self.config.queue_depth as usize {
                    return None;
                }
                self.cut()?
            };
            let chunk = self.chunks[id].as_ref().expect("resubmitted chunk exists");
            let op = self.ops[chunk.op].as_mut().expect("chunk's op exists");
            if op.failure.is_some() {
                // Another request of this block failed: stop here.
                self.release_chunk(id);
                continue;
            }
            let mut len = chunk.len;
            let kind = op.kind;
            // SAFETY: buf_offset + len <= capacity (segments cover the
            // buffer's aligned capacity exactly).
            let ptr = unsafe {
                op.buf
                    .as_mut()
                    .expect("an op in flight has its buffer")
                    .as_mut_ptr()
                    .add(chunk.buf_offset as usize)
            };
            self.submissions += 1;
            let faults = &self.config.faults;
            if let Some(every) = faults.transient_error_every {
                if every > 0 && self.submissions.is_multiple_of(u64::from(every)) {
                    let errno = if (self.submissions / u64::from(every)).is_multiple_of(2) {
                        libc::EAGAIN
                    } else {
                        libc::EINTR
                    };
                    self.immediate.push_back((id, -errno));
                    continue;
                }
            }
            if faults.short_transfers && len > ALIGN_BYTES as u64 {
                len = (len / 2).max(ALIGN_BYTES as u64) / ALIGN_BYTES as u64 * ALIGN_BYTES as u64;
            }
            if kind == OpKind::Write {
                if let Some(limit) = faults.enospc_after_bytes {
                    let room = limit.saturating_sub(self.write_bytes_accepted) / ALIGN_BYTES as u64
                        * ALIGN_BYTES as u64;
                    if room == 0 {
                        self.immediate.push_back((id, -libc::ENOSPC));
                        continue;
                    }
                    len = len.min(room);
                }
                self.write_bytes_accepted += len;
            }
            return Some(Submission {
                id: id as u64,
                kind,
                fd: self.config.fd,
                ptr,
                len: len as u32,
                file_offset: chunk.file_offset,
            });
        }
    }

    /// Cuts the next request from the oldest op with bytes left; returns
    /// its chunk slot.
    fn cut(&mut self) -> Option<usize> {
        let op_id = *self.to_cut.front()?;
        let op = self.ops[op_id].as_mut().expect("op to cut exists");
        let segment = op.segments[op.next_segment];
        let len = (segment.len - op.next_offset).min(self.config.request_bytes);
        let chunk = Chunk {
            op: op_id,
            file_offset: segment.file_offset + op.next_offset,
            buf_offset: segment.buf_offset + op.next_offset,
            len,
            retries: 0,
            last_errno: None,
        };
        op.next_offset += len;
        if op.next_offset == segment.len {
            op.next_segment += 1;
            op.next_offset = 0;
        }
        op.in_flight += 1;
        if op.all_cut() {
            self.to_cut.pop_front();
        }
        let id = match self.free_chunks.pop() {
            Some(id) => {
                self.chunks[id] = Some(chunk);
                id
            }
            None => {
                self.chunks.push(Some(chunk));
                self.chunks.len() - 1
            }
        };
        Some(id)
    }

    /// Handles made-up completions; true if there were any.
    fn complete_immediate(&mut self) -> bool {
        let any = !self.immediate.is_empty();
        // Bounded by the queue depth: each entry holds a chunk slot.
        while let Some((id, result)) = self.immediate.pop_front() {
            self.complete(id, result);
        }
        any
    }

    fn complete(&mut self, id: usize, result: i32) {
        let Some(chunk) = self.chunks[id].as_mut() else {
            return;
        };
        let kind = self.ops[chunk.op].as_ref().map(|op| op.kind);
        if result < 0 {
            let errno = -result;
            if (errno == libc::EINTR || errno == libc::EAGAIN) && chunk.retries < MAX_RETRIES {
                chunk.retries += 1;
                chunk.last_errno = Some(errno);
                self.to_resubmit.push_back(id);
            } else {
                let cause = if errno == libc::EINTR || errno == libc::EAGAIN {
                    Cause::NoProgress(Some(errno))
                } else {
                    Cause::Os(errno)
                };
                self.fail_chunk(id, cause);
            }
            return;
        }
        let done = (result as u64).min(chunk.len);
        if done == 0 {
            if kind == Some(OpKind::Read) {
                self.fail_chunk(id, Cause::Eof);
            } else if chunk.retries < MAX_RETRIES {
                chunk.retries += 1;
                self.to_resubmit.push_back(id);
            } else {
                let last = chunk.last_errno;
                self.fail_chunk(id, Cause::NoProgress(last));
            }
            return;
        }
        chunk.file_offset += done;
        chunk.buf_offset += done;
        chunk.len -= done;
        chunk.retries = 0;
        if chunk.len > 0 {
            self.to_resubmit.push_back(id);
        } else {
            self.release_chunk(id);
        }
    }

    fn fail_chunk(&mut self, id: usize, cause: Cause) {
        let chunk = self.chunks[id].as_ref().expect("failed chunk exists");
        let failure = IoFailure {
            cause,
            file_offset: chunk.file_offset,
            bytes: chunk.len,
        };
        let op_id = chunk.op;
        if let Some(op) = self.ops[op_id].as_mut() {
            if op.failure.is_none() {
                op.failure = Some(failure);
            }
            // Cut no more requests for a failed block.
            self.to_cut.retain(|&o| o != op_id);
        }
        self.release_chunk(id);
    }

    fn release_chunk(&mut self, id: usize) {
        let chunk = self.chunks[id].take().expect("released chunk exists");
        self.free_chunks.push(id);
        if let Some(op) = self.ops[chunk.op].as_mut() {
            op.in_flight -= 1;
        }
        self.maybe_finish(chunk.op);
    }

    fn maybe_finish(&mut self, op_id: usize) {
        let Some(op) = self.ops[op_id].as_ref() else {
            return;
        };
        let finished = op.in_flight == 0 && (op.failure.is_some() || op.all_cut());
        if !finished {
            return;
        }
        let mut op = self.ops[op_id].take().expect("checked above");
        self.free_ops.push(op_id);
        self.to_cut.retain(|&o| o != op_id);
        if op.failure.is_none() {
            let counter = match op.kind {
                OpKind::Read => &self.stats.bytes_read,
                OpKind::Write => &self.stats.bytes_written,
            };
            counter.fetch_add(op.logical_bytes, Ordering::Relaxed);
        }
        op.state.finish(op.buf.take(), op.failure.take());
    }

    /// Fails every op after a backend failure.
    fn abandon(&mut self, why: &str, backend_holds_requests: bool) {
        for op in self.ops.iter_mut().flatten() {
            op.leak_buffer = backend_holds_requests && op.in_flight > 0;
            if !backend_holds_requests {
                op.in_flight = 0;
            }
            if op.failure.is_none() {
                op.failure = Some(stopped(why));
            }
        }
        // Each op's drop finishes its state as failed.
        self.ops.clear();
        self.free_ops.clear();
        self.to_cut.clear();
        self.chunks.clear();
        self.free_chunks.clear();
        self.to_resubmit.clear();
        self.immediate.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(stop: &StopReason) -> (Request, Arc<OpState>) {
        let state = Arc::new(OpState::default());
        let request = Request {
            kind: OpKind::Write,
            buf: Some(AlignedBuf::zeroed(ALIGN_BYTES).unwrap()),
            segments: Vec::new(),
            logical_bytes: 1,
            state: state.clone(),
            stop: stop.clone(),
        };
        (request, state)
    }

    /// A request the channel drops (the I/O thread gone before taking it)
    /// fails its waiter with the thread's reason instead of hanging it.
    #[test]
    fn a_request_dropped_untaken_fails_its_waiter_with_the_reason() {
        let stop = StopReason::default();
        let (untold, state) = request(&stop);
        drop(untold);
        assert!(state.is_finished(), "a waiter would hang");
        let (buf, failure) = state.take();
        assert!(buf.is_some(), "the buffer is handed back");
        let message = failure.expect("a failure").to_io_error().to_string();
        assert!(
            message.contains("ended before taking the request"),
            "{message}"
        );

        stop.say("the I/O backend failed: no ring");
        let (told, state) = request(&stop);
        drop(told);
        let message = state
            .failure()
            .expect("a failure")
            .to_io_error()
            .to_string();
        assert!(
            message.ends_with("the I/O backend failed: no ring"),
            "{message}"
        );

        // Taken by a scheduler, the request's drop leaves its state alone.
        let (mut taken, state) = request(&stop);
        let buf = taken.buf.take();
        drop(taken);
        assert!(!state.is_finished());
        state.finish(buf, None);
        assert!(state.failure().is_none());
    }
}
