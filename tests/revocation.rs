//! LOCK.REVOKE against real servers (docs/revocation.md): a revoke of a
//! lock, an election's leader, a semaphore holder, a reader and a writer,
//! with and without GRACE, by TOKEN and without; the holder hears it on
//! its next renewal (a negative reply: the ms left) and in the INFO
//! commands; the server ends the hold at the deadline (lock-delay applied,
//! the next waiter granted, counted in `INFO lock`); a replica and an AOF
//! restart carry it with absolute times; a revoke of a free key, or of a
//! token that does not hold, changes nothing.
//!
//! Timing: graces of a few seconds; what is asserted about time is an
//! order of events read on the server's clock, never a duration.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::{Connection, Value};
use redis_lock_harness::Server;
use redis_lock_rules::{scripts, value};

mod support;
use support::lease::{cmd, err, field, fields_of, int, pexpiretime, score, server_now, until_server_time};
use support::{info_field, replica_of, until_waiting, AofDir};

/// LOCK.REVOKE's reply: (result, token, deadline).
fn revoke(c: &mut Connection, args: &[&str]) -> (String, Option<String>, Option<i64>) {
    let f = fields_of(c, &[&["LOCK.REVOKE"][..], args].concat()).expect("LOCK.REVOKE replies fields");
    let text = |v: Value| match v {
        Value::BulkString(b) => Some(String::from_utf8(b).unwrap()),
        Value::Nil => None,
        other => panic!("{other:?}"),
    };
    let deadline = match field(&f, "deadline") {
        Value::Int(n) => Some(n),
        Value::Nil => None,
        other => panic!("deadline: {other:?}"),
    };
    (text(field(&f, "result")).expect("result"), text(field(&f, "token")), deadline)
}

fn get(c: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(c).expect("GET")
}

/// A command run on its own connection, its reply on the channel.
fn spawn(server: &Server, args: &[&str]) -> mpsc::Receiver<Value> {
    let (tx, rx) = mpsc::channel();
    let mut c = server.conn();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let reply = cmd(&mut c, &args).unwrap_or_else(|e| Value::SimpleString(e.to_string()));
        let _ = tx.send(reply);
    });
    rx
}

fn recv(rx: &mpsc::Receiver<Value>) -> Value {
    rx.recv_timeout(Duration::from_secs(60)).expect("the blocked call was answered")
}

#[test]
fn a_revoked_lock_is_heard_capped_and_ended_at_its_deadline_for_the_next_waiter() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000"]), 1);
    let before = server_now(&mut c);
    let (result, token, deadline) = revoke(&mut c, &["k", "GRACE", "3000", "REASON", "drain node-7"]);
    let deadline = deadline.expect("a deadline");
    assert_eq!((result.as_str(), token.as_deref()), ("revoked", Some("t")));
    assert!(deadline >= before + 3_000 && deadline <= server_now(&mut c) + 3_000, "{deadline}");
    assert_eq!(pexpiretime(&mut c, "k"), deadline, "the key ends at the deadline");
    // The holder hears it on its next renewal, which cannot pass the deadline.
    let renewed = int(&mut c, &["LOCK.RENEW", "k", "t", "60000"]);
    assert!((-3_000..=-1).contains(&renewed), "a revoked renewal replies -ms left: {renewed}");
    assert_eq!(pexpiretime(&mut c, "k"), deadline, "a renewal never extends a revoked hold");
    let f = fields_of(&mut c, &["LOCK.INFO", "k"]).unwrap();
    assert_eq!(field(&f, "revoked"), Value::BulkString(b"drain node-7".to_vec()));
    assert_eq!(field(&f, "hold-until"), Value::Int(deadline));
    assert_eq!(field(&f, "owner"), Value::BulkString(b"t".to_vec()));
    // A second revoke never extends the deadline.
    let (_, _, again) = revoke(&mut c, &["k", "GRACE", "60000"]);
    assert_eq!(again, Some(deadline));
    // Another token waits; it is granted once the deadline has passed.
    let waiter = spawn(&server, &["LOCK.ACQUIRE", "k", "w", "60000", "WAIT", "30000"]);
    until_waiting(&mut c, 1);
    assert_eq!(recv(&waiter), Value::Int(1));
    assert!(server_now(&mut c) >= deadline, "granted before the deadline");
    assert_eq!(get(&mut c, "k"), Some(b"w".to_vec()));
    assert_eq!(info_field(&mut c, "revokes"), 2);
    assert_eq!(info_field(&mut c, "revoked_ends"), 1, "the end at the deadline is counted");
    // Other holders' renewals reply as before.
    assert_eq!(int(&mut c, &["LOCK.RENEW", "k", "w", "60000"]), 1);
}

#[test]
fn a_revoke_without_grace_ends_the_hold_at_once_and_serves_the_line() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000"]), 1);
    let waiter = spawn(&server, &["LOCK.ACQUIRE", "k", "w", "60000", "WAIT", "0"]);
    until_waiting(&mut c, 1);
    let (result, token, _) = revoke(&mut c, &["k", "TOKEN", "t"]);
    assert_eq!((result.as_str(), token.as_deref()), ("ended", Some("t")));
    assert_eq!(recv(&waiter), Value::Int(1));
    assert_eq!(get(&mut c, "k"), Some(b"w".to_vec()));
    assert_eq!(int(&mut c, &["LOCK.RENEW", "k", "t", "60000"]), 0, "the revoked holder holds nothing");
    assert_eq!(info_field(&mut c, "revoked_ends"), 1);
}

