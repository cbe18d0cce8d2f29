//! RWLOCK.*: many readers or one writer, each holder with its own lease;
//! a waiting writer holds back the readers that come after it; FIFO
//! otherwise; and a randomized run against a model.

use std::sync::mpsc;
use std::time::Duration;

use redis_lock_harness::Server;

mod support;
use support::holders::{self, call, spawn_call, stored, Family, R};
use support::*;

fn rw(c: &mut redis::Connection, key: &str, token: &str, mode: &str, ttl: i64, opts: &[&str]) -> R {
    let ttl = ttl.to_string();
    let mut args = vec!["RWLOCK.ACQUIRE", key, token, mode, &ttl];
    args.extend_from_slice(opts);
    call(c, &args)
}

#[test]
fn readers_share_a_writer_is_alone_and_the_tag_says_which() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(rw(&mut c, "k", "r1", "READ", 60_000, &[]), R::Int(1));
    assert!(matches!(rw(&mut c, "k", "r2", "read", 60_000, &["FENCE"]), R::Int(f) if f > 1), "a fence");
    assert_eq!(stored(&mut c, "k").0, Some(0), "readers: tag 0");
    assert_eq!(rw(&mut c, "k", "w", "WRITE", 60_000, &[]), R::Int(0));
    assert_eq!(rw(&mut c, "k", "w", "WRITE", 60_000, &["FENCE"]), R::Nil);
    assert_eq!(rw(&mut c, "k", "r1", "READ", 60_000, &[]), R::Int(0), "already holds");
    assert_eq!(
        rw(&mut c, "k", "r1", "WRITE", 60_000, &["WAIT", "100"]),
        R::Int(0),
        "no upgrade: it would wait for itself"
    );
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "k", "r1"]), R::Int(1));
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "k", "r2"]), R::Int(1));
    assert_eq!(call(&mut c, &["EXISTS", "k"]), R::Int(0));
    assert_eq!(rw(&mut c, "k", "w", "WRITE", 60_000, &[]), R::Int(1));
    assert_eq!(stored(&mut c, "k").0, Some(-1), "a writer: tag -1");
    assert_eq!(rw(&mut c, "k", "r", "READ", 60_000, &[]), R::Int(0));
    assert_eq!(rw(&mut c, "k", "w2", "WRITE", 60_000, &[]), R::Int(0));
    assert_eq!(call(&mut c, &["RWLOCK.RENEW", "k", "w", "90000"]), R::Int(1));
    let info: redis::Value = redis::cmd("RWLOCK.INFO").arg("k").query(&mut c).unwrap();
    let redis::Value::Array(f) = info else { panic!() };
    assert_eq!(f[0..2], [redis::Value::BulkString(b"mode".to_vec()), redis::Value::BulkString(b"write".to_vec())]);
    assert_eq!(
        call(&mut c, &["RWLOCK.ACQUIRE", "k", "x", "BOTH", "1000"]),
        R::Err("ERR mode must be READ or WRITE".into())
    );
    assert_eq!(
        call(&mut c, &["SEM.ACQUIRE", "k", "x", "1", "1000"]),
        R::Err("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
    assert_eq!(info_field(&mut c, "rw_read_grants"), 2);
    assert_eq!(info_field(&mut c, "rw_write_grants"), 1);
}

#[test]
fn a_waiting_writer_holds_back_later_readers_and_the_queue_stays_fifo() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(rw(&mut c, "k", "r0", "READ", 60_000, &[]), R::Int(1));
    let (tx, rx) = mpsc::channel();
    // Queue: w1 (writer), r1, r2 (readers), w2, r3.
    let order = [("w1", "WRITE"), ("r1", "READ"), ("r2", "READ"), ("w2", "WRITE"), ("r3", "READ")];
    let mut hs = Vec::new();
    for (i, (t, m)) in order.iter().enumerate() {
        hs.push(spawn_call(&server, t, &["RWLOCK.ACQUIRE", "k", t, m, "60000", "FENCE", "WAIT", "20000"], tx.clone()));
        until_waiting(&mut c, i as u64 + 1);
    }
    // A reader arriving now waits too: a writer is queued ahead of it.
    assert_eq!(rw(&mut c, "k", "late", "READ", 60_000, &[]), R::Int(0));
    let recv = |n: usize| {
        let mut got: Vec<(String, i64)> = (0..n)
            .map(|_| {
                let (t, r, _) = rx.recv_timeout(Duration::from_secs(5)).expect("granted");
                let R::Int(f) = r else { panic!("{t}: {r:?}") };
                (t, f)
            })
            .collect();
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "more wakes than places");
        got.sort_by_key(|(_, f)| *f);
        got.into_iter().map(|(t, _)| t).collect::<Vec<_>>()
    };
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "k", "r0"]), R::Int(1));
    assert_eq!(recv(1), ["w1"]);
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "k", "w1"]), R::Int(1));
    assert_eq!(recv(2), ["r1", "r2"], "readers up to the next writer, in order (fences)");
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "k", "r1"]), R::Int(1));
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "w2 waits for r2");
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "k", "r2"]), R::Int(1));
    assert_eq!(recv(1), ["w2"]);
    assert_eq!(call(&mut c, &["RWLOCK.RELEASE", "k", "w2"]), R::Int(1));
    assert_eq!(recv(1), ["r3"]);
    for h in hs {
        h.join().unwrap();
    }
    let (tag, hs) = stored(&mut c, "k");
    assert_eq!((tag, hs.len()), (Some(0), 1));
}

