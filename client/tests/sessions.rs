//! Watchdog locks held by the renewal engine's sessions (docs/sessions.md,
//! "Client"): one session per node keeps any number of locks with one
//! `SESSION.KEEPALIVE` per TTL/3, a session's end is every attached lock's
//! loss with its reason, a key moved to a node without the session stays
//! safe and is adopted there by its live holder (a dead holder's ends after
//! `lock.orphan-grace`), and a server without the module still renews lock by lock.

mod support;

use std::time::{Duration, Instant};

use redis_lock_client::{Backend, ClientOptions, Error, Lock, LockClient, LockOptions, LossReason, WatchdogOptions};
use redis_lock_harness::{Cluster, Server};
use support::{calls, eventually, ms, rt};

/// The calls that keep locks alive: keepalives and renewals.
fn keeping(con: &mut redis::Connection) -> (u64, u64) {
    (calls(con, "session.keepalive"), calls(con, "lock.renew"))
}

fn sessions(con: &mut redis::Connection) -> Vec<String> {
    redis::cmd("SESSION.LIST").query(con).expect("SESSION.LIST")
}

/// `SESSION.INFO id`'s `holds` (0 once the session is gone: an idle one
/// is revoked by its client).
fn holds(con: &mut redis::Connection, id: &str) -> i64 {
    let v: Option<Vec<redis::Value>> = redis::cmd("SESSION.INFO").arg(id).query(con).expect("SESSION.INFO");
    let Some(v) = v else { return 0 };
    let at = v.iter().position(|f| matches!(f, redis::Value::BulkString(b) if b == b"holds")).expect("holds");
    redis::from_redis_value(v[at + 1].clone()).expect("holds is a number")
}

/// The TTL of the tests where its length is not what is tested: a
/// keepalive or renewal every second, so one a second late on a loaded
/// machine still finds its lock.
const TTL: Duration = Duration::from_millis(3000);

fn watchdog() -> LockOptions {
    LockOptions::new().watchdog(WatchdogOptions::new())
}

/// `n` watchdog locks `prefix:i`, taken by 64 tasks at once on the
/// client's shared connection (their drops queue releases with the engine).
fn take_many(client: &LockClient, prefix: &str, n: usize, ttl: Duration) -> Vec<Lock> {
    const TASKS: usize = 64;
    rt().block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (client, prefix) = (client.clone(), prefix.to_string());
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    for i in (t..n).step_by(TASKS) {
                        let key = format!("{prefix}:{{{}}}:{i}", i % 997);
                        out.push(client.try_acquire_with_async(&key, ttl, &watchdog()).await.expect("acquire"));
                    }
                    out
                })
            })
            .collect();
        let mut locks = Vec::with_capacity(n);
        for t in tasks {
            locks.extend(t.await.expect("task"));
        }
        locks
    })
}

/// Holds `locks` for `window` and returns the keepalives and renewals the
/// servers counted meanwhile, per second, after checking none was lost.
fn rate_while_holding(cons: &mut [redis::Connection], locks: &[Lock], window: Duration) -> (f64, u64) {
    let before: Vec<(u64, u64)> = cons.iter_mut().map(keeping).collect();
    let start = Instant::now();
    std::thread::sleep(window);
    let after: Vec<(u64, u64)> = cons.iter_mut().map(keeping).collect();
    let secs = start.elapsed().as_secs_f64();
    let lost = locks.iter().filter(|l| !l.is_held()).count();
    assert_eq!(lost, 0, "locks lost while held by their sessions, e.g. {:?}", locks.iter().find(|l| !l.is_held()));
    let (mut keepalives, mut renews) = (0, 0);
    for ((k0, r0), (k1, r1)) in before.into_iter().zip(after) {
        keepalives += k1 - k0;
        renews += r1 - r0;
    }
    assert!(keepalives >= 2, "the sessions were kept alive: {keepalives} keepalives in {secs:.1} s");
    // The engine's checks of single locks (ClientOptions::session_checks):
    // a few a second, whatever the number of locks.
    assert!(renews as f64 <= 4.0 * secs, "{renews} checks in {secs:.1} s");
    ((keepalives + renews) as f64 / secs, keepalives)
}

