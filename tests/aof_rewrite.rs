//! An AOF rewrite with `aof-use-rdb-preamble no` keeps the module's node
//! state (docs/sessions.md, "Persistence"): the rewritten base holds keys
//! only, so the master restates its sessions, their holds and revoked
//! holds, and the fence mark after the fork (`src/store/aof_walk.rs`); a
//! restart (`kill -9`) from the rewritten AOF brings them back. The walk
//! runs in slices while writes go on, and changes nothing on a replica.

use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::lease::{field, fields_of, int, zrange};
use support::{info_field, replica_of, wait_for_link};

/// A master without the RDB preamble, its AOF fsynced at every write, in
/// a fresh folder (deleted with the returned guard).
fn no_preamble(tag: &str) -> (Server, Dir) {
    let dir = Dir(std::env::temp_dir().join(format!("redis-lock-aofrw-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let server = Server::builder()
        .dir(&dir.0)
        .arg("appendonly", "yes")
        .arg("appendfsync", "always")
        .arg("aof-use-rdb-preamble", "no")
        .start();
    (server, dir)
}

struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn grant(c: &mut Connection, args: &[&str]) -> String {
    redis::cmd("SESSION.GRANT").arg(args).query(c).expect("SESSION.GRANT")
}

fn list(c: &mut Connection) -> Vec<String> {
    redis::cmd("SESSION.LIST").query(c).expect("SESSION.LIST")
}

/// What SESSION.INFO says of `id` with its first 1000 holds (nil: unknown),
/// without `ttl-left-ms`, which runs down.
fn described(c: &mut Connection, id: &str) -> Option<Vec<(String, Value)>> {
    let f = fields_of(c, &["SESSION.INFO", id, "COUNT", "1000"])?;
    Some(f.into_iter().filter(|(n, _)| n != "ttl-left-ms").collect())
}

fn persistence(c: &mut Connection) -> String {
    redis::cmd("INFO").arg("persistence").query(c).unwrap()
}

/// Waits until the rewrite is done and the walk after it too.
fn until_rewritten(c: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let info = persistence(c);
        if info.contains("aof_rewrite_in_progress:0")
            && info.contains("aof_rewrite_scheduled:0")
            && info_field(c, "aof_walking") == 0
        {
            return;
        }
        assert!(Instant::now() < deadline, "the rewrite or the walk did not end: {info}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn bgrewriteaof(c: &mut Connection) {
    let _: Value = redis::cmd("BGREWRITEAOF").query(c).expect("BGREWRITEAOF");
}

fn fence(c: &mut Connection, key: &str, token: &str) -> i64 {
    int(c, &["LOCK.ACQUIRE", key, token, "60000", "FENCE"])
}

/// Every kind of session hold, a revoked lock and a revoked permit (with
/// its reason), and a fenced grant survive a
/// rewrite and a `kill -9`: the same sessions, deadlines and holds, a
/// keepalive that works (and says some hold is revoked), the locks refused
/// to others, and fences above the last.
#[test]
fn sessions_revoked_holds_and_the_fence_mark_survive_a_rewrite_without_the_preamble() {
    let (mut server, _dir) = no_preamble("kinds");
    let mut c = server.conn();
    let id = grant(&mut c, &["60000", "LOCKDELAY", "100"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "t", "1000", "SESSION", &id]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem", "t", "1", "1000", "SESSION", &id]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "t", "READ", "1000", "SESSION", &id]), 1);
    assert!(int(&mut c, &["LOCK.ELECT", "e", "t", "1000", "v", "SESSION", &id]) > 0);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "revoked", "t", "1000", "SESSION", &id]), 1);
    let revoke: Value = redis::cmd("LOCK.REVOKE")
        .arg("revoked")
        .arg("GRACE")
        .arg(600_000)
        .arg("REASON")
        .arg("drain")
        .query(&mut c)
        .unwrap();
    assert!(matches!(revoke, Value::Array(_)), "{revoke:?}");
    let other = grant(&mut c, &["30000"]);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "sem2", "o", "2", "1000", "SESSION", &other]), 1);
    // A revoked holder: its reason is kept beside the key (with its note).
    let revoke: Value = redis::cmd("LOCK.REVOKE")
        .arg(&["sem2", "TOKEN", "o", "GRACE", "600000", "REASON", "resize"])
        .query(&mut c)
        .unwrap();
    assert!(matches!(revoke, Value::Array(_)), "{revoke:?}");
    let reasons = |c: &mut Connection| field(&fields_of(c, &["SEM.INFO", "sem2"]).unwrap(), "revoked-reasons");
    assert_eq!(
        reasons(&mut c),
        Value::Array(vec![Value::BulkString(b"o".to_vec()), Value::BulkString(b"resize".to_vec())])
    );
    // A mark far above the clock's floor, so that only the mark can
    // explain the next fence.
    let floor = {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
        (s * 1000 + us / 1000) * 1000 + 86_000_000_000
    };
    let _: () = redis::cmd("LOCK.FENCEFLOOR").arg(floor).query(&mut c).unwrap();
    let fenced = fence(&mut c, "f", "a");
    assert!(fenced > floor as i64);
    let mut ids = vec![id.clone(), other.clone()];
    ids.sort();
    assert_eq!(list(&mut c), ids);
    let before = (described(&mut c, &id), described(&mut c, &other));
    assert!(before
        .0
        .as_ref()
        .is_some_and(|f| field(f, "holds") == Value::Int(5) && field(f, "revoked-holds") == Value::Int(1)));
    let sets = (zrange(&mut c, "sem"), zrange(&mut c, "rw"), zrange(&mut c, "sem2"));
    let walks = info_field(&mut c, "aof_walks");

    bgrewriteaof(&mut c);
    until_rewritten(&mut c);
    assert_eq!(info_field(&mut c, "aof_walks"), walks + 1, "one walk for one rewrite");
    server.restart();
    let mut c = server.conn();

    assert_eq!(list(&mut c), ids, "the sessions came back");
    assert_eq!((described(&mut c, &id), described(&mut c, &other)), before, "deadlines, holds, revoked holds");
    assert_eq!((zrange(&mut c, "sem"), zrange(&mut c, "rw"), zrange(&mut c, "sem2")), sets);
    assert_eq!(
        reasons(&mut c),
        Value::Array(vec![Value::BulkString(b"o".to_vec()), Value::BulkString(b"resize".to_vec())])
    );
    let kept: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&id).arg(&other).query(&mut c).unwrap();
    assert_eq!(kept, vec![-60_000, -30_000], "alive; each says some hold of it is revoked");
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "x", "1000"]), 0);
    assert!(matches!(
        redis::cmd("SEM.ACQUIRE").arg(&["sem", "x", "1", "1000"]).query::<Value>(&mut c).unwrap(),
        Value::Nil | Value::Int(0)
    ));
    assert!(matches!(
        redis::cmd("RWLOCK.ACQUIRE").arg(&["rw", "x", "WRITE", "1000"]).query::<Value>(&mut c).unwrap(),
        Value::Nil | Value::Int(0)
    ));
    assert!(int(&mut c, &["LOCK.RENEW", "revoked", "t", "1000"]) < 0, "still revoked");
    let again = fence(&mut c, "f2", "b");
    assert!(again > fenced, "{again} > {fenced}");
    // The restarted server ends the session as the first would have.
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    while ["lock", "sem", "rw", "e", "revoked"].iter().any(|k| int(&mut c, &["EXISTS", k]) == 1) {
        assert!(Instant::now() < deadline, "the revoked session's locks were not released");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The locks of the session the walk restates while writes go on.
const BIG: i64 = 10_000;

/// A session of 10,000 locks takes the walk many slices (at most 256 holds
/// each); writes go on meanwhile: releases, new grants, keepalives, a
/// session granted and one revoked. A session revoked just before the fork
/// (its locks still being released) is restated as ended. After the walk
/// and the rewrite, a `kill -9` and a restart give the same sessions; the
/// replica that received the walk's entries has the master's state and
/// counted nothing.
#[test]
fn a_walk_in_slices_with_writes_between_them_leaves_the_state_of_the_master() {
    let (mut server, _dir) = no_preamble("slices");
    let mut c = server.conn();
    let (_replica, mut r) = replica_of(&server);
    let big = grant(&mut c, &["60000"]);
    let ending = grant(&mut c, &["60000"]);
    let mut p = redis::pipe();
    for i in 0..BIG {
        p.cmd("LOCK.ACQUIRE").arg(format!("k{i}")).arg("t").arg(1000).arg("SESSION").arg(&big).ignore();
    }
    for i in 0..1_000 {
        p.cmd("LOCK.ACQUIRE").arg(format!("end{i}")).arg("t").arg(1000).arg("SESSION").arg(&ending).ignore();
    }
    let () = p.query(&mut c).unwrap();
    let granted_on_replica = info_field(&mut r, "sessions_granted");
    // The revoke and the rewrite in one pipeline: the fork sees the
    // session ended with its locks still to release.
    let (revoked, _): (i64, Value) =
        redis::pipe().cmd("SESSION.REVOKE").arg(&ending).cmd("BGREWRITEAOF").query(&mut c).unwrap();
    assert_eq!(revoked, 1);
    let (mut n, mut late) = (0, Vec::new());
    while info_field(&mut c, "aof_walking") == 1 || n < 3 {
        // Writes between the slices (or after the walk, on a fast run).
        assert_eq!(int(&mut c, &["LOCK.RELEASE", &format!("k{n}"), "t"]), 1);
        assert_eq!(int(&mut c, &["LOCK.RELEASE", &format!("k{}", BIG - 1 - n), "t"]), 1);
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", &format!("new{n}"), "t", "1000", "SESSION", &big]), 1);
        let kept: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&big).query(&mut c).unwrap();
        assert_eq!(kept, vec![60_000]);
        let s = grant(&mut c, &["60000"]);
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", &format!("late{n}"), "t", "1000", "SESSION", &s]), 1);
        if n % 2 == 0 {
            assert_eq!(int(&mut c, &["SESSION.REVOKE", &s]), 1);
        } else {
            late.push(s);
        }
        n += 1;
        assert!(n < 1_000, "the walk did not end");
    }
    eprintln!("{n} rounds of writes while the walk ran");
    until_rewritten(&mut c);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Forgotten by the table once its locks are released (SESSION.INFO
    // still tells its end for a while: docs/sessions.md).
    while list(&mut c).contains(&ending) || list(&mut c).len() != 1 + late.len() {
        assert!(Instant::now() < deadline, "the revoked sessions' locks were not released");
        thread::sleep(Duration::from_millis(10));
    }
    let ids = list(&mut c);
    let before: Vec<_> = ids.iter().map(|id| described(&mut c, id)).collect();
    let big_holds = field(before[ids.iter().position(|i| *i == big).unwrap()].as_ref().unwrap(), "holds");
    assert_eq!(big_holds, Value::Int(BIG - n), "2 released and 1 granted per round");
    let keys: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    // The replica: the same sessions and holds, no grant counted there.
    let _: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut c).unwrap();
    assert_eq!(list(&mut r), ids);
    let on_replica: Vec<_> = ids.iter().map(|id| described(&mut r, id)).collect();
    assert_eq!(on_replica, before, "the replica applied the walk's entries to the same state");
    assert_eq!(info_field(&mut r, "sessions_granted"), granted_on_replica);

    server.restart();
    let mut c = server.conn();
    assert_eq!(list(&mut c), ids, "the same sessions after the restart");
    let after: Vec<_> = ids.iter().map(|id| described(&mut c, id)).collect();
    assert_eq!(after, before);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), keys);
    assert_eq!(int(&mut c, &["EXISTS", "end0"]), 0, "the ended session's locks stay released");
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k5000", "x", "1000"]), 0, "held by its session");
    // Its locks go with it, on the restarted server.
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &big]), 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while int(&mut c, &["EXISTS", "k5000"]) == 1 {
        assert!(Instant::now() < deadline, "the session's locks were not released");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Only a rewrite without the preamble is walked: not a `BGSAVE`'s fork,
/// not a rewrite with the preamble (it carries the state itself), and
/// the state survives both all the same.
#[test]
fn no_walk_after_a_bgsave_or_a_rewrite_with_the_preamble() {
    let (mut server, _dir) = no_preamble("others");
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "lock", "t", "1000", "SESSION", &id]), 1);
    let _: Value = redis::cmd("BGSAVE").query(&mut c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !persistence(&mut c).contains("rdb_bgsave_in_progress:0") {
        assert!(Instant::now() < deadline, "BGSAVE did not end");
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info_field(&mut c, "aof_walks"), 0, "a BGSAVE's fork");
    let _: () = redis::cmd("CONFIG").arg(&["SET", "aof-use-rdb-preamble", "yes"]).query(&mut c).unwrap();
    bgrewriteaof(&mut c);
    until_rewritten(&mut c);
    assert_eq!(info_field(&mut c, "aof_walks"), 0, "a rewrite with the preamble");
    let before = described(&mut c, &id);
    server.restart();
    let mut c = server.conn();
    assert_eq!(described(&mut c, &id), before, "the preamble carried the session");
}

