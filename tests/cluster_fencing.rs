//! Fences in a Redis Cluster whose nodes' clocks disagree: for a key, every
//! fenced grant's token is above every earlier one's, also after its slot
//! moved to a master whose clock is 30 s behind (by `SETSLOT`/`MIGRATE`,
//! and through `ASK` while the slot is half moved) and after a failover to
//! a replica whose clock is 30 s behind. Without the configEpoch leading
//! the fence, the first two go backwards by ~30 000 000 (30 s in µs).

use redis_lock_harness::{Cluster, Server};

const BEHIND_MS: i64 = -30_000;

/// `LOCK.ACQUIRE key tok 60000 FENCE` on node `i` (after `ASKING` when
/// `asking`), then `LOCK.RELEASE`; the fence.
fn grant(c: &Cluster, i: usize, key: &str, asking: bool) -> u64 {
    let mut con = c.node(i).conn();
    if asking {
        redis::cmd("ASKING").query::<()>(&mut con).unwrap();
    }
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg("tok")
        .arg(60_000)
        .arg("FENCE")
        .query(&mut con)
        .unwrap_or_else(|e| panic!("node {i}: {e}"));
    let fence = fence.expect("the key was free");
    if asking {
        redis::cmd("ASKING").query::<()>(&mut con).unwrap();
    }
    let released: i64 = redis::cmd("LOCK.RELEASE").arg(key).arg("tok").query(&mut con).unwrap();
    assert_eq!(released, 1);
    fence
}

#[test]
fn fences_increase_across_slot_moves_and_failover_to_a_clock_30s_behind() {
    // Node 1 (a master) and node 4 (a replica) run 30 s behind the others.
    let mut c = Cluster::start_with(3, 1, |i| {
        if i == 1 || i == 4 {
            Server::builder().clock_offset_ms(BEHIND_MS)
        } else {
            Server::builder()
        }
    });
    let m = c.masters();
    let behind = m.iter().copied().find(|&i| i == 1).expect("node 1 is a master");
    // The source of the moves: the master with the largest configEpoch, so
    // that the importing node's epoch is below it until it bumps its own.
    let ahead = m.iter().copied().filter(|&i| i != behind).max_by_key(|&i| c.view(i).config_epoch).unwrap();
    assert!(c.view(ahead).config_epoch > c.view(behind).config_epoch);

    // ASK: the key is granted on the importing node (behind) while its slot
    // is half moved, then the move completes.
    let key = c.key_on("asked:", ahead);
    let slot = c.slot_of(&key);
    let mut last = 0;
    for _ in 0..3 {
        let f = grant(&c, ahead, &key, false);
        assert!(f > last);
        last = f;
    }
    c.open_slot_move(slot, ahead, behind);
    let f = grant(&c, behind, &key, true);
    assert!(f > last, "granted through ASK on a node 30 s behind: {f} <= {last} (by {})", last - f);
    c.migrate_slot_keys(slot, ahead, behind);
    c.close_slot_move(slot, ahead, behind);
    let f2 = grant(&c, behind, &key, false);
    assert!(f2 > f);

    // SETSLOT/MIGRATE to the node behind, of a slot that moved there
    // before: back to `ahead`, then to `behind` again.
    let key = c.key_on("fenced:", ahead);
    c.move_slot(c.slot_of(&key), behind);
    let mut last = grant(&c, behind, &key, false);
    c.move_slot(c.slot_of(&key), ahead);
    for _ in 0..3 {
        let f = grant(&c, ahead, &key, false);
        assert!(f > last, "after SETSLOT/MIGRATE to the node ahead");
        last = f;
    }
    c.move_slot(c.slot_of(&key), behind);
    let f = grant(&c, behind, &key, false);
    assert!(f > last, "after SETSLOT/MIGRATE to a node 30 s behind: {f} <= {last} (by {})", last - f);
    assert!(grant(&c, behind, &key, false) > f);

    // Failover that loses the replication tail, to a replica 30 s behind:
    // the replica is stopped (SIGSTOP) while its master grants, the master
    // is killed, and the replica wakes up and is promoted without ever
    // having received those grants or their LOCK.FENCEFLOOR.
    let master = c.view(4).master_id.and_then(|id| c.index_of(&id)).expect("node 4 replicates a master");
    let key = c.key_on("failed-over:", master);
    c.node(4).set_paused(true);
    let mut last = 0;
    for _ in 0..3 {
        last = grant(&c, master, &key, false);
    }
    c.kill_node(master);
    c.node(4).set_paused(false);
    c.wait_until("node 4 promoted", |c| c.view(4).master && c.view(4).slots.contains(&c.slot_of(&key)));
    c.wait_ok();
    let f = grant(&c, 4, &key, false);
    assert!(f > last, "after a failover that lost the tail, to a replica 30 s behind: {f} <= {last} (by {})", last - f);
}

