//! Sessions (docs/sessions.md) against a real server: grant, keepalive,
//! revoke, expiry, SESSION.INFO and SESSION.LIST; locks attached with
//! `LOCK.ACQUIRE … SESSION id`, with and without WAIT; errors that change
//! nothing; a replica and an AOF restart that keep sessions with their
//! absolute deadlines, a promoted replica that restarts them; the
//! reference scripts refusing a session-held lock.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_harness::Server;
use redis_lock_rules::scripts;

mod support;
use support::lease::{cmd, err, field, fields_of, int, server_now, until_server_time};
use support::session::{eventually, grant, held_value, list};
use support::{info_field, until_waiting, wait_for_link, waiter_on, LEASE_MS};

fn keepalive(c: &mut Connection, ids: &[&str]) -> Vec<i64> {
    redis::cmd("SESSION.KEEPALIVE").arg(ids).query(c).expect("SESSION.KEEPALIVE")
}

fn attach(c: &mut Connection, key: &str, token: &str, id: &str) -> i64 {
    int(c, &["LOCK.ACQUIRE", key, token, "30000", "SESSION", id])
}

fn get(c: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).expect("GET")
}

fn pttl(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(c).expect("PTTL")
}

fn session_field(c: &mut Connection, id: &str, name: &str) -> Option<Value> {
    fields_of(c, &["SESSION.INFO", id]).map(|f| field(&f, name))
}

fn session_int(c: &mut Connection, id: &str, name: &str) -> i64 {
    match session_field(c, id, name) {
        Some(Value::Int(n)) => n,
        other => panic!("{name} of {id}: {other:?}"),
    }
}