#[test]
fn lock_delay_applies_to_a_revoked_hold() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000", "LOCKDELAY", "5000"]), 1);
    let (result, _, deadline) = revoke(&mut c, &["k", "GRACE", "0"]);
    assert_eq!(result, "ended");
    let until = deadline.unwrap() + 5_000;
    assert_eq!(get(&mut c, "k"), Some(value::tombstone(until)), "the involuntary end's tombstone");
    assert_eq!(pexpiretime(&mut c, "k"), until);
    let refused = int(&mut c, &["LOCK.ACQUIRE", "k", "other", "60000"]);
    if server_now(&mut c) < until {
        assert_eq!(refused, 0, "acquired during the lock-delay");
    }
    assert_eq!(info_field(&mut c, "delays_started"), 1);
    // With grace, the delay follows the deadline.
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "g", "t", "60000", "LOCKDELAY", "4000"]), 1);
    let (_, _, deadline) = revoke(&mut c, &["g", "GRACE", "1000"]);
    let deadline = deadline.unwrap();
    assert_eq!(pexpiretime(&mut c, "g"), deadline + 4_000);
    until_server_time(&mut c, deadline);
    let refused = int(&mut c, &["LOCK.ACQUIRE", "g", "other", "60000"]);
    if server_now(&mut c) < deadline + 4_000 {
        assert_eq!(refused, 0, "acquired in the delay after a revoked hold's deadline");
        assert_eq!(get(&mut c, "g"), Some(value::tombstone(deadline + 4_000)));
        assert_eq!(info_field(&mut c, "revoked_ends"), 2);
    }
}

#[test]
fn a_revoke_that_finds_no_holder_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(revoke(&mut c, &["free"]), ("no-holder".into(), None, None));
    assert_eq!(get(&mut c, "free"), None);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000"]), 1);
    let expiry = pexpiretime(&mut c, "k");
    assert_eq!(
        revoke(&mut c, &["k", "TOKEN", "gone", "GRACE", "10"]),
        ("not-holder".into(), Some("gone".into()), None)
    );
    assert_eq!((get(&mut c, "k"), pexpiretime(&mut c, "k")), (Some(b"t".to_vec()), expiry));
    for (args, e) in [
        (&["k", "GRACE", "-1"][..], "GRACE must be 0 or a positive integer"),
        (&["k", "GRACE", "9223372036854775807"], "GRACE is too large"),
        (&["k", "FOO", "1"], "syntax error"),
        (&["k", "GRACE"], "syntax error"),
        (&["k", "TOKEN", ""], "key and token are required"),
    ] {
        let text = err(&mut c, &[&["LOCK.REVOKE"][..], args].concat());
        assert!(text.contains(e), "{args:?}: {text}");
    }
    assert_eq!(info_field(&mut c, "revokes"), 0);
    assert_eq!((get(&mut c, "k"), pexpiretime(&mut c, "k")), (Some(b"t".to_vec()), expiry));
    // A value the module did not write cannot carry the mark: refused.
    let _: () = redis::cmd("SET").arg("j").arg(r#"{"owner":"t","x":1}"#).query(&mut c).unwrap();
    assert!(err(&mut c, &["LOCK.REVOKE", "j"]).contains("cannot carry a revocation"));
    let _: () = redis::cmd("LPUSH").arg("l").arg("x").query(&mut c).unwrap();
    let text = err(&mut c, &["LOCK.REVOKE", "l"]);
    assert!(text.contains("WRONGTYPE") || text.contains("WrongType"), "{text}");
}

#[test]
fn the_scripts_still_see_a_revoked_holder_and_cannot_move_its_deadline() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000"]), 1);
    let (_, _, deadline) = revoke(&mut c, &["k", "GRACE", "2000", "REASON", "r"]);
    let deadline = deadline.unwrap();
    let stored = value::parse(&get(&mut c, "k").unwrap()).expect("canonical");
    assert_eq!((stored.owner.as_str(), stored.revoked.as_deref(), stored.hold_until), ("t", Some("r"), Some(deadline)));
    // The reference renew script owns it as before (and PEXPIREs it) ...
    let renewed: i64 =
        redis::cmd("EVAL").arg(scripts::RENEW).arg(1).arg("k").arg("t").arg(60_000).query(&mut c).unwrap();
    assert_eq!(renewed, 1);
    // ... but the module ends the hold at the deadline all the same.
    until_server_time(&mut c, deadline);
    assert_eq!(int(&mut c, &["LOCK.RENEW", "k", "t", "60000"]), 0);
    assert_eq!(get(&mut c, "k"), None);
    // A takeover by the same run cannot take a revoked hold anew.
    assert_eq!(int(&mut c, &["LOCK.TAKEOVER", "r", "t", "run", "60000"]), 1);
    revoke(&mut c, &["r", "GRACE", "30000"]);
    assert_eq!(int(&mut c, &["LOCK.TAKEOVER", "r", "t2", "run", "60000"]), 0);
}

#[test]
fn a_revoked_leader_hears_it_and_its_observers_are_woken() {
    let server = Server::start();
    let mut c = server.conn();
    let term = int(&mut c, &["LOCK.ELECT", "e", "c1", "60000", "10.0.0.1"]);
    let leader = fields_of(&mut c, &["LOCK.LEADER", "e"]).unwrap();
    let Value::Int(rev) = field(&leader, "rev") else { panic!() };
    assert_eq!(field(&leader, "revoked"), Value::Nil);
    let observer = spawn(&server, &["LOCK.OBSERVE", "e", "AFTER", &rev.to_string(), "WAIT", "30000"]);
    until_waiting_observers(&mut c);
    let (result, token, deadline) = revoke(&mut c, &["e", "GRACE", "30000", "REASON", "better candidate"]);
    assert_eq!((result.as_str(), token.as_deref()), ("revoked", Some("c1")));
    let Value::Array(woken) = recv(&observer) else { panic!("the observer's reply") };
    let woken: Vec<String> = woken.iter().map(|v| format!("{v:?}")).collect();
    assert!(woken.iter().any(|v| v.contains("better candidate")), "{woken:?}");
    let leader = fields_of(&mut c, &["LOCK.LEADER", "e"]).unwrap();
    assert_eq!(field(&leader, "term"), Value::Int(term), "the same term leads");
    assert_eq!(field(&leader, "revoked"), Value::BulkString(b"better candidate".to_vec()));
    assert_eq!(field(&leader, "revoked-until"), Value::Int(deadline.unwrap()));
    assert!(int(&mut c, &["LOCK.RENEW", "e", "c1", "60000"]) < 0);
    // Its proclaims keep the revocation; a revoke of the leader without grace ends it.
    assert_eq!(int(&mut c, &["LOCK.PROCLAIM", "e", "c1", "10.0.0.2"]), 1);
    assert!(int(&mut c, &["LOCK.RENEW", "e", "c1", "60000"]) < 0);
    assert_eq!(revoke(&mut c, &["e"]).0, "ended");
    assert_eq!(cmd(&mut c, &["LOCK.LEADER", "e"]).unwrap(), Value::Nil);
}

