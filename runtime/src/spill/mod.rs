//! The SSD spill store: blocks of bytes, keyed by `u64`, kept in one spill
//! file under a byte budget.
//!
//! - **Layout.** One file per store, `fateplan-spill-<pid>-<n>.bin` in the
//!   given directory. Blocks take aligned extents of it (first fit by
//!   offset, several extents when free space is fragmented, freed extents
//!   reused); the file grows by `fallocate` in steps of
//!   [`GROW_STEP_BYTES`] up to the budget, so it never holds more than the
//!   budget, or by what a block needs alone where its file system has no
//!   room for a step.
//! - **I/O.** A dedicated thread (`engine`) runs io_uring, or
//!   pread/pwrite when io_uring cannot be set up or
//!   [`SpillOptions::force_fallback`] asks. The file is opened with
//!   O_DIRECT; a file system that refuses it gets buffered I/O. Both facts
//!   are in [`SpillStore::mode`]. Blocks are cut into requests of
//!   [`SpillOptions::request_bytes`], up to [`SpillOptions::queue_depth`]
//!   in flight.
//! - **Integrity.** Every [`CHECKSUM_SEGMENT_BYTES`] of a block has a
//!   crc32c kept in memory; [`SpillStore::wait`] on a read checks them all
//!   and never returns bytes that differ from those written.
//! - **Budget.** `write` fails before any I/O if the block (rounded up to
//!   [`ALIGN_BYTES`]) would take [`SpillStore::used_bytes`] past the
//!   budget.
//! - **Lifetime.** Dropping the store (or [`SpillStore::close`]) lets the
//!   thread finish what it was given, stops it, and deletes the spill file
//!   (and the directory, if the store created it and it is empty).
//! - **As the SSD tier** (`tier`): the executor's tensors are stored as
//!   chunks of the plan's staging share, each a block under
//!   [`tier_key`], moved through staging buffers the store keeps
//!   ([`SpillStore::staging_buffer`], [`KEPT_BUFFERS`]).
//! - **Ownership.** The store holds an exclusive lock (`flock`) on its
//!   file while it is open; the system drops it when the process ends,
//!   however it ends, and removes the file before it lets go. A file that
//!   can be locked is one whose store is gone (what a killed process
//!   left: [`spill_file_is_held`]), or one created a moment ago whose
//!   store has not locked it yet.

mod aligned;
mod engine;
mod extents;
mod fallback;
mod tier;
mod uring;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use aligned::{AlignedBuf, ALIGN_BYTES};
pub use engine::{OpKind, MAX_RETRIES};
pub use tier::{tier_key, BUFFERS_PER_TRANSFER};

use crate::{Error, Result};
use engine::{lock, Backend, Engine, EngineConfig, IoFailure, OpState, Request, Segment, Stats};
use extents::{Extent, Extents};
use fallback::SyncBackend;
use uring::UringBackend;

/// Bytes covered by one crc32c.
pub const CHECKSUM_SEGMENT_BYTES: u64 = 1 << 20;
/// The spill file grows by at least this much at a time.
pub const GROW_STEP_BYTES: u64 = 64 << 20;
/// Largest single request handed to the kernel.
pub const MAX_REQUEST_BYTES: u64 = 64 << 20;
/// Most requests in flight.
pub const MAX_QUEUE_DEPTH: u32 = 1024;
/// Staging buffers a store keeps for reuse: the plan's four (two per
/// direction).
pub const KEPT_BUFFERS: usize = 4;

const _: () = assert!(CHECKSUM_SEGMENT_BYTES.is_multiple_of(ALIGN_BYTES as u64));
const _: () = assert!(GROW_STEP_BYTES.is_multiple_of(ALIGN_BYTES as u64));
const _: () = assert!(MAX_REQUEST_BYTES <= u32::MAX as u64);
// Shared between threads (e.g. a compute thread writing, another reading).
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<SpillStore>();
};

/// How a store is set up.
#[derive(Clone, Debug)]
pub struct SpillOptions {
    /// Most bytes the spill file may hold (blocks count rounded up to
    /// [`ALIGN_BYTES`]).
    pub budget_bytes: u64,
    /// Use pread/pwrite even where io_uring works.
    pub force_fallback: bool,
    /// Requests in flight at once (1..=[`MAX_QUEUE_DEPTH`]).
    pub queue_depth: u32,
    /// Size of each request a block is cut into: a multiple of
    /// [`ALIGN_BYTES`], at most [`MAX_REQUEST_BYTES`].
    pub request_bytes: u64,
    /// Injected faults, for tests. Default: none.
    pub faults: Faults,
}

