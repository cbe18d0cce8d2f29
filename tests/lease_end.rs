//! A waiter is never granted inside the lease that frees it: a lease is
//! held through its last millisecond, on every server of the matrix.
//!
//! Redis 8's active expiry deletes a key already in its deadline's
//! millisecond (`now >= deadline`; Redis 7 and Valkey: `now > deadline`).
//! Its `expired` event used to have the queue grant the next waiter in that
//! same millisecond, so on Redis 8.2 a limit-1 semaphore had two holders for
//! a millisecond, now and then. This test gives active expiry that chance
//! on many keys at once, round after round: each key's holder lease ends
//! while its waiter is blocked, and the server's event loop is kept busy
//! (PINGs) so that its fast expiry cycle runs through the lease's last
//! milliseconds. The old module failed it on Redis 8.2 (see the commit).

use std::thread;
use std::time::{Duration, Instant};

use redis_lock_harness::Server;

mod support;
use support::holders::now_ms;
use support::{expiry_ms, info_field, LEASE_MS};

/// Keys per round, each with one holder and one waiter.
const KEYS: usize = 24;
const ROUNDS: usize = 12;
/// The holders' lease: long enough for every waiter to block before it ends.
const HOLD_MS: i64 = 400;
/// The lock-delay of [`Family::Delayed`]'s holders.
const HOLDER_DELAY_MS: i64 = 100;

#[derive(Clone, Copy, Debug)]
enum Family {
    Lock,
    /// The exclusive lock whose holder has a LOCKDELAY: the key, and the
    /// lease the rule is about, end with the delay.
    Delayed,
    Semaphore,
    Write,
}

impl Family {
    fn acquire(self, key: &str, token: &str, ttl: i64) -> redis::Cmd {
        let mut c = match self {
            Family::Lock | Family::Delayed => redis::cmd("LOCK.ACQUIRE"),
            Family::Semaphore => redis::cmd("SEM.ACQUIRE"),
            Family::Write => redis::cmd("RWLOCK.ACQUIRE"),
        };
        c.arg(key).arg(token);
        match self {
            Family::Lock | Family::Delayed => {}
            Family::Semaphore => {
                c.arg(1);
            }
            Family::Write => {
                c.arg("WRITE");
            }
        }
        c.arg(ttl);
        if matches!(self, Family::Delayed) && token == "holder" {
            c.arg("LOCKDELAY").arg(HOLDER_DELAY_MS);
        }
        c
    }
}

fn never_inside_the_ending_lease(family: Family) {
    // Redis's expiry cycle runs in its cron: at the highest rate, every 2 ms,
    // it has a good chance to fall into a lease's last millisecond.
    let server = Server::builder().arg("hz", "500").start();
    let mut c = server.conn();
    let mut waited = 0;
    for round in 0..ROUNDS {
        let keys: Vec<String> = (0..KEYS).map(|i| format!("{family:?}:{round}:{i}")).collect();
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.add_command(family.acquire(k, "holder", HOLD_MS)).ignore();
        }
        pipe.query::<()>(&mut c).expect("holders");
        // The holder's lease end is its key's expiry (either kind of key;
        // with a lock-delay, the delay's end, through which the key is held).
        let ends: Vec<i64> = keys.iter().map(|k| expiry_ms(&mut c, k)).collect();
        let waiters: Vec<_> = keys
            .iter()
            .map(|k| {
                let (k, mut w) = (k.clone(), server.conn());
                thread::spawn(move || -> i64 {
                    let mut cmd = family.acquire(&k, "waiter", LEASE_MS);
                    cmd.arg("WAIT").arg(10_000);
                    let r: i64 = cmd.query(&mut w).expect("waiter");
                    assert_eq!(r, 1, "{k}: the waiter is granted once the holder's lease ends");
                    expiry_ms(&mut w, &k)
                })
            })
            .collect();
        // A waiter that did not block before the leases ended proves nothing
        // here (a direct acquire sees what Redis's expiry left): such a round
        // (a very slow machine) is not judged.
        let first_end = ends.iter().min().copied().unwrap_or(0);
        let blocked_in_time = loop {
            if info_field(&mut c, "waiting") == KEYS as u64 {
                break now_ms() < first_end;
            }
            if now_ms() >= first_end {
                break false;
            }
            thread::sleep(Duration::from_millis(1));
        };
        // Keep the event loop turning through the leases' last milliseconds.
        let spin_until = Instant::now() + Duration::from_secs(20);
        while !waiters.iter().all(|w| w.is_finished()) {
            let _: String = redis::cmd("PING").query(&mut c).expect("ping");
            assert!(Instant::now() < spin_until, "waiters not granted");
        }
        for ((k, end), w) in keys.iter().zip(&ends).zip(waiters) {
            let granted_at = w.join().expect("waiter thread") - LEASE_MS;
            assert!(
                !blocked_in_time || granted_at > *end,
                "{k}: granted at {granted_at}, inside the lease that freed it (held through {end})"
            );
        }
        waited += blocked_in_time as usize;
    }
    assert!(waited > 0, "no round had its waiters blocked before the leases ended");
}

#[test]
fn an_exclusive_lock_waiter_is_granted_after_the_last_millisecond() {
    never_inside_the_ending_lease(Family::Lock);
}

#[test]
fn a_waiter_behind_a_lock_delay_is_granted_after_its_last_millisecond() {
    never_inside_the_ending_lease(Family::Delayed);
}

#[test]
fn a_semaphore_waiter_is_granted_after_the_last_millisecond() {
    never_inside_the_ending_lease(Family::Semaphore);
}

#[test]
fn a_writer_waiting_on_a_writer_is_granted_after_the_last_millisecond() {
    never_inside_the_ending_lease(Family::Write);
}
