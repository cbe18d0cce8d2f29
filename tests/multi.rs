//! LOCK.ACQUIREALL: several exclusive locks for one token and one lease,
//! all or none; with WAIT, one waiter in every key's line at once, granted
//! when it heads them all; a randomized run of multi-key and single-key
//! clients over 8 keys (no deadlock, no partial hold, no exclusion
//! violation, fences increasing per key); CROSSSLOT in a cluster.

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::Value;
use redis_lock_harness::{Cluster, Server};
use support::{acquire, get, info_field, release, until_waiting, wait_for_link, LEASE_MS};

/// `LOCK.ACQUIREALL n keys… token ttl options…`; an error reply as `Err(text)`.
fn all(c: &mut redis::Connection, keys: &[&str], token: &str, ttl: i64, opts: &[&str]) -> Result<Value, String> {
    redis::cmd("LOCK.ACQUIREALL").arg(keys.len()).arg(keys).arg(token).arg(ttl).arg(opts).query::<Value>(c).map_err(
        |e| match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            _ => e.to_string(),
        },
    )
}

/// The fences of a fenced grant's reply.
fn fences(v: &Value) -> Vec<i64> {
    let Value::Array(items) = v else { panic!("expected an array of fences, got {v:?}") };
    items.iter().map(|i| if let Value::Int(n) = i { *n } else { panic!("not a fence: {i:?}") }).collect()
}

/// LOCK.ACQUIREALL on a new connection from a thread; its reply (an error
/// as `SimpleString`) arrives with its token.
fn waiter_all(server: &Server, keys: &[&str], token: &str, opts: &[&str], tx: mpsc::Sender<(String, Value)>) {
    waiter_all_on(server.conn(), keys, token, opts, tx);
}

fn waiter_all_on(
    mut c: redis::Connection,
    keys: &[&str],
    token: &str,
    opts: &[&str],
    tx: mpsc::Sender<(String, Value)>,
) {
    let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let (token, opts) = (token.to_string(), opts.iter().map(|o| o.to_string()).collect::<Vec<_>>());
    thread::spawn(move || {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
        let reply = all(&mut c, &keys, &token, LEASE_MS, &opts).unwrap_or_else(Value::SimpleString);
        let _ = tx.send((token, reply));
    });
}

/// How many wait on `key` (free or held), as LOCK.TOP lists it.
fn waiters_on(c: &mut redis::Connection, key: &str) -> i64 {
    let top: Vec<Vec<Value>> = redis::cmd("LOCK.TOP").arg("COUNT").arg(1000).query(c).expect("LOCK.TOP");
    let field = |entry: &[Value], name: &str| {
        let at = entry.iter().position(|v| matches!(v, Value::BulkString(b) if b == name.as_bytes()))?;
        entry.get(at + 1).cloned()
    };
    top.iter().find(|e| field(e, "key") == Some(Value::BulkString(key.as_bytes().to_vec()))).map_or(0, |e| match field(
        e, "waiters",
    ) {
        Some(Value::Int(n)) => n,
        other => panic!("no waiters: {other:?}"),
    })
}

fn recv(rx: &mpsc::Receiver<(String, Value)>) -> (String, Value) {
    rx.recv_timeout(Duration::from_secs(60)).expect("a reply")
}

