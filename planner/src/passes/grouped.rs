//! Values grouped by a small integer key (a tensor, a step), each group
//! in the order its values came: one flat list and where each key's
//! group starts, built by a counting sort. The passes that run on every
//! candidate plan group this way rather than keep a list per key, which
//! would be an allocation for every key with a value.

/// Values grouped by a key below a count, each group in the order its
/// values were given (a counting sort): one flat list, not a list per key.
pub struct Grouped<T> {
    /// Key `k`'s values: `values[start[k]..start[k + 1]]`.
    start: Vec<usize>,
    values: Vec<T>,
}

impl<T: Copy> Grouped<T> {
    pub fn new(keys: usize, pairs: impl IntoIterator<Item = (usize, T)>) -> Grouped<T> {
        let pairs: Vec<(usize, T)> = pairs.into_iter().collect();
        let mut start = vec![0usize; keys + 1];
        for &(key, _) in &pairs {
            start[key + 1] += 1;
        }
        for k in 0..keys {
            start[k + 1] += start[k];
        }
        // Every place is written below; the first value only fills them.
        let mut values = match pairs.first() {
            Some(&(_, value)) => vec![value; pairs.len()],
            None => Vec::new(),
        };
        let mut next = start.clone();
        for (key, value) in pairs {
            values[next[key]] = value;
            next[key] += 1;
        }
        Grouped { start, values }
    }

    pub fn of(&self, key: usize) -> &[T] {
        &self.values[self.start[key]..self.start[key + 1]]
    }

    pub fn of_mut(&mut self, key: usize) -> &mut [T] {
        &mut self.values[self.start[key]..self.start[key + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::Grouped;

    #[test]
    fn groups_keep_the_order_values_came_in_and_empty_keys_are_empty() {
        let mut grouped = Grouped::new(4, [(2, 'a'), (0, 'b'), (2, 'c'), (3, 'd'), (2, 'e')]);
        assert_eq!(grouped.of(0), ['b']);
        assert!(grouped.of(1).is_empty());
        assert_eq!(grouped.of(2), ['a', 'c', 'e']);
        assert_eq!(grouped.of(3), ['d']);
        grouped.of_mut(2).reverse();
        assert_eq!(grouped.of(2), ['e', 'c', 'a']);
        assert_eq!(grouped.of(3), ['d']);
        let none: Grouped<u8> = Grouped::new(2, []);
        assert!(none.of(0).is_empty() && none.of(1).is_empty());
    }
}
