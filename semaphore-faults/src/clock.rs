//! The one clock every process of the machine shares: `CLOCK_MONOTONIC`,
//! in nanoseconds. Holders and the orchestrator stamp their logs with it,
//! so that one history orders the events of every process. It keeps
//! running while a process is stopped (`SIGSTOP`), as a holder's local
//! deadlines do.

use nix::time::{ClockId, clock_gettime};

/// Now on `CLOCK_MONOTONIC`, in nanoseconds since an arbitrary start (the
/// machine's boot); the same for every process of this machine.
pub fn now_ns() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always there");
    // Both parts are non-negative on this clock.
    (ts.tv_sec() as u64) * 1_000_000_000 + ts.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_moves_forward() {
        let a = now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns();
        assert!(b >= a + 2_000_000, "{a} then {b}");
    }
}
