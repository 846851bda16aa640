//! Exit codes (sysexits.h, and the shell's for commands), and the error
//! that carries one with its message.

use semaphore_core::Error;

/// The codes `semaphore` exits with.
pub(crate) mod code {
    /// A usage error (EX_USAGE).
    pub(crate) const USAGE: u8 = 64;
    /// An input file cannot be read (EX_NOINPUT).
    pub(crate) const NOINPUT: u8 = 66;
    /// The pool does not exist (EX_UNAVAILABLE).
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// The lease was lost while the command ran (EX_SOFTWARE).
    pub(crate) const LEASE_LOST: u8 = 70;
    /// An internal failure (EX_SOFTWARE).
    pub(crate) const SOFTWARE: u8 = 70;
    /// The store failed (EX_IOERR).
    pub(crate) const IOERR: u8 = 74;
    /// No slot freed up within the wait (EX_TEMPFAIL).
    pub(crate) const TEMPFAIL: u8 = 75;
    /// The command cannot be executed.
    pub(crate) const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub(crate) const NOT_FOUND: u8 = 127;
}

/// Why `semaphore` stops: a message for standard error and an exit code.
#[derive(Debug)]
pub(crate) struct Exit {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Exit {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// No slot of pool `name` freed up within `waited`: 75, or the code the
    /// user chose with `-E`.
    pub(crate) fn exhausted(name: &str, waited: std::time::Duration, chosen: Option<u8>) -> Self {
        Self::new(
            chosen.unwrap_or(code::TEMPFAIL),
            format!(
                "no slot of pool {} freed up within {}",
                crate::shown::escaped(name),
                humantime::format_duration(waited)
            ),
        )
    }

    /// A store's error: 69 for no pool, 64 for bad input, 74 otherwise,
    /// saying whether a retry may help.
    pub(crate) fn from_store(e: Error) -> Self {
        match &e {
            Error::PoolNotFound { .. } => Self::new(
                code::UNAVAILABLE,
                format!("{e} (or pass --count to register it)"),
            ),
            Error::InvalidArgument { .. } => Self::new(code::USAGE, e.to_string()),
            Error::Draining { .. } => Self::new(code::TEMPFAIL, e.to_string()),
            Error::Storage { retryable, .. } => Self::new(
                code::IOERR,
                format!(
                    "{}; {}",
                    e.chain(),
                    if *retryable {
                        "a retry may help"
                    } else {
                        "a retry will not help"
                    }
                ),
            ),
            _ => Self::new(code::IOERR, e.chain().to_string()),
        }
    }
}
