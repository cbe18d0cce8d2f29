//! Orphans (docs/sessions.md, "A key moved to another node"): a
//! session-held lock, leader or holder whose key reaches a node that does
//! not know its session (`MIGRATE`, a resharding, Valkey 9's atomic slot
//! migration, a restore). The first write command that finds an exclusive
//! lock or leader so gives it an end, `lock.orphan-grace` from then (an
//! absolute `PEXPIREAT`, replicated as such), and is refused as by a held
//! lock; once that end passes, it is free. Its live holder keeps it with
//! `SESSION.ADOPT key token id`, which attaches it to a session of this
//! node (no expiry again); the wrong token, a known session or an absent
//! key change nothing. A semaphore's holder is adopted the same way.
//!
//! A semaphore's or read-write lock's place so held gets its end from the
//! orphan walk: someone refused a place there asks for it, the sessions'
//! timer finds the place (by session, never a scan in a command) and gives
//! it a lease ending the grace from then (an absolute score, replicated),
//! its session member moved to the orphans' score; once that end passes,
//! the place is free as an expired lease's (a waiter is granted). Adopted,
//! its place is its session's again (no end).
//!
//! On one server the orphan is made as a restore brings it (`DUMP`,
//! `FLUSHALL`, which forgets the node's sessions, `RESTORE`); in a cluster
//! by moving its slot, with `MIGRATE` on every server and with `CLUSTER
//! MIGRATESLOTS` on Valkey 9.

use std::thread;

use redis::{Connection, Value};
use redis_lock_harness::{server_version, Cluster, Server};

mod support;
use support::lease::{
    cmd, err, field, fields_of, int, pexpiretime, place, score, server_now, until_server_time, zrange,
};
use support::session::{self, eventually};
use support::{info_field, replica_of};

/// The grace the tests configure: long enough for a loaded machine's
/// steps between the leasing command and the checks, short enough to wait.
const GRACE: i64 = 2_000;

/// A session-held place's score: no end (docs/sessions.md).
const SESSION_PLACE: i64 = 1 << 53;

/// The score of a found orphan's session member: `-(2^53 + 2^52 + 2)`.
const ORPHAN_MEMBER: f64 = -13_510_798_882_111_490.0;

/// `token`'s session member in a holders' key.
fn session_member(token: &str) -> Vec<u8> {
    [&b"\0\0"[..], token.as_bytes()].concat()
}

/// Waits until `token`'s place in `key` has an end (the orphan walk found
/// it), and returns that end.
fn until_leased(c: &mut Connection, key: &str, token: &str) -> i64 {
    eventually(&format!("{token}'s place in {key} gets an end"), || place(c, key, token) < SESSION_PLACE);
    place(c, key, token)
}

fn set_grace(c: &mut Connection) {
    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.orphan-grace").arg(GRACE).query(c).unwrap();
}

fn grant(c: &mut Connection) -> String {
    session::grant(c, &["60000"])
}

