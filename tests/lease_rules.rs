//! LOCKDELAY and MAXHOLD against real servers: a lease that ends holds its
//! key for the delay (against the module and the scripts' `SET NX` alike),
//! a release skips the delay, a waiter is served when the delay has passed,
//! MAXHOLD caps renewals (reply 2), the tombstone is refused by the
//! reference scripts as by the module, and the delay survives a replica's
//! promotion and an AOF restart.
//!
//! Timing: leases of about a second and delays of several seconds. Every
//! "still refused" assertion is made only when the server's clock, read
//! *after* the command, shows that the command ran before the delay's end;
//! a machine too slow for that says so and asserts what still holds (the
//! key is free after its expiry).

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_harness::Server;
use redis_lock_rules::scripts;
use redis_lock_rules::value;

mod support;
use support::lease::{cmd, field, fields_of, int, server_now, until_server_time};
use support::{expiry_ms, info_field, until_waiting, wait_for_link, LEASE_MS};

/// LOCK.INFO as (field, value) pairs.
fn info(c: &mut Connection, key: &str) -> Option<Vec<(String, Value)>> {
    fields_of(c, &["LOCK.INFO", key])
}

const DELAY_MS: i64 = 4_000;

fn get(c: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(c).expect("GET")
}

/// The stored value's fields (it must be in the module's canonical form).
fn stored(c: &mut Connection, key: &str) -> value::Stored {
    let v = get(c, key).unwrap_or_else(|| panic!("{key} is absent"));
    value::parse(&v).unwrap_or_else(|| panic!("{key} holds {}", String::from_utf8_lossy(&v)))
}

/// Waits until `key` is gone (its expiry passed), then a minute at most.
fn until_gone(c: &mut Connection, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while redis::cmd("EXISTS").arg(key).query::<i64>(c).expect("EXISTS") == 1 {
        assert!(Instant::now() < deadline, "{key} did not expire");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Checks that the key, whose lease has ended and whose delay ends at
/// `pxat`, refuses everyone: returns false (asserting nothing) when the
/// server's clock shows the checks may have run after `pxat`.
fn refused_in_delay(c: &mut Connection, key: &str, owner: &str, pxat: i64) -> bool {
    let set_nx: Value = redis::cmd("SET").arg(key).arg("intruder").arg("NX").arg("PX").arg(60_000).query(c).unwrap();
    let acquire = int(c, &["LOCK.ACQUIRE", key, "other", "60000"]);
    let renew = int(c, &["LOCK.RENEW", key, owner, "60000"]);
    let release = int(c, &["LOCK.RELEASE", key, owner]);
    let takeover = int(c, &["LOCK.TAKEOVER", key, "other", "run", "60000"]);
    let value = get(c, key);
    let expiry = expiry_ms(c, key);
    if server_now(c) >= pxat {
        eprintln!("this machine ran past the delay's end before the checks ended: not judged");
        return false;
    }
    assert_eq!(set_nx, Value::Nil, "SET NX took a key in its lock-delay");
    assert_eq!((acquire, renew, release, takeover), (0, 0, 0, 0), "a command took effect during the delay");
    assert_eq!(value, Some(value::tombstone(pxat)), "the key settled to its tombstone");
    assert_eq!(expiry, pxat, "settling kept the key's expiry");
    true
}

#[test]
fn a_lock_delay_holds_the_key_after_the_lease_ends() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "1000", "LOCKDELAY", &DELAY_MS.to_string()]), 1);
    let s = stored(&mut c, "k");
    assert_eq!(s.owner, "t");
    let d = s.delay.expect("lockDelay and leaseEnd stored");
    assert_eq!(d.lock_delay, DELAY_MS);
    let pxat = expiry_ms(&mut c, "k");
    assert_eq!(pxat, d.lease_end + DELAY_MS, "the key expires a delay after the lease");
    // During the lease, the holder renews and nobody else gets in.
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "other", "1000"]), 0);
    until_server_time(&mut c, d.lease_end);
    if refused_in_delay(&mut c, "k", "t", pxat) {
        let f = info(&mut c, "k").expect("the tombstone is a key");
        assert_eq!(field(&f, "owner"), Value::Nil);
        assert_eq!(field(&f, "delayed-until"), Value::Int(pxat));
        assert_eq!(field(&f, "lock-delay-ms"), Value::Nil);
        assert!(info_field(&mut c, "delayed_acquires") >= 2, "the acquire and the takeover were counted");
        assert_eq!(info_field(&mut c, "delays_started"), 1);
    }
    until_gone(&mut c, "k");
    assert!(server_now(&mut c) >= pxat, "the key went before its delay's end");
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "other", "60000"]), 1);
}

