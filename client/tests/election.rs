//! Leader election through the client (`Election`, `Leadership`,
//! `LeaderStream`) and the lease rules (`LockOptions::lock_delay`,
//! `max_hold`), against private servers with the module and a cluster.
//!
//! Candidates that must die by `kill -9` are `redis-lock elect` processes
//! (this package's binary); observers are the client's streams, async and
//! blocking, each collecting every state it is told in a thread of its
//! own. Only orders and outcomes are asserted ("terms increase", "the last
//! state is the last leader"), never durations below seconds.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis_lock_client::{ClientOptions, Error, Leader, LockClient, LockOptions, LossReason, WatchdogOptions};
use redis_lock_harness::{Cluster, Server};
use support::{ms, rt};

const BIN: &str = env!("CARGO_BIN_EXE_redis-lock");

/// Far beyond any test: a lease that must not end by itself.
const LONG: Duration = Duration::from_secs(60);

/// How long a test waits for what must happen.
const PATIENCE: Duration = Duration::from_secs(30);

fn client(s: &Server) -> LockClient {
    LockClient::open_with(&s.url(), ClientOptions::new().response_timeout(ms(3000)).connect_timeout(ms(3000)))
        .expect("client")
}

fn eventually(f: impl FnMut() -> bool) -> bool {
    support::eventually(PATIENCE, f)
}

/// A `redis-lock elect` candidate process; SIGKILLed on drop.
struct Candidate(Child);

impl Candidate {
    fn start(url: &str, key: &str, value: &str, ttl_ms: u64) -> Candidate {
        let child = Command::new(BIN)
            .args(["elect", "--url", url, "--value", value, "--ttl", &ttl_ms.to_string(), "--grace", "1000", key])
            .args(["--", "sleep", "300"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-lock elect");
        Candidate(child)
    }

    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// What an observer saw: every state, in order, until it saw `until`.
type Seen = mpsc::Receiver<Option<Leader>>;

/// A blocking observer in a thread: sends each state it is told.
fn observe_blocking(c: &LockClient, key: &str) -> Seen {
    let mut it = c.election(key).observe_blocking().expect("observe");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for item in it.by_ref() {
            if tx.send(item.expect("an observer's item")).is_err() {
                return;
            }
        }
    });
    rx
}

/// An async observer (the `Stream`) on a runtime of its own.
fn observe_async(c: &LockClient, key: &str) -> Seen {
    let mut stream = c.election(key).observe().expect("observe");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        rt().block_on(async move {
            while let Some(item) = stream.next().await {
                if tx.send(item.expect("an observer's item")).is_err() {
                    return;
                }
            }
        })
    });
    rx
}

/// States from `seen` until one satisfies `last` (which is included).
fn until(seen: &Seen, mut last: impl FnMut(&Option<Leader>) -> bool) -> Vec<Option<Leader>> {
    let end = Instant::now() + PATIENCE;
    let mut out = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match seen.recv_timeout(left) {
            Ok(s) => {
                let done = last(&s);
                out.push(s);
                if done {
                    return out;
                }
            }
            Err(_) => panic!("the observer did not see the expected state; it saw {out:?}"),
        }
    }
}

fn value_is(v: &str) -> impl Fn(&Option<Leader>) -> bool + '_ {
    move |s| s.as_ref().is_some_and(|l| l.value == v)
}

/// The terms in `states`, in order.
fn terms(states: &[Option<Leader>]) -> Vec<u64> {
    states.iter().flatten().map(|l| l.term).collect()
}