fn get(c: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

fn pttl(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(c).unwrap()
}

fn holds(c: &mut Connection, id: &str) -> (i64, Vec<String>) {
    let info = fields_of(c, &["SESSION.INFO", id]).expect("a live session");
    let n = match field(&info, "holds") {
        Value::Int(n) => n,
        other => panic!("holds: {other:?}"),
    };
    let first: Vec<Value> = redis::from_redis_value(field(&info, "first")).unwrap();
    let keys = first.chunks(2).map(|p| redis::from_redis_value_ref::<String>(&p[0]).unwrap()).collect();
    (n, keys)
}

/// Makes every key of `keys` an orphan on `c`'s server: their sessions
/// forgotten (`FLUSHALL`), the keys put back as an old RDB or a migration
/// brings them (`RESTORE`, no expiry).
fn orphan(c: &mut Connection, keys: &[&str]) {
    let dumps: Vec<Vec<u8>> = keys.iter().map(|k| redis::cmd("DUMP").arg(k).query(c).unwrap()).collect();
    let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    for (k, d) in keys.iter().zip(dumps) {
        let _: () = redis::cmd("RESTORE").arg(k).arg(0).arg(d).query(c).unwrap();
    }
}

#[test]
fn an_orphan_gets_the_grace_from_the_first_write_that_finds_it_then_ends() {
    let server = Server::start();
    let mut c = server.conn();
    set_grace(&mut c);
    let id = grant(&mut c);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "tok", "60000", "SESSION", &id]), 1);
    assert!(int(&mut c, &["LOCK.ELECT", "lead", "ltok", "60000", "v", "SESSION", &id]) > 0);
    orphan(&mut c, &["lock", "lead"]);
    let value = get(&mut c, "lock");
    // Read-only commands give it nothing: LOCK.INFO shows it held, no TTL.
    let info = fields_of(&mut c, &["LOCK.INFO", "lock"]).expect("held");
    assert_eq!(field(&info, "ttl-ms"), Value::Int(-1));
    assert_eq!(pttl(&mut c, "lock"), -1);
    // Another token's acquire is refused, and gives it its end.
    let before = server_now(&mut c);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "other", "1000"]), 0);
    assert_eq!(cmd(&mut c, &["LOCK.ELECT", "lead", "other", "1000", "w"]), Ok(Value::Nil));
    let after = server_now(&mut c);
    let end = pexpiretime(&mut c, "lock");
    assert!((before + GRACE..=after + GRACE).contains(&end), "{end} not {GRACE} ms after [{before}, {after}]");
    let lead_end = pexpiretime(&mut c, "lead");
    assert!((before + GRACE..=after + GRACE).contains(&lead_end), "the leader's: {lead_end}");
    assert_eq!(info_field(&mut c, "orphans_leased"), 2);
    assert_eq!(get(&mut c, "lock"), value, "the value is as it was");
    // Once leased, later commands keep that end.
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "other", "1000"]), 0);
    assert_eq!(int(&mut c, &["LOCK.RENEW", "lock", "tok", "1000"]), 1, "its token still holds it");
    assert_eq!(pexpiretime(&mut c, "lock"), end);
    assert_eq!(info_field(&mut c, "orphans_leased"), 2, "counted once per orphan");
    let info = fields_of(&mut c, &["LOCK.INFO", "lock"]).expect("held");
    assert!(matches!(field(&info, "ttl-ms"), Value::Int(ms) if ms > 0 && ms <= GRACE), "LOCK.INFO shows its end");
    // A waiter is granted when it ends; a later acquire then too.
    let mut w = server.conn();
    let waiter = thread::spawn(move || int(&mut w, &["LOCK.ACQUIRE", "lock", "waiter", "60000", "WAIT", "30000"]));
    assert_eq!(waiter.join().unwrap(), 1, "granted once the orphan's end passed");
    assert!(server_now(&mut c) >= end);
    assert_eq!(get(&mut c, "lock"), Some(b"waiter".to_vec()));
    until_server_time(&mut c, lead_end);
    assert!(int(&mut c, &["LOCK.ELECT", "lead", "other", "1000", "w"]) > 0);
}

