//! `LOCK.ACQUIRE ... WAIT`: blocking inside the server, FIFO per key, one
//! wake per freed lock, and waiters that leave never being granted.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;
use redis_lock_harness::{server_version, Server};

mod support;
use support::*;

#[test]
fn waiters_are_served_in_arrival_order_one_per_release() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let mut handles = Vec::new();
    for i in 0..12 {
        handles.push(waiter(&server, "k", &format!("w{i:02}"), 20_000, tx.clone()));
        // Queue order is arrival order: let each one block before the next.
        until_waiting(&mut c, i + 1);
    }
    let mut holder = "holder".to_string();
    for i in 0..12 {
        assert_eq!(release(&mut c, "k", &holder), 1);
        let (token, reply, _) = rx.recv_timeout(Duration::from_secs(30)).expect("a waiter is granted");
        assert_eq!(token, format!("w{i:02}"), "FIFO order");
        assert_eq!(reply, Value::Int(1));
        // Exactly one wake: nobody else got a reply.
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "a release woke more than one waiter");
        assert_eq!(get(&mut c, "k").as_deref(), Some(token.as_str()), "the lock was handed over, not freed");
        assert_eq!(info_field(&mut c, "waiting"), 11 - i);
        holder = token;
    }
    for h in handles {
        h.join().expect("waiter thread");
    }
    assert_eq!(info_field(&mut c, "waits_granted"), 12);
}

#[test]
fn a_deleted_or_expired_lock_goes_to_the_head_waiter_promptly() {
    let server = Server::start();
    let mut c = server.conn();
    // Deleted behind the holder's back: the holder's lease outlasts the
    // wait, so only the DEL can have served the waiter.
    assert_eq!(acquire(&mut c, "del", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&server, "del", "w", 20_000, tx.clone());
    until_waiting(&mut c, 1);
    let _: i64 = redis::cmd("DEL").arg("del").query(&mut c).unwrap();
    let (_, reply, _) = rx.recv_timeout(Duration::from_secs(30)).expect("granted after DEL");
    assert_eq!(reply, Value::Int(1), "granted within the wait");
    h.join().unwrap();
    // Expired: Redis's own expiry may lag (here it is off), the module's
    // timer must not. The waiter has to block before the lease ends; on a
    // slow run it may come too late (then it is granted without waiting),
    // and a longer lease is tried.
    without_active_expiry(&mut c);
    for lease in [300, 1_200, 4_800] {
        let waits_before = info_field(&mut c, "waits_started");
        let (deadline,): (i64,) = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("exp")
            .arg("holder")
            .arg("PX")
            .arg(lease)
            .ignore()
            .cmd("PEXPIRETIME")
            .arg("exp")
            .query(&mut c)
            .unwrap();
        let h = waiter(&server, "exp", "w", 20_000, tx.clone());
        let (_, reply, _) = rx.recv_timeout(Duration::from_secs(30)).expect("granted after expiry");
        h.join().unwrap();
        assert_eq!(reply, Value::Int(1), "granted within the wait, by the module's timer");
        if info_field(&mut c, "waits_started") == waits_before {
            continue;
        }
        assert!(granted_at_ms(&mut c, "exp") >= deadline, "granted before the holder's deadline");
        assert_eq!(get(&mut c, "exp").as_deref(), Some("w"));
        return;
    }
    panic!("the waiter never blocked before a 4.8 s lease ended");
}

#[test]
fn a_wait_times_out_with_zero_or_nil_and_leaves_the_queue() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let started = Instant::now();
    let r: Value = redis::cmd("LOCK.ACQUIRE").arg("k").arg("w").arg(1000).arg("WAIT").arg(150).query(&mut c).unwrap();
    assert_eq!(r, Value::Int(0));
    assert!(started.elapsed() >= Duration::from_millis(140), "returned before its timeout");
    let r: Value =
        redis::cmd("LOCK.ACQUIRE").arg("k").arg("w").arg(1000).arg("FENCE").arg("WAIT").arg(50).query(&mut c).unwrap();
    assert_eq!(r, Value::Nil);
    assert_eq!(info_field(&mut c, "waiting"), 0);
    assert_eq!(info_field(&mut c, "waits_timed_out"), 2);
    assert_eq!(release(&mut c, "k", "holder"), 1);
    assert_eq!(get(&mut c, "k"), None, "a timed-out waiter is never granted");
}

