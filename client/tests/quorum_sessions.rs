//! Quorum locks held by one session per server (docs/sessions.md, "Quorum
//! locks"): 1,000 locks cost each server one keepalive per TTL/3 and no
//! renewal; a session revoked on one server drops that server's votes for
//! good, on a majority it is every lock's loss; a server restarted empty
//! loses its votes while the other two hold the locks, and they are taken
//! again with a new session.

mod support;

use std::time::Duration;

use redis_lock_client::{LockOptions, LossReason, QuorumClient, QuorumLock, QuorumOptions, WatchdogOptions};
use redis_lock_harness::Server;
use support::{calls, eventually, get, ms, rt};

/// The TTL of every lock here: keepalives every second may be late by
/// more than a second on a loaded machine and still keep them.
const TTL: u64 = 3_000;

/// How long a test waits for what must happen (only a failure waits it).
const PATIENCE: Duration = Duration::from_secs(15);

fn servers(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

/// A client of `s` with the default sessions, and a node timeout that a
/// live server on a loaded machine answers well within.
fn client(s: &[Server], opts: QuorumOptions) -> QuorumClient {
    let urls: Vec<String> = s.iter().map(Server::url).collect();
    QuorumClient::open_with(&urls, opts.node_timeout(ms(1000)).connect_timeout(ms(2000))).expect("client")
}

fn watchdog() -> LockOptions {
    LockOptions::new().watchdog(WatchdogOptions::new())
}

fn sessions(s: &Server) -> Vec<String> {
    redis::cmd("SESSION.LIST").query(&mut s.conn()).expect("SESSION.LIST")
}

/// `SESSION.INFO id`'s `holds` (0 once the session is gone).
fn holds(s: &Server, id: &str) -> i64 {
    let v: Option<Vec<redis::Value>> = redis::cmd("SESSION.INFO").arg(id).query(&mut s.conn()).expect("SESSION.INFO");
    let Some(v) = v else { return 0 };
    let at = v.iter().position(|f| matches!(f, redis::Value::BulkString(b) if b == b"holds")).expect("holds");
    redis::from_redis_value(v[at + 1].clone()).expect("holds is a number")
}

/// The one session `s` has.
fn only_session(s: &Server) -> String {
    let ids = sessions(s);
    assert_eq!(ids.len(), 1, "one session on the server: {ids:?}");
    ids[0].clone()
}

/// Each server of `on` granted its session before the locks under test
/// are taken: a grant that failed on a loaded machine is asked again a
/// second later, and the locks taken meanwhile are held on leases of their
/// own there (renewed lock by lock, never attached). The lock that asks is
/// released (on its own leases, if its grant came first): the sessions,
/// idle for two keepalives at the earliest, hold the next locks.
fn sessions_first(c: &QuorumClient, on: &[&Server]) {
    let first = c.acquire_with("first", ms(TTL), ms(10_000), &watchdog()).expect("acquire");
    assert!(eventually(PATIENCE, || on.iter().all(|srv| sessions(srv).len() == 1)), "a session on each server");
    drop(first);
}

/// `n` watchdog locks `prefix:i`, taken by 16 tasks at once.
fn take(c: &QuorumClient, prefix: &str, n: usize) -> Vec<QuorumLock> {
    const TASKS: usize = 16;
    rt().block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (c, prefix) = (c.clone(), prefix.to_string());
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    for i in (t..n).step_by(TASKS) {
                        let key = format!("{prefix}:{i}");
                        out.push(c.acquire_with_async(&key, ms(TTL), ms(10_000), &watchdog()).await.expect("acquire"));
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

/// Whether every server of `on` holds each of `locks` with its session
/// there (the key's value names the session's id).
fn session_held(on: &[&Server], locks: &[QuorumLock]) -> bool {
    on.iter().all(|s| {
        let id = match sessions(s).as_slice() {
            [id] => id.clone(),
            _ => return false,
        };
        locks.iter().all(|l| get(s, l.key()).is_some_and(|v| v.contains(&id) && v.contains(l.token())))
    })
}

fn all_held(locks: &[QuorumLock]) -> bool {
    locks.iter().all(QuorumLock::is_held)
}

#[test]
fn a_thousand_quorum_locks_cost_each_server_keepalives_and_no_renewal() {
    const N: usize = 1_000;
    let s = servers(3);
    // No one-by-one checks here: the count of LOCK.RENEW is then exactly
    // the per-lock renewals, which must be none.
    let c = client(&s, QuorumOptions::new().session_checks(0));
    let all: Vec<&Server> = s.iter().collect();
    sessions_first(&c, &all);
    let locks = take(&c, "q", N);
    // A grant that came after its acquire was decided is confirmed by
    // one renewal there, at once (`Vote::Pending`); then nothing is sent.
    std::thread::sleep(ms(2 * TTL));
    for srv in &s {
        let id = only_session(srv);
        assert!(eventually(PATIENCE, || holds(srv, &id) == N as i64), "every lock attached on every server");
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut srv.conn()).expect("RESETSTAT");
    }
    // Four TTLs.
    std::thread::sleep(ms(4 * TTL));
    let lost: Vec<_> = locks.iter().filter(|l| !l.is_held()).collect();
    assert!(lost.is_empty(), "{} locks lost, e.g. {:?}", lost.len(), lost.first());
    for srv in &s {
        let (keepalives, renews) = (calls(&mut srv.conn(), "session.keepalive"), calls(&mut srv.conn(), "lock.renew"));
        let acquires = calls(&mut srv.conn(), "lock.acquire");
        eprintln!("{}: {keepalives} keepalives, {renews} renewals, {acquires} acquires for {N} locks", srv.url());
        assert_eq!((renews, acquires), (0, 0), "no lock renewed or taken again on its own");
        // One every TTL/3 (12 in the window), a few more after failures.
        assert!((2..=40).contains(&keepalives), "{keepalives} keepalives in {} ms", 4 * TTL);
    }
    drop(locks);
    for srv in &s {
        let mut con = srv.conn();
        assert!(eventually(PATIENCE, || redis::cmd("DBSIZE").query::<u64>(&mut con).unwrap() == 0), "released");
    }
}

#[test]
fn a_session_revoked_on_one_server_drops_its_votes_for_good_and_on_a_second_every_lock() {
    let s = servers(3);
    let c = client(&s, QuorumOptions::new());
    let all: Vec<&Server> = s.iter().collect();
    sessions_first(&c, &all);
    let locks = take(&c, "r", 20);
    // Each server's vote known (a late grant is confirmed at once).
    assert!(eventually(PATIENCE, || session_held(&all, &locks)), "every lock held by each server's session");
    let old = only_session(&s[0]);
    let revoked: i64 = redis::cmd("SESSION.REVOKE").arg(&old).query(&mut s[0].conn()).expect("revoke");
    assert_eq!(revoked, 1);
    // The server released them there at once; the client hears it on its
    // next keepalive (within TTL/3, then one SESSION.INFO): held by the
    // other two servers' votes, and a revoked vote is not taken again.
    std::thread::sleep(ms(3 * TTL));
    assert!(all_held(&locks), "held by two of three");
    assert!(locks.iter().all(|l| l.lost_signal().reason().is_none()));
    assert!(locks.iter().all(|l| get(&s[0], l.key()).is_none()), "not taken again on the revoking server");
    // A second server's revoke leaves one vote: every lock lost, as revoked.
    let second = only_session(&s[1]);
    let _: i64 = redis::cmd("SESSION.REVOKE").arg(&second).query(&mut s[1].conn()).expect("revoke");
    for l in &locks {
        assert_eq!(l.lost_signal().wait_timeout(PATIENCE), Some(LossReason::SessionRevoked), "{}", l.key());
    }
}

#[test]
fn sessions_revoked_on_a_majority_are_every_locks_loss() {
    let s = servers(3);
    let c = client(&s, QuorumOptions::new());
    sessions_first(&c, &s.iter().collect::<Vec<_>>());
    let locks = take(&c, "m", 20);
    for srv in &s[1..] {
        let id = only_session(srv);
        let _: i64 = redis::cmd("SESSION.REVOKE").arg(&id).query(&mut srv.conn()).expect("revoke");
    }
    for l in &locks {
        assert_eq!(l.lost_signal().wait_timeout(PATIENCE), Some(LossReason::SessionRevoked), "{}", l.key());
        assert!(!l.is_held());
        assert!(l.renew(ms(TTL)).unwrap_err().is_not_held(), "a lost lock stays lost");
    }
    // The third server still holds them until released.
    drop(locks);
    let mut con = s[0].conn();
    assert!(eventually(PATIENCE, || redis::cmd("DBSIZE").query::<u64>(&mut con).unwrap() == 0));
}

#[test]
fn a_server_restarted_empty_loses_its_vote_and_the_other_two_hold_the_locks() {
    let mut s = servers(3);
    let c = client(&s, QuorumOptions::new());
    sessions_first(&c, &s.iter().collect::<Vec<_>>());
    let locks = take(&c, "k", 20);
    std::thread::sleep(ms(TTL));
    let old = only_session(&s[2]);
    s[2].kill();
    // Down for longer than the TTL (Redlock's delayed restart): the votes
    // of the other two keep every lock.
    std::thread::sleep(ms(TTL + 500));
    assert!(all_held(&locks), "held by two of three");
    s[2].restart();
    assert_eq!(get(&s[2], locks[0].key()), None, "restarted empty");
    // Its session is unknown there: each vote is taken again with a new one.
    let all: Vec<&Server> = s.iter().collect();
    assert!(eventually(PATIENCE, || session_held(&all, &locks)), "every vote taken again on the restarted server");
    assert_ne!(only_session(&s[2]), old);
    assert!(all_held(&locks));
    assert!(locks.iter().all(|l| l.lost_signal().reason().is_none()));
}

#[test]
fn sessions_off_renew_quorum_locks_lock_by_lock() {
    let s = servers(3);
    let c = client(&s, QuorumOptions::new().sessions(false));
    let locks = take(&c, "o", 10);
    for srv in &s {
        assert!(sessions(srv).is_empty(), "no session granted");
    }
    std::thread::sleep(ms(2 * TTL));
    assert!(all_held(&locks), "renewed lock by lock");
    for srv in &s {
        assert!(calls(&mut srv.conn(), "lock.renew") > 10, "renewed on every server");
    }
}

#[test]
fn a_server_without_the_module_renews_its_votes_lock_by_lock() {
    let s = vec![Server::start(), Server::start(), Server::builder().without_module().start()];
    let c = client(&s, QuorumOptions::new().session_checks(0));
    sessions_first(&c, &[&s[0], &s[1]]);
    let locks = take(&c, "w", 10);
    for srv in &s[..2] {
        let id = only_session(srv);
        assert!(eventually(PATIENCE, || holds(srv, &id) == 10), "every lock attached on {}", srv.url());
    }
    // A grant that came after its acquire was decided is confirmed by one
    // renewal, at once (`Vote::Pending`): before the count starts.
    std::thread::sleep(ms(TTL));
    for srv in &s {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut srv.conn()).expect("RESETSTAT");
    }
    std::thread::sleep(ms(2 * TTL));
    assert!(all_held(&locks));
    assert_eq!(
        calls(&mut s[0].conn(), "lock.renew") + calls(&mut s[1].conn(), "lock.renew"),
        0,
        "the module servers' sessions keep them"
    );
    // The scripts' renewals there (EVALSHA or EVAL), lock by lock.
    let scripted = calls(&mut s[2].conn(), "evalsha") + calls(&mut s[2].conn(), "eval");
    assert!(scripted >= 10, "{scripted} script renewals on the server without the module");
    let token = locks[0].token().to_string();
    assert_eq!(get(&s[2], locks[0].key()).as_deref(), Some(token.as_str()), "its own lease there");
}
