//! A group whose members are processes: each member ([`TcpMember`])
//! connects to a [`Hub`], which routes every call.
//!
//! The hub reads one call from every member in rank order, checks that
//! they are the same call (the same kind, sums of the same length), and
//! answers each member: for an all-to-all, what every member sent it; for
//! a sum, the members' values added in rank order (so every member gets
//! the same bits as [`super::LocalGroup`] gives). A member that fails
//! sends why before it closes its connection; a member whose process dies
//! closes it; either stops the group, and every call then waiting or made
//! later fails. A member leaves normally with a result (bytes the hub
//! hands back to whoever serves it: a launcher gathers its members'
//! reports that way).
//!
//! Frames, little-endian: a tag byte, then the tag's payload. Vectors are
//! a `u64` element count and the elements; texts and results a `u64` byte
//! count and the bytes.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Collective;
use crate::exec::ExecError;

/// Member to hub: rank and group size (on joining); hub to member: the
/// group is complete (no payload).
const HELLO: u8 = 0;
/// Per member, a vector of f32; answered by the same.
const ALL_TO_ALL: u8 = 1;
/// A vector of f32; answered by the sum.
const SUM_F32: u8 = 2;
/// A vector of f64; answered by the sum.
const SUM_F64: u8 = 3;
/// Member to hub: it failed, and why; hub to member: the group stopped,
/// and why.
const STOPPED: u8 = 4;
/// Member to hub: it made its last call; its result follows.
const DONE: u8 = 5;

/// A vector (or text) longer than this in a frame is taken as a garbled
/// stream rather than allocated.
const MAX_ELEMENTS: u64 = 1 << 36;

fn io_error(what: &str, e: std::io::Error) -> ExecError {
    ExecError::Exchange(format!("{what}: {e}"))
}

fn write_u64(w: &mut impl Write, v: u64) -> std::io::Result<()> {
    w.write_all(&v.to_le_bytes())
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_u8(r: &mut impl Read) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

/// Reads `count` elements of `size` bytes, refusing a count that cannot
/// be meant. Grows as the bytes arrive, so a garbled count fails at the
/// stream's end instead of allocating it.
fn read_bytes(r: &mut impl Read, count: u64, size: u64) -> std::io::Result<Vec<u8>> {
    if count > MAX_ELEMENTS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame announces {count} elements"),
        ));
    }
    let len = count * size;
    let mut bytes = Vec::new();
    r.take(len).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(bytes)
}

// The frames carry numbers in the machine's own byte order, which is
// little-endian on every target this builds for.
#[cfg(not(target_endian = "little"))]
compile_error!("the TCP collective's frames are little-endian");

/// Numbers that travel as their bytes.
trait Wire: bytemuck::Pod + Default + std::ops::AddAssign {}
impl Wire for f32 {}
impl Wire for f64 {}

fn write_vec<T: Wire>(w: &mut impl Write, values: &[T]) -> std::io::Result<()> {
    write_u64(w, values.len() as u64)?;
    w.write_all(bytemuck::cast_slice(values))
}

/// Elements read at a time: a garbled count fails at the stream's end
/// instead of allocating it.
const READ_CHUNK: usize = 1 << 20;

fn read_vec<T: Wire>(r: &mut impl Read) -> std::io::Result<Vec<T>> {
    let count = read_u64(r)?;
    if count > MAX_ELEMENTS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame announces {count} elements"),
        ));
    }
    let count = count as usize;
    let mut values: Vec<T> = Vec::new();
    while values.len() < count {
        let start = values.len();
        let end = count.min(start + READ_CHUNK);
        values.resize(end, T::default());
        r.read_exact(bytemuck::cast_slice_mut(&mut values[start..end]))?;
    }
    Ok(values)
}

fn write_text(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    write_u64(w, bytes.len() as u64)?;
    w.write_all(bytes)
}

fn read_text(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let count = read_u64(r)?;
    read_bytes(r, count, 1)
}

/// One member's message to the hub.
enum Call {
    AllToAll(Vec<Vec<f32>>),
    SumF32(Vec<f32>),
    SumF64(Vec<f64>),
    Failed(String),
    Done(Vec<u8>),
}