#[test]
fn a_release_by_the_owner_skips_the_delay() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000", "LOCKDELAY", "60000", "MAXHOLD", "120000"]), 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "k", "other"]), 0);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "k", "t"]), 1);
    assert_eq!(get(&mut c, "k"), None);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "next", "60000"]), 1);
    // The same for a takeover's lease.
    assert_eq!(int(&mut c, &["LOCK.TAKEOVER", "j", "t", "run", "60000", "LOCKDELAY", "60000"]), 1);
    assert_eq!(stored(&mut c, "j").run_id.as_deref(), Some("run"));
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "j", "t"]), 1);
    let set_nx: Value = redis::cmd("SET").arg("j").arg("x").arg("NX").query(&mut c).unwrap();
    assert_eq!(set_nx, Value::Okay);
}

#[test]
fn a_waiter_is_granted_once_the_delay_has_passed_and_keeps_its_own_terms() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "500", "LOCKDELAY", "3000"]), 1);
    let holder_pxat = expiry_ms(&mut c, "k");
    let (tx, rx) = mpsc::channel();
    let waiter =
        support::waiter_on(server.conn(), "k", "w", &["WAIT", "60000", "LOCKDELAY", "2000", "MAXHOLD", "90000"], tx);
    until_waiting(&mut c, 1);
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(60)).expect("the waiter was answered");
    waiter.join().unwrap();
    assert_eq!(reply, Value::Int(1));
    let s = stored(&mut c, "k");
    assert_eq!(s.owner, "w");
    let d = s.delay.expect("the waiter's LOCKDELAY is stored");
    assert_eq!(d.lock_delay, 2_000);
    let granted_at = d.lease_end - LEASE_MS;
    assert!(granted_at > holder_pxat, "granted at {granted_at}, inside the delay ending at {holder_pxat}");
    assert_eq!(s.hold_until, Some(granted_at + 90_000));
    assert_eq!(expiry_ms(&mut c, "k"), d.lease_end + 2_000);
}

#[test]
fn max_hold_caps_renewals_and_says_so() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "10000", "MAXHOLD", "20000"]), 1);
    let hold = stored(&mut c, "k").hold_until.expect("holdUntil");
    assert_eq!(expiry_ms(&mut c, "k"), hold - 10_000, "granted at hold - MAXHOLD for ttl-ms");
    // A short renewal fits (unless this machine took 19 s to get here).
    let short = int(&mut c, &["LOCK.RENEW", "k", "t", "1000"]);
    assert!(short == 1 || (short == 2 && server_now(&mut c) + 1000 > hold), "renew 1000: {short}");
    assert!(expiry_ms(&mut c, "k") <= hold);
    // A long one is cut at the hold limit.
    assert_eq!(int(&mut c, &["LOCK.RENEW", "k", "t", "60000"]), 2);
    assert_eq!(expiry_ms(&mut c, "k"), hold);
    assert_eq!(int(&mut c, &["LOCK.RENEW", "k", "other", "60000"]), 0);
    assert_eq!(info_field(&mut c, "capped_renewals"), 1);
    // With a delay: the lease end stops at the limit, the key a delay later.
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "d", "t", "10000", "MAXHOLD", "20000", "LOCKDELAY", "3000"]), 1);
    let s = stored(&mut c, "d");
    let hold = s.hold_until.unwrap();
    assert_eq!(int(&mut c, &["LOCK.RENEW", "d", "t", "60000"]), 2);
    let s = stored(&mut c, "d");
    assert_eq!(s.delay.map(|d| (d.lock_delay, d.lease_end)), Some((3_000, hold)));
    assert_eq!(expiry_ms(&mut c, "d"), hold + 3_000);
    let f = info(&mut c, "d").unwrap();
    assert_eq!(field(&f, "hold-until"), Value::Int(hold));
    assert_eq!(field(&f, "lease-end"), Value::Int(hold));
    assert_eq!(field(&f, "lock-delay-ms"), Value::Int(3_000));
    assert_eq!(field(&f, "delayed-until"), Value::Nil);
}

