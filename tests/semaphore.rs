//! SEM.*: a counting semaphore of `limit` permits, each holder with its
//! own token and lease, stored as a plain sorted set; waits in the server's
//! FIFO queue; and a randomized run against a model.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis_lock_harness::Server;

mod support;
use support::holders::{self, call, now_ms, pexpiretime, spawn_call, stored, Family, R};
use support::*;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn acq(c: &mut redis::Connection, key: &str, token: &str, limit: u64, ttl: i64, opts: &[&str]) -> R {
    let (limit, ttl) = (limit.to_string(), ttl.to_string());
    let mut args = vec!["SEM.ACQUIRE", key, token, &limit, &ttl];
    args.extend_from_slice(opts);
    call(c, &args)
}

#[test]
fn permits_up_to_the_limit_each_with_its_own_lease_in_a_plain_sorted_set() {
    let server = Server::start();
    let mut c = server.conn();
    let t0 = now_ms();
    assert_eq!(acq(&mut c, "s", "a", 2, 30_000, &[]), R::Int(1));
    let R::Int(fence) = acq(&mut c, "s", "b", 2, 60_000, &["FENCE"]) else { panic!("a fence") };
    assert!(fence > 0);
    let t1 = now_ms();
    // Full: refused, with FENCE nil; the same token again: refused.
    assert_eq!(acq(&mut c, "s", "c", 2, 30_000, &[]), R::Int(0));
    assert_eq!(acq(&mut c, "s", "c", 2, 30_000, &["FENCE"]), R::Nil);
    assert_eq!(acq(&mut c, "s", "a", 2, 30_000, &["WAIT", "100"]), R::Int(0), "a holder does not wait for itself");
    // Another limit is an error naming the stored one, and changes nothing.
    assert_eq!(
        acq(&mut c, "s", "c", 3, 30_000, &[]),
        R::Err("ERR limit differs from the semaphore's: its limit is 2".into())
    );
    let (tag, hs) = stored(&mut c, "s");
    assert_eq!(tag, Some(2), "the tag member \"\" holds the limit");
    assert_eq!(hs.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert!(hs[0].1 >= t0 + 30_000 && hs[0].1 <= t1 + 30_000, "{hs:?}");
    assert!(hs[1].1 >= t0 + 60_000 && hs[1].1 <= t1 + 60_000, "{hs:?}");
    assert_eq!(pexpiretime(&mut c, "s"), hs[1].1, "the key ends with its last lease");
    // Renew moves one lease (and the key's end with the last one).
    assert_eq!(call(&mut c, &["SEM.RENEW", "s", "a", "90000"]), R::Int(1));
    assert_eq!(call(&mut c, &["SEM.RENEW", "s", "zz", "90000"]), R::Int(0));
    let (_, hs) = stored(&mut c, "s");
    assert_eq!(hs[1].0, "a");
    assert_eq!(pexpiretime(&mut c, "s"), hs[1].1);
    // INFO: limit, holders (earliest lease end first) with ttl, waiters.
    let info: redis::Value = redis::cmd("SEM.INFO").arg("s").query(&mut c).unwrap();
    let redis::Value::Array(f) = info else { panic!("{info:?}") };
    assert_eq!(f[0], redis::Value::BulkString(b"limit".to_vec()));
    assert_eq!(f[1], redis::Value::Int(2));
    assert_eq!(f[2], redis::Value::BulkString(b"holders".to_vec()));
    let redis::Value::Array(h) = &f[3] else { panic!("{f:?}") };
    assert_eq!(h[0], redis::Value::BulkString(b"b".to_vec()));
    assert!(matches!(h[1], redis::Value::Int(ms) if ms > 50_000 && ms <= 60_000), "{h:?}");
    assert_eq!(h[2], redis::Value::BulkString(b"a".to_vec()));
    assert_eq!(f[4], redis::Value::BulkString(b"waiters".to_vec()));
    assert_eq!(f[5], redis::Value::Int(0));
    // Release: one permit back; the last one deletes the key.
    assert_eq!(call(&mut c, &["SEM.RELEASE", "s", "a"]), R::Int(1));
    assert_eq!(call(&mut c, &["SEM.RELEASE", "s", "a"]), R::Int(0));
    assert_eq!(pexpiretime(&mut c, "s"), stored(&mut c, "s").1[0].1, "the key's end follows its last lease down");
    assert_eq!(call(&mut c, &["SEM.RELEASE", "s", "b"]), R::Int(1));
    assert_eq!(call(&mut c, &["EXISTS", "s"]), R::Int(0));
    assert_eq!(call(&mut c, &["SEM.INFO", "s"]), R::Nil);
    // Free again: any limit may start it anew.
    assert_eq!(acq(&mut c, "s", "c", 5, 1000, &[]), R::Int(1));
    assert_eq!(stored(&mut c, "s").0, Some(5));
    for name in ["sem_grants", "sem_refusals", "sem_renewals", "sem_releases"] {
        assert!(info_field(&mut c, name) > 0, "{name}");
    }
    assert_eq!(info_field(&mut c, "sem_grants"), 3);
    assert_eq!(info_field(&mut c, "sem_refusals"), 5);
}

#[test]
fn a_dead_holders_permit_frees_at_its_own_lease_end() {
    let server = Server::start();
    let mut c = server.conn();
    // Long enough to outlast the next three commands on a loaded machine.
    assert_eq!(acq(&mut c, "s", "short", 2, 1000, &[]), R::Int(1));
    assert_eq!(acq(&mut c, "s", "long", 2, 60_000, &[]), R::Int(1));
    let short_end = stored(&mut c, "s").1[0].1;
    assert_eq!(acq(&mut c, "s", "x", 2, 60_000, &[]), R::Int(0));
    // Without waiters nothing needs a timer: the next command sees the permit free.
    thread::sleep(Duration::from_millis((short_end - now_ms() + 5).max(0) as u64));
    assert_eq!(acq(&mut c, "s", "x", 2, 60_000, &[]), R::Int(1), "freed at its own lease end, not the last one");
    let (_, hs) = stored(&mut c, "s");
    assert!(hs.iter().all(|(t, _)| t != "short"), "pruned: {hs:?}");
    assert_eq!(info_field(&mut c, "sem_expired"), 1);
    // With a waiter, the queue's timer grants it right after the lease end.
    assert_eq!(call(&mut c, &["SEM.RENEW", "s", "x", "300"]), R::Int(1));
    let x_end = stored(&mut c, "s").1[0].1;
    let (tx, rx) = mpsc::channel();
    let h = spawn_call(&server, "w", &["SEM.ACQUIRE", "s", "w", "2", "60000", "FENCE", "WAIT", "10000"], tx);
    until_waiting(&mut c, 1);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(10)).expect("granted");
    assert!(matches!(reply, R::Int(f) if f > 1), "{reply:?}");
    let (_, hs) = stored(&mut c, "s");
    let w_end = hs.iter().find(|(t, _)| t == "w").expect("w holds").1;
    let granted_at = w_end - 60_000;
    assert!(granted_at > x_end, "granted at {granted_at}, before the lease end {x_end}");
    assert!(hs.iter().all(|(t, _)| t != "x"), "{hs:?}");
    eprintln!("granted {} ms after the lease end", granted_at - x_end);
    h.join().unwrap();
}