/// Several candidates (processes), the leader's process killed with
/// `kill -9` twice: the next one leads with a greater term, and every
/// observer sees every leader's term, in increasing order, ending on the
/// last leader.
#[test]
fn candidates_take_over_in_term_order_after_kill_9_and_observers_see_every_term() {
    let s = Server::start();
    let c = client(&s);
    let key = "election:kill9";
    let observers = [observe_blocking(&c, key), observe_async(&c, key), observe_blocking(&c, key)];
    let mut a = Candidate::start(&s.url(), key, "a", 1500);
    assert!(eventually(|| c.election(key).leader().ok().flatten().is_some_and(|l| l.value == "a")));
    let waiters = |n: u64| c.info(key).ok().flatten().is_some_and(|i| i.waiters == n);
    let mut b = Candidate::start(&s.url(), key, "b", 1500);
    // b queues behind a (in the server: a waiter), and a stays the leader.
    assert!(eventually(|| waiters(1)), "b waits in the key's queue");
    let term_a = c.election(key).leader().unwrap().expect("a leads").term;
    let cc = Candidate::start(&s.url(), key, "c", 1500);
    assert!(eventually(|| waiters(2)), "c waits behind b");
    a.kill9();
    let next = |c: &LockClient| c.election(key).leader().ok().flatten().filter(|l| l.value != "a");
    assert!(eventually(|| next(&c).is_some()), "someone leads after a's kill -9");
    let second = next(&c).unwrap();
    assert!(second.term > term_a, "{} after {term_a}", second.term);
    assert_eq!(second.value, "b", "FIFO: b queued before c");
    b.kill9();
    assert!(eventually(|| c.election(key).leader().ok().flatten().is_some_and(|l| l.value == "c")));
    let third = c.election(key).leader().unwrap().unwrap();
    assert!(third.term > second.term);
    for seen in &observers {
        let states = until(seen, value_is("c"));
        let t = terms(&states);
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "terms in order: {states:?}");
        for want in [term_a, second.term, third.term] {
            assert!(t.contains(&want), "term {want} seen: {states:?}");
        }
        assert_eq!(states.last().unwrap().as_ref().unwrap().term, third.term, "ends on the last leader");
        // Every item is news: no rev twice in a row.
        assert!(states.windows(2).all(|w| w[0].as_ref().map(|l| l.rev) != w[1].as_ref().map(|l| l.rev)));
    }
    drop(cc);
}

/// A campaign in the client: the term is the grant's fence, proclaim keeps
/// it and wakes the observers with the new value (a new rev), resign hands
/// the leadership to the next candidate at once.
#[test]
fn proclaim_wakes_observers_and_resign_hands_over() {
    let s = Server::start();
    let c = client(&s);
    let key = "election:proclaim";
    let e = c.election(key);
    assert_eq!(e.leader().unwrap(), None);
    let seen = observe_async(&c, key);
    assert_eq!(until(&seen, |_| true), [None], "the first item: no leader");
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let lead = e.campaign_with("first", ms(3000), Duration::ZERO, &opts).expect("campaign");
    assert!(lead.term() > 0);
    let l = until(&seen, value_is("first")).pop().unwrap().unwrap();
    assert_eq!((l.term, l.rev), (lead.term(), lead.term()), "a grant's rev is its term");
    lead.proclaim("second").unwrap();
    assert_eq!(lead.value(), "second");
    let p = until(&seen, value_is("second")).pop().unwrap().unwrap();
    assert_eq!(p.term, lead.term(), "proclaim keeps the term");
    assert!(p.rev > l.rev, "and takes a new rev");
    assert_eq!(e.leader().unwrap().unwrap().value, "second");
    // A second candidate waits in the queue, and leads when the first resigns.
    let c2 = c.clone();
    let waiting = thread::spawn(move || c2.election(key).campaign("next", LONG, PATIENCE));
    thread::sleep(ms(300));
    assert!(e.campaign("third", LONG, Duration::ZERO).unwrap_err().is_not_acquired());
    lead.resign().unwrap();
    let next = waiting.join().unwrap().expect("the waiting candidate leads");
    assert!(next.term() > lead.term());
    assert!(!lead.is_held());
    assert!(matches!(lead.proclaim("late"), Err(Error::NotHeld { .. })), "a resigned leader cannot proclaim");
    let states = until(&seen, value_is("next"));
    assert!(terms(&states).iter().all(|&t| t >= lead.term()));
    let info = c.info(key).unwrap().unwrap();
    assert_eq!(info.owner.as_deref(), Some(next.token()), "the leader owns the key as a lock");
    next.resign().unwrap();
    assert_eq!(until(&seen, Option::is_none).pop(), Some(None), "resigned: no leader");
}

