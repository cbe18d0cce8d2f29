//! Elections against real servers: LOCK.ELECT's line and terms, a leader
//! whose process dies, LOCK.PROCLAIM, LOCK.LEADER (also on a replica) and
//! LOCK.OBSERVE's blocked observers through changes, timeouts, paused
//! writes and `CLIENT UNBLOCK`; bad input; the reference scripts on an
//! elected key.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use redis_lock_harness::Server;
use redis_lock_rules::scripts;

mod support;
use support::*;

/// What LOCK.LEADER and LOCK.OBSERVE reply: (value, term, rev, ttl-ms).
type Led = Option<(String, i64, i64, i64)>;

fn parse_led(v: Value) -> Led {
    let items = match v {
        Value::Nil => return None,
        Value::Array(items) => items,
        other => panic!("not a leadership: {other:?}"),
    };
    let s = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).expect("utf-8"),
        other => panic!("not a string: {other:?}"),
    };
    let i = |v: &Value| match v {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    };
    let names: Vec<String> = items.iter().step_by(2).map(s).collect();
    assert_eq!(names, ["value", "term", "rev", "ttl-ms", "revoked", "revoked-until"]);
    Some((s(&items[1]), i(&items[3]), i(&items[5]), i(&items[7])))
}

fn leader(c: &mut redis::Connection, key: &str) -> Led {
    parse_led(redis::cmd("LOCK.LEADER").arg(key).query(c).expect("leader"))
}

fn rev_of(led: &Led) -> i64 {
    led.as_ref().map_or(0, |l| l.2)
}

fn elect(c: &mut redis::Connection, key: &str, token: &str, ttl: i64, value: &str) -> Option<i64> {
    redis::cmd("LOCK.ELECT").arg(key).arg(token).arg(ttl).arg(value).query(c).expect("elect")
}

fn proclaim(c: &mut redis::Connection, key: &str, token: &str, value: &str) -> i64 {
    redis::cmd("LOCK.PROCLAIM").arg(key).arg(token).arg(value).query(c).expect("proclaim")
}

/// `LOCK.OBSERVE key AFTER after WAIT wait_ms` from a thread of its own.
fn observer(server: &Server, key: &str, after: i64, wait_ms: u64, tx: mpsc::Sender<redis::RedisResult<Led>>) {
    let mut c = server.conn();
    let key = key.to_string();
    thread::spawn(move || {
        let reply = redis::cmd("LOCK.OBSERVE").arg(&key).arg("AFTER").arg(after).arg("WAIT").arg(wait_ms).query(&mut c);
        let _ = tx.send(reply.map(parse_led));
    });
}

fn until_observing(c: &mut redis::Connection, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(c, "observing") != n {
        assert!(Instant::now() < deadline, "expected {n} observers");
        thread::sleep(Duration::from_millis(2));
    }
}

fn until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        thread::sleep(Duration::from_millis(2));
    }
}

fn answered(rx: &mpsc::Receiver<redis::RedisResult<Led>>) -> Led {
    rx.recv_timeout(Duration::from_secs(30)).expect("an observer was answered").expect("no error")
}

/// A candidate that, once elected, renews its lease until told to die (a
/// kill -9 of its process: it just stops, nothing released).
fn candidate(
    server: &Server,
    key: &str,
    token: &str,
    ttl: i64,
    grants: mpsc::Sender<(String, i64)>,
) -> mpsc::Sender<()> {
    let (die, dying) = mpsc::channel::<()>();
    let mut c = server.conn();
    let (key, token) = (key.to_string(), token.to_string());
    thread::spawn(move || {
        let term: Option<i64> = redis::cmd("LOCK.ELECT")
            .arg(&key)
            .arg(&token)
            .arg(ttl)
            .arg(format!("addr-{token}"))
            .arg("WAIT")
            .arg(0)
            .query(&mut c)
            .expect("elect");
        let term = term.expect("a candidate waiting without timeout is elected");
        let _ = grants.send((token.clone(), term));
        while dying.recv_timeout(Duration::from_millis(ttl as u64 / 4)).is_err() {
            let renewed: i64 = redis::cmd("LOCK.RENEW").arg(&key).arg(&token).arg(ttl).query(&mut c).expect("renew");
            assert_eq!(renewed, 1, "{token} lost its lease while alive");
        }
        drop(c);
    });
    die
}

