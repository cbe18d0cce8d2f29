//! Quorum locks against five (or three) real redis-servers with the module:
//! servers down, killed, paused and restarted, clocks skewed, contenders.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use redis::Commands;
use redis_lock_client::{Error, LockOptions, QuorumClient, QuorumOptions, WatchdogOptions};
use redis_lock_harness::Server;
use support::{eventually, get, ms};

fn servers(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

fn urls(servers: &[Server]) -> Vec<String> {
    servers.iter().map(Server::url).collect()
}

/// A client whose node timeout does not depend on the TTL: steps on a dead
/// or paused server give up after 500 ms (a live one on a loaded machine
/// answers well within it).
fn client(servers: &[Server]) -> QuorumClient {
    QuorumClient::open_with(&urls(servers), QuorumOptions::new().node_timeout(ms(500)).connect_timeout(ms(1000)))
        .expect("client")
}

/// How long a test waits for what must happen: only a failure waits this
/// long, so it can be generous on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// The lease of the watchdog tests: renewals (every third of it) may be
/// late by most of it and still keep the lock.
const LEASE: u64 = 1_500;

/// How many servers hold `key` for `token`: its own lease (the bare
/// token), or that server's session (a watchdog lock's, docs/sessions.md).
fn holders(servers: &[&Server], key: &str, token: &str) -> usize {
    let by_session = format!("\"token\":\"{token}\"");
    let held = |v: String| v == token || (v.contains("\"session\"") && v.contains(&by_session));
    servers.iter().filter(|s| get(s, key).is_some_and(held)).count()
}

#[test]
fn two_of_five_down_still_grants_with_a_fence_and_release_frees_every_live_server() {
    let mut s = servers(5);
    s[0].kill();
    s[1].set_paused(true);
    let c = client(&s);
    let t = Instant::now();
    let lock = c.try_acquire("job", ms(30_000)).expect("3 of 5 servers are enough");
    // The paused server was waited for its node timeout (500 ms), not for
    // the TTL (a bound a loaded machine keeps: it answers in milliseconds).
    assert!(t.elapsed() < ms(15_000), "took {:?}", t.elapsed());
    let live: Vec<&Server> = s[2..].iter().collect();
    assert_eq!(holders(&live, "job", lock.token()), 3);
    assert!(lock.fence().is_some(), "all live servers have FLOOR: the lock has a fence");
    assert!(lock.is_held() && lock.valid_until() > Instant::now());
    lock.renew(ms(5000)).expect("renew on 3 of 5");
    lock.release().expect("release");
    assert!(eventually(PATIENCE, || holders(&live, "job", lock.token()) == 0), "release frees every live server");
    assert!(!lock.is_held());
}

#[test]
fn three_of_five_down_is_refused_with_a_clear_error_and_leaves_nothing_behind() {
    let mut s = servers(5);
    s[0].kill();
    s[1].kill();
    s[2].set_paused(true);
    let c = client(&s);
    let t = Instant::now();
    let err = c.try_acquire("job", ms(30_000)).expect_err("2 of 5 are not a majority");
    assert!(t.elapsed() < ms(15_000), "took {:?}", t.elapsed());
    let Error::NoQuorum(f) = &err else { panic!("expected NoQuorum, got {err:?}") };
    assert_eq!((f.nodes, f.needed, f.succeeded, f.refused, f.failed.len()), (5, 3, 2, 0, 3), "{f:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("no quorum: acquire of lock \"job\" succeeded on 2 of 5 servers (3 needed); 3 failed:"),
        "{msg}"
    );
    for dead in &s[..3] {
        assert!(msg.contains(&dead.url()), "{msg} names {}", dead.url());
    }
    // The two grants were released.
    let live: Vec<&Server> = s[3..].iter().collect();
    assert!(eventually(PATIENCE, || live.iter().all(|s| get(s, "job").is_none())));
    // And waiting does not change the outcome, it retries until the wait is over.
    let t = Instant::now();
    assert!(matches!(c.acquire("job", ms(5000), ms(400)), Err(Error::NoQuorum(_))));
    assert!(t.elapsed() >= ms(400), "{:?}", t.elapsed());
}

