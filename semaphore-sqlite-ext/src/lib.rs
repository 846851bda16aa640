#![doc = include_str!("../README.md")]

use std::os::raw::{c_char, c_int};
use std::sync::Arc;

use semaphore_sqlite::extension::Attached;
use semaphore_sqlite::rusqlite::{self, Connection, ffi};

mod args;
mod functions;
mod host;
mod json;
mod state;

/// The entry point SQLite calls when a program loads the extension
/// (`sqlite3_load_extension`, Python's `Connection.load_extension`, the
/// shell's `.load`): checks the file's tables (creating them in a file
/// that has none) and registers the `semaphore_*` functions on that one
/// connection. Fails, registering nothing, on a connection to no file, on
/// a file whose `semaphore_` tables have another shape (nothing is
/// written), and in a SQLite older than 3.37.
///
/// # Safety
/// Called by SQLite only, with the arguments it passes every extension.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite3_extension_init(
    db: *mut ffi::sqlite3,
    pz_err_msg: *mut *mut c_char,
    p_api: *mut ffi::sqlite3_api_routines,
) -> c_int {
    if p_api.is_null() {
        return ffi::SQLITE_ERROR;
    }
    // SAFETY: `p_api` is the table SQLite passed.
    let api = match unsafe { host::adapt(p_api) } {
        Ok(api) => api,
        Err(version) => {
            let message = format!(
                "semaphore: SQLite {version} is older than {} (3.37.0), the oldest this \
                 extension loads into",
                host::OLDEST
            );
            // SAFETY: the host's own table and error slot.
            return unsafe { fail(p_api, pz_err_msg, &message) };
        }
    };
    let _loading = host::Loading::start();
    // SAFETY: as SQLite passed them, the table adapted to its version.
    unsafe { Connection::extension_init2(db, pz_err_msg, api, init) }
}

fn init(conn: Connection) -> rusqlite::Result<bool> {
    let attached = Attached::open(&conn).map_err(|e| {
        rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_ERROR),
            Some(format!("semaphore: {}", e.chain())),
        )
    })?;
    // SAFETY: the handle of the connection being loaded into.
    let db = unsafe { conn.handle() };
    let state = Arc::new(state::State::new(attached, conn));
    if let Some(conn) = state.connection() {
        functions::register(&conn, &state)?;
    }
    // SAFETY: `db` is the state's connection, and the functions just
    // registered hold the state until SQLite frees them, after the close.
    unsafe { state::State::finalize_on_close(db, Arc::as_ptr(&state)) };
    Ok(false)
}

/// Reports `message` as the load's error through the host's own
/// `sqlite3_mprintf`-family allocator, for a host `rusqlite` cannot use.
///
/// # Safety
/// `api` is the host's table, `pz_err_msg` the slot SQLite passed.
unsafe fn fail(
    api: *mut ffi::sqlite3_api_routines,
    pz_err_msg: *mut *mut c_char,
    message: &str,
) -> c_int {
    // SAFETY: `malloc` is in every release's table; the copy fits.
    unsafe {
        if let (false, Some(malloc)) = (pz_err_msg.is_null(), (*api).malloc) {
            let len = message.len();
            let out = malloc(c_int::try_from(len + 1).unwrap_or(c_int::MAX)).cast::<u8>();
            if !out.is_null() {
                std::ptr::copy_nonoverlapping(message.as_ptr(), out, len);
                *out.add(len) = 0;
                *pz_err_msg = out.cast::<c_char>();
            }
        }
    }
    ffi::SQLITE_ERROR
}
