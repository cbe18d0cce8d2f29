//! `redis-lock`: run a command under a lock, inspect a lock, release one.
//!
//! ```text
//! redis-lock run [--url URL]... [--cluster] [--ttl MS] [--wait MS] [--grace MS] [--max-lifetime MS]
//!                [--token TOKEN] [--run-id RUN_ID] KEY -- CMD [ARGS...]
//! redis-lock info [--url URL]... [--cluster] KEY
//! redis-lock release [--url URL]... [--cluster] KEY TOKEN
//! ```
//!
//! With several `--url`s, `run` and `release` work on a quorum lock over
//! those servers (`QuorumClient`); with `--cluster` the `--url`s are seed
//! nodes of one Redis Cluster instead.
//!
//! Exit codes are listed in `USAGE` below; argument parsing is hand-written
//! to keep the binary free of dependencies beyond the library's.

use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use redis_lock_client::{Backend, ClientOptions, Error, Lock, LockClient, LockOptions, LossReason, LostSignal, QuorumClient, QuorumLock, WatchdogOptions};

const USAGE: &str = "\
usage:
  redis-lock run [OPTIONS] KEY -- CMD [ARGS...]
      Acquire KEY, keep it renewed (every TTL/3) while CMD runs, release it
      when CMD exits, and exit with CMD's status. If the lock is lost, CMD
      gets SIGTERM, then SIGKILL after the grace period. With several
      --url options the lock is a quorum lock: held on a majority of those
      independent servers (see the README's Quorum section).
  redis-lock info [--url URL]... [--cluster] KEY
      Show what KEY holds as LOCK.INFO reports it: owner, run-id, format
      (legacy or structured), ttl-ms, fence and waiters.
  redis-lock release [--url URL]... [--cluster] KEY TOKEN
      Release KEY if TOKEN owns it (on every server, with several --url).

options:
  --url URL            redis URL (default: $REDIS_URL, else redis://127.0.0.1:6379/);
                       repeat it for a quorum lock over several servers (run, release);
                       redis+cluster://HOST:PORT[,HOST:PORT...]/ is a Redis Cluster
  --cluster            the URL(s) are seed nodes of one Redis Cluster (repeat
                       --url for more seeds), not a quorum
  --ttl MS             lock TTL in milliseconds (default: 30000)
  --wait MS            how long to wait for a held lock (default: 0, fail at once)
  --grace MS           SIGTERM-to-SIGKILL grace after a loss (default: 10000)
  --max-lifetime MS    stop renewing after this long (default: none)
  --token TOKEN        lock token (default: 128 random bits, hex)
  --run-id RUN_ID      acquire-or-takeover for this run id (default: plain acquire;
                       single server only)

exit status:
  run:      CMD's status (128+N if CMD died of signal N); 75 if the lock is
            held by someone else; 79 if the lock was lost while CMD ran;
            69 on a redis error (with several --url: no majority of the
            servers answered); 126/127 if CMD cannot be run; 2 on usage errors
  info:     0 if KEY exists (even as another type), 1 if not, 69 on a redis error
  release:  0 if released, 1 if TOKEN does not own KEY, 69 on a redis error";

const EXIT_USAGE: u8 = 2;
const EXIT_REDIS: u8 = 69;
const EXIT_HELD: u8 = 75;
const EXIT_LOST: u8 = 79;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run_cli(args) {
        Ok(code) => code,
        Err(Fail(0, msg)) => {
            println!("{msg}");
            ExitCode::SUCCESS
        }
        Err(Fail(code, msg)) => {
            if !msg.is_empty() {
                eprintln!("redis-lock: {msg}");
            }
            ExitCode::from(code)
        }
    }
}

/// An exit code and what to tell the user.
struct Fail(u8, String);

fn usage(msg: impl Into<String>) -> Fail {
    Fail(EXIT_USAGE, format!("{}\n\n{USAGE}", msg.into()))
}

fn redis_fail(e: impl std::fmt::Display) -> Fail {
    Fail(EXIT_REDIS, e.to_string())
}

#[derive(Default)]
struct Opts {
    /// Every `--url`, in order.
    urls: Vec<String>,
    /// `--cluster`: the URLs are seed nodes of one cluster.
    cluster: bool,
    ttl: Option<u64>,
    wait: Option<u64>,
    grace: Option<u64>,
    max_lifetime: Option<u64>,
    token: Option<String>,
    run_id: Option<String>,
    /// Positional arguments before `--`.
    positional: Vec<String>,
    /// Everything after `--`.
    command: Vec<String>,
}

fn parse(args: Vec<String>, allowed: &[&str]) -> Result<Opts, Fail> {
    let mut o = Opts::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if a == "--" {
            o.command = it.by_ref().collect();
            break;
        }
        if a == "-h" || a == "--help" {
            return Err(Fail(0, USAGE.to_string()));
        }
        let Some(flag) = a.strip_prefix("--") else {
            o.positional.push(a);
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.to_string(), None),
        };
        if !allowed.contains(&name.as_str()) {
            return Err(usage(format!("unknown option --{name}")));
        }
        // The one flag without a value.
        if name == "cluster" {
            if inline.is_some() {
                return Err(usage("--cluster takes no value"));
            }
            o.cluster = true;
            continue;
        }
        let value = match inline.or_else(|| it.next()) {
            Some(v) => v,
            None => return Err(usage(format!("--{name} needs a value"))),
        };
        let num = || value.parse::<u64>().map_err(|_| usage(format!("--{name} must be a number of milliseconds, got {value:?}")));
        match name.as_str() {
            "url" => o.urls.push(value.clone()),
            "ttl" => o.ttl = Some(num()?),
            "wait" => o.wait = Some(num()?),
            "grace" => o.grace = Some(num()?),
            "max-lifetime" => o.max_lifetime = Some(num()?),
            "token" => o.token = Some(value.clone()),
            "run-id" => o.run_id = Some(value.clone()),
            _ => return Err(usage(format!("unknown option --{name}"))),
        }
    }
    Ok(o)
}