fn until_waiting_observers(c: &mut Connection) {
    for _ in 0..3_000 {
        if info_field(c, "observing") == 1 {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("the observer did not block");
}

/// A holder member's score as stored: `-deadline - 0.5` once revoked.
fn hold_score(c: &mut Connection, key: &str, token: &str) -> Option<f64> {
    score(c, key, [&b"\0"[..], token.as_bytes()].concat())
}

#[test]
fn a_semaphore_holder_is_revoked_by_token_and_its_permit_goes_to_the_next_waiter() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "a", "2", "60000"]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "b", "2", "60000"]), 1);
    assert!(err(&mut c, &["LOCK.REVOKE", "s"]).contains("TOKEN is required"));
    assert_eq!(revoke(&mut c, &["s", "TOKEN", "gone"]).0, "not-holder");
    assert!(
        err(&mut c, &["LOCK.REVOKE", "s", "TOKEN", "a", "GRACE", "9000000000000000"]).contains("GRACE is too large")
    );
    assert_eq!(hold_score(&mut c, "s", "a"), None, "the refused revoke wrote nothing");
    let (result, token, deadline) = revoke(&mut c, &["s", "TOKEN", "a", "GRACE", "2000"]);
    let deadline = deadline.unwrap();
    assert_eq!((result.as_str(), token.as_deref()), ("revoked", Some("a")));
    assert_eq!(score(&mut c, "s", "a"), Some(deadline as f64), "its place ends at the deadline");
    assert_eq!(hold_score(&mut c, "s", "a"), Some(-(deadline as f64) - 0.5));
    let renewed = int(&mut c, &["SEM.RENEW", "s", "a", "60000"]);
    assert!((-2_000..=-1).contains(&renewed), "{renewed}");
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "b", "60000"]), 1, "the other holder renews as before");
    let f = fields_of(&mut c, &["SEM.INFO", "s"]).unwrap();
    assert_eq!(
        field(&f, "revoked"),
        Value::Array(vec![Value::BulkString(b"a".to_vec()), Value::Int(deadline)]),
        "SEM.INFO lists the revoked holder"
    );
    let waiter = spawn(&server, &["SEM.ACQUIRE", "s", "c", "2", "60000", "WAIT", "30000"]);
    until_waiting(&mut c, 1);
    assert_eq!(recv(&waiter), Value::Int(1));
    assert!(server_now(&mut c) >= deadline, "the permit was handed over before the deadline");
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "a", "60000"]), 0);
    assert_eq!(hold_score(&mut c, "s", "a"), None, "the revoked hold went with its place");
    assert_eq!(info_field(&mut c, "revoked_ends"), 1);
}

#[test]
fn readers_and_a_writer_are_revoked() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "r1", "READ", "60000", "MAXHOLD", "90000"]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "r2", "READ", "60000"]), 1);
    let (result, _, deadline) = revoke(&mut c, &["rw", "TOKEN", "r1", "GRACE", "20000"]);
    assert_eq!(result, "revoked");
    assert!(int(&mut c, &["RWLOCK.RENEW", "rw", "r1", "60000"]) < 0);
    let f = fields_of(&mut c, &["RWLOCK.INFO", "rw"]).unwrap();
    assert_eq!(
        field(&f, "revoked"),
        Value::Array(vec![Value::BulkString(b"r1".to_vec()), Value::Int(deadline.unwrap())])
    );
    // A release before the deadline is an ordinary release.
    assert_eq!(int(&mut c, &["RWLOCK.RELEASE", "rw", "r1"]), 1);
    assert_eq!(hold_score(&mut c, "rw", "r1"), None);
    assert_eq!(revoke(&mut c, &["rw", "TOKEN", "r2"]).0, "ended");
    assert_eq!(redis::cmd("EXISTS").arg("rw").query::<i64>(&mut c).unwrap(), 0, "the last reader left");
    // The one writer, without TOKEN.
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "w", "WRITE", "60000"]), 1);
    let reader = spawn(&server, &["RWLOCK.ACQUIRE", "rw", "r3", "READ", "60000", "WAIT", "30000"]);
    until_waiting(&mut c, 1);
    let (result, token, _) = revoke(&mut c, &["rw", "GRACE", "0", "REASON", "maintenance"]);
    assert_eq!((result.as_str(), token.as_deref()), ("ended", Some("w")));
    assert_eq!(recv(&reader), Value::Int(1));
    assert_eq!(info_field(&mut c, "revoked_ends"), 2);
    assert_eq!(info_field(&mut c, "revokes"), 3);
}