#[test]
fn a_majority_held_elsewhere_fails_fast_as_not_acquired() {
    let s = servers(5);
    for srv in &s[..3] {
        let _: () = srv.conn().pset_ex("job", "other", 120_000).expect("SET");
    }
    // The other two are paused: the three refusals alone decide.
    s[3].set_paused(true);
    s[4].set_paused(true);
    let c = QuorumClient::open_with(&urls(&s), QuorumOptions::new().node_timeout(ms(30_000))).expect("client");
    let t = Instant::now();
    let err = c.try_acquire("job", ms(60_000)).expect_err("held on 3 of 5");
    assert!(err.is_not_acquired(), "{err:?}");
    assert!(t.elapsed() < ms(20_000), "did not fail fast (node timeout 30 s): {:?}", t.elapsed());
    assert!(s[..3].iter().all(|srv| get(srv, "job").as_deref() == Some("other")), "another's keys are untouched");
}

#[test]
fn release_frees_every_server_and_renew_retakes_a_restarted_one() {
    let mut s = servers(3);
    let c = client(&s);
    let lock = c.try_acquire("job", ms(10_000)).expect("acquire");
    let fence = lock.fence().expect("fence");
    // A server restarts without persistence: the key is gone there.
    s[0].restart();
    assert_eq!(get(&s[0], "job"), None);
    // Its fence mark restarted from its clock; a renewal takes the key
    // again and raises the mark. (The first renewal after the restart may
    // only find the old connection dropped; as with a watchdog, a later
    // one gets through.)
    assert!(
        eventually(PATIENCE, || {
            lock.renew(ms(10_000)).expect("renew on a majority");
            get(&s[0], "job").as_deref() == Some(lock.token())
        }),
        "renew took the key again on the restarted server"
    );
    let next: i64 =
        redis::cmd("LOCK.ACQUIRE").arg("other").arg("t").arg(1000).arg("FENCE").query(&mut s[0].conn()).expect("FENCE");
    assert!(next.unsigned_abs() > fence, "the restarted server's mark is above the lock's fence again");
    lock.release().expect("release");
    let all: Vec<&Server> = s.iter().collect();
    assert!(eventually(PATIENCE, || holders(&all, "job", lock.token()) == 0));
    lock.release().expect("idempotent");
    // Not re-taken when switched off. (A node timeout a live server on a
    // loaded machine answers well within: the renewal needs two of three.)
    let c = QuorumClient::open_with(&urls(&s), QuorumOptions::new().node_timeout(ms(2000)).reacquire_on_renew(false))
        .expect("client");
    let lock = c.try_acquire("job2", ms(10_000)).expect("acquire");
    s[1].restart();
    lock.renew(ms(10_000)).expect("2 of 3 renew");
    assert_eq!(get(&s[1], "job2"), None);
}

#[test]
fn without_the_module_quorum_locks_work_but_have_no_fence() {
    let s: Vec<Server> = (0..3).map(|_| Server::builder().without_module().start()).collect();
    let c = client(&s);
    let lock = c.try_acquire("job", ms(5000)).expect("acquire on scripts");
    assert_eq!(lock.fence(), None);
    let all: Vec<&Server> = s.iter().collect();
    // A majority at least: the acquisition returns once a majority granted,
    // and a slow third server (its first script load, on a busy machine)
    // may still be on its way.
    assert!(holders(&all, "job", lock.token()) >= 2);
    assert!(c.try_acquire("job", ms(5000)).unwrap_err().is_not_acquired());
    lock.renew(ms(5000)).expect("renew");
    lock.release().expect("release");
    assert!(eventually(PATIENCE, || holders(&all, "job", lock.token()) == 0));
    // Mixed: one server of three has the module. A majority cannot carry
    // a fence, so there is none, but the lock is granted.
    let m = Server::start();
    let mixed = [&s[0], &s[1], &m].map(Server::url);
    let c = QuorumClient::open_with(&mixed, QuorumOptions::new().node_timeout(ms(2000))).expect("client");
    let lock = c.try_acquire("job", ms(5000)).expect("acquire, mixed");
    assert_eq!(lock.fence(), None);
}

