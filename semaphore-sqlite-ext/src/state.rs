//! What the functions of one connection share: the store attached to its
//! file, and one `rusqlite` handle on the connection whose prepared
//! statements outlive a call.
//!
//! Compiling the store's statements anew at every call cost about two
//! thirds of a borrow and return (measured: about 3,300 pairs/s from
//! Python, mostly in SQLite's parser and planner). They are kept prepared
//! instead, and finalized when the program closes the connection: SQLite
//! tells a trace callback (`SQLITE_TRACE_CLOSE`) before it checks for
//! statements left open, so a close neither fails (`sqlite3_close`) nor
//! leaves the connection open as a zombie (`sqlite3_close_v2`, Python's).
//! A program that sets a trace callback of its own on the connection after
//! loading replaces this one; `SELECT semaphore_forget_statements()` then
//! finalizes them before its close.

use std::os::raw::{c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard};

use semaphore_sqlite::extension::Attached;
use semaphore_sqlite::rusqlite::{self, Connection, ffi};

pub(crate) struct State {
    pub(crate) attached: Attached,
    /// The connection, as `rusqlite` sees it, with its statement cache.
    /// Never closes it: made from the handle SQLite passed the extension.
    conn: Mutex<Connection>,
}

impl State {
    pub(crate) fn new(attached: Attached, conn: Connection) -> Self {
        Self {
            attached,
            conn: Mutex::new(conn),
        }
    }

    /// The connection with its statement cache; `None` while a call of
    /// this connection already holds it (a function called from within
    /// another's statement), which then prepares its own statements.
    pub(crate) fn connection(&self) -> Option<MutexGuard<'_, Connection>> {
        match self.conn.try_lock() {
            Ok(conn) => Some(conn),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Finalizes the prepared statements.
    pub(crate) fn forget_statements(&self) {
        if let Some(conn) = self.connection() {
            conn.flush_prepared_statement_cache();
        }
    }

    /// Asks SQLite to call [`on_close`] for `state`'s connection `db`.
    ///
    /// # Safety
    /// `db` is `state`'s connection, and `state` lives until SQLite frees
    /// the connection's functions (which hold it), after its last close.
    pub(crate) unsafe fn finalize_on_close(db: *mut ffi::sqlite3, state: *const State) {
        // SAFETY: as the caller promises; the callback takes the pointer back.
        unsafe {
            ffi::sqlite3_trace_v2(
                db,
                ffi::SQLITE_TRACE_CLOSE as c_uint,
                Some(on_close),
                state.cast_mut().cast::<c_void>(),
            );
        }
    }
}

unsafe extern "C" fn on_close(
    event: c_uint,
    ctx: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
) -> c_int {
    if event == ffi::SQLITE_TRACE_CLOSE as c_uint && !ctx.is_null() {
        // SAFETY: registered with a `State` that outlives the connection's
        // functions, which SQLite frees only after this close callback.
        let state = unsafe { &*ctx.cast_const().cast::<State>() };
        let _ =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| state.forget_statements()));
    }
    0
}

/// Runs `f` on the connection with its statement cache, or on the
/// context's own handle (statements compiled for this call) if a call is
/// already running on it.
///
/// # Errors
/// `SQLITE_ERROR` if a statement that writes is running on the
/// connection (`INSERT ... SELECT semaphore_borrow(...)`, `CREATE TABLE
/// ... AS`, `RETURNING`): SQLite lets no transaction begin, commit or take
/// a savepoint inside one, so the call could never succeed.
pub(crate) fn with_connection<T>(
    state: &State,
    ctx: &rusqlite::functions::Context<'_>,
    f: impl FnOnce(&Connection) -> T,
) -> rusqlite::Result<T> {
    let run = |conn: &Connection| {
        if writing(conn) {
            return Err(rusqlite::Error::SqliteFailure(
                ffi::Error::new(ffi::SQLITE_ERROR),
                Some(
                    "semaphore: the semaphore_ functions cannot run inside a statement that \
                     writes (INSERT ... SELECT, CREATE TABLE ... AS, RETURNING, a CHECK): call \
                     them in a SELECT of their own, inside your transaction if the lease and \
                     your write must commit together"
                        .into(),
                ),
            ));
        }
        Ok(f(conn))
    };
    if let Some(conn) = state.connection() {
        return run(&conn);
    }
    // SAFETY: used within this call only, as SQLite allows a function.
    let conn = unsafe { ctx.get_connection()? };
    run(&conn)
}

/// Whether a statement that writes is running on `conn`.
fn writing(conn: &Connection) -> bool {
    // SAFETY: the handle of a connection this call runs on; the list of
    // its statements is walked on the calling thread, which holds it.
    unsafe {
        let db = conn.handle();
        let mut stmt = ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
        while !stmt.is_null() {
            if ffi::sqlite3_stmt_busy(stmt) != 0 && ffi::sqlite3_stmt_readonly(stmt) == 0 {
                return true;
            }
            stmt = ffi::sqlite3_next_stmt(db, stmt);
        }
    }
    false
}
