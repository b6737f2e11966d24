//! Buffers kept for reuse, by kind and size: the pinned host buffers of
//! the host tier's copies ([`super::device`]).
//!
//! Allocating and page-locking host memory costs more than the copy into
//! it, and every training iteration offloads the tensors the last one did.
//! A buffer given back is therefore kept, and a later copy of the same key
//! takes it. Buffers are freed only to stay under a cap: the bytes in use
//! and kept together never exceed the larger of the cap and the most ever
//! in use at once. Without a cap nothing is freed, and the buffers kept
//! are at most, per key, the most of that key ever in use at once, so
//! that from the second iteration of a plan on, no copy allocates.
//!
//! Capping at the most in use at once alone (with no cap of its own) is
//! not enough: when the keys in use change over an iteration (the forward
//! pass offloads wide activations, the backward narrower gradients), each
//! new key's buffer would free another key's, and every iteration would
//! allocate them all again.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

/// Kept buffers of type `T` by key `K`.
pub(crate) struct Keeper<K, T> {
    inner: Mutex<Inner<K, T>>,
}

struct Inner<K, T> {
    free: HashMap<K, Vec<(u64, T)>>,
    free_bytes: u64,
    in_use_bytes: u64,
    peak_in_use_bytes: u64,
    /// At most this many bytes in use and kept (beyond the most in use
    /// at once); `None`: no cap.
    cap_bytes: Option<u64>,
    /// Buffers lent that were not taken from the kept ones.
    allocations: u64,
}

impl<K: Hash + Eq + Copy, T> Keeper<K, T> {
    pub(crate) fn new(cap_bytes: Option<u64>) -> Keeper<K, T> {
        Keeper {
            inner: Mutex::new(Inner {
                free: HashMap::new(),
                free_bytes: 0,
                in_use_bytes: 0,
                peak_in_use_bytes: 0,
                cap_bytes,
                allocations: 0,
            }),
        }
    }

    /// A kept buffer of `key`, if any.
    pub(crate) fn take(&self, key: K) -> Option<T> {
        let mut inner = self.inner.lock().ok()?;
        let (bytes, buffer) = inner.free.get_mut(&key)?.pop()?;
        inner.free_bytes -= bytes;
        Some(buffer)
    }

    /// Counts a buffer of `key` and `bytes` as in use (`allocated`: not
    /// one [`Keeper::take`] returned), and hands back the kept buffers to
    /// free to stay under the cap, other keys' first. The caller drops
    /// them, outside the lock.
    pub(crate) fn lend(&self, key: K, bytes: u64, allocated: bool) -> Vec<T> {
        let Ok(mut inner) = self.inner.lock() else {
            return Vec::new();
        };
        inner.in_use_bytes += bytes;
        inner.peak_in_use_bytes = inner.peak_in_use_bytes.max(inner.in_use_bytes);
        inner.allocations += u64::from(allocated);
        let Some(cap) = inner.cap_bytes else {
            return Vec::new();
        };
        let limit = cap.max(inner.peak_in_use_bytes);
        let mut evicted = Vec::new();
        while inner.in_use_bytes + inner.free_bytes > limit {
            let other = inner
                .free
                .iter()
                .find(|(k, v)| **k != key && !v.is_empty())
                .map(|(k, _)| *k);
            let victim = other.unwrap_or(key);
            let Some((freed, buffer)) = inner.free.get_mut(&victim).and_then(Vec::pop) else {
                break;
            };
            inner.free_bytes -= freed;
            evicted.push(buffer);
        }
        evicted
    }

    /// Takes back a buffer of `key` and `bytes` that was in use, and
    /// keeps it.
    pub(crate) fn give_back(&self, key: K, bytes: u64, buffer: T) {
        // A poisoned lock only loses the buffer to reuse; it is freed.
        if let Ok(mut inner) = self.inner.lock() {
            inner.in_use_bytes = inner.in_use_bytes.saturating_sub(bytes);
            inner.free_bytes += bytes;
            inner.free.entry(key).or_default().push((bytes, buffer));
        }
    }

    /// Buffers lent so far that had to be allocated.
    #[cfg(test)]
    pub(crate) fn allocations(&self) -> u64 {
        self.inner.lock().map_or(0, |inner| inner.allocations)
    }

    /// Bytes in use and kept.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> u64 {
        self.inner
            .lock()
            .map_or(0, |inner| inner.in_use_bytes + inner.free_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One iteration's copies, as an offloading plan makes them: three
    /// wide buffers at once in the forward pass, then, once they are
    /// back, two narrow ones at once. Each buffer is taken (or
    /// allocated) and lent, then given back.
    fn iteration(keeper: &Keeper<u64, Vec<u8>>) {
        let mut lent = Vec::new();
        for (key, at_once) in [(256u64, 3usize), (47, 2)] {
            for _ in 0..at_once {
                let (buffer, allocated) = match keeper.take(key) {
                    Some(buffer) => (buffer, false),
                    None => (vec![0u8; key as usize], true),
                };
                drop(keeper.lend(key, key, allocated));
                lent.push((key, buffer));
            }
            for (key, buffer) in lent.drain(..) {
                keeper.give_back(key, key, buffer);
            }
        }
    }

    #[test]
    fn from_the_second_iteration_on_nothing_is_allocated() {
        for cap in [None, Some(10_000)] {
            let keeper = Keeper::new(cap);
            iteration(&keeper);
            assert_eq!(keeper.allocations(), 5, "{cap:?}");
            for _ in 0..3 {
                iteration(&keeper);
            }
            assert_eq!(keeper.allocations(), 5, "{cap:?}");
            assert_eq!(keeper.held_bytes(), 3 * 256 + 2 * 47);
        }
    }

    #[test]
    fn a_cap_at_the_most_in_use_frees_and_allocates_every_iteration() {
        // The cap below what the keys need together: buffers are freed to
        // stay under it (at most the most in use at once, 768 bytes).
        let keeper = Keeper::new(Some(0));
        for _ in 0..4 {
            iteration(&keeper);
            assert!(keeper.held_bytes() <= 3 * 256, "{}", keeper.held_bytes());
        }
        // The narrow buffers free a wide one, which the next forward pass
        // allocates again (and that frees the narrow ones).
        assert!(keeper.allocations() > 5, "{}", keeper.allocations());
    }

    #[test]
    fn other_keys_are_freed_first() {
        let keeper: Keeper<u64, u64> = Keeper::new(Some(100));
        for key in [40, 50] {
            drop(keeper.lend(key, key, true));
            keeper.give_back(key, key, key);
        }
        // 90 kept; a buffer of 30 in use makes 120: one of 40 or 50 must go,
        // and a 30 is not among them.
        let evicted = keeper.lend(30, 30, true);
        assert_eq!(evicted.len(), 1);
        assert!(evicted[0] == 40 || evicted[0] == 50);
        assert!(keeper.held_bytes() <= 100);
        let kept = [keeper.take(40), keeper.take(50)];
        assert_eq!(kept.iter().flatten().count(), 1, "{kept:?}");
    }
}
