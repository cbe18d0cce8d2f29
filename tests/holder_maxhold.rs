//! MAXHOLD on semaphores and read-write locks against real servers: each
//! holder's hold limit (grant time + MAXHOLD, a waiter's from its grant)
//! is a second member `"\0" + token` scored `-holdUntil`; it caps renewals
//! (reply 2, then 0 from the limit on), never counts or shows as a holder,
//! goes with its place (release, pruning, a re-grant without MAXHOLD), and
//! reaches a replica and survives an AOF restart. Tokens starting with a
//! NUL byte are refused. Also `INFO lock`'s `sem_delayed_acquires` /
//! `rw_delayed_acquires`.
//!
//! Timing: hold limits of a few seconds; every bound asserted is an order
//! of events read on the server's clock, never a duration below seconds.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::{Connection, Value};
use redis_lock_harness::Server;

mod support;
use support::lease::{err, fields_of, int, pexpiretime, place, score, server_now, until_server_time, zrange};
use support::{info_field, replica_of, until_waiting, AofDir};

/// INFO of a holders key as (field, value) pairs.
fn info(c: &mut Connection, command: &str, key: &str) -> Option<Vec<(String, Value)>> {
    fields_of(c, &[command, key])
}

fn zcard(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("ZCARD").arg(key).query(c).expect("ZCARD")
}

/// `token`'s hold limit as stored: its member `"\0" + token`, scored `-holdUntil`.
fn hold(c: &mut Connection, key: &str, token: &str) -> Option<i64> {
    let member = [&b"\0"[..], token.as_bytes()].concat();
    score(c, key, &member).map(|s| -s as i64)
}

/// A flat [token, n, …] field of INFO as pairs.
fn pairs(f: &[(String, Value)], name: &str) -> Vec<(String, i64)> {
    let v = f.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name} in {f:?}")).1.clone();
    let Value::Array(items) = v else { panic!("{name}: {v:?}") };
    items
        .chunks(2)
        .map(|p| match (&p[0], &p[1]) {
            (Value::BulkString(t), Value::Int(n)) => (String::from_utf8_lossy(t).into_owned(), *n),
            other => panic!("{name}: {other:?}"),
        })
        .collect()
}

/// The acquire of `token` in `family` ("SEM": a 2-permit semaphore; "RWLOCK": a reader).
fn acquire<'a>(family: &'a str, key: &'a str, token: &'a str, ttl: &'a str) -> Vec<&'a str> {
    match family {
        "SEM" => vec!["SEM.ACQUIRE", key, token, "2", ttl],
        _ => vec!["RWLOCK.ACQUIRE", key, token, "READ", ttl],
    }
}