#[test]
fn a_replica_and_an_aof_restart_carry_the_revocation() {
    let aof = AofDir::new("revoke");
    let master = aof.start();
    let mut m = master.conn();
    let (replica, mut r) = replica_of(&master);
    assert_eq!(int(&mut m, &["LOCK.ACQUIRE", "k", "t", "600000"]), 1);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "a", "2", "600000"]), 1);
    let (_, _, deadline) = revoke(&mut m, &["k", "GRACE", "300000", "REASON", "move"]);
    let (_, _, sem_deadline) = revoke(&mut m, &["s", "TOKEN", "a", "GRACE", "300000"]);
    let (deadline, sem_deadline) = (deadline.unwrap(), sem_deadline.unwrap());
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let value = get(&mut m, "k");
    assert_eq!(get(&mut r, "k"), value, "the replica holds the revoked value");
    assert_eq!(pexpiretime(&mut r, "k"), deadline, "with the master's absolute expiry");
    assert_eq!(hold_score(&mut r, "s", "a"), Some(-(sem_deadline as f64) - 0.5));
    let f = fields_of(&mut r, &["LOCK.INFO", "k"]).unwrap();
    assert_eq!(field(&f, "revoked"), Value::BulkString(b"move".to_vec()));
    // Promoted, the replica keeps the revocation and its deadline.
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    assert!(int(&mut r, &["LOCK.RENEW", "k", "t", "600000"]) < 0, "the promoted replica tells the holder");
    assert_eq!(pexpiretime(&mut r, "k"), deadline, "and keeps the deadline");
    assert!(int(&mut r, &["SEM.RENEW", "s", "a", "600000"]) < 0);
    drop(replica);
    // Killed (no shutdown save) and started again on the same directory.
    drop(master);
    let server = aof.start();
    let mut c = server.conn();
    assert_eq!(get(&mut c, "k"), value, "the revoked value came back from the AOF");
    assert_eq!(pexpiretime(&mut c, "k"), deadline);
    assert!(int(&mut c, &["LOCK.RENEW", "k", "t", "600000"]) < 0);
    assert!(int(&mut c, &["SEM.RENEW", "s", "a", "600000"]) < 0);
    assert_eq!(pexpiretime(&mut c, "k"), deadline);
}

#[test]
fn a_revoke_needs_write_permission_on_the_key() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000"]), 1);
    let _: () = redis::cmd("ACL").arg(&["SETUSER", "reader", "on", "nopass", "%R~*", "+@all"]).query(&mut c).unwrap();
    let _: () = redis::cmd("ACL").arg(&["SETUSER", "writer", "on", "nopass", "~*", "+@all"]).query(&mut c).unwrap();
    let mut r = server.conn();
    let _: () = redis::cmd("AUTH").arg("reader").arg("any").query(&mut r).unwrap();
    let text = err(&mut r, &["LOCK.REVOKE", "k"]);
    assert!(text.contains("NOPERM") || text.contains("NoPerm") || text.contains("permission"), "{text}");
    assert_eq!(get(&mut c, "k"), Some(b"t".to_vec()), "the refused revoke changed nothing");
    let mut w = server.conn();
    let _: () = redis::cmd("AUTH").arg("writer").arg("any").query(&mut w).unwrap();
    assert_eq!(revoke(&mut w, &["k", "GRACE", "5000"]).0, "revoked");
}

// A lock held by a session (docs/sessions.md): one hold is revoked, not
// its session, which keeps its other holds.

fn session(c: &mut Connection, args: &[&str]) -> String {
    redis::cmd("SESSION.GRANT").arg(args).query(c).expect("SESSION.GRANT")
}

fn keepalive(c: &mut Connection, id: &str) -> i64 {
    let replies: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(id).query(c).expect("SESSION.KEEPALIVE");
    replies[0]
}

fn session_info(c: &mut Connection, id: &str, name: &str) -> Value {
    field(&fields_of(c, &["SESSION.INFO", id]).expect("the session is known"), name)
}

fn holds(c: &mut Connection, id: &str) -> (Value, Value) {
    (session_info(c, id, "holds"), session_info(c, id, "revoked-holds"))
}

/// Waits (at most 20 s) until `what` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..2_000 {
        if f() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting until {what}");
}