/// A proclaim by a leader whose key was deleted behind its back is refused,
/// and the leadership is then lost.
#[test]
fn a_proclaim_that_finds_no_leadership_loses_it() {
    let s = Server::start();
    let c = client(&s);
    let lead = c.election("election:gone").campaign("v", LONG, Duration::ZERO).unwrap();
    let _: () = redis::cmd("DEL").arg("election:gone").query(&mut s.conn()).unwrap();
    assert!(matches!(lead.proclaim("w"), Err(Error::NotHeld { .. })));
    assert_eq!(lead.loss_reason(), Some(LossReason::NotOwner));
}

/// `max_hold` caps the renewals (`LOCK.RENEW` answers 2 near the limit),
/// and the watchdog reports the end as `MaxHold`.
#[test]
fn max_hold_caps_renewals_and_the_watchdog_reports_max_hold() {
    let s = Server::start();
    let c = client(&s);
    let opts = LockOptions::new().watchdog(WatchdogOptions::new()).max_hold(ms(7000));
    let lock = c.acquire_with("lease:maxhold", ms(3000), Duration::ZERO, &opts).unwrap();
    let reason = lock.lost_signal().wait_timeout(PATIENCE);
    assert_eq!(reason, Some(LossReason::MaxHold));
    assert!(eventually(|| c.try_acquire("lease:maxhold", LONG).is_ok()), "the key is free after the limit");
    // A renewal by hand near the limit: 2, not 1.
    let mut con = s.conn();
    let fence: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg("lease:raw")
        .arg("tok")
        .arg(10_000)
        .arg("FENCE")
        .arg("MAXHOLD")
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    assert!(fence > 0);
    thread::sleep(ms(50));
    let renewed: i64 = redis::cmd("LOCK.RENEW").arg("lease:raw").arg("tok").arg(10_000).query(&mut con).unwrap();
    assert_eq!(renewed, 2, "capped: the grant + 10 s is before now + 10 s");
    // Through the client, a capped renewal is a renewal, up to the limit.
    let opts = LockOptions::new().max_hold(ms(6000));
    let lock = c.acquire_with("lease:manual", ms(4000), Duration::ZERO, &opts).unwrap();
    thread::sleep(ms(2500));
    lock.renew(ms(4000)).expect("a capped renewal is a renewal");
    assert!(lock.is_held());
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::MaxHold));
}

/// `lock_delay` keeps the key after its lease ran out (a waiter is granted
/// when the delay is over), and not after a release.
#[test]
fn lock_delay_refuses_a_reacquire_after_the_lease_ended_not_after_a_release() {
    let s = Server::start();
    let c = client(&s);
    let opts = LockOptions::new().lock_delay(ms(8000));
    let lock = c.acquire_with("lease:delay", ms(1000), Duration::ZERO, &opts).unwrap();
    let ended = Instant::now();
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::Expired));
    // Past the lease (1 s), within the delay (8 s more).
    thread::sleep(ms(1500));
    assert!(c.try_acquire("lease:delay", LONG).unwrap_err().is_not_acquired(), "in its lock-delay");
    let other = c.acquire("lease:delay", LONG, PATIENCE).expect("granted once the delay is over");
    assert!(ended.elapsed() >= ms(5000), "not before the delay: {:?}", ended.elapsed());
    other.release().unwrap();
    // A release ends the lease voluntarily: no delay.
    let lock = c.acquire_with("lease:delay", ms(1000), Duration::ZERO, &opts).unwrap();
    lock.release().unwrap();
    c.try_acquire("lease:delay", LONG).expect("free at once after a release");
    // Also for a leadership: resign frees the key at once.
    let lead = c.election("lease:elect").campaign_with("v", LONG, Duration::ZERO, &opts).unwrap();
    lead.resign().unwrap();
    c.election("lease:elect").campaign("w", LONG, Duration::ZERO).expect("free at once after resign");
}