impl SpillOptions {
    /// Defaults (io_uring, 16 requests of 4 MiB in flight) with this budget.
    pub fn with_budget(budget_bytes: u64) -> SpillOptions {
        SpillOptions {
            budget_bytes,
            force_fallback: false,
            queue_depth: 16,
            request_bytes: 4 << 20,
            faults: Faults::default(),
        }
    }
}

/// Faults to inject, as the kernel would report them. All off by default.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// io_uring setup fails (as with EPERM under a seccomp filter).
    pub fail_uring_setup: bool,
    /// The file system refuses O_DIRECT (as tmpfs used to, with EINVAL).
    pub reject_direct: bool,
    /// Writes fail with ENOSPC once this many bytes were written (the
    /// request crossing the limit is cut short first, as on a full disk).
    pub enospc_after_bytes: Option<u64>,
    /// Every request transfers only half its bytes (the rest is
    /// resubmitted).
    pub short_transfers: bool,
    /// Every n-th request fails with EINTR or EAGAIN (alternately); it is
    /// retried, at most [`MAX_RETRIES`] times in a row.
    pub transient_error_every: Option<u32>,
    /// The backend fails as a whole (as a ring whose `io_uring_enter`
    /// fails) once this many requests were submitted: the I/O thread
    /// stops, failing every request it holds or is sent.
    pub backend_fails_after: Option<u64>,
    /// The I/O thread panics (as a bug would) once this many requests
    /// were submitted: every request it holds or is sent fails, saying
    /// so.
    pub io_thread_panics_after: Option<u64>,
    /// Reserving space (`fallocate`) fails with ENOSPC where the file
    /// would pass this many bytes (a small file system).
    pub room_bytes: Option<u64>,
}

/// How the store does its I/O, for the caller to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoMode {
    /// io_uring (else pread/pwrite on the I/O thread).
    pub uring: bool,
    /// O_DIRECT (else buffered through the page cache).
    pub direct: bool,
    /// Why a faster mode is not in use, one line each.
    pub notes: Vec<String>,
}

impl std::fmt::Display for IoMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, {}",
            if self.uring {
                "io_uring"
            } else {
                "pread/pwrite"
            },
            if self.direct { "O_DIRECT" } else { "buffered" }
        )?;
        for note in &self.notes {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

/// A read or write in flight; hand it to [`SpillStore::wait`].
#[must_use = "a ticket's outcome (and any error) is only known through SpillStore::wait"]
pub struct Ticket {
    store_id: u64,
    key: u64,
    kind: OpKind,
    block: Arc<Block>,
    state: Arc<OpState>,
}

impl Ticket {
    pub fn key(&self) -> u64 {
        self.key
    }

    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// Whether [`SpillStore::wait`] would return at once.
    pub fn is_finished(&self) -> bool {
        self.state.is_finished()
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("key", &self.key)
            .field("kind", &self.kind)
            .field("len_bytes", &self.block.len_bytes)
            .finish()
    }
}

/// A finished read or write: the block's bytes (read back, or the buffer
/// that was written, to reuse).
#[derive(Debug)]
pub struct Completed {
    pub key: u64,
    pub kind: OpKind,
    pub buf: AlignedBuf,
}

/// Where a block lives and how to check it.
struct Block {
    len_bytes: u64,
    extents: Vec<Extent>,
    /// One crc32c per [`CHECKSUM_SEGMENT_BYTES`] of the block.
    checksums: Vec<u32>,
}

impl Block {
    fn aligned_bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.len).sum()
    }

    fn segments(&self) -> Vec<Segment> {
        let mut buf_offset = 0;
        self.extents
            .iter()
            .map(|extent| {
                let segment = Segment {
                    file_offset: extent.offset,
                    buf_offset,
                    len: extent.len,
                };
                buf_offset += extent.len;
                segment
            })
            .collect()
    }

    /// File offset of the block's byte `logical`.
    fn file_offset(&self, logical: u64) -> u64 {
        let mut start = 0;
        for extent in &self.extents {
            if logical < start + extent.len {
                return extent.offset + (logical - start);
            }
            start += extent.len;
        }
        self.extents.last().map_or(0, |e| e.offset + e.len)
    }
}

