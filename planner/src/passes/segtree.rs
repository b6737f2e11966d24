//! A segment tree over steps: add a value to a range, ask the maximum of a
//! range. The planners keep one per tier to know, in O(log steps), whether
//! a change keeps every step within budget.

/// Padding leaves beyond the steps: low enough never to be a maximum,
/// high enough that the adds never overflow it.
const PAD: i64 = i64::MIN / 4;

/// Bottom-up (iterative) over a power-of-two number of leaves. Node `i`
/// has children `2i` and `2i + 1`; leaves are `n..2n`. `max[i]` is the
/// subtree's maximum with the adds at `i` and below; `add[i]` (internal
/// nodes) is what was added to the whole subtree at `i`. A leaf's value
/// is its `max` plus the adds of its ancestors.
#[derive(Debug, Clone)]
pub struct MaxTree {
    len: usize,
    /// Leaves: a power of two, at least `len`.
    n: usize,
    max: Vec<i64>,
    add: Vec<i64>,
}

impl MaxTree {
    pub fn new(values: &[i64]) -> MaxTree {
        let len = values.len().max(1);
        let n = len.next_power_of_two();
        let mut max = vec![PAD; 2 * n];
        max[n..n + values.len()].copy_from_slice(values);
        for i in (1..n).rev() {
            max[i] = max[2 * i].max(max[2 * i + 1]);
        }
        MaxTree {
            len,
            n,
            max,
            add: vec![0; n],
        }
    }

    /// Recomputes the ancestors of leaves `a` and `b` (`a <= b`) from
    /// their children, the shared ones once.
    fn rebuild(&mut self, mut a: usize, mut b: usize) {
        while a > 1 {
            a >>= 1;
            b >>= 1;
            self.max[a] = self.max[2 * a].max(self.max[2 * a + 1]) + self.add[a];
            if b != a {
                self.max[b] = self.max[2 * b].max(self.max[2 * b + 1]) + self.add[b];
            }
        }
    }

    /// Adds `value` to every step in `[start, end)`.
    pub fn add(&mut self, start: usize, end: usize, value: i64) {
        let end = end.min(self.len);
        if start >= end || value == 0 {
            return;
        }
        let (mut l, mut r) = (start + self.n, end + self.n);
        let (first, last) = (l, r - 1);
        while l < r {
            if l & 1 == 1 {
                self.apply(l, value);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                self.apply(r, value);
            }
            l >>= 1;
            r >>= 1;
        }
        self.rebuild(first, last);
    }

    fn apply(&mut self, node: usize, value: i64) {
        self.max[node] += value;
        if node < self.n {
            self.add[node] += value;
        }
    }

    /// The maximum over `[start, end)`; `i64::MIN` for an empty range.
    pub fn max(&self, start: usize, end: usize) -> i64 {
        let end = end.min(self.len);
        if start >= end {
            return i64::MIN;
        }
        // Once a node is taken on the left, all taken there lie under
        // `l - 1` after `l` moves up a level, and those on the right under
        // `r`: those nodes' adds are owed.
        let (mut l, mut r) = (start + self.n, end + self.n);
        let (mut left, mut right) = (None::<i64>, None::<i64>);
        while l < r {
            if l & 1 == 1 {
                left = Some(left.map_or(self.max[l], |v| v.max(self.max[l])));
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                right = Some(right.map_or(self.max[r], |v| v.max(self.max[r])));
            }
            l >>= 1;
            r >>= 1;
            if let Some(v) = &mut left {
                *v += self.add[l - 1];
            }
            if let Some(v) = &mut right {
                *v += self.add[r];
            }
        }
        // The rest of the way up, from the nodes the two sides lie under.
        let owed = |mut node: usize| {
            let mut sum = 0;
            while node > 1 {
                node >>= 1;
                sum += self.add[node];
            }
            sum
        };
        let left = left.map(|v| v + owed(l - 1));
        let right = right.map(|v| v + owed(r));
        left.max(right).unwrap_or(i64::MIN)
    }

    /// The value at one step.
    pub fn get(&self, step: usize) -> i64 {
        let mut node = step + self.n;
        let mut value = self.max[node];
        while node > 1 {
            node >>= 1;
            value += self.add[node];
        }
        value
    }

    /// The first step at or after `from` whose value exceeds `limit`.
    pub fn first_above(&self, from: usize, limit: i64) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        self.first_in(1, 0, self.n, from, limit, 0)
    }

    fn first_in(
        &self,
        node: usize,
        lo: usize,
        hi: usize,
        from: usize,
        limit: i64,
        carried: i64,
    ) -> Option<usize> {
        if hi <= from || self.max[node] + carried <= limit {
            return None;
        }
        if hi - lo == 1 {
            return Some(lo);
        }
        let mid = (lo + hi) / 2;
        let carried = carried + self.add[node];
        self.first_in(2 * node, lo, mid, from, limit, carried)
            .or_else(|| self.first_in(2 * node + 1, mid, hi, from, limit, carried))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_a_plain_array() {
        // Lengths below, at and above powers of two (the leaves are padded
        // to one).
        for len in [1usize, 2, 3, 32, 37, 64, 65] {
            agrees_at(len);
        }
    }

    fn agrees_at(len: usize) {
        let mut plain: Vec<i64> = (0..len as i64).map(|i| (i * 7919) % 23).collect();
        let mut tree = MaxTree::new(&plain);
        let mut seed = 12345u64 + len as u64;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        for _ in 0..500 {
            let (a, b) = (next(len + 1), next(len + 1));
            let (start, end) = (a.min(b), a.max(b));
            let value = next(21) as i64 - 10;
            tree.add(start, end, value);
            for v in &mut plain[start..end] {
                *v += value;
            }
            let (a, b) = (next(len + 1), next(len + 1));
            let (start, end) = (a.min(b), a.max(b));
            let expected = plain[start..end].iter().copied().max().unwrap_or(i64::MIN);
            assert_eq!(tree.max(start, end), expected, "len {len} [{start}, {end})");
            let at = next(len);
            assert_eq!(tree.get(at), plain[at], "len {len} step {at}");
            let from = next(len);
            let limit = next(30) as i64 - 5;
            let expected = (from..plain.len()).find(|&i| plain[i] > limit);
            assert_eq!(tree.first_above(from, limit), expected);
        }
    }
}