/// Lease options the server would not keep are refused before sending.
#[test]
fn lease_options_are_checked_before_sending() {
    let s = Server::start();
    let c = client(&s);
    let bad = LockOptions::new().max_hold(ms(500));
    assert!(matches!(c.try_acquire_with("k", ms(1000), &bad), Err(Error::InvalidArgument(_))));
    let bad = LockOptions::new().lock_delay(ms(60_001));
    assert!(matches!(c.try_acquire_with("k", ms(1000), &bad), Err(Error::InvalidArgument(_))));
    // Semaphores and read-write locks keep one lock-delay per key (every
    // holder names the same)...
    let sem = LockOptions::new().lock_delay(ms(10));
    let held = c.semaphore("s", 2).try_acquire_with(ms(1000), &sem).expect("LOCKDELAY on a semaphore");
    let other_delay = LockOptions::new().lock_delay(ms(20));
    match c.semaphore("s", 2).try_acquire_with(ms(1000), &other_delay) {
        Err(Error::Redis(e)) => assert!(e.to_string().contains("LOCKDELAY differs"), "{e}"),
        other => panic!("another delay than the key's: {other:?}"),
    }
    held.release().unwrap();
    // and, each holder its own, a hold limit.
    let capped = LockOptions::new().max_hold(ms(5000));
    c.semaphore("s", 2).try_acquire_with(ms(1000), &capped).expect("MAXHOLD on a semaphore").release().unwrap();
    c.rw_lock("rw").read().try_acquire_with(ms(1000), &capped).expect("MAXHOLD on a reader").release().unwrap();
    let plain = Server::builder().without_module().start();
    assert!(matches!(
        client(&plain).try_acquire_with("k", ms(1000), &sem),
        Err(Error::Unsupported { command: "LOCK.ACQUIRE" })
    ));
    assert!(matches!(
        client(&plain).election("k").campaign("v", ms(1000), Duration::ZERO),
        Err(Error::Unsupported { command: "LOCK.ELECT" })
    ));
    assert!(matches!(client(&plain).election("k").leader(), Err(Error::Unsupported { command: "LOCK.LEADER" })));
    let mut it = client(&plain).election("k").observe_blocking().unwrap();
    assert!(matches!(it.next(), Some(Err(Error::Unsupported { command: "LOCK.OBSERVE" }))));
    assert!(it.next().is_none(), "the error is the stream's last item");
}

/// In a cluster, an observer blocked on the slot's owner follows the slot
/// when it moves (`MOVED`), and keeps reporting the leadership there.
#[test]
fn cluster_observers_follow_the_slot_when_it_moves() {
    let cl = Cluster::start(3, 0);
    let c = LockClient::open_cluster(&cl.urls()).expect("cluster client");
    let key = cl.key_on("election:", 0);
    let seen = observe_async(&c, &key);
    let seen2 = observe_blocking(&c, &key);
    assert_eq!(until(&seen, |_| true), [None]);
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let lead = c.election(&key).campaign_with("before", ms(3000), Duration::ZERO, &opts).unwrap();
    until(&seen, value_is("before"));
    until(&seen2, value_is("before"));
    let to = cl.masters().into_iter().find(|&m| m != cl.owner_of(&key)).expect("another master");
    cl.move_slot(cl.slot_of(&key), to);
    lead.proclaim("after").expect("proclaimed on the new owner");
    for s in [&seen, &seen2] {
        let l = until(s, value_is("after")).pop().unwrap().unwrap();
        assert_eq!(l.term, lead.term());
    }
    lead.resign().unwrap();
    let next = c.election(&key).campaign("next", LONG, Duration::ZERO).unwrap();
    assert!(next.term() > lead.term(), "fences keep increasing across the move");
    for s in [&seen, &seen2] {
        until(s, value_is("next"));
    }
}