#[test]
fn grant_keepalive_info_list_and_revoke() {
    let server = Server::start();
    let mut c = server.conn();
    let a = grant(&mut c, &["60000"]);
    let b = grant(&mut c, &["30000", "LOCKDELAY", "1500"]);
    assert_ne!(a, b);
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(list(&mut c), both);
    let first: Vec<String> = redis::cmd("SESSION.LIST").arg("COUNT").arg(1).query(&mut c).unwrap();
    assert_eq!(first, both[..1]);

    let now = server_now(&mut c);
    let f = fields_of(&mut c, &["SESSION.INFO", &b]).expect("b exists");
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
    let all = ["id", "state", "ttl-ms", "ttl-left-ms", "deadline", "lock-delay-ms", "holds", "first", "revoked-holds"];
    assert_eq!(names, [&all[..], &["revoked", "end-reason", "evicted-holds", "evicted"]].concat());
    assert_eq!(field(&f, "end-reason"), Value::Nil);
    assert_eq!(field(&f, "state"), Value::BulkString(b"alive".to_vec()));
    assert_eq!(field(&f, "ttl-ms"), Value::Int(30_000));
    assert_eq!(field(&f, "lock-delay-ms"), Value::Int(1_500));
    assert_eq!(field(&f, "holds"), Value::Int(0));
    let Value::Int(deadline) = field(&f, "deadline") else { panic!("{f:?}") };
    assert!(deadline > now && deadline <= now + 30_000, "{deadline} vs {now}");

    // Kept alive: its deadline moves to now + TTL; an unknown id gets 0.
    thread::sleep(Duration::from_millis(20));
    let bogus = "0123456789abcdef0123456789abcdef";
    assert_eq!(keepalive(&mut c, &[&b, bogus, "nonsense", &a]), vec![30_000, 0, 0, 60_000]);
    assert!(session_int(&mut c, &b, "deadline") > deadline);

    assert_eq!(int(&mut c, &["SESSION.REVOKE", &a]), 1);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &a]), 0);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", bogus]), 0);
    assert_eq!(keepalive(&mut c, &[&a]), vec![0]);
    eventually("the revoked session is forgotten", || list(&mut c) == vec![b.clone()]);
    // Forgotten by the table, its end is still told (docs/sessions.md).
    assert_eq!(session_field(&mut c, &a, "state"), Some(Value::BulkString(b"revoked".to_vec())));
    assert_eq!(session_int(&mut c, &a, "holds"), 0);

    assert_eq!(info_field(&mut c, "sessions"), 1);
    assert_eq!(info_field(&mut c, "sessions_granted"), 2);
    assert_eq!(info_field(&mut c, "sessions_revoked"), 1);
    assert_eq!(info_field(&mut c, "session_keepalives"), 2);
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    for (args, error) in [
        (&["SESSION.GRANT", "0"][..], "ttl-ms must be a positive integer"),
        (&["SESSION.GRANT", "-5"], "ttl-ms must be a positive integer"),
        (&["SESSION.GRANT", "1000", "LOCKDELAY", "60001"], "LOCKDELAY must be an integer from 0 to 60000"),
        (&["SESSION.GRANT", "1000", "LOCKDELAY"], "syntax error"),
        (&["SESSION.GRANT", "1000", "FENCE"], "syntax error"),
        (&["SESSION.GRANT", "9223372036854775807"], "ttl-ms is too large"),
        (&["SESSION.GRANT"], "wrong number of arguments"),
        (&["SESSION.KEEPALIVE"], "wrong number of arguments"),
        (&["SESSION.REVOKE"], "wrong number of arguments"),
        (&["SESSION.INFO", &id, "COUNT", "0"], "COUNT must be an integer from 1 to 1000"),
        (&["SESSION.INFO", &id, "LIMIT", "5"], "syntax error"),
        (&["SESSION.LIST", "x"], "syntax error"),
        (&["SESSION.LIST", "COUNT", "0"], "COUNT must be a positive integer"),
        (&["SESSION.APPLY", "GRANT", &id, "1", "0", "1"], "SESSION.APPLY is internal"),
        (&["SESSION.APPLY", "FORGET", &id], "SESSION.APPLY is internal"),
        (&["LOCK.ACQUIRE", "k", "t", "1000", "SESSION", "0123456789abcdef0123456789abcdef"], "no such session"),
        (&["LOCK.ACQUIRE", "k", "t", "1000", "SESSION", "not-an-id"], "no such session"),
        (&["LOCK.ACQUIRE", "k", "t", "1000", "SESSION"], "syntax error"),
        (&["LOCK.ACQUIRE", "k", "t", "1000", "SESSION", &id, "LOCKDELAY", "0"], "LOCKDELAY is the session's"),
        (&["LOCK.ACQUIRE", "k", "t", "1000", "SESSION", &id, "MAXHOLD", "10"], "MAXHOLD must be at least ttl-ms"),
        (&["LOCK.TAKEOVER", "k", "t", "run", "1000", "SESSION", &id], "syntax error"),
        (&["LOCK.ACQUIREALL", "1", "k", "t", "1000", "SESSION", "0123456789abcdef0123456789abcdef"], "no such session"),
        (&["LOCK.ACQUIREALL", "1", "k", "t", "1000", "SESSION", &id, "LOCKDELAY", "0"], "LOCKDELAY is the session's"),
        (&["SEM.ACQUIRE", "k", "t", "2", "1000", "SESSION", "0123456789abcdef0123456789abcdef"], "no such session"),
        (&["LOCK.ELECT", "k", "t", "1000", "v", "SESSION", &id, "LOCKDELAY", "0"], "LOCKDELAY is the session's"),
    ] {
        let e = err(&mut c, args);
        assert!(e.contains(error), "{args:?}: {e}");
    }
    let e =
        redis::cmd("LOCK.ACQUIRE").arg("k").arg(&b"\xff"[..]).arg(1000).arg("SESSION").arg(&id).query::<Value>(&mut c);
    assert!(e.unwrap_err().to_string().contains("valid UTF-8"));
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, 0, "a refused command wrote a key");
    assert_eq!(list(&mut c), vec![id.clone()]);
    assert_eq!(session_int(&mut c, &id, "holds"), 0);
    // The session survived the refusals intact.
    assert_eq!(session_field(&mut c, &id, "state"), Some(Value::BulkString(b"alive".to_vec())));
}

