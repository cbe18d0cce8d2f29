//! The command line, as clap parses it: subcommands, flags, their help.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;
use redis_lock_client::{LockOptions, WatchdogOptions};

use crate::fail::EXIT_HELD;
use crate::stats::Sort;

/// Exit statuses, shown at the end of `--help`.
const EXIT_STATUS: &str = "\
Exit status:
  run:          CMD's status (128+N if CMD died of signal N); 75 (or -E CODE) if
                the lock is held by someone else (--permits: all N permits are;
                -s/-x: a writer, or readers for -x); 79 if the lock was lost while
                CMD ran, 78 if it was lost because the server evicted its key
                (maxmemory-policy); 69 on a redis error (with several --url: no majority of
                the servers answered); 126/127 if CMD cannot be run; 2 on usage errors
  elect:        CMD's status, as run; 75 (or -E CODE) if the wait for
                leadership ran out (--wait, -w, -n); 79 if the leadership was
                lost while CMD ran (78: evicted); 69 on a redis error; 126/127; 2 on usage errors
  leader:       0 if KEY has a leader, 1 if not (with --watch: runs until
                stopped; 69 on a redis error that retrying cannot mend)
  info:         0 if KEY exists (even as another type), 1 if not, 69 on a redis error
  release:      0 if released, 1 if TOKEN does not own KEY, 69 on a redis error
  revoke:       0 if a hold was revoked (or ended at once), 1 if KEY has no
                holder or TOKEN does not hold it, 69 on a redis error
  list:         0 once every server was listed, 69 if one could not be
  top:          0 on q, Esc, Ctrl-C or a signal; with --once, 69 if a server
                could not be read
  completions:  0";

#[derive(Parser, Debug)]
#[command(name = "redis-lock", version, about = "Run a command under a Redis lock; inspect, list and release locks.", after_help = EXIT_STATUS)]
#[command(arg_required_else_help = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run CMD while holding the lock KEY; exit with CMD's status.
    ///
    /// Acquires KEY, keeps it renewed (every TTL/3) while CMD runs and
    /// releases it once CMD's process group is gone (what CMD leaves in it
    /// gets SIGTERM, then SIGKILL after the grace period). If the lock is
    /// lost, the group gets SIGTERM, then SIGKILL after the grace period;
    /// SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to redis-lock go to the group
    /// the same way, while the lock stays renewed. With several --url options the lock is a quorum lock: held on
    /// a majority of those independent servers. CMD finds its lock in
    /// REDIS_LOCK_KEY, REDIS_LOCK_TOKEN and, when the grant carries one
    /// (the module's fencing token), REDIS_LOCK_FENCE.
    ///
    /// With --permits N, KEY is a semaphore and CMD holds one of its N
    /// permits; with -s/--shared or -x/--exclusive, KEY is a read-write lock
    /// held for reading (beside other -s runs) or writing (alone), as
    /// flock's -s and -x. These need the lock module, on one server or a
    /// cluster; a plain KEY (no such flag) is another kind of key, which
    /// they refuse (WRONGTYPE) and which refuses them.
    #[command(after_help = EXIT_STATUS)]
    Run(RunArgs),
    /// Run CMD only while leader of the election KEY, with REDIS_LOCK_TERM.
    ///
    /// Campaigns for leadership of KEY with --value (LOCK.ELECT), waiting
    /// in the server's queue behind earlier candidates for as long as it
    /// takes (or --wait / -w; -n: only if there is no leader now). Once
    /// leader, runs CMD exactly as `run` does under its lock: renewed every
    /// TTL/3 while CMD runs, resigned once CMD's process group is gone; if
    /// the leadership is lost, the group gets SIGTERM, then SIGKILL after
    /// the grace period, and elect exits 79. CMD finds REDIS_LOCK_KEY,
    /// REDIS_LOCK_TOKEN, REDIS_LOCK_TERM (the leadership's term, a fence
    /// greater than every earlier leader's) and REDIS_LOCK_FENCE (the same
    /// number). One server or a cluster; needs the lock module.
    #[command(after_help = EXIT_STATUS)]
    Elect(ElectArgs),
    /// Print the leader of the election KEY; with --watch, every change.
    ///
    /// One line: `term N rev N ttl-ms N value V` (value last, control
    /// characters escaped), or `none` when there is no leader; with --json
    /// one JSON object a line (key, value, term, rev, ttl_ms; null when
    /// there is no leader). With --watch the current state, then one line
    /// per change (LOCK.OBSERVE: a new leader, a proclaimed value, the end
    /// of a leadership), reconnecting by itself, until stopped.
    #[command(after_help = EXIT_STATUS)]
    Leader(LeaderArgs),
    /// Show one lock: owner, run-id, format, ttl-ms, fence, waiters.
    ///
    /// What KEY holds as LOCK.INFO reports it (format: legacy or
    /// structured; ttl-ms -1: no expiry), one `name: value` line each. A
    /// semaphore or read-write lock shows its kind, limit or mode, a
    /// `holder: TOKEN ttl-ms N` line per holder, and its waiters.
    #[command(after_help = EXIT_STATUS)]
    Info {
        #[command(flatten)]
        target: Target,
        /// The lock's key.
        key: String,
    },
    /// Release KEY if TOKEN owns it (on every server, with several --url).
    #[command(after_help = EXIT_STATUS)]
    Release {
        #[command(flatten)]
        target: Target,
        /// The lock's key.
        key: String,
        /// The token that holds it (`run` gives it to CMD as REDIS_LOCK_TOKEN).
        token: String,
    },
    /// Revoke the hold of KEY: its holder hears it, the server ends it after --grace.
    ///
    /// LOCK.REVOKE (module only; one server or a cluster): a lock, an
    /// election's leader, or one holder of a semaphore or read-write lock
    /// (--token, needed when the key has several). The holder's next
    /// renewal tells it (a `redis-lock run` or `elect` holding KEY sends
    /// its CMD the --on-revoke signal); the server ends the hold --grace
    /// milliseconds from now as an involuntary end (lock-delay applies, the
    /// next waiter gets it). Prints `revoked KEY token T deadline UNIX_MS`
    /// (or `ended`); a key with no holder, or a --token that does not hold
    /// it, changes nothing.
    #[command(after_help = EXIT_STATUS)]
    Revoke(RevokeArgs),
    /// List the locks matching PATTERN on a server, a cluster or several servers.
    ///
    /// Every key matching PATTERN (SCAN's glob) on one server, on every
    /// master of a cluster (--cluster), or on each of several servers
    /// (several --url: a quorum's), sorted by key. Keys come from SCAN ... MATCH ... COUNT, never KEYS; each batch is
    /// described by one pipeline of LOCK.INFO (without the module: GET and
    /// PTTL, read together by a script). A key of another type is listed
    /// with format `other`.
    #[command(after_help = EXIT_STATUS)]
    List(ListArgs),
    /// Show contention live: rates, wait percentiles, the most contended keys.
    ///
    /// Every refresh reads INFO lock and LOCK.TOP from one server, every
    /// master of a cluster (--cluster), or each of several servers
    /// (several --url), and shows grants, waits, timeouts and holds that
    /// expired while held per second, the wait p50/p99 of the waits that
    /// ended since the last refresh (from the lock_wait_hist_ms_* deltas),
    /// then the keys with the most waiters. Keys: q (or Esc, Ctrl-C)
    /// quits; s cycles the sort; w, o, h, k sort by waiters, oldest wait,
    /// holders, key.
    #[command(after_help = EXIT_STATUS)]
    Top(TopArgs),
    /// Print a shell completion script.
    ///
    /// For instance `redis-lock completions bash > /etc/bash_completion.d/redis-lock`.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// Where the locks are: one server, a cluster, or several servers.