/// The server is busy past a waiter's timeout and releases the lock before
/// it gets to the timeout: the waiter is answered once, with the grant.
/// (With Redis's own timeout for the blocked client it got no reply at all,
/// and then read its next command's reply as this one's.)
#[test]
fn a_grant_made_after_the_timeout_passed_but_before_it_was_handled_is_answered_once() {
    let server = Server::start();
    let mut c = server.conn();
    for round in 0..5 {
        let key = format!("late{round}");
        assert_eq!(acquire(&mut c, &key, "holder"), 1);
        let mut w = server.conn();
        let (tx, rx) = mpsc::channel();
        let k = key.clone();
        let t = thread::spawn(move || {
            let reply: Value =
                redis::cmd("LOCK.ACQUIRE").arg(&k).arg("late").arg(60_000).arg("WAIT").arg(20).query(&mut w).unwrap();
            let pong: String = redis::cmd("PING").arg("after").query(&mut w).unwrap();
            tx.send((reply, pong)).unwrap();
        });
        until_waiting(&mut c, 1);
        // Busy for 100 ms (past the 20 ms timeout), then release, in one
        // event-loop step. (Not a script polling TIME: on Redis 8.2 and
        // Valkey, unlike 7.0, TIME stands still inside a script until the
        // 5-second busy threshold.)
        let (released,): (i64,) = redis::pipe()
            .atomic()
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.1")
            .ignore()
            .cmd("LOCK.RELEASE")
            .arg(&key)
            .arg("holder")
            .query(&mut c)
            .unwrap();
        assert_eq!(released, 1);
        let (reply, pong) = rx.recv_timeout(Duration::from_secs(30)).expect("the waiter is answered");
        assert_eq!(reply, Value::Int(1), "round {round}: the grant is the answer");
        assert_eq!(pong, "after", "round {round}: the waiter's connection stays in step");
        assert_eq!(get(&mut c, &key).as_deref(), Some("late"));
        t.join().unwrap();
    }
    assert_eq!(info_field(&mut c, "waiting"), 0);
    assert_eq!(info_field(&mut c, "waits_granted"), 5);
    assert_eq!(info_field(&mut c, "waits_timed_out"), 0);
}

#[test]
fn a_free_lock_is_granted_without_waiting() {
    let server = Server::start();
    let mut c = server.conn();
    let r: i64 = redis::cmd("LOCK.ACQUIRE").arg("k").arg("t").arg(1000).arg("WAIT").arg(0).query(&mut c).unwrap();
    assert_eq!(r, 1);
    assert_eq!(info_field(&mut c, "waits_started"), 0);
}

#[test]
fn waiters_that_disconnect_or_are_unblocked_are_never_granted() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    // One waiter is removed by CLIENT UNBLOCK, one disconnects, one stays.
    let mut unblocked = server.conn();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut unblocked).unwrap();
    let (tx, rx) = mpsc::channel();
    let h1 = waiter_on(unblocked, "k", "unblocked", &["WAIT", "0"], tx.clone());
    until_waiting(&mut c, 1);
    // A raw socket so the test can drop the connection mid-wait.
    let mut gone = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    std::io::Write::write_all(
        &mut gone,
        b"*6\r\n$12\r\nLOCK.ACQUIRE\r\n$1\r\nk\r\n$4\r\ngone\r\n$5\r\n60000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n",
    )
    .unwrap();
    until_waiting(&mut c, 2);
    let h3 = waiter(&server, "k", "stays", 0, tx);
    until_waiting(&mut c, 3);

    let n: i64 = redis::cmd("CLIENT").arg("UNBLOCK").arg(id).query(&mut c).unwrap();
    assert_eq!(n, 1);
    let (token, reply, _) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!((token.as_str(), reply), ("unblocked", Value::Int(0)));
    drop(gone);
    until_waiting(&mut c, 1);

    assert_eq!(release(&mut c, "k", "holder"), 1);
    let (token, reply, _) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!((token.as_str(), reply), ("stays", Value::Int(1)));
    assert_eq!(get(&mut c, "k").as_deref(), Some("stays"));
    h1.join().unwrap();
    h3.join().unwrap();
    // Every wait is accounted for: CLIENT UNBLOCK ends it as a timeout,
    // a disconnect as a cancellation.
    assert_eq!(info_field(&mut c, "waits_started"), 3);
    assert_eq!(info_field(&mut c, "waits_granted"), 1);
    assert_eq!(info_field(&mut c, "waits_timed_out"), 1);
    assert_eq!(info_field(&mut c, "waits_cancelled"), 1);
}