#[test]
fn a_session_held_lock_needs_no_renewal_and_works_as_any_lock() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000", "LOCKDELAY", "2000"]);
    assert_eq!(attach(&mut c, "job", "tok", &id), 1);
    assert_eq!(attach(&mut c, "job", "other", &id), 0, "a held key is refused as always");
    assert_eq!(get(&mut c, "job").as_deref(), Some(held_value(&id, "tok").as_str()));
    assert_eq!(pttl(&mut c, "job"), -1, "the session, not the key, keeps it");
    let info = fields_of(&mut c, &["LOCK.INFO", "job"]).expect("held");
    assert_eq!(field(&info, "owner"), Value::BulkString(b"tok".to_vec()));
    assert_eq!(field(&info, "format"), Value::BulkString(b"structured".to_vec()));
    // A renewal by its token replies 1 and leaves the key as it is.
    assert_eq!(int(&mut c, &["LOCK.RENEW", "job", "tok", "100"]), 1);
    assert_eq!(int(&mut c, &["LOCK.RENEW", "job", "nope", "100"]), 0);
    assert_eq!(pttl(&mut c, "job"), -1);
    // A guarded write runs for its holder only.
    let ok = cmd(&mut c, &["LOCK.GUARD", "job", "tok", "SET", "out", "1"]).unwrap();
    assert_eq!(ok, Value::Okay);
    assert!(err(&mut c, &["LOCK.GUARD", "job", "nope", "SET", "out", "2"]).contains("NOTHELD"));
    // A fenced grant with MAXHOLD: the key expires at the hold limit plus the session's delay.
    let fence = int(&mut c, &["LOCK.ACQUIRE", "capped", "tok", "1000", "FENCE", "MAXHOLD", "50000", "SESSION", &id]);
    assert!(fence > 1, "{fence}");
    let at: i64 = redis::cmd("PEXPIRETIME").arg("capped").query(&mut c).unwrap();
    let now = server_now(&mut c);
    assert!(at > now + 50_000 && at <= now + 52_000, "{at} vs {now}");
    assert_eq!(session_int(&mut c, &id, "holds"), 2);
    let first = session_field(&mut c, &id, "first").expect("listed");
    assert_eq!(
        first,
        Value::Array(vec![
            Value::BulkString(b"capped".to_vec()),
            Value::Int(0),
            Value::BulkString(b"job".to_vec()),
            Value::Int(0)
        ])
    );
    // Released by its holder: gone at once, no lock-delay, detached.
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "tok"]), 1);
    assert_eq!(get(&mut c, "job"), None);
    assert_eq!(session_int(&mut c, &id, "holds"), 1);
    assert_eq!(attach(&mut c, "job", "again", &id), 1);
}

#[test]
fn the_reference_scripts_never_take_renew_or_release_a_session_held_lock() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    assert_eq!(attach(&mut c, "job", "tok", &id), 1);
    let value = held_value(&id, "tok");
    let eval = |c: &mut Connection, script: &str, args: &[&str]| -> i64 {
        redis::cmd("EVAL").arg(script).arg(1).arg("job").arg(args).query(c).expect("EVAL")
    };
    for run in ["run-1", ""] {
        let wanted = format!(r#"{{"owner":"thief","runId":"{run}"}}"#);
        assert_eq!(eval(&mut c, scripts::TAKEOVER, &[&wanted, "1000"]), 0);
    }
    assert_eq!(eval(&mut c, scripts::TAKEOVER, &[r#"{"owner":"tok","runId":"r"}"#, "1"]), 0);
    assert_eq!(eval(&mut c, scripts::RENEW, &["tok", "100"]), 0);
    assert_eq!(eval(&mut c, scripts::RELEASE, &["tok"]), 0);
    for token in ["null", "", &value] {
        assert_eq!(eval(&mut c, scripts::RELEASE, &[token]), 0);
    }
    let set: Value = redis::cmd("SET").arg("job").arg("x").arg("NX").arg("PX").arg(1000).query(&mut c).unwrap();
    assert_eq!(set, Value::Nil);
    assert_eq!(get(&mut c, "job"), Some(value));
    assert_eq!(pttl(&mut c, "job"), -1);
    // Once the session is revoked, the key is gone and anyone may take it.
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    eventually("the revoke released the key", || get(&mut c, "job").is_none());
    assert_eq!(eval(&mut c, scripts::TAKEOVER, &[r#"{"owner":"next","runId":"r"}"#, "1000"]), 1);
}

#[test]
fn an_expired_session_ends_its_locks_with_its_lock_delay_at_once() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["400", "LOCKDELAY", "1500"]);
    for k in ["a", "b", "c"] {
        assert_eq!(attach(&mut c, k, "tok", &id), 1);
    }
    let deadline = session_int(&mut c, &id, "deadline");
    until_server_time(&mut c, deadline);
    // From its deadline on, its holder holds nothing (whether or not the
    // timer got there first), and the keys stay taken for the delay.
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "a", "tok"]), 0);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "a", "next", "1000"]), 0);
    let tombstone = format!(r#"{{"owner":null,"delayedUntil":{}}}"#, deadline + 1_500);
    for k in ["a", "b", "c"] {
        eventually("the key is settled", || get(&mut c, k).as_deref() == Some(tombstone.as_str()));
        let at: i64 = redis::cmd("PEXPIRETIME").arg(k).query(&mut c).unwrap();
        assert_eq!(at, deadline + 1_500, "{k}");
    }
    assert_eq!(keepalive(&mut c, &[&id]), vec![0]);
    eventually("the session is forgotten", || list(&mut c).is_empty());
    assert_eq!(info_field(&mut c, "sessions_expired"), 1);
    assert_eq!(info_field(&mut c, "session_holds_ended"), 3);
    until_server_time(&mut c, deadline + 1_500);
    eventually("the delay ended", || get(&mut c, "b").is_none());
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "b", "next", "1000"]), 1);
}