fn with<'a>(mut args: Vec<&'a str>, more: &[&'a str]) -> Vec<&'a str> {
    args.extend_from_slice(more);
    args
}

#[test]
fn max_hold_caps_renewals_then_the_place_ends_at_the_limit() {
    let server = Server::start();
    let mut c = server.conn();
    for family in ["SEM", "RWLOCK"] {
        let (renew, info_cmd) = (format!("{family}.RENEW"), format!("{family}.INFO"));
        let key = format!("{family}:capped");
        let before = server_now(&mut c);
        assert_eq!(int(&mut c, &with(acquire(family, &key, "a", "1000"), &["MAXHOLD", "4000"])), 1);
        let after = server_now(&mut c);
        // A second holder without a limit keeps the key alive throughout.
        assert_eq!(int(&mut c, &acquire(family, &key, "b", "600000")), 1);
        let limit = hold(&mut c, &key, "a").expect("the hold member");
        assert!(limit >= before + 4000 && limit <= after + 4000, "grant time + MAXHOLD: {limit}");
        assert_eq!(hold(&mut c, &key, "b"), None, "no MAXHOLD, no hold member");
        assert_eq!(zcard(&mut c, &key), 4, "tag, a, b and a's hold member");
        let f = info(&mut c, &info_cmd, &key).expect("held");
        assert_eq!(pairs(&f, "holders").iter().map(|h| h.0.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(pairs(&f, "hold-until"), [("a".to_string(), limit)]);
        // A renewal far below the limit is whole (the 4 s limit is seconds away).
        let renewed = int(&mut c, &[&renew, &key, "a", "1000"]);
        if server_now(&mut c) + 1000 < limit {
            assert_eq!(renewed, 1);
        }
        // A renewal past the limit is cut to it: 2, the place ends at the limit.
        assert_eq!(int(&mut c, &[&renew, &key, "a", "600000"]), 2, "capped");
        assert_eq!(place(&mut c, &key, "a"), limit, "the lease (and place) ends at the hold limit");
        assert_eq!(int(&mut c, &[&renew, &key, "a", "600000"]), 2, "capped again, the same end");
        until_server_time(&mut c, limit - 1);
        // From the limit on: 0, the lease ended (or ends this millisecond).
        let at_limit = int(&mut c, &[&renew, &key, "a", "1000"]);
        if server_now(&mut c) >= limit {
            assert_eq!(at_limit, 0, "a renewal at or after the hold limit");
        }
        until_server_time(&mut c, limit);
        assert_eq!(int(&mut c, &[&renew, &key, "a", "1000"]), 0);
        assert_eq!(int(&mut c, &[&format!("{family}.RELEASE"), &key, "a"]), 0);
        // That refusal pruned the ended place and its hold member in one go.
        assert_eq!(score(&mut c, &key, b"a"), None);
        assert_eq!(hold(&mut c, &key, "a"), None, "pruned with its place");
        assert_eq!(zcard(&mut c, &key), 2);
        let f = info(&mut c, &info_cmd, &key).expect("b holds");
        assert_eq!(pairs(&f, "holders").len(), 1);
        assert_eq!(pairs(&f, "hold-until"), []);
    }
    let capped: u64 = info_field(&mut c, "sem_capped_renewals");
    assert!(capped >= 2, "sem_capped_renewals {capped}");
    assert!(info_field(&mut c, "rw_capped_renewals") >= 2);
}

#[test]
fn hold_members_are_never_holders_and_go_with_their_place() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "a", "2", "600000", "MAXHOLD", "900000"]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "b", "2", "600000", "MAXHOLD", "900000"]), 1);
    // Exactly 2 of a limit of 2, whatever the 5 members.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "c", "2", "600000", "MAXHOLD", "900000"]), 0);
    assert_eq!(zcard(&mut c, "s"), 5);
    let f = info(&mut c, "SEM.INFO", "s").expect("held");
    let holders: Vec<String> = pairs(&f, "holders").into_iter().map(|h| h.0).collect();
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert!(holders.iter().all(|t| t == "a" || t == "b"), "{holders:?}");
    assert_eq!(pairs(&f, "hold-until").len(), 2);
    // A waiter, granted with its MAXHOLD counted from the grant.
    let (tx, rx) = mpsc::channel();
    let mut w = server.conn();
    let waiter = thread::spawn(move || {
        let r: redis::RedisResult<i64> = redis::cmd("SEM.ACQUIRE")
            .arg(&["s", "c", "2", "600000", "WAIT", "60000", "MAXHOLD", "900000"])
            .query(&mut w);
        tx.send(r).unwrap();
    });
    until_waiting(&mut c, 1);
    // LOCK.TOP sees the two holders and the waiter.
    let top: Value = redis::cmd("LOCK.TOP").query(&mut c).unwrap();
    let Value::Array(entries) = &top else { panic!("{top:?}") };
    let Some(Value::Array(entry)) = entries.first() else { panic!("{top:?}") };
    let holders = entry.chunks(2).find(|p| p[0] == Value::BulkString(b"holders".to_vec())).map(|p| p[1].clone());
    assert_eq!(holders, Some(Value::Int(2)), "{top:?}");
    thread::sleep(Duration::from_millis(1500));
    let released_at = server_now(&mut c);
    assert_eq!(int(&mut c, &["SEM.RELEASE", "s", "a"]), 1);
    assert_eq!(rx.recv_timeout(Duration::from_secs(60)).expect("answered").expect("granted"), 1);
    waiter.join().unwrap();
    let c_hold = hold(&mut c, "s", "c").expect("the waiter's hold member");
    assert!(c_hold >= released_at + 900_000, "MAXHOLD counts from the grant: {c_hold} < {released_at} + 900000");
    assert_eq!(score(&mut c, "s", b"a"), None);
    assert_eq!(hold(&mut c, "s", "a"), None, "a release removes both members");
    assert_eq!(zcard(&mut c, "s"), 5, "tag, b, c and their hold members");
    // The last releases delete the key.
    assert_eq!(int(&mut c, &["SEM.RELEASE", "s", "b"]), 1);
    assert_eq!(hold(&mut c, "s", "b"), None);
    assert_eq!(int(&mut c, &["SEM.RELEASE", "s", "c"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "s"]), 0);
    // A read-write lock: one writer with a hold member is alone.
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "w", "WRITE", "600000", "MAXHOLD", "600000"]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "r", "READ", "600000"]), 0);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "w2", "WRITE", "600000", "MAXHOLD", "600000"]), 0);
    let f = info(&mut c, "RWLOCK.INFO", "k").expect("held");
    assert_eq!(pairs(&f, "holders").len(), 1);
    assert_eq!(int(&mut c, &["RWLOCK.RELEASE", "k", "w"]), 1);
    assert_eq!(int(&mut c, &["EXISTS", "k"]), 0, "the writer's release deletes both members with the key");
}