/// The sessions the walk restates slot by slot while others come and go.
const MANY: usize = 20_000;
/// The most rounds of writes during that walk.
const ROUNDS: usize = 90;

/// 20,000 sessions take the walk many slices (a `GRANT` each, at most 256
/// a slice), and between them sessions are granted (into the slots of
/// sessions just gone, ahead of the walk or behind it), revoked before the
/// walk reaches them or after, and kept alive. After the walk, a `kill -9`
/// and a restart from the rewritten AOF give the same sessions with the
/// same deadlines and holds: none revoked comes back alive, none granted
/// meanwhile is missing.
#[test]
fn sessions_granted_and_ended_between_the_walks_slices_come_back_as_they_were() {
    let (mut server, _dir) = no_preamble("between");
    let mut c = server.conn();
    let mut p = redis::pipe();
    for _ in 0..MANY {
        p.cmd("SESSION.GRANT").arg(60_000);
    }
    let ids: Vec<String> = p.query(&mut c).unwrap();
    // Every 100th session holds a lock.
    let mut p = redis::pipe();
    for (i, id) in ids.iter().enumerate().step_by(100) {
        p.cmd("LOCK.ACQUIRE").arg(format!("h{i}")).arg("t").arg(60_000).arg("SESSION").arg(id).ignore();
    }
    let () = p.query(&mut c).unwrap();
    let walks = info_field(&mut c, "aof_walks");
    bgrewriteaof(&mut c);
    let (mut n, mut gone, mut late, mut kept) = (0, Vec::new(), Vec::new(), Vec::new());
    // Rounds of writes while the walk runs (at least 3, at most `ROUNDS`:
    // the indexes below stay apart).
    while n < 3 || (n < ROUNDS && info_field(&mut c, "aof_walking") == 1) {
        // From the end of the table, where the walk is not yet: one with a
        // lock (its slot is freed once the lock is released), one without.
        for i in [MANY - 100 * (n + 1), MANY - 1 - n] {
            assert_eq!(int(&mut c, &["SESSION.REVOKE", &ids[i]]), 1);
            gone.push(ids[i].clone());
        }
        // From the start, where the walk has been.
        assert_eq!(int(&mut c, &["SESSION.REVOKE", &ids[n * 100 + 1]]), 1);
        gone.push(ids[n * 100 + 1].clone());
        let k: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&ids[MANY / 2 + n]).query(&mut c).unwrap();
        assert_eq!(k, vec![60_000]);
        kept.push(ids[MANY / 2 + n].clone());
        // New ones take the slots freed last.
        let s = grant(&mut c, &["60000"]);
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", &format!("late{n}"), "t", "60000", "SESSION", &s]), 1);
        match n % 3 {
            0 => {
                assert_eq!(int(&mut c, &["SESSION.REVOKE", &s]), 1);
                gone.push(s);
            }
            _ => late.push(s),
        }
        n += 1;
    }
    eprintln!("{n} rounds of writes while the walk ran");
    until_rewritten(&mut c);
    assert_eq!(info_field(&mut c, "aof_walks"), walks + 1);
    let live = MANY - 3 * n + late.len();
    let deadline = Instant::now() + Duration::from_secs(20);
    // The revoked sessions are forgotten once their locks are released.
    while list(&mut c).len() != live {
        assert!(Instant::now() < deadline, "the revoked sessions' locks were not released");
        thread::sleep(Duration::from_millis(10));
    }
    let listed = list(&mut c);
    let watched: Vec<&String> =
        late.iter().chain(&kept).chain(ids.iter().step_by(97)).filter(|id| listed.contains(id)).collect();
    let before: Vec<_> = watched.iter().map(|id| described(&mut c, id)).collect();
    assert!(before.iter().all(Option::is_some));
    let keys: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();

    server.restart();
    let mut c = server.conn();
    assert_eq!(list(&mut c), listed, "the same sessions after the restart");
    let after: Vec<_> = watched.iter().map(|id| described(&mut c, id)).collect();
    assert_eq!(after, before, "deadlines and holds");
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), keys);
    let mut p = redis::pipe();
    for id in &gone {
        p.cmd("SESSION.KEEPALIVE").arg(id);
    }
    let answers: Vec<Vec<i64>> = p.query(&mut c).unwrap();
    assert!(answers.iter().all(|a| a == &[0]), "no revoked session is alive again: {answers:?}");
    let mut p = redis::pipe();
    for id in &late {
        p.cmd("SESSION.KEEPALIVE").arg(id);
    }
    let answers: Vec<Vec<i64>> = p.query(&mut c).unwrap();
    assert!(answers.iter().all(|a| a == &[60_000]), "the sessions granted meanwhile: {answers:?}");
}

