//! LOCKDELAY on semaphores and read-write locks against real servers: a
//! holder whose lease ran out keeps its place for the key's delay (a new
//! acquire is refused, a waiter is not granted, the former holder can
//! neither renew nor release it), a release frees the place at once, the
//! delay is the key's (another one is an error that changes nothing), and
//! the tag that carries it reaches a replica and survives an AOF restart.
//!
//! Timing: leases of about a second and delays of several seconds. Every
//! "still held" assertion is made only when the server's clock, read
//! *after* the commands, shows they ran before the delay's end; a machine
//! too slow for that says so and asserts what holds anyway.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::{Connection, Value};
use redis_lock_harness::Server;
use redis_lock_rules::holders::{Kind, Tag};

mod support;
use support::lease::{err, field, fields_of, int, pexpiretime, place, score, server_now, until_server_time, zrange};
use support::{replica_of, until_waiting, AofDir};

/// INFO of a holders key as (field, value) pairs.
fn info(c: &mut Connection, command: &str, key: &str) -> Option<Vec<(String, Value)>> {
    fields_of(c, &[command, key])
}

const DELAY_MS: i64 = 4_000;

/// What the key's tag member `""` says, read as the module reads it.
fn tag(c: &mut Connection, key: &str) -> Option<Tag> {
    score(c, key, "").and_then(Tag::from_score)
}

fn sem(limit: u64, delay: i64) -> Option<Tag> {
    Some(Tag { kind: Kind::Semaphore { limit }, delay })
}

fn rw(writer: bool, delay: i64) -> Option<Tag> {
    Some(Tag { kind: Kind::ReadWrite { writer }, delay })
}

/// `args` on a new connection from a thread: its reply (an error as a
/// `SimpleString` holding its text).
fn blocked(server: &Server, args: &[&str], tx: mpsc::Sender<Value>) -> thread::JoinHandle<()> {
    let mut c = server.conn();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let reply = redis::cmd(&args[0]).arg(&args[1..]).query::<Value>(&mut c);
        let _ = tx.send(reply.unwrap_or_else(|e| Value::SimpleString(e.to_string())));
    })
}

#[test]
fn a_delay_holds_the_permit_after_the_lease_ends() {
    let server = Server::start();
    let mut c = server.conn();
    let d = DELAY_MS.to_string();
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "a", "2", "1000", "LOCKDELAY", &d]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "b", "2", "600000", "LOCKDELAY", &d]), 1);
    assert_eq!(score(&mut c, "s", ""), sem(2, DELAY_MS).map(Tag::score), "the tag holds the limit and the delay");
    assert!((score(&mut c, "s", "").unwrap() - 2.04).abs() < 1e-9, "limit + ms / 100000");
    let a = place(&mut c, "s", "a");
    let lease_end = a - DELAY_MS;
    let f = info(&mut c, "SEM.INFO", "s").expect("held");
    assert_eq!(field(&f, "lock-delay-ms"), Value::Int(DELAY_MS));
    assert_eq!(field(&f, "limit"), Value::Int(2));
    let Value::Array(h) = field(&f, "holders") else { panic!("{f:?}") };
    assert_eq!(h[0], Value::BulkString(b"a".to_vec()));
    assert!(matches!(h[1], Value::Int(ms) if ms <= 1000), "INFO shows the lease, not the place: {h:?}");
    until_server_time(&mut c, lease_end);
    let before = zrange(&mut c, "s");
    let acquire = int(&mut c, &["SEM.ACQUIRE", "s", "c", "2", "60000", "LOCKDELAY", &d]);
    let again = int(&mut c, &["SEM.ACQUIRE", "s", "a", "2", "60000", "LOCKDELAY", &d]);
    let renew = int(&mut c, &["SEM.RENEW", "s", "a", "60000"]);
    let release = int(&mut c, &["SEM.RELEASE", "s", "a"]);
    let f = info(&mut c, "SEM.INFO", "s").expect("held");
    let after = zrange(&mut c, "s");
    if server_now(&mut c) < a {
        assert_eq!((acquire, again, renew, release), (0, 0, 0, 0), "a place in its delay was taken, renewed or freed");
        assert_eq!(after, before, "nothing changed during the delay");
        let Value::Array(h) = field(&f, "holders") else { panic!("{f:?}") };
        assert_eq!(h[0], Value::BulkString(b"a".to_vec()), "the delayed holder is listed");
        assert!(matches!(h[1], Value::Int(ms) if ms <= 0), "its lease ended: {h:?}");
    } else {
        eprintln!("this machine ran past the delay's end before the checks ended: not judged");
    }
    // The renewal and the release refused above were the holder's last word:
    // the place frees itself at its end, and only then.
    until_server_time(&mut c, a);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "c", "2", "60000", "LOCKDELAY", &d]), 1);
    assert_eq!(score(&mut c, "s", "a"), None, "the ended place was pruned");
}

