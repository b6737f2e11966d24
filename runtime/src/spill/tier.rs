//! The spill store as the executor's SSD tier.
//!
//! A tensor is stored as chunks of its byte form, each a block of the
//! store under its own key ([`chunk_key`]), and moves a chunk at a time
//! through two staging buffers per transfer: one is filled (or read out)
//! while the other's I/O runs. A transfer so holds at most two chunks of
//! the tensor beside it, the plan's staging share each (its
//! `ssd_staging_bytes` counts four buffers: two per direction), however
//! large the tensor. The buffers are kept by the store between
//! transfers ([`SpillStore::staging_buffer`]).

use std::collections::VecDeque;

use super::{aligned, AlignedBuf, SpillStore, Ticket, ALIGN_BYTES};
use crate::exec::data::FormReader;
use crate::exec::{Data, ExecError, SsdTier};

/// Chunks a transfer has in flight at once: the staging buffers it holds.
pub const BUFFERS_PER_TRANSFER: usize = 2;

/// Bits of a chunk key that number the chunk; the tensor's key is above.
const CHUNK_BITS: u32 = 32;

/// The store key of chunk `chunk` of what the tier stores under `key`:
/// `None` past the tier's keys (below 2^32, and 2^32 chunks each).
pub fn tier_key(key: u64, chunk: u64) -> Option<u64> {
    (key >> (64 - CHUNK_BITS) == 0 && chunk >> CHUNK_BITS == 0).then_some(key << CHUNK_BITS | chunk)
}

/// [`tier_key`], or the SSD tier's error naming the store's file.
fn chunk_key(store: &SpillStore, key: u64, chunk: u64) -> Result<u64, ExecError> {
    tier_key(key, chunk).ok_or_else(|| {
        ExecError::ssd(crate::Error::invalid(
            store.path(),
            "key",
            format!(
                "chunk {chunk} of key {key} is past the SSD tier's keys (below 2^{}, \
                 and 2^{CHUNK_BITS} chunks each)",
                64 - CHUNK_BITS
            ),
        ))
    })
}

/// The chunk a transfer moves at a time for a staging share of
/// `chunk_bytes`: a whole number of the store's aligned blocks (so that
/// only a tensor's last chunk is padded), one at least (a share under
/// 4 KiB, which a plan edited by hand may give, is held as 4 KiB).
fn staged_chunk(chunk_bytes: usize) -> usize {
    (chunk_bytes / ALIGN_BYTES).max(1) * ALIGN_BYTES
}

/// The spill store's error as the executor's: a buffer of `bytes` (at
/// least) it could not allocate is [`ExecError::OutOfMemory`], as the
/// executor's own buffers are; anything else the SSD tier's.
fn spill_error(error: crate::Error, bytes: u64) -> ExecError {
    match &error {
        crate::Error::SpillIo { source, .. }
            if source.kind() == std::io::ErrorKind::OutOfMemory =>
        {
            ExecError::out_of_memory(bytes)
        }
        _ => ExecError::ssd(error),
    }
}