#[test]
fn candidates_lead_one_at_a_time_in_line_and_in_term_order_and_observers_see_every_term() {
    let server = Server::start();
    let mut c = server.conn();
    let key = "elect:line";
    // Long enough that a renewal every ttl/4 never misses on a loaded machine.
    let ttl = 3_000;
    // An observer follows every change from "no leader" on, in its own
    // thread, until it has seen the last candidate lead.
    let seen = {
        let mut c = server.conn();
        thread::spawn(move || {
            let (mut after, mut seen) = (0, Vec::new());
            loop {
                let v =
                    redis::cmd("LOCK.OBSERVE").arg(key).arg("AFTER").arg(after).arg("WAIT").arg(60_000).query(&mut c);
                let led = parse_led(v.expect("observe"));
                after = rev_of(&led);
                let last = led.as_ref().is_some_and(|l| l.0 == "addr-c3");
                seen.push(led);
                if last {
                    return seen;
                }
            }
        })
    };
    until_observing(&mut c, 1);
    let (tx, rx) = mpsc::channel();
    let mut dies = Vec::new();
    for token in ["c0", "c1", "c2", "c3"] {
        dies.push(candidate(&server, key, token, ttl, tx.clone()));
        // Arrival order is the line's order: the first leads, the rest wait.
        match dies.len() - 1 {
            0 => until(|| leader(&mut c, key).is_some()),
            n => until_waiting(&mut c, n as u64),
        }
    }
    let mut terms = Vec::new();
    for (i, die) in dies.iter().enumerate() {
        let (token, term) = rx.recv_timeout(Duration::from_secs(30)).expect("the next candidate is elected");
        assert_eq!(token, format!("c{i}"), "FIFO");
        let led = leader(&mut c, key).expect("a leader");
        assert_eq!((led.0.as_str(), led.1, led.2), (format!("addr-{token}").as_str(), term, term));
        assert!(terms.last().is_none_or(|&t| t < term), "terms grow: {terms:?} then {term}");
        terms.push(term);
        assert!(rx.try_recv().is_err(), "one leader at a time");
        if i + 1 < dies.len() {
            die.send(()).unwrap();
        }
    }
    let seen = seen.join().unwrap();
    let revs: Vec<i64> = seen.iter().map(rev_of).collect();
    let seen_terms: Vec<i64> = seen.iter().flatten().map(|l| l.1).collect();
    // Between two leaders the key is leaderless for up to a few ms (the
    // grant comes right after the expiry): an observer may see that, or not.
    let mut leaders = seen_terms.clone();
    leaders.dedup();
    assert_eq!(leaders, terms, "every term, in order: {seen:?}");
    let led_revs: Vec<i64> = revs.iter().copied().filter(|&r| r != 0).collect();
    assert!(led_revs.windows(2).all(|w| w[0] < w[1]), "revisions only grow: {revs:?}");
    assert_eq!(seen.last().cloned().flatten().map(|l| l.1), terms.last().copied(), "ends on the last leader");
    assert_eq!(info_field(&mut c, "elections"), 4);
    dies.last().unwrap().send(()).unwrap();
}

#[test]
fn an_elect_waits_behind_an_acquire_waiter_in_the_one_line() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&server, "k", "plain", 20_000, tx);
    until_waiting(&mut c, 1);
    let mut e = server.conn();
    let candidate = thread::spawn(move || {
        redis::cmd("LOCK.ELECT")
            .arg("k")
            .arg("cand")
            .arg(LEASE_MS)
            .arg("v")
            .arg("WAIT")
            .arg(20_000)
            .query::<Option<i64>>(&mut e)
    });
    until_waiting(&mut c, 2);
    assert_eq!(leader(&mut c, "k"), None, "a plain lock leads nothing");
    assert_eq!(release(&mut c, "k", "holder"), 1);
    let (token, reply, _) = rx.recv_timeout(Duration::from_secs(30)).expect("granted");
    assert_eq!((token.as_str(), reply), ("plain", Value::Int(1)));
    h.join().unwrap();
    assert_eq!(release(&mut c, "k", "plain"), 1);
    let term = candidate.join().unwrap().expect("elect").expect("elected");
    assert_eq!(leader(&mut c, "k").map(|l| (l.0, l.1, l.2)), Some(("v".into(), term, term)));
}

