//! `LOCK.ACQUIREALL … SESSION id` (docs/sessions.md): every key held by
//! the session, attached as granted (at once, or after WAIT when the
//! grant happens), listed by SESSION.INFO, released together by the
//! session's revoke; a session that ends while the request waits answers
//! it; refusals write nothing; a replica and an AOF restart keep the same
//! keys and attachments. And how a session ended, told by SESSION.INFO
//! after its locks are released (`state`: `expired`, `revoked`).

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::lease::{cmd, err, field, fields_of, int, server_now};
use support::session::{eventually, grant, held_value, list};
use support::{get, info_field, until_waiting, wait_for_link, AofDir};

fn all(c: &mut Connection, keys: &[&str], token: &str, opts: &[&str]) -> redis::RedisResult<Value> {
    redis::cmd("LOCK.ACQUIREALL").arg(keys.len()).arg(keys).arg(token).arg(30_000).arg(opts).query(c)
}

fn session_info(c: &mut Connection, id: &str) -> Option<Vec<(String, Value)>> {
    fields_of(c, &["SESSION.INFO", id, "COUNT", "100"])
}

fn session_int(c: &mut Connection, id: &str, name: &str) -> i64 {
    match session_info(c, id).map(|f| field(&f, name)) {
        Some(Value::Int(n)) => n,
        other => panic!("{name} of {id}: {other:?}"),
    }
}

fn state(c: &mut Connection, id: &str) -> Option<String> {
    session_info(c, id).map(|f| redis::from_redis_value(field(&f, "state")).expect("state"))
}

/// The keys SESSION.INFO lists in `first` (key, db, …).
fn listed(c: &mut Connection, id: &str) -> Vec<String> {
    let Some(Value::Array(first)) = session_info(c, id).map(|f| field(&f, "first")) else { panic!("first of {id}") };
    first.chunks(2).map(|p| redis::from_redis_value_ref(&p[0]).expect("key")).collect()
}

fn pttl(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(c).expect("PTTL")
}

fn digest(c: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).expect("DEBUG DIGEST")
}

/// LOCK.ACQUIREALL on a new connection from a thread; its reply (an error
/// as `SimpleString`) arrives on the channel with its token.
fn waiter(server: &Server, keys: &[&str], token: &str, opts: &[&str], tx: mpsc::Sender<(String, Value)>) {
    let mut c = server.conn();
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let (token, opts) = (token.to_string(), opts.iter().map(|o| o.to_string()).collect::<Vec<_>>());
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
        let reply = all(&mut c, &keys, &token, &opts).unwrap_or_else(|e| Value::SimpleString(e.to_string()));
        let _ = tx.send((token, reply));
    });
}