#[test]
fn a_hundred_thousand_locks_on_one_server_cost_a_few_calls_a_second() {
    const N: usize = 100_000;
    let s = Server::start();
    let client = LockClient::open(&s.url()).unwrap();
    let ttl = ms(1500);
    let locks = take_many(&client, "ses", N, ttl);
    let mut con = s.conn();
    let ids = sessions(&mut con);
    assert_eq!(ids.len(), 1, "one session on the server: {ids:?}");
    assert_eq!(holds(&mut con, &ids[0]), N as i64, "every lock is the session's");
    // Four TTLs: about 12 keepalives, whatever the number of locks.
    let (rate, keepalives) = rate_while_holding(std::slice::from_mut(&mut con), &locks, ms(6000));
    eprintln!("one server, {N} locks: {keepalives} keepalives, {rate:.2} calls a second");
    assert!(rate <= 10.0, "{rate:.1} keepalives and renewals a second for {N} locks");
    let value: String = redis::cmd("GET").arg(locks[7].key()).query(&mut con).unwrap();
    assert!(value.contains(&ids[0]) && value.contains(locks[7].token()), "a session-held value: {value}");
    // Released lock by lock, as always: the engine pipelines the drops.
    drop(locks);
    assert!(
        eventually(ms(60_000), || redis::cmd("DBSIZE").query::<u64>(&mut con).unwrap() == 0),
        "every lock released"
    );
    assert!(eventually(ms(10_000), || holds(&mut con, &ids[0]) == 0), "the session holds nothing");
    // Idle, it is revoked by the client at its second keepalive after.
    assert!(eventually(ms(10_000), || sessions(&mut con).is_empty()), "the idle session is revoked");
}

#[test]
fn a_hundred_thousand_locks_on_a_cluster_cost_one_session_per_master() {
    const N: usize = 100_000;
    let c = Cluster::start(3, 0);
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    let locks = take_many(&client, "ces", N, ms(1500));
    let mut cons: Vec<redis::Connection> = c.masters().into_iter().map(|m| c.node(m).conn()).collect();
    let mut held = 0;
    for con in &mut cons {
        let ids = sessions(con);
        assert_eq!(ids.len(), 1, "one session per master: {ids:?}");
        held += holds(con, &ids[0]);
    }
    assert_eq!(held, N as i64, "every lock is held by its master's session");
    let (rate, keepalives) = rate_while_holding(&mut cons, &locks, ms(6000));
    eprintln!("3 masters, {N} locks: {keepalives} keepalives, {rate:.2} calls a second");
    assert!(rate <= 10.0, "{rate:.1} keepalives and renewals a second for {N} locks on 3 masters");
}

#[test]
fn a_revoked_session_is_every_attached_locks_loss() {
    let s = Server::start();
    let client = LockClient::open(&s.url()).unwrap();
    let ttl = ms(3000);
    let locks: Vec<Lock> =
        (0..20).map(|i| client.try_acquire_with(&format!("rev:{i}"), ttl, &watchdog()).unwrap()).collect();
    let mut con = s.conn();
    let ids = sessions(&mut con);
    assert_eq!(ids.len(), 1);
    let revoked: i64 = redis::cmd("SESSION.REVOKE").arg(&ids[0]).query(&mut con).unwrap();
    assert_eq!(revoked, 1);
    for l in &locks {
        // Heard on the next keepalive, within TTL/3 (generous margin).
        assert_eq!(l.lost_signal().wait_timeout(ms(10_000)), Some(LossReason::SessionRevoked), "{}", l.key());
        assert!(!l.is_held());
        assert!(matches!(l.renew(ttl), Err(Error::NotHeld { .. })), "a lost lock stays lost");
    }
    // The server released them (a revoke is a voluntary end): the next
    // lock gets a new session.
    let again = client.try_acquire_with("rev:0", ttl, &watchdog()).unwrap();
    let now = sessions(&mut con);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], ids[0], "a new session");
    assert!(again.is_held());
}

#[test]
fn a_flushall_that_forgets_the_session_loses_its_locks_as_such() {
    let s = Server::start();
    let client = LockClient::open(&s.url()).unwrap();
    let lock = client.try_acquire_with("flushed", TTL, &watchdog()).unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut s.conn()).unwrap();
    assert_eq!(lock.lost_signal().wait_timeout(ms(10_000)), Some(LossReason::SessionUnknown));
}