#[test]
fn proclaim_wakes_observers_keeps_the_term_and_the_lease_end() {
    let server = Server::start();
    let mut c = server.conn();
    let term = elect(&mut c, "p", "lead", LEASE_MS, "old").expect("elected");
    let before = expiry_ms(&mut c, "p");
    let (tx, rx) = mpsc::channel();
    for _ in 0..3 {
        observer(&server, "p", term, 30_000, tx.clone());
    }
    until_observing(&mut c, 3);
    // A renewal changes no revision: nobody is answered.
    let _: i64 = redis::cmd("LOCK.RENEW").arg("p").arg("lead").arg(LEASE_MS).query(&mut c).unwrap();
    assert_eq!(proclaim(&mut c, "p", "other", "x"), 0);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(info_field(&mut c, "observing"), 3, "nothing changed yet");
    let renewed = expiry_ms(&mut c, "p");
    assert!(renewed >= before);
    assert_eq!(proclaim(&mut c, "p", "lead", "new"), 1);
    for _ in 0..3 {
        let (value, t, rev, _) = answered(&rx).expect("a leader");
        assert_eq!((value.as_str(), t), ("new", term));
        assert!(rev > term, "a proclaim takes a new revision");
    }
    assert_eq!(expiry_ms(&mut c, "p"), renewed, "the absolute expiry is kept");
    assert_eq!(info_field(&mut c, "proclaims"), 1);
    assert_eq!(info_field(&mut c, "observing"), 0);
    // The new value is as canonical as the first one: it can proclaim again.
    let rev = rev_of(&leader(&mut c, "p"));
    assert_eq!(proclaim(&mut c, "p", "lead", "newer"), 1);
    assert!(rev_of(&leader(&mut c, "p")) > rev);
}

#[test]
fn an_observer_that_times_out_is_answered_the_unchanged_state() {
    let server = Server::start();
    let mut c = server.conn();
    let (tx, rx) = mpsc::channel();
    observer(&server, "t", 0, 200, tx.clone());
    assert_eq!(answered(&rx), None, "still no leader");
    let term = elect(&mut c, "t", "lead", LEASE_MS, "v").expect("elected");
    observer(&server, "t", term, 200, tx.clone());
    let led = answered(&rx).expect("a leader");
    assert_eq!((led.0.as_str(), led.1, led.2), ("v", term, term));
    assert_eq!(info_field(&mut c, "observer_timeouts"), 2);
    // Without WAIT, and with an AFTER that differs, the reply is at once.
    let now: Value = redis::cmd("LOCK.OBSERVE").arg("t").arg("AFTER").arg(term).query(&mut c).unwrap();
    assert_eq!(parse_led(now).map(|l| l.2), Some(term));
    let now: Value = redis::cmd("LOCK.OBSERVE").arg("t").arg("AFTER").arg(0).arg("WAIT").arg(0).query(&mut c).unwrap();
    assert_eq!(parse_led(now).map(|l| l.2), Some(term));
    assert_eq!(info_field(&mut c, "observes_started"), 2);
}