#[test]
fn every_key_is_held_by_the_session_and_its_revoke_releases_them_all() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    assert_eq!(all(&mut c, &["a", "b", "c"], "tok", &["SESSION", &id]).unwrap(), Value::Int(1));
    for k in ["a", "b", "c"] {
        assert_eq!(get(&mut c, k), Some(held_value(&id, "tok")), "{k}");
        assert_eq!(pttl(&mut c, k), -1, "{k}: the session, not the key's expiry, keeps it");
    }
    assert_eq!(session_int(&mut c, &id, "holds"), 3);
    assert_eq!(listed(&mut c, &id), ["a", "b", "c"]);
    // Each key is an ordinary session-held lock: RENEW changes nothing,
    // RELEASE by its token lets it go and detaches it.
    assert_eq!(int(&mut c, &["LOCK.RENEW", "a", "tok", "10"]), 1);
    assert_eq!(pttl(&mut c, "a"), -1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "c", "tok"]), 1);
    assert_eq!(listed(&mut c, &id), ["a", "b"]);
    // With FENCE and MAXHOLD: one fence per key, and the hold limit as
    // each key's expiry.
    let fenced = all(&mut c, &["d", "e"], "tok", &["FENCE", "MAXHOLD", "50000", "SESSION", &id]).unwrap();
    let Value::Array(fences) = fenced else { panic!("{fenced:?}") };
    assert_eq!(fences.len(), 2);
    let now = server_now(&mut c);
    for k in ["d", "e"] {
        let v = get(&mut c, k).expect(k);
        let plain = held_value(&id, "tok");
        assert!(v.starts_with(&plain[..plain.len() - 1]) && v.contains(r#""holdUntil":"#), "{v}");
        let left = pttl(&mut c, k);
        assert!(left > 40_000 && left <= 50_000, "{k}: {left} ms left at {now}");
    }
    assert_eq!(session_int(&mut c, &id, "holds"), 4);
    // The revoke releases every key (no lock-delay: a voluntary end).
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &id]), 1);
    assert_eq!(int(&mut c, &["LOCK.RENEW", "a", "tok", "10"]), 0, "refused from the revoke on");
    eventually("every key is released", || ["a", "b", "d", "e"].iter().all(|k| get(&mut c, k).is_none()));
    eventually("the session is forgotten", || list(&mut c).is_empty());
    assert_eq!(info_field(&mut c, "session_holds_ended"), 4);
    // Its end is still told: revoked, nothing held.
    assert_eq!(state(&mut c, &id).as_deref(), Some("revoked"));
    assert_eq!(session_int(&mut c, &id, "holds"), 0);
}

#[test]
fn a_refused_request_writes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    let ended = grant(&mut c, &["60000"]);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &ended]), 1);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "b", "other", "60000"]), 1);
    let before = digest(&mut c);
    let bogus = "0123456789abcdef0123456789abcdef";
    for (opts, error) in [
        (vec!["SESSION", bogus], "no such session"),
        (vec!["SESSION", "not-an-id"], "no such session"),
        (vec!["SESSION", &ended], "no such session"),
        (vec!["WAIT", "1000", "SESSION", &ended], "no such session"),
        (vec!["LOCKDELAY", "100", "SESSION", &id], "LOCKDELAY is the session's"),
        (vec!["SESSION"], "syntax error"),
    ] {
        let e = redis::cmd("LOCK.ACQUIREALL")
            .arg(2)
            .arg("a")
            .arg("c")
            .arg("tok")
            .arg(30_000)
            .arg(&opts)
            .query::<Value>(&mut c);
        let e = e.expect_err("refused").to_string();
        assert!(e.contains(error), "{opts:?}: {e}");
    }
    let e = err(&mut c, &[&b"LOCK.ACQUIREALL"[..], b"1", b"a", b"\xff", b"30000", b"SESSION", id.as_bytes()]);
    assert!(e.contains("UTF-8"), "{e}");
    // A busy key without WAIT: refused as a whole, nothing attached.
    assert_eq!(all(&mut c, &["a", "b"], "tok", &["SESSION", &id]).unwrap(), Value::Int(0));
    assert_eq!(digest(&mut c), before, "a refusal changed the data");
    assert_eq!(session_int(&mut c, &id, "holds"), 0);
    assert_eq!(info_field(&mut c, "waiting"), 0);
}

