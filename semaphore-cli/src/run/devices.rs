//! `--devices` of `semaphore run`: one device per slot, each named once,
//! checked before anything is taken and again against the positions
//! granted.

use semaphore_core::Pool;

use crate::exit::{Exit, code};

/// `--devices` must name each device once: a device named twice would be
/// given to two slots, which the pool would let two commands use at once.
/// Checked before anything else, so that a mistake registers and takes
/// nothing.
pub(super) fn distinct_devices(devices: &[String]) -> Result<(), Exit> {
    let mut seen = std::collections::HashSet::new();
    match devices.iter().find(|device| !seen.insert(device.as_str())) {
        None => Ok(()),
        Some(device) => Err(Exit::new(
            code::USAGE,
            format!(
                "--devices names device {device:?} more than once: two slots would share it; \
                 name each device once, one per slot"
            ),
        )),
    }
}

/// `--devices` must name a device for every position the pool can hand
/// out: checked before borrowing, so that a mistake costs no slot.
pub(super) async fn check_devices(
    devices: &[String],
    pool: &Pool,
    count: Option<u32>,
) -> Result<(), Exit> {
    let count = match count {
        Some(count) => count,
        None => pool.inspect().await.map_err(Exit::from_store)?.count,
    };
    if (devices.len() as u64) < u64::from(count) {
        return Err(Exit::new(
            code::USAGE,
            format!(
                "--devices names {} device(s) but the pool has {count} slots: name one per slot",
                devices.len()
            ),
        ));
    }
    Ok(())
}

/// Every granted position must have a device: checked after the grant,
/// since the pool's count can grow while a borrow waits.
pub(super) fn check_positions(devices: &[String], positions: &[u32]) -> Result<(), Exit> {
    match positions
        .iter()
        .find(|p| devices.get(**p as usize).is_none())
    {
        None => Ok(()),
        Some(position) => Err(Exit::new(
            code::USAGE,
            format!(
                "the lease holds position {position} but --devices names {} device(s) \
                 (the pool grew while this borrow waited): name one device per slot; \
                 the lease was returned",
                devices.len()
            ),
        )),
    }
}