#[test]
fn a_regrant_without_max_hold_leaves_no_hold_member_behind() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "y", "3", "600000"]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "x", "3", "1000", "MAXHOLD", "1000"]), 1);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "z", "3", "1000", "MAXHOLD", "2000"]), 1);
    let x_end = place(&mut c, "s", "x");
    let z_end = place(&mut c, "s", "z");
    until_server_time(&mut c, x_end.max(z_end));
    // x's place ended: granted anew, now without a limit; z's is pruned.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "x", "3", "600000"]), 1);
    assert_eq!(hold(&mut c, "s", "x"), None, "the old limit is gone");
    assert_eq!(hold(&mut c, "s", "z"), None, "pruned with z's place");
    assert_eq!(score(&mut c, "s", b"z"), None);
    assert_eq!(zcard(&mut c, "s"), 3, "tag, x, y: {:?}", zrange(&mut c, "s"));
    assert_eq!(int(&mut c, &["SEM.RENEW", "s", "x", "600000"]), 1, "no limit any more");
    // And the other way: a re-grant with MAXHOLD after one without.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "v", "3", "1000"]), 1);
    let v_end = place(&mut c, "s", "v");
    until_server_time(&mut c, v_end);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "v", "3", "1000", "MAXHOLD", "5000"]), 1);
    assert!(hold(&mut c, "s", "v").is_some());
}