#[test]
fn observers_are_answered_on_release_expiry_delete_a_scripts_set_and_flushall() {
    let server = Server::start();
    let mut c = server.conn();
    without_active_expiry(&mut c);
    let (tx, rx) = mpsc::channel();
    let change = |c: &mut redis::Connection, what: &dyn Fn(&mut redis::Connection)| -> Led {
        let term = elect(c, "w", "lead", LEASE_MS, "v").expect("elected");
        observer(&server, "w", term, 30_000, tx.clone());
        until_observing(c, 1);
        what(c);
        answered(&rx)
    };
    assert_eq!(change(&mut c, &|c| assert_eq!(release(c, "w", "lead"), 1)), None);
    let expired = change(&mut c, &|c| {
        let _: i64 = redis::cmd("PEXPIRE").arg("w").arg(50).query(c).unwrap();
    });
    assert_eq!(expired, None, "the lease ended (found by the module's timer)");
    assert_eq!(
        change(&mut c, &|c| {
            let _: i64 = redis::cmd("DEL").arg("w").query(c).unwrap();
        }),
        None
    );
    assert_eq!(
        change(&mut c, &|c| {
            let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
        }),
        None
    );
    let by_script = change(&mut c, &|c| {
        let _: () = redis::cmd("EVAL").arg("redis.call('SET', KEYS[1], 'plain')").arg(1).arg("w").query(c).unwrap();
    });
    assert_eq!(by_script, None, "a plain value: leaderless");
    let _: i64 = redis::cmd("DEL").arg("w").query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "observer_wakes"), 5);
}

#[test]
fn the_reference_scripts_renew_and_release_an_elected_key() {
    let server = Server::start();
    let mut c = server.conn();
    let term = elect(&mut c, "s", "lead", 5_000, "v").expect("elected");
    let renewed: i64 =
        redis::cmd("EVAL").arg(scripts::RENEW).arg(1).arg("s").arg("lead").arg(LEASE_MS).query(&mut c).unwrap();
    assert_eq!(renewed, 1);
    assert!(leader(&mut c, "s").expect("leads").3 > 5_000, "the script's renewal counts");
    let not_owner: i64 = redis::cmd("EVAL").arg(scripts::RELEASE).arg(1).arg("s").arg("other").query(&mut c).unwrap();
    assert_eq!(not_owner, 0);
    let (tx, rx) = mpsc::channel();
    observer(&server, "s", term, 30_000, tx);
    until_observing(&mut c, 1);
    let released: i64 = redis::cmd("EVAL").arg(scripts::RELEASE).arg(1).arg("s").arg("lead").query(&mut c).unwrap();
    assert_eq!(released, 1);
    assert_eq!(answered(&rx), None, "the script's release wakes observers");
    // LOCK.RENEW and LOCK.RELEASE too.
    elect(&mut c, "s", "lead", 5_000, "v").expect("elected");
    let renewed: i64 = redis::cmd("LOCK.RENEW").arg("s").arg("lead").arg(LEASE_MS).query(&mut c).unwrap();
    assert_eq!((renewed, release(&mut c, "s", "lead")), (1, 1));
    assert_eq!(leader(&mut c, "s"), None);
}