fn checksums(data: &[u8]) -> Vec<u32> {
    data.chunks(CHECKSUM_SEGMENT_BYTES as usize)
        .map(crc32c::crc32c)
        .collect()
}

struct Entry {
    block: Arc<Block>,
    write: Arc<OpState>,
    /// Reads that may be in flight (pruned when finished).
    reads: Vec<Arc<OpState>>,
}

struct Index {
    entries: HashMap<u64, Entry>,
    extents: Extents,
    used_bytes: u64,
    peak_bytes: u64,
    /// Bytes reserved in the spill file so far.
    file_bytes: u64,
    /// False once the file system said it has no fallocate.
    fallocate: bool,
}

static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(0);

/// Store ids a process passes over where their names are taken before it
/// gives up.
const MAX_TAKEN_NAMES: u32 = 1024;

pub use crate::cleanup::CreatedDirs;

/// A directory-backed store of byte blocks: see the module docs.
pub struct SpillStore {
    id: u64,
    /// The folders opening created (the spill folder and its missing
    /// parents): removed on close where empty.
    created_dirs: CreatedDirs,
    path: PathBuf,
    mode: IoMode,
    budget_bytes: u64,
    /// [`Faults::room_bytes`].
    room_bytes: Option<u64>,
    index: Mutex<Index>,
    stats: Arc<Stats>,
    /// Staging buffers given back, for the next transfer
    /// ([`SpillStore::staging_buffer`]).
    kept: Mutex<Vec<AlignedBuf>>,
    /// Dropped (joined) before `file` is closed.
    engine: Option<Engine>,
    file: Option<File>,
}