#[test]
fn a_watchdog_renewing_forever_stops_at_the_hold_limit() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "1000", "MAXHOLD", "2500"]), 1);
    let hold = stored(&mut c, "k").hold_until.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut replies = Vec::new();
    loop {
        // A TTL a loaded machine's pause between two renewals stays within
        // (the lease must not end before the hold limit does).
        let r = int(&mut c, &["LOCK.RENEW", "k", "t", "3000"]);
        let expiry = expiry_ms(&mut c, "k");
        assert!(expiry <= hold, "PTTL past the hold limit: {expiry} > {hold}");
        replies.push(r);
        if r == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "renewals went on past the hold limit: {replies:?}");
        thread::sleep(Duration::from_millis(100));
    }
    assert!(server_now(&mut c) >= hold, "refused before the hold limit: {replies:?}");
    // 1s, then (once within a TTL of the limit) 2s, then the 0: never a 1 after a 2.
    let first_two = replies.iter().position(|&r| r == 2).unwrap_or(replies.len() - 1);
    assert!(replies[..first_two].iter().all(|&r| r == 1), "{replies:?}");
    assert!(replies[first_two..replies.len() - 1].iter().all(|&r| r == 2), "{replies:?}");
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "next", "60000"]), 1, "no delay asked: free at once");
}

/// The reference scripts on a tombstone decide as the module does: nobody
/// owns it, nobody renews, releases or takes it over.
#[test]
fn the_scripts_refuse_a_tombstone_as_the_module_does() {
    let server = Server::start();
    let mut c = server.conn();
    let mut load = |s: &str| -> String { redis::cmd("SCRIPT").arg("LOAD").arg(s).query(&mut c).unwrap() };
    let (renew, release, takeover) = (load(scripts::RENEW), load(scripts::RELEASE), load(scripts::TAKEOVER));
    let until = server_now(&mut c) + 600_000;
    let tomb = value::tombstone(until);
    let structured = |token: &str, run: &str| format!(r#"{{"owner":"{token}","runId":"{run}"}}"#);
    let cases: Vec<(&str, Vec<String>, String, Vec<String>)> = vec![
        (
            "renew",
            vec!["t".into(), "60000".into()],
            renew.clone(),
            vec!["LOCK.RENEW".into(), "t".into(), "60000".into()],
        ),
        (
            "renew null",
            vec!["null".into(), "60000".into()],
            renew,
            vec!["LOCK.RENEW".into(), "null".into(), "60000".into()],
        ),
        ("release", vec!["t".into()], release.clone(), vec!["LOCK.RELEASE".into(), "t".into()]),
        (
            "release tombstone",
            vec![String::from_utf8(tomb.clone()).unwrap()],
            release,
            vec!["LOCK.RELEASE".into(), String::from_utf8(tomb.clone()).unwrap()],
        ),
        (
            "takeover",
            vec![structured("t", "run"), "60000".into()],
            takeover,
            vec!["LOCK.TAKEOVER".into(), "t".into(), "run".into(), "60000".into()],
        ),
    ];
    for (name, script_args, sha, module) in cases {
        for key in ["s", "m"] {
            let _: () = redis::cmd("SET").arg(key).arg(&tomb).arg("PXAT").arg(until).query(&mut c).unwrap();
        }
        let by_script: i64 = redis::cmd("EVALSHA").arg(&sha).arg(1).arg("s").arg(&script_args).query(&mut c).unwrap();
        let by_module: i64 = redis::cmd(&module[0]).arg("m").arg(&module[1..]).query(&mut c).unwrap();
        assert_eq!((by_script, by_module), (0, 0), "{name}");
        for key in ["s", "m"] {
            assert_eq!(get(&mut c, key), Some(tomb.clone()), "{name}: {key} unchanged");
            assert_eq!(expiry_ms(&mut c, key), until, "{name}: {key}'s expiry unchanged");
        }
    }
    let set_nx: Value = redis::cmd("SET").arg("m").arg("x").arg("NX").query(&mut c).unwrap();
    assert_eq!(set_nx, Value::Nil);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "m", "t", "1000"]), 0);
}

/// A tombstone the module wrote, and the scripts' view of an ended lease
/// once a module command settled it.
#[test]
fn the_scripts_refuse_the_tombstone_of_an_ended_lease() {
    let server = Server::start();
    let mut c = server.conn();
    let renew: String = redis::cmd("SCRIPT").arg("LOAD").arg(scripts::RENEW).query(&mut c).unwrap();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "300", "LOCKDELAY", &DELAY_MS.to_string()]), 1);
    let pxat = expiry_ms(&mut c, "k");
    until_server_time(&mut c, pxat - DELAY_MS);
    // Settled by a module command (here LOCK.INFO does not: it only reads).
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "other", "1000"]), 0);
    let by_script: i64 = redis::cmd("EVALSHA").arg(&renew).arg(1).arg("k").arg("t").arg(60_000).query(&mut c).unwrap();
    let value = get(&mut c, "k");
    let expiry = expiry_ms(&mut c, "k");
    if server_now(&mut c) < pxat {
        assert_eq!(by_script, 0, "the renew script renewed an ended lease");
        assert_eq!(value, Some(value::tombstone(pxat)));
        assert_eq!(expiry, pxat);
    }
}