#[test]
fn all_or_none_stored_as_lock_acquire_stores_each_key() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "b", "other"), 1);
    // One key held: nothing is written.
    assert_eq!(all(&mut c, &["a", "b", "c"], "t", 60_000, &[]), Ok(Value::Int(0)));
    assert_eq!(all(&mut c, &["a", "b", "c"], "t", 60_000, &["FENCE"]), Ok(Value::Nil));
    assert_eq!((get(&mut c, "a"), get(&mut c, "c")), (None, None));
    assert_eq!(info_field(&mut c, "refusals"), 2);
    assert_eq!(release(&mut c, "b", "other"), 1);
    assert_eq!(all(&mut c, &["a", "b", "c"], "t", 60_000, &[]), Ok(Value::Int(1)));
    // One lease: the same absolute expiry on every key.
    let at: Vec<i64> = ["a", "b", "c"].iter().map(|k| support::expiry_ms(&mut c, k)).collect();
    assert!(at[0] > 0 && at.iter().all(|&x| x == at[0]), "{at:?}");
    for k in ["a", "b", "c"] {
        assert_eq!(get(&mut c, k).as_deref(), Some("t"));
    }
    // Renewal and release stay per key.
    let r: i64 = redis::cmd("LOCK.RENEW").arg("b").arg("t").arg(90_000).query(&mut c).unwrap();
    assert_eq!(r, 1);
    assert_eq!(release(&mut c, "a", "t"), 1);
    assert_eq!(all(&mut c, &["a", "c"], "u", 60_000, &[]), Ok(Value::Int(0)), "c is still t's");
    assert_eq!(get(&mut c, "a"), None);
    assert_eq!(info_field(&mut c, "grants"), 4, "a grant per key, plus b's first");
}

#[test]
fn fences_one_per_key_increasing_from_grant_to_grant() {
    let server = Server::start();
    let mut c = server.conn();
    let first = fences(&all(&mut c, &["x", "y"], "t", 60_000, &["FENCE"]).unwrap());
    assert_eq!(first.len(), 2);
    assert!(first[0] < first[1]);
    for k in ["x", "y"] {
        assert_eq!(release(&mut c, k, "t"), 1);
    }
    let single: i64 = redis::cmd("LOCK.ACQUIRE").arg("y").arg("s").arg(60_000).arg("FENCE").query(&mut c).unwrap();
    assert!(single > first[1]);
    assert_eq!(release(&mut c, "y", "s"), 1);
    let second = fences(&all(&mut c, &["y", "x", "z"], "u", 60_000, &["FENCE"]).unwrap());
    assert!(second[0] > single && second[1] > first[0] && second.windows(2).all(|w| w[0] < w[1]), "{second:?}");
}

#[test]
fn errors_change_nothing_and_name_the_problem() {
    let server = Server::start();
    let mut c = server.conn();
    let many: Vec<String> = (0..65).map(|i| format!("k{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["0", "t", "100"], "numkeys must be a positive integer"),
        (vec!["x", "a", "t", "100"], "numkeys must be a positive integer"),
        (vec!["-1", "a", "t", "100"], "numkeys must be a positive integer"),
        ([&["65"][..], &many, &["t", "100"]].concat(), "at most 64 keys"),
        (vec!["3", "a", "b", "t", "100"], "wrong number of arguments"),
        (vec!["2", "a", "a", "t", "100"], "a key is named twice"),
        (vec!["2", "a", "", "t", "100"], "key and token are required"),
        (vec!["2", "a", "b", "", "100"], "key and token are required"),
        (vec!["2", "a", "b", "t", "0"], "ttl-ms must be a positive integer"),
        (vec!["2", "a", "b", "t", "100", "WAIT"], "syntax error"),
        (vec!["2", "a", "b", "t", "100", "WAIT", "-1"], "WAIT timeout-ms"),
        (vec!["2", "a", "b", "t", "100", "NOPE"], "syntax error"),
        (vec!["2", "a", "b", "t", "100", "MAXHOLD", "50"], "MAXHOLD must be at least ttl-ms"),
    ];
    assert_eq!(acquire(&mut c, "b", "holder"), 1);
    for (args, expected) in cases {
        let err = redis::cmd("LOCK.ACQUIREALL").arg(&args).query::<Value>(&mut c).unwrap_err().to_string();
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, 1, "only b");
    assert_eq!(info_field(&mut c, "waiting"), 0);
    // 64 keys is the limit, not past it.
    assert_eq!(all(&mut c, &many[..64], "t", 60_000, &[]), Ok(Value::Int(1)));
}

#[test]
fn a_waiter_is_granted_when_it_heads_every_line_and_keeps_its_place_meanwhile() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "b", "hb"), 1);
    let (tx, rx) = mpsc::channel();
    waiter_all(&server, &["a", "b"], "w", &["WAIT", "0", "FENCE"], tx.clone());
    until_waiting(&mut c, 1);
    // a is free, but kept for w: a newcomer is refused, a waiter queues behind.
    assert_eq!(acquire(&mut c, "a", "newcomer"), 0);
    assert_eq!(all(&mut c, &["a"], "newcomer", 60_000, &[]), Ok(Value::Int(0)));
    assert_eq!(get(&mut c, "a"), None, "w holds nothing while it waits");
    let (t1, r1) = mpsc::channel();
    support::waiter(&server, "a", "s", 0, t1);
    until_waiting(&mut c, 2);
    assert_eq!((waiters_on(&mut c, "a"), waiters_on(&mut c, "b")), (2, 1));
    assert_eq!(release(&mut c, "b", "hb"), 1);
    let (token, reply) = recv(&rx);
    assert_eq!(token, "w");
    assert_eq!(fences(&reply).len(), 2);
    assert_eq!((get(&mut c, "a").as_deref(), get(&mut c, "b").as_deref()), (Some("w"), Some("w")));
    // The single-key waiter behind it is served when w lets a go.
    assert_eq!(info_field(&mut c, "waiting"), 1);
    assert_eq!(release(&mut c, "a", "w"), 1);
    let (token, reply, _) = r1.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!((token.as_str(), reply), ("s", Value::Int(1)));
    assert_eq!(info_field(&mut c, "waits_granted"), 2);
}

