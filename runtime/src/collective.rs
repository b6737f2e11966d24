//! Collectives between the devices of a multi-device run: the boundary
//! exchange (all-to-all) and the sums (all-reduce) of data-parallel
//! full-graph training.
//!
//! [`Collective`] is what a backend calls; [`LocalGroup`] implements it for
//! devices that are threads of one process (the CPU backend's devices),
//! through shared memory, and [`TcpMember`] for devices that are
//! processes, joined through a [`Hub`] that routes their calls over TCP. Every member must make the same calls in the same
//! order: a member that fails or leaves early aborts the group, a call
//! that waits for a member that has finished fails, and a call that meets
//! another kind of call fails; none waits for ever.
//!
//! Sums are taken in rank order on every member, so every member gets the
//! same bits.

use std::any::Any;
use std::sync::{Arc, Condvar, Mutex};

use crate::exec::ExecError;

mod tcp;
pub use tcp::{Hub, TcpMember};

/// The calls a multi-device backend makes. Each blocks until every member
/// of the group has made it.
pub trait Collective: Send + Sync {
    /// This member's index, `0..size()`.
    fn rank(&self) -> usize;
    /// Members of the group.
    fn size(&self) -> usize;
    /// Sends `sends[e]` to member `e` (this member's own entry comes back
    /// to it) and returns, per member, what it sent to this one.
    fn all_to_all(&self, sends: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, ExecError>;
    /// Replaces `values` by their sum over all members, in rank order.
    fn all_reduce_sum(&self, values: &mut [f32]) -> Result<(), ExecError>;
    /// [`Collective::all_reduce_sum`] in f64 (metrics: losses and counts).
    fn all_reduce_sum_f64(&self, values: &mut [f64]) -> Result<(), ExecError>;
    /// Tells the other members that this one will make no more calls
    /// because it failed: their pending and later calls fail.
    fn abort(&self, why: &str);
    /// Tells the group this member made its last call and leaves
    /// normally.
    fn finish(&self);
}

/// A shared handle is a member too (a launcher keeps one to hand over
/// the member's result after its backend made its last call).
impl<C: Collective + ?Sized> Collective for Arc<C> {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn size(&self) -> usize {
        (**self).size()
    }
    fn all_to_all(&self, sends: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, ExecError> {
        (**self).all_to_all(sends)
    }
    fn all_reduce_sum(&self, values: &mut [f32]) -> Result<(), ExecError> {
        (**self).all_reduce_sum(values)
    }
    fn all_reduce_sum_f64(&self, values: &mut [f64]) -> Result<(), ExecError> {
        (**self).all_reduce_sum_f64(values)
    }
    fn abort(&self, why: &str) {
        (**self).abort(why)
    }
    fn finish(&self) {
        (**self).finish()
    }
}

/// A sum's contribution: its own type, so that a sum meeting an
/// all-to-all is caught.
#[derive(Clone)]
struct Summand<T>(Vec<T>);

/// One round's mailboxes: `boxes[from][to]`.
struct Round {
    /// Members that have put their sends in this round.
    deposited: usize,
    /// Members that have taken what was sent to them.
    taken: usize,
    /// Every member has deposited; the round is being emptied.
    draining: bool,
    boxes: Vec<Vec<Option<Box<dyn Any + Send>>>>,
    /// Why the group stopped, when a member aborted or left early.
    aborted: Option<String>,
    /// Members that finished their run normally: a round that still waits
    /// for one of them is out of step.
    finished: usize,
}

struct Shared {
    size: usize,
    round: Mutex<Round>,
    changed: Condvar,
}

/// A member of a group of devices in one process.
pub struct LocalGroup {
    shared: Arc<Shared>,
    rank: usize,
    /// Whether this member finished normally (see `Drop`).
    finished: std::sync::atomic::AtomicBool,
}

impl LocalGroup {
    /// A group of `size` members, one handle per member, in rank order.
    pub fn new(size: usize) -> Vec<LocalGroup> {
        let shared = Arc::new(Shared {
            size,
            round: Mutex::new(Round {
                deposited: 0,
                taken: 0,
                draining: false,
                boxes: (0..size)
                    .map(|_| (0..size).map(|_| None).collect())
                    .collect(),
                aborted: None,
                finished: 0,
            }),
            changed: Condvar::new(),
        });
        (0..size)
            .map(|rank| LocalGroup {
                shared: shared.clone(),
                rank,
                finished: false.into(),
            })
            .collect()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Round>, ExecError> {
        self.shared
            .round
            .lock()
            .map_err(|_| ExecError::Exchange("a member panicked during an exchange".into()))
    }

    fn wait<'a>(
        &self,
        guard: std::sync::MutexGuard<'a, Round>,
    ) -> Result<std::sync::MutexGuard<'a, Round>, ExecError> {
        self.shared
            .changed
            .wait(guard)
            .map_err(|_| ExecError::Exchange("a member panicked during an exchange".into()))
    }