#[derive(Args, Debug)]
pub struct Target {
    /// Redis URL (default: $REDIS_URL, else redis://127.0.0.1:6379/). Repeat
    /// it for a quorum over several servers (run, release, list);
    /// redis+cluster://HOST:PORT[,HOST:PORT...]/ is a Redis Cluster.
    #[arg(long = "url", value_name = "URL")]
    pub urls: Vec<String>,
    /// The URL(s) are seed nodes of one Redis Cluster (repeat --url for
    /// more seeds), not a quorum.
    #[arg(long)]
    pub cluster: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: Target,
    /// Lock TTL in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub ttl: u64,
    /// How long to wait for a held lock, in milliseconds (default: 0, fail
    /// at once).
    #[arg(long, value_name = "MS", conflicts_with_all = ["wait_seconds", "nonblock"])]
    pub wait: Option<u64>,
    /// How long to wait for a held lock, in seconds; fractions allowed (as
    /// flock -w).
    #[arg(short = 'w', long, visible_alias = "timeout", value_name = "SECONDS", value_parser = seconds, conflicts_with = "nonblock")]
    pub wait_seconds: Option<Duration>,
    /// Fail at once if the lock is held (as flock -n; the default when no
    /// wait is given).
    #[arg(short = 'n', long)]
    pub nonblock: bool,
    /// Exit status when the lock is held by someone else (as flock -E).
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = EXIT_HELD)]
    pub conflict_exit_code: u8,
    #[command(flatten)]
    pub hold: HoldArgs,
    /// Acquire-or-takeover for this run id (default: plain acquire; one
    /// server or a cluster only).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Hold one of N permits of the semaphore KEY (every run on KEY must
    /// name the same N; 1 to 2^53).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1 << 53), conflicts_with_all = ["shared", "exclusive", "run_id"])]
    pub permits: Option<u64>,
    /// Hold the read-write lock KEY shared, for reading, beside other
    /// --shared runs (as flock -s).
    #[arg(short = 's', long, visible_alias = "read", conflicts_with_all = ["exclusive", "run_id"])]
    pub shared: bool,
    /// Hold the read-write lock KEY exclusively, for writing: no --shared
    /// run meanwhile (as flock -x, but KEY is a read-write lock).
    #[arg(short = 'x', long, visible_alias = "write", conflicts_with = "run_id")]
    pub exclusive: bool,
    /// The lock's key. Several keys: all held at once, or none (plain
    /// locks only; LOCK.ACQUIREALL per hash slot, see docs/multi-key.md).
    #[arg(required = true, value_name = "KEY")]
    pub keys: Vec<String>,
    /// The command to run under the lock, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// What `run` holds KEY as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The plain lock (a string key).
    Lock,
    /// One of N permits of a semaphore.
    Permits(u64),
    /// A read-write lock's read side.
    Shared,
    /// A read-write lock's write side.
    Exclusive,
}

