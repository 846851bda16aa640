//! How a write reaches the file: where its transaction runs (`placement`),
//! the writers' turn across processes (`writer`) and group commit, which
//! carries the writes that arrive while one transaction runs in the next
//! (`group`).

pub(crate) mod group;
pub(crate) mod placement;
pub(crate) mod writer;
