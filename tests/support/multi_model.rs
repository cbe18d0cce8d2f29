//! A randomized run of LOCK.ACQUIREALL next to LOCK.ACQUIRE: several
//! clients over 8 keys, multi-key requests of random sizes in random key
//! orders, single-key acquires, releases and holds left to expire, with
//! and without WAIT. What is checked, robust to a slow machine (no
//! assertion on speed; every margin is tens of seconds):
//!
//! - no deadlock: every request is answered by its timeout (plus a margin),
//!   and every request with a long timeout is granted (holds are short, so
//!   only a deadlock could keep one waiting that long);
//! - no partial hold: a checker reads all 8 keys in one MGET, over and
//!   over; a request still in flight or held (not yet releasing) holds all
//!   of its keys or none;
//! - no exclusion violation: a released hold finds every key still its own
//!   (LOCK.RELEASE replies 1: nobody was granted it meanwhile);
//! - fences increase per key, from one fenced grant to the next.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redis::Value;
use redis_lock_harness::Server;

const KEYS: [&str; 8] = ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"];
/// A hold that is released, not left to expire: far beyond any run.
const LONG_TTL: i64 = 600_000;
/// A timeout only a deadlock could reach: holds are at most a few hundred
/// ms, and at most a few clients are ahead of anyone.
const LONG_WAIT_MS: u64 = 60_000;
/// How late a reply may come after its timeout on a loaded machine.
const MARGIN: Duration = Duration::from_secs(20);

#[derive(Debug, Default)]
pub struct Report {
    pub multi_grants: u64,
    pub single_grants: u64,
    pub refusals: u64,
    pub timeouts: u64,
    pub waited_grants: u64,
    pub snapshots: u64,
}

/// What the clients share with the checker.
#[derive(Default)]
struct Shared {
    /// Requests in flight or held and not yet releasing: token → keys.
    watch: HashMap<String, Vec<String>>,
    /// The last fence granted per key.
    last_fence: HashMap<String, i64>,
    report: Report,
}

/// One request of a client.
struct Request {
    keys: Vec<String>,
    multi: bool,
    fence: bool,
    /// None: no WAIT.
    wait_ms: Option<u64>,
    /// Released after a short hold (else left to expire, with a short ttl).
    released: bool,
    ttl: i64,
}

fn draw(rng: &mut StdRng) -> Request {
    let kind = rng.gen_range(0..100);
    let multi = kind < 65;
    let n = if multi { rng.gen_range(1..=5) } else { 1 };
    let mut keys: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
    keys.shuffle(rng);
    keys.truncate(n);
    let released = !(50..65).contains(&kind) && !(90..100).contains(&kind);
    let wait_ms = match rng.gen_range(0..10) {
        0 => None,
        1..=6 => Some(LONG_WAIT_MS),
        _ => Some(rng.gen_range(20..800)),
    };
    let ttl = if released { LONG_TTL } else { rng.gen_range(30..300) };
    Request { keys, multi, fence: released && rng.gen_bool(0.6), wait_ms, released, ttl }
}

/// Runs `clients` clients of `ops` requests each; panics on a violation.
pub fn run(server: &Server, clients: usize, ops: usize, seed: u64) -> Report {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let done = Arc::new(AtomicBool::new(false));
    let checker = {
        let (shared, done, mut c) = (shared.clone(), done.clone(), server.conn());
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let values: Vec<Option<String>> = redis::cmd("MGET").arg(&KEYS).query(&mut c).expect("MGET");
                let s = &mut *shared.lock().unwrap();
                for (token, keys) in &s.watch {
                    let held = keys
                        .iter()
                        .filter(|k| {
                            let i = KEYS.iter().position(|x| x == k).unwrap();
                            values[i].as_deref() == Some(token.as_str())
                        })
                        .count();
                    assert!(held == 0 || held == keys.len(), "partial hold: {token} holds {held} of {keys:?}");
                }
                s.report.snapshots += 1;
                drop(values);
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let workers: Vec<_> = (0..clients)
        .map(|n| {
            let (shared, mut c) = (shared.clone(), server.conn());
            // A request never answered (a deadlock, a lost reply) fails the
            // run instead of hanging it.
            c.set_read_timeout(Some(Duration::from_millis(LONG_WAIT_MS) + 2 * MARGIN)).expect("read timeout");
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000).wrapping_add(n as u64));
            thread::spawn(move || {
                for i in 0..ops {
                    let token = format!("c{n}-{i}");
                    one(&mut c, &shared, &token, draw(&mut rng), &mut rng);
                }
            })
        })
        .collect();
    let mut failure = None;
    for w in workers {
        if let Err(e) = w.join() {
            failure.get_or_insert(e);
        }
    }
    done.store(true, Ordering::Relaxed);
    if let Err(e) = checker.join() {
        failure.get_or_insert(e);
    }
    if let Some(e) = failure {
        std::panic::resume_unwind(e);
    }
    let s = &mut *shared.lock().unwrap();
    std::mem::take(&mut s.report)
}