#[test]
fn guard_refuses_an_ended_lease_and_its_tombstone() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000", "LOCKDELAY", "1000", "MAXHOLD", "60000"]), 1);
    let ok: Value = cmd(&mut c, &["LOCK.GUARD", "k", "t", "SET", "data", "1"]).unwrap();
    assert_eq!(ok, Value::Okay, "a live lease with terms is held");
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "e", "t", "300", "LOCKDELAY", &DELAY_MS.to_string()]), 1);
    let pxat = expiry_ms(&mut c, "e");
    until_server_time(&mut c, pxat - DELAY_MS);
    let refused = cmd(&mut c, &["LOCK.GUARD", "e", "t", "SET", "data", "2"]);
    let data = get(&mut c, "data");
    if server_now(&mut c) < pxat {
        let err = refused.expect_err("an ended lease is not held");
        assert_eq!(err.code(), Some("NOTHELD"), "{err}");
        assert_eq!(data.as_deref(), Some(&b"1"[..]), "the guarded command did not run");
        assert_eq!(get(&mut c, "e"), Some(value::tombstone(pxat)), "LOCK.GUARD settled the lease");
    }
}

#[test]
fn a_same_run_takeover_keeps_terms_but_a_tombstone_refuses_even_its_run() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.TAKEOVER", "k", "t", "run", "300", "LOCKDELAY", &DELAY_MS.to_string()]), 1);
    let pxat = expiry_ms(&mut c, "k");
    // While the lease lives, the same run takes it back with new terms.
    let again = int(&mut c, &["LOCK.TAKEOVER", "k", "t2", "run", "300", "LOCKDELAY", &DELAY_MS.to_string()]);
    let s = stored(&mut c, "k");
    let pxat = if again == 1 {
        assert_eq!((s.owner.as_str(), s.run_id.as_deref()), ("t2", Some("run")));
        expiry_ms(&mut c, "k")
    } else {
        pxat
    };
    until_server_time(&mut c, pxat - DELAY_MS);
    let refused = int(&mut c, &["LOCK.TAKEOVER", "k", "t3", "run", "60000"]);
    if server_now(&mut c) < pxat {
        assert_eq!(refused, 0, "the same run took over a key in its lock-delay");
    }
}

#[test]
fn the_delay_survives_a_replica_promotion() {
    let master = Server::start();
    let mut m = master.conn();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    assert_eq!(int(&mut m, &["LOCK.ACQUIRE", "k", "t", "500", "LOCKDELAY", &DELAY_MS.to_string()]), 1);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let pxat = expiry_ms(&mut r, "k");
    assert_eq!(pxat, expiry_ms(&mut m, "k"), "the replica has the master's absolute expiry");
    until_server_time(&mut r, pxat - DELAY_MS);
    // A replica never settles: LOCK.INFO shows the tombstone to come.
    let f = info(&mut r, "k").expect("the key is on the replica");
    let before_promotion = server_now(&mut r);
    if before_promotion < pxat {
        assert_eq!(field(&f, "owner"), Value::Nil);
        assert_eq!(field(&f, "delayed-until"), Value::Int(pxat));
    }
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut r).unwrap();
    refused_in_delay(&mut r, "k", "t", pxat);
    until_gone(&mut r, "k");
    assert_eq!(int(&mut r, &["LOCK.ACQUIRE", "k", "other", "60000"]), 1);
}