#[test]
fn a_session_held_lock_deleted_behind_its_back_is_heard_by_its_check() {
    let s = Server::start();
    let client = LockClient::open(&s.url()).unwrap();
    let ttl = TTL;
    let lock = client.try_acquire_with("deleted", ttl, &watchdog()).unwrap();
    let kept = client.try_acquire_with("kept", ttl, &watchdog()).unwrap();
    assert_eq!(sessions(&mut s.conn()).len(), 1);
    let _: i64 = redis::cmd("DEL").arg("deleted").query(&mut s.conn()).unwrap();
    // A few locks are each checked every TTL/3, as they were renewed.
    assert_eq!(lock.lost_signal().wait_timeout(ms(10_000)), Some(LossReason::NotOwner));
    assert!(kept.is_held(), "the session and its other locks go on");
}

#[test]
fn a_waiting_acquire_is_granted_on_the_session() {
    let s = Server::start();
    let client = LockClient::open(&s.url()).unwrap();
    let other = LockClient::open(&s.url()).unwrap();
    let ttl = ms(3000);
    let first = other.try_acquire_with("waited", ttl, &watchdog()).unwrap();
    let waiter = std::thread::spawn(move || client.acquire_with("waited", ttl, ms(10_000), &watchdog()));
    std::thread::sleep(ms(300));
    first.release().unwrap();
    let lock = waiter.join().unwrap().expect("granted when released");
    let mut con = s.conn();
    let value: String = redis::cmd("GET").arg("waited").query(&mut con).unwrap();
    assert!(value.contains("\"session\"") && value.contains(lock.token()), "held by a session: {value}");
    std::thread::sleep(ttl * 2);
    assert!(lock.is_held(), "kept by its session");
    lock.release().unwrap();
    assert!(!redis::cmd("EXISTS").arg("waited").query::<bool>(&mut con).unwrap());
}

#[test]
fn locks_that_a_session_cannot_hold_renew_on_their_own() {
    let s = Server::start();
    let mut con = s.conn();
    // Sessions turned off; a maximum lifetime (the session would outlive
    // it); a TTL shorter than the client's fixed session TTL.
    let off = LockClient::open_with(&s.url(), ClientOptions::new().sessions(false)).unwrap();
    let fixed = LockClient::open_with(&s.url(), ClientOptions::new().session_ttl(TTL * 2)).unwrap();
    let ttl = TTL;
    let a = off.try_acquire_with("own:a", ttl, &watchdog()).unwrap();
    let long = LockOptions::new().watchdog(WatchdogOptions::new().max_lifetime(ms(60_000)));
    let b = fixed.try_acquire_with("own:b", ttl, &long).unwrap();
    let c = fixed.try_acquire_with("own:c", ttl, &watchdog()).unwrap();
    assert!(sessions(&mut con).is_empty(), "no session was granted");
    // A lock of the fixed TTL or longer is held by it.
    let d = fixed.try_acquire_with("own:d", TTL * 2, &watchdog()).unwrap();
    assert_eq!(sessions(&mut con).len(), 1);
    let renews = calls(&mut con, "lock.renew");
    std::thread::sleep(ttl * 2);
    assert!(calls(&mut con, "lock.renew") - renews >= 6, "three locks renewed on their own");
    assert!(a.is_held() && b.is_held() && c.is_held() && d.is_held());
}

#[test]
fn a_server_without_the_module_still_renews_lock_by_lock() {
    let s = Server::builder().without_module().start();
    let client = LockClient::open(&s.url()).unwrap();
    let ttl = TTL;
    let locks: Vec<Lock> =
        (0..20).map(|i| client.try_acquire_with(&format!("scr:{i}"), ttl, &watchdog()).unwrap()).collect();
    assert_eq!(client.backend(), Backend::Scripts);
    let mut con = s.conn();
    let before = calls(&mut con, "evalsha");
    std::thread::sleep(ttl * 2);
    let renewals = calls(&mut con, "evalsha") - before;
    // Each lock renews every TTL/3: about six times each in two TTLs, and
    // at least twice to be still held after them, however late.
    assert!(renewals >= 20 * 2, "{renewals} script renewals of 20 locks in 2 TTLs");
    assert!(locks.iter().all(Lock::is_held));
    for l in &locks {
        let v: String = redis::cmd("GET").arg(l.key()).query(&mut con).unwrap();
        assert_eq!(v, l.token(), "a plain lease, as the scripts store it");
    }
}