#[test]
fn observers_through_paused_writes_and_client_unblock() {
    let server = Server::start();
    let mut c = server.conn();
    let term = elect(&mut c, "u", "lead", LEASE_MS, "v").expect("elected");
    // CLIENT UNBLOCK (TIMEOUT): answered with the state now.
    let mut o = server.conn();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut o).unwrap();
    let h = thread::spawn(move || {
        redis::cmd("LOCK.OBSERVE")
            .arg("u")
            .arg("AFTER")
            .arg(term)
            .arg("WAIT")
            .arg(0)
            .query::<Value>(&mut o)
            .map(parse_led)
    });
    until_observing(&mut c, 1);
    let unblocked: i64 = redis::cmd("CLIENT").arg("UNBLOCK").arg(id).query(&mut c).unwrap();
    assert_eq!(unblocked, 1);
    assert_eq!(h.join().unwrap().expect("a reply").map(|l| l.2), Some(term));
    // CLIENT UNBLOCK … ERROR: Redis's error, the observer gone.
    let mut o = server.conn();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut o).unwrap();
    let h = thread::spawn(move || {
        redis::cmd("LOCK.OBSERVE").arg("u").arg("AFTER").arg(term).arg("WAIT").arg(0).query::<Value>(&mut o)
    });
    until_observing(&mut c, 1);
    let _: i64 = redis::cmd("CLIENT").arg("UNBLOCK").arg(id).arg("ERROR").query(&mut c).unwrap();
    let err = h.join().unwrap().expect_err("unblocked with an error");
    assert!(err.to_string().contains("UNBLOCKED"), "{err}");
    assert_eq!(info_field(&mut c, "observing"), 0);
    // The lease ends inside a pause of writes: observers hear of it (they
    // only read), the next candidate is elected only after the pause.
    let (tx, rx) = mpsc::channel();
    observer(&server, "u", term, 30_000, tx);
    let mut e = server.conn();
    let cand = thread::spawn(move || {
        let term: Option<i64> = redis::cmd("LOCK.ELECT")
            .arg("u")
            .arg("next")
            .arg(LEASE_MS)
            .arg("n")
            .arg("WAIT")
            .arg(30_000)
            .query(&mut e)
            .unwrap();
        (term, Instant::now())
    });
    until_observing(&mut c, 1);
    until_waiting(&mut c, 1);
    let paused_at = Instant::now();
    let _: () = redis::pipe()
        .atomic()
        .cmd("LOCK.RENEW")
        .arg("u")
        .arg("lead")
        .arg(100)
        .ignore()
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(1_000)
        .arg("WRITE")
        .ignore()
        .query(&mut c)
        .unwrap();
    let first = answered(&rx);
    let (next_term, at) = cand.join().unwrap();
    let next_term = next_term.expect("elected after the pause");
    assert!(next_term > term);
    assert!(at.duration_since(paused_at) >= Duration::from_millis(900), "elected inside the pause");
    // The observer saw the lease end (in the pause) or, on a slow run, the
    // next leader: never the old one.
    assert!(first.as_ref().is_none_or(|l| l.1 == next_term), "{first:?}");
}

#[test]
fn leader_and_observe_on_a_replica() {
    let master = Server::start();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    let mut m = master.conn();
    let term = elect(&mut m, "r", "lead", LEASE_MS, "v1").expect("elected");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let on_replica = leader(&mut r, "r").expect("the replica knows the leader");
    assert_eq!((on_replica.0.as_str(), on_replica.1, on_replica.2), ("v1", term, term));
    let (tx, rx) = mpsc::channel();
    observer(&replica, "r", term, 30_000, tx);
    until_observing(&mut r, 1);
    assert_eq!(proclaim(&mut m, "r", "lead", "v2"), 1);
    let seen = answered(&rx).expect("a leader");
    assert_eq!((seen.0.as_str(), seen.1), ("v2", term));
    assert_eq!(Some(seen.2), leader(&mut m, "r").map(|l| l.2), "the replica's revision is the master's");
    // The replica learnt the fence floor: promoted, its terms are above.
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    let _: i64 = redis::cmd("DEL").arg("r").query(&mut r).unwrap();
    assert!(elect(&mut r, "r", "new", LEASE_MS, "v3").expect("elected") > seen.2);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    let term = elect(&mut c, "b", "lead", LEASE_MS, "v").expect("elected");
    let stored = get(&mut c, "b");
    let err = |c: &mut redis::Connection, args: &[&[u8]]| -> String {
        let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query::<Value>(c).expect_err("refused").to_string()
    };
    for (args, want) in [
        (&[&b"LOCK.ELECT"[..], b"b", b"t", b"100"][..], "wrong number"),
        (&[b"LOCK.ELECT", b"x", b"t", b"0", b"v"], "ttl-ms"),
        (&[b"LOCK.ELECT", b"x", b"t", b"100", b"\xff"], "UTF-8"),
        (&[b"LOCK.ELECT", b"x", b"\xfe", b"100", b"v"], "UTF-8"),
        (&[b"LOCK.ELECT", b"x", b"t", b"100", b"v", b"FENCE"], "syntax"),
        (&[b"LOCK.ELECT", b"x", b"t", b"100", b"v", b"WAIT"], "syntax"),
        (&[b"LOCK.ELECT", b"x", b"t", b"100", b"v", b"WAIT", b"-1"], "WAIT"),
        (&[b"LOCK.PROCLAIM", b"b", b"lead"], "wrong number"),
        (&[b"LOCK.PROCLAIM", b"b", b"lead", b"\xff"], "UTF-8"),
        (&[b"LOCK.PROCLAIM", b"b", b"lead", b"v", b"extra"], "wrong number"),
        (&[b"LOCK.LEADER"], "wrong number"),
        (&[b"LOCK.LEADER", b"b", b"extra"], "wrong number"),
        (&[b"LOCK.OBSERVE"], "wrong number"),
        (&[b"LOCK.OBSERVE", b"b", b"AFTER", b"x"], "AFTER"),
        (&[b"LOCK.OBSERVE", b"b", b"AFTER", b"-1"], "AFTER"),
        (&[b"LOCK.OBSERVE", b"b", b"AFTER"], "syntax"),
        (&[b"LOCK.OBSERVE", b"b", b"WAIT", b"x"], "WAIT"),
        (&[b"LOCK.OBSERVE", b"b", b"NOW"], "syntax"),
    ] {
        let e = err(&mut c, args);
        assert!(e.contains(want), "{:?}: {e}", args.iter().map(|a| String::from_utf8_lossy(a)).collect::<Vec<_>>());
    }
    assert_eq!(get(&mut c, "b"), stored, "nothing changed");
    assert_eq!(get(&mut c, "x"), None);
    let _: i64 = redis::cmd("RPUSH").arg("list").arg("a").query(&mut c).unwrap();
    for args in
        [&[&b"LOCK.LEADER"[..], b"list"][..], &[b"LOCK.OBSERVE", b"list"], &[b"LOCK.PROCLAIM", b"list", b"t", b"v"]]
    {
        let e = err(&mut c, args);
        assert!(e.contains("wrong kind of value"), "{e}");
    }
    assert_eq!(elect(&mut c, "list", "t", 100, "v"), None, "a taken key: no grant");
    assert_eq!(leader(&mut c, "b").map(|l| l.1), Some(term));
    // Inside MULTI an OBSERVE that would block answers at once.
    let (r,): (Value,) = redis::pipe()
        .atomic()
        .cmd("LOCK.OBSERVE")
        .arg("b")
        .arg("AFTER")
        .arg(term)
        .arg("WAIT")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(parse_led(r).map(|l| l.1), Some(term));
}