/// The one server of a single-server command.
fn url(o: &Opts) -> Result<String, Fail> {
    match o.urls.as_slice() {
        [] => Ok(default_url()),
        [u] => Ok(u.clone()),
        _ => Err(usage("this command takes one --url")),
    }
}

/// The client of a one-lock-service command: a Redis Cluster with
/// `--cluster` (the `--url`s, else `$REDIS_URL`, are its seeds), else the
/// one server (a `redis+cluster://` URL is a cluster there too).
fn open(o: &Opts, opts: ClientOptions) -> Result<LockClient, Fail> {
    let client = if o.cluster {
        let seeds = if o.urls.is_empty() { vec![default_url()] } else { o.urls.clone() };
        LockClient::open_cluster_with(&seeds, opts)
    } else {
        LockClient::open_with(&url(o)?, opts)
    };
    client.map_err(|e| match e {
        e @ Error::InvalidArgument(_) => usage(e.to_string()),
        e => redis_fail(e),
    })
}

/// Several `--url`s without `--cluster`: a quorum lock over those servers.
fn quorum(o: &Opts) -> bool {
    o.urls.len() > 1 && !o.cluster
}

fn default_url() -> String {
    std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "redis://127.0.0.1:6379/".into())
}

fn run_cli(mut args: Vec<String>) -> Result<ExitCode, Fail> {
    if args.is_empty() {
        return Err(usage("missing subcommand"));
    }
    let sub = args.remove(0);
    match sub.as_str() {
        "run" => cmd_run(parse(args, &["url", "cluster", "ttl", "wait", "grace", "max-lifetime", "token", "run-id"])?),
        "info" => cmd_info(parse(args, &["url", "cluster"])?),
        "release" => cmd_release(parse(args, &["url", "cluster"])?),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(usage(format!("unknown subcommand {other:?}"))),
    }
}

fn cmd_run(o: Opts) -> Result<ExitCode, Fail> {
    let [key] = o.positional.as_slice() else {
        return Err(usage("run takes exactly one KEY before --"));
    };
    let Some((program, cmd_args)) = o.command.split_first() else {
        return Err(usage("run needs a command after --"));
    };
    let ttl = Duration::from_millis(o.ttl.unwrap_or(30_000));
    let wait = Duration::from_millis(o.wait.unwrap_or(0));
    let grace = Duration::from_millis(o.grace.unwrap_or(10_000));
    let mut watchdog = WatchdogOptions::new();
    if let Some(m) = o.max_lifetime {
        watchdog = watchdog.max_lifetime(Duration::from_millis(m));
    }
    let mut lopts = LockOptions::new().watchdog(watchdog);
    if let Some(t) = &o.token {
        lopts = lopts.token(t.clone());
    }
    let acquired = if quorum(&o) {
        if o.run_id.is_some() {
            return Err(usage("--run-id (takeover) works with one --url only"));
        }
        // Node timeout, drift allowance and retry pauses: the quorum
        // client's defaults (5 % of the TTL; 1 % + 2 ms; 50-250 ms).
        let client = QuorumClient::open(&o.urls).map_err(|e| match e {
            e @ Error::InvalidArgument(_) => usage(e.to_string()),
            e => redis_fail(e),
        })?;
        client.acquire_with(key, ttl, wait, &lopts).map(Held::Quorum)
    } else {
        // A reply slower than a third of the TTL would make the watchdog
        // miss its cadence anyway; fail such a call and retry instead.
        let timeout = (ttl / 3).clamp(Duration::from_millis(10), Duration::from_secs(2));
        let client = open(&o, ClientOptions::new().response_timeout(timeout))?;
        match &o.run_id {
            Some(run) => client.takeover_with(key, run, ttl, &lopts),
            None => client.acquire_with(key, ttl, wait, &lopts),
        }
        .map(Held::One)
    };
    let lock = match acquired {
        Ok(l) => l,
        Err(Error::NotAcquired { .. }) => return Err(Fail(EXIT_HELD, format!("lock {key:?} is held by someone else"))),
        Err(e @ Error::InvalidArgument(_)) => return Err(usage(e.to_string())),
        Err(e) => return Err(redis_fail(e)),
    };
    let mut child = match Command::new(program).args(cmd_args).spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            return Err(Fail(code, format!("cannot run {program:?}: {e}")));
        }
    };
    let signal = lock.lost_signal();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(Fail(EXIT_REDIS, format!("waiting for {program:?}: {e}"))),
        }
        // Doubles as the poll interval of the child.
        if let Some(reason) = signal.wait_timeout(Duration::from_millis(20)) {
            return Err(lost(&mut child, program, key, reason, grace));
        }
    };
    if let Err(e) = lock.release() {
        // CMD finished; say if the lock did not last until then.
        eprintln!("redis-lock: releasing {key:?} after {program:?} exited: {e}");
        if e.is_not_held() {
            return Err(Fail(EXIT_LOST, String::new()));
        }
    }
    Ok(ExitCode::from(exit_code(status)))
}