#[test]
fn a_server_too_far_behind_for_the_floor_keeps_the_lock_and_the_others_carry_the_fence() {
    // 25 h behind: the others' fences are beyond its FLOOR horizon (24 h),
    // so it refuses the floor ("ERR fence floor ...") and renews without it.
    let s = vec![Server::start(), Server::start(), Server::builder().clock_offset_ms(-25 * 3_600_000).start()];
    let c = client(&s);
    for _ in 0..6 {
        let lock = c.try_acquire("job", ms(LEASE)).expect("acquire");
        // Whichever two granted first, the floor went to all three.
        assert!(lock.fence().is_some(), "the two servers on time took the floor");
        thread::sleep(ms(LEASE * 3 / 5));
        lock.renew(ms(LEASE)).expect("renew");
        // Past the acquire's lease: the late server still holds the key
        // only because the renewal, refused the floor, renewed without it.
        thread::sleep(ms(LEASE * 3 / 5));
        assert_eq!(get(&s[2], "job").as_deref(), Some(lock.token()), "the late server renewed too");
        lock.release().expect("release");
        assert!(eventually(PATIENCE, || get(&s[2], "job").is_none()));
    }
}

#[test]
fn arguments_are_checked_before_anything_is_sent() {
    let s = servers(1);
    let c = client(&s);
    // 1 % + 2 ms of a 2 ms TTL leaves no validity.
    assert!(matches!(c.try_acquire("job", ms(2)), Err(Error::InvalidArgument(m)) if m.contains("drift")));
    assert!(matches!(c.try_acquire("", ms(1000)), Err(Error::InvalidArgument(_))));
    assert!(
        matches!(QuorumClient::open(&[s[0].url(), s[0].url()]), Err(Error::InvalidArgument(m)) if m.contains("twice"))
    );
    assert!(matches!(QuorumClient::open::<&str>(&[]), Err(Error::InvalidArgument(_))));
    assert_eq!(get(&s[0], "job"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_api_and_watchdog_keep_the_lock_past_its_ttl() {
    let s = servers(3);
    let c = client(&s);
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let lock = c.try_acquire_with_async("job", ms(LEASE), &opts).await.expect("acquire");
    assert!(lock.fence().is_some());
    let other = client(&s);
    tokio::time::sleep(ms(LEASE * 7 / 3)).await;
    assert!(lock.is_held(), "renewed every TTL/3");
    assert!(other.try_acquire_async("job", ms(LEASE)).await.unwrap_err().is_not_acquired());
    lock.release_async().await.expect("release");
    let l2 = other.try_acquire_async("job", ms(LEASE)).await.expect("free after release");
    assert!(l2.fence() > lock.fence(), "fences increase");
    drop(l2);
    // A majority taken away behind the holder's back: the watchdog's next
    // renewal finds two of three servers another's, and reports the loss.
    let lock = other.try_acquire_with_async("job2", ms(LEASE), &opts).await.expect("acquire job2");
    for srv in &s[..2] {
        let _: () = srv.conn().pset_ex("job2", "thief", 10_000).expect("SET");
    }
    let reason = tokio::time::timeout(PATIENCE, lock.lost()).await.expect("loss reported");
    assert_eq!(reason, Some(redis_lock_client::LossReason::NotOwner), "by a renewal, before the lease ran out");
    assert!(lock.renew_async(ms(LEASE)).await.unwrap_err().is_not_held());
}

#[test]
fn sync_watchdog_keeps_the_lock_and_drop_releases_everywhere() {
    let s = servers(3);
    let c = client(&s);
    let lock =
        c.try_acquire_with("job", ms(LEASE), &LockOptions::new().watchdog(WatchdogOptions::new())).expect("acquire");
    let token = lock.token().to_string();
    thread::sleep(ms(LEASE * 7 / 3));
    assert!(lock.is_held(), "renewed every TTL/3 from the background runtime");
    let all: Vec<&Server> = s.iter().collect();
    assert_eq!(holders(&all, "job", &token), 3);
    drop(lock);
    assert!(eventually(PATIENCE, || holders(&all, "job", &token) == 0), "drop released on every server");
}

#[tokio::test]
async fn an_abandoned_async_acquire_releases_what_it_was_granted() {
    let s = servers(3);
    // Two paused servers: the attempt holds one grant while it waits for them.
    s[1].set_paused(true);
    s[2].set_paused(true);
    // Neither the node timeout nor the connect timeout (a paused server
    // accepts the connection and answers nothing) may run out within the
    // second below, however long a loaded machine stalls this process.
    let opts = QuorumOptions::new().node_timeout(ms(20_000)).connect_timeout(ms(20_000));
    let c = QuorumClient::open_with(&urls(&s), opts).expect("client");
    let r = tokio::time::timeout(ms(1000), c.try_acquire_async("job", ms(60_000))).await;
    assert!(r.is_err(), "still waiting for the paused servers: {:?}", r.map(|r| r.map(|l| l.token().to_string())));
    assert!(get(&s[0], "job").is_some(), "the first server had granted");
    // The dropped attempt released it, not its 60 s TTL.
    let t = Instant::now();
    while get(&s[0], "job").is_some() && t.elapsed() < PATIENCE {
        tokio::time::sleep(ms(5)).await;
    }
    assert_eq!(get(&s[0], "job"), None);
    s[1].set_paused(false);
    s[2].set_paused(false);
}

/// Two (here three) contenders never both hold a quorum lock within its
/// validity, while servers are paused, killed and restarted empty (after
/// a TTL: the delayed restart Redlock needs) and holders vanish without
/// releasing. Each holder records [acquired, end of its claim): release
/// time, or its validity end; no two records may overlap. It runs 6 s, and
/// on until enough happened (10 acquisitions, a kill and a pause: a loaded
/// machine may take longer), a minute at most.
#[test]
fn contenders_never_overlap_under_pauses_kills_and_vanishing_holders() {
    const TTL: u64 = 300;
    let seed: u64 =
        std::env::var("QUORUM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("QUORUM_SEED={seed}");
    let mut s = servers(5);
    let url_list = urls(&s);
    let begun = Instant::now();
    let (least, most) = (begun + Duration::from_secs(6), begun + Duration::from_secs(60));
    let log: Arc<Mutex<Vec<(Instant, Instant, usize)>>> = Arc::default();
    let (acquired, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let (log, url_list) = (log.clone(), url_list.clone());
            let (acquired, stop) = (acquired.clone(), stop.clone());
            thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (w as u64 + 1));
                let c = QuorumClient::open_with(
                    &url_list,
                    QuorumOptions::new().node_timeout(ms(30)).connect_timeout(ms(50)).retry_delay(ms(1), ms(20)),
                )
                .expect("client");
                let mut held = 0;
                while !stop.load(Ordering::SeqCst) {
                    let Ok(lock) = c.acquire("job", ms(TTL), ms(100)) else { continue };
                    let start = Instant::now();
                    held += 1;
                    acquired.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(ms(rng.gen_range(0..120)));
                    if rng.gen_bool(0.3) && lock.renew(ms(TTL)).is_ok() {
                        thread::sleep(ms(rng.gen_range(0..120)));
                    }
                    match rng.gen_range(0..4) {
                        // Vanishes: no release, no more renewals.
                        0 => {
                            let until = lock.valid_until();
                            std::mem::forget(lock);
                            log.lock().unwrap().push((start, until, w));
                        }
                        _ => {
                            let until = lock.valid_until().min(Instant::now());
                            let _ = lock.release();
                            log.lock().unwrap().push((start, until, w));
                        }
                    }
                }
                held
            })
        })
        .collect();
    // Chaos: at most two servers disturbed at a time.
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut kills, mut pauses, mut round) = (0, 0, 0);
    let enough = |kills: usize, pauses: usize| acquired.load(Ordering::SeqCst) >= 10 && kills > 0 && pauses > 0;
    while Instant::now() < most && (Instant::now() < least || !enough(kills, pauses)) {
        round += 1;
        let mut picked: Vec<usize> = (0..5).collect();
        picked.sort_by_key(|_| rng.gen::<u32>());
        picked.truncate(rng.gen_range(1..=2));
        // Every third disturbance is a kill, so each run has both kinds.
        let kill = round % 3 == 0;
        for &i in &picked {
            if kill {
                s[i].kill();
            } else {
                s[i].set_paused(true);
            }
        }
        // Down for longer than a TTL (a killed server must stay down that
        // long before restarting empty), or a pause of any length.
        thread::sleep(ms(if kill { TTL + 100 } else { rng.gen_range(50..500) }));
        for &i in &picked {
            if kill {
                s[i].restart();
                kills += 1;
            } else {
                s[i].set_paused(false);
                pauses += 1;
            }
        }
        thread::sleep(ms(rng.gen_range(0..200)));
    }
    // Every server up: the workers finish their current hold.
    stop.store(true, Ordering::SeqCst);
    let held: usize = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    let mut log = log.lock().unwrap().clone();
    log.sort();
    eprintln!("{held} acquisitions, {kills} kills, {pauses} pauses");
    assert!(
        held >= 10 && kills > 0 && pauses > 0,
        "too little happened in {:?}: {held} acquisitions, {kills} kills, {pauses} pauses",
        begun.elapsed()
    );
    for pair in log.windows(2) {
        let ((_, end_a, wa), (start_b, _, wb)) = (pair[0], pair[1]);
        assert!(
            start_b >= end_a,
            "seed {seed}: worker {wb} acquired {:?} before worker {wa}'s claim ended",
            end_a - start_b
        );
    }
}