#[test]
fn the_live_holder_adopts_its_orphan_and_nothing_else() {
    let server = Server::start();
    let mut c = server.conn();
    set_grace(&mut c);
    let old = grant(&mut c);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "tok", "60000", "SESSION", &old]), 1);
    assert!(int(&mut c, &["LOCK.ELECT", "lead", "ltok", "60000", "v", "SESSION", &old]) > 0);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "stok", "1", "60000", "SESSION", &old]), 1);
    orphan(&mut c, &["lock", "lead", "sem"]);
    let lock_v = get(&mut c, "lock");
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "other", "1000"]), 0);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "other", "1", "1000"]), 0, "the permit is held");
    // The permit gets its end too, from the walk the refusal asked for.
    until_leased(&mut c, "sem", "stok");
    let sem_v = zrange(&mut c, "sem");
    let end = pexpiretime(&mut c, "lock");
    assert!(end > 0);
    let id = grant(&mut c);
    // Refusals write nothing.
    for (key, token) in [("lock", "wrong"), ("lead", "wrong"), ("sem", "wrong"), ("absent", "tok")] {
        assert_eq!(int(&mut c, &["SESSION.ADOPT", key, token, &id]), 0, "{key} by {token}");
    }
    assert_eq!((get(&mut c, "lock"), pexpiretime(&mut c, "lock")), (lock_v, end));
    assert_eq!(zrange(&mut c, "sem"), sem_v);
    assert_eq!(get(&mut c, "absent"), None);
    assert_eq!(holds(&mut c, &id).0, 0);
    // Errors, before anything is read.
    let unknown = "00112233445566778899aabbccddeeff";
    assert!(err(&mut c, &["SESSION.ADOPT", "lock", "tok", unknown]).contains("no such session"));
    assert!(err(&mut c, &["SESSION.ADOPT", "lock", "tok", "nope"]).contains("no such session"));
    assert!(err(&mut c, &["SESSION.ADOPT", "lock", "tok"]).contains("wrong number of arguments"));
    assert!(err(&mut c, &["SESSION.ADOPT", "lock", "", &id]).contains("key and token are required"));
    let _: () = redis::cmd("RPUSH").arg("list").arg("x").query(&mut c).unwrap();
    assert!(err(&mut c, &["SESSION.ADOPT", "list", "tok", &id]).contains("WRONGTYPE"));
    // Its token adopts each: no expiry, held by the new session.
    assert_eq!(int(&mut c, &["SESSION.ADOPT", "lock", "tok", &id]), 1);
    assert_eq!(int(&mut c, &["SESSION.ADOPT", "lead", "ltok", &id]), 1);
    assert_eq!(int(&mut c, &["SESSION.ADOPT", "sem", "stok", &id]), 1);
    assert_eq!(info_field(&mut c, "orphans_adopted"), 3);
    assert_eq!(pttl(&mut c, "lock"), -1, "no orphan's end");
    let held = String::from_utf8(get(&mut c, "lock").unwrap()).unwrap();
    assert!(held.contains(&format!(r#""session":"{id}""#)) && held.contains(r#""token":"tok""#), "{held}");
    let leader = String::from_utf8(get(&mut c, "lead").unwrap()).unwrap();
    assert!(leader.contains(&format!(r#""session":"{id}""#)) && leader.contains(r#""token":"ltok""#), "{leader}");
    assert!(leader.contains(r#""value":"v""#), "still the leader, with its value: {leader}");
    let (n, mut keys) = holds(&mut c, &id);
    keys.sort();
    assert_eq!((n, keys), (3, vec!["lead".to_string(), "lock".to_string(), "sem".to_string()]));
    // Adopted: its session is known now, a second adopt changes nothing.
    assert_eq!(int(&mut c, &["SESSION.ADOPT", "lock", "tok", &id]), 0);
    until_server_time(&mut c, end + 100);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "other", "1000"]), 0, "kept past the grace");
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "other", "1", "1000"]), 0);
    // The session's end releases them as any of its locks.
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    eventually("the session's locks are released", || get(&mut c, "lock").is_none() && get(&mut c, "lead").is_none());
    eventually("the permit is free", || int(&mut c, &["SEM.ACQUIRE", "sem", "other", "1", "1000"]) == 1);
}

/// A semaphore's and a read-write lock's places held by a session this
/// node does not know: a refusal asks for the walk, which gives each
/// place without a hold limit an end `GRACE` from then (the key's
/// lock-delay after it), keeps a hold limit's, and marks them found;
/// waiters get the places at their end; the live holder's adopted place
/// has no end again.
#[test]
fn orphaned_holders_get_the_grace_from_the_walk_a_refusal_asks_for() {
    let server = Server::start();
    let mut c = server.conn();
    set_grace(&mut c);
    let id = grant(&mut c);
    for token in ["dead", "live"] {
        assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", token, "3", "60000", "SESSION", &id]), 1);
    }
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "max", "3", "60000", "MAXHOLD", "60000", "SESSION", &id]), 1);
    let delay = 100;
    let d = delay.to_string();
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "reader", "READ", "60000", "LOCKDELAY", &d, "SESSION", &id]), 1);
    orphan(&mut c, &["sem", "rw"]);
    let max_place = place(&mut c, "sem", "max");
    // Nobody refused yet: nothing is walked, the places have no end.
    thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(place(&mut c, "sem", "dead"), SESSION_PLACE);
    assert_eq!(info_field(&mut c, "orphans_leased"), 0);
    let before = server_now(&mut c);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "other", "3", "1000"]), 0, "the permits are held");
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "other", "WRITE", "1000", "LOCKDELAY", &d]), 0);
    let dead_end = until_leased(&mut c, "sem", "dead");
    let live_end = until_leased(&mut c, "sem", "live");
    let rw_end = until_leased(&mut c, "rw", "reader");
    let after = server_now(&mut c);
    for (what, end, delay) in [("dead", dead_end, 0), ("live", live_end, 0), ("reader", rw_end, delay)] {
        let (lo, hi) = (before + GRACE + delay, after + GRACE + delay);
        assert!((lo..=hi).contains(&end), "{what}: {end} not in [{lo}, {hi}]");
    }
    assert_eq!(place(&mut c, "sem", "max"), max_place, "a hold limit keeps its end");
    for (key, token) in [("sem", "dead"), ("sem", "live"), ("sem", "max"), ("rw", "reader")] {
        assert_eq!(score(&mut c, key, session_member(token)), Some(ORPHAN_MEMBER), "{key} {token}: found");
    }
    assert_eq!(info_field(&mut c, "orphans_leased"), 3);
    assert_eq!(pexpiretime(&mut c, "rw"), rw_end, "the key ends with its last place");
    // Its token still holds it: a renewal changes nothing, SEM.INFO shows its end.
    assert_eq!(int(&mut c, &["SEM.RENEW", "sem", "dead", "60000"]), 1);
    assert_eq!(place(&mut c, "sem", "dead"), dead_end);
    let info = fields_of(&mut c, &["SEM.INFO", "sem"]).expect("held");
    let holders: Vec<Value> = redis::from_redis_value(field(&info, "holders")).unwrap();
    let ttl_of = |token: &str| {
        let at = holders.iter().position(|v| redis::from_redis_value_ref::<String>(v).ok().as_deref() == Some(token));
        at.map(|i| redis::from_redis_value_ref::<i64>(&holders[i + 1]).unwrap())
    };
    assert!(ttl_of("dead").is_some_and(|ms| ms > 0 && ms <= GRACE), "SEM.INFO: {holders:?}");
    // The live holder adopts its place: no end again, its new session's.
    let new = grant(&mut c);
    assert_eq!(int(&mut c, &["SESSION.ADOPT", "sem", "live", &new]), 1);
    assert_eq!(place(&mut c, "sem", "live"), SESSION_PLACE);
    assert_eq!(holds(&mut c, &new).0, 1);
    // A second refusal within the interval walks nothing again.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "other", "3", "1000"]), 0);
    // Waiters get the dead holder's permit and the reader's place at their ends.
    let mut w = server.conn();
    let sem_waiter =
        thread::spawn(move || int(&mut w, &["SEM.ACQUIRE", "sem", "waiter", "3", "60000", "WAIT", "30000"]));
    let mut w = server.conn();
    let rw_waiter = thread::spawn(move || {
        int(&mut w, &["RWLOCK.ACQUIRE", "rw", "writer", "WRITE", "60000", "LOCKDELAY", "100", "WAIT", "30000"])
    });
    assert_eq!(sem_waiter.join().unwrap(), 1, "granted once the orphan's end passed");
    assert!(server_now(&mut c) >= dead_end);
    assert_eq!(rw_waiter.join().unwrap(), 1);
    assert!(server_now(&mut c) >= rw_end);
    assert_eq!(score(&mut c, "sem", "dead"), None, "its place went, and its member");
    assert_eq!(score(&mut c, "sem", session_member("dead")), None);
    // The adopted place is held past the grace; the hold limit's too.
    until_server_time(&mut c, live_end + 100);
    assert_eq!(place(&mut c, "sem", "live"), SESSION_PLACE);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "other", "3", "1000"]), 0);
    assert_eq!(info_field(&mut c, "orphans_leased"), 3);
    assert_eq!(info_field(&mut c, "orphans_adopted"), 1);
}