#[test]
fn waiters_get_one_permit_each_in_arrival_order_and_newcomers_queue_behind_them() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acq(&mut c, "s", "h1", 2, 60_000, &[]), R::Int(1));
    assert_eq!(acq(&mut c, "s", "h2", 2, 60_000, &[]), R::Int(1));
    let (tx, rx) = mpsc::channel();
    let mut hs = Vec::new();
    for i in 0..6 {
        let token = format!("w{i}");
        hs.push(spawn_call(
            &server,
            &token,
            &["SEM.ACQUIRE", "s", &token, "2", "60000", "FENCE", "WAIT", "20000"],
            tx.clone(),
        ));
        until_waiting(&mut c, i + 1);
    }
    let mut holder = ["h1".to_string(), "h2".to_string()];
    let mut last = 0;
    for i in 0..6 {
        let leaving = holder[i % 2].clone();
        assert_eq!(call(&mut c, &["SEM.RELEASE", "s", &leaving]), R::Int(1));
        let (token, reply, _) = rx.recv_timeout(Duration::from_secs(5)).expect("a waiter is granted");
        assert_eq!(token, format!("w{i}"), "FIFO");
        let R::Int(f) = reply else { panic!("{reply:?}") };
        assert!(f > last, "fences increase");
        last = f;
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "one wake per freed permit");
        holder[i % 2] = token;
        assert_eq!(stored(&mut c, "s").1.len(), 2, "never more than the limit");
    }
    for h in hs {
        h.join().unwrap();
    }
    // A newcomer never passes a waiter: with one waiting for a full
    // semaphore, a permit that frees while writes are paused goes to it.
    assert_eq!(call(&mut c, &["SEM.RELEASE", "s", &holder[0]]), R::Int(1));
    assert_eq!(call(&mut c, &["SEM.RENEW", "s", &holder[1], "200"]), R::Int(1));
    assert_eq!(acq(&mut c, "s", "x", 2, 60_000, &[]), R::Int(1));
    let h = spawn_call(&server, "first", &["SEM.ACQUIRE", "s", "first", "2", "60000", "WAIT", "20000"], tx.clone());
    until_waiting(&mut c, 1);
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(500).arg("WRITE").query(&mut c).unwrap();
    let newcomer = spawn_call(&server, "newcomer", &["SEM.ACQUIRE", "s", "newcomer", "2", "60000"], tx);
    let (token, reply, _) = rx.recv_timeout(Duration::from_secs(5)).expect("first answered");
    let (token2, reply2, _) = rx.recv_timeout(Duration::from_secs(5)).expect("newcomer answered");
    let mut got = [(token, reply), (token2, reply2)];
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, [("first".to_string(), R::Int(1)), ("newcomer".to_string(), R::Int(0))]);
    h.join().unwrap();
    newcomer.join().unwrap();
}