#[test]
fn a_kept_alive_session_keeps_its_locks() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["600"]);
    assert_eq!(attach(&mut c, "job", "tok", &id), 1);
    let until = Instant::now() + Duration::from_millis(2_000);
    while Instant::now() < until {
        assert_eq!(keepalive(&mut c, &[&id]), vec![600]);
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(&mut c, "job"), Some(held_value(&id, "tok")));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "tok"]), 1);
}

#[test]
fn a_revoke_hands_each_lock_to_its_first_waiter_without_delay() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000", "LOCKDELAY", "5000"]);
    assert_eq!(attach(&mut c, "job", "tok", &id), 1);
    let (tx, rx) = mpsc::channel();
    let first = waiter_on(server.conn(), "job", "first", &["WAIT", "20000"], tx.clone());
    until_waiting(&mut c, 1);
    let second = waiter_on(server.conn(), "job", "second", &["WAIT", "1500"], tx);
    until_waiting(&mut c, 2);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    let (who, reply, _) = rx.recv_timeout(Duration::from_secs(10)).expect("a waiter was answered");
    assert_eq!((who.as_str(), reply), ("first", Value::Int(1)));
    assert_eq!(get(&mut c, "job").as_deref(), Some("first"));
    let (who, reply, _) = rx.recv_timeout(Duration::from_secs(10)).expect("the second timed out");
    assert_eq!((who.as_str(), reply), ("second", Value::Int(0)));
    first.join().unwrap();
    second.join().unwrap();
}

#[test]
fn a_waiter_with_a_session_attaches_when_granted() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "job", "holder", "60000"]), 1);
    let (tx, rx) = mpsc::channel();
    let w = waiter_on(server.conn(), "job", "tok", &["WAIT", "20000", "FENCE", "SESSION", &id], tx);
    until_waiting(&mut c, 1);
    assert_eq!(session_int(&mut c, &id, "holds"), 0, "nothing attaches before the grant");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "holder"]), 1);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(10)).expect("granted");
    assert!(matches!(reply, Value::Int(f) if f > 1), "{reply:?}");
    w.join().unwrap();
    assert_eq!(get(&mut c, "job"), Some(held_value(&id, "tok")));
    assert_eq!(pttl(&mut c, "job"), -1);
    assert_eq!(session_int(&mut c, &id, "holds"), 1);
}

#[test]
fn a_waiter_whose_session_ends_is_answered_at_once() {
    let server = Server::start();
    let mut c = server.conn();
    let revoked = grant(&mut c, &["60000"]);
    let expiring = grant(&mut c, &["400"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "job", "holder", "60000"]), 1);
    let (tx, rx) = mpsc::channel();
    let w1 = waiter_on(server.conn(), "job", "by-revoke", &["WAIT", "30000", "SESSION", &revoked], tx.clone());
    until_waiting(&mut c, 1);
    let w2 = waiter_on(server.conn(), "job", "by-expiry", &["WAIT", "30000", "FENCE", "SESSION", &expiring], tx);
    until_waiting(&mut c, 2);
    // The key stays held throughout: each request is answered by its
    // session's end, not by a grant.
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &revoked]), 1);
    let (who, reply, _) = rx.recv_timeout(Duration::from_secs(10)).expect("answered at the revoke");
    assert_eq!(who, "by-revoke");
    assert!(matches!(&reply, Value::SimpleString(e) if e.contains("no such session")), "{reply:?}");
    let (who, reply, _) = rx.recv_timeout(Duration::from_secs(20)).expect("answered at the expiry");
    assert_eq!(who, "by-expiry");
    assert!(matches!(&reply, Value::SimpleString(e) if e.contains("no such session")), "{reply:?}");
    w1.join().unwrap();
    w2.join().unwrap();
    assert_eq!(info_field(&mut c, "waiting"), 0);
    assert_eq!(get(&mut c, "job").as_deref(), Some("holder"), "nothing was written for them");
    // A waiter whose session lives is granted when its turn comes, and
    // the grant attaches to the session.
    let late = grant(&mut c, &["60000"]);
    let (tx, rx) = mpsc::channel();
    let w3 = waiter_on(server.conn(), "job", "late", &["WAIT", "30000", "SESSION", &late], tx);
    until_waiting(&mut c, 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "holder"]), 1);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(10)).expect("granted");
    assert_eq!(reply, Value::Int(1));
    w3.join().unwrap();
    assert_eq!(get(&mut c, "job"), Some(held_value(&late, "late")));
}