/// A key walked while its sessions were known is walked again at once
/// when a flush took them (not only once the interval, the grace, passed).
#[test]
fn a_flush_forgets_the_walks() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "tok", "1", "60000", "SESSION", &id]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "other", "1", "1000"]), 0, "walked: its session is known");
    thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(place(&mut c, "sem", "tok"), SESSION_PLACE);
    orphan(&mut c, &["sem"]);
    let before = server_now(&mut c);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "other", "1", "1000"]), 0);
    let end = until_leased(&mut c, "sem", "tok");
    assert!(end >= before + 60_000, "the default grace: {end}");
}

/// `0`: orphans are held as they are, as before the config existed.
#[test]
fn a_zero_grace_holds_orphans_as_they_are() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.orphan-grace").arg(0).query(&mut c).unwrap();
    let id = grant(&mut c);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "tok", "60000", "SESSION", &id]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "tok", "1", "60000", "SESSION", &id]), 1);
    orphan(&mut c, &["lock", "sem"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "other", "1000"]), 0);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "other", "1", "1000"]), 0);
    thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(pttl(&mut c, "lock"), -1);
    assert_eq!(place(&mut c, "sem", "tok"), SESSION_PLACE, "no walk");
    assert_eq!(info_field(&mut c, "orphans_leased"), 0);
}