#[test]
fn a_session_held_lock_is_revoked_alone_its_holder_hears_it_and_the_server_ends_it() {
    let server = Server::start();
    let mut c = server.conn();
    let id = session(&mut c, &["60000"]);
    for (key, token) in [("a", "ta"), ("b", "tb")] {
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", key, token, "30000", "SESSION", &id]), 1);
    }
    assert_eq!(keepalive(&mut c, &id), 60_000);
    let before = server_now(&mut c);
    let (result, token, deadline) = revoke(&mut c, &["a", "GRACE", "3000", "REASON", "drain node-7"]);
    let deadline = deadline.expect("a deadline");
    assert_eq!((result.as_str(), token.as_deref()), ("revoked", Some("ta")));
    assert!(deadline >= before + 3_000 && deadline <= server_now(&mut c) + 3_000, "{deadline}");
    let stored = get(&mut c, "a").unwrap();
    let held = value::parse_held(&stored).expect("still a session's hold");
    assert_eq!(
        (held.token.as_str(), held.revoked.as_deref(), held.hold_until),
        ("ta", Some("drain node-7"), Some(deadline))
    );
    assert_eq!(pexpiretime(&mut c, "a"), deadline, "the key ends at the deadline (no lock-delay)");
    assert_eq!(pexpiretime(&mut c, "b"), -1, "the session's other hold is untouched");
    // The holder hears it on its next keepalive (O(1): the sign), then
    // reads which hold, until when and why.
    assert_eq!(keepalive(&mut c, &id), -60_000, "kept alive, some hold revoked");
    assert_eq!(holds(&mut c, &id), (Value::Int(2), Value::Int(1)));
    assert_eq!(
        session_info(&mut c, &id, "revoked"),
        Value::Array(vec![
            Value::BulkString(b"a".to_vec()),
            Value::Int(0),
            Value::Int(deadline),
            Value::BulkString(b"drain node-7".to_vec())
        ])
    );
    let f = fields_of(&mut c, &["LOCK.INFO", "a"]).unwrap();
    assert_eq!(field(&f, "revoked"), Value::BulkString(b"drain node-7".to_vec()));
    assert_eq!(field(&f, "hold-until"), Value::Int(deadline));
    assert_eq!(field(&f, "owner"), Value::BulkString(b"ta".to_vec()));
    let renewed = int(&mut c, &["LOCK.RENEW", "a", "ta", "60000"]);
    assert!((-3_000..=-1).contains(&renewed), "a revoked renewal replies -ms left: {renewed}");
    assert_eq!(int(&mut c, &["LOCK.RENEW", "b", "tb", "60000"]), 1, "the other hold renews as before");
    let again = revoke(&mut c, &["a", "GRACE", "60000", "REASON", "drain node-7"]);
    assert_eq!(again.2, Some(deadline), "never extended");
    // The reference scripts still refuse it.
    let eval = |c: &mut Connection, script: &str, args: &[&str]| -> i64 {
        redis::cmd("EVAL").arg(script).arg(1).arg("a").arg(args).query(c).expect("EVAL")
    };
    assert_eq!(eval(&mut c, scripts::RENEW, &["ta", "100000"]), 0);
    assert_eq!(eval(&mut c, scripts::RELEASE, &["ta"]), 0);
    assert_eq!(eval(&mut c, scripts::TAKEOVER, &[r#"{"owner":"ta","runId":"r"}"#, "100000"]), 0);
    assert_eq!(get(&mut c, "a"), Some(stored));
    // A waiter is granted once the deadline has passed; the session
    // forgets the hold and keeps its other one.
    let waiter = spawn(&server, &["LOCK.ACQUIRE", "a", "w", "60000", "WAIT", "30000"]);
    until_waiting(&mut c, 1);
    assert_eq!(recv(&waiter), Value::Int(1));
    assert!(server_now(&mut c) >= deadline, "granted before the deadline");
    assert_eq!(get(&mut c, "a"), Some(b"w".to_vec()));
    eventually("the session forgot the hold", || holds(&mut c, &id) == (Value::Int(1), Value::Int(0)));
    assert_eq!(session_info(&mut c, &id, "revoked"), Value::Array(vec![]));
    assert_eq!(keepalive(&mut c, &id), 60_000, "nothing revoked any more");
    assert_eq!(int(&mut c, &["LOCK.RENEW", "a", "ta", "60000"]), 0);
    assert_eq!(int(&mut c, &["LOCK.RENEW", "b", "tb", "60000"]), 1);
    assert_eq!((info_field(&mut c, "revokes"), info_field(&mut c, "revoked_ends")), (2, 1));
    assert_eq!(info_field(&mut c, "session_holds_ended"), 0, "its session did not end");
}

#[test]
fn a_session_held_revoke_by_token_applies_the_sessions_lock_delay() {
    let server = Server::start();
    let mut c = server.conn();
    let id = session(&mut c, &["60000", "LOCKDELAY", "3000"]);
    for key in ["a", "b", "c"] {
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", key, "t", "30000", "SESSION", &id]), 1);
    }
    let held = get(&mut c, "a");
    assert_eq!(
        revoke(&mut c, &["a", "TOKEN", "other", "GRACE", "10"]),
        ("not-holder".into(), Some("other".into()), None)
    );
    assert_eq!((get(&mut c, "a"), keepalive(&mut c, &id)), (held, 60_000), "nothing changed");
    // Without grace: ended now, the session's delay follows, detached at once.
    let (result, _, deadline) = revoke(&mut c, &["a", "TOKEN", "t"]);
    let until = deadline.unwrap() + 3_000;
    assert_eq!(result, "ended");
    assert_eq!(get(&mut c, "a"), Some(value::tombstone(until)));
    assert_eq!(pexpiretime(&mut c, "a"), until);
    assert_eq!(holds(&mut c, &id), (Value::Int(2), Value::Int(0)));
    assert_eq!(keepalive(&mut c, &id), 60_000);
    // With grace: the delay follows the deadline; the timer settles it.
    let (_, _, deadline) = revoke(&mut c, &["b", "TOKEN", "t", "GRACE", "1000"]);
    let deadline = deadline.unwrap();
    assert_eq!(pexpiretime(&mut c, "b"), deadline + 3_000);
    let tombstone = value::tombstone(deadline + 3_000);
    eventually("the timer ended the hold at its deadline", || get(&mut c, "b") == Some(tombstone.clone()));
    assert!(server_now(&mut c) >= deadline);
    eventually("and detached it", || holds(&mut c, &id) == (Value::Int(1), Value::Int(0)));
    if server_now(&mut c) < deadline + 3_000 {
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "b", "other", "60000"]), 0, "acquired in the lock-delay");
    }
    assert_eq!(info_field(&mut c, "revoked_ends"), 2);
    assert_eq!(info_field(&mut c, "delays_started"), 2);
    // A release before the deadline is an ordinary one.
    revoke(&mut c, &["c", "GRACE", "60000"]);
    assert_eq!(keepalive(&mut c, &id), -60_000);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "c", "t"]), 1);
    assert_eq!(get(&mut c, "c"), None, "released without delay");
    assert_eq!(holds(&mut c, &id), (Value::Int(0), Value::Int(0)));
    assert_eq!(keepalive(&mut c, &id), 60_000);
    assert_eq!(info_field(&mut c, "revoked_ends"), 2);
}

#[test]
fn a_sessions_end_ends_its_revoked_hold_too() {
    let server = Server::start();
    let mut c = server.conn();
    let id = session(&mut c, &["60000"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "a", "t", "30000", "SESSION", &id]), 1);
    revoke(&mut c, &["a", "GRACE", "60000"]);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    let listed = |c: &mut redis::Connection| redis::cmd("SESSION.LIST").query::<Vec<String>>(c).unwrap();
    eventually("the session is forgotten", || listed(&mut c).is_empty());
    assert_eq!(get(&mut c, "a"), None);
    assert_eq!(info_field(&mut c, "revoked_ends"), 0, "its session ended it, not its deadline");
    assert_eq!(info_field(&mut c, "session_holds_ended"), 1);
}