impl SpillStore {
    /// Creates `dir` if needed and a spill file in it, and starts the I/O
    /// thread. Errors name the directory or file that could not be used.
    pub fn open(dir: &Path, options: SpillOptions) -> Result<SpillStore> {
        if options.queue_depth == 0 || options.queue_depth > MAX_QUEUE_DEPTH {
            return Err(Error::invalid(
                dir,
                "queue_depth",
                format!("{} is outside 1..={MAX_QUEUE_DEPTH}", options.queue_depth),
            ));
        }
        if options.request_bytes == 0
            || !options.request_bytes.is_multiple_of(ALIGN_BYTES as u64)
            || options.request_bytes > MAX_REQUEST_BYTES
        {
            return Err(Error::invalid(
                dir,
                "request_bytes",
                format!(
                    "{} is not a multiple of {ALIGN_BYTES} between {ALIGN_BYTES} and \
                     {MAX_REQUEST_BYTES}",
                    options.request_bytes
                ),
            ));
        }
        let created_dirs = CreatedDirs::create(dir).map_err(|source| Error::SpillIo {
            path: dir.to_path_buf(),
            what: "cannot create the spill directory".into(),
            source,
        })?;
        // A name another process left behind (a killed one whose pid
        // this process now has) is passed over for the next.
        let mut passed = 0;
        // An interruption between the file's creation and its
        // registration would leave the file.
        let held = crate::cleanup::hold();
        let (id, path, file) = loop {
            let id = NEXT_STORE_ID.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("fateplan-spill-{}-{id}.bin", std::process::id()));
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path);
            match opened {
                Ok(file) => break (id, path, file),
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists
                        && passed < MAX_TAKEN_NAMES =>
                {
                    passed += 1
                }
                // Failed, the folders made for it go again
                // (`created_dirs` dropped).
                Err(source) => {
                    return Err(Error::SpillIo {
                        path,
                        what: "cannot create a spill file in the spill directory".into(),
                        source,
                    })
                }
            }
        };
        crate::cleanup::register(&path);
        drop(held);
        let mut notes = Vec::new();
        // Held until the file is closed, so that a cleaner can tell a
        // live store's file from a killed process's leftover (waited
        // for: a cleaner holds it only while it looks). A file system
        // without locks still spills.
        if let Err(e) = file.lock() {
            notes.push(format!(
                "the spill file could not be locked ({e}): a cleaner cannot tell it is in use"
            ));
        }
        let direct = if options.faults.reject_direct {
            notes.push("O_DIRECT refused (injected fault): buffered I/O".to_string());
            false
        } else {
            match set_direct(&file) {
                Ok(()) => true,
                Err(e) => {
                    notes.push(format!(
                        "O_DIRECT refused by the file system ({e}): buffered I/O"
                    ));
                    false
                }
            }
        };
        let backend = if options.force_fallback {
            notes.push("io_uring not used: force_fallback".to_string());
            Backend::Sync(SyncBackend::default())
        } else if options.faults.fail_uring_setup {
            notes.push("io_uring setup failed (injected fault): pread/pwrite".to_string());
            Backend::Sync(SyncBackend::default())
        } else {
            match UringBackend::new(options.queue_depth) {
                Ok(backend) => Backend::Uring(Box::new(backend)),
                Err(e) => {
                    notes.push(format!("io_uring setup failed ({e}): pread/pwrite"));
                    Backend::Sync(SyncBackend::default())
                }
            }
        };
        let mode = IoMode {
            uring: matches!(backend, Backend::Uring(_)),
            direct,
            notes,
        };
        let stats = Arc::new(Stats::default());
        let room_bytes = options.faults.room_bytes;
        let config = EngineConfig {
            fd: file.as_raw_fd(),
            queue_depth: options.queue_depth,
            request_bytes: options.request_bytes,
            faults: options.faults,
        };
        let engine = match Engine::start(backend, config, stats.clone()) {
            Ok(engine) => engine,
            Err(source) => {
                drop(file);
                let _ = std::fs::remove_file(&path);
                crate::cleanup::unregister(&path);
                return Err(Error::SpillIo {
                    path,
                    what: "cannot start the spill I/O thread".into(),
                    source,
                });
            }
        };
        let capacity_bytes = options.budget_bytes / ALIGN_BYTES as u64 * ALIGN_BYTES as u64;
        Ok(SpillStore {
            id,
            room_bytes,
            created_dirs,
            path,
            mode,
            budget_bytes: options.budget_bytes,
            index: Mutex::new(Index {
                entries: HashMap::new(),
                extents: Extents::new(capacity_bytes),
                used_bytes: 0,
                peak_bytes: 0,
                file_bytes: 0,
                fallocate: true,
            }),
            stats,
            kept: Mutex::new(Vec::new()),
            engine: Some(engine),
            file: Some(file),
        })
    }

    /// io_uring or pread/pwrite, O_DIRECT or buffered, and why.
    pub fn mode(&self) -> &IoMode {
        &self.mode
    }

    /// The spill file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn budget_bytes(&self) -> u64 {
        self.budget_bytes
    }

    /// Bytes of the spill file taken by blocks (each rounded up to
    /// [`ALIGN_BYTES`]), including blocks being written or removed.
    pub fn used_bytes(&self) -> u64 {
        lock(&self.index).used_bytes
    }

    /// Highest [`used_bytes`](Self::used_bytes) so far.
    pub fn peak_bytes(&self) -> u64 {
        lock(&self.index).peak_bytes
    }

    /// Bytes of blocks whose write finished without error.
    pub fn bytes_written(&self) -> u64 {
        self.stats.bytes_written.load(Ordering::Relaxed)
    }

    /// Bytes of blocks whose read finished without an I/O error (checksums
    /// are checked later, by [`wait`](Self::wait)).
    pub fn bytes_read(&self) -> u64 {
        self.stats.bytes_read.load(Ordering::Relaxed)
    }

    /// Whether `key` holds a block (possibly still being written).
    pub fn contains(&self, key: u64) -> bool {
        lock(&self.index).entries.contains_key(&key)
    }

    /// Starts writing a copy of `data` under `key`; returns at once.
    pub fn write(&self, key: u64, data: &[u8]) -> Result<Ticket> {
        let buf = AlignedBuf::from_slice(data).map_err(|source| Error::SpillIo {
            path: self.path.clone(),
            what: format!("allocating a buffer for key {key}"),
            source,
        })?;
        self.write_buf(key, buf)
    }

    /// Starts writing `buf[..buf.len()]` under `key` without copying; the
    /// buffer comes back in [`Completed::buf`]. Fails before any I/O when
    /// the key is taken or the block does not fit the budget.
    pub fn write_buf(&self, key: u64, buf: AlignedBuf) -> Result<Ticket> {
        let len_bytes = buf.len() as u64;
        let checksums = checksums(buf.as_slice());
        // The capacity holds at least the rounded length; any more is not
        // written.
        let aligned_bytes = aligned::round_up(len_bytes).unwrap_or(buf.capacity() as u64);
        let mut index = lock(&self.index);
        if index.entries.contains_key(&key) {
            return Err(Error::invalid(
                &self.path,
                "key",
                format!("{key} is already in the spill store; remove it first"),
            ));
        }
        if index.used_bytes + aligned_bytes > self.budget_bytes {
            return Err(Error::ResourcesExhausted {
                tier: "ssd",
                what: format!("spilling key {key} ({len_bytes} bytes)"),
                needed_bytes: aligned_bytes,
                used_bytes: index.used_bytes,
                budget_bytes: self.budget_bytes,
            });
        }
        let extents = index.extents.allocate(aligned_bytes).ok_or_else(|| {
            Error::Internal(format!(
                "the spill file has {} free bytes for {aligned_bytes} within budget",
                index.extents.free_bytes()
            ))
        })?;
        let end = extents.iter().map(|e| e.offset + e.len).max().unwrap_or(0);
        if let Err(e) = self.grow(&mut index, end, key, len_bytes) {
            for extent in extents {
                index.extents.release(extent);
            }
            return Err(e);
        }
        index.used_bytes += aligned_bytes;
        index.peak_bytes = index.peak_bytes.max(index.used_bytes);
        let block = Arc::new(Block {
            len_bytes,
            extents,
            checksums,
        });
        let state = Arc::new(OpState::default());
        index.entries.insert(
            key,
            Entry {
                block: block.clone(),
                write: state.clone(),
                reads: Vec::new(),
            },
        );
        drop(index);
        let ticket = Ticket {
            store_id: self.id,
            key,
            kind: OpKind::Write,
            block: block.clone(),
            state: state.clone(),
        };
        self.submit(OpKind::Write, key, buf, &block, state)
            .inspect_err(|_| {
                self.forget_failed_write(key, &ticket.state);
            })?;
        Ok(ticket)
    }

    /// A buffer of at least `capacity` bytes (rounded up to
    /// [`ALIGN_BYTES`]) for a staged transfer: one given back with
    /// [`keep_buffer`](Self::keep_buffer) that is large enough, else a
    /// new one. Its length is `capacity`; what it holds is whatever it
    /// held.
    pub fn staging_buffer(&self, capacity: usize) -> Result<AlignedBuf> {
        let kept = {
            let mut kept = lock(&self.kept);
            // The smallest that fits; where none does, the smallest kept
            // goes, so that those kept and those out stay as many.
            let fits = (0..kept.len())
                .filter(|&i| kept[i].capacity() >= capacity)
                .min_by_key(|&i| kept[i].capacity());
            match fits {
                Some(i) => Some(kept.swap_remove(i)),
                None => {
                    let smallest = (0..kept.len()).min_by_key(|&i| kept[i].capacity());
                    drop(smallest.map(|i| kept.swap_remove(i)));
                    None
                }
            }
        };
        let mut buf = match kept {
            Some(buf) => buf,
            None => AlignedBuf::zeroed(capacity).map_err(|source| Error::SpillIo {
                path: self.path.clone(),
                what: format!("allocating a staging buffer of {capacity} bytes"),
                source,
            })?,
        };
        buf.set_len(capacity)
            .map_err(|e| Error::Internal(e.to_string()))?;
        Ok(buf)
    }

    /// Keeps `buf` for [`staging_buffer`](Self::staging_buffer) to hand
    /// out again: [`KEPT_BUFFERS`] at most, the largest.
    pub fn keep_buffer(&self, buf: AlignedBuf) {
        let mut kept = lock(&self.kept);
        kept.push(buf);
        if kept.len() > KEPT_BUFFERS {
            let smallest = (0..kept.len())
                .min_by_key(|&i| kept[i].capacity())
                .expect("more than none");
            kept.swap_remove(smallest);
        }
    }

    /// Bytes of the staging buffers kept ([`keep_buffer`](Self::keep_buffer)).
    pub fn kept_bytes(&self) -> u64 {
        lock(&self.kept).iter().map(|b| b.capacity() as u64).sum()
    }

    /// Starts reading `key` into a new buffer. A read of a block still
    /// being written waits for that write first.
    pub fn read(&self, key: u64) -> Result<Ticket> {
        let len_bytes = self.entry_len(key)?;
        let buf = AlignedBuf::zeroed(len_bytes as usize).map_err(|source| Error::SpillIo {
            path: self.path.clone(),
            what: format!("allocating a buffer for key {key}"),
            source,
        })?;
        self.read_into(key, buf)
    }

    /// Starts reading `key` into `buf` (whose capacity must hold the
    /// block rounded up to [`ALIGN_BYTES`]); the buffer comes back in
    /// [`Completed::buf`] with its length set to the block's.
    pub fn read_into(&self, key: u64, mut buf: AlignedBuf) -> Result<Ticket> {
        // A write in flight is waited for; bounded in case other threads
        // keep rewriting the key meanwhile.
        for _ in 0..16 {
            let mut index = lock(&self.index);
            let Some(entry) = index.entries.get_mut(&key) else {
                return Err(self.unknown_key(key));
            };
            if !entry.write.is_finished() {
                let write = entry.write.clone();
                drop(index);
                write.wait_finished();
                continue;
            }
            if let Some(failure) = entry.write.failure() {
                return Err(self.block_error(OpKind::Write, key, &entry.block, &failure));
            }
            let block = entry.block.clone();
            let needed = block.aligned_bytes();
            if (buf.capacity() as u64) < needed {
                return Err(Error::invalid(
                    &self.path,
                    "buf",
                    format!(
                        "key {key} needs a buffer of {needed} bytes, the one given holds {}",
                        buf.capacity()
                    ),
                ));
            }
            buf.set_len(block.len_bytes as usize)
                .map_err(|e| Error::Internal(e.to_string()))?;
            let state = Arc::new(OpState::default());
            entry.reads.retain(|r| !r.is_finished());
            entry.reads.push(state.clone());
            drop(index);
            let ticket = Ticket {
                store_id: self.id,
                key,
                kind: OpKind::Read,
                block: block.clone(),
                state: state.clone(),
            };
            self.submit(OpKind::Read, key, buf, &block, state)?;
            return Ok(ticket);
        }
        Err(self.unknown_key(key))
    }

    /// Blocks until the ticket's I/O is done. A read's bytes are checked
    /// against the checksums taken when they were written; a failed write
    /// frees its space and forgets the key.
    pub fn wait(&self, ticket: Ticket) -> Result<Completed> {
        if ticket.store_id != self.id {
            return Err(Error::invalid(
                &self.path,
                "ticket",
                format!(
                    "the ticket for key {} belongs to another spill store",
                    ticket.key
                ),
            ));
        }
        let (buf, failure) = ticket.state.take();
        if let Some(failure) = failure {
            if ticket.kind == OpKind::Write {
                self.forget_failed_write(ticket.key, &ticket.state);
            }
            return Err(self.block_error(ticket.kind, ticket.key, &ticket.block, &failure));
        }
        let buf = buf.ok_or_else(|| {
            Error::Internal(format!(
                "the ticket for key {} was finished twice",
                ticket.key
            ))
        })?;
        if ticket.kind == OpKind::Read {
            self.verify(ticket.key, &ticket.block, &buf)?;
        }
        Ok(Completed {
            key: ticket.key,
            kind: ticket.kind,
            buf,
        })
    }

    /// Forgets `key` and frees its space, after any I/O on it finishes.
    pub fn remove(&self, key: u64) -> Result<()> {
        let Some(entry) = lock(&self.index).entries.remove(&key) else {
            return Err(self.unknown_key(key));
        };
        // The extents stay taken (and counted) until no request uses them.
        entry.write.wait_finished();
        for read in &entry.reads {
            read.wait_finished();
        }
        let mut index = lock(&self.index);
        for &extent in &entry.block.extents {
            index.extents.release(extent);
        }
        index.used_bytes -= entry.block.aligned_bytes();
        Ok(())
    }

    /// Stops the I/O thread after it finishes what it was given, and
    /// deletes the spill file (and the directory if this store created it
    /// and it is now empty). Dropping the store does the same but cannot
    /// report a failure to delete.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    /// The spill file and the file offset of `key`'s first byte, for tests
    /// that corrupt a block on disk.
    #[doc(hidden)]
    pub fn block_location(&self, key: u64) -> Option<(PathBuf, u64)> {
        let index = lock(&self.index);
        let block = &index.entries.get(&key)?.block;
        Some((self.path.clone(), block.file_offset(0)))
    }

    fn shutdown(&mut self) -> Result<()> {
        let Some(engine) = self.engine.take() else {
            return Ok(());
        };
        drop(engine);
        // Removed while still open, and so locked: a cleaner never finds
        // it unheld.
        let removed = std::fs::remove_file(&self.path);
        drop(self.file.take());
        crate::cleanup::unregister(&self.path);
        removed.map_err(|source| Error::SpillIo {
            path: self.path.clone(),
            what: "cannot delete the spill file".into(),
            source,
        })?;
        self.created_dirs.remove_empty();
        Ok(())
    }

    /// Makes the spill file at least `end` bytes long, `GROW_STEP_BYTES`
    /// at a time, never past the budget; exactly `end` where the file
    /// system has no room for the step.
    fn grow(&self, index: &mut Index, end: u64, key: u64, len_bytes: u64) -> Result<()> {
        if end <= index.file_bytes || !index.fallocate {
            return Ok(());
        }
        let capacity = self.budget_bytes / ALIGN_BYTES as u64 * ALIGN_BYTES as u64;
        let target = end
            .max(index.file_bytes.saturating_add(GROW_STEP_BYTES))
            .min(capacity)
            .max(end);
        let fd = self.file.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
        let start = index.file_bytes;
        let reserve = |to: u64| {
            if self.room_bytes.is_some_and(|room| to > room) {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            // SAFETY: plain syscall on our open file descriptor.
            match unsafe {
                libc::fallocate(fd, 0, start as libc::off_t, (to - start) as libc::off_t)
            } {
                0 => Ok(to),
                _ => Err(std::io::Error::last_os_error()),
            }
        };
        // A step the file system has no room for is tried again at what
        // the block needs alone: a small plan's file then fits a folder
        // of a few MiB.
        let reserved = match reserve(target) {
            Err(_) if target > end => reserve(end),
            reached => reached,
        };
        let error = match reserved {
            Ok(reached) => {
                index.file_bytes = reached;
                return Ok(());
            }
            Err(error) => error,
        };
        let target = end;
        match error.raw_os_error() {
            // No fallocate here: writes extend the file instead.
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                index.fallocate = false;
                Ok(())
            }
            _ => Err(Error::SpillBlockIo {
                path: self.path.clone(),
                op: "reserving space for",
                key,
                block_bytes: len_bytes,
                offset: start,
                bytes: target - start,
                source: error,
            }),
        }
    }

    fn submit(
        &self,
        kind: OpKind,
        key: u64,
        buf: AlignedBuf,
        block: &Block,
        state: Arc<OpState>,
    ) -> Result<()> {
        let segments = block.segments();
        if segments.is_empty() {
            state.finish(Some(buf), None);
            return Ok(());
        }
        let Some(engine) = self.engine.as_ref() else {
            let why = "the spill store is closed";
            state.finish(Some(buf), Some(engine::stopped(why)));
            return Err(Error::Internal(why.into()));
        };
        let request = Request {
            kind,
            buf: Some(buf),
            segments,
            logical_bytes: block.len_bytes,
            state,
            stop: engine.stop_reason(),
        };
        engine.send(request).map_err(|mut request| {
            // The thread stopped on its own (the store's own stop joins it
            // after the last request): its reason, or a panic's.
            let why = engine
                .stop_reason()
                .get()
                .unwrap_or_else(|| "it ended without saying why".into());
            let failure = IoFailure {
                file_offset: block.extents.first().map_or(0, |e| e.offset),
                bytes: block.len_bytes,
                ..engine::stopped(&why)
            };
            let error = self.block_error(kind, key, block, &failure);
            request.state.finish(request.buf.take(), Some(failure));
            error
        })
    }

    /// Drops `key` if its current write is `write` (which failed or was
    /// never sent), freeing its space.
    fn forget_failed_write(&self, key: u64, write: &Arc<OpState>) {
        let mut index = lock(&self.index);
        let matches = index
            .entries
            .get(&key)
            .is_some_and(|entry| Arc::ptr_eq(&entry.write, write));
        if !matches {
            return;
        }
        if let Some(entry) = index.entries.remove(&key) {
            for &extent in &entry.block.extents {
                index.extents.release(extent);
            }
            index.used_bytes -= entry.block.aligned_bytes();
        }
    }

    fn verify(&self, key: u64, block: &Block, buf: &AlignedBuf) -> Result<()> {
        let segment = CHECKSUM_SEGMENT_BYTES as usize;
        for (i, (data, &expected)) in buf
            .as_slice()
            .chunks(segment)
            .zip(&block.checksums)
            .enumerate()
        {
            let actual = crc32c::crc32c(data);
            if actual != expected {
                return Err(Error::SpillChecksum {
                    path: self.path.clone(),
                    key,
                    offset: block.file_offset((i * segment) as u64),
                    bytes: data.len() as u64,
                    expected,
                    actual,
                });
            }
        }
        if buf.len() as u64 != block.len_bytes {
            return Err(Error::Internal(format!(
                "key {key}: read {} bytes of a {}-byte block",
                buf.len(),
                block.len_bytes
            )));
        }
        Ok(())
    }

    pub(crate) fn entry_len(&self, key: u64) -> Result<u64> {
        lock(&self.index)
            .entries
            .get(&key)
            .map(|entry| entry.block.len_bytes)
            .ok_or_else(|| self.unknown_key(key))
    }

    fn unknown_key(&self, key: u64) -> Error {
        Error::invalid(
            &self.path,
            "key",
            format!("{key} is not in the spill store"),
        )
    }

    fn block_error(&self, kind: OpKind, key: u64, block: &Block, failure: &IoFailure) -> Error {
        Error::SpillBlockIo {
            path: self.path.clone(),
            op: match kind {
                OpKind::Read => "reading",
                OpKind::Write => "writing",
            },
            key,
            block_bytes: block.len_bytes,
            offset: failure.file_offset,
            bytes: failure.bytes,
            source: failure.to_io_error(),
        }
    }
}