impl RunArgs {
    /// `--permits`, `--shared`, `--exclusive` (clap keeps them apart), else
    /// the plain lock.
    pub fn mode(&self) -> Mode {
        match (self.permits, self.shared, self.exclusive) {
            (Some(n), _, _) => Mode::Permits(n),
            (None, true, _) => Mode::Shared,
            (None, false, true) => Mode::Exclusive,
            (None, false, false) => Mode::Lock,
        }
    }

    /// How long to wait for a held lock: `--wait` or `-w`, else not at all.
    pub fn wait(&self) -> Duration {
        match (self.wait, self.wait_seconds) {
            (Some(ms), _) => Duration::from_millis(ms),
            (None, Some(d)) => d,
            (None, None) => Duration::ZERO,
        }
    }
}

/// What `run` and `elect` share: how CMD is supervised, how long the
/// watchdog renews, and the lease rules the server keeps.
#[derive(Args, Debug)]
pub struct HoldArgs {
    /// SIGTERM-to-SIGKILL grace for CMD's process group (after a loss, a
    /// forwarded signal, or CMD's exit with others of its group left), in
    /// milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub grace: u64,
    /// Stop renewing after this long, in milliseconds (default: none).
    #[arg(long, value_name = "MS")]
    pub max_lifetime: Option<u64>,
    /// After the lock ends involuntarily (its lease ran out, or it was
    /// taken over), nobody can acquire KEY for this long, in milliseconds
    /// (0 to 60000; a release frees it at once). Module only. Default: none.
    #[arg(long, value_name = "MS")]
    pub lock_delay: Option<u64>,
    /// Renewals never extend the lease past the grant plus this, in
    /// milliseconds (at least --ttl): the server ends a holder that runs
    /// longer (then as a lost lock: exit 79). Module only. Default: none.
    #[arg(long, value_name = "MS")]
    pub max_hold: Option<u64>,
    /// The holder's token (default: 128 random bits, hex).
    #[arg(long)]
    pub token: Option<String>,
    /// The signal CMD's process group gets when the lock is revoked
    /// (`redis-lock revoke`; heard on the next renewal), so CMD can finish
    /// before the revocation's deadline: a name (TERM, SIGTERM, INT, HUP,
    /// QUIT, USR1, USR2, KILL), a number, or `none`. Still running at the
    /// deadline, the group gets SIGKILL.
    #[arg(long, value_name = "SIGNAL", default_value = "SIGTERM", value_parser = signal)]
    pub on_revoke: Sig,
    /// Renew the lock on its own every TTL/3, not with a session on its node.
    #[arg(long)]
    pub no_session: bool,
}

/// A signal number; 0: none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sig(pub i32);

/// `--on-revoke`'s SIGNAL.
fn signal(s: &str) -> Result<Sig, String> {
    let name = s.trim().to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    let n = match name {
        "NONE" => 0,
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        n => match n.parse::<i32>() {
            Ok(n) if (1..=64).contains(&n) => n,
            _ => return Err(format!("{s:?} is not a signal (TERM, INT, HUP, QUIT, USR1, USR2, KILL, a number, none)")),
        },
    };
    Ok(Sig(n))
}