#[test]
fn a_fenced_waiter_is_refused_with_an_error_when_fences_run_out_and_the_next_waiter_is_served() {
    // Only a replayed log (or a master) can bring the mark near the end:
    // one fence is left when the waiters queue, and it is used up before
    // their turn comes.
    let server = Server::builder().aof_commands(&[&["LOCK.FENCEFLOOR", &(i64::MAX - 1).to_string()]]).start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h1 = waiter_on(server.conn(), "k", "fenced", &["FENCE", "WAIT", "0"], tx.clone());
    until_waiting(&mut c, 1);
    let h2 = waiter(&server, "k", "plain", 0, tx);
    until_waiting(&mut c, 2);
    let last: i64 = redis::cmd("LOCK.ACQUIRE").arg("other").arg("t").arg(60_000).arg("FENCE").query(&mut c).unwrap();
    assert_eq!(last, i64::MAX);

    assert_eq!(release(&mut c, "k", "holder"), 1);
    // Both end in the same release; their replies race on two connections.
    let mut replies: Vec<(String, Value)> =
        (0..2).map(|_| rx.recv_timeout(Duration::from_secs(30)).map(|(t, r, _)| (t, r)).unwrap()).collect();
    replies.sort_by(|a, b| a.0.cmp(&b.0));
    let [(_, fenced_reply), (_, plain_reply)] = &replies[..] else { unreachable!() };
    let Value::SimpleString(error) = fenced_reply else { panic!("expected an error, got {fenced_reply:?}") };
    assert!(error.contains("fencing tokens exhausted"), "{error}");
    assert_eq!(plain_reply, &Value::Int(1));
    assert_eq!(get(&mut c, "k").as_deref(), Some("plain"), "the refused waiter never held the key");
    assert_eq!(info_field(&mut c, "waits_cancelled"), 1);
    h1.join().unwrap();
    h2.join().unwrap();
}

#[test]
fn inside_multi_or_a_script_wait_is_a_single_attempt() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("m")
        .arg(1000)
        .arg("WAIT")
        .arg(0)
        .cmd("LOCK.ACQUIRE")
        .arg("free")
        .arg("m")
        .arg(1000)
        .arg("WAIT")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, vec![Value::Int(0), Value::Int(1)]);
    let r: i64 = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 't', 1000, 'WAIT', 0)")
        .arg(1)
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 0);
    assert_eq!(info_field(&mut c, "waits_started"), 0, "nothing blocked");
}

#[test]
fn fenced_waiters_get_increasing_fences() {
    let server = Server::start();
    let mut c = server.conn();
    let first: i64 = redis::cmd("LOCK.ACQUIRE").arg("k").arg("a").arg(60_000).arg("FENCE").query(&mut c).unwrap();
    let mut w = server.conn();
    let h = thread::spawn(move || -> i64 {
        redis::cmd("LOCK.ACQUIRE")
            .arg("k")
            .arg("b")
            .arg(60_000)
            .arg("WAIT")
            .arg(20_000)
            .arg("FENCE")
            .query(&mut w)
            .unwrap()
    });
    until_waiting(&mut c, 1);
    assert_eq!(release(&mut c, "k", "a"), 1);
    let second = h.join().unwrap();
    assert!(second > first, "{second} > {first}");
}

