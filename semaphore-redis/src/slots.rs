//! Hash slots (Redis Cluster): where a pool lives, and the keys of a
//! slot's own.
//!
//! A pool's keys carry its id as hash tag, so a pool lives in one slot. On
//! a cluster, what the standalone store keeps once per server (a session's
//! end, the run id that last granted, the wake-up channel) is kept once
//! per slot instead, under a tag that hashes to that slot, so that each
//! script touches its own slot only.

use std::sync::LazyLock;

use semaphore_core::PoolId;

/// Redis Cluster's number of hash slots.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot of `text` as a hash tag (CRC16/XMODEM mod 16384, as
/// Redis Cluster computes it).
fn slot_of(text: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(text) % SLOTS
}

/// The hash slot of key `key`, as Redis Cluster computes it: of its hash
/// tag (what lies between its first `{` and the next `}`, if not empty),
/// else of the whole key.
pub(crate) fn of_key(key: &str) -> u16 {
    let tag = key.split_once('{').and_then(|(_, rest)| {
        let (tag, _) = rest.split_once('}')?;
        (!tag.is_empty()).then_some(tag)
    });
    slot_of(tag.unwrap_or(key).as_bytes())
}

/// The hash slot of `pool`'s keys under `prefix`: its id's, or, if the
/// prefix carries a hash tag, the tag's (every pool of the store then
/// shares it).
pub(crate) fn of_pool(prefix: &str, pool: PoolId) -> u16 {
    crate::keys::of(prefix, pool)
        .next()
        .map_or(0, |key| of_key(&key))
}

/// For each slot, the shortest decimal number that hashes to it: made once
/// (about 170,000 hashes) on a cluster store's first use.
static TAGS: LazyLock<Vec<u32>> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; usize::from(SLOTS)];
    let mut left = usize::from(SLOTS);
    let mut n = 0u32;
    while left > 0 {
        let slot = usize::from(slot_of(n.to_string().as_bytes()));
        if tags[slot] == u32::MAX {
            tags[slot] = n;
            left -= 1;
        }
        n += 1;
    }
    tags
});

/// The key prefix of slot `slot`'s own keys under `prefix`:
/// `PREFIX:{<tag>}`, whose tag hashes to `slot`.
pub(crate) fn prefix(prefix: &str, slot: u16) -> String {
    format!("{prefix}:{{{}}}", TAGS[usize::from(slot % SLOTS)])
}

/// Where the scripts find what is kept once per server (one server) or
/// once per hash slot (a cluster): the session and run keys, and the
/// wake-up channel with the command that publishes to it.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    /// The prefix of the session keys (`:s:<id>`) and the run key (`:run`).
    pub(crate) prefix: String,
    pub(crate) channel: String,
    /// `PUBLISH`, or `SPUBLISH` for a slot's sharded channel.
    pub(crate) publish: &'static str,
}

impl Place {
    /// One server's: `PREFIX:s:<id>`, `PREFIX:run`, `PREFIX:wake`.
    pub(crate) fn server(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_string(),
            channel: format!("{prefix}:wake"),
            publish: "PUBLISH",
        }
    }

    /// Hash slot `slot`'s on a cluster: `PREFIX:{<tag>}:s:<id>`,
    /// `PREFIX:{<tag>}:run` and the sharded channel `PREFIX:{<tag>}:wake`,
    /// whose tag hashes to `slot`.
    pub(crate) fn slot(prefix: &str, slot: u16) -> Self {
        let prefix = self::prefix(prefix, slot);
        Self {
            channel: format!("{prefix}:wake"),
            prefix,
            publish: "SPUBLISH",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for slot in [0, 1, 866, 5460, 5461, 12182, SLOTS - 1] {
            let tag = TAGS[usize::from(slot)].to_string();
            assert_eq!(slot_of(tag.as_bytes()), slot);
            assert_eq!(prefix("p", slot), format!("p:{{{tag}}}"));
        }
        assert!(TAGS.iter().all(|t| *t != u32::MAX));
    }

    #[test]
    fn a_prefix_with_a_hash_tag_puts_every_pool_on_its_slot() {
        let (a, b) = (PoolId::from_name("a"), PoolId::from_name("b"));
        assert_ne!(of_pool("p", a), of_pool("p", b));
        assert_eq!(of_pool("p{jobs}", a), slot_of(b"jobs"));
        assert_eq!(of_pool("p{jobs}", b), slot_of(b"jobs"));
        assert_eq!(of_key(&prefix("p{jobs}", 7)), slot_of(b"jobs"));
        assert_eq!(
            of_key("p{}:{x}"),
            slot_of(b"p{}:{x}"),
            "an empty tag is no tag"
        );
    }

    #[test]
    fn slots_are_those_redis_computes() {
        // From the Redis Cluster specification: the slot of "123456789"
        // (CRC16/XMODEM 0x31C3).
        assert_eq!(slot_of(b"123456789"), 0x31C3 % SLOTS);
        assert_eq!(
            slot_of(b"foo"),
            redis_slot(b"foo"),
            "the same slot as redis-rs"
        );
    }

    fn redis_slot(key: &[u8]) -> u16 {
        use redis::cluster_routing::Slot;
        (0..SLOTS)
            .find(|s| Slot::new(*s) == Some(Slot::for_key(key)))
            .unwrap_or(SLOTS)
    }
}