impl Call {
    fn read(r: &mut impl Read) -> std::io::Result<Call> {
        Ok(match read_u8(r)? {
            ALL_TO_ALL => {
                let n = read_u64(r)?;
                if n > MAX_ELEMENTS {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("an all-to-all to {n} members"),
                    ));
                }
                Call::AllToAll((0..n).map(|_| read_vec(r)).collect::<Result<_, _>>()?)
            }
            SUM_F32 => Call::SumF32(read_vec(r)?),
            SUM_F64 => Call::SumF64(read_vec(r)?),
            STOPPED => Call::Failed(String::from_utf8_lossy(&read_text(r)?).into_owned()),
            DONE => Call::Done(read_text(r)?),
            tag => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("unknown tag {tag}"),
                ))
            }
        })
    }

    fn kind(&self) -> &'static str {
        match self {
            Call::AllToAll(_) => "an all-to-all",
            Call::SumF32(_) => "a sum of f32",
            Call::SumF64(_) => "a sum of f64",
            Call::Failed(_) => "a failure",
            Call::Done(_) => "its last call",
        }
    }
}

/// One member's connection, as the hub holds it.
struct Link {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

impl Link {
    fn send(&mut self, frame: impl FnOnce(&mut BufWriter<TcpStream>) -> std::io::Result<()>) {
        // A member that cannot be written to has gone: its read fails
        // next, and that stops the group.
        let _ = frame(&mut self.writer).and_then(|()| self.writer.flush());
    }