/// `SEM.ACQUIRE` with another limit on a key whose one lease just
/// ended and whose queue has a due head: the error is judged before
/// anything is written, so the head is not granted by it (the queue's timer
/// grants it afterwards) and nothing is pruned.
#[test]
fn an_error_does_not_serve_a_due_waiter_first() {
    let server = Server::start();
    let mut c = server.conn();
    let (tx, rx) = mpsc::channel();
    let mut ttl = 300;
    for attempt in 0..6 {
        let key = format!("s{attempt}");
        assert_eq!(acq(&mut c, &key, "h", 1, ttl, &[]), R::Int(1));
        let w = spawn_call(&server, "w", &["SEM.ACQUIRE", &key, "w", "1", "60000", "WAIT", "30000"], tx.clone());
        until_waiting(&mut c, 1);
        let got = holders::just_after_the_lease_ends(&mut c, &key, ttl, &["SEM.ACQUIRE", &key, "x", "2", "1000"]);
        let (token, reply, _) = rx.recv_timeout(Duration::from_secs(30)).expect("the waiter is answered");
        assert_eq!((token.as_str(), reply), ("w", R::Int(1)), "the waiter is granted, by the queue");
        w.join().unwrap();
        if let Some((before, reply, after)) = got {
            assert_eq!(reply, R::Err("ERR limit differs from the semaphore's: its limit is 1".into()));
            assert_eq!(after, before, "an error changes nothing");
            return;
        }
        // Too slow to catch the lease's end inside the transaction: longer.
        ttl *= 2;
    }
    panic!("the lease always ended before the transaction ran");
}