#[test]
fn grants_to_waiters_reach_replicas_as_effects() {
    let master = Server::start();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    let mut m = master.conn();
    assert_eq!(acquire(&mut m, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&master, "k", "w", WAIT_MS, tx.clone());
    until_waiting(&mut m, 1);
    assert_eq!(release(&mut m, "k", "holder"), 1);
    granted_promptly(&rx, "a release");
    h.join().unwrap();
    // Expiry path: granted from a timer, not a command.
    let _: () = redis::cmd("PEXPIRE").arg("k").arg(100).query(&mut m).unwrap();
    let h = waiter(&master, "k", "w2", WAIT_MS, tx);
    granted_promptly(&rx, "the lease ended");
    h.join().unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let on_master: (Option<String>, i64) =
        redis::pipe().cmd("GET").arg("k").cmd("PEXPIRETIME").arg("k").query(&mut m).unwrap();
    let on_replica: (Option<String>, i64) =
        redis::pipe().cmd("GET").arg("k").cmd("PEXPIRETIME").arg("k").query(&mut r).unwrap();
    assert_eq!(on_master.0.as_deref(), Some("w2"));
    assert_eq!(on_master, on_replica);
}

/// How long these tests' waiters wait: well short of the holders' lease
/// ([`LEASE_MS`]), so a grant within the wait came from the event under
/// test, however slowly this machine ran it.
const WAIT_MS: u64 = 20_000;

/// Waits until one waiter's reply arrives; it must be a grant (within its
/// [`WAIT_MS`], hence caused by `what`).
fn granted_promptly(rx: &mpsc::Receiver<(String, Value, Instant)>, what: &str) -> String {
    let (token, reply, _) =
        rx.recv_timeout(Duration::from_millis(WAIT_MS + 10_000)).unwrap_or_else(|_| panic!("no reply after {what}"));
    assert_eq!(reply, Value::Int(1), "{token} after {what}");
    token
}

#[test]
fn flushdb_and_flushall_hand_the_lock_to_the_head_waiter_promptly() {
    let server = Server::start();
    let mut c = server.conn();
    for flush in [&["FLUSHDB"][..], &["FLUSHDB", "ASYNC"], &["FLUSHALL"], &["FLUSHALL", "ASYNC"]] {
        let what = flush.join(" ");
        assert_eq!(acquire(&mut c, "k", "holder"), 1);
        let (tx, rx) = mpsc::channel();
        let first = waiter(&server, "k", "first", WAIT_MS, tx.clone());
        until_waiting(&mut c, 1);
        let second = waiter(&server, "k", "second", WAIT_MS, tx);
        until_waiting(&mut c, 2);
        let _: () = redis::cmd(flush[0]).arg(&flush[1..]).query(&mut c).unwrap();
        assert_eq!(granted_promptly(&rx, &what), "first", "the head is served first");
        assert_eq!(get(&mut c, "k").as_deref(), Some("first"), "{what}: the head holds the lock");
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "{what} woke more than one waiter");
        assert_eq!(info_field(&mut c, "waiting"), 1);
        assert_eq!(release(&mut c, "k", "first"), 1);
        assert_eq!(granted_promptly(&rx, "a release"), "second");
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(release(&mut c, "k", "second"), 1);
    }
}

#[test]
fn flushing_another_database_leaves_waiters_waiting() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&server, "k", "w", WAIT_MS, tx);
    until_waiting(&mut c, 1);
    let mut other = server.conn();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut other).unwrap();
    let _: () = redis::cmd("FLUSHDB").query(&mut other).unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "a flush of db 1 woke a waiter on db 0");
    assert_eq!(get(&mut c, "k").as_deref(), Some("holder"));
    assert_eq!(release(&mut c, "k", "holder"), 1);
    granted_promptly(&rx, "a release");
    h.join().unwrap();
}

#[test]
fn after_swapdb_a_waiter_waits_for_what_its_database_now_holds() {
    let server = Server::start();
    let mut c = server.conn();
    let mut db1 = server.conn();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut db1).unwrap();

    // The other database is empty: the waiter's key is free after the swap.
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (tx, rx) = mpsc::channel();
    let h = waiter(&server, "k", "w", WAIT_MS, tx.clone());
    until_waiting(&mut c, 1);
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    granted_promptly(&rx, "SWAPDB with an empty db");
    assert_eq!(get(&mut c, "k").as_deref(), Some("w"), "granted in the waiter's database, db 0");
    assert_eq!(get(&mut db1, "k").as_deref(), Some("holder"), "the old holder moved to db 1 untouched");
    h.join().unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();

    // The other database holds the key with a shorter lease: the waiter
    // keeps waiting, and is granted when that lease ends, not the old one.
    // Redis's own expiry is off, so only the module's timer, moved to the
    // swapped-in deadline, can serve it within the wait; the server's clock
    // tells when it did.
    without_active_expiry(&mut c);
    assert_eq!(acquire(&mut c, "k", "holder"), 1);
    let (swapped_in_deadline,): (i64,) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("k")
        .arg("other")
        .arg("PX")
        .arg(1_000)
        .ignore()
        .cmd("PEXPIRETIME")
        .arg("k")
        .query(&mut db1)
        .unwrap();
    let h = waiter(&server, "k", "w", WAIT_MS, tx.clone());
    until_waiting(&mut c, 1);
    let _: () = redis::cmd("SWAPDB").arg(1).arg(0).query(&mut c).unwrap();
    granted_promptly(&rx, "the swapped-in lease ended");
    assert!(granted_at_ms(&mut c, "k") >= swapped_in_deadline, "granted before the swapped-in lease ended");
    assert_eq!(get(&mut c, "k").as_deref(), Some("w"));
    assert_eq!(get(&mut db1, "k").as_deref(), Some("holder"));
    h.join().unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();

    // A waiter on db 1 is served when a swap brings an empty db there.
    assert_eq!(acquire(&mut db1, "k", "holder"), 1);
    let mut w1 = server.conn();
    let h = thread::spawn(move || -> Value {
        let _: () = redis::cmd("SELECT").arg(1).query(&mut w1).unwrap();
        redis::cmd("LOCK.ACQUIRE").arg("k").arg("w1").arg(LEASE_MS).arg("WAIT").arg(WAIT_MS).query(&mut w1).unwrap()
    });
    until_waiting(&mut c, 1);
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    assert_eq!(h.join().unwrap(), Value::Int(1), "granted within the wait, by the SWAPDB");
    assert_eq!(get(&mut db1, "k").as_deref(), Some("w1"));
    assert_eq!(get(&mut c, "k").as_deref(), Some("holder"));
}

