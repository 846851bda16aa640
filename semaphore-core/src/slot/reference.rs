//! The reference rules of slot allocation, which every store must agree
//! with (the conformance suite checks that they do).

use crate::lease::Positions;

/// The reference rule for a grant: the lowest position in `0..count` not in `held`,
/// or `None` when every one of them is held.
///
/// `held` lists the positions of the active leases (expired leases are
/// not held); positions at or above `count` are ignored, since they are never
/// handed out. O(count). Stores may find the slot another way (in SQL, or
/// with [`SlotTable`](super::SlotTable)), but must agree with this function; the conformance
/// suite checks that they do.
///
/// ```
/// use semaphore_core::store::lowest_free;
/// assert_eq!(lowest_free(4, [0, 2]), Some(1));
/// assert_eq!(lowest_free(2, [0, 1, 5]), None);
/// assert_eq!(lowest_free(0, []), None);
/// ```
pub fn lowest_free(count: u32, held: impl IntoIterator<Item = u32>) -> Option<u32> {
    lowest_free_n(count, held, 1).map(|p| p.lowest())
}

/// The reference rule for a borrow of `n` slots: the `n` lowest
/// positions in `0..count` not in `held`, or `None` when fewer than `n` of
/// them are free (or `n` is 0).
///
/// As for [`lowest_free`], `held` lists the positions of the active leases,
/// and positions at or above `count` are ignored. A store grants only while
/// `in_use + n <= count`, which this function does not check: after a
/// lowered count, leases above it count in `in_use` but free nothing here.
///
/// ```
/// use semaphore_core::store::lowest_free_n;
/// assert_eq!(lowest_free_n(6, [0, 2], 3).as_deref(), Some(&[1, 3, 4][..]));
/// assert_eq!(lowest_free_n(3, [1], 3), None);
/// ```
pub fn lowest_free_n(count: u32, held: impl IntoIterator<Item = u32>, n: u32) -> Option<Positions> {
    let mut taken = vec![false; count as usize];
    for p in held {
        if let Some(t) = taken.get_mut(p as usize) {
            *t = true;
        }
    }
    let free: Vec<u32> = taken
        .iter()
        .enumerate()
        .filter(|(_, t)| !**t)
        .map(|(p, _)| p as u32)
        .take(n as usize)
        .collect();
    if free.len() < n as usize {
        return None;
    }
    Positions::new(free)
}
