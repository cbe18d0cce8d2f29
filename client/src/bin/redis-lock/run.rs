//! `redis-lock run`: a command under a lock kept alive by the watchdog.

use std::process::{Command, ExitCode};
use std::time::Duration;

use redis_lock_client::{ClientOptions, Error, HeldLock, LockClient, LockOptions, LossReason, LostSignal};

use crate::args::{HoldArgs, Mode, RunArgs};
use crate::fail::{redis_fail, usage, Fail, EXIT_EVICTED, EXIT_LOST};
use crate::supervise;
use crate::target::{open_quorum, Servers};

/// `redis-lock run [--url URL]... [--cluster] [--ttl MS] [--wait MS | -w SECONDS | -n] [-E CODE]
/// [--grace MS] [--max-lifetime MS] [--lock-delay MS] [--max-hold MS] [--token TOKEN]
/// [--on-revoke SIGNAL] [--no-session] [--run-id RUN_ID | --permits N | -s | -x] KEY [KEY...] -- CMD [ARGS...]`
pub fn cmd_run(a: RunArgs) -> Result<ExitCode, Fail> {
    if a.command.is_empty() {
        return Err(usage("run needs a command after --"));
    }
    let ttl = Duration::from_millis(a.ttl);
    let wait = a.wait();
    let lopts = a.hold.lock_options();
    let mode = a.mode();
    let [key] = a.keys.as_slice() else { return run_all(&a, ttl, wait, &lopts) };
    let key = key.as_str();
    let acquired = if let Servers::Quorum(urls) = a.target.servers() {
        if a.run_id.is_some() {
            return Err(usage("--run-id (takeover) works with one --url only"));
        }
        // No quorum semaphore or read-write lock: permits counted on a
        // majority do not bound the holders (see docs/semaphores.md).
        if mode != Mode::Lock {
            return Err(usage("--permits, --shared and --exclusive work with one --url (or --cluster), not a quorum"));
        }
        // Node timeout, drift allowance and retry pauses: the quorum
        // client's defaults (5 % of the TTL; 1 % + 2 ms; 50-250 ms).
        open_quorum(&urls, !a.hold.no_session)?
            .acquire_with(key, ttl, wait, &lopts)
            .map(|l| Box::new(l) as Box<dyn HeldLock>)
    } else {
        let client = open_client(&a, ttl)?;
        match (&a.run_id, mode) {
            (Some(run), _) => client.takeover_with(key, run, ttl, &lopts),
            (None, Mode::Lock) => client.acquire_with(key, ttl, wait, &lopts),
            (None, Mode::Permits(n)) => client.semaphore(key, n).acquire_with(ttl, wait, &lopts),
            (None, Mode::Shared) => client.rw_lock(key).read().acquire_with(ttl, wait, &lopts),
            (None, Mode::Exclusive) => client.rw_lock(key).write().acquire_with(ttl, wait, &lopts),
        }
        .map(|l| Box::new(l) as Box<dyn HeldLock>)
    };
    let lock = match acquired {
        Ok(l) => l,
        Err(Error::NotAcquired { .. }) => {
            return Err(Fail(a.conflict_exit_code, format!("lock {key:?} is held by someone else")))
        }
        Err(e) => return Err(acquire_fail(e)),
    };
    run_under(&[lock.as_ref()], &a.command, &a.hold, None)
}

/// `run` with several keys: plain locks, all granted at once or none
/// (`LockClient::lock_all`: LOCK.ACQUIREALL per hash slot, in one global
/// order, rolled back unless every group is granted within the wait).
fn run_all(a: &RunArgs, ttl: Duration, wait: Duration, lopts: &LockOptions) -> Result<ExitCode, Fail> {
    if a.run_id.is_some() || a.mode() != Mode::Lock {
        return Err(usage("several keys are plain locks only: no --run-id, --permits, --shared or --exclusive"));
    }
    if let Servers::Quorum(_) = a.target.servers() {
        return Err(usage("several keys work with one --url (or --cluster), not a quorum"));
    }
    let client = open_client(a, ttl)?;
    let keys: Vec<&str> = a.keys.iter().map(String::as_str).collect();
    let locks = match client.lock_all_with(&keys, ttl, wait, lopts) {
        Ok(locks) => locks,
        Err(Error::NotAcquired { .. }) => {
            return Err(Fail(a.conflict_exit_code, format!("one of the locks {keys:?} is held by someone else")))
        }
        Err(e) => return Err(acquire_fail(e)),
    };
    let held: Vec<&dyn HeldLock> = locks.iter().map(|l| l as &dyn HeldLock).collect();
    run_under(&held, &a.command, &a.hold, None)
}

/// The client of a run on one server or a cluster.
fn open_client(a: &RunArgs, ttl: Duration) -> Result<LockClient, Fail> {
    a.target.open(client_options(&a.hold, ttl))
}

/// The client options of a run or campaign of `ttl`: a reply slower than
/// a third of the TTL would make the watchdog miss its cadence anyway, so
/// such a call fails and is retried instead; sessions unless
/// `--no-session`.
pub fn client_options(hold: &HoldArgs, ttl: Duration) -> ClientOptions {
    let timeout = (ttl / 3).clamp(Duration::from_millis(10), Duration::from_secs(2));
    ClientOptions::new().response_timeout(timeout).sessions(!hold.no_session)
}