/// A replica receives the orphan's end and the adoption as exact effects.
#[test]
fn a_replica_has_the_masters_orphan_ends_and_adoptions() {
    let master = Server::start();
    let mut c = master.conn();
    set_grace(&mut c);
    let (_replica, mut r) = replica_of(&master);
    let old = grant(&mut c);
    for key in ["a", "b"] {
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", key, "tok", "60000", "SESSION", &old]), 1);
    }
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "stok", "2", "60000", "SESSION", &old]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "rtok", "READ", "60000", "SESSION", &old]), 1);
    orphan(&mut c, &["a", "b", "sem", "rw"]);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "other", "WRITE", "1000"]), 0);
    let rw_end = until_leased(&mut c, "rw", "rtok");
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "a", "other", "1000"]), 0);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "b", "other", "1000"]), 0);
    let id = grant(&mut c);
    assert_eq!(int(&mut c, &["SESSION.ADOPT", "b", "tok", &id]), 1);
    assert_eq!(int(&mut c, &["SESSION.ADOPT", "sem", "stok", &id]), 1);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(20_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    type Zset = Vec<(Vec<u8>, String)>;
    type Digest = (Vec<Option<Vec<u8>>>, Vec<i64>, Zset, i64, (Zset, i64));
    let digest = |c: &mut Connection| -> Digest {
        let keys = ["a", "b"];
        let values = keys.iter().map(|k| get(c, k)).collect();
        let ends = keys.iter().map(|k| pexpiretime(c, k)).collect();
        (values, ends, zrange(c, "sem"), holds(c, &id).0, (zrange(c, "rw"), pexpiretime(c, "rw")))
    };
    let want = digest(&mut c);
    assert_eq!(want.4 .1, rw_end, "the read hold's end is the key's");
    assert!(want.1[0] > 0 && want.1[1] == -1, "a has its orphan's end, b none: {:?}", want.1);
    assert_eq!(want.3, 2);
    assert_eq!(digest(&mut r), want, "the replica");
}

