//! Free-space map of the spill file: aligned extents, first fit by offset,
//! neighbours merged on free.
//!
//! A block may take several extents when free space is fragmented, so any
//! write that fits the byte budget finds room: the budget check is the
//! only admission test.

use std::collections::BTreeMap;

/// A run of the spill file: `[offset, offset + len)`, both aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub offset: u64,
    pub len: u64,
}

pub(crate) struct Extents {
    /// Free runs, keyed by offset; never adjacent (merged on free).
    free: BTreeMap<u64, u64>,
    free_bytes: u64,
}

impl Extents {
    /// All of `[0, capacity_bytes)` free.
    pub fn new(capacity_bytes: u64) -> Extents {
        let mut free = BTreeMap::new();
        if capacity_bytes > 0 {
            free.insert(0, capacity_bytes);
        }
        Extents {
            free,
            free_bytes: capacity_bytes,
        }
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Takes `bytes` (aligned) from the lowest free offsets; `None` (and
    /// nothing taken) when fewer bytes are free.
    pub fn allocate(&mut self, bytes: u64) -> Option<Vec<Extent>> {
        if bytes > self.free_bytes {
            return None;
        }
        let mut taken = Vec::new();
        let mut remaining = bytes;
        // Bounded: each pass consumes one free run or finishes.
        while remaining > 0 {
            let (&offset, &len) = self.free.iter().next()?;
            self.free.remove(&offset);
            let used = len.min(remaining);
            if used < len {
                self.free.insert(offset + used, len - used);
            }
            taken.push(Extent { offset, len: used });
            remaining -= used;
        }
        self.free_bytes -= bytes;
        Some(taken)
    }

    /// Returns an extent, merging it with free neighbours.
    pub fn release(&mut self, extent: Extent) {
        if extent.len == 0 {
            return;
        }
        let mut offset = extent.offset;
        let mut len = extent.len;
        if let Some((&prev_offset, &prev_len)) = self.free.range(..offset).next_back() {
            debug_assert!(
                prev_offset + prev_len <= offset,
                "double free in the spill file"
            );
            if prev_offset + prev_len == offset {
                self.free.remove(&prev_offset);
                offset = prev_offset;
                len += prev_len;
            }
        }
        if let Some(&next_len) = self.free.get(&(extent.offset + extent.len)) {
            self.free.remove(&(extent.offset + extent.len));
            len += next_len;
        }
        self.free.insert(offset, len);
        self.free_bytes += extent.len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_split_and_merge() {
        let mut map = Extents::new(10 * 4096);
        let a = map.allocate(3 * 4096).unwrap();
        let b = map.allocate(2 * 4096).unwrap();
        let c = map.allocate(4 * 4096).unwrap();
        assert_eq!(
            a,
            vec![Extent {
                offset: 0,
                len: 3 * 4096
            }]
        );
        assert_eq!(c[0].offset, 5 * 4096);
        assert!(map.allocate(2 * 4096).is_none());
        map.release(a[0]);
        map.release(c[0]);
        // Fragmented: 3 blocks at 0, 5 blocks at 5; a 6-block request spans both.
        let d = map.allocate(6 * 4096).unwrap();
        assert_eq!(
            d,
            vec![
                Extent {
                    offset: 0,
                    len: 3 * 4096
                },
                Extent {
                    offset: 5 * 4096,
                    len: 3 * 4096
                }
            ]
        );
        for extent in b.into_iter().chain(d) {
            map.release(extent);
        }
        assert_eq!(map.free_bytes(), 10 * 4096);
        assert_eq!(map.free.len(), 1, "all free runs merged: {:?}", map.free);
    }
}