/// 2000+ fenced grants through the cluster client on a few keys, with clocks
/// from 30 s behind to 30 s ahead, and between batches a random change:
/// a slot moved by SETSLOT/MIGRATE (with grants through ASK while it is half
/// moved), by `redis-cli --cluster reshard`, a manual failover, or a
/// failover that loses the replication tail. Every key's fences must
/// strictly increase. Seeded (`CLUSTER_FENCE_SEED`) so a failure repeats.
#[test]
fn random_grants_moves_and_failovers_never_take_a_fence_back() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use redis_lock_client::LockClient;
    use std::collections::HashMap;
    use std::time::Duration;

    let seed: u64 = std::env::var("CLUSTER_FENCE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut rng = StdRng::seed_from_u64(seed);
    let offsets = [0, -30_000, 30_000, 20_000, -25_000, 30_000];
    let mut c = Cluster::start_with(3, 1, |i| Server::builder().clock_offset_ms(offsets[i % offsets.len()]));
    let keys: Vec<String> = (0..8).map(|i| format!("rand:{{{i}}}")).collect();
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    let mut last: HashMap<String, u64> = HashMap::new();
    let grants = std::cell::Cell::new(0);
    let mut check = |client: &LockClient, key: &str, what: &str| {
        let lock = client
            .try_acquire(key, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("seed {seed}, {what}, {key}: {e}"));
        let f = lock.fence().expect("fenced");
        let prev = last.insert(key.to_string(), f).unwrap_or(0);
        assert!(f > prev, "seed {seed}, {what}: {key} got {f} after {prev}");
        lock.release().unwrap();
        grants.set(grants.get() + 1);
    };
    let mut step = 0;
    while grants.get() < 2000 {
        step += 1;
        for _ in 0..60 {
            let k = &keys[rng.gen_range(0..keys.len())];
            check(&client, k, &format!("step {step}"));
        }
        let masters = c.masters();
        let key = &keys[rng.gen_range(0..keys.len())];
        let slot = c.slot_of(key);
        let from = c.owner_of(key);
        let to = *masters.iter().filter(|&&m| m != from).nth(rng.gen_range(0..2)).unwrap();
        match rng.gen_range(0..10) {
            0..=4 => {
                // Half moved: grants of the slot's keys go through ASK.
                c.open_slot_move(slot, from, to);
                c.migrate_slot_keys(slot, from, to);
                for k in keys.iter().filter(|k| c.slot_of(k) == slot) {
                    check(&client, k, &format!("step {step}, ASK to node {to}"));
                }
                c.close_slot_move(slot, from, to);
            }
            5 | 6 => {
                c.reshard(from, to, 1);
            }
            7 | 8 => {
                c.failover(from, "");
            }
            _ => {
                // Lose the tail: the replica sleeps through the last grants.
                let Some(&replica) = c.replicas_of(from).first() else { continue };
                c.node(replica).set_paused(true);
                for _ in 0..5 {
                    check(&client, key, &format!("step {step}, before losing the tail"));
                }
                c.kill_node(from);
                c.node(replica).set_paused(false);
                c.wait_until("the replica promoted", |c| {
                    c.view(replica).master && c.view(replica).slots.contains(&slot)
                });
                c.wait_ok();
                c.restart_node(from);
            }
        }
    }
    assert!(grants.get() >= 2000);
}