/// `INFO key COUNT n`: the `n` earliest lease ends only (a dashboard's
/// look at a large key); a bad COUNT is an error that changes nothing.
#[test]
fn info_count_lists_the_earliest_lease_ends_first() {
    let server = Server::start();
    let mut c = server.conn();
    for (token, ttl) in [("a", 30_000), ("b", 10_000), ("c", 20_000)] {
        assert_eq!(acq(&mut c, "s", token, 5, ttl, &[]), R::Int(1));
    }
    assert_eq!(call(&mut c, &["RWLOCK.ACQUIRE", "k", "r", "READ", "30000"]), R::Int(1));
    let listed = |c: &mut redis::Connection, args: &[&str]| -> Vec<String> {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let redis::Value::Array(f) = cmd.query::<redis::Value>(c).unwrap() else { panic!("{args:?}") };
        assert_eq!(f.len(), 16, "{f:?}");
        let redis::Value::Array(h) = &f[3] else { panic!("{f:?}") };
        h.chunks(2)
            .map(|p| match &p[0] {
                redis::Value::BulkString(t) => String::from_utf8(t.clone()).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(listed(&mut c, &["SEM.INFO", "s"]), ["b", "c", "a"]);
    assert_eq!(listed(&mut c, &["SEM.INFO", "s", "COUNT", "2"]), ["b", "c"]);
    assert_eq!(listed(&mut c, &["SEM.INFO", "s", "count", "1"]), ["b"]);
    assert_eq!(listed(&mut c, &["SEM.INFO", "s", "COUNT", "100"]), ["b", "c", "a"]);
    assert_eq!(listed(&mut c, &["RWLOCK.INFO", "k", "COUNT", "1"]), ["r"]);
    assert_eq!(call(&mut c, &["SEM.INFO", "absent", "COUNT", "1"]), R::Nil);
    assert_eq!(call(&mut c, &["RWLOCK.INFO", "s", "COUNT", "1"]), R::Err(WRONGTYPE.into()));
    let before = (stored(&mut c, "s"), pexpiretime(&mut c, "s"));
    let count = R::Err("ERR COUNT must be a positive integer".into());
    let syntax = R::Err("ERR syntax error".into());
    for (args, err) in [
        (&["SEM.INFO", "s", "COUNT", "0"][..], &count),
        (&["SEM.INFO", "s", "COUNT", "-1"], &count),
        (&["SEM.INFO", "s", "COUNT", "x"], &count),
        (&["SEM.INFO", "s", "COUNT", "99999999999999999999"], &count),
        (&["RWLOCK.INFO", "k", "COUNT", "0"], &count),
        (&["SEM.INFO", "s", "COUNT"], &syntax),
        (&["SEM.INFO", "s", "LIMIT", "2"], &syntax),
        (&["SEM.INFO", "s", "x"], &syntax),
    ] {
        assert_eq!(&call(&mut c, args), err, "{args:?}");
    }
    assert_eq!((stored(&mut c, "s"), pexpiretime(&mut c, "s")), before, "nothing changed");
}

/// Thousands of leases that ended at once: each command removes at most
/// 1,000 of them (replicated as `ZREM`, counted as expired) and leaves the
/// rest for the next ones, yet counts the live holders exactly meanwhile.
#[test]
fn mass_expiry_is_pruned_a_bounded_batch_at_a_time_and_never_counted_as_holders() {
    let server = Server::start();
    let mut c = server.conn();
    let now = now_ms();
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("s").arg(5).arg("");
    for i in 0..4500 {
        zadd.arg(now - 100_000 + i).arg(format!("ended-{i:05}"));
    }
    zadd.arg(now + 600_000).arg("live-1").arg(now + 600_000).arg("live-2");
    let added: i64 = zadd.query(&mut c).unwrap();
    assert_eq!(added, 4503);
    let _: i64 = redis::cmd("PEXPIREAT").arg("s").arg(now + 600_000).query(&mut c).unwrap();
    let card = |c: &mut redis::Connection| -> i64 { redis::cmd("ZCARD").arg("s").query(c).unwrap() };
    // Two live holders of 5: three more fit, whatever the ended ones left.
    for (i, token) in ["a", "b", "c"].into_iter().enumerate() {
        assert_eq!(acq(&mut c, "s", token, 5, 600_000, &[]), R::Int(1), "{token}");
        let live = 3 + i as i64;
        assert_eq!(card(&mut c), 1 + live + 4500 - 1000 * (i as i64 + 1), "1,000 pruned per command");
        assert_eq!(info_field(&mut c, "sem_expired"), 1000 * (i as u64 + 1));
    }
    assert_eq!(acq(&mut c, "s", "d", 5, 600_000, &[]), R::Int(0), "full: 5 live holders");
    assert_eq!(card(&mut c), 1 + 5 + 500);
    let redis::Value::Array(f) = redis::cmd("SEM.INFO").arg("s").query::<redis::Value>(&mut c).unwrap() else {
        panic!()
    };
    let redis::Value::Array(h) = &f[3] else { panic!("{f:?}") };
    assert_eq!(h.len(), 10, "only the live holders are listed");
    // The rest goes with the next command; the last holder's release deletes the key.
    assert_eq!(call(&mut c, &["SEM.RENEW", "s", "a", "600000"]), R::Int(1));
    assert_eq!((card(&mut c), info_field(&mut c, "sem_expired")), (6, 4500));
    let _: i64 = redis::cmd("ZADD").arg("s").arg(now - 1).arg("late").query(&mut c).unwrap();
    for token in ["a", "b", "c", "live-1", "live-2"] {
        assert_eq!(call(&mut c, &["SEM.RELEASE", "s", token]), R::Int(1), "{token}");
    }
    assert_eq!(call(&mut c, &["EXISTS", "s"]), R::Int(0));
    assert_eq!(info_field(&mut c, "sem_expired"), 4501);
}

#[test]
fn errors_change_nothing_and_name_the_problem() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acq(&mut c, "s", "a", 1, 60_000, &[]), R::Int(1));
    let before = stored(&mut c, "s");
    let arity = |cmd: &str| R::Err(format!("ERR wrong number of arguments for '{}' command", cmd.to_lowercase()));
    let cases: &[(&[&str], R)] = &[
        (&["SEM.ACQUIRE", "s", "b", "1"], arity("sem.acquire")),
        (&["SEM.RENEW", "s", "a"], arity("sem.renew")),
        (&["SEM.RENEW", "s", "a", "1000", "FLOOR", "5"], arity("sem.renew")),
        (&["SEM.RELEASE", "s", "a", "x"], arity("sem.release")),
        (&["SEM.INFO"], arity("sem.info")),
        (&["SEM.ACQUIRE", "s", "", "1", "1000"], R::Err("ERR lock key and token are required".into())),
        (
            &["SEM.ACQUIRE", "s", "b", "0", "1000"],
            R::Err("ERR limit must be a positive integer (at most 9007199254740992)".into()),
        ),
        (
            &["SEM.ACQUIRE", "s", "b", "9007199254740993", "1000"],
            R::Err("ERR limit must be a positive integer (at most 9007199254740992)".into()),
        ),
        (&["SEM.ACQUIRE", "s", "b", "1", "-5"], R::Err("ERR ttl-ms must be a positive integer (milliseconds)".into())),
        (&["SEM.ACQUIRE", "s", "b", "1", "-5"], R::Err("ERR ttl-ms must be a positive integer (milliseconds)".into())),
        (
            &["SEM.ACQUIRE", "s", "b", "1", "9007199254740992"],
            R::Err("ERR ttl-ms is too large: the expiry time would overflow".into()),
        ),
        (&["SEM.ACQUIRE", "s", "b", "1", "1000", "WAIT"], R::Err("ERR syntax error".into())),
        (
            &["SEM.ACQUIRE", "s", "b", "1", "1000", "WAIT", "-1"],
            R::Err("ERR WAIT timeout-ms must be 0 (no timeout) or a positive integer (milliseconds)".into()),
        ),
        (
            &["SEM.ACQUIRE", "s", "b", "1", "1000", "WAIT", "9223372036854775807"],
            R::Err("ERR timeout is out of range".into()),
        ),
        (
            &["SEM.ACQUIRE", "s", "b", "2", "1000"],
            R::Err("ERR limit differs from the semaphore's: its limit is 1".into()),
        ),
        (&["SEM.RENEW", "s", "a", "0"], R::Err("ERR ttl-ms must be a positive integer (milliseconds)".into())),
        (&["RWLOCK.ACQUIRE", "s", "b", "READ", "1000"], R::Err(WRONGTYPE.into())),
        (&["RWLOCK.RENEW", "s", "a", "1000"], R::Err(WRONGTYPE.into())),
        (&["RWLOCK.RELEASE", "s", "a"], R::Err(WRONGTYPE.into())),
        (&["RWLOCK.INFO", "s"], R::Err(WRONGTYPE.into())),
        (&["LOCK.RENEW", "s", "a", "1000"], R::Err(WRONGTYPE.into())),
        (&["LOCK.RELEASE", "s", "a"], R::Err(WRONGTYPE.into())),
        (&["LOCK.INFO", "s"], R::Err(WRONGTYPE.into())),
    ];
    for (args, want) in cases {
        assert_eq!(&call(&mut c, args), want, "{args:?}");
        assert_eq!(stored(&mut c, "s"), before, "{args:?} changed the key");
    }
    // LOCK.ACQUIRE is SET NX: an existing key of any type is refused.
    assert_eq!(call(&mut c, &["LOCK.ACQUIRE", "s", "a", "1000"]), R::Int(0));
    // The other way round: a lock, a plain string, a foreign sorted set.
    assert_eq!(call(&mut c, &["LOCK.ACQUIRE", "l", "a", "60000"]), R::Int(1));
    let _: () = redis::cmd("ZADD").arg("z").arg(1).arg("m").query(&mut c).unwrap();
    // 2.7 is no tag the module writes (2.5 would be: a limit of 2 with a
    // 50,000 ms lock-delay, see docs/lease.md; a fraction above 0.6 is not).
    let _: () = redis::cmd("ZADD").arg("badtag").arg(2.7).arg("").arg(1e15).arg("m").query(&mut c).unwrap();
    for key in ["l", "z", "badtag"] {
        for args in [
            &["SEM.ACQUIRE", key, "b", "1", "1000", "WAIT", "100"][..],
            &["SEM.RENEW", key, "a", "1000"],
            &["SEM.RELEASE", key, "a"],
            &["SEM.INFO", key],
        ] {
            assert_eq!(call(&mut c, args), R::Err(WRONGTYPE.into()), "{args:?}");
        }
    }
    assert_eq!(call(&mut c, &["GET", "l"]), R::Other(redis::Value::BulkString(b"a".to_vec())));
    assert_eq!(info_field(&mut c, "waiting"), 0);
}

#[test]
fn waiters_survive_del_flushall_swapdb_and_a_foreign_zrem_and_leave_on_role_change() {
    let server = Server::start();
    let mut c = server.conn();
    let (tx, rx) = mpsc::channel();
    for (i, how) in ["DEL", "FLUSHALL", "SWAPDB", "ZREM"].into_iter().enumerate() {
        assert_eq!(acq(&mut c, "s", "h", 1, 60_000, &[]), R::Int(1));
        let token = format!("w{i}");
        let h = spawn_call(&server, &token, &["SEM.ACQUIRE", "s", &token, "1", "60000", "WAIT", "10000"], tx.clone());
        until_waiting(&mut c, 1);
        let started = Instant::now();
        match how {
            "DEL" => assert_eq!(call(&mut c, &["DEL", "s"]), R::Int(1)),
            "FLUSHALL" => assert!(matches!(call(&mut c, &["FLUSHALL"]), R::Other(_))),
            "SWAPDB" => assert!(matches!(call(&mut c, &["SWAPDB", "0", "1"]), R::Other(_))),
            _ => assert_eq!(call(&mut c, &["ZREM", "s", "h"]), R::Int(1)),
        }
        let (t, reply, at) = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| panic!("granted after {how}"));
        assert_eq!((t.as_str(), reply), (token.as_str(), R::Int(1)), "{how}");
        assert!(at - started < Duration::from_secs(2), "{how}");
        let (tag, hs) = stored(&mut c, "s");
        assert_eq!((tag, hs.len(), hs[0].0.as_str()), (Some(1), 1, token.as_str()), "{how}");
        h.join().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    }
    // Paused writes: nothing is granted until the pause ends. The lease
    // that ends inside the pause is set in the same read as the pause (a
    // short lease taken before the waiter queued could end before the
    // pause on a loaded machine, and the waiter be granted then).
    assert_eq!(acq(&mut c, "s", "h", 1, 60_000, &[]), R::Int(1));
    let h = spawn_call(&server, "p", &["SEM.ACQUIRE", "s", "p", "1", "60000", "WAIT", "10000"], tx.clone());
    until_waiting(&mut c, 1);
    let paused = Instant::now();
    let (renewed, ()): (i64, ()) = redis::pipe()
        .cmd("SEM.RENEW")
        .arg(&["s", "h", "150"])
        .cmd("CLIENT")
        .arg(&["PAUSE", "500", "WRITE"])
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, 1);
    let (_, reply, at) = rx.recv_timeout(Duration::from_secs(5)).expect("granted after the pause");
    assert_eq!(reply, R::Int(1));
    assert!(at - paused >= Duration::from_millis(450), "granted {:?} into a 500 ms pause", at - paused);
    h.join().unwrap();
    // lock.max-waiters caps these waits too.
    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(1).query(&mut c).unwrap();
    let h = spawn_call(&server, "m1", &["SEM.ACQUIRE", "s", "m1", "1", "60000", "WAIT", "0"], tx.clone());
    until_waiting(&mut c, 1);
    assert_eq!(
        acq(&mut c, "s", "m2", 1, 60_000, &["WAIT", "0"]),
        R::Err("ERR too many clients waiting: lock.max-waiters reached; retry later or raise it".into())
    );
    // A master that becomes a replica answers its waiters at once.
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(1).query(&mut c).unwrap();
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(5)).expect("answered on the role change");
    assert!(matches!(&reply, R::Err(e) if e.contains("UNBLOCKED")), "{reply:?}");
    h.join().unwrap();
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "waiting"), 0);
}