#[test]
fn nul_tokens_and_bad_max_hold_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "a", "2", "600000", "MAXHOLD", "900000"]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "r", "READ", "600000"]), 1);
    let held = |c: &mut Connection| (zrange(c, "s"), pexpiretime(c, "s"), zrange(c, "k"), pexpiretime(c, "k"));
    let before = held(&mut c);
    let nul: &[u8] = b"\0a";
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (vec![b"SEM.ACQUIRE", b"s", nul, b"2", b"60000"], "NUL"),
        (vec![b"SEM.ACQUIRE", b"s", b"\0", b"2", b"60000", b"MAXHOLD", b"60000"], "NUL"),
        (vec![b"SEM.RENEW", b"s", nul, b"60000"], "NUL"),
        (vec![b"SEM.RELEASE", b"s", nul], "NUL"),
        (vec![b"RWLOCK.ACQUIRE", b"k", nul, b"READ", b"60000"], "NUL"),
        (vec![b"RWLOCK.RENEW", b"k", nul, b"60000"], "NUL"),
        (vec![b"RWLOCK.RELEASE", b"k", nul], "NUL"),
        (vec![b"SEM.ACQUIRE", b"s", b"b", b"2", b"60000", b"MAXHOLD", b"0"], "MAXHOLD must be a positive integer"),
        (vec![b"SEM.ACQUIRE", b"s", b"b", b"2", b"60000", b"MAXHOLD", b"x"], "MAXHOLD must be a positive integer"),
        (vec![b"SEM.ACQUIRE", b"s", b"b", b"2", b"60000", b"MAXHOLD", b"-5"], "MAXHOLD must be a positive integer"),
        (vec![b"SEM.ACQUIRE", b"s", b"b", b"2", b"60000", b"MAXHOLD", b"59999"], "MAXHOLD must be at least ttl-ms"),
        (vec![b"SEM.ACQUIRE", b"s", b"b", b"2", b"60000", b"MAXHOLD", b"9223372036854775807"], "MAXHOLD is too large"),
        // A limit past 2^53 ms could not be stored exactly as a score.
        (vec![b"SEM.ACQUIRE", b"s", b"b", b"2", b"60000", b"MAXHOLD", b"9007199254740000"], "MAXHOLD is too large"),
        (vec![b"SEM.ACQUIRE", b"s", b"b", b"2", b"60000", b"MAXHOLD"], "syntax error"),
        (vec![b"RWLOCK.ACQUIRE", b"k", b"b", b"READ", b"60000", b"MAXHOLD", b"1"], "MAXHOLD must be at least ttl-ms"),
        (vec![b"RWLOCK.ACQUIRE", b"k", b"b", b"READ", b"60000", b"MAXHOLD", b"0"], "MAXHOLD must be a positive"),
        (
            vec![
                b"RWLOCK.ACQUIRE",
                b"k",
                b"b",
                b"WRITE",
                b"60000",
                b"WAIT",
                b"100",
                b"MAXHOLD",
                b"9223372036854775807",
            ],
            "MAXHOLD is too large",
        ),
        (vec![b"SEM.RENEW", b"s", b"a", b"60000", b"MAXHOLD", b"60000"], "wrong number of arguments"),
    ];
    for (args, error) in &cases {
        let e = err(&mut c, args);
        assert!(e.contains(error), "{args:?}: {e}");
        assert_eq!(held(&mut c), before, "{args:?} changed a key");
    }
    assert_eq!(int(&mut c, &["EXISTS", "\0a"]), 0);
    // A NUL elsewhere in a token is an ordinary byte; on LOCK.* any token goes.
    let ok: i64 = redis::cmd("SEM.ACQUIRE").arg("s").arg(b"a\0").arg(2).arg(60_000).query(&mut c).unwrap();
    assert_eq!(ok, 1);
    let ok: i64 = redis::cmd("LOCK.ACQUIRE").arg("l").arg(b"\0a").arg(60_000).query(&mut c).unwrap();
    assert_eq!(ok, 1);
}

#[test]
fn places_in_their_delay_that_fill_the_key_count_as_delayed_acquires() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "a", "1", "500", "LOCKDELAY", "6000"]), 1);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "w", "WRITE", "500", "LOCKDELAY", "6000"]), 1);
    // A refusal by live holders is no delayed acquire.
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "b", "1", "60000", "LOCKDELAY", "6000"]), 0);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "r", "READ", "60000", "LOCKDELAY", "6000"]), 0);
    let (sem_end, rw_end) = (place(&mut c, "s", "a"), place(&mut c, "k", "w"));
    until_server_time(&mut c, sem_end.max(rw_end) - 6000);
    assert_eq!(int(&mut c, &["SEM.ACQUIRE", "s", "b", "1", "60000", "LOCKDELAY", "6000"]), 0);
    assert_eq!(int(&mut c, &["RWLOCK.ACQUIRE", "k", "r", "READ", "60000", "LOCKDELAY", "6000"]), 0);
    let (sem, rw) = (info_field(&mut c, "sem_delayed_acquires"), info_field(&mut c, "rw_delayed_acquires"));
    if server_now(&mut c) < sem_end.min(rw_end) {
        assert_eq!((sem, rw), (1, 1), "one refusal each, by a place in its delay");
    } else {
        eprintln!("this machine ran past the delay's end before the checks ended: not judged");
        assert!(sem <= 1 && rw <= 1);
    }
    assert_eq!(info_field(&mut c, "delayed_acquires"), 0, "the exclusive lock's counter is apart");
}