#[test]
fn a_release_skips_the_delay() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "a", "1", "60000", "LOCKDELAY", "60000"]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "b", "1", "60000", "LOCKDELAY", "60000"]), 0);
    assert_eq!(int(&mut c, &["SEM.RELEASE", "s", "a"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "s"]), 0, "the last release deletes the key");
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "b", "1", "60000", "LOCKDELAY", "60000"]), 1);
    // A read-write lock: the writer's release lets readers in at once.
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "w", "WRITE", "60000", "LOCKDELAY", "60000"]), 1);
    assert_eq!(tag(&mut c, "k"), rw(true, 60_000), "a writer's tag with a delay of 60 s");
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "r", "READ", "60000", "LOCKDELAY", "60000"]), 0);
    assert_eq!(int(&mut c, &["RWLOCK.RELEASE", "k", "w"]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "r", "READ", "60000", "LOCKDELAY", "60000"]), 1);
    assert_eq!(tag(&mut c, "k"), rw(false, 60_000), "readers' tag with a delay of 60 s");
    // A renewal keeps the delay on top of the new lease.
    let now = server_now(&mut c);
    assert_eq!(int(&mut c, &["RWLOCK.RENEW", "k", "r", "1000"]), 1);
    let r = place(&mut c, "k", "r");
    assert!(r >= now + 61_000 && r <= server_now(&mut c) + 61_000, "renewed place {r}");
    assert_eq!(pexpiretime(&mut c, "k"), r, "the key ends with the last place");
}

#[test]
fn a_waiter_is_granted_only_once_the_delay_has_passed() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "w", "WRITE", "500", "LOCKDELAY", "3000"]), 1);
    let writer_place = place(&mut c, "k", "w");
    assert_eq!(pexpiretime(&mut c, "k"), writer_place);
    let (tx, rx) = mpsc::channel();
    let reader = blocked(
        &server,
        &["RWLOCK.ACQUIRE", "k", "r", "READ", "60000", "FENCE", "WAIT", "60000", "LOCKDELAY", "3000"],
        tx,
    );
    until_waiting(&mut c, 1);
    let reply = rx.recv_timeout(Duration::from_secs(60)).expect("the waiter was answered");
    reader.join().unwrap();
    assert!(matches!(reply, Value::Int(fence) if fence > 0), "{reply:?}");
    let granted_at = place(&mut c, "k", "r") - 3_000 - 60_000;
    assert!(granted_at > writer_place, "granted at {granted_at}, inside the writer's delay ending at {writer_place}");
    assert_eq!(score(&mut c, "k", "w"), None);
    assert_eq!(tag(&mut c, "k"), rw(false, 3_000));
    // An acquirer naming another delay is answered with the error, WAIT or not.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "a", "1", "500", "LOCKDELAY", "1000"]), 1);
    let (tx, rx) = mpsc::channel();
    let other = blocked(&server, &["SEM.ACQUIRE", "s", "b", "1", "60000", "WAIT", "60000", "LOCKDELAY", "2000"], tx);
    let reply = rx.recv_timeout(Duration::from_secs(60)).expect("answered");
    other.join().unwrap();
    // Refused early (the key's live tag) or, once its places ended, granted
    // under its own delay: never granted beside the old delay.
    match reply {
        Value::SimpleString(e) => assert!(e.contains("LOCKDELAY differs"), "{e}"),
        Value::Int(1) => assert_eq!(tag(&mut c, "s"), sem(1, 2_000)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn another_delay_and_bad_input_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "a", "2", "600000", "LOCKDELAY", "5000"]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "r", "READ", "600000"]), 1);
    let held = |c: &mut Connection| (zrange(c, "s"), pexpiretime(c, "s"), zrange(c, "k"), pexpiretime(c, "k"));
    let before = held(&mut c);
    let differs = |ms: i64| format!("LOCKDELAY differs from the key's: its lock-delay is {ms} ms");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["SEM.ACQUIRE", "s", "b", "2", "60000"], differs(5000)),
        (vec!["SEM.ACQUIRE", "s", "b", "2", "60000", "LOCKDELAY", "0"], differs(5000)),
        (vec!["SEM.ACQUIRE", "s", "b", "2", "60000", "LOCKDELAY", "4999", "WAIT", "100"], differs(5000)),
        (vec!["SEM.ACQUIRE", "s", "b", "3", "60000", "LOCKDELAY", "5000"], "limit differs".into()),
        (vec!["RWLOCK.ACQUIRE", "k", "r2", "READ", "60000", "LOCKDELAY", "1"], differs(0)),
        (vec!["RWLOCK.ACQUIRE", "s", "r2", "READ", "60000", "LOCKDELAY", "5000"], "WRONGTYPE".into()),
        (
            vec!["SEM.ACQUIRE", "s", "b", "2", "60000", "LOCKDELAY", "-1"],
            "LOCKDELAY must be an integer from 0 to 60000".into(),
        ),
        (vec!["SEM.ACQUIRE", "s", "b", "2", "60000", "LOCKDELAY", "60001"], "LOCKDELAY must be an integer".into()),
        (vec!["RWLOCK.ACQUIRE", "k", "b", "READ", "60000", "LOCKDELAY", "5s"], "LOCKDELAY must be an integer".into()),
        (vec!["SEM.ACQUIRE", "s", "b", "2", "60000", "LOCKDELAY"], "syntax error".into()),
        (vec!["SEM.RENEW", "s", "a", "60000", "LOCKDELAY", "5000"], "wrong number of arguments".into()),
        (
            vec!["SEM.ACQUIRE", "n", "b", "4294967297", "60000", "LOCKDELAY", "1"],
            "limit must be at most 4294967296 with LOCKDELAY".into(),
        ),
        (vec!["SEM.ACQUIRE", "n", "b", "1", "9007199254740000", "LOCKDELAY", "60000"], "ttl-ms is too large".into()),
    ];
    for (args, error) in &cases {
        let e = err(&mut c, args);
        assert!(e.contains(error.as_str()), "{args:?}: {e}");
        assert_eq!(held(&mut c), before, "{args:?} changed a key");
    }
    assert_eq!(int(&mut c, &["EXISTS", "n"]), 0);
    // The limit up to 2^32 carries a delay; without one, up to 2^53 as before.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "n", "b", "4294967296", "60000", "LOCKDELAY", "60000"]), 1);
    assert_eq!(tag(&mut c, "n"), sem(1 << 32, 60_000));
    assert_eq!(int(&mut c, &["SEM.RELEASE", "n", "b"]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "n", "b", "9007199254740992", "60000", "LOCKDELAY", "0"]), 1);
    assert_eq!(score(&mut c, "n", ""), Some(9007199254740992.0), "LOCKDELAY 0 is no delay: the tag as before");
    // A renewal whose place would pass 2^53 is refused and changes nothing.
    let e = err(&mut c, &["SEM.RENEW", "s", "a", "9007199254739000"]);
    assert!(e.contains("ttl-ms is too large"), "{e}");
    assert_eq!(held(&mut c), before);
    // A sorted set whose tag is not one the module writes stays WRONGTYPE.
    let _: i64 = redis::cmd("ZADD").arg("z").arg(2.7).arg("").query(&mut c).unwrap();
    assert!(err(&mut c, &["SEM.ACQUIRE", "z", "b", "2", "60000"]).contains("WRONGTYPE"));
}