#[test]
fn a_lease_at_the_end_of_the_exact_range_leaves_the_server_responsive() {
    let server = Server::start();
    let mut c = server.conn();
    let ttl = (1i64 << 53) - now_ms() - 1000;
    assert_eq!(acq(&mut c, "s", "far", 1, ttl, &[]), R::Int(1));
    let (tx, rx) = mpsc::channel();
    let h = spawn_call(&server, "w", &["SEM.ACQUIRE", "s", "w", "1", "1000", "WAIT", "300"], tx);
    until_waiting(&mut c, 1);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(5)).expect("times out");
    assert_eq!(reply, R::Int(0));
    h.join().unwrap();
    assert_eq!(call(&mut c, &["PING"]), R::Other(redis::Value::SimpleString("PONG".into())));
    assert_eq!(stored(&mut c, "s").1[0].0, "far");
}

#[test]
fn randomized_against_a_model() {
    let server = Server::start();
    let ops = std::env::var("SEM_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let seed = std::env::var("SEM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let report = holders::random_run(&server, Family::Semaphore { limit: 3 }, ops, seed);
    assert!(report.resyncs * 20 <= ops, "too many steps could not be ordered: {}", report.resyncs);
    assert!(report.timer_grants > 20, "the run freed few permits at lease ends: {}", report.timer_grants);
    assert!(report.fences * 40 > ops, "few fenced grants: {}", report.fences);
}

/// A mixed workload of semaphores and read-write locks with waits: grants,
/// refusals, renewals, releases handing over to waiters, a lease ending
/// with a waiter (the queue's timer), a waiter that times out.
fn mixed_workload(server: &Server) {
    let mut c = server.conn();
    let (tx, rx) = mpsc::channel();
    assert_ne!(acq(&mut c, "m:sem", "a", 2, 60_000, &["FENCE"]), R::Nil);
    // Its lease ends once both waiters below queued (a loaded machine may
    // take a while to start them).
    assert_eq!(acq(&mut c, "m:sem", "b", 2, 1500, &[]), R::Int(1));
    assert_eq!(acq(&mut c, "m:sem", "c", 2, 60_000, &[]), R::Int(0));
    let h1 =
        spawn_call(server, "w1", &["SEM.ACQUIRE", "m:sem", "w1", "2", "60000", "FENCE", "WAIT", "10000"], tx.clone());
    until_waiting(&mut c, 1);
    let h2 = spawn_call(server, "w2", &["SEM.ACQUIRE", "m:sem", "w2", "2", "60000", "WAIT", "10000"], tx.clone());
    until_waiting(&mut c, 2);
    // b's lease ends: w1 gets its permit from the timer.
    let (t, r, _) = rx.recv_timeout(Duration::from_secs(5)).expect("w1 granted");
    assert!(t == "w1" && matches!(r, R::Int(f) if f > 1), "{t} {r:?}");
    assert_eq!(call(&mut c, &["SEM.RENEW", "m:sem", "a", "90000"]), R::Int(1));
    assert_eq!(call(&mut c, &["SEM.RELEASE", "m:sem", "a"]), R::Int(1));
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("w2 granted").1, R::Int(1));
    h1.join().unwrap();
    h2.join().unwrap();
    // A read-write lock: readers, a writer that waits, a reader that times out behind it.
    assert_eq!(call(&mut c, &["RWLOCK.ACQUIRE", "m:rw", "r1", "READ", "60000"]), R::Int(1));
    assert_ne!(call(&mut c, &["RWLOCK.ACQUIRE", "m:rw", "r2", "READ", "60000", "FENCE"]), R::Nil);
    let hw = spawn_call(
        server,
        "w",
        &["RWLOCK.ACQUIRE", "m:rw", "w", "WRITE", "60000", "FENCE", "WAIT", "10000"],
        tx.clone(),
    );
    until_waiting(&mut c, 1);
    let hr = spawn_call(server, "r3", &["RWLOCK.ACQUIRE", "m:rw", "r3", "READ", "60000", "WAIT", "100"], tx.clone());
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("r3 times out").1, R::Int(0));
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "m:rw", "r1"]), R::Int(1));
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "m:rw", "r2"]), R::Int(1));
    assert!(matches!(rx.recv_timeout(Duration::from_secs(5)).expect("w granted").1, R::Int(f) if f > 1));
    assert_eq!(call(&mut c, &["RWLOCK.RENEW", "m:rw", "w", "120000"]), R::Int(1));
    hw.join().unwrap();
    hr.join().unwrap();
    // A key emptied by its last release.
    assert_eq!(acq(&mut c, "m:gone", "x", 1, 60_000, &[]), R::Int(1));
    assert_eq!(call(&mut c, &["SEM.RELEASE", "m:gone", "x"]), R::Int(1));
}