#[test]
fn a_single_key_waiter_ahead_is_served_first_and_the_multi_key_waiter_next() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "b", "hb"), 1);
    let (tx, rx) = mpsc::channel();
    let (t1, r1) = mpsc::channel();
    support::waiter(&server, "b", "s", 0, t1);
    until_waiting(&mut c, 1);
    waiter_all(&server, &["b", "a"], "w", &["WAIT", "0"], tx);
    until_waiting(&mut c, 2);
    assert_eq!(release(&mut c, "b", "hb"), 1);
    let (token, reply, _) = r1.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!((token.as_str(), reply), ("s", Value::Int(1)));
    assert!(rx.try_recv().is_err(), "w waits for s");
    assert_eq!(get(&mut c, "a"), None);
    assert_eq!(release(&mut c, "b", "s"), 1);
    assert_eq!(recv(&rx), ("w".to_string(), Value::Int(1)));
    assert_eq!((get(&mut c, "a").as_deref(), get(&mut c, "b").as_deref()), (Some("w"), Some("w")));
}

#[test]
fn opposite_orders_never_deadlock() {
    let server = Server::start();
    let rounds = 40;
    let handles: Vec<_> = [["p", "q", "r"], ["r", "q", "p"], ["q", "r", "p"]]
        .into_iter()
        .enumerate()
        .map(|(n, keys)| {
            let mut c = server.conn();
            thread::spawn(move || {
                for i in 0..rounds {
                    let token = format!("c{n}-{i}");
                    let r = all(&mut c, &keys, &token, LEASE_MS, &["WAIT", "120000"]);
                    assert_eq!(r, Ok(Value::Int(1)), "{token}");
                    for k in keys {
                        assert_eq!(release(&mut c, k, &token), 1, "{token} held {k} alone");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut c = server.conn();
    assert_eq!(info_field(&mut c, "waits_timed_out"), 0);
    assert_eq!(info_field(&mut c, "waiting"), 0);
}

#[test]
fn timeouts_and_client_unblock_end_the_wait_everywhere_and_free_the_kept_keys() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "b", "hb"), 1);
    let (tx, rx) = mpsc::channel();
    waiter_all(&server, &["a", "b", "c"], "w", &["WAIT", "200", "FENCE"], tx.clone());
    assert_eq!(recv(&rx), ("w".to_string(), Value::Nil));
    assert_eq!((waiters_on(&mut c, "a"), waiters_on(&mut c, "c")), (0, 0));
    assert_eq!(acquire(&mut c, "a", "x"), 1, "a is free again");
    assert_eq!(info_field(&mut c, "waits_timed_out"), 1);

    let mut w = server.conn();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut w).unwrap();
    waiter_all_on(w, &["c", "b"], "u", &["WAIT", "0"], tx);
    until_waiting(&mut c, 1);
    assert_eq!(acquire(&mut c, "c", "y"), 0, "c is kept for u");
    let n: i64 = redis::cmd("CLIENT").arg("UNBLOCK").arg(id).query(&mut c).unwrap();
    assert_eq!(n, 1);
    assert_eq!(recv(&rx), ("u".to_string(), Value::Int(0)));
    assert_eq!((waiters_on(&mut c, "b"), waiters_on(&mut c, "c")), (0, 0));
    assert_eq!(acquire(&mut c, "c", "y"), 1);
    assert_eq!(info_field(&mut c, "waits_timed_out"), 2);

    // A disconnect: a raw socket dropped mid-wait.
    let mut gone = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    std::io::Write::write_all(
        &mut gone,
        b"*8\r\n$15\r\nLOCK.ACQUIREALL\r\n$1\r\n2\r\n$1\r\nd\r\n$1\r\nb\r\n$1\r\ng\r\n$5\r\n60000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n",
    )
    .unwrap();
    until_waiting(&mut c, 1);
    drop(gone);
    until_waiting(&mut c, 0);
    assert_eq!((waiters_on(&mut c, "b"), waiters_on(&mut c, "d")), (0, 0));
    assert_eq!(info_field(&mut c, "waits_cancelled"), 1);
}

#[test]
fn max_waiters_flush_and_demotion_as_for_single_key_waiters() {
    let server = Server::start();
    let other = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "b", "hb"), 1);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(1).query(&mut c).unwrap();
    let (tx, rx) = mpsc::channel();
    waiter_all(&server, &["a", "b"], "w", &["WAIT", "0"], tx.clone());
    until_waiting(&mut c, 1);
    let err = all(&mut c, &["b", "e"], "v", 60_000, &["WAIT", "0"]).unwrap_err();
    assert!(err.contains("lock.max-waiters"), "{err}");
    assert_eq!(waiters_on(&mut c, "e"), 0);
    // A flush deletes b's holder: the waiter gets both keys.
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(recv(&rx), ("w".to_string(), Value::Int(1)));
    assert_eq!((get(&mut c, "a").as_deref(), get(&mut c, "b").as_deref()), (Some("w"), Some("w")));
    // Demotion answers it as Redis answers its own blocked clients.
    waiter_all(&server, &["b", "f"], "v", &["WAIT", "0"], tx);
    until_waiting(&mut c, 1);
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg(other.port()).query(&mut c).unwrap();
    let (_, reply) = recv(&rx);
    assert!(matches!(&reply, Value::SimpleString(e) if e.contains("UNBLOCKED")), "{reply:?}");
    assert_eq!(info_field(&mut c, "waiting"), 0);
}