    /// One round: puts `sends[e]` in member `e`'s box and returns what
    /// every member put in this one's.
    fn round<T: Send + 'static>(&self, sends: Vec<T>) -> Result<Vec<T>, ExecError> {
        let size = self.shared.size;
        if sends.len() != size {
            return Err(ExecError::Internal(format!(
                "{} sends for a group of {size}",
                sends.len()
            )));
        }
        let stopped = |why: &str| ExecError::Exchange(format!("the group stopped: {why}"));
        let out_of_step = |finished: usize| {
            ExecError::Exchange(format!(
                "member {} exchanges after {finished} member(s) finished their run: the members' \
                 calls are out of step",
                self.rank
            ))
        };
        let mut round = self.lock()?;
        // The previous round may still be emptying.
        while round.draining && round.aborted.is_none() {
            round = self.wait(round)?;
        }
        if let Some(why) = &round.aborted {
            return Err(stopped(why));
        }
        if round.finished > 0 {
            return Err(out_of_step(round.finished));
        }
        for (to, value) in sends.into_iter().enumerate() {
            round.boxes[self.rank][to] = Some(Box::new(value));
        }
        round.deposited += 1;
        if round.deposited == size {
            round.draining = true;
            self.shared.changed.notify_all();
        }
        while !round.draining && round.aborted.is_none() && round.finished == 0 {
            round = self.wait(round)?;
        }
        if let Some(why) = &round.aborted {
            return Err(stopped(why));
        }
        if !round.draining {
            return Err(out_of_step(round.finished));
        }
        let mut received = Vec::with_capacity(size);
        for from in 0..size {
            let value = round.boxes[from][self.rank]
                .take()
                .and_then(|b| b.downcast::<T>().ok())
                .ok_or_else(|| {
                    ExecError::Internal(format!(
                        "member {from} sent member {} another kind of data: the members' calls \
                         are out of step",
                        self.rank
                    ))
                })?;
            received.push(*value);
        }
        round.taken += 1;
        if round.taken == size {
            round.deposited = 0;
            round.taken = 0;
            round.draining = false;
            self.shared.changed.notify_all();
        }
        Ok(received)
    }

    fn sum<T: Copy + Send + std::ops::AddAssign + 'static>(
        &self,
        values: &mut [T],
    ) -> Result<(), ExecError> {
        let sends = vec![Summand(values.to_vec()); self.shared.size];
        let parts = self.round(sends)?;
        if let Some((from, part)) = parts
            .iter()
            .enumerate()
            .find(|(_, p)| p.0.len() != values.len())
        {
            return Err(ExecError::Exchange(format!(
                "member {from} summed {} values with member {}'s {}: the members' calls are out \
                 of step",
                part.0.len(),
                self.rank,
                values.len()
            )));
        }
        let (first, rest) = parts.split_first().expect("a group has a member");
        values.copy_from_slice(&first.0);
        for part in rest {
            for (v, p) in values.iter_mut().zip(&part.0) {
                *v += *p;
            }
        }
        Ok(())
    }
}