#[test]
fn flushall_forgets_every_session() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    assert_eq!(attach(&mut c, "job", "tok", &id), 1);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    assert!(list(&mut c).is_empty());
    assert_eq!(keepalive(&mut c, &[&id]), vec![0]);
    assert_eq!(info_field(&mut c, "sessions"), 0);
}

/// A replica gets every session with its absolute deadline, follows each
/// keepalive and end, refuses to keep one alive itself, and, promoted,
/// restarts each deadline at its full TTL and ends the session itself.
#[test]
fn a_replica_keeps_sessions_with_their_deadlines_and_a_promoted_one_ends_them() {
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let mut m = master.conn();
    let early = grant(&mut m, &["60000", "LOCKDELAY", "100"]);
    assert_eq!(attach(&mut m, "early", "tok", &early), 1);
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    let late = grant(&mut m, &["3000"]);
    assert_eq!(attach(&mut m, "late", "tok", &late), 1);
    thread::sleep(Duration::from_millis(20));
    assert_eq!(keepalive(&mut m, &[&late]), vec![3000]);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(20_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    for id in [&early, &late] {
        for name in ["deadline", "ttl-ms", "lock-delay-ms", "holds"] {
            assert_eq!(session_int(&mut r, id, name), session_int(&mut m, id, name), "{name} of {id}");
        }
    }
    assert_eq!(get(&mut r, "late"), Some(held_value(&late, "tok")));
    assert!(err(&mut r, &["SESSION.KEEPALIVE", &late]).contains("read only"));
    // The master revokes one: the replica follows.
    assert_eq!(int(&mut m, &["SESSION.REVOKE", &early]), 1);
    eventually("the replica forgot the revoked session", || list(&mut r) == vec![late.clone()]);
    assert_eq!(get(&mut r, "early"), None);
    // The master goes; the replica does not end `late` while a replica.
    drop(master);
    let deadline = session_int(&mut r, &late, "deadline");
    until_server_time(&mut r, deadline + 300);
    assert_eq!(list(&mut r), vec![late.clone()]);
    // Promoted: `late` lives a full TTL from now, then ends here.
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let promoted = server_now(&mut r);
    let left = session_int(&mut r, &late, "ttl-left-ms");
    assert!(left > 2_000 && left <= 3_000, "{left}");
    assert!(session_int(&mut r, &late, "deadline") >= promoted + 2_900);
    assert_eq!(int(&mut r, &["LOCK.RENEW", "late", "tok", "10"]), 1, "still held after the promotion");
    eventually("the promoted replica ended the session", || list(&mut r).is_empty());
    assert_eq!(get(&mut r, "late"), None);
}

/// A fresh directory that no harness guard removes, deleted on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "redis-lock-sessions-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sessions survive a restart from the AOF (before and after a rewrite,
/// whose RDB preamble carries them as aux data) and from an RDB, with
/// their absolute deadlines and their holds.
#[test]
fn sessions_survive_a_restart_from_the_aof_or_the_rdb_with_their_deadlines() {
    for (tag, aof) in [("aof", true), ("rdb", false)] {
        let dir = TempDir::new(tag);
        let mut b = Server::builder().dir(&dir.0).arg("appendfsync", "always");
        b = if aof { b.arg("appendonly", "yes") } else { b.arg("appendonly", "no") };
        let mut server = b.start();
        let mut c = server.conn();
        let id = grant(&mut c, &["60000", "LOCKDELAY", "250"]);
        assert_eq!(attach(&mut c, "job", "tok", &id), 1);
        let gone = grant(&mut c, &["60000"]);
        assert_eq!(int(&mut c, &["SESSION.REVOKE", &gone]), 1);
        eventually("the revoked session is forgotten", || list(&mut c) == vec![id.clone()]);
        for round in 0..2 {
            thread::sleep(Duration::from_millis(10));
            assert_eq!(keepalive(&mut c, &[&id]), vec![60_000]);
            let before: Vec<i64> =
                ["deadline", "ttl-ms", "lock-delay-ms", "holds"].iter().map(|n| session_int(&mut c, &id, n)).collect();
            if aof && round == 1 {
                let _: Value = redis::cmd("BGREWRITEAOF").query(&mut c).unwrap();
                eventually("the rewrite ended", || {
                    let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
                    info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
                });
            }
            if !aof {
                let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
            }
            server.restart();
            c = server.conn();
            let after: Vec<i64> =
                ["deadline", "ttl-ms", "lock-delay-ms", "holds"].iter().map(|n| session_int(&mut c, &id, n)).collect();
            assert_eq!(after, before, "{tag}, round {round}");
            assert_eq!(list(&mut c), vec![id.clone()], "{tag}");
            assert_eq!(get(&mut c, "job"), Some(held_value(&id, "tok")), "{tag}");
        }
        // The restarted server ends it as the first would have.
        assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
        eventually("released after the restart", || get(&mut c, "job").is_none());
    }
}

/// Ending a session with many holds proceeds in slices: a probe client's
/// PINGs keep being answered while it runs, and every hold ends.
#[test]
fn a_large_session_ends_in_slices() {
    const HOLDS: usize = 20_000;
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    let mut pipe = redis::pipe();
    for i in 0..HOLDS {
        pipe.cmd("LOCK.ACQUIRE").arg(format!("k{i}")).arg("tok").arg(LEASE_MS).arg("SESSION").arg(&id);
    }
    let granted: Vec<i64> = pipe.query(&mut c).unwrap();
    assert!(granted.iter().all(|&g| g == 1));
    assert_eq!(session_int(&mut c, &id, "holds"), HOLDS as i64);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    // Every lock is refused to its holder at once, before the slices reach it.
    assert_eq!(int(&mut c, &["LOCK.RELEASE", &format!("k{}", HOLDS - 1), "tok"]), 0);
    let mut probe = server.conn();
    let mut pings = 0;
    eventually("every hold ended", || {
        let _: String = redis::cmd("PING").query(&mut probe).unwrap();
        pings += 1;
        redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap() == 0
    });
    assert!(pings > 1, "the end took one step: {pings} pings");
    assert_eq!(info_field(&mut c, "session_holds_ended"), HOLDS as u64);
}

/// A randomized model test: sessions granted, kept alive, revoked and let
/// expire, locks taken with and without a session, released and renewed,
/// against a model of who holds what, checked after every step; a replica
/// ends with the master's keys and sessions.
#[test]
fn a_random_run_matches_the_model_and_the_replica_matches_the_master() {
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::collections::BTreeMap;

    #[derive(Clone, Debug, PartialEq)]
    enum Holder {
        Plain(String),
        Session(String, String),
    }
    let seed: u64 = std::env::var("SESSIONS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let mut rng = StdRng::seed_from_u64(seed);
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    let mut c = master.conn();
    let keys = ["a", "b", "c", "d", "e", "f"];
    let tokens = ["t1", "t2", "t3"];
    let mut live: Vec<String> = Vec::new();
    let mut gone: Vec<String> = Vec::new();
    let mut held: BTreeMap<&str, Holder> = BTreeMap::new();
    let free_when_gone = |c: &mut Connection, held: &mut BTreeMap<&str, Holder>, id: &str| {
        let ks: Vec<&str> =
            held.iter().filter(|(_, h)| matches!(h, Holder::Session(s, _) if s == id)).map(|(k, _)| *k).collect();
        for k in ks {
            eventually("an ended session's lock is released", || get(c, k).is_none());
            held.remove(k);
        }
    };
    for step in 0..400 {
        let what = format!("seed {seed}, step {step}");
        match rng.gen_range(0..10) {
            0 if live.len() < 3 => live.push(grant(&mut c, &["60000"])),
            1 if !live.is_empty() => {
                let i = rng.gen_range(0..live.len());
                let id = live.remove(i);
                assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1, "{what}");
                // Refused to its holders at once, released soon after.
                for (k, h) in &held {
                    if let Holder::Session(s, t) = h {
                        if *s == id {
                            assert_eq!(int(&mut c, &["LOCK.RENEW", k, t, "1000"]), 0, "{what}");
                        }
                    }
                }
                free_when_gone(&mut c, &mut held, &id);
                gone.push(id);
            }
            2 => {
                // A short session, attached to a free key, left to expire.
                // Its deadline is within 200 ms of the grant's reply; a
                // loaded machine can take that long to send the attach,
                // which is then refused as a gone session's is (and only
                // then).
                let before = server_now(&mut c);
                let id = grant(&mut c, &["200"]);
                let deadline = server_now(&mut c) + 200;
                if let Some(k) = keys.iter().find(|k| !held.contains_key(**k)) {
                    match cmd(&mut c, &["LOCK.ACQUIRE", *k, "short", "30000", "SESSION", &id]) {
                        Ok(Value::Int(1)) => {
                            held.insert(k, Holder::Session(id.clone(), "short".into()));
                        }
                        Err(e) if e.to_string().contains("no such session") => {
                            assert!(server_now(&mut c) >= before + 200, "{what}: refused before its deadline: {e}")
                        }
                        other => panic!("{what}: attach to a short session: {other:?}"),
                    }
                }
                until_server_time(&mut c, deadline);
                assert_eq!(keepalive(&mut c, &[&id]), vec![0], "{what}");
                free_when_gone(&mut c, &mut held, &id);
                gone.push(id);
            }
            3 => {
                let ids: Vec<&str> = live.iter().chain(gone.iter()).map(String::as_str).collect();
                if !ids.is_empty() {
                    let id = ids[rng.gen_range(0..ids.len())];
                    let want = if live.iter().any(|l| l == id) { 60_000 } else { 0 };
                    assert_eq!(keepalive(&mut c, &[id]), vec![want], "{what}");
                }
            }
            4..=6 => {
                let (k, t) = (keys[rng.gen_range(0..keys.len())], tokens[rng.gen_range(0..tokens.len())]);
                let session = match rng.gen_range(0..4) {
                    0 => None,
                    1 if !gone.is_empty() => Some((gone[rng.gen_range(0..gone.len())].clone(), false)),
                    _ if !live.is_empty() => Some((live[rng.gen_range(0..live.len())].clone(), true)),
                    _ => None,
                };
                match session {
                    None => {
                        let got = int(&mut c, &["LOCK.ACQUIRE", k, t, "60000"]);
                        let want = i64::from(!held.contains_key(k));
                        assert_eq!(got, want, "{what}");
                        if want == 1 {
                            held.insert(k, Holder::Plain(t.into()));
                        }
                    }
                    Some((id, true)) => {
                        let want = i64::from(!held.contains_key(k));
                        assert_eq!(attach(&mut c, k, t, &id), want, "{what}");
                        if want == 1 {
                            held.insert(k, Holder::Session(id, t.into()));
                        }
                    }
                    Some((id, false)) => {
                        let e = err(&mut c, &["LOCK.ACQUIRE", k, t, "60000", "SESSION", &id]);
                        assert!(e.contains("no such session"), "{what}: {e}");
                    }
                }
            }
            7 | 8 => {
                let (k, t) = (keys[rng.gen_range(0..keys.len())], tokens[rng.gen_range(0..tokens.len())]);
                let owns = match held.get(k) {
                    Some(Holder::Plain(o)) | Some(Holder::Session(_, o)) => o == t,
                    None => false,
                };
                let op = if rng.gen_bool(0.5) { "LOCK.RELEASE" } else { "LOCK.RENEW" };
                let args: Vec<&str> = if op == "LOCK.RELEASE" { vec![op, k, t] } else { vec![op, k, t, "60000"] };
                assert_eq!(int(&mut c, &args), i64::from(owns), "{what}: {args:?}");
                if owns && op == "LOCK.RELEASE" {
                    held.remove(k);
                }
            }
            _ => {}
        }
        for k in keys {
            let want = held.get(k).map(|h| match h {
                Holder::Plain(t) => t.clone(),
                Holder::Session(id, t) => held_value(id, t),
            });
            assert_eq!(get(&mut c, k), want, "{what}: {k}");
        }
        for id in &live {
            let n = held.values().filter(|h| matches!(h, Holder::Session(s, _) if s == id)).count();
            assert_eq!(session_int(&mut c, id, "holds"), n as i64, "{what}: holds of {id}");
        }
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(20_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    eventually("the replica has the master's sessions", || list(&mut r) == list(&mut c));
    for k in keys {
        assert_eq!(get(&mut r, k), get(&mut c, k), "{k} on the replica");
    }
    for id in &live {
        for name in ["deadline", "holds"] {
            assert_eq!(session_int(&mut r, id, name), session_int(&mut c, id, name), "{name} of {id} on the replica");
        }
    }
}

/// While writes are paused nothing is released (nothing may be written or
/// propagated), yet the ended session's lock is refused all the same; once
/// the pause ends, the lock is released.
#[test]
fn paused_writes_hold_back_the_release_but_not_the_refusal() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["300"]);
    assert_eq!(attach(&mut c, "job", "tok", &id), 1);
    let deadline = session_int(&mut c, &id, "deadline");
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(3_000).arg("WRITE").query(&mut c).unwrap();
    until_server_time(&mut c, deadline + 300);
    assert_eq!(get(&mut c, "job"), Some(held_value(&id, "tok")), "released while writes were paused");
    assert_eq!(cmd(&mut c, &["LOCK.INFO", "job"]).unwrap(), Value::Nil, "shown as released");
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut c).unwrap();
    eventually("released once the pause ended", || get(&mut c, "job").is_none());
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "job", "tok"]), 0);
}