#[test]
fn the_delay_survives_an_aof_restart() {
    let dir = std::env::temp_dir().join(format!("redis-lock-lease-aof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let builder = || Server::builder().dir(&dir).arg("appendonly", "yes").arg("appendfsync", "always");
    let server = builder().start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "500", "LOCKDELAY", "6000"]), 1);
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "live", "t", "600000", "LOCKDELAY", "6000", "MAXHOLD", "900000"]), 1);
    let (pxat, live) = (expiry_ms(&mut c, "k"), get(&mut c, "live"));
    // Killed (no shutdown save) and started again on the same directory.
    drop(server);
    let server = builder().start();
    let mut c = server.conn();
    assert_eq!(get(&mut c, "live"), live, "the lease's fields came back from the AOF");
    assert_eq!(int(&mut c, &["LOCK.RENEW", "live", "t", "600000"]), 1);
    let now = server_now(&mut c);
    if now < pxat {
        assert_eq!(expiry_ms(&mut c, "k"), pxat);
        until_server_time(&mut c, pxat - 6_000);
        refused_in_delay(&mut c, "k", "t", pxat);
    }
    drop(server);
    // The tombstone too, if it was written before the restart.
    let server = builder().start();
    let mut c = server.conn();
    if server_now(&mut c) < pxat {
        let v = get(&mut c, "k");
        assert!(v == Some(value::tombstone(pxat)) || v.is_some_and(|v| value::parse(&v).is_some()));
        assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "other", "60000"]), 0);
    }
    until_gone(&mut c, "k");
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "other", "60000"]), 1);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_terms_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "held", "t", "600000"]), 1);
    let held = (get(&mut c, "held"), expiry_ms(&mut c, "held"));
    let cases: &[(&[&str], &str)] = &[
        (&["LOCKDELAY", "-1"], "LOCKDELAY must be an integer from 0 to 60000"),
        (&["LOCKDELAY", "60001"], "LOCKDELAY must be an integer from 0 to 60000"),
        (&["LOCKDELAY", "5s"], "LOCKDELAY must be an integer from 0 to 60000"),
        (&["LOCKDELAY"], "syntax error"),
        (&["MAXHOLD", "0"], "MAXHOLD must be a positive integer"),
        (&["MAXHOLD", "x"], "MAXHOLD must be a positive integer"),
        (&["MAXHOLD", "59999"], "MAXHOLD must be at least ttl-ms"),
        (&["MAXHOLD", "9223372036854775807"], "MAXHOLD is too large"),
        (&["MAXHOLD"], "syntax error"),
    ];
    for (key, existing) in [("absent", (None, -2)), ("held", held.clone())] {
        for &(options, error) in cases {
            for base in [&["LOCK.ACQUIRE", key, "u", "60000"][..], &["LOCK.TAKEOVER", key, "u", "run", "60000"]] {
                let mut args = base.to_vec();
                args.extend_from_slice(options);
                let err = cmd(&mut c, &args).expect_err("refused");
                assert!(err.to_string().contains(error), "{args:?}: {err}");
                assert_eq!((get(&mut c, key), expiry_ms(&mut c, key)), existing, "{args:?} changed the key");
            }
        }
    }
    // Terms on a command that does not take them.
    let err = cmd(&mut c, &["LOCK.RENEW", "held", "t", "60000", "MAXHOLD", "60000"]).expect_err("refused");
    assert!(err.to_string().contains("syntax error"), "{err}");
    assert_eq!(get(&mut c, "s"), None);
    assert_eq!((get(&mut c, "held"), expiry_ms(&mut c, "held")), held);
    // A structured value needs a UTF-8 token; without terms any bytes do.
    let mut not_utf8 = redis::cmd("LOCK.ACQUIRE");
    not_utf8.arg("b").arg(b"\xff").arg(60_000).arg("MAXHOLD").arg(60_000);
    let err = not_utf8.query::<Value>(&mut c).expect_err("refused");
    assert!(err.to_string().contains("UTF-8"), "{err}");
    assert_eq!(get(&mut c, "b"), None);
    let ok: i64 =
        redis::cmd("LOCK.ACQUIRE").arg("b").arg(b"\xff").arg(60_000).arg("LOCKDELAY").arg(0).query(&mut c).unwrap();
    assert_eq!(ok, 1);
    assert_eq!(get(&mut c, "b"), Some(b"\xff".to_vec()), "LOCKDELAY 0 stores the bare token");
}

#[test]
fn a_lock_without_terms_is_stored_and_replicated_as_before() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["LOCK.ACQUIRE", "k", "t", "60000"]), 1);
    assert_eq!(get(&mut c, "k"), Some(b"t".to_vec()));
    assert_eq!(int(&mut c, &["LOCK.RENEW", "k", "t", "60000"]), 1);
    let f = info(&mut c, "k").unwrap();
    for name in ["lock-delay-ms", "hold-until", "lease-end", "delayed-until"] {
        assert_eq!(field(&f, name), Value::Nil, "{name}");
    }
    assert_eq!(info_field(&mut c, "capped_renewals"), 0);
}

