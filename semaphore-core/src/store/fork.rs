//! [`ForkCheck`]: a store handle is its process's, never a forked
//! child's (rule "R16 whatever a process's children do").

use crate::error::{Error, Result};

/// The process a store handle was made in, so that the handle refuses to
/// work in a child that `fork()` made of that process.
///
/// A child made by `fork()` without `exec` (Python's `multiprocessing`
/// with its fork start method, a pre-fork server, `os.fork`) gets a copy of
/// every handle, but not the threads, timers and background tasks that
/// drive it: a call that must wait would never be woken, and a call that
/// writes would write on the parent's connections (interleaving with the
/// parent's own traffic) or as the parent's holder. So a store that shares
/// state with other processes checks it at each call
/// ([`check`](ForkCheck::check)) and fails at once with
/// [`Error::Forked`] in the child, before it sends or waits for anything:
/// never a hang, never a borrow made as the parent. The child makes a store
/// of its own instead. An in-process store (memory) needs no check: what
/// the child's copy holds is its own.
///
/// One `getpid` per check: a system call of well under a microsecond,
/// beside a store call's I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForkCheck {
    made_in: u32,
}

impl Default for ForkCheck {
    fn default() -> Self {
        Self::here()
    }
}

impl ForkCheck {
    /// The process running now: make it with the handle.
    pub fn here() -> Self {
        Self {
            made_in: std::process::id(),
        }
    }

    /// The id of the process the handle was made in.
    pub fn made_in(&self) -> u32 {
        self.made_in
    }

    /// `Ok` in the process the handle was made in.
    ///
    /// # Errors
    /// [`Error::Forked`], naming `operation` and both processes, in any
    /// other: a child that `fork()` made of it.
    pub fn check(&self, operation: &'static str) -> Result<()> {
        let used_in = std::process::id();
        if used_in == self.made_in {
            return Ok(());
        }
        Err(Error::Forked {
            operation,
            made_in: self.made_in,
            used_in,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_that_made_it_passes_and_another_fails_naming_both() {
        let here = ForkCheck::here();
        assert!(here.check("borrow").is_ok());
        let parent = ForkCheck {
            made_in: here.made_in() ^ 1,
        };
        let e = parent.check("borrow").unwrap_err();
        assert!(matches!(
            e,
            Error::Forked {
                operation: "borrow",
                ..
            }
        ));
        let text = e.to_string();
        assert!(text.contains(&parent.made_in().to_string()), "{text}");
        assert!(text.contains(&here.made_in().to_string()), "{text}");
        assert!(!e.is_retryable());
    }
}