#[test]
fn grants_reach_replicas_as_effects_with_absolute_expiries() {
    let master = Server::start();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    let mut m = master.conn();
    assert!(matches!(all(&mut m, &["a", "b"], "t", 60_000, &["FENCE"]), Ok(Value::Array(_))));
    assert_eq!(acquire(&mut m, "d", "hd"), 1);
    let (tx, rx) = mpsc::channel();
    waiter_all(&master, &["c", "d"], "w", &["WAIT", "0"], tx);
    until_waiting(&mut m, 1);
    assert_eq!(release(&mut m, "d", "hd"), 1);
    assert_eq!(recv(&rx), ("w".to_string(), Value::Int(1)));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    for k in ["a", "b", "c", "d"] {
        let read = |c: &mut redis::Connection| -> (Option<String>, i64) {
            redis::pipe().cmd("GET").arg(k).cmd("PEXPIRETIME").arg(k).query(c).unwrap()
        };
        let on_master = read(&mut m);
        assert!(on_master.1 > 0);
        assert_eq!(on_master, read(&mut r), "{k}");
    }
}

#[test]
fn keys_of_several_slots_are_refused_with_crossslot_in_a_cluster() {
    let cluster = Cluster::start(3, 0);
    let owner = cluster.owner_of("{j}a");
    let mut o = cluster.node(owner).conn();
    assert_eq!(all(&mut o, &["{j}a", "{j}b"], "t", 60_000, &["FENCE"]).map(|v| fences(&v).len()), Ok(2));
    let foreign = ["x", "y", "z", "w"].into_iter().find(|k| cluster.slot_of(k) != cluster.slot_of("{j}a")).unwrap();
    let err = all(&mut o, &["{j}c", foreign], "t", 60_000, &[]).unwrap_err();
    assert!(err.contains("CROSSSLOT"), "{err}");
    let elsewhere = cluster.masters().into_iter().find(|&m| m != owner).unwrap();
    let err = all(&mut cluster.node(elsewhere).conn(), &["{j}c", "{j}d"], "t", 60_000, &[]).unwrap_err();
    assert!(err.contains("MOVED"), "{err}");
    assert_eq!(get(&mut o, "{j}c"), None);
}