impl SpillStore {
    /// Writes `len` bytes under `key`, a chunk of `chunk_bytes` (see
    /// [`staged_chunk`]) at a time: `fill(from, out)` puts the bytes from
    /// `from` on into `out`. On failure nothing of the key is left.
    fn put_staged(
        &self,
        key: u64,
        len: usize,
        chunk_bytes: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), ExecError>,
    ) -> Result<(), ExecError> {
        let chunk = staged_chunk(chunk_bytes);
        let chunks = len.div_ceil(chunk).max(1) as u64;
        chunk_key(self, key, chunks - 1)?;
        let mut in_flight: VecDeque<Ticket> = VecDeque::new();
        let mut free: Vec<AlignedBuf> = Vec::new();
        let mut sent = 0;
        let mut run = || -> Result<(), ExecError> {
            for i in 0..chunks {
                let from = i as usize * chunk;
                let n = chunk.min(len - from);
                let mut buf = match free.pop() {
                    Some(buf) => buf,
                    // Of the share whatever the tensor's size, so that the
                    // buffers kept serve every transfer.
                    None if in_flight.len() < BUFFERS_PER_TRANSFER => self
                        .staging_buffer(chunk)
                        .map_err(|e| spill_error(e, chunk as u64))?,
                    None => {
                        let oldest = in_flight.pop_front().expect("a chunk in flight");
                        self.wait(oldest).map_err(ExecError::ssd)?.buf
                    }
                };
                buf.set_len(n)
                    .map_err(|e| ExecError::Internal(e.to_string()))?;
                buf.clear_past_len();
                fill(from, buf.as_mut_slice())?;
                let ticket = self
                    .write_buf(chunk_key(self, key, i)?, buf)
                    .map_err(|e| spill_error(e, n as u64))?;
                sent = i + 1;
                in_flight.push_back(ticket);
            }
            while let Some(ticket) = in_flight.pop_front() {
                free.push(self.wait(ticket).map_err(ExecError::ssd)?.buf);
            }
            Ok(())
        };
        let result = run();
        if result.is_err() {
            // What is still moving is waited for, and what was written
            // goes: a key is stored whole or not at all.
            for ticket in in_flight.drain(..) {
                let _ = self.wait(ticket);
            }
            for i in 0..sent {
                let _ = chunk_key(self, key, i).map(|k| self.remove(k));
            }
        }
        for buf in free {
            self.keep_buffer(buf);
        }
        result
    }

    /// The lengths of the chunks stored under `key`, in order.
    fn chunk_lens(&self, key: u64) -> Result<Vec<u64>, ExecError> {
        let mut lens = Vec::new();
        loop {
            let chunk = chunk_key(self, key, lens.len() as u64)?;
            match self.entry_len(chunk) {
                Ok(len) => lens.push(len),
                Err(_) if !lens.is_empty() => return Ok(lens),
                Err(_) => return Err(ExecError::ssd(self.unknown_key(key))),
            }
        }
    }

    /// Reads what `key` holds a chunk at a time, through buffers of the
    /// staging share `chunk_bytes` ([`staged_chunk`]; of the largest
    /// chunk where that is larger, as `put`'s one block may be):
    /// `start(len)` makes what the bytes go into, `take` takes each
    /// chunk's in order.
    fn get_staged<R>(
        &self,
        key: u64,
        chunk_bytes: usize,
        start: impl FnOnce(usize) -> Result<R, ExecError>,
        mut take: impl FnMut(&mut R, &[u8]) -> Result<(), ExecError>,
    ) -> Result<R, ExecError> {
        let lens = self.chunk_lens(key)?;
        let total: u64 = lens.iter().sum();
        let total = usize::try_from(total).map_err(|_| ExecError::out_of_memory(total))?;
        let largest = lens.iter().copied().max().unwrap_or(0);
        let capacity = aligned::round_up(largest)
            .and_then(|c| usize::try_from(c).ok())
            .ok_or(ExecError::out_of_memory(largest))?
            .max(staged_chunk(chunk_bytes));
        let mut into = start(total)?;
        let mut in_flight: VecDeque<Ticket> = VecDeque::new();
        let mut free: Vec<AlignedBuf> = Vec::new();
        let mut next = 0;
        let mut run = || -> Result<(), ExecError> {
            loop {
                while next < lens.len() && in_flight.len() < BUFFERS_PER_TRANSFER {
                    let buf = match free.pop() {
                        Some(buf) => buf,
                        None => self
                            .staging_buffer(capacity)
                            .map_err(|e| spill_error(e, capacity as u64))?,
                    };
                    let chunk = chunk_key(self, key, next as u64)?;
                    let ticket = self
                        .read_into(chunk, buf)
                        .map_err(|e| spill_error(e, lens[next]))?;
                    in_flight.push_back(ticket);
                    next += 1;
                }
                let Some(oldest) = in_flight.pop_front() else {
                    return Ok(());
                };
                let done = self.wait(oldest).map_err(ExecError::ssd)?;
                take(&mut into, done.buf.as_slice())?;
                free.push(done.buf);
            }
        };
        let result = run();
        for ticket in in_flight.drain(..) {
            let _ = self.wait(ticket);
        }
        for buf in free {
            self.keep_buffer(buf);
        }
        result.map(|()| into)
    }
}

impl SsdTier for SpillStore {
    /// One block, whatever its length (the SSD tier's measurement moves
    /// blocks of the size it is given).
    fn put(&self, key: u64, bytes: &[u8]) -> Result<(), ExecError> {
        let ticket = self
            .write(chunk_key(self, key, 0)?, bytes)
            .map_err(|e| spill_error(e, bytes.len() as u64))?;
        self.wait(ticket).map_err(ExecError::ssd)?;
        Ok(())
    }

    fn get(&self, key: u64) -> Result<Vec<u8>, ExecError> {
        self.get_staged(
            key,
            0,
            crate::exec::data::room_for,
            |into: &mut Vec<u8>, chunk| {
                into.extend_from_slice(chunk);
                Ok(())
            },
        )
    }

    /// The tensor's byte form written a chunk at a time, each straight
    /// into the staging buffer the store writes out.
    fn put_data(&self, key: u64, data: &Data, chunk_bytes: usize) -> Result<(), ExecError> {
        self.put_staged(key, data.byte_form_len(), chunk_bytes, |from, out| {
            data.write_byte_form_part(from, out)
        })
    }

    /// The tensor read back a chunk at a time into its own buffers.
    fn get_data(&self, key: u64, chunk_bytes: usize) -> Result<Data, ExecError> {
        self.get_staged(
            key,
            chunk_bytes,
            |len| Ok(FormReader::new(len)),
            |reader, chunk| reader.feed(chunk),
        )?
        .finish()
    }

    fn remove(&self, key: u64) -> Result<(), ExecError> {
        let chunks = self.chunk_lens(key)?.len() as u64;
        for i in 0..chunks {
            SpillStore::remove(self, chunk_key(self, key, i)?).map_err(ExecError::ssd)?;
        }
        Ok(())
    }
}