#[test]
fn a_waiting_request_attaches_when_granted_and_is_answered_when_its_session_ends() {
    let server = Server::start();
    let mut c = server.conn();
    let id = grant(&mut c, &["60000"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "b", "holder", "60000"]), 1);
    let (tx, rx) = mpsc::channel();
    waiter(&server, &["a", "b"], "tok", &["WAIT", "20000", "FENCE", "SESSION", &id], tx.clone());
    until_waiting(&mut c, 1);
    assert_eq!(session_int(&mut c, &id, "holds"), 0, "nothing attaches before the grant");
    assert_eq!(get(&mut c, "a"), None, "nothing is held while it waits");
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "b", "holder"]), 1);
    let (_, reply) = rx.recv_timeout(Duration::from_secs(10)).expect("granted");
    assert!(matches!(&reply, Value::Array(f) if f.len() == 2), "{reply:?}");
    for k in ["a", "b"] {
        assert_eq!(get(&mut c, k), Some(held_value(&id, "tok")), "{k}");
        assert_eq!(pttl(&mut c, k), -1);
    }
    assert_eq!(listed(&mut c, &id), ["a", "b"]);

    // Sessions that end while their requests wait (a revoke, an expiry):
    // each request is answered at once, and nothing is written for it.
    let revoked = grant(&mut c, &["60000"]);
    let expiring = grant(&mut c, &["500"]);
    waiter(&server, &["b", "c"], "by-revoke", &["WAIT", "30000", "SESSION", &revoked], tx.clone());
    until_waiting(&mut c, 1);
    waiter(&server, &["c", "a"], "by-expiry", &["WAIT", "30000", "SESSION", &expiring], tx);
    until_waiting(&mut c, 2);
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &revoked]), 1);
    let (who, reply) = rx.recv_timeout(Duration::from_secs(10)).expect("answered at the revoke");
    assert_eq!(who, "by-revoke");
    assert!(matches!(&reply, Value::SimpleString(e) if e.contains("no such session")), "{reply:?}");
    let (who, reply) = rx.recv_timeout(Duration::from_secs(20)).expect("answered at the expiry");
    assert_eq!(who, "by-expiry");
    assert!(matches!(&reply, Value::SimpleString(e) if e.contains("no such session")), "{reply:?}");
    assert_eq!(info_field(&mut c, "waiting"), 0);
    assert_eq!(get(&mut c, "c"), None, "nothing was written for them");
    assert_eq!(listed(&mut c, &id), ["a", "b"]);
}

/// The replica and an AOF restart get the same keys and attachments (the
/// `SESSION.APPLY ATTACH` entries next to each key's `SET`), and the
/// revoke's releases.
#[test]
fn a_replica_and_an_aof_restart_keep_the_keys_and_their_attachments() {
    let dir = AofDir::new("session-multi");
    let mut master = dir.start();
    let mut m = master.conn();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    let id = grant(&mut m, &["60000"]);
    let gone = grant(&mut m, &["60000"]);
    assert_eq!(all(&mut m, &["a", "b", "c"], "tok", &["SESSION", &id]).unwrap(), Value::Int(1));
    assert_eq!(all(&mut m, &["x", "y"], "t2", &["MAXHOLD", "40000", "SESSION", &gone]).unwrap(), Value::Int(1));
    assert_eq!(int(&mut m, &["LOCK.ACQUIRE", "d", "holder", "60000"]), 1);
    let (tx, rx) = mpsc::channel();
    waiter(&master, &["d", "e"], "tok", &["WAIT", "20000", "SESSION", &id], tx);
    until_waiting(&mut m, 1);
    assert_eq!(int(&mut m, &["LOCK.RELEASE", "d", "holder"]), 1);
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).expect("granted").1, Value::Int(1));
    assert_eq!(int(&mut m, &["SESSION.REVOKE", &gone, "REASON", "drain"]), 1);
    eventually("the revoked session's keys are released", || get(&mut m, "x").is_none() && get(&mut m, "y").is_none());
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(20_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    eventually("the replica has the master's sessions", || list(&mut r) == list(&mut m));
    assert_eq!(digest(&mut r), digest(&mut m), "the replica's keys");
    assert_eq!(listed(&mut r, &id), ["a", "b", "c", "d", "e"]);
    assert_eq!(listed(&mut m, &id), ["a", "b", "c", "d", "e"]);
    assert_eq!(state(&mut r, &gone).as_deref(), Some("revoked"), "the replica remembers the end too");
    let why = session_info(&mut r, &gone).map(|f| field(&f, "end-reason"));
    assert_eq!(why, Some(Value::BulkString(b"drain".to_vec())), "and its reason");
    drop(replica);
    let before = digest(&mut m);
    master.restart();
    let mut m = master.conn();
    assert_eq!(digest(&mut m), before, "the AOF's keys");
    assert_eq!(listed(&mut m, &id), ["a", "b", "c", "d", "e"]);
    // Revoked after the restart: every key goes.
    assert_eq!(int(&mut m, &["SESSION.REVOKE", &id]), 1);
    eventually("every key is released", || redis::cmd("DBSIZE").query::<i64>(&mut m).unwrap() == 0);
}