#[test]
fn a_replica_and_an_aof_restart_hold_the_same_members() {
    let aof = AofDir::new("holder-maxhold");
    let master = aof.start();
    let mut m = master.conn();
    let (_replica, mut r) = replica_of(&master);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "a", "3", "60000", "MAXHOLD", "600000"]), 1);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "b", "3", "60000", "LOCKDELAY", "0", "MAXHOLD", "90000"]), 1);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "gone", "3", "60000", "MAXHOLD", "90000"]), 1);
    assert_eq!(int(&mut m, &["SEM.RELEASE", "s", "gone"]), 1);
    assert_eq!(int(&mut m, &["SEM.RENEW", "s", "b", "600000"]), 2, "capped at b's limit");
    assert_eq!(int(&mut m, &["RWLOCK.ACQUIRE", "k", "w", "WRITE", "60000", "LOCKDELAY", "333", "MAXHOLD", "70000"]), 1);
    assert_eq!(int(&mut m, &["RWLOCK.RENEW", "k", "w", "600000"]), 2);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let (s, k) = (zrange(&mut m, "s"), zrange(&mut m, "k"));
    assert_eq!(s.len(), 5, "tag, a, b and their hold members: {s:?}");
    assert_eq!(k.len(), 3, "tag, w and its hold member: {k:?}");
    for key in ["s", "k"] {
        assert_eq!(zrange(&mut r, key), zrange(&mut m, key), "{key} on the replica");
        assert_eq!(pexpiretime(&mut r, key), pexpiretime(&mut m, key), "{key}'s expiry on the replica");
    }
    assert_eq!(place(&mut r, "k", "w"), hold(&mut r, "k", "w").unwrap() + 333, "limit + the key's delay");
    let f = info(&mut r, "SEM.INFO", "s").expect("INFO works on the replica");
    assert_eq!(pairs(&f, "holders").len(), 2);
    assert_eq!(pairs(&f, "hold-until").len(), 2);
    // The master, killed and started again on its AOF, has the same sets.
    let expiry = pexpiretime(&mut m, "s");
    drop(master);
    let master = aof.start();
    let mut m = master.conn();
    assert_eq!(zrange(&mut m, "s"), s, "the AOF restored the semaphore");
    assert_eq!(zrange(&mut m, "k"), k);
    assert_eq!(pexpiretime(&mut m, "s"), expiry);
    assert_eq!(int(&mut m, &["SEM.RENEW", "s", "b", "600000"]), 2, "the limit survived the restart");
    assert_eq!(int(&mut m, &["SEM.RENEW", "s", "a", "60000"]), 1);
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "c", "3", "60000"]), 1, "2 holders of 3: one more fits");
    assert_eq!(int(&mut m, &["SEM.ACQUIRE", "s", "d", "3", "60000"]), 0);
    drop(master);
}

/// The live count leaves out every hold member (counted by `ZCOUNT`), on
/// small keys (a listpack) and large ones (a skiplist, above 128 members):
/// a semaphore admits exactly its limit.
#[test]
fn the_live_count_is_exact_with_many_hold_members() {
    let server = Server::start();
    let mut c = server.conn();
    for with_hold in [10, 64, 65, 150] {
        let key = format!("many-{with_hold}");
        let limit = (with_hold + 5).to_string();
        for i in 0..with_hold {
            let t = format!("h{i}");
            assert_eq!(int(&mut c, &["SEM.ACQUIRE", &key, &t, &limit, "600000", "MAXHOLD", "900000"]), 1);
        }
        for i in 0..5 {
            let t = format!("p{i}");
            assert_eq!(int(&mut c, &["SEM.ACQUIRE", &key, &t, &limit, "600000"]), 1, "{key} {t}");
        }
        assert_eq!(int(&mut c, &["SEM.ACQUIRE", &key, "over", &limit, "600000"]), 0, "{key}: full");
        assert_eq!(int(&mut c, &["SEM.ACQUIRE", &key, "over", &limit, "600000", "MAXHOLD", "900000"]), 0);
        assert_eq!(zcard(&mut c, &key), 1 + 2 * with_hold as i64 + 5);
        // One holder with a limit leaves: exactly one place frees.
        assert_eq!(int(&mut c, &["SEM.RELEASE", &key, "h0"]), 1);
        assert_eq!(int(&mut c, &["SEM.ACQUIRE", &key, "again", &limit, "600000"]), 1);
        assert_eq!(int(&mut c, &["SEM.ACQUIRE", &key, "over", &limit, "600000"]), 0, "{key}: full again");
        let f = info(&mut c, "SEM.INFO", &key).expect("held");
        assert_eq!(pairs(&f, "holders").len(), with_hold + 5);
        assert_eq!(pairs(&f, "hold-until").len(), with_hold - 1);
    }
}
