//! How a session's end reaches its holders (docs/sessions.md, "Client"):
//! a keepalive answers `0`, the engine asks the node `SESSION.INFO id`,
//! and every lock, permit and leadership of the session is lost with the
//! precise reason: `SessionRevoked` (`SESSION.REVOKE` from another
//! connection), `SessionExpired` (the server's clock jumped past the
//! session's deadline while the client still counted it valid: a restart
//! from the AOF with a shifted clock), `SessionUnknown` (a restart without
//! persistence: the server never heard of it). `redis-lock run` says which
//! when it exits 79; `lock_all`'s locks are held by the session too. With `session_checks(0)` no lock is checked on its
//! own (such a check would hear a deleted key as `NotOwner` first), so
//! what is heard comes from the keepalive.

mod cli_support;
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli_support::BIN;
use redis_lock_client::{ClientOptions, LockClient, LockOptions, LossReason, WatchdogOptions};
use redis_lock_harness::Server;
use support::{eventually, ms};

const PATIENCE: Duration = Duration::from_secs(30);

/// A client whose watchdog locks are kept by sessions, none checked on
/// its own.
fn client(s: &Server) -> LockClient {
    let opts =
        ClientOptions::new().response_timeout(ms(2000)).connect_timeout(ms(2000)).sessions(true).session_checks(0);
    LockClient::open_with(&s.url(), opts).expect("client")
}

fn watched() -> LockOptions {
    LockOptions::new().watchdog(WatchdogOptions::new())
}

fn sessions(s: &Server) -> Vec<String> {
    redis::cmd("SESSION.LIST").query(&mut s.conn()).expect("SESSION.LIST")
}

/// The one session on `s`.
fn the_session(s: &Server) -> String {
    let ids = sessions(s);
    assert_eq!(ids.len(), 1, "one session for the client: {ids:?}");
    ids[0].clone()
}

#[test]
fn a_revoked_session_is_every_holds_loss_as_revoked() {
    let s = Server::start();
    let c = client(&s);
    let ttl = ms(3_000);
    let lock = c.try_acquire_with("end:lock", ttl, &watched()).expect("acquire");
    let permit = c.semaphore("end:pool", 2).try_acquire_with(ttl, &watched()).expect("a permit");
    let lead = c.election("end:lead").campaign_with("me", ttl, ms(0), &watched()).expect("leads");
    let id = the_session(&s);
    assert_eq!(lock.lost_signal().session_revoke_reason(), None, "held");
    let revoked: i64 = redis::cmd("SESSION.REVOKE").arg(&id).arg("REASON").arg("rotate").query(&mut s.conn()).unwrap();
    assert_eq!(revoked, 1);
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::SessionRevoked));
    assert_eq!(lock.lost_signal().session_revoke_reason().as_deref(), Some("rotate"));
    assert_eq!(permit.lost_signal().wait_timeout(PATIENCE), Some(LossReason::SessionRevoked));
    assert_eq!(lead.lost_signal().wait_timeout(PATIENCE), Some(LossReason::SessionRevoked));
    assert!(!lock.is_held() && !permit.is_held());
    assert_eq!(LossReason::SessionRevoked.to_string(), "the session that held it was revoked (SESSION.REVOKE)");
    // The next lock gets a new session.
    let again = c.try_acquire_with("end:lock", ttl, &watched()).expect("acquire again");
    assert!(again.is_held());
    assert_ne!(the_session(&s), id);
}

#[test]
fn a_server_restarted_without_persistence_does_not_know_the_session() {
    let mut s = Server::start();
    let c = client(&s);
    // A TTL far longer than the restart: the client's own validity does
    // not run out first (that would be `Expired`).
    let lock = c.try_acquire_with("end:unknown", ms(20_000), &watched()).expect("acquire");
    assert_eq!(sessions(&s).len(), 1);
    s.restart();
    assert!(sessions(&s).is_empty(), "nothing persisted");
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::SessionUnknown));
}

