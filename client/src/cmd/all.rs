//! `LockClient::lock_all`'s plan, pure: the keys in one global order (by
//! hash slot, then by name), cut into the groups one `LOCK.ACQUIREALL` can
//! take (one slot in a cluster, at most 64 keys), and the command of each.
//! Every caller takes its groups in the same order, so two callers can
//! never each hold a group the other waits for.

use std::collections::BTreeSet;

use redis::Cmd;
use redis_lock_rules::cluster::key_slot;
use redis_lock_rules::multi::MAX_KEYS;

use crate::cmd::lease::Lease;
use crate::error::{Error, Result};

/// The groups of `keys` (distinct, none empty), in the order to take them:
/// in a cluster one slot per group, else any slots together.
pub(crate) fn groups(keys: &[String], cluster: bool) -> Result<Vec<Vec<String>>> {
    if keys.is_empty() {
        return Err(Error::InvalidArgument("lock_all needs at least one key".into()));
    }
    if keys.iter().any(String::is_empty) {
        return Err(Error::InvalidArgument("lock key is required".into()));
    }
    let mut sorted: Vec<(u16, &String)> =
        keys.iter().map(|k| (if cluster { key_slot(k.as_bytes()) } else { 0 }, k)).collect();
    sorted.sort();
    let distinct: BTreeSet<&String> = keys.iter().collect();
    if distinct.len() != keys.len() {
        return Err(Error::InvalidArgument("lock_all: a key is named twice".into()));
    }
    let mut groups: Vec<(u16, Vec<String>)> = Vec::new();
    for (slot, key) in sorted {
        match groups.last_mut() {
            Some((s, g)) if *s == slot && g.len() < MAX_KEYS => g.push(key.clone()),
            _ => groups.push((slot, vec![key.clone()])),
        }
    }
    Ok(groups.into_iter().map(|(_, g)| g).collect())
}

/// `LOCK.ACQUIREALL n keys… token ttl-ms FENCE [WAIT ms] [LOCKDELAY ms] [MAXHOLD ms]`
/// (no `WAIT` for `wait_ms` none: one attempt).
pub(crate) fn acquire_all_cmd(keys: &[String], token: &str, ttl_ms: u64, wait_ms: Option<u64>, lease: Lease) -> Cmd {
    let mut c = redis::cmd("LOCK.ACQUIREALL");
    c.arg(keys.len()).arg(keys).arg(token).arg(ttl_ms).arg("FENCE");
    if let Some(ms) = wait_ms {
        c.arg("WAIT").arg(ms);
    }
    lease.append(&mut c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn one_global_order_cut_by_slot_and_by_the_limit() {
        let keys = owned(&["b{x}", "a{y}", "a{x}", "c{y}"]);
        let g = groups(&keys, true).unwrap();
        let (x, y) = (key_slot(b"x"), key_slot(b"y"));
        let expect = if x < y {
            vec![owned(&["a{x}", "b{x}"]), owned(&["a{y}", "c{y}"])]
        } else {
            vec![owned(&["a{y}", "c{y}"]), owned(&["a{x}", "b{x}"])]
        };
        assert_eq!(g, expect);
        // The same set in another order: the same plan.
        assert_eq!(groups(&owned(&["c{y}", "a{x}", "a{y}", "b{x}"]), true).unwrap(), expect);
        // One server: every slot together, by name.
        assert_eq!(groups(&keys, false).unwrap(), vec![owned(&["a{x}", "a{y}", "b{x}", "c{y}"])]);
        let many: Vec<String> = (0..130).map(|i| format!("k{i:03}")).collect();
        let sizes: Vec<usize> = groups(&many, false).unwrap().iter().map(Vec::len).collect();
        assert_eq!(sizes, [64, 64, 2]);
    }

    #[test]
    fn bad_key_lists_are_refused_before_anything_is_sent() {
        assert!(groups(&[], false).is_err());
        assert!(groups(&owned(&["a", ""]), false).is_err());
        assert!(groups(&owned(&["a", "b", "a"]), true).is_err());
    }

    #[test]
    fn the_command_is_the_module_s() {
        let c = acquire_all_cmd(&owned(&["a", "b"]), "t", 1000, Some(250), Lease::default());
        let args: Vec<String> = c
            .args_iter()
            .map(|a| String::from_utf8_lossy(if let redis::Arg::Simple(b) = a { b } else { b"" }).into_owned())
            .collect();
        assert_eq!(args, ["LOCK.ACQUIREALL", "2", "a", "b", "t", "1000", "FENCE", "WAIT", "250"]);
    }
}
