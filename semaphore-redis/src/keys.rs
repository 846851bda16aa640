//! Key names: every key of one pool carries the pool's hash tag
//! (`{<pool id>}`), so that a pool lives in one cluster slot (the prefix's
//! own tag instead, if it has one: then every pool shares its slot).

use semaphore_core::PoolId;

/// The keys of one pool, in the order the scripts read them.
pub(crate) const PER_POOL: [&str; 8] = [
    "pool", "leases", "exp", "pos", "keys", "queue", "alive", "token",
];

/// The 8 key names of `pool` under `prefix`.
pub(crate) fn of(prefix: &str, pool: PoolId) -> impl Iterator<Item = String> + '_ {
    let tag = pool.as_uuid().hyphenated().to_string();
    PER_POOL
        .into_iter()
        .map(move |name| format!("{prefix}:{{{tag}}}:{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pools_keys_share_its_hash_tag() {
        let pool = PoolId::from_name("gpus");
        let keys: Vec<String> = of("semaphore", pool).collect();
        let tag = format!("{{{}}}", pool.as_uuid());
        assert_eq!(keys.len(), 8);
        assert!(keys.iter().all(|k| k.contains(&tag)), "{keys:?}");
        assert_eq!(keys[0], format!("semaphore:{tag}:pool"));
    }
}
