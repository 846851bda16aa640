//! The free positions below a slot table's high mark, as a bitset.

/// A set of positions as a bitset: bit `p` is set when `p` is free.
#[derive(Debug, Clone, Default)]
pub(super) struct FreeSet(Vec<u64>);

impl FreeSet {
    #[inline]
    pub(super) fn insert(&mut self, p: u32) {
        let (word, bit) = (p as usize / 64, p % 64);
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << bit;
    }

    pub(super) fn remove(&mut self, p: u32) {
        if let Some(w) = self.0.get_mut(p as usize / 64) {
            *w &= !(1 << (p % 64));
        }
    }

    /// Removes the lowest position in the set, if any, and returns it.
    #[inline]
    pub(super) fn take_first(&mut self) -> Option<u32> {
        let (i, w) = self.0.iter_mut().enumerate().find(|(_, w)| **w != 0)?;
        let bit = w.trailing_zeros();
        *w &= *w - 1;
        Some(i as u32 * 64 + bit)
    }

    /// The positions in the set, lowest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros();
                w &= w - 1;
                Some(i as u32 * 64 + bit)
            })
        })
    }

    /// Removes every position at or above `end`, and the words that
    /// held only such positions.
    pub(super) fn truncate(&mut self, end: u32) {
        let (word, bit) = (end as usize / 64, end % 64);
        if let Some(w) = self.0.get_mut(word) {
            *w &= (1u64 << bit) - 1;
        }
        self.0.truncate(word + usize::from(bit != 0));
    }

    /// The words allocated, for tests of memory use.
    #[cfg(test)]
    pub(super) fn words(&self) -> usize {
        self.0.capacity()
    }

    /// The words in use.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}