impl Drop for SpillStore {
    fn drop(&mut self) {
        // Nowhere to report a failure to delete from here: `close` does.
        let _ = self.shutdown();
    }
}

impl std::fmt::Debug for SpillStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillStore")
            .field("path", &self.path)
            .field("mode", &self.mode)
            .field("budget_bytes", &self.budget_bytes)
            .finish_non_exhaustive()
    }
}

/// Turns on O_DIRECT for an open file; file systems without it say
/// EINVAL. Public so that a baseline (the spill bench's) opens files the
/// same way.
pub fn set_direct(file: &File) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on our own descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a live spill store holds the spill file at `path` (its lock,
/// see the module's ownership note): `Ok(false)` for a file whose store
/// is gone. An error where the file cannot be opened or locks are not
/// supported: then nothing can be told.
pub fn spill_file_is_held(path: &Path) -> std::io::Result<bool> {
    let file = File::open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Removes what a process `pid` that has ended left in `folder` without
/// closing its spill stores (killed, say): its spill files
/// (`fateplan-spill-<pid>-*.bin`) that no live store holds
/// ([`spill_file_is_held`]: the pid may be another process's by now,
/// spilling to the same folder), and the folder where a file was removed
/// and it is then empty (a folder that held none stays). Whether any was
/// removed.
pub fn remove_leftovers(folder: &Path, pid: u32) -> bool {
    let prefix = format!("fateplan-spill-{pid}-");
    let Ok(entries) = std::fs::read_dir(folder) else {
        return false;
    };
    let mut removed = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(&prefix) && name.ends_with(".bin")) {
            continue;
        }
        let path = entry.path();
        // Where locks cannot tell, the pid is taken as enough: the
        // caller knows that process ended.
        if !spill_file_is_held(&path).unwrap_or(false) {
            removed |= std::fs::remove_file(&path).is_ok();
        }
    }
    if removed {
        let _ = std::fs::remove_dir(folder);
    }
    removed
}
