//! The cluster harness against real redis-servers: it comes up, slots move
//! (by hand and with `redis-cli --cluster reshard`) with their keys, and
//! failovers swap roles. One cluster, one test: each step builds on the
//! previous one's topology, and a second cluster would only cost time.

use redis_lock_harness::{key_slot, Cluster, SLOTS};

fn get(c: &Cluster, node: usize, key: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query(&mut c.node(node).conn())
}

#[test]
fn a_cluster_comes_up_moves_slots_and_fails_over() {
    let mut c = Cluster::start(3, 1);
    assert_eq!(c.len(), 6);

    // Up: three masters cover all slots, each with one replica.
    let masters = c.masters();
    assert_eq!(masters.len(), 3, "{masters:?}");
    let covered: usize = masters.iter().map(|&m| c.view(m).slots.len()).sum();
    assert_eq!(covered, usize::from(SLOTS));
    for &m in &masters {
        assert_eq!(c.replicas_of(m).len(), 1, "replicas of node {m}");
    }
    // The harness's slot function is the server's.
    for key in ["job:42", "{user1000}.following", "a{}b", "{}", "x{y}z{w}"] {
        let server: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut c.node(0).conn()).unwrap();
        assert_eq!(key_slot(key.as_bytes()), server, "{key}");
    }
    // The module is loaded on every node and its commands route by key.
    let key = c.key_on("lock:", masters[1]);
    let n: i64 =
        redis::cmd("LOCK.ACQUIRE").arg(&key).arg("tok").arg(60_000).query(&mut c.node(masters[1]).conn()).unwrap();
    assert_eq!(n, 1);
    let moved = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg("tok")
        .arg(60_000)
        .query::<i64>(&mut c.node(masters[0]).conn())
        .unwrap_err();
    assert_eq!(moved.code(), Some("MOVED"), "{moved}");

    // A slot moves by hand with its key; ASK while it is half moved.
    let slot = c.slot_of(&key);
    let (from, to) = (masters[1], masters[2]);
    c.open_slot_move(slot, from, to);
    let absent = c.key_in_slot("absent:", slot);
    let ask = get(&c, from, &absent).unwrap_err();
    assert_eq!(ask.code(), Some("ASK"), "{ask}");
    assert_eq!(c.view(to).moving, vec![(slot, true)]);
    c.migrate_slot_keys(slot, from, to);
    c.close_slot_move(slot, from, to);
    assert_eq!(c.owner_of(&key), to);
    assert_eq!(get(&c, to, &key).unwrap().as_deref(), Some("tok"));
    assert!(c.view(to).moving.is_empty());

    // And back with redis-cli: the slot we moved is now `to`'s lowest
    // only if it is below its range, so move `to`'s first slot instead.
    let first = c.view(to).slots[0];
    let k2 = c.key_in_slot("resharded:", first);
    let _: () = redis::cmd("SET").arg(&k2).arg("v").query(&mut c.node(to).conn()).unwrap();
    let moved = c.reshard(to, masters[0], 1);
    assert_eq!(moved, vec![first]);
    assert_eq!(c.owner_of(&k2), masters[0]);
    assert_eq!(get(&c, masters[0], &k2).unwrap().as_deref(), Some("v"));

    // A manual failover swaps master and replica.
    let old = masters[0];
    let replica = c.replicas_of(old)[0];
    let promoted = c.failover(old, "");
    assert_eq!(promoted, replica);
    assert!(c.view(promoted).master);
    assert_eq!(c.view(old).master_id.as_deref(), Some(c.id(promoted)));
    assert_eq!(get(&c, promoted, &k2).unwrap().as_deref(), Some("v"));

    // kill -9 of a master: its replica takes over; the killed node rejoins
    // as a replica.
    let victim = c.owner_of(&key);
    let promoted = c.kill_master(victim);
    assert_ne!(promoted, victim);
    assert_eq!(c.owner_of(&key), promoted);
    c.restart_node(victim);
    assert_eq!(c.view(victim).master_id.as_deref(), Some(c.id(promoted)));
    assert_eq!(c.masters().len(), 3);
}