#[test]
fn a_session_the_server_expired_after_its_clock_jumped_is_lost_as_expired() {
    let mut s = Server::builder().arg("appendonly", "yes").arg("appendfsync", "always").start();
    let c = client(&s);
    // TTL 20 s: the clock jumps 60 s, past the session's deadline, while
    // the client counts it valid for 13 s or more after the last
    // keepalive; the server remembers the end for a minute after it.
    let lock = c.try_acquire_with("end:expired", ms(20_000), &watched()).expect("acquire");
    let id = the_session(&s);
    s.restart_with_clock_offset_ms(60_000);
    let mut con = s.conn();
    // The AOF brought the session back with its deadline, now past: the
    // server ended it as expired (the key had no lock-delay: gone).
    assert!(
        eventually(PATIENCE, || redis::cmd("EXISTS").arg("end:expired").query::<i64>(&mut con).unwrap() == 0),
        "the expired session's lock is released"
    );
    let state: Vec<redis::Value> = redis::cmd("SESSION.INFO").arg(&id).query(&mut con).unwrap();
    assert!(state.contains(&redis::Value::BulkString(b"expired".to_vec())), "{state:?}");
    assert_eq!(lock.lost_signal().wait_timeout(PATIENCE), Some(LossReason::SessionExpired));
}

/// `redis-lock run` exits 79 and says how the session ended, and why.
#[test]
fn run_says_its_session_was_revoked() {
    let s = Server::start();
    let dir = std::env::temp_dir().join(format!("redis-lock-session-end-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let started = dir.join("started");
    let script = format!("touch {}; sleep 60", started.display());
    let url = s.url();
    let args = ["run", "--url", &url, "--ttl", "3000", "end:run", "--", "sh", "-c", &script];
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-lock run");
    assert!(eventually(PATIENCE, || started.exists()), "CMD started");
    let id = the_session(&s);
    let revoked: i64 =
        redis::cmd("SESSION.REVOKE").arg(&id).arg("REASON").arg("node drain").query(&mut s.conn()).unwrap();
    assert_eq!(revoked, 1);
    let end = Instant::now() + PATIENCE * 2;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < end, "run did not exit");
        std::thread::sleep(ms(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.code(), Some(79), "{err}");
    assert!(err.contains("revoked on the server: SESSION.REVOKE): node drain"), "{err}");
}

/// `lock_all`'s watchdog locks are held by the client's session, as
/// single locks are (one `LOCK.ACQUIREALL … SESSION id`, also after a
/// wait), and lost with it.
#[test]
fn lock_all_holds_its_keys_with_the_session() {
    let s = Server::start();
    let c = client(&s);
    let other = LockClient::open(&s.url()).expect("client");
    let ttl = ms(3_000);
    let first = other.try_acquire_with("all:{t}:b", ttl, &watched()).expect("acquire");
    let waiter = {
        let c = c.clone();
        std::thread::spawn(move || c.lock_all_with(&["all:{t}:a", "all:{t}:b"], ttl, ms(20_000), &watched()))
    };
    let mut con = s.conn();
    assert!(
        eventually(PATIENCE, || redis::cmd("LOCK.TOP")
            .query::<Vec<redis::Value>>(&mut con)
            .is_ok_and(|t| !t.is_empty())),
        "the request waits"
    );
    first.release().expect("release");
    let locks = waiter.join().unwrap().expect("granted after the wait");
    let mine: Vec<String> = sessions(&s)
        .into_iter()
        .filter(|id| {
            let v: Option<String> = redis::cmd("GET").arg("all:{t}:a").query(&mut con).unwrap();
            v.is_some_and(|v| v.contains(id.as_str()))
        })
        .collect();
    assert_eq!(mine.len(), 1, "one session holds the keys");
    for l in &locks {
        let v: String = redis::cmd("GET").arg(l.key()).query(&mut con).unwrap();
        assert!(v.contains(&mine[0]) && v.contains(l.token()), "{}: {v}", l.key());
        let left: i64 = redis::cmd("PTTL").arg(l.key()).query(&mut con).unwrap();
        assert_eq!(left, -1, "{}: kept by the session, not by its own lease", l.key());
    }
    // Held through several keepalives without a renewal of their own.
    std::thread::sleep(ms(3_500));
    assert!(locks.iter().all(|l| l.is_held()));
    let revoked: i64 = redis::cmd("SESSION.REVOKE").arg(&mine[0]).query(&mut con).unwrap();
    assert_eq!(revoked, 1);
    for l in &locks {
        assert_eq!(l.lost_signal().wait_timeout(PATIENCE), Some(LossReason::SessionRevoked), "{}", l.key());
    }
}