#[test]
fn a_key_that_expires_while_writes_are_paused_goes_to_the_waiter_only_after_the_pause() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "b", "hb"), 1);
    let (tx, rx) = mpsc::channel();
    waiter_all(&server, &["a", "b"], "w", &["WAIT", "0"], tx);
    until_waiting(&mut c, 1);
    // b's lease is cut to 100 ms in the step that pauses writes, so it ends
    // inside the pause however slowly this test runs.
    let paused_at = std::time::Instant::now();
    let _: () = redis::pipe()
        .atomic()
        .cmd("LOCK.RENEW")
        .arg("b")
        .arg("hb")
        .arg(100)
        .ignore()
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("WRITE")
        .ignore()
        .query(&mut c)
        .unwrap();
    assert_eq!(recv(&rx), ("w".to_string(), Value::Int(1)));
    let after = paused_at.elapsed();
    assert!(after >= Duration::from_millis(550), "granted {after:?} into a 600 ms pause");
    assert_eq!((get(&mut c, "a").as_deref(), get(&mut c, "b").as_deref()), (Some("w"), Some("w")));
}

#[test]
fn a_waiter_whose_slot_migrates_away_is_sent_on_and_nothing_is_granted_on_the_source() {
    let cluster = Cluster::start(3, 0);
    let tag = cluster.key_on("m", 0);
    let (a, b) = (format!("{{{tag}}}a"), format!("{{{tag}}}b"));
    let slot = cluster.slot_of(&a);
    let mut source = cluster.node(0).conn();
    assert_eq!(acquire(&mut source, &b, "hb"), 1);
    let (tx, rx) = mpsc::channel();
    waiter_all_on(cluster.node(0).conn(), &[&a, &b], "w", &["WAIT", "20000"], tx);
    until_waiting(&mut source, 1);
    cluster.open_slot_move(slot, 0, 1);
    cluster.migrate_slot_keys(slot, 0, 1);
    let (_, reply) = recv(&rx);
    let Value::SimpleString(error) = reply else { panic!("expected a redirection, got {reply:?}") };
    assert!(error.starts_with("TryAgain") || error.contains("TRYAGAIN"), "{error}");
    assert_eq!(info_field(&mut source, "waits_granted"), 0, "no grant on the source");
    assert_eq!(info_field(&mut source, "waiting"), 0);
    let mut target = cluster.node(1).conn();
    let _: () = redis::cmd("ASKING").query(&mut target).unwrap();
    assert_eq!(get(&mut target, &b).as_deref(), Some("hb"), "the one copy, with its holder");
    let _: () = redis::cmd("ASKING").query(&mut target).unwrap();
    assert_eq!(get(&mut target, &a), None, "a was never written");
}