/// A slot moved to another master takes a session-held key to a node
/// where the session does not exist. Defined as safe: the key stays held
/// for its token there (nobody else can take it), the holder keeps it
/// (its client adopts it into a session of the new master, see
/// `moved_and_adopted`) and releases it where it now lives; a new lock on that slot is granted by the new
/// master (a session there, or its own lease after the old master's
/// session is refused), and is held too.
#[test]
fn a_session_held_key_moved_to_another_master_stays_held_and_released_safely() {
    let c = Cluster::start(3, 0);
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    let other = LockClient::open_cluster(&c.urls()).unwrap();
    let ttl = TTL;
    let key = "moved:{slot}:1";
    let lock = client.try_acquire_with(key, ttl, &watchdog()).unwrap();
    let (slot, from) = (c.slot_of(key), c.owner_of(key));
    let to = c.masters().into_iter().find(|&m| m != from).unwrap();
    c.move_slot(slot, to);
    let value: String = redis::cmd("GET").arg(key).query(&mut c.node(to).conn()).unwrap();
    assert!(value.contains("\"session\"") && value.contains(lock.token()), "moved as it was: {value}");
    assert!(matches!(other.try_acquire(key, ttl), Err(Error::NotAcquired { .. })), "nobody else takes it");
    std::thread::sleep(ttl * 2);
    assert!(lock.is_held(), "its session on the old master is still kept");
    assert!(matches!(other.try_acquire(key, ttl), Err(Error::NotAcquired { .. })));
    // A new lock in the moved slot: granted by its new master, and kept.
    let next = client.try_acquire_with("moved:{slot}:2", ttl, &watchdog()).unwrap();
    lock.release().unwrap();
    assert!(!redis::cmd("EXISTS").arg(key).query::<bool>(&mut c.node(to).conn()).unwrap(), "released where it lives");
    std::thread::sleep(ttl * 2);
    assert!(next.is_held());
    let value: String = redis::cmd("GET").arg("moved:{slot}:2").query(&mut c.node(to).conn()).unwrap();
    assert!(value.contains(next.token()), "held on the new master: {value}");
    assert!(matches!(other.try_acquire("moved:{slot}:2", ttl), Err(Error::NotAcquired { .. })));
}

/// The grace the orphan tests give a moved lock (`lock.orphan-grace`):
/// above the client's 5 s sweep through a slot map at most 5 s old, with a
/// loaded machine's margin.
const GRACE_MS: u64 = 20_000;

/// A lock moved (by `mover`) to a master that does not know its session:
/// its live holder's client adopts it into a session there and keeps it
/// past the grace another client's acquire started; a lock whose holder
/// is gone (its session kept alive by nobody) is free for others once
/// that grace has passed.
fn moved_and_adopted(mover: impl FnOnce(&Cluster, u16, usize)) {
    let c = Cluster::start(3, 0);
    for m in c.masters() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("lock.orphan-grace")
            .arg(GRACE_MS)
            .query(&mut c.node(m).conn())
            .unwrap();
    }
    let (kept, dead) = ("orphan:{slot}:kept", "orphan:{slot}:dead");
    let holder = LockClient::open_cluster(&c.urls()).unwrap();
    let other = LockClient::open_cluster(&c.urls()).unwrap();
    let lock = holder.try_acquire_with(kept, TTL, &watchdog()).unwrap();
    let (slot, from) = (c.slot_of(kept), c.owner_of(kept));
    // A holder gone without a release: its session (a minute's: it
    // outlives the move on the old master) kept alive by nobody. (A
    // client whose lock handle is leaked is not gone: the handle keeps
    // its engine, which would adopt the lock too.)
    let mut old = c.node(from).conn();
    let id: String = redis::cmd("SESSION.GRANT").arg(60_000).query(&mut old).unwrap();
    let took: i64 =
        redis::cmd("LOCK.ACQUIRE").arg(dead).arg("gone").arg(60_000).arg("SESSION").arg(&id).query(&mut old).unwrap();
    assert_eq!(took, 1);
    let to = c.masters().into_iter().find(|&m| m != from).unwrap();
    mover(&c, slot, to);
    let mut con = c.node(to).conn();
    // Another client wants both: refused, and each gets the grace.
    let mut end = 0;
    for key in [kept, dead] {
        assert!(matches!(other.try_acquire(key, ms(1500)), Err(Error::NotAcquired { .. })), "{key} is held");
        end = redis::cmd("PEXPIRETIME").arg(key).query(&mut con).unwrap();
        assert!(end > 0, "{key}: the orphan's end");
    }
    // The holder's client adopts its lock on the new master.
    let adopted = || {
        let value: String = redis::cmd("GET").arg(kept).query(&mut c.node(to).conn()).unwrap();
        let ttl: i64 = redis::cmd("PTTL").arg(kept).query(&mut c.node(to).conn()).unwrap();
        ttl == -1 && sessions(&mut c.node(to).conn()).iter().any(|id| value.contains(id.as_str()))
    };
    assert!(eventually(ms(GRACE_MS), adopted), "adopted by a session of the new master");
    assert!(lock.is_held(), "{:?}", lock.loss_reason());
    // The dead holder's lock is granted once its grace ends; the adopted one stays.
    let next = other.acquire(dead, ms(GRACE_MS), ms(3 * GRACE_MS)).expect("granted after the grace");
    let (secs, us): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    assert!(secs * 1000 + us / 1000 >= end, "not before the orphan's end");
    assert!(matches!(other.try_acquire(kept, ms(1500)), Err(Error::NotAcquired { .. })), "kept past the grace");
    assert!(lock.is_held(), "{:?}", lock.loss_reason());
    let leased: String = redis::cmd("INFO").arg("lock").query(&mut con).unwrap();
    assert!(leased.contains("lock_orphans_leased:2") && leased.contains("lock_orphans_adopted:1"), "{leased}");
    lock.release().unwrap();
    assert!(!redis::cmd("EXISTS").arg(kept).query::<bool>(&mut con).unwrap(), "released where it lives");
    next.release().unwrap();
}