impl Collective for LocalGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn all_to_all(&self, sends: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, ExecError> {
        self.round(sends)
    }

    fn all_reduce_sum(&self, values: &mut [f32]) -> Result<(), ExecError> {
        self.sum(values)
    }

    fn all_reduce_sum_f64(&self, values: &mut [f64]) -> Result<(), ExecError> {
        self.sum(values)
    }

    fn abort(&self, why: &str) {
        // Aborting must work even when another member panicked holding
        // the lock.
        let mut round = match self.shared.round.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if round.aborted.is_none() {
            round.aborted = Some(format!("member {} failed: {why}", self.rank));
        }
        self.shared.changed.notify_all();
    }

    /// Dropping the member afterwards does not abort the group; a round
    /// that waits for it fails.
    fn finish(&self) {
        if self
            .finished
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let mut round = match self.shared.round.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        round.finished += 1;
        self.shared.changed.notify_all();
    }
}

impl Drop for LocalGroup {
    /// A member dropped before [`LocalGroup::finish`] (an error or a panic
    /// unwinding its thread) aborts the group, so no other member waits
    /// for it for ever.
    fn drop(&mut self) {
        if !self.finished.load(std::sync::atomic::Ordering::Relaxed) {
            self.abort("it stopped before the end of the run");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_to_all_delivers_each_members_sends() {
        let group = LocalGroup::new(3);
        let got: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .iter()
                .map(|m| {
                    s.spawn(move || {
                        let mut all = Vec::new();
                        // Several rounds, to exercise the reuse of the boxes.
                        for round in 0..5 {
                            let sends = (0..3)
                                .map(|to| vec![(m.rank() * 10 + to) as f32 + round as f32 * 100.0])
                                .collect();
                            all = m.all_to_all(sends).unwrap();
                        }
                        m.finish();
                        all
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, received) in got.iter().enumerate() {
            for (from, values) in received.iter().enumerate() {
                assert_eq!(values, &vec![(from * 10 + rank) as f32 + 400.0]);
            }
        }
    }

    #[test]
    fn sums_are_the_same_bits_everywhere() {
        let group = LocalGroup::new(4);
        let sums: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = group
                .iter()
                .map(|m| {
                    s.spawn(move || {
                        let mut v: Vec<f32> = (0..7)
                            .map(|k| 0.1 * (k + 1) as f32 / (m.rank() + 1) as f32)
                            .collect();
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
        let expected: Vec<f32> = (0..7)
            .map(|k| (0..4).fold(0.0f32, |acc, r| acc + 0.1 * (k + 1) as f32 / (r + 1) as f32))
            .collect();
        for sum in &sums {
            assert_eq!(sum, &expected);
        }
    }

    #[test]
    fn calls_out_of_step_fail_instead_of_waiting() {
        // A member that finished while another still exchanges.
        let mut group = LocalGroup::new(2);
        let late = group.pop().unwrap();
        let done = group.pop().unwrap();
        let waiting = std::thread::spawn(move || late.all_to_all(vec![vec![1.0], vec![2.0]]));
        done.finish();
        let error = waiting.join().unwrap().unwrap_err();
        assert!(error.to_string().contains("out of step"), "{error}");

        // A sum meeting an all-to-all, and sums of different lengths.
        for lengths in [None, Some(3)] {
            let group = LocalGroup::new(2);
            let errors: Vec<String> = std::thread::scope(|s| {
                let a = s.spawn(|| {
                    let mut v = vec![1.0f32; 2];
                    group[0].all_reduce_sum(&mut v).map(|_| ())
                });
                let b = s.spawn(|| match lengths {
                    None => group[1].all_to_all(vec![vec![1.0], vec![2.0]]).map(|_| ()),
                    Some(n) => group[1].all_reduce_sum(&mut vec![1.0f32; n]),
                });
                [a.join().unwrap(), b.join().unwrap()]
                    .into_iter()
                    .filter_map(|r| r.err().map(|e| e.to_string()))
                    .collect()
            });
            assert!(
                errors.iter().any(|e| e.contains("out of step")),
                "{lengths:?}: {errors:?}"
            );
        }
    }

    #[test]
    fn a_member_that_leaves_early_stops_the_others() {
        let mut group = LocalGroup::new(2);
        let leaver = group.pop().unwrap();
        let stayer = group.pop().unwrap();
        let waiting = std::thread::spawn(move || {
            let mut v = vec![1.0f32];
            stayer.all_reduce_sum(&mut v)
        });
        drop(leaver);
        let error = waiting.join().unwrap().unwrap_err();
        assert!(
            error.to_string().contains("member 1 failed"),
            "unexpected error: {error}"
        );
    }
}