#[test]
fn a_replica_a_promotion_and_restarts_carry_a_session_holds_revocation() {
    let aof = AofDir::new("revoke-session");
    let master = aof.start();
    let mut m = master.conn();
    let (replica, mut r) = replica_of(&master);
    let id = session(&mut m, &["600000"]);
    for key in ["a", "b", "c"] {
        assert_eq!(int(&mut m, &["LOCK.ACQUIRE", key, "t", "30000", "SESSION", &id]), 1);
    }
    let (_, _, deadline) = revoke(&mut m, &["a", "GRACE", "300000", "REASON", "move"]);
    let deadline = deadline.unwrap();
    // Short enough to end on the promoted replica (or on the master first:
    // either way, the replica follows).
    let (_, _, soon) = revoke(&mut m, &["b", "GRACE", "2000"]);
    let soon = soon.unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let value = get(&mut m, "a");
    assert_eq!(get(&mut r, "a"), value, "the replica holds the revoked value");
    assert_eq!(pexpiretime(&mut r, "a"), deadline, "with the master's absolute expiry");
    assert_eq!(session_info(&mut r, &id, "revoked-holds"), Value::Int(2));
    let listed = session_info(&mut r, &id, "revoked");
    assert_eq!(listed, session_info(&mut m, &id, "revoked"));
    // Promoted, the replica tells the holder and ends the hold at its deadline.
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    drop(master);
    assert_eq!(keepalive(&mut r, &id), -600_000);
    assert!(int(&mut r, &["LOCK.RENEW", "a", "t", "600000"]) < 0);
    until_server_time(&mut r, soon);
    eventually("the promoted replica ended the revoked hold", || {
        holds(&mut r, &id) == (Value::Int(2), Value::Int(1)) && get(&mut r, "b").is_none()
    });
    drop(replica);
    // The master's AOF (killed, no shutdown save), then an RDB.
    let server = aof.start();
    let mut c = server.conn();
    assert_eq!(get(&mut c, "a"), value, "the revoked value came back from the AOF");
    assert_eq!(pexpiretime(&mut c, "a"), deadline);
    assert_eq!(session_info(&mut c, &id, "revoked"), listed);
    assert_eq!(keepalive(&mut c, &id), -600_000);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("no").query(&mut c).unwrap();
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let dir = server.dir().to_path_buf();
    drop(c);
    drop(server);
    let server = Server::builder().dir(dir).arg("appendonly", "no").start();
    let mut c = server.conn();
    assert_eq!(get(&mut c, "a"), value, "and from the RDB");
    assert_eq!(session_info(&mut c, &id, "revoked"), listed);
    assert_eq!(keepalive(&mut c, &id), -600_000);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "a", "t"]), 1);
    // `b` ended at its deadline on this server's own timer, if not before.
    eventually("nothing is revoked any more", || keepalive(&mut c, &id) == 600_000);
    assert_eq!(holds(&mut c, &id), (Value::Int(1), Value::Int(0)));
    assert_eq!(get(&mut c, "b"), None);
}

/// A session's revoked holds as SESSION.INFO lists them: key, db,
/// deadline, reason each.
fn listed(holds: &[(&str, i64, &str)]) -> Value {
    let item = |&(key, deadline, reason): &(&str, i64, &str)| {
        [
            Value::BulkString(key.as_bytes().to_vec()),
            Value::Int(0),
            Value::Int(deadline),
            Value::BulkString(reason.as_bytes().to_vec()),
        ]
    };
    Value::Array(holds.iter().flat_map(item).collect())
}

/// A semaphore holder held by a session is revoked alone, as a session's
/// lock is: its renewal replies the time left, the session's keepalive is
/// negative and its INFO lists the hold, a replica sees the same; at the
/// deadline the permit goes to the next waiter and the session forgets the
/// hold (on the replica too), keeping its other holds.
#[test]
fn a_session_held_semaphore_holder_is_revoked_alone_and_detached_at_its_deadline() {
    let master = Server::start();
    let mut c = master.conn();
    let (_replica, mut r) = replica_of(&master);
    let id = session(&mut c, &["60000"]);
    for token in ["a", "b"] {
        assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", token, "2", "60000", "SESSION", &id]), 1);
    }
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "x", "tx", "60000", "SESSION", &id]), 1);
    let waiter = spawn(&master, &["SEM.ACQUIRE", "s", "w", "2", "60000", "WAIT", "30000"]);
    until_waiting(&mut c, 1);
    let (result, token, deadline) = revoke(&mut c, &["s", "TOKEN", "a", "GRACE", "3000", "REASON", "drain"]);
    let deadline = deadline.expect("a deadline");
    assert_eq!((result.as_str(), token.as_deref()), ("revoked", Some("a")));
    let renewed = int(&mut c, &["SEM.RENEW", "s", "a", "60000"]);
    assert!((-3_000..=-1).contains(&renewed), "a revoked renewal replies -ms left: {renewed}");
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "b", "60000"]), 1, "the session's other holder as before");
    assert_eq!(keepalive(&mut c, &id), -60_000, "kept alive, some hold revoked");
    assert_eq!(holds(&mut c, &id), (Value::Int(3), Value::Int(1)));
    assert_eq!(session_info(&mut c, &id, "revoked"), listed(&[("s", deadline, "drain")]));
    let (_, _, again) = revoke(&mut c, &["s", "TOKEN", "a", "GRACE", "60000", "REASON", "later"]);
    assert_eq!(again, Some(deadline), "a second revoke never extends it");
    assert_eq!(session_info(&mut c, &id, "revoked"), listed(&[("s", deadline, "later")]));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(holds(&mut r, &id), (Value::Int(3), Value::Int(1)), "the replica's table notes it");
    assert_eq!(session_info(&mut r, &id, "revoked"), listed(&[("s", deadline, "later")]));
    // The deadline: the permit goes to the waiter, the session forgets it.
    assert_eq!(recv(&waiter), Value::Int(1));
    assert!(server_now(&mut c) >= deadline, "the permit was handed over before the deadline");
    eventually("the session forgot the hold", || holds(&mut c, &id) == (Value::Int(2), Value::Int(0)));
    assert_eq!(keepalive(&mut c, &id), 60_000, "nothing revoked any more");
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "a", "60000"]), 0, "the revoked holder holds nothing");
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "b", "60000"]), 1);
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "w", "60000"]), 1);
    assert_eq!(info_field(&mut c, "revoked_ends"), 1);
    assert_eq!(info_field(&mut c, "session_holds_ended"), 0, "its session did not end");
    eventually("the replica's session forgot it", || holds(&mut r, &id) == (Value::Int(2), Value::Int(0)));
    assert_eq!(session_info(&mut r, &id, "first"), session_info(&mut c, &id, "first"));
    // The session's other holds end with it, as ever.
    let _: () = redis::cmd("SESSION.REVOKE").arg(&id).query(&mut c).unwrap();
    eventually("the session's holds ended", || int(&mut c, &["SEM.RENEW", "s", "b", "60000"]) == 0);
}

