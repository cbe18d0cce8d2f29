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
    let fence: Option<u64> = redis::cmd("LOCK.ACQUIRE").arg(key).arg("tok").arg(60_000).arg("FENCE").query(&mut con).unwrap_or_else(|e| panic!("node {i}: {e}"));
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
    let mut c = Cluster::start_with(3, 1, |i| if i == 1 || i == 4 { Server::builder().clock_offset_ms(BEHIND_MS) } else { Server::builder() });
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
    signal(&c, 4, "-STOP");
    let mut last = 0;
    for _ in 0..3 {
        last = grant(&c, master, &key, false);
    }
    c.kill_node(master);
    signal(&c, 4, "-CONT");
    c.wait_until("node 4 promoted", |c| c.view(4).master && c.view(4).slots.contains(&c.slot_of(&key)));
    c.wait_ok();
    let f = grant(&c, 4, &key, false);
    assert!(f > last, "after a failover that lost the tail, to a replica 30 s behind: {f} <= {last} (by {})", last - f);
}

fn signal(c: &Cluster, i: usize, sig: &str) {
    let ok = std::process::Command::new("kill").arg(sig).arg(c.node(i).pid().to_string()).status().unwrap().success();
    assert!(ok, "kill {sig} node {i}");
}
