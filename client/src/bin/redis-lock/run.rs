//! `redis-lock run`: a command under a lock kept alive by the watchdog.

use std::process::{Command, ExitCode};
use std::time::Duration;

use redis_lock_client::{ClientOptions, Error, HeldLock, LossReason};

use crate::args::{HoldArgs, Mode, RunArgs};
use crate::fail::{redis_fail, usage, Fail, EXIT_EVICTED, EXIT_LOST};
use crate::supervise;
use crate::target::{open_quorum, Servers};

/// `redis-lock run [--url URL]... [--cluster] [--ttl MS] [--wait MS | -w SECONDS | -n] [-E CODE]
/// [--grace MS] [--max-lifetime MS] [--lock-delay MS] [--max-hold MS] [--token TOKEN]
/// [--run-id RUN_ID | --permits N | -s | -x] KEY -- CMD [ARGS...]`
pub fn cmd_run(a: RunArgs) -> Result<ExitCode, Fail> {
    let key = a.key.as_str();
    if a.command.is_empty() {
        return Err(usage("run needs a command after --"));
    }
    let ttl = Duration::from_millis(a.ttl);
    let wait = a.wait();
    let lopts = a.hold.lock_options();
    let mode = a.mode();
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
        open_quorum(&urls)?.acquire_with(key, ttl, wait, &lopts).map(|l| Box::new(l) as Box<dyn HeldLock>)
    } else {
        // A reply slower than a third of the TTL would make the watchdog
        // miss its cadence anyway; fail such a call and retry instead.
        let timeout = (ttl / 3).clamp(Duration::from_millis(10), Duration::from_secs(2));
        let client = a.target.open(ClientOptions::new().response_timeout(timeout))?;
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
    run_under(lock.as_ref(), &a.command, &a.hold, None)
}

/// An acquire's failure other than "held": a bad argument is a usage
/// error, anything else Redis's.
pub fn acquire_fail(e: Error) -> Fail {
    match e {
        e @ Error::InvalidArgument(_) => usage(e.to_string()),
        e => redis_fail(e),
    }
}

/// Runs `command` while `lock` is held, under the supervisor's rules
/// (supervise.rs), and releases the lock once CMD's group is gone. CMD
/// finds the lock in `REDIS_LOCK_KEY`, `REDIS_LOCK_TOKEN`,
/// `REDIS_LOCK_FENCE` (when fenced) and, for a leadership, `REDIS_LOCK_TERM`.
pub fn run_under(
    lock: &dyn HeldLock,
    command: &[String],
    hold: &HoldArgs,
    term: Option<u64>,
) -> Result<ExitCode, Fail> {
    let grace = hold.grace();
    let key = lock.key();
    let Some((program, cmd_args)) = command.split_first() else {
        return Err(usage("a command is needed after --"));
    };
    let mut cmd = Command::new(program);
    cmd.args(cmd_args).env("REDIS_LOCK_KEY", key).env("REDIS_LOCK_TOKEN", lock.token());
    // Removed when absent, so a run nested in another's CMD does not
    // pass on the outer lock's fence or term as its own.
    match lock.fence() {
        Some(f) => cmd.env("REDIS_LOCK_FENCE", f.to_string()),
        None => cmd.env_remove("REDIS_LOCK_FENCE"),
    };
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
    let outcome = child.wait(&lock.lost_signal(), grace, hold.on_revoke(), |reason| {
        eprintln!(
            "redis-lock: lost lock {key:?} ({reason}); terminating {program:?} (pid {pid}) and its process group"
        );
    });
    if let Some(reason) = outcome.lost {
        let (code, how) = lost_exit(reason);
        return Err(Fail(code, format!("{program:?} was terminated because lock {key:?} was {how}")));
    }
    if let Err(e) = lock.release() {
        // CMD finished; say if the lock did not last until then.
        eprintln!("redis-lock: releasing {key:?} after {program:?} exited: {e}");
        if e.is_not_held() {
            let code = lock.lost_signal().reason().map_or(EXIT_LOST, |r| lost_exit(r).0);
            return Err(Fail(code, String::new()));
        }
    }
    Ok(ExitCode::from(outcome.code))
}

/// The exit status of a loss: 78 when the server evicted the key, 79
/// otherwise.
pub fn lost_exit(reason: LossReason) -> (u8, &'static str) {
    match reason {
        LossReason::Evicted => (EXIT_EVICTED, "evicted by the server (maxmemory-policy)"),
        LossReason::Revoked => (EXIT_LOST, "revoked and its deadline passed"),
        _ => (EXIT_LOST, "lost"),
    }
}