    fn stop(&mut self, why: &str) {
        self.send(|w| {
            w.write_all(&[STOPPED])?;
            write_text(w, why.as_bytes())
        });
    }
}

/// The hub of a group of processes: it accepts the members, then serves
/// their calls ([`Hub::serve`]).
pub struct Hub {
    listener: TcpListener,
    size: usize,
}

impl Hub {
    /// Listens at `addr` (port 0: any free port; [`Hub::local_addr`] says
    /// which) for a group of `size` members.
    pub fn bind(addr: impl ToSocketAddrs, size: usize) -> Result<Hub, ExecError> {
        if size == 0 {
            return Err(ExecError::Internal("a group of 0 members".into()));
        }
        let listener = TcpListener::bind(addr).map_err(|e| io_error("the hub's address", e))?;
        Ok(Hub { listener, size })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, ExecError> {
        self.listener
            .local_addr()
            .map_err(|e| io_error("the hub's address", e))
    }

    /// Accepts the members (within `join_timeout`, asking `alive` between
    /// tries whether to go on waiting: a launcher says no once one of its
    /// members' processes has exited, with the error the hub returns),
    /// then serves their calls until each
    /// has left. Returns every member's result, in rank order, or why the
    /// group stopped.
    pub fn serve(
        self,
        join_timeout: Duration,
        alive: &mut dyn FnMut() -> Result<(), ExecError>,
    ) -> Result<Vec<Vec<u8>>, ExecError> {
        let mut links = self.accept(join_timeout, alive)?;
        for link in &mut links {
            link.send(|w| w.write_all(&[HELLO]));
        }
        let size = self.size;
        loop {
            let mut calls = Vec::with_capacity(size);
            // A member that failed (its rank and why), or calls that do
            // not match (why).
            let mut failure = None;
            for (rank, link) in links.iter_mut().enumerate() {
                let why = match Call::read(&mut link.reader) {
                    Ok(Call::Failed(why)) => why,
                    Ok(call) => {
                        calls.push(Some(call));
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        "its connection closed in the middle of the run (did its process end?)"
                            .to_string()
                    }
                    Err(e) => format!("its connection: {e}"),
                };
                failure = Some((Some(rank), why));
                calls.push(None);
                break;
            }
            let read = calls.len();
            let (rank, why) = match failure {
                Some(failed) => failed,
                None => {
                    let calls: Vec<Call> = calls.into_iter().flatten().collect();
                    match answer(&mut links, calls) {
                        Ok(Some(results)) => return Ok(results),
                        Ok(None) => continue,
                        Err(why) => (None, why),
                    }
                }
            };
            let (told, error) = match rank {
                Some(rank) => {
                    let error = ExecError::MemberFailed { rank, why };
                    (error.to_string(), error)
                }
                None => (
                    why.clone(),
                    ExecError::Exchange(format!("the group stopped: {why}")),
                ),
            };
            // Members read this round get told at once; the others when
            // they next call.
            for link in &mut links[..read] {
                link.stop(&told);
            }
            drain(links.split_off(read), &told);
            return Err(error);
        }
    }

    /// Accepts every member; on failure, tells those that joined why.
    fn accept(
        &self,
        join_timeout: Duration,
        alive: &mut dyn FnMut() -> Result<(), ExecError>,
    ) -> Result<Vec<Link>, ExecError> {
        let mut slots: Vec<Option<Link>> = (0..self.size).map(|_| None).collect();
        match self.accept_into(&mut slots, join_timeout, alive) {
            Ok(()) => Ok(slots.into_iter().flatten().collect()),
            Err(e) => {
                let why = e.to_string();
                for link in slots.iter_mut().flatten() {
                    link.stop(&why);
                }
                Err(e)
            }
        }
    }

    fn accept_into(
        &self,
        slots: &mut [Option<Link>],
        join_timeout: Duration,
        alive: &mut dyn FnMut() -> Result<(), ExecError>,
    ) -> Result<(), ExecError> {
        let size = self.size;
        self.listener
            .set_nonblocking(true)
            .map_err(|e| io_error("the hub's listener", e))?;
        let start = Instant::now();
        while slots.iter().any(Option::is_none) {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let (rank, link) = hello(stream, size).map_err(|e| {
                        ExecError::Exchange(format!("a member joining from {peer}: {e}"))
                    })?;
                    if slots[rank].is_some() {
                        return Err(ExecError::Exchange(format!(
                            "two members joined as rank {rank}"
                        )));
                    }
                    slots[rank] = Some(link);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // The launcher's error, as it is (a member's process
                    // that ended: `MemberFailed`).
                    alive()?;
                    if start.elapsed() > join_timeout {
                        let missing: Vec<String> = (0..size)
                            .filter(|&r| slots[r].is_none())
                            .map(|r| r.to_string())
                            .collect();
                        return Err(ExecError::Exchange(format!(
                            "member(s) {} did not join within {:.0} s",
                            missing.join(", "),
                            join_timeout.as_secs_f64()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(io_error("accepting a member", e)),
            }
        }
        Ok(())
    }
}

/// Reads a joining member's rank and checks its group size.
fn hello(stream: TcpStream, size: usize) -> Result<(usize, Link), String> {
    let text = |e: std::io::Error| e.to_string();
    stream.set_nonblocking(false).map_err(text)?;
    stream.set_nodelay(true).map_err(text)?;
    // A member says who it is at once; later calls may take as long as
    // the training between them.
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(text)?;
    let mut reader = BufReader::new(stream.try_clone().map_err(text)?);
    if read_u8(&mut reader).map_err(text)? != HELLO {
        return Err("it did not say its rank first".into());
    }
    let rank = read_u64(&mut reader).map_err(text)?;
    let group = read_u64(&mut reader).map_err(text)?;
    if group != size as u64 {
        return Err(format!(
            "rank {rank} joined a group of {group}; this one has {size}"
        ));
    }
    if rank >= size as u64 {
        return Err(format!("rank {rank} in a group of {size}"));
    }
    stream.set_read_timeout(None).map_err(text)?;
    Ok((
        rank as usize,
        Link {
            reader,
            writer: BufWriter::new(stream),
        },
    ))
}

/// Answers one round of calls, one per member in rank order: `Some`
/// (every member's result) when all have left, `Err` when the calls do
/// not match.
fn answer(links: &mut [Link], calls: Vec<Call>) -> Result<Option<Vec<Vec<u8>>>, String> {
    let size = links.len();
    let done = calls.iter().filter(|c| matches!(c, Call::Done(_))).count();
    if done == size {
        return Ok(Some(
            calls
                .into_iter()
                .map(|c| match c {
                    Call::Done(result) => result,
                    _ => unreachable!("every call is Done"),
                })
                .collect(),
        ));
    }
    if done > 0 {
        let late = calls
            .iter()
            .position(|c| !matches!(c, Call::Done(_)))
            .expect("not every call is Done");
        return Err(format!(
            "member {late} exchanges after {done} member(s) finished their run: the members' \
             calls are out of step"
        ));
    }
    if let Some(other) = calls
        .iter()
        .position(|c| std::mem::discriminant(c) != std::mem::discriminant(&calls[0]))
    {
        return Err(format!(
            "member {other} made {} where member 0 made {}: the members' calls are out of step",
            calls[other].kind(),
            calls[0].kind()
        ));
    }
    match &calls[0] {
        Call::AllToAll(_) => {
            let mut sends: Vec<Vec<Vec<f32>>> = Vec::with_capacity(size);
            for (from, call) in calls.into_iter().enumerate() {
                let Call::AllToAll(s) = call else {
                    unreachable!("same kind")
                };
                if s.len() != size {
                    return Err(format!(
                        "member {from} sent to {} members in a group of {size}",
                        s.len()
                    ));
                }
                sends.push(s);
            }
            for (to, link) in links.iter_mut().enumerate() {
                link.send(|w| {
                    w.write_all(&[ALL_TO_ALL])?;
                    write_u64(w, size as u64)?;
                    sends.iter().try_for_each(|s| write_vec(w, &s[to]))
                });
            }
        }
        Call::SumF32(_) => answer_sum(links, SUM_F32, calls, |c| match c {
            Call::SumF32(v) => v,
            _ => unreachable!("same kind"),
        })?,
        Call::SumF64(_) => answer_sum(links, SUM_F64, calls, |c| match c {
            Call::SumF64(v) => v,
            _ => unreachable!("same kind"),
        })?,
        Call::Failed(_) | Call::Done(_) => unreachable!("handled above"),
    }
    Ok(None)
}

/// Answers a round of sums (`values` takes each call's) with their sum.
fn answer_sum<T: Wire>(
    links: &mut [Link],
    tag: u8,
    calls: Vec<Call>,
    values: fn(Call) -> Vec<T>,
) -> Result<(), String> {
    let sum = add_in_rank_order(calls.into_iter().map(values).collect())?;
    for link in links.iter_mut() {
        link.send(|w| {
            w.write_all(&[tag])?;
            write_vec(w, &sum)
        });
    }
    Ok(())
}

/// The members' values added in rank order, as [`super::LocalGroup`] adds
/// them.
fn add_in_rank_order<T: Wire>(parts: Vec<Vec<T>>) -> Result<Vec<T>, String> {
    let mut parts = parts.into_iter().enumerate();
    let (_, mut sum) = parts.next().expect("a group has a member");
    for (from, part) in parts {
        if part.len() != sum.len() {
            return Err(format!(
                "member {from} summed {} values with member 0's {}: the members' calls are out \
                 of step",
                part.len(),
                sum.len()
            ));
        }
        for (s, p) in sum.iter_mut().zip(part) {
            *s += p;
        }
    }
    Ok(sum)
}

/// Answers every later call of these members with `why`, until each has
/// failed, left or closed its connection: a detached thread per member,
/// so the hub reports the failure at once while they stop at their own
/// pace (a launcher ends those that take too long).
fn drain(links: Vec<Link>, why: &str) {
    for mut link in links {
        let why = why.to_string();
        std::thread::spawn(move || loop {
            match Call::read(&mut link.reader) {
                Ok(Call::Failed(_)) | Ok(Call::Done(_)) | Err(_) => break,
                Ok(_) => link.stop(&why),
            }
        });
    }
}

/// A member of a group of processes, joined through a [`Hub`].
pub struct TcpMember {
    rank: usize,
    size: usize,
    link: Mutex<Link>,
    /// A second handle on the connection, to close it from `abort` while
    /// a call holds `link`.
    closer: TcpStream,
    /// Made its last call ([`Collective::finish`]).
    finished: AtomicBool,
    /// Sent its result (or failed): nothing more goes to the hub.
    left: AtomicBool,
}

impl TcpMember {
    /// Joins the group of `size` served by the hub at `hub` as member
    /// `rank`, trying to connect until `timeout`, and waits until every
    /// member has joined.
    pub fn join(
        hub: SocketAddr,
        rank: usize,
        size: usize,
        timeout: Duration,
    ) -> Result<TcpMember, ExecError> {
        if rank >= size {
            return Err(ExecError::Internal(format!(
                "rank {rank} in a group of {size}"
            )));
        }
        let start = Instant::now();
        let stream = loop {
            match TcpStream::connect_timeout(&hub, timeout) {
                Ok(stream) => break stream,
                // The hub may not listen yet.
                Err(_) if start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(io_error(&format!("joining the hub at {hub}"), e)),
            }
        };
        let fail = |e| io_error(&format!("joining the hub at {hub}"), e);
        stream.set_nodelay(true).map_err(fail)?;
        let closer = stream.try_clone().map_err(fail)?;
        let mut link = Link {
            reader: BufReader::new(stream.try_clone().map_err(fail)?),
            writer: BufWriter::new(stream),
        };
        (|| {
            link.writer.write_all(&[HELLO])?;
            write_u64(&mut link.writer, rank as u64)?;
            write_u64(&mut link.writer, size as u64)?;
            link.writer.flush()
        })()
        .map_err(fail)?;
        match read_u8(&mut link.reader) {
            Ok(HELLO) => {}
            Ok(STOPPED) => {
                let why = read_text(&mut link.reader).map_err(fail)?;
                return Err(ExecError::Exchange(format!(
                    "the hub refused member {rank}: {}",
                    String::from_utf8_lossy(&why)
                )));
            }
            Ok(tag) => {
                return Err(ExecError::Exchange(format!(
                    "the hub at {hub} answered member {rank}'s hello with tag {tag}"
                )))
            }
            Err(e) => {
                return Err(ExecError::Exchange(format!(
                    "the hub at {hub} closed before the group was complete: {e}"
                )))
            }
        }
        Ok(TcpMember {
            rank,
            size,
            link: Mutex::new(link),
            closer,
            finished: AtomicBool::new(false),
            left: AtomicBool::new(false),
        })
    }

    /// Leaves the group normally, handing the hub `result`.
    pub fn leave_with(&self, result: &[u8]) -> Result<(), ExecError> {
        self.finished.store(true, Ordering::Relaxed);
        if self.left.swap(true, Ordering::Relaxed) {
            return Err(ExecError::Internal(format!(
                "member {} left the group twice",
                self.rank
            )));
        }
        let mut link = self.lock()?;
        (|| {
            link.writer.write_all(&[DONE])?;
            write_text(&mut link.writer, result)?;
            link.writer.flush()
        })()
        .map_err(|e| io_error("sending the result to the hub", e))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Link>, ExecError> {
        self.link
            .lock()
            .map_err(|_| ExecError::Exchange("a thread panicked during an exchange".into()))
    }

    /// Sends one call and reads the hub's answer.
    fn call<T>(
        &self,
        tag: u8,
        write: impl FnOnce(&mut BufWriter<TcpStream>) -> std::io::Result<()>,
        read: impl FnOnce(&mut BufReader<TcpStream>) -> std::io::Result<T>,
    ) -> Result<T, ExecError> {
        if self.left.load(Ordering::Relaxed) {
            return Err(ExecError::Exchange(format!(
                "member {} exchanges after it left the group",
                self.rank
            )));
        }
        let mut link = self.lock()?;
        let lost = |e| io_error("the hub", e);
        (|| {
            link.writer.write_all(&[tag])?;
            write(&mut link.writer)?;
            link.writer.flush()
        })()
        .map_err(lost)?;
        match read_u8(&mut link.reader).map_err(lost)? {
            t if t == tag => read(&mut link.reader).map_err(lost),
            STOPPED => {
                let why = read_text(&mut link.reader).map_err(lost)?;
                Err(ExecError::Exchange(format!(
                    "the group stopped: {}",
                    String::from_utf8_lossy(&why)
                )))
            }
            t => Err(ExecError::Exchange(format!(
                "the hub answered tag {tag} with tag {t}"
            ))),
        }
    }

    fn sum<T: Wire>(&self, tag: u8, values: &mut [T]) -> Result<(), ExecError> {
        let sum = self.call(tag, |w| write_vec(w, values), read_vec::<T>)?;
        if sum.len() != values.len() {
            return Err(ExecError::Exchange(format!(
                "the hub summed {} values for member {}'s {}",
                sum.len(),
                self.rank,
                values.len()
            )));
        }
        values.copy_from_slice(&sum);
        Ok(())
    }
}

impl Collective for TcpMember {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_to_all(&self, sends: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, ExecError> {
        if sends.len() != self.size {
            return Err(ExecError::Internal(format!(
                "{} sends for a group of {}",
                sends.len(),
                self.size
            )));
        }
        let size = self.size;
        let received = self.call(
            ALL_TO_ALL,
            |w| {
                write_u64(w, sends.len() as u64)?;
                sends.iter().try_for_each(|s| write_vec(w, s))
            },
            |r| {
                let n = read_u64(r)?;
                if n != size as u64 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{n} parts for a group of {size}"),
                    ));
                }
                (0..n).map(|_| read_vec(r)).collect()
            },
        )?;
        Ok(received)
    }

    fn all_reduce_sum(&self, values: &mut [f32]) -> Result<(), ExecError> {
        self.sum(SUM_F32, values)
    }

    fn all_reduce_sum_f64(&self, values: &mut [f64]) -> Result<(), ExecError> {
        self.sum(SUM_F64, values)
    }

    fn abort(&self, why: &str) {
        if self.left.swap(true, Ordering::Relaxed) {
            return;
        }
        // Say why when no call holds the connection; close it either way,
        // which the hub also takes as a failure.
        if let Ok(mut link) = self.link.try_lock() {
            let _ = (|| {
                link.writer.write_all(&[STOPPED])?;
                write_text(&mut link.writer, why.as_bytes())?;
                link.writer.flush()
            })();
        }
        let _ = self.closer.shutdown(std::net::Shutdown::Both);
    }

    /// Marks the last call made; the member leaves when it hands its
    /// result over ([`TcpMember::leave_with`]) or is dropped.
    fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }
}

impl Drop for TcpMember {
    /// A member dropped before its last call aborts the group, so no other
    /// member waits for it; one that finished but gave no result leaves
    /// with an empty one.
    fn drop(&mut self) {
        if !self.finished.load(Ordering::Relaxed) {
            self.abort("it stopped before the end of the run");
        } else if !self.left.load(Ordering::Relaxed) {
            let _ = self.leave_with(&[]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::LocalGroup;
    use std::sync::Arc;

    type Served = std::thread::JoinHandle<Result<Vec<Vec<u8>>, ExecError>>;

    /// A hub serving `size` members on this machine, and the members.
    fn group(size: usize) -> (Served, Vec<TcpMember>) {
        let hub = Hub::bind("127.0.0.1:0", size).unwrap();
        let addr = hub.local_addr().unwrap();
        let served = std::thread::spawn(move || hub.serve(Duration::from_secs(20), &mut || Ok(())));
        // Joining waits for the whole group, so the members join side by side.
        let members = std::thread::scope(|s| {
            let joins: Vec<_> = (0..size)
                .map(|rank| {
                    s.spawn(move || TcpMember::join(addr, rank, size, Duration::from_secs(20)))
                })
                .collect();
            joins
                .into_iter()
                .map(|j| j.join().unwrap().unwrap())
                .collect()
        });
        (served, members)
    }

    #[test]
    fn all_to_all_delivers_and_results_come_back_in_rank_order() {
        let (served, members) = group(3);
        let got: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
            let handles: Vec<_> = members
                .iter()
                .map(|m| {
                    s.spawn(move || {
                        let mut all = Vec::new();
                        for round in 0..5 {
                            // Different lengths per destination.
                            let sends = (0..3)
                                .map(|to| {
                                    vec![(m.rank() * 10 + to) as f32 + round as f32 * 100.0; to + 1]
                                })
                                .collect();
                            all = m.all_to_all(sends).unwrap();
                        }
                        m.finish();
                        m.leave_with(format!("rank {}", m.rank()).as_bytes())
                            .unwrap();
                        all
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, received) in got.iter().enumerate() {
            for (from, values) in received.iter().enumerate() {
                assert_eq!(values, &vec![(from * 10 + rank) as f32 + 400.0; rank + 1]);
            }
        }
        let results = served.join().unwrap().unwrap();
        assert_eq!(
            results,
            vec![b"rank 0".to_vec(), b"rank 1".to_vec(), b"rank 2".to_vec()]
        );
    }

    #[test]
    fn sums_are_the_bits_of_a_local_group() {
        let values = |rank: usize| -> Vec<f32> {
            (0..9)
                .map(|k| 0.1 * (k + 1) as f32 / (rank + 1) as f32 + 1e-7 * k as f32)
                .collect()
        };
        let local: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = LocalGroup::new(4)
                .into_iter()
                .map(|m| {
                    s.spawn(move || {
                        let mut v = values(m.rank());
                        m.all_reduce_sum(&mut v).unwrap();
                        m.finish();
                        v
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let (served, members) = group(4);
        let tcp: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = members
                .into_iter()
                .map(|m| {
                    s.spawn(move || {
                        let mut v = values(m.rank());
                        m.all_reduce_sum(&mut v).unwrap();
                        let mut counts = vec![m.rank() as f64, 1.0];
                        m.all_reduce_sum_f64(&mut counts).unwrap();
                        assert_eq!(counts, vec![6.0, 4.0]);
                        m.finish();
                        v
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (l, t) in local.iter().zip(&tcp) {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(l), bits(t));
        }
        // Finished members dropped without a result leave with an empty one.
        assert_eq!(served.join().unwrap().unwrap(), vec![Vec::<u8>::new(); 4]);
    }

    type MemberCall = Box<dyn FnOnce(&TcpMember) -> Result<(), ExecError> + Send>;

    /// Runs `a` on member 0 and `b` on member 1 side by side; their errors.
    fn both(
        a: impl FnOnce(&TcpMember) -> Result<(), ExecError> + Send,
        b: impl FnOnce(&TcpMember) -> Result<(), ExecError> + Send,
    ) -> (Vec<String>, String) {
        let (served, members) = group(2);
        let errors = std::thread::scope(|s| {
            let a = s.spawn(|| a(&members[0]));
            let b = s.spawn(|| b(&members[1]));
            [a.join().unwrap(), b.join().unwrap()]
                .into_iter()
                .filter_map(|r| r.err().map(|e| e.to_string()))
                .collect()
        });
        drop(members);
        let hub = served.join().unwrap().unwrap_err().to_string();
        (errors, hub)
    }

    #[test]
    fn calls_out_of_step_fail_instead_of_waiting() {
        let sum = |m: &TcpMember| m.all_reduce_sum(&mut [1.0, 2.0]);
        // A sum meeting an all-to-all, sums of different lengths, a call
        // after the other member left.
        let cases: [(&str, MemberCall); 3] = [
            (
                "made an all-to-all where member 0 made a sum",
                Box::new(|m| m.all_to_all(vec![vec![1.0], vec![2.0]]).map(|_| ())),
            ),
            (
                "member 1 summed 3 values with member 0's 2",
                Box::new(|m| m.all_reduce_sum(&mut [1.0; 3])),
            ),
            ("", Box::new(|_| Ok(()))),
        ];
        for (i, (expected, b)) in cases.into_iter().enumerate() {
            let (errors, hub) = if i < 2 {
                both(sum, b)
            } else {
                both(
                    |m| {
                        m.finish();
                        m.leave_with(b"done")
                    },
                    sum,
                )
            };
            assert!(hub.contains("out of step"), "{hub}");
            assert!(hub.contains(expected), "{hub}");
            assert!(
                !errors.is_empty() && errors.iter().all(|e| e.contains("out of step")),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn a_member_that_leaves_early_stops_the_others() {
        let (served, mut members) = group(3);
        let leaver = members.pop().unwrap();
        let errors: Vec<String> = std::thread::scope(|s| {
            let waiting: Vec<_> = members
                .iter()
                .map(|m| s.spawn(move || m.all_reduce_sum(&mut [1.0]).unwrap_err().to_string()))
                .collect();
            drop(leaver);
            waiting.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for e in &errors {
            assert!(
                e.contains("member 2 failed: it stopped before the end of the run"),
                "{e}"
            );
        }
        drop(members);
        // The launcher learns which member, and its own words.
        let hub = served.join().unwrap().unwrap_err();
        assert!(
            matches!(&hub, ExecError::MemberFailed { rank: 2, why }
                if why == "it stopped before the end of the run"),
            "{hub:?}"
        );
    }

    #[test]
    fn a_lost_connection_or_a_garbled_frame_stops_the_group() {
        for garbage in [None, Some(99u8)] {
            let hub = Hub::bind("127.0.0.1:0", 2).unwrap();
            let addr = hub.local_addr().unwrap();
            let served =
                std::thread::spawn(move || hub.serve(Duration::from_secs(20), &mut || Ok(())));
            let member = std::thread::spawn(move || {
                let m = TcpMember::join(addr, 0, 2, Duration::from_secs(20)).unwrap();
                m.all_reduce_sum(&mut [1.0]).unwrap_err().to_string()
            });
            // A member that says its rank, then sends `garbage` or hangs up.
            let mut raw = TcpStream::connect(addr).unwrap();
            raw.write_all(&[HELLO]).unwrap();
            raw.write_all(&1u64.to_le_bytes()).unwrap();
            raw.write_all(&2u64.to_le_bytes()).unwrap();
            assert_eq!(read_u8(&mut raw).unwrap(), HELLO);
            match garbage {
                Some(tag) => raw.write_all(&[tag]).unwrap(),
                None => drop(raw),
            }
            let error = member.join().unwrap();
            assert!(error.contains("member 1 failed: its connection"), "{error}");
            if garbage.is_none() {
                assert!(error.contains("closed in the middle of the run"), "{error}");
            }
            let hub = served.join().unwrap().unwrap_err();
            assert!(
                matches!(&hub, ExecError::MemberFailed { rank: 1, why } if why.starts_with("its connection")),
                "{hub:?}"
            );
            if garbage.is_some() {
                assert!(hub.to_string().contains("unknown tag 99"), "{hub}");
            }
        }
    }

    #[test]
    fn joining_fails_cleanly() {
        // A member that never comes.
        let hub = Hub::bind("127.0.0.1:0", 2).unwrap();
        let addr = hub.local_addr().unwrap();
        let served =
            std::thread::spawn(move || hub.serve(Duration::from_millis(300), &mut || Ok(())));
        let joined = TcpMember::join(addr, 0, 2, Duration::from_secs(20));
        let hub = served.join().unwrap().unwrap_err().to_string();
        assert!(hub.contains("member(s) 1 did not join within"), "{hub}");
        assert!(joined.is_err());

        // The launcher says to stop waiting.
        let hub = Hub::bind("127.0.0.1:0", 2).unwrap();
        let error = hub
            .serve(Duration::from_secs(20), &mut || {
                Err(ExecError::MemberFailed {
                    rank: 1,
                    why: "its process exited".into(),
                })
            })
            .unwrap_err();
        assert!(
            matches!(&error, ExecError::MemberFailed { rank: 1, why } if why == "its process exited"),
            "{error:?}"
        );

        // A member of another group size, and a rank outside the group.
        let hub = Hub::bind("127.0.0.1:0", 2).unwrap();
        let addr = hub.local_addr().unwrap();
        let served = std::thread::spawn(move || hub.serve(Duration::from_secs(20), &mut || Ok(())));
        let _ = TcpMember::join(addr, 0, 3, Duration::from_secs(1));
        let hub = served.join().unwrap().unwrap_err().to_string();
        assert!(
            hub.contains("rank 0 joined a group of 3; this one has 2"),
            "{hub}"
        );
        assert!(TcpMember::join(addr, 2, 2, Duration::from_secs(1)).is_err());
        // A rank outside the group, said to the hub itself; the member
        // that joined first is told why the group failed.
        let hub = Hub::bind("127.0.0.1:0", 2).unwrap();
        let addr = hub.local_addr().unwrap();
        let served = std::thread::spawn(move || hub.serve(Duration::from_secs(20), &mut || Ok(())));
        let hello = |rank: u64| {
            let mut raw = TcpStream::connect(addr).unwrap();
            raw.write_all(&[HELLO]).unwrap();
            raw.write_all(&rank.to_le_bytes()).unwrap();
            raw.write_all(&2u64.to_le_bytes()).unwrap();
            raw
        };
        // Accepted in the order they connect.
        let mut first = hello(0);
        let _outside = hello(2);
        let hub = served.join().unwrap().unwrap_err().to_string();
        assert!(hub.contains("rank 2 in a group of 2"), "{hub}");
        assert_eq!(read_u8(&mut first).unwrap(), STOPPED);
        let why = String::from_utf8(read_text(&mut first).unwrap()).unwrap();
        assert!(why.contains("rank 2 in a group of 2"), "{why}");

        // A shared handle is a member.
        let (served, members) = group(1);
        let shared: Arc<TcpMember> = Arc::new(members.into_iter().next().unwrap());
        let boxed: Box<dyn Collective> = Box::new(shared.clone());
        let mut v = [2.5f32];
        boxed.all_reduce_sum(&mut v).unwrap();
        assert_eq!(v, [2.5]);
        boxed.finish();
        drop(boxed);
        shared.leave_with(b"ok").unwrap();
        assert_eq!(served.join().unwrap().unwrap(), vec![b"ok".to_vec()]);
    }
}