impl HoldArgs {
    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.grace)
    }

    /// The signal a revocation sends CMD's group (`None`: none).
    pub fn on_revoke(&self) -> Option<i32> {
        (self.on_revoke.0 != 0).then_some(self.on_revoke.0)
    }

    /// The lock options: the watchdog (with `--max-lifetime`), `--token`,
    /// `--lock-delay`, `--max-hold`.
    pub fn lock_options(&self) -> LockOptions {
        let mut watchdog = WatchdogOptions::new();
        if let Some(m) = self.max_lifetime {
            watchdog = watchdog.max_lifetime(Duration::from_millis(m));
        }
        let mut lopts = LockOptions::new().watchdog(watchdog);
        if let Some(t) = &self.token {
            lopts = lopts.token(t);
        }
        if let Some(ms) = self.lock_delay {
            lopts = lopts.lock_delay(Duration::from_millis(ms));
        }
        if let Some(ms) = self.max_hold {
            lopts = lopts.max_hold(Duration::from_millis(ms));
        }
        lopts
    }
}

#[derive(Args, Debug)]
pub struct ElectArgs {
    #[command(flatten)]
    pub target: Target,
    /// What followers read as the leader's value (an address, an id).
    #[arg(long)]
    pub value: String,
    /// Leadership TTL in milliseconds (renewed every TTL/3).
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub ttl: u64,
    /// How long to wait for leadership, in milliseconds (default: until
    /// elected).
    #[arg(long, value_name = "MS", conflicts_with_all = ["wait_seconds", "nonblock"])]
    pub wait: Option<u64>,
    /// How long to wait for leadership, in seconds; fractions allowed.
    #[arg(short = 'w', long, visible_alias = "timeout", value_name = "SECONDS", value_parser = seconds, conflicts_with = "nonblock")]
    pub wait_seconds: Option<Duration>,
    /// Lead only if there is no leader now; do not wait.
    #[arg(short = 'n', long)]
    pub nonblock: bool,
    /// Exit status when the wait for leadership ran out.
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = EXIT_HELD)]
    pub conflict_exit_code: u8,
    #[command(flatten)]
    pub hold: HoldArgs,
    /// The election's key.
    pub key: String,
    /// The command to run while leader, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl ElectArgs {
    /// How long to wait for leadership: `--wait` or `-w`, none with `-n`,
    /// else `None`: until elected.
    pub fn wait(&self) -> Option<Duration> {
        match (self.wait, self.wait_seconds, self.nonblock) {
            (Some(ms), _, _) => Some(Duration::from_millis(ms)),
            (None, Some(d), _) => Some(d),
            (None, None, true) => Some(Duration::ZERO),
            (None, None, false) => None,
        }
    }
}

#[derive(Args, Debug)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub target: Target,
    /// The holder to revoke (required on a semaphore or read-write lock
    /// with several holders).
    #[arg(long)]
    pub token: Option<String>,
    /// How long the holder has before the server ends its hold, in
    /// milliseconds (0: at once).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub grace: u64,
    /// Why, told to the holder of a lock or leadership (at most 200 bytes).
    #[arg(long)]
    pub reason: Option<String>,
    /// The key whose hold to revoke.
    pub key: String,
}

#[derive(Args, Debug)]
pub struct LeaderArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print the current state, then every change, one line each, until
    /// stopped.
    #[arg(long)]
    pub watch: bool,
    /// One JSON object a line: key, value, term, rev, ttl_ms (null when
    /// there is no leader).
    #[arg(long)]
    pub json: bool,
    /// The election's key.
    pub key: String,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub target: Target,
    /// One JSON array of objects (server, key, owner, run_id, format,
    /// ttl_ms, fence, waiters) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Keys per SCAN call and per LOCK.INFO pipeline.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub count: u32,
    /// A SCAN MATCH glob.
    #[arg(default_value = "*")]
    pub pattern: String,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub target: Target,
    /// Print one frame as text (after one interval, so rates have two
    /// readings) and exit.
    #[arg(long)]
    pub once: bool,
    /// One JSON object per refresh, a line each (with --once, one).
    #[arg(long)]
    pub json: bool,
    /// Contended keys to show (LOCK.TOP COUNT, per server).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
    /// Seconds between refreshes; fractions allowed.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = interval)]
    pub interval: Duration,
    /// The keys' order.
    #[arg(long, value_enum, default_value_t = Sort::Waiters)]
    pub sort: Sort,
}

/// `--interval`: at least 0.1 s.
fn interval(s: &str) -> Result<Duration, String> {
    let d = seconds(s)?;
    if d < Duration::from_millis(100) {
        return Err("the interval is at least 0.1 seconds".into());
    }
    Ok(d)
}

/// `-w`'s SECONDS: a non-negative decimal, fractions allowed.
fn seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is not a non-negative number of seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_take_fractions_and_refuse_the_rest() {
        assert_eq!(seconds("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        assert_eq!(seconds("2"), Ok(Duration::from_secs(2)));
        for bad in ["", "-1", "abc", "inf", "NaN", "1e30"] {
            assert!(seconds(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