/// An acquire's failure other than "held": a bad argument is a usage
/// error, anything else Redis's.
pub fn acquire_fail(e: Error) -> Fail {
    match e {
        e @ Error::InvalidArgument(_) => usage(e.to_string()),
        e => redis_fail(e),
    }
}

/// Runs `command` while `locks` are held, under the supervisor's rules
/// (supervise.rs), and releases them once CMD's group is gone; the loss of
/// any one ends CMD. CMD finds the lock in `REDIS_LOCK_KEY`,
/// `REDIS_LOCK_TOKEN`, `REDIS_LOCK_FENCE` (when fenced) and, for a
/// leadership, `REDIS_LOCK_TERM`; several locks (one token) in
/// `REDIS_LOCK_KEYS` and `REDIS_LOCK_FENCES`, one a line, in the order
/// named.
pub fn run_under(
    locks: &[&dyn HeldLock],
    command: &[String],
    hold: &HoldArgs,
    term: Option<u64>,
) -> Result<ExitCode, Fail> {
    let grace = hold.grace();
    let (Some(lock), Some((program, cmd_args))) = (locks.first(), command.split_first()) else {
        return Err(usage("a command is needed after --"));
    };
    let key = locks.iter().map(|l| l.key()).collect::<Vec<_>>().join(", ");
    let mut cmd = Command::new(program);
    cmd.args(cmd_args).env("REDIS_LOCK_TOKEN", lock.token());
    // Removed when absent, so a run nested in another's CMD does not
    // pass on the outer lock's key, fence or term as its own.
    if let [one] = locks {
        cmd.env("REDIS_LOCK_KEY", one.key()).env_remove("REDIS_LOCK_KEYS").env_remove("REDIS_LOCK_FENCES");
        match one.fence() {
            Some(f) => cmd.env("REDIS_LOCK_FENCE", f.to_string()),
            None => cmd.env_remove("REDIS_LOCK_FENCE"),
        };
    } else {
        let keys: Vec<&str> = locks.iter().map(|l| l.key()).collect();
        cmd.env("REDIS_LOCK_KEYS", keys.join("\n")).env_remove("REDIS_LOCK_KEY").env_remove("REDIS_LOCK_FENCE");
        let fences: Option<Vec<String>> = locks.iter().map(|l| l.fence().map(|f| f.to_string())).collect();
        match fences {
            Some(f) => cmd.env("REDIS_LOCK_FENCES", f.join("\n")),
            None => cmd.env_remove("REDIS_LOCK_FENCES"),
        };
    }
    match term {
        Some(t) => cmd.env("REDIS_LOCK_TERM", t.to_string()),
        None => cmd.env_remove("REDIS_LOCK_TERM"),
    };
    // From the main thread: see `supervise::spawn`.
    let child = match supervise::spawn(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            return Err(Fail(code, format!("cannot run {program:?}: {e}")));
        }
    };
    let pid = child.pid();
    // The lock is released only once CMD's whole process group is gone, so
    // nothing `run` started outlives it (see supervise.rs).
    let lost: Vec<LostSignal> = locks.iter().map(|l| l.lost_signal()).collect();
    let outcome = child.wait(&lost, grace, hold.on_revoke(), |reason| {
        eprintln!(
            "redis-lock: lost lock {key:?} ({reason}); terminating {program:?} (pid {pid}) and its process group"
        );
    });
    if let Some(reason) = outcome.lost {
        let (code, how) = lost_exit(reason);
        // A session's revoke may say why.
        let why = lost.iter().find_map(|l| l.session_revoke_reason()).map(|w| format!(": {w}")).unwrap_or_default();
        return Err(Fail(code, format!("{program:?} was terminated because lock {key:?} was {how}{why}")));
    }
    let mut lost_code = None;
    for lock in locks {
        if let Err(e) = lock.release() {
            // CMD finished; say if a lock did not last until then.
            eprintln!("redis-lock: releasing {:?} after {program:?} exited: {e}", lock.key());
            if e.is_not_held() {
                lost_code.get_or_insert(lock.lost_signal().reason().map_or(EXIT_LOST, |r| lost_exit(r).0));
            }
        }
    }
    if let Some(code) = lost_code {
        return Err(Fail(code, String::new()));
    }
    Ok(ExitCode::from(outcome.code))
}

/// The exit status of a loss: 78 when the server evicted the key, 79
/// otherwise.
pub fn lost_exit(reason: LossReason) -> (u8, &'static str) {
    match reason {
        LossReason::Evicted => (EXIT_EVICTED, "evicted by the server (maxmemory-policy)"),
        LossReason::Revoked => (EXIT_LOST, "revoked and its deadline passed"),
        LossReason::SessionEnded => (EXIT_LOST, "lost with its session (it ended on the server; how was not told)"),
        LossReason::SessionExpired => {
            (EXIT_LOST, "lost with its session (it expired on the server: no keepalive by its deadline)")
        }
        LossReason::SessionRevoked => (EXIT_LOST, "lost with its session (revoked on the server: SESSION.REVOKE)"),
        LossReason::SessionUnknown => (
            EXIT_LOST,
            "lost with its session (unknown to the server: FLUSHALL, a restart without persistence, a failover)",
        ),
        _ => (EXIT_LOST, "lost"),
    }
}
