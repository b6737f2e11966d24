//! A segment tree over steps: add a value to a range, ask the maximum of a
//! range. The planners keep one per tier to know, in O(log steps), whether
//! a change keeps every step within budget.

#[derive(Debug, Clone)]
pub struct MaxTree {
    len: usize,
    max: Vec<i64>,
    add: Vec<i64>,
}

impl MaxTree {
    pub fn new(values: &[i64]) -> MaxTree {
        let len = values.len().max(1);
        let mut tree = MaxTree {
            len,
            max: vec![0; 4 * len],
            add: vec![0; 4 * len],
        };
        if !values.is_empty() {
            tree.build(1, 0, len, values);
        }
        tree
    }

    fn build(&mut self, node: usize, lo: usize, hi: usize, values: &[i64]) {
        if hi - lo == 1 {
            self.max[node] = values[lo];
            return;
        }
        let mid = (lo + hi) / 2;
        self.build(2 * node, lo, mid, values);
        self.build(2 * node + 1, mid, hi, values);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]);
    }

    /// Adds `value` to every step in `[start, end)`.
    pub fn add(&mut self, start: usize, end: usize, value: i64) {
        if start < end && value != 0 {
            self.add_in(1, 0, self.len, start, end.min(self.len), value);
        }
    }

    fn add_in(&mut self, node: usize, lo: usize, hi: usize, start: usize, end: usize, value: i64) {
        if end <= lo || hi <= start {
            return;
        }
        if start <= lo && hi <= end {
            self.max[node] += value;
            self.add[node] += value;
            return;
        }
        let mid = (lo + hi) / 2;
        self.add_in(2 * node, lo, mid, start, end, value);
        self.add_in(2 * node + 1, mid, hi, start, end, value);
        self.max[node] = self.max[2 * node].max(self.max[2 * node + 1]) + self.add[node];
    }

    /// The maximum over `[start, end)`; `i64::MIN` for an empty range.
    pub fn max(&self, start: usize, end: usize) -> i64 {
        if start >= end.min(self.len) {
            return i64::MIN;
        }
        self.max_in(1, 0, self.len, start, end.min(self.len))
    }

    fn max_in(&self, node: usize, lo: usize, hi: usize, start: usize, end: usize) -> i64 {
        if end <= lo || hi <= start {
            return i64::MIN;
        }
        if start <= lo && hi <= end {
            return self.max[node];
        }
        let mid = (lo + hi) / 2;
        let best = self.max_in(2 * node, lo, mid, start, end).max(self.max_in(
            2 * node + 1,
            mid,
            hi,
            start,
            end,
        ));
        best + self.add[node]
    }

    pub fn get(&self, step: usize) -> i64 {
        self.max(step, step + 1)
    }

    /// The first step at or after `from` whose value exceeds `limit`.
    pub fn first_above(&self, from: usize, limit: i64) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        self.first_in(1, 0, self.len, from, limit, 0)
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
        let mut plain: Vec<i64> = (0..37).map(|i| (i * 7919) % 23).collect();
        let mut tree = MaxTree::new(&plain);
        let mut seed = 12345u64;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        for _ in 0..500 {
            let (a, b) = (next(38), next(38));
            let (start, end) = (a.min(b), a.max(b));
            let value = next(21) as i64 - 10;
            tree.add(start, end, value);
            for v in &mut plain[start..end] {
                *v += value;
            }
            let (a, b) = (next(38), next(38));
            let (start, end) = (a.min(b), a.max(b));
            let expected = plain[start..end].iter().copied().max().unwrap_or(i64::MIN);
            assert_eq!(tree.max(start, end), expected);
            let from = next(37);
            let limit = next(30) as i64 - 5;
            let expected = (from..plain.len()).find(|&i| plain[i] > limit);
            assert_eq!(tree.first_above(from, limit), expected);
        }
    }
}