/// What a key moved here from another node (MIGRATE, a resharding, an
/// atomic slot migration) meets: a session this node does not know. The
/// lock is an orphan: refused to everyone else (the first refusal gives it
/// an end, `lock.orphan-grace` later: `tests/session_orphans.rs`), released
/// by its token, and a later session end here does not touch it.
#[test]
fn a_lock_of_a_session_this_node_does_not_know_is_held_for_its_token() {
    let server = Server::start();
    let mut c = server.conn();
    let elsewhere = "00112233445566778899aabbccddeeff";
    let value = held_value(elsewhere, "tok");
    // As MIGRATE or RESTORE would bring it: the bytes, no expiry.
    let _: () = redis::cmd("SET").arg("moved").arg(&value).query(&mut c).unwrap();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "moved", "other", "1000"]), 0);
    assert!(pttl(&mut c, "moved") > 0, "the orphan's end");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "moved", "other"]), 0);
    assert_eq!(int(&mut c, &["LOCK.RENEW", "moved", "tok", "1000"]), 1);
    let info = fields_of(&mut c, &["LOCK.INFO", "moved"]).expect("held");
    assert_eq!(field(&info, "owner"), Value::BulkString(b"tok".to_vec()));
    assert!(err(&mut c, &["LOCK.ACQUIRE", "k", "t", "1000", "SESSION", elsewhere]).contains("no such session"));
    // Sessions of this node come and go without touching it.
    let id = grant(&mut c, &["60000"]);
    assert_eq!(attach(&mut c, "mine", "tok", &id), 1);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    eventually("this node's session ended", || list(&mut c).is_empty());
    assert_eq!(get(&mut c, "moved"), Some(value));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "moved", "tok"]), 1);
    assert_eq!(get(&mut c, "moved"), None);
}