#[test]
fn observers_count_against_max_waiters() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(1).query(&mut c).unwrap();
    let (tx, rx) = mpsc::channel();
    observer(&server, "m", 0, 30_000, tx);
    until_observing(&mut c, 1);
    let e =
        redis::cmd("LOCK.OBSERVE").arg("m").arg("AFTER").arg(0).arg("WAIT").arg(0).query::<Value>(&mut c).unwrap_err();
    assert!(e.to_string().contains("max-waiters"), "{e}");
    let e = redis::cmd("LOCK.ACQUIRE").arg("k").arg("t").arg(LEASE_MS).query::<i64>(&mut c);
    assert_eq!(e.unwrap(), 1);
    let e =
        redis::cmd("LOCK.ACQUIRE").arg("k").arg("u").arg(100).arg("WAIT").arg(0).query::<Value>(&mut c).unwrap_err();
    assert!(e.to_string().contains("max-waiters"), "a waiter counts the observer: {e}");
    let term = elect(&mut c, "m", "lead", LEASE_MS, "v").expect("elected");
    assert_eq!(answered(&rx).map(|l| l.1), Some(term));
}

#[test]
fn a_master_that_becomes_a_replica_answers_its_observers_at_once() {
    let master = Server::start();
    let other = Server::start();
    let mut c = master.conn();
    let term = elect(&mut c, "f", "lead", LEASE_MS, "v").expect("elected");
    let (tx, rx) = mpsc::channel();
    observer(&master, "f", term, 0, tx);
    until_observing(&mut c, 1);
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(other.port()).query(&mut c).unwrap();
    let reply = rx.recv_timeout(Duration::from_secs(30)).expect("answered at once");
    let err = reply.expect_err("unblocked with an error").to_string();
    assert!(err.contains("UNBLOCKED"), "{err}");
    assert_eq!(info_field(&mut c, "observing"), 0);
    assert_eq!(info_field(&mut c, "observers_cancelled"), 1);
}