/// The issue's failure: with clocks at ±30 s, "fence = max of the
/// majority's fences" goes backwards when a later majority misses the
/// fast-clock server. The two-phase floor keeps every fence above the last.
#[test]
fn fences_strictly_increase_over_2000_acquisitions_with_skewed_clocks_and_random_majorities() {
    let seed: u64 =
        std::env::var("QUORUM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("QUORUM_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let offsets: Vec<i64> = (0..5)
        .map(|i| {
            if i == 0 {
                30_000
            } else if i == 1 {
                -30_000
            } else {
                rng.gen_range(-30_000..=30_000)
            }
        })
        .collect();
    let s: Vec<Server> = offsets.iter().map(|&o| Server::builder().clock_offset_ms(o).start()).collect();
    // Short enough that paused servers cost little, long enough for a
    // loaded machine's live ones.
    let c = QuorumClient::open_with(&urls(&s), QuorumOptions::new().node_timeout(ms(50))).expect("client");
    let mut paused: Vec<usize> = Vec::new();
    let mut last = 0u64;
    let mut without_fast_clock = 0;
    for i in 0..2000 {
        if i % 10 == 0 {
            for &p in &paused {
                s[p].set_paused(false);
            }
            paused = (0..5).collect();
            paused.sort_by_key(|_| rng.gen::<u32>());
            paused.truncate(rng.gen_range(0..=2));
            for &p in &paused {
                s[p].set_paused(true);
            }
        }
        if paused.contains(&0) {
            without_fast_clock += 1;
        }
        let lock = c.acquire("job", ms(2000), PATIENCE).unwrap_or_else(|e| panic!("seed {seed}, acquisition {i}: {e}"));
        let fence = lock.fence().unwrap_or_else(|| panic!("seed {seed}, acquisition {i}: no fence"));
        assert!(fence > last, "seed {seed}, acquisition {i}: fence {fence} after {last} (servers paused: {paused:?})");
        last = fence;
        // A release that got no majority in time (a loaded machine) is
        // retried as a caller would; the next acquire would otherwise wait
        // for the TTL. A retry may find the first one's work done (NotHeld).
        match lock.release() {
            Ok(()) => {}
            Err(Error::NoQuorum(_)) => {
                let again = (0..3).any(|_| matches!(lock.release(), Ok(()) | Err(Error::NotHeld { .. })));
                assert!(again, "seed {seed}, acquisition {i}: release failed 4 times");
            }
            Err(e) => panic!("seed {seed}, acquisition {i}: release: {e}"),
        }
    }
    assert!(without_fast_clock >= 100, "the +30 s server was left out of only {without_fast_clock} majorities");
}

#[test]
fn quorum_types_can_be_shared_across_threads() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<QuorumClient>();
    send_sync::<redis_lock_client::QuorumLock>();
    send_sync::<redis_lock_client::QuorumFailure>();
}