#[test]
fn a_replica_and_an_aof_restart_keep_the_delay() {
    let aof = AofDir::new("holder-lease");
    let master = aof.start();
    let mut m = master.conn();
    let (_replica, mut r) = replica_of(&master);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "a", "3", "600000", "LOCKDELAY", "7000"]), 1);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "short", "3", "700", "LOCKDELAY", "7000"]), 1);
    assert_eq!(int(&mut m, &["RWLOCK.ACQUIRE", "k", "w", "WRITE", "600000", "LOCKDELAY", "333"]), 1);
    assert_eq!(int(&mut m, &["SEM.RENEW", "s", "a", "900000"]), 1);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let short = place(&mut m, "s", "short");
    for key in ["s", "k"] {
        assert_eq!(zrange(&mut r, key), zrange(&mut m, key), "{key} on the replica");
        assert_eq!(pexpiretime(&mut r, key), pexpiretime(&mut m, key), "{key}'s expiry on the replica");
    }
    assert_eq!(tag(&mut r, "s"), sem(3, 7_000));
    assert_eq!(tag(&mut r, "k"), rw(true, 333));
    let f = info(&mut r, "RWLOCK.INFO", "k").expect("INFO works on the replica");
    assert_eq!(field(&f, "lock-delay-ms"), Value::Int(333));
    // Promoted once the short lease ended: its place is still held there.
    until_server_time(&mut r, short - 7_000);
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let renew = int(&mut r, &["SEM.RENEW", "s", "short", "60000"]);
    let release = int(&mut r, &["SEM.RELEASE", "s", "short"]);
    let again = int(&mut r, &["SEM.ACQUIRE", "s", "short", "3", "60000", "LOCKDELAY", "7000"]);
    if server_now(&mut r) < short {
        assert_eq!((renew, release, again), (0, 0, 0), "the promoted replica let the delayed holder back");
        assert_eq!(place(&mut r, "s", "short"), short);
    }
    // The master, killed and started again on its AOF, has the same sets.
    let (s, k) = (zrange(&mut m, "s"), zrange(&mut m, "k"));
    let expiry = pexpiretime(&mut m, "s");
    drop(master);
    let master = aof.start();
    let mut m = master.conn();
    // Only module writes prune, and none ran since: the ended place is there too.
    assert_eq!(zrange(&mut m, "s"), s, "the AOF restored the semaphore");
    assert_eq!(zrange(&mut m, "k"), k);
    assert_eq!(pexpiretime(&mut m, "s"), expiry);
    let f = info(&mut m, "SEM.INFO", "s").expect("held");
    assert_eq!(field(&f, "lock-delay-ms"), Value::Int(7000));
    assert_eq!(int(&mut m, &["SEM.RENEW", "s", "a", "600000"]), 1);
    assert!(err(&mut m, &["SEM.ACQUIRE", "s", "b", "3", "60000"]).contains("LOCKDELAY differs"));
    drop(master);
}