#[test]
fn an_observation_of_decades_is_woken_and_one_past_the_clock_is_refused() {
    let server = Server::start();
    let mut c = server.conn();
    let err = redis::cmd("LOCK.OBSERVE").arg("d").arg("AFTER").arg(0).arg("WAIT").arg(i64::MAX).query::<Value>(&mut c);
    assert!(err.unwrap_err().to_string().contains("timeout is out of range"));
    assert_eq!(info_field(&mut c, "observes_started"), 0, "nothing blocked");
    let (tx, rx) = mpsc::channel();
    // ~35 years: cut into timer pieces.
    observer(&server, "d", 0, 1 << 40, tx);
    until_observing(&mut c, 1);
    thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "still observing");
    let term = elect(&mut c, "d", "lead", LEASE_MS, "v").expect("elected");
    assert_eq!(answered(&rx).map(|l| l.1), Some(term));
}

#[test]
fn after_swapdb_an_observer_sees_what_its_database_now_holds() {
    let server = Server::start();
    let mut c = server.conn();
    let term = elect(&mut c, "sw", "lead", LEASE_MS, "db0").expect("elected");
    let (tx, rx) = mpsc::channel();
    observer(&server, "sw", term, 30_000, tx);
    until_observing(&mut c, 1);
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    assert_eq!(answered(&rx), None, "db 0 holds no leader now");
}

#[test]
fn a_leader_and_the_term_floor_survive_an_aof_restart() {
    let dir = std::env::temp_dir().join(format!("redis-lock-election-aof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut server = Server::builder().arg("appendonly", "yes").arg("appendfsync", "always").dir(&dir).start();
    let mut c = server.conn();
    // A fence mark far ahead of the clock, so that only the persisted mark
    // (not the clock) can put the next term above the proclaim's revision.
    let now: (String, String) = redis::cmd("TIME").query(&mut c).unwrap();
    let floor = now.0.parse::<u64>().unwrap() * 1_000_000 + 80_000_000_000;
    let _: () = redis::cmd("LOCK.FENCEFLOOR").arg(floor).query(&mut c).unwrap();
    let term = elect(&mut c, "a", "lead", LEASE_MS, "v1").expect("elected");
    assert!(term as u64 > floor);
    assert_eq!(proclaim(&mut c, "a", "lead", "v2"), 1);
    let before = leader(&mut c, "a").expect("a leader");
    server.restart();
    let mut c = server.conn();
    let after = leader(&mut c, "a").expect("the leader survived");
    assert_eq!((&after.0, after.1, after.2), (&before.0, before.1, before.2));
    assert_eq!(release(&mut c, "a", "lead"), 1);
    let next = elect(&mut c, "a", "next", LEASE_MS, "v3").expect("elected");
    assert!(next > before.2, "the next term {next} is above every revision before the restart ({})", before.2);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_flushall_reaches_observers_and_waiters_alike() {
    // Each part of the module used to subscribe to FLUSHDB itself, and a
    // module has one callback per server event: the last to subscribe (here
    // the waits, after the observers) got the flushes, the others none.
    let server = Server::start();
    let mut c = server.conn();
    let term = elect(&mut c, "e", "lead", LEASE_MS, "v").expect("elected");
    let (tx, rx) = mpsc::channel();
    observer(&server, "e", term, 120_000, tx);
    until_observing(&mut c, 1);
    acquire(&mut c, "held", "holder");
    let (wtx, wrx) = mpsc::channel();
    waiter(&server, "held", "next", 30_000, wtx);
    until_waiting(&mut c, 1);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(answered(&rx), None, "the flush ended the leadership");
    assert_eq!((info_field(&mut c, "observer_wakes"), info_field(&mut c, "observer_timeouts")), (1, 0), "woken by it");
    let (_, granted, _) = wrx.recv_timeout(Duration::from_secs(30)).expect("the waiter was answered");
    assert!(matches!(granted, Value::Int(_)), "granted on the flushed key: {granted:?}");
    assert!(get(&mut c, "held").is_some(), "the waiter holds it");
}