/// A reader and a writer held by a session: the same, with the key's
/// lock-delay after the deadline, and a release before the deadline
/// forgets the revocation at once (on the replica too).
#[test]
fn a_session_held_reader_and_writer_are_revoked_alone() {
    let master = Server::start();
    let mut c = master.conn();
    let (_replica, mut r) = replica_of(&master);
    let id = session(&mut c, &["60000"]);
    let read = ["RWLOCK.ACQUIRE", "rw", "r1", "READ", "60000", "LOCKDELAY", "1000", "SESSION", &id];
    assert_eq!(int(&mut c, &read), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "w2", "w", "WRITE", "60000", "SESSION", &id]), 1);
    let writer = spawn(&master, &["RWLOCK.ACQUIRE", "rw", "w", "WRITE", "60000", "LOCKDELAY", "1000", "WAIT", "30000"]);
    until_waiting(&mut c, 1);
    let (result, _, deadline) = revoke(&mut c, &["rw", "GRACE", "2000", "REASON", "drain"]);
    let deadline = deadline.expect("a deadline");
    assert_eq!(result, "revoked");
    let (_, _, wd) = revoke(&mut c, &["w2", "TOKEN", "w", "GRACE", "600000", "REASON", "move"]);
    let wd = wd.expect("a deadline");
    let renewed = int(&mut c, &["RWLOCK.RENEW", "rw", "r1", "60000"]);
    assert!((-2_000..=-1).contains(&renewed), "{renewed}");
    assert!(int(&mut c, &["RWLOCK.RENEW", "w2", "w", "60000"]) < -2_000);
    assert_eq!(keepalive(&mut c, &id), -60_000);
    assert_eq!(holds(&mut c, &id), (Value::Int(2), Value::Int(2)));
    // In the table's order (a holder's hold orders by its token's length first).
    assert_eq!(session_info(&mut c, &id, "revoked"), listed(&[("w2", wd, "move"), ("rw", deadline, "drain")]));
    // The writer releases before its deadline: an ordinary release.
    assert_eq!(int(&mut c, &["RWLOCK.RELEASE", "w2", "w"]), 1);
    assert_eq!(holds(&mut c, &id), (Value::Int(1), Value::Int(1)));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut c).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(holds(&mut r, &id), (Value::Int(1), Value::Int(1)));
    assert_eq!(session_info(&mut r, &id, "revoked"), listed(&[("rw", deadline, "drain")]));
    // The reader ends at its deadline; the writer gets the key after the
    // key's lock-delay.
    eventually("the session forgot the reader", || holds(&mut c, &id) == (Value::Int(0), Value::Int(0)));
    assert!(server_now(&mut c) >= deadline);
    assert_eq!(int(&mut c, &["RWLOCK.RENEW", "rw", "r1", "60000"]), 0, "in its lock-delay: no one's");
    assert_eq!(recv(&writer), Value::Int(1));
    assert!(server_now(&mut c) >= deadline + 1_000, "granted before the lock-delay passed");
    assert_eq!(keepalive(&mut c, &id), 60_000);
    assert_eq!(info_field(&mut c, "revoked_ends"), 1);
    eventually("the replica's session forgot it", || holds(&mut r, &id) == (Value::Int(0), Value::Int(0)));
    // Without GRACE: ended at once, the session forgets it in the same command.
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "w2", "w", "WRITE", "60000", "SESSION", &id]), 1);
    assert_eq!(revoke(&mut c, &["w2", "TOKEN", "w"]).0, "ended");
    assert_eq!(holds(&mut c, &id), (Value::Int(0), Value::Int(0)));
    assert_eq!(redis::cmd("EXISTS").arg("w2").query::<i64>(&mut c).unwrap(), 0);
}

/// A session-held holder's revocation comes back from the RDB with its
/// token: the restarted server lists it, and ends and detaches it at the
/// same deadline.
#[test]
fn an_rdb_restart_carries_a_session_held_holders_revocation() {
    let folder = AofDir::new("revoke-session-holder");
    let server = folder.start();
    let mut c = server.conn();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("no").query(&mut c).unwrap();
    let id = session(&mut c, &["600000"]);
    for token in ["a", "b"] {
        assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", token, "2", "60000", "SESSION", &id]), 1);
    }
    let (_, _, deadline) = revoke(&mut c, &["s", "TOKEN", "a", "GRACE", "4000", "REASON", "drain"]);
    let deadline = deadline.expect("a deadline");
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let dir = server.dir().to_path_buf();
    drop(c);
    drop(server);
    let server = Server::builder().dir(dir).arg("appendonly", "no").start();
    let mut c = server.conn();
    assert_eq!(session_info(&mut c, &id, "revoked"), listed(&[("s", deadline, "drain")]));
    assert_eq!(keepalive(&mut c, &id), -600_000);
    assert!(int(&mut c, &["SEM.RENEW", "s", "a", "60000"]) < 0);
    eventually("the restarted server forgot the hold", || holds(&mut c, &id) == (Value::Int(1), Value::Int(0)));
    assert!(server_now(&mut c) >= deadline);
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "a", "60000"]), 0);
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "b", "60000"]), 1);
}