/// How a session ended stays visible after its locks are released: its
/// holder's keepalive says `0`, and SESSION.INFO says why; a session never
/// granted, or forgotten by FLUSHALL, is nil.
#[test]
fn an_ended_session_tells_how_it_ended() {
    let server = Server::start();
    let mut c = server.conn();
    let revoked = grant(&mut c, &["60000", "LOCKDELAY", "20"]);
    let expired = grant(&mut c, &["300"]);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "r", "t", "1000", "SESSION", &revoked]), 1);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "e", "t", "1000", "SESSION", &expired]), 1);
    let at = server_now(&mut c);
    // A bad reason is refused, and changes nothing.
    for (opts, error) in [
        (vec!["REASON".to_owned(), "x".repeat(201)], "REASON must be valid UTF-8 of at most 200 bytes"),
        (vec!["REASON".to_owned()], "syntax error"),
        (vec!["GRACE".to_owned(), "5".to_owned()], "syntax error"),
    ] {
        let e = redis::cmd("SESSION.REVOKE").arg(&revoked).arg(&opts).query::<Value>(&mut c).unwrap_err();
        assert!(e.to_string().contains(error), "{opts:?}: {e}");
    }
    assert_eq!(state(&mut c, &revoked).as_deref(), Some("alive"));
    assert_eq!(int(&mut c, &["SESSION.REVOKE", &revoked, "REASON", "rotate keys"]), 1);
    let ending = session_info(&mut c, &revoked).map(|f| field(&f, "end-reason"));
    assert_eq!(ending, Some(Value::BulkString(b"rotate keys".to_vec())), "told while its locks are released too");
    eventually("both are forgotten", || list(&mut c).is_empty());
    let keepalive: Vec<i64> = redis::cmd("SESSION.KEEPALIVE").arg(&revoked).arg(&expired).query(&mut c).unwrap();
    assert_eq!(keepalive, [0, 0], "the keepalive's reply is unchanged");
    let f = session_info(&mut c, &revoked).expect("remembered");
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
    let all = ["id", "state", "ttl-ms", "ttl-left-ms", "deadline", "lock-delay-ms", "holds", "first", "revoked-holds"];
    assert_eq!(names, [&all[..], &["revoked", "end-reason", "evicted-holds", "evicted"]].concat(), "the same fields");
    assert_eq!(field(&f, "end-reason"), Value::BulkString(b"rotate keys".to_vec()));
    assert_eq!(field(&f, "state"), Value::BulkString(b"revoked".to_vec()));
    assert_eq!((field(&f, "ttl-ms"), field(&f, "lock-delay-ms")), (Value::Int(60_000), Value::Int(20)));
    assert_eq!((field(&f, "ttl-left-ms"), field(&f, "holds")), (Value::Int(0), Value::Int(0)));
    let Value::Int(end) = field(&f, "deadline") else { panic!("{f:?}") };
    assert!(end >= at && end <= server_now(&mut c), "ended at {end}, revoked after {at}");
    assert_eq!(state(&mut c, &expired).as_deref(), Some("expired"));
    assert_eq!(session_int(&mut c, &expired, "ttl-ms"), 300);
    assert_eq!(session_info(&mut c, &expired).map(|f| field(&f, "end-reason")), Some(Value::Nil));
    assert_eq!(cmd(&mut c, &["SESSION.INFO", "0123456789abcdef0123456789abcdef"]).unwrap(), Value::Nil);
    assert_eq!(info_field(&mut c, "sessions"), 0, "not counted as sessions");
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(cmd(&mut c, &["SESSION.INFO", &revoked]).unwrap(), Value::Nil, "forgotten by FLUSHALL");
}