/// The lock `run` holds: on one server, or on a majority of several.
enum Held {
    One(Lock),
    Quorum(QuorumLock),
}

impl Held {
    fn lost_signal(&self) -> LostSignal {
        match self {
            Held::One(l) => l.lost_signal(),
            Held::Quorum(l) => l.lost_signal(),
        }
    }

    fn release(&self) -> Result<(), Error> {
        match self {
            Held::One(l) => l.release(),
            Held::Quorum(l) => l.release(),
        }
    }
}

fn lost(child: &mut Child, program: &str, key: &str, reason: LossReason, grace: Duration) -> Fail {
    eprintln!("redis-lock: lost lock {key:?} ({reason}); terminating {program:?} (pid {})", child.id());
    terminate(child, grace);
    Fail(EXIT_LOST, format!("{program:?} was terminated because lock {key:?} was lost"))
}

/// SIGTERM, then SIGKILL once `grace` has passed.
fn terminate(child: &mut Child, grace: Duration) {
    #[cfg(unix)]
    {
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) on our own not-yet-reaped child's pid.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    #[cfg(not(unix))]
    let _ = grace;
    let _ = child.kill();
    let _ = child.wait();
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    if let Some(c) = status.code() {
        return u8::try_from(c & 0xff).unwrap_or(1);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return u8::try_from(128 + (sig & 0x7f)).unwrap_or(1);
        }
    }
    1
}

fn cmd_info(o: Opts) -> Result<ExitCode, Fail> {
    let [key] = o.positional.as_slice() else {
        return Err(usage("info takes exactly one KEY"));
    };
    let client = open(&o, ClientOptions::new())?;
    let info = match client.info(key) {
        Ok(Some(info)) => info,
        Ok(None) => {
            println!("key: {key}\nstate: absent (not locked)");
            return Ok(ExitCode::from(1));
        }
        // The key exists, so acquire is refused, but it is no lock value.
        Err(Error::Redis(e)) if e.code() == Some("WRONGTYPE") => {
            println!("key: {key}\nstate: holds another type (not a lock value)");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e @ Error::InvalidArgument(_)) => return Err(usage(e.to_string())),
        Err(e) => return Err(redis_fail(e)),
    };
    // LOCK.INFO's field names, one per line.
    println!("key: {key}");
    println!("owner: {}", info.owner.as_deref().unwrap_or("(none: no token can own this value)"));
    println!("run-id: {}", info.run_id.as_deref().unwrap_or("(none)"));
    println!("format: {}", info.format.as_str());
    match info.ttl {
        Some(ttl) => println!("ttl-ms: {}", ttl.as_millis()),
        None => println!("ttl-ms: -1 (no expiry)"),
    }
    match info.fence {
        Some(f) => println!("fence: {f}"),
        None => println!("fence: (unknown)"),
    }
    println!("waiters: {}", info.waiters);
    if client.backend() == Backend::Scripts {
        println!("backend: scripts (no lock module: no fences, no server-side waiters)");
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_release(o: Opts) -> Result<ExitCode, Fail> {
    let [key, token] = o.positional.as_slice() else {
        return Err(usage("release takes KEY and TOKEN"));
    };
    let released = if quorum(&o) {
        QuorumClient::open(&o.urls).and_then(|c| c.release_token(key, token))
    } else {
        open(&o, ClientOptions::new())?.release_token(key, token)
    };
    match released {
        Ok(()) => {
            println!("released {key}");
            Ok(ExitCode::SUCCESS)
        }
        Err(Error::NotHeld { .. }) => Err(Fail(1, format!("{key:?} is not held by that token"))),
        Err(e @ Error::InvalidArgument(_)) => Err(usage(e.to_string())),
        Err(e) => Err(redis_fail(e)),
    }
}