/// A revoked lock without lock-delay ends by its key's expiry at the
/// deadline: the master notes it (and counts that end), and so do a
/// promoted replica and a server restarted from the AOF, through the
/// replicated `SESSION.APPLY NOTE`.
#[test]
fn a_promoted_replica_and_an_aof_restart_count_an_expiry_ended_revoke() {
    let aof = AofDir::new("revoke-note");
    let master = aof.start();
    let mut m = master.conn();
    let (replica, mut r) = replica_of(&master);
    for key in ["k", "j"] {
        assert_eq!(int(&mut m, &["LOCK.ACQUIRE", key, "t", "600000"]), 1);
    }
    let (_, _, deadline) = revoke(&mut m, &["k", "GRACE", "6000"]);
    let deadline = deadline.unwrap();
    revoke(&mut m, &["j", "GRACE", "6000"]);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    assert!(err(&mut m, &["SESSION.APPLY", "NOTE", "k", "1"]).contains("internal"), "refused from a client");
    // The master is killed before the deadline: it neither ends nor counts them.
    drop(m);
    drop(master);
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let again = aof.start();
    let mut c = again.conn();
    assert!(server_now(&mut r) < deadline, "the test needs the promotion before the deadline");
    until_server_time(&mut r, deadline);
    for conn in [&mut r, &mut c] {
        for key in ["k", "j"] {
            eventually("the key expired", || !redis::cmd("EXISTS").arg(key).query::<bool>(conn).unwrap());
        }
        assert_eq!(info_field(conn, "revoked_ends"), 2, "both ends counted");
    }
    drop(replica);
}

/// SEM.INFO's / RWLOCK.INFO's `revoked-reasons`.
fn reasons(c: &mut Connection, info: &str, key: &str) -> Value {
    field(&fields_of(c, &[info, key]).expect("held"), "revoked-reasons")
}

#[test]
fn a_semaphore_or_read_write_holders_reason_is_kept_shown_replicated_and_dropped_with_the_hold() {
    let aof = AofDir::new("revoke-reasons");
    let master = aof.start();
    let mut m = master.conn();
    let (_replica, mut r) = replica_of(&master);
    for token in ["a", "b", "c"] {
        assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", token, "3", "600000"]), 1);
    }
    assert_eq!(int(&mut m, &["RWLOCK.ACQUIRE", "rw", "w", "WRITE", "600000"]), 1);
    assert_eq!(reasons(&mut m, "SEM.INFO", "s"), Value::Array(vec![]));
    revoke(&mut m, &["s", "TOKEN", "a", "GRACE", "300000", "REASON", "drain node-7"]);
    revoke(&mut m, &["s", "TOKEN", "b", "GRACE", "300000"]);
    revoke(&mut m, &["rw", "GRACE", "300000", "REASON", "maintenance"]);
    let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let shown = Value::Array(vec![b("a"), b("drain node-7"), b("b"), b("")]);
    assert_eq!(reasons(&mut m, "SEM.INFO", "s"), shown);
    assert_eq!(reasons(&mut m, "RWLOCK.INFO", "rw"), Value::Array(vec![b("w"), b("maintenance")]));
    assert_eq!(int(&mut m, &["SEM.RENEW", "s", "c", "600000"]), 1, "the others renew as before");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(reasons(&mut r, "SEM.INFO", "s"), shown, "the replica shows them");
    // A release drops its reason; a revoke again without REASON shows "".
    assert_eq!(int(&mut m, &["SEM.RELEASE", "s", "a"]), 1);
    assert_eq!(reasons(&mut m, "SEM.INFO", "s"), Value::Array(vec![b("b"), b("")]));
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "a", "3", "600000"]), 1);
    assert_eq!(reasons(&mut m, "SEM.INFO", "s"), Value::Array(vec![b("b"), b("")]), "nothing stale shown");
    // A grace 1 ms longer: b's deadline stays the earlier even when both
    // revokes fall in one millisecond (equal places would order by token).
    revoke(&mut m, &["s", "TOKEN", "a", "GRACE", "300001"]);
    // In the holders' order: the earliest place (b's deadline) first.
    assert_eq!(reasons(&mut m, "SEM.INFO", "s"), Value::Array(vec![b("b"), b(""), b("a"), b("")]));
    // A restart from the AOF, then from an RDB, shows them as they were.
    drop(m);
    drop(master);
    let server = aof.start();
    let mut c = server.conn();
    assert_eq!(reasons(&mut c, "RWLOCK.INFO", "rw"), Value::Array(vec![b("w"), b("maintenance")]));
    let _: () = redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("no").query(&mut c).unwrap();
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let dir = server.dir().to_path_buf();
    drop(c);
    drop(server);
    let server = Server::builder().dir(dir).arg("appendonly", "no").start();
    let mut c = server.conn();
    assert_eq!(reasons(&mut c, "RWLOCK.INFO", "rw"), Value::Array(vec![b("w"), b("maintenance")]));
    assert_eq!(reasons(&mut c, "SEM.INFO", "s"), Value::Array(vec![b("b"), b(""), b("a"), b("")]));
    // The key's end takes them with it.
    let _: () = redis::cmd("DEL").arg("rw").query(&mut c).unwrap();
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "rw", "w", "WRITE", "600000"]), 1);
    revoke(&mut c, &["rw", "GRACE", "300000"]);
    assert_eq!(reasons(&mut c, "RWLOCK.INFO", "rw"), Value::Array(vec![b("w"), b("")]));
}
