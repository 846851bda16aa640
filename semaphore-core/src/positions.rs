//! [`Positions`]: the slots one lease holds.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// The positions a [`Lease`](crate::Lease) holds, lowest first, never
/// empty: one for a plain borrow, `n` for a borrow of `n` slots.
///
/// Derefs to `[u32]`. A single position is kept inline (no allocation, as
/// a plain borrow must stay cheap); several share one allocation, so a
/// clone is cheap either way.
///
/// ```
/// use semaphore_core::Positions;
///
/// let one = Positions::one(3);
/// assert_eq!(&one[..], &[3]);
/// let two = Positions::new(vec![4, 1]).unwrap();
/// assert_eq!(&two[..], &[1, 4]); // sorted, lowest first
/// assert_eq!(two.lowest(), 1);
/// assert_eq!(two.to_string(), "1,4");
/// assert!(Positions::new(vec![]).is_none());
/// assert!(Positions::new(vec![2, 2]).is_none());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Positions(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    One(u32),
    Many(Arc<[u32]>),
}

impl Positions {
    /// The single position `position`.
    #[inline]
    pub fn one(position: u32) -> Self {
        Self(Repr::One(position))
    }

    /// The positions in `positions`, sorted; `None` if there are none or
    /// one appears twice.
    pub fn new(mut positions: Vec<u32>) -> Option<Self> {
        positions.sort_unstable();
        if positions.is_empty() || positions.windows(2).any(|w| w[0] == w[1]) {
            return None;
        }
        Some(match positions[..] {
            [one] => Self::one(one),
            _ => Self(Repr::Many(positions.into())),
        })
    }

    /// The lowest position: [`Lease::position`](crate::Lease::position).
    #[inline]
    pub fn lowest(&self) -> u32 {
        match &self.0 {
            Repr::One(p) => *p,
            Repr::Many(ps) => ps[0],
        }
    }
}

impl Deref for Positions {
    type Target = [u32];

    #[inline]
    fn deref(&self) -> &[u32] {
        match &self.0 {
            Repr::One(p) => std::slice::from_ref(p),
            Repr::Many(ps) => ps,
        }
    }
}

impl fmt::Debug for Positions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The positions separated by commas, as `SEMAPHORE_POSITIONS` has them:
/// `0,1`.
impl fmt::Display for Positions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Positions {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Positions {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let positions = Vec::<u32>::deserialize(deserializer)?;
        Positions::new(positions).ok_or_else(|| {
            serde::de::Error::custom("positions must be one or more distinct slot numbers")
        })
    }
}
