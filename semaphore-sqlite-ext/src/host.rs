//! The loading program's SQLite, adapted to what `rusqlite` was built for.
//!
//! An extension calls SQLite through the function table the loading
//! program hands it (`sqlite3_api_routines`), which grows at its end with
//! each SQLite release. `rusqlite`'s `loadable_extension` support is built
//! on the table of SQLite 3.45.3 (the bindings `libsqlite3-sys` ships) and
//! refuses an older host outright, although it needs nothing newer than
//! 3.37 (it declares the newer entries, and calls them only for what this
//! extension never asks: interrupt checks and client data). Debian 12's
//! SQLite, which its Python loads extensions into, is 3.40.1.
//!
//! So the host's table is copied into a table of the full size, as long as
//! the host's own is (known from its version, [`ENTRIES`]), the rest left
//! empty: an empty entry fails with a panic naming the missing function,
//! never calls into memory past the host's table. While a load runs (when
//! `rusqlite` checks the version, at every load), the table answers the
//! version it was built for; otherwise, the host's own.

use std::mem::{MaybeUninit, size_of};
use std::os::raw::c_int;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use rusqlite::ffi;

/// How many entries the function table of each SQLite release has, by
/// the first release of each size (from `sqlite3ext.h`, whose struct
/// marks where each release's entries begin): releases before 3.37.0 are
/// refused, releases from 3.44.0 have every entry `rusqlite` knows.
const ENTRIES: &[(c_int, usize)] = &[
    (3_037_000, 256),
    (3_038_000, 262),
    (3_039_000, 265),
    (3_040_000, 266),
    (3_041_000, 267),
    (3_043_000, 268),
    (3_044_000, 270),
];

/// The oldest SQLite this extension loads into.
pub(crate) const OLDEST: c_int = ENTRIES[0].0;

/// The host's version, once known.
static VERSION: AtomicI32 = AtomicI32::new(0);
/// How many loads are running, in any thread.
static LOADING: AtomicUsize = AtomicUsize::new(0);

/// The table handed to `rusqlite`: the host's entries, then empty ones.
/// Written once, under [`TABLE_LOCK`], before anything reads it; `rusqlite`
/// copies each entry out at its first initialisation.
static mut TABLE: MaybeUninit<ffi::sqlite3_api_routines> = MaybeUninit::zeroed();
static TABLE_LOCK: Mutex<bool> = Mutex::new(false);

unsafe extern "C" fn libversion_number() -> c_int {
    let host = VERSION.load(Ordering::Acquire);
    if LOADING.load(Ordering::Acquire) == 0 {
        host
    } else {
        host.max(ffi::SQLITE_VERSION_NUMBER)
    }
}

/// The table to hand `rusqlite` for the host's table `host`; `Err` with
/// the host's version if it is older than [`OLDEST`] (or gives none).
///
/// # Safety
/// `host` must be the table SQLite passed to the extension's entry point.
pub(crate) unsafe fn adapt(
    host: *const ffi::sqlite3_api_routines,
) -> Result<*mut ffi::sqlite3_api_routines, c_int> {
    // SAFETY: SQLite's table has `libversion_number` in every release.
    let version = match unsafe { (*host).libversion_number } {
        // SAFETY: the host's own function, which takes nothing.
        Some(f) => unsafe { f() },
        None => return Err(0),
    };
    let Some(&(_, entries)) = ENTRIES.iter().rev().find(|(since, _)| *since <= version) else {
        return Err(version);
    };
    let mut made = TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let table = &raw mut TABLE;
    if !*made {
        let slots = size_of::<ffi::sqlite3_api_routines>() / size_of::<usize>();
        VERSION.store(version, Ordering::Release);
        // SAFETY: the table is a struct of function pointers only (each
        // `Option<fn>`, a pointer's size); the host's has `entries` of
        // them, and ours `slots`, the first `entries` laid out alike.
        unsafe {
            std::ptr::copy_nonoverlapping(
                host.cast::<usize>(),
                table.cast::<usize>(),
                entries.min(slots),
            );
            (*(*table).as_mut_ptr()).libversion_number = Some(libversion_number);
        }
        *made = true;
    }
    // SAFETY: made above, or by an earlier load into the same program.
    Ok(unsafe { (*table).as_mut_ptr() })
}

/// A load running: while any is, the table answers the version `rusqlite`
/// was built for.
pub(crate) struct Loading(());

impl Loading {
    pub(crate) fn start() -> Self {
        LOADING.fetch_add(1, Ordering::AcqRel);
        Self(())
    }
}

impl Drop for Loading {
    fn drop(&mut self) {
        LOADING.fetch_sub(1, Ordering::AcqRel);
    }
}