/// The stream reconnects by itself: after its connection is killed
/// (`CLIENT KILL`), unblocked (`CLIENT UNBLOCK`), and after a server
/// restart, it reports the latest state.
#[test]
fn observers_reconnect_by_themselves() {
    let mut s = Server::start();
    let c = client(&s);
    let key = "election:reconnect";
    let seen = observe_blocking(&c, key);
    assert_eq!(until(&seen, |_| true), [None]);
    let observers = |s: &Server| -> Vec<String> {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut s.conn()).unwrap();
        list.lines()
            .filter(|l| l.contains("cmd=lock.observe"))
            .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")).map(String::from))
            .collect()
    };
    assert!(eventually(|| observers(&s).len() == 1), "the observer blocks in the server");
    let id = observers(&s).pop().unwrap();
    let _: i64 = redis::cmd("CLIENT").arg("UNBLOCK").arg(&id).arg("ERROR").query(&mut s.conn()).unwrap();
    let a = c.election(key).campaign("a", LONG, Duration::ZERO).unwrap();
    until(&seen, value_is("a"));
    assert!(eventually(|| observers(&s).len() == 1), "blocked again");
    let id = observers(&s).pop().unwrap();
    let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(&id).query(&mut s.conn()).unwrap();
    a.proclaim("a2").unwrap();
    until(&seen, value_is("a2"));
    drop(a);
    until(&seen, Option::is_none);
    s.restart();
    let c2 = client(&s);
    let b = c2.election(key).campaign("b", LONG, Duration::ZERO).unwrap();
    let l = until(&seen, value_is("b")).pop().unwrap().unwrap();
    assert_eq!(l.term, b.term());
}

/// The async API: campaign, proclaim, leader and resign.
#[test]
fn the_async_api_campaigns_proclaims_and_resigns() {
    let s = Server::start();
    let c = client(&s);
    rt().block_on(async {
        let e = c.election("election:async");
        let lead = e.campaign_async("x", LONG, Duration::ZERO).await.unwrap();
        assert!(e.campaign_async("y", LONG, ms(200)).await.unwrap_err().is_not_acquired());
        lead.proclaim_async("x2").await.unwrap();
        let l = e.leader_async().await.unwrap().unwrap();
        assert_eq!((l.value.as_str(), l.term), ("x2", lead.term()));
        lead.resign_async().await.unwrap();
        assert_eq!(e.leader_async().await.unwrap(), None);
        assert_eq!(lead.lost().await, None, "resigned, not lost");
    });
}

/// In a cluster, observers ride out the `kill -9` of the slot's master:
/// after the replica's promotion they report the leaders elected there,
/// with terms greater than the old master's (the configEpoch floor).
#[test]
fn cluster_observers_ride_out_a_failover() {
    let mut cl = Cluster::start(3, 1);
    let c = LockClient::open_cluster(&cl.urls()).expect("cluster client");
    let victim = cl.masters()[0];
    let key = cl.key_on("election:", victim);
    let seen = observe_async(&c, &key);
    assert_eq!(until(&seen, |_| true), [None]);
    let before = c.election(&key).campaign("before", ms(2000), Duration::ZERO).unwrap();
    until(&seen, value_is("before"));
    let promoted = cl.kill_master(victim);
    assert_eq!(cl.owner_of(&key), promoted);
    // The old leader's lease ends (by expiry, or lost with the master).
    let after = c.election(&key).campaign("after", LONG, PATIENCE).expect("a leader on the promoted replica");
    assert!(after.term() > before.term(), "{} after {}", after.term(), before.term());
    let l = until(&seen, value_is("after")).pop().unwrap().unwrap();
    assert_eq!(l.term, after.term());
    drop(before);
}