/// The cluster case, the slot moved by `mover`: a lock, a leader and a
/// semaphore's holder of a live holder, and a lock of a dead one.
fn moved_with(what: &str, mover: impl FnOnce(&Cluster, u16, usize)) {
    let cluster = Cluster::start(3, 1);
    for i in cluster.live().collect::<Vec<_>>() {
        set_grace(&mut cluster.node(i).conn());
    }
    let key = |name: &str| format!("{{orphan}}{name}");
    let (lock, lead, sem, dead) = (key("lock"), key("lead"), key("sem"), key("dead"));
    // A dead holder's permit and read hold (nobody adopts them).
    let (dsem, drw) = (key("dsem"), key("drw"));
    let slot = cluster.slot_of(&lock);
    let from = cluster.owner_of_slot(slot);
    let to = cluster.masters().into_iter().find(|&m| m != from).expect("another master");
    let mut a = cluster.node(from).conn();
    let old = grant(&mut a);
    assert_eq!(int(&mut a, &["LOCK.ACQUIRE", &lock, "tok", "60000", "SESSION", &old]), 1);
    assert!(int(&mut a, &["LOCK.ELECT", &lead, "ltok", "60000", "v", "SESSION", &old]) > 0);
    assert_eq!(int(&mut a, &["SEM.ACQUIRE", &sem, "stok", "1", "60000", "SESSION", &old]), 1);
    assert_eq!(int(&mut a, &["LOCK.ACQUIRE", &dead, "dtok", "60000", "SESSION", &old]), 1);
    assert_eq!(int(&mut a, &["SEM.ACQUIRE", &dsem, "dstok", "1", "60000", "SESSION", &old]), 1);
    assert_eq!(int(&mut a, &["RWLOCK.ACQUIRE", &drw, "drtok", "READ", "60000", "SESSION", &old]), 1);
    mover(&cluster, slot, to);
    let mut b = cluster.node(to).conn();
    assert_eq!(get(&mut b, &dead).map(|v| v.starts_with(b"{\"owner\":null")), Some(true), "{what}: moved");
    // Another client's acquires are refused, and give the orphans their end.
    let before = server_now(&mut b);
    for k in [&lock, &dead] {
        assert_eq!(int(&mut b, &["LOCK.ACQUIRE", k, "other", "1000"]), 0, "{what}: {k}");
    }
    assert_eq!(cmd(&mut b, &["LOCK.ELECT", &lead, "other", "1000", "w"]), Ok(Value::Nil));
    assert_eq!(int(&mut b, &["SEM.ACQUIRE", &sem, "other", "1", "1000"]), 0);
    assert_eq!(int(&mut b, &["SEM.ACQUIRE", &dsem, "other", "1", "1000"]), 0);
    assert_eq!(int(&mut b, &["RWLOCK.ACQUIRE", &drw, "other", "WRITE", "1000"]), 0);
    let end = pexpiretime(&mut b, &dead);
    // The refusals asked for walks: the holders' places get their ends.
    let holder_ends: Vec<i64> =
        [(&sem, "stok"), (&dsem, "dstok"), (&drw, "drtok")].iter().map(|(k, t)| until_leased(&mut b, k, t)).collect();
    let after = server_now(&mut b);
    assert!((before + GRACE..=after + GRACE).contains(&end), "{what}: {end} not {GRACE} after [{before}, {after}]");
    for e in &holder_ends {
        assert!(
            (before + GRACE..=after + GRACE).contains(e),
            "{what}: a place's {e} not {GRACE} after [{before}, {after}]"
        );
    }
    // The live holder adopts its three; the wrong token changes nothing.
    let id = grant(&mut b);
    assert_eq!(int(&mut b, &["SESSION.ADOPT", &lock, "wrong", &id]), 0);
    assert!(pexpiretime(&mut b, &lock) > 0, "{what}: still the orphan's end");
    assert_eq!(int(&mut b, &["SESSION.ADOPT", &lock, "tok", &id]), 1);
    assert_eq!(int(&mut b, &["SESSION.ADOPT", &lead, "ltok", &id]), 1);
    assert_eq!(int(&mut b, &["SESSION.ADOPT", &sem, "stok", &id]), 1);
    assert_eq!(pttl(&mut b, &lock), -1);
    assert_eq!(place(&mut b, &sem, "stok"), SESSION_PLACE, "{what}: adopted, its session's place again");
    assert_eq!(holds(&mut b, &id).0, 3);
    // The dead holder's lock is free after the grace; the adopted ones are not.
    until_server_time(&mut b, end.max(holder_ends[1]).max(holder_ends[2]));
    eventually("the orphan's end frees it", || int(&mut b, &["LOCK.ACQUIRE", &dead, "other", "60000"]) == 1);
    eventually("the dead permit is free", || int(&mut b, &["SEM.ACQUIRE", &dsem, "other", "1", "60000"]) == 1);
    eventually("the dead read hold is gone", || int(&mut b, &["RWLOCK.ACQUIRE", &drw, "other", "WRITE", "60000"]) == 1);
    assert_eq!(int(&mut b, &["LOCK.ACQUIRE", &lock, "other", "1000"]), 0, "{what}: adopted, kept");
    assert_eq!(cmd(&mut b, &["LOCK.ELECT", &lead, "other", "1000", "w"]), Ok(Value::Nil));
    assert_eq!(int(&mut b, &["SEM.ACQUIRE", &sem, "other", "1", "1000"]), 0);
    // The replica of the new master has what it has.
    let replica = cluster.replicas_of(to)[0];
    let mut r = cluster.node(replica).conn();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(20_000).query(&mut b).unwrap();
    assert_eq!(acked, 1);
    let _: () = redis::cmd("READONLY").query(&mut r).unwrap();
    let digest = |c: &mut Connection| {
        let keys = [&lock, &lead, &dead];
        let v: Vec<_> = keys.iter().map(|k| (get(c, k), pexpiretime(c, k))).collect();
        let z: Vec<_> = [&sem, &dsem, &drw].iter().map(|k| (zrange(c, k), pexpiretime(c, k))).collect();
        (v, z, holds(c, &id).0)
    };
    assert_eq!(digest(&mut r), digest(&mut b), "{what}: the replica");
    // The old master's session ends without touching the moved keys.
    assert_eq!(int(&mut a, &["SESSION.REVOKE", &old]), 1);
    eventually("the old session is forgotten", || !session::list(&mut a).contains(&old));
    assert_eq!(int(&mut b, &["LOCK.ACQUIRE", &lock, "other", "1000"]), 0);
}