/// `RWLOCK.ACQUIRE` on a semaphore's key whose one lease just ended and
/// whose queue has a due head: `WRONGTYPE`, judged before anything is
/// written, so the head is not granted by it (the queue's timer grants it
/// afterwards) and nothing is pruned.
#[test]
fn wrongtype_does_not_serve_a_due_waiter_first() {
    let server = Server::start();
    let mut c = server.conn();
    let (tx, rx) = mpsc::channel();
    let mut ttl = 300;
    for attempt in 0..6 {
        let key = format!("k{attempt}");
        let ttl_arg = ttl.to_string();
        assert_eq!(call(&mut c, &["SEM.ACQUIRE", &key, "h", "1", &ttl_arg]), R::Int(1));
        let w = spawn_call(&server, "w", &["SEM.ACQUIRE", &key, "w", "1", "60000", "WAIT", "30000"], tx.clone());
        until_waiting(&mut c, 1);
        let got =
            holders::just_after_the_lease_ends(&mut c, &key, ttl, &["RWLOCK.ACQUIRE", &key, "x", "WRITE", "1000"]);
        let (token, reply, _) = rx.recv_timeout(Duration::from_secs(30)).expect("the waiter is answered");
        assert_eq!((token.as_str(), reply), ("w", R::Int(1)), "the waiter is granted, by the queue");
        w.join().unwrap();
        if let Some((before, reply, after)) = got {
            assert_eq!(reply, R::Err("WRONGTYPE Operation against a key holding the wrong kind of value".into()));
            assert_eq!(after, before, "an error changes nothing");
            return;
        }
        // Too slow to catch the lease's end inside the transaction: longer.
        ttl *= 2;
    }
    panic!("the lease always ended before the transaction ran");
}

#[test]
fn randomized_against_a_model() {
    let server = Server::start();
    let ops = std::env::var("RW_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let seed = std::env::var("RW_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let report = holders::random_run(&server, Family::ReadWrite, ops, seed);
    assert!(report.resyncs * 20 <= ops, "too many steps could not be ordered: {}", report.resyncs);
    assert!(report.timer_grants > 20, "few places freed at lease ends: {}", report.timer_grants);
    assert!(report.fences * 40 > ops, "few fenced grants: {}", report.fences);
}