fn digest(c: &mut redis::Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).expect("debug digest")
}

#[test]
fn a_replica_and_an_aof_replay_end_with_the_masters_exact_sets() {
    let dir = std::env::temp_dir().join(format!("redis-lock-sem-aof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut master = Server::builder().dir(&dir).arg("appendonly", "yes").arg("appendfsync", "always").start();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut m = master.conn();
    let mut r = replica.conn();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !redis::cmd("INFO").arg("replication").query::<String>(&mut m).unwrap().contains("state=online")
        || !redis::cmd("INFO").arg("replication").query::<String>(&mut r).unwrap().contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica never came online");
        thread::sleep(Duration::from_millis(20));
    }
    mixed_workload(&master);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let want = digest(&mut m);
    assert_ne!(want, "0000000000000000000000000000000000000000", "the workload left keys");
    // WAIT counted the replica's acknowledgement; give it a moment more to apply.
    let deadline = Instant::now() + Duration::from_secs(5);
    while digest(&mut r) != want && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(digest(&mut r), want, "replica digest (values and expiry times)");
    for key in ["m:sem", "m:rw"] {
        assert_eq!(stored(&mut r, key), stored(&mut m, key), "{key} on the replica");
        assert_eq!(pexpiretime(&mut r, key), pexpiretime(&mut m, key), "{key}'s expiry on the replica");
    }
    let (_, sem) = stored(&mut m, "m:sem");
    assert_eq!(sem.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(), ["w1", "w2"]);
    // The AOF holds the effects with absolute times; a restart replays them.
    master.restart();
    let mut m = master.conn();
    assert_eq!(digest(&mut m), want, "AOF replay digest");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_waiter_during_a_reshard_is_never_granted_on_the_source() {
    let cluster = redis_lock_harness::Cluster::start(3, 0);
    let m = cluster.masters();
    let key = cluster.key_in_slot("sem:", cluster.view(m[0]).slots[0]);
    let mut source = cluster.node(m[0]).conn();
    assert_eq!(acq(&mut source, &key, "h1", 2, 60_000, &[]), R::Int(1));
    assert_eq!(acq(&mut source, &key, "h2", 2, 60_000, &[]), R::Int(1));
    let before = stored(&mut source, &key);
    let (tx, rx) = mpsc::channel();
    let h = spawn_call(cluster.node(m[0]), "w", &["SEM.ACQUIRE", &key, "w", "2", "60000", "WAIT", "20000"], tx);
    until_waiting(&mut source, 1);
    cluster.reshard(m[0], m[1], 1);
    assert_eq!(cluster.owner_of(&key), m[1]);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(10)).expect("the waiter is answered");
    assert!(matches!(&reply, R::Err(e) if e.starts_with("TRYAGAIN") || e.starts_with("MOVED")), "{reply:?}");
    assert_eq!(info_field(&mut source, "waits_granted"), 0, "no grant on the source");
    assert_eq!(info_field(&mut source, "sem_grants"), 2);
    let mut target = cluster.node(m[1]).conn();
    assert_eq!(stored(&mut target, &key), before, "the set moved intact, without the waiter");
    h.join().unwrap();
}

#[test]
fn registration_key_specs_acl_categories_and_docs() {
    let server = Server::start();
    let mut c = server.conn();
    let text = |v: &redis::Value| format!("{v:?}").to_lowercase();
    for (cmd, flags, key_flags, args) in [
        (
            "sem.acquire",
            "blocking",
            "insert",
            &["key", "token", "limit", "ttl-ms", "fence", "timeout-ms", "lock-delay-ms", "max-hold-ms"][..],
        ),
        ("sem.renew", "write", "update", &["key", "token", "ttl-ms"]),
        ("sem.release", "write", "delete", &["key", "token"]),
        ("sem.info", "readonly", "ro", &["key"]),
        (
            "rwlock.acquire",
            "blocking",
            "insert",
            &["key", "token", "mode", "ttl-ms", "fence", "timeout-ms", "lock-delay-ms", "max-hold-ms"],
        ),
        ("rwlock.renew", "write", "update", &["key", "token", "ttl-ms"]),
        ("rwlock.release", "write", "delete", &["key", "token"]),
        ("rwlock.info", "readonly", "ro", &["key"]),
    ] {
        let info: redis::Value = redis::cmd("COMMAND").arg("INFO").arg(cmd).query(&mut c).unwrap();
        let t = text(&info);
        assert!(t.contains(flags) && t.contains(key_flags), "{cmd}: {t}");
        assert!(!t.contains("\"fast\""), "{cmd} reads every holder: not fast");
        let docs: redis::Value = redis::cmd("COMMAND").arg("DOCS").arg(cmd).query(&mut c).unwrap();
        let d = text(&docs);
        for a in args {
            assert!(d.contains(&format!("\"{a}\"")), "{cmd} documents {a}: {d}");
        }
        assert!(d.contains("summary") && d.contains("complexity"), "{cmd}");
    }
    // Categories as the native twins (ZADD, ZREM, ZRANGE), where modules may set them.
    if harness_has_acl_categories(&mut c) {
        let cat = |c: &mut redis::Connection, name: &str| -> Vec<String> {
            redis::cmd("ACL").arg("CAT").arg(name).query(c).unwrap()
        };
        let (write, read, sorted, blocking) =
            (cat(&mut c, "write"), cat(&mut c, "read"), cat(&mut c, "sortedset"), cat(&mut c, "blocking"));
        for cmd in ["sem.acquire", "sem.renew", "sem.release", "rwlock.acquire", "rwlock.renew", "rwlock.release"] {
            assert!(write.iter().any(|x| x == cmd) && sorted.iter().any(|x| x == cmd), "{cmd}");
        }
        for cmd in ["sem.info", "rwlock.info"] {
            assert!(read.iter().any(|x| x == cmd) && !write.iter().any(|x| x == cmd), "{cmd}");
        }
        assert!(blocking.iter().any(|x| x == "sem.acquire") && blocking.iter().any(|x| x == "rwlock.acquire"));
    }
}

/// Whether this server lets modules set ACL categories (Redis 7.2+, Valkey).
fn harness_has_acl_categories(c: &mut redis::Connection) -> bool {
    let write: Vec<String> = redis::cmd("ACL").arg("CAT").arg("write").query(c).unwrap();
    write.iter().any(|x| x == "lock.acquire")
}