/// A replica's own rewrite without the preamble: it restates the state its
/// master's stream gave it (the full resync's RDB, then entries) into its
/// own AOF, and a `kill -9` and a restart from that AOF (as a master of its
/// own) give the master's sessions, deadlines, holds, revoked holds and
/// fence mark.
#[test]
fn a_replica_restates_its_state_into_its_own_rewritten_aof() {
    let master = Server::start();
    let mut m = master.conn();
    let id = grant(&mut m, &["60000", "LOCKDELAY", "100"]);
    assert_eq!(int(&mut m, &["LOCK.ACQUIRE", "lock", "t", "1000", "SESSION", &id]), 1);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "sem", "t", "2", "1000", "SESSION", &id]), 1);
    assert_eq!(int(&mut m, &["LOCK.ACQUIRE", "revoked", "t", "1000", "SESSION", &id]), 1);
    let revoke: Value =
        redis::cmd("LOCK.REVOKE").arg(&["revoked", "GRACE", "600000", "REASON", "drain"]).query(&mut m).unwrap();
    assert!(matches!(revoke, Value::Array(_)), "{revoke:?}");
    let floor = {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut m).unwrap();
        (s * 1000 + us / 1000) * 1000 + 86_000_000_000
    };
    let _: () = redis::cmd("LOCK.FENCEFLOOR").arg(floor).query(&mut m).unwrap();
    let fenced = fence(&mut m, "f", "a");
    assert!(fenced > floor as i64);

    let (mut replica, _dir) = no_preamble("replica");
    let mut r = replica.conn();
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(master.port()).query(&mut r).unwrap();
    wait_for_link(&mut r);
    // After the resync: entries of the master's stream.
    let other = grant(&mut m, &["30000"]);
    assert_eq!(int(&mut m, &["LOCK.ACQUIRE", "late", "t", "1000", "SESSION", &other]), 1);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    until_rewritten(&mut r);
    let walks = info_field(&mut r, "aof_walks");
    assert!(walks >= 1, "Redis rewrites a replica's AOF after a full resync, and the replica walked");
    bgrewriteaof(&mut r);
    until_rewritten(&mut r);
    assert!(info_field(&mut r, "aof_walks") > walks, "the replica walked after its rewrite");
    let ids = list(&mut m);
    assert_eq!(ids.len(), 2);
    let before: Vec<_> = ids.iter().map(|s| described(&mut m, s)).collect();
    assert_eq!(ids.iter().map(|s| described(&mut r, s)).collect::<Vec<_>>(), before, "the replica's state");
    assert_eq!(info_field(&mut r, "sessions_granted"), 0, "the replica counted nothing");

    replica.restart();
    let mut r = replica.conn();
    assert_eq!(list(&mut r), ids, "the sessions came back from the replica's AOF");
    assert_eq!(ids.iter().map(|s| described(&mut r, s)).collect::<Vec<_>>(), before);
    assert!(int(&mut r, &["LOCK.RENEW", "revoked", "t", "1000"]) < 0, "still revoked");
    let again = fence(&mut r, "f2", "b");
    assert!(again > fenced, "{again} > {fenced}");
}