/// LOCK.ELECT takes the same terms: the lease fields follow the election's;
/// a leader whose lease ended leads no more (LOCK.LEADER nil, observers
/// woken at the lease's end) while the key stays refused for its delay.
#[test]
fn an_election_with_a_lock_delay_is_leaderless_at_its_lease_end_and_refused_until_the_delay_ends() {
    let server = Server::start();
    let mut c = server.conn();
    let term =
        int(&mut c, &["LOCK.ELECT", "e", "t", "800", "v1", "LOCKDELAY", &DELAY_MS.to_string(), "MAXHOLD", "600000"]);
    assert!(term > 0, "elected: {term}");
    let s = stored(&mut c, "e");
    assert_eq!(s.election.as_ref().map(|e| (e.term, e.value.as_str())), Some((term as u64, "v1")));
    assert_eq!(s.delay.map(|d| d.lock_delay), Some(DELAY_MS));
    assert!(s.hold_until.is_some());
    let pxat = expiry_ms(&mut c, "e");
    let lease_end = s.delay.unwrap().lease_end;
    // An observer of this term is answered when the lease ends, not the key.
    let mut o = server.conn();
    let observer = thread::spawn(move || {
        let reply: Value =
            redis::cmd("LOCK.OBSERVE").arg("e").arg("AFTER").arg(term).arg("WAIT").arg(60_000).query(&mut o).unwrap();
        (reply, server_now(&mut o))
    });
    let (reply, answered_at) = observer.join().unwrap();
    assert_eq!(reply, Value::Nil, "the observer saw the leader go");
    assert!(answered_at > lease_end, "answered at {answered_at}, before the lease's end {lease_end}");
    // Woken by the lease's end, not by the key's expiry (the delay, 4 s, is
    // the margin this machine has to answer).
    assert!(answered_at < pxat, "answered at {answered_at}, at the key's expiry {pxat}, not the lease's end");
    {
        let leader = cmd(&mut c, &["LOCK.LEADER", "e"]).unwrap();
        let other = cmd(&mut c, &["LOCK.ELECT", "e", "u", "60000", "v2"]).unwrap();
        if server_now(&mut c) < pxat {
            assert_eq!(leader, Value::Nil);
            assert_eq!(other, Value::Nil, "a candidate was elected during the delay");
            assert_eq!(get(&mut c, "e"), Some(value::tombstone(pxat)));
        }
    }
    until_gone(&mut c, "e");
    assert!(int(&mut c, &["LOCK.ELECT", "e", "u", "60000", "v2"]) > term);
}

#[test]
fn an_elected_leader_renews_up_to_its_hold_limit_and_a_waiting_candidate_keeps_its_terms() {
    let server = Server::start();
    let mut c = server.conn();
    let term = int(&mut c, &["LOCK.ELECT", "e", "t", "10000", "v1", "MAXHOLD", "20000"]);
    let hold = stored(&mut c, "e").hold_until.unwrap();
    assert_eq!(int(&mut c, &["LOCK.RENEW", "e", "t", "60000"]), 2);
    assert_eq!(expiry_ms(&mut c, "e"), hold);
    assert_eq!(int(&mut c, &["LOCK.PROCLAIM", "e", "t", "v2"]), 1);
    let s = stored(&mut c, "e");
    assert_eq!((s.hold_until, s.election.map(|e| e.value)), (Some(hold), Some("v2".into())), "proclaim kept the limit");
    // A candidate waiting behind the leader is elected with its own terms.
    let mut w = server.conn();
    let candidate = thread::spawn(move || {
        let r: i64 = redis::cmd("LOCK.ELECT")
            .arg("e")
            .arg("u")
            .arg(LEASE_MS)
            .arg("v3")
            .arg("WAIT")
            .arg(60_000)
            .arg("LOCKDELAY")
            .arg(1_500)
            .query(&mut w)
            .unwrap();
        r
    });
    until_waiting(&mut c, 1);
    assert_eq!(int(&mut c, &["LOCK.RELEASE", "e", "t"]), 1);
    let next = candidate.join().unwrap();
    assert!(next > term);
    let s = stored(&mut c, "e");
    assert_eq!(s.owner, "u");
    assert_eq!(s.election.map(|e| (e.term, e.value)), Some((next as u64, "v3".into())));
    let d = s.delay.expect("the candidate's LOCKDELAY");
    assert_eq!((d.lock_delay, expiry_ms(&mut c, "e")), (1_500, d.lease_end + 1_500));
}