/// ACL key permissions apply to every key (they are reported through the
/// getkeys API with the key spec's flags: read and write); inside MULTI a
/// WAIT is one attempt.
#[test]
fn every_key_needs_read_and_write_permission_and_multi_never_blocks() {
    let server = Server::start();
    let mut admin = server.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("u")
        .arg("on")
        .arg(">pw")
        .arg("+@all")
        .arg("~lock:*")
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("w")
        .arg("on")
        .arg(">pw")
        .arg("+@all")
        .arg("%W~*")
        .query(&mut admin)
        .unwrap();
    for (user, keys) in [("u", ["lock:a", "other"]), ("w", ["lock:a", "lock:b"])] {
        let mut c = server.conn();
        let _: () = redis::cmd("AUTH").arg(user).arg("pw").query(&mut c).unwrap();
        let err = all(&mut c, &keys, "t", 60_000, &[]).unwrap_err();
        assert!(err.to_lowercase().contains("noperm"), "{user} {keys:?}: {err}");
    }
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut admin).unwrap();
    assert_eq!(dbsize, 0);

    assert_eq!(acquire(&mut admin, "b", "hb"), 1);
    let (r,): (Value,) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIREALL")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("t")
        .arg(60_000)
        .arg("WAIT")
        .arg(0)
        .query(&mut admin)
        .unwrap();
    assert_eq!(r, Value::Int(0));
    assert_eq!(info_field(&mut admin, "waits_started"), 0);
}

/// Under steady contention neither kind starves: a stream of single-key
/// requests on one of its keys never keeps a multi-key waiter out, and a
/// stream of multi-key requests never keeps a single-key waiter out. Each
/// is granted behind at most the requests that arrived before it (by
/// fences: the grants between its arrival and its own).
#[test]
fn under_steady_contention_neither_kind_starves() {
    let server = Server::start();
    for (stream, waiter) in [(vec![vec!["a"]], vec!["a", "b"]), (vec![vec!["a", "b"], vec!["b", "c"]], vec!["b"])] {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let grants: Vec<_> = (0..3)
            .map(|n| {
                let (stop, mut c) = (stop.clone(), server.conn());
                let keys = stream[n % stream.len()].clone();
                thread::spawn(move || {
                    let mut fences = Vec::new();
                    let mut i = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let token = format!("s{n}-{i}");
                        i += 1;
                        let r = all(&mut c, &keys, &token, LEASE_MS, &["FENCE", "WAIT", "120000"]).unwrap();
                        fences.extend(keys.iter().zip(self::fences(&r)).map(|(k, f)| (k.to_string(), f)));
                        thread::sleep(Duration::from_millis(2));
                        for k in &keys {
                            assert_eq!(release(&mut c, k, &token), 1);
                        }
                    }
                    fences
                })
            })
            .collect();
        let mut c = server.conn();
        until_waiting(&mut c, 2);
        // One pipeline: the server runs both before any other client's
        // command, so `before` is the last fence issued when the waiter queued.
        let (before, got): (i64, Value) = redis::pipe()
            .cmd("LOCK.ACQUIRE")
            .arg("mark")
            .arg("m")
            .arg(1)
            .arg("FENCE")
            .cmd("LOCK.ACQUIREALL")
            .arg(waiter.len())
            .arg(&waiter)
            .arg("w")
            .arg(60_000)
            .arg(&["FENCE", "WAIT", "100000"])
            .query(&mut c)
            .unwrap();
        let got = fences(&got);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for k in &waiter {
            assert_eq!(release(&mut c, k, "w"), 1);
        }
        let fences: Vec<(String, i64)> = grants.into_iter().flat_map(|h| h.join().unwrap()).collect();
        for (k, mine) in waiter.iter().zip(got) {
            let passed = fences.iter().filter(|(key, f)| key == k && *f > before && *f < mine).count();
            // At most the three clients' requests ahead of it when it queued.
            assert!(passed <= 3, "{passed} grants on {k} went ahead of the waiter on {waiter:?}");
        }
        assert!(fences.len() > 3, "the stream ran");
    }
}

#[path = "support/multi_model.rs"]
mod model;

#[test]
fn randomized_multi_and_single_key_clients_over_eight_keys() {
    let ops = std::env::var("MULTI_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed = std::env::var("MULTI_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let server = Server::start();
    let report = model::run(&server, 6, ops, seed);
    eprintln!("{report:?}");
    let mut c = server.conn();
    assert_eq!(info_field(&mut c, "waiting"), 0);
    assert!(report.multi_grants > 20, "few multi-key grants: {report:?}");
    assert!(report.waited_grants > 10, "few grants after a wait: {report:?}");
    assert!(report.snapshots > 10, "the checker looked too rarely: {report:?}");
}