/// Many sessions ending at once (more than one tick ends) all end, and
/// each of their locks is released with its lock-delay.
#[test]
fn many_sessions_expiring_together_all_end() {
    const SESSIONS: usize = 1_000;
    let server = Server::start();
    let mut c = server.conn();
    let mut pipe = redis::pipe();
    for _ in 0..SESSIONS {
        pipe.cmd("SESSION.GRANT").arg(500).arg("LOCKDELAY").arg(200);
    }
    let ids: Vec<String> = pipe.query(&mut c).unwrap();
    let mut pipe = redis::pipe();
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        pipe.cmd("LOCK.ACQUIRE").arg(format!("k{i}")).arg("tok").arg(LEASE_MS).arg("SESSION").arg(id);
    }
    let granted: Vec<i64> = pipe.query(&mut c).unwrap();
    assert!(granted.iter().all(|&g| g == 1));
    let last = ids.iter().map(|id| session_int(&mut c, id, "deadline")).max().unwrap();
    until_server_time(&mut c, last);
    eventually("every session ended", || list(&mut c).is_empty());
    assert_eq!(info_field(&mut c, "sessions_expired"), SESSIONS as u64);
    assert_eq!(info_field(&mut c, "session_holds_ended"), (SESSIONS / 2) as u64);
    eventually("every lock's delay ended", || redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap() == 0);
}