fn one(c: &mut redis::Connection, shared: &Mutex<Shared>, token: &str, r: Request, rng: &mut StdRng) {
    if r.released {
        shared.lock().unwrap().watch.insert(token.to_string(), r.keys.clone());
    }
    let mut cmd = if r.multi {
        let mut cmd = redis::cmd("LOCK.ACQUIREALL");
        cmd.arg(r.keys.len()).arg(&r.keys);
        cmd
    } else {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(&r.keys[0]);
        cmd
    };
    cmd.arg(token).arg(r.ttl);
    if r.fence {
        cmd.arg("FENCE");
    }
    if let Some(ms) = r.wait_ms {
        cmd.arg("WAIT").arg(ms);
    }
    let sent = Instant::now();
    let reply: Value = cmd.query(c).unwrap_or_else(|e| panic!("{token}: {e}"));
    let took = sent.elapsed();
    let limit = Duration::from_millis(r.wait_ms.unwrap_or(0)) + MARGIN;
    assert!(took <= limit, "{token} answered after {took:?} (wait {:?}): a deadlock?", r.wait_ms);
    let granted = match (&reply, r.multi) {
        (Value::Int(1), _) | (Value::Array(_), true) => true,
        (Value::Int(n), false) if r.fence && *n > 1 => true,
        (Value::Int(0) | Value::Nil, _) => false,
        _ => panic!("{token}: unexpected reply {reply:?}"),
    };
    let mut s = shared.lock().unwrap();
    if !granted {
        s.watch.remove(token);
        if r.wait_ms == Some(LONG_WAIT_MS) {
            panic!("{token} waited {took:?} for {:?} and was refused: a deadlock?", r.keys);
        }
        if r.wait_ms.is_some() {
            s.report.timeouts += 1;
        } else {
            s.report.refusals += 1;
        }
        return;
    }
    if r.multi {
        s.report.multi_grants += 1;
    } else {
        s.report.single_grants += 1;
    }
    if r.wait_ms.is_some() && took > Duration::from_millis(5) {
        s.report.waited_grants += 1;
    }
    if r.fence {
        let fences: Vec<i64> = match reply {
            Value::Int(f) => vec![f],
            Value::Array(items) => items.iter().map(|v| if let Value::Int(f) = v { *f } else { panic!() }).collect(),
            _ => unreachable!(),
        };
        assert_eq!(fences.len(), r.keys.len(), "{token}");
        for (k, f) in r.keys.iter().zip(fences) {
            let last = s.last_fence.insert(k.clone(), f).unwrap_or(0);
            assert!(f > last, "{token}: fence {f} on {k} after {last}");
        }
    }
    drop(s);
    if !r.released {
        return;
    }
    let values: Vec<Option<String>> = redis::cmd("MGET").arg(&r.keys).query(c).expect("MGET");
    assert!(values.iter().all(|v| v.as_deref() == Some(token)), "{token} granted {:?}, found {values:?}", r.keys);
    thread::sleep(Duration::from_millis(rng.gen_range(0..8)));
    shared.lock().unwrap().watch.remove(token);
    for k in &r.keys {
        let n: i64 = redis::cmd("LOCK.RELEASE").arg(k).arg(token).query(c).expect("release");
        assert_eq!(n, 1, "{token}'s {k} was taken while it held it");
    }
}