/// The database this connection has selected (`CLIENT INFO`'s `db=`).
fn client_db(c: &mut redis::Connection) -> u32 {
    let info: String = redis::cmd("CLIENT").arg("INFO").query(c).unwrap();
    info.split_whitespace()
        .find_map(|f| f.strip_prefix("db="))
        .and_then(|d| d.parse().ok())
        .expect("db= in CLIENT INFO")
}

#[test]
fn rename_move_restore_and_copy_reach_waiters_through_key_events() {
    let server = Server::start();
    let mut c = server.conn();
    let (tx, rx) = mpsc::channel();
    // Each takes the held key away from under its waiter: RENAME and MOVE
    // (the key leaves), RESTORE / COPY REPLACE with a short lease (the key
    // stays, under a new deadline the waiter must follow).
    let steps: [(&str, &[&str]); 2] = [("RENAME", &["k", "elsewhere"]), ("MOVE", &["k", "1"])];
    for (cmd, args) in steps {
        assert_eq!(acquire(&mut c, "k", "holder"), 1);
        let h = waiter(&server, "k", "w", WAIT_MS, tx.clone());
        until_waiting(&mut c, 1);
        let _: Value = redis::cmd(cmd).arg(args).query(&mut c).unwrap();
        // Valkey 8.1 runs a module's key-event callbacks on the calling
        // client, SELECTed on the event's database, and leaves it there:
        // after MOVE to db 1 the caller is in db 1 (fixed upstream in
        // valkey-io/valkey#4024; measured on 8.1.8, not on 9.1.2).
        let v = server_version();
        let moved_along = cmd == "MOVE" && v.is_valkey() && v.major_minor() >= (8, 1) && v.major_minor() < (9, 1);
        assert_eq!(client_db(&mut c), if moved_along { 1 } else { 0 }, "{cmd} on {v}");
        let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
        granted_promptly(&rx, cmd);
        assert_eq!(get(&mut c, "k").as_deref(), Some("w"), "{cmd}");
        h.join().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    }
    // Redis's own expiry is off: only the module's timer, moved to the new
    // deadline, can serve the waiter within its wait. Each replacement is
    // read back in its own transaction (one instant on the server's clock),
    // so its short lease cannot end in between.
    without_active_expiry(&mut c);
    let _: () = redis::cmd("SET").arg("short").arg("other").query(&mut c).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg("short").query(&mut c).unwrap();
    for cmd in ["RESTORE", "COPY"] {
        assert_eq!(acquire(&mut c, "k", "holder"), 1);
        let h = waiter(&server, "k", "w", WAIT_MS, tx.clone());
        until_waiting(&mut c, 1);
        let mut replace = redis::pipe();
        replace.atomic();
        if cmd == "RESTORE" {
            replace.cmd("RESTORE").arg("k").arg(1_000).arg(&dump).arg("REPLACE").ignore();
        } else {
            replace.cmd("SET").arg("short").arg("other").arg("PX").arg(1_000).ignore();
            replace.cmd("COPY").arg("short").arg("k").arg("REPLACE").ignore();
        }
        let (value, deadline): (Option<String>, i64) =
            replace.cmd("GET").arg("k").cmd("PEXPIRETIME").arg("k").query(&mut c).unwrap();
        assert_eq!(value.as_deref(), Some("other"), "{cmd} replaced the holder");
        granted_promptly(&rx, &format!("{cmd}'s lease ended"));
        assert!(granted_at_ms(&mut c, "k") >= deadline, "granted before {cmd}'s lease ended");
        assert_eq!(get(&mut c, "k").as_deref(), Some("w"));
        h.join().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        let _: () = redis::cmd("SET").arg("short").arg("other").query(&mut c).unwrap();
    }
}