#[test]
fn a_session_held_lock_moved_with_migrate() {
    moved_with("MIGRATE", |cluster, slot, to| {
        let from = cluster.owner_of_slot(slot);
        let key = "{orphan}dead";
        cluster.open_slot_move(slot, from, to);
        cluster.migrate_slot_keys(slot, from, to);
        // While the slot is imported, the target does not serve it: an
        // acquire there (with ASKING) leaves the orphan without an end.
        let mut b = cluster.node(to).conn();
        let (refused, ttl): (i64, i64) = redis::pipe()
            .cmd("ASKING")
            .ignore()
            .cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg("other")
            .arg(1000)
            .cmd("ASKING")
            .ignore()
            .cmd("PTTL")
            .arg(key)
            .query(&mut b)
            .unwrap();
        assert_eq!((refused, ttl), (0, -1), "no end while the slot is imported");
        // Nor a walk for a holder's place.
        let refused: i64 = redis::pipe()
            .cmd("ASKING")
            .ignore()
            .cmd("SEM.ACQUIRE")
            .arg("{orphan}dsem")
            .arg("other")
            .arg(1)
            .arg(1000)
            .query::<(i64,)>(&mut b)
            .unwrap()
            .0;
        assert_eq!(refused, 0);
        thread::sleep(std::time::Duration::from_millis(300));
        let (dsem_place,): (f64,) =
            redis::pipe().cmd("ASKING").ignore().cmd("ZSCORE").arg("{orphan}dsem").arg("dstok").query(&mut b).unwrap();
        assert_eq!(dsem_place as i64, SESSION_PLACE, "no end while the slot is imported");
        cluster.close_slot_move(slot, from, to);
    });
}

#[test]
fn a_session_held_lock_moved_with_atomic_slot_migration() {
    let v = server_version();
    if !(v.is_valkey() && v.major >= 9) {
        println!("skipped: {v:?} has no atomic slot migration (CLUSTER MIGRATESLOTS is Valkey 9)");
        return;
    }
    moved_with("MIGRATESLOTS", |cluster, slot, to| cluster.atomic_move_slots(slot, slot, to));
}