#[test]
fn a_moved_lock_is_adopted_by_its_live_holder_and_a_dead_holders_ends_after_the_grace() {
    moved_and_adopted(|c, slot, to| c.move_slot(slot, to));
}

#[test]
fn a_lock_moved_by_atomic_slot_migration_is_adopted_too() {
    let v = redis_lock_harness::server_version();
    if !(v.is_valkey() && v.major >= 9) {
        println!("skipped: {v:?} has no atomic slot migration (CLUSTER MIGRATESLOTS is Valkey 9)");
        return;
    }
    moved_and_adopted(|c, slot, to| c.atomic_move_slots(slot, slot, to));
}

/// A failover promotes a replica, which has the session (replicated):
/// the keepalives follow it there, and the locks stay held.
#[test]
fn a_session_follows_its_master_through_a_failover() {
    let c = Cluster::start(3, 1);
    let m = c.masters()[1];
    let client = LockClient::open_cluster(&c.urls()).unwrap();
    let ttl = TTL;
    let locks: Vec<Lock> =
        (0..3).map(|i| client.try_acquire_with(&c.key_on(&format!("fo{i}:"), m), ttl, &watchdog()).unwrap()).collect();
    let ids = sessions(&mut c.node(m).conn());
    assert_eq!(ids.len(), 1, "{ids:?}");
    let promoted = c.failover(m, "");
    std::thread::sleep(ttl * 2);
    for l in &locks {
        assert!(l.is_held(), "{}: {:?}", l.key(), l.loss_reason());
    }
    let mut con = c.node(promoted).conn();
    assert!(sessions(&mut con).contains(&ids[0]), "the promoted replica has the session");
    let before = calls(&mut con, "session.keepalive");
    std::thread::sleep(ttl);
    assert!(calls(&mut con, "session.keepalive") > before, "kept alive on the promoted replica");
    assert_eq!(holds(&mut con, &ids[0]), 3);
}

/// Semaphores (and read-write locks, elections) ask for the session too;
/// a module that does not take `SESSION` on their command answers a
/// syntax error, which writes nothing, and the permit is taken again on
/// its own lease. Either way it is held.
#[test]
fn a_permit_is_held_by_the_session_or_on_its_own() {
    let s = Server::start();
    let client = LockClient::open(&s.url()).unwrap();
    let ttl = TTL;
    let permit = client.semaphore("sem", 2).try_acquire_with(ttl, &watchdog()).unwrap();
    let lock = client.try_acquire_with("plain", ttl, &watchdog()).unwrap();
    let mut con = s.conn();
    let renews = calls(&mut con, "sem.renew");
    std::thread::sleep(ttl * 2);
    assert!(permit.is_held() && lock.is_held());
    let ids = sessions(&mut con);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let on_session = holds(&mut con, &ids[0]);
    let renewed = calls(&mut con, "sem.renew") - renews;
    // On its own, the permit renewed every TTL/3: at least twice to be
    // still held after two TTLs, however late.
    assert!(on_session == 2 || (on_session == 1 && renewed >= 2), "holds {on_session}, SEM.RENEW {renewed}");
    permit.release().unwrap();
    lock.release().unwrap();
}
