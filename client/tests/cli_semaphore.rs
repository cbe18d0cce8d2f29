//! `redis-lock run --permits N` (a semaphore) and `-s/--shared`,
//! `-x/--exclusive` (a read-write lock), against a private server: runs
//! that hold together, runs refused or queued meanwhile, the environment
//! CMD gets, and the combinations refused as usage errors.
//!
//! A holding run's CMD writes what it was given to a file, then waits for
//! a release file: the test decides when it ends, so nothing depends on
//! how fast the machine is.

mod cli_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cli_support::{cli, stderr, BIN};
use redis_lock_harness::Server;

/// How long a test waits for what must happen.
const PATIENCE: Duration = Duration::from_secs(30);

/// A directory of its own per test, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("redis-lock-cli-sem-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// A run in the background: its name and process.
struct Run(&'static str, Child);

/// `redis-lock run --url <s> FLAGS KEY -- sh -c ...` in the background: its
/// CMD writes `KEY|TOKEN|FENCE` to `dir/<name>` and exits once
/// `dir/<name>.release` exists (one file per run: a run granted later must
/// not end as soon as it starts).
fn hold(s: &Server, flags: &[&str], key: &str, dir: &Path, name: &'static str) -> Run {
    let out = dir.join(name);
    let release = dir.join(format!("{name}.release"));
    let script = format!(
        "echo \"$REDIS_LOCK_KEY|$REDIS_LOCK_TOKEN|${{REDIS_LOCK_FENCE-unset}}\" > {out}.tmp && mv {out}.tmp {out}; while [ ! -e {release} ]; do sleep 0.05; done",
        out = out.display(),
        release = release.display()
    );
    let child = Command::new(BIN)
        .args(["run", "--url", &s.url(), "--ttl", "60000"])
        .args(flags)
        .args([key, "--", "sh", "-c", &script])
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn redis-lock run");
    Run(name, child)
}

/// What a holding run's CMD was given, once it started: `[KEY, TOKEN, FENCE]`.
fn started(dir: &Path, name: &str) -> [String; 3] {
    let end = Instant::now() + PATIENCE;
    loop {
        if let Ok(line) = std::fs::read_to_string(dir.join(name)) {
            let f: Vec<String> = line.trim().split('|').map(String::from).collect();
            return f.try_into().unwrap_or_else(|f| panic!("KEY|TOKEN|FENCE expected: {f:?}"));
        }
        assert!(Instant::now() < end, "{name} never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends these holding runs of `dir` and checks they exit 0.
fn release_all(dir: &Path, runs: Vec<Run>) {
    for Run(name, _) in &runs {
        std::fs::write(dir.join(format!("{name}.release")), "").expect("release file");
    }
    for Run(name, child) in runs {
        let o = child.wait_with_output().expect("wait");
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
    }
}

fn fence(f: &str) -> u64 {
    f.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| panic!("REDIS_LOCK_FENCE {f:?} is no positive integer"))
}

/// The holders' tokens as `command` (`SEM.INFO`, `RWLOCK.INFO`) lists them.
fn holders(s: &Server, command: &str, key: &str) -> Vec<String> {
    let v: redis::Value = redis::cmd(command).arg(key).query(&mut s.conn()).expect(command);
    let redis::Value::Array(fields) = v else { return Vec::new() };
    let mut out: Vec<String> = fields
        .chunks(2)
        .filter(|p| p[0] == redis::Value::BulkString(b"holders".to_vec()))
        .flat_map(|p| match &p[1] {
            redis::Value::Array(h) => {
                h.chunks(2).filter_map(|t| redis::from_redis_value::<String>(t[0].clone()).ok()).collect()
            }
            _ => Vec::new(),
        })
        .collect();
    out.sort();
    out
}

#[test]
fn permits_admit_n_runs_and_refuse_or_queue_the_next() {
    let s = Server::start();
    let dir = scratch("permits");
    let runs = vec![hold(&s, &["--permits", "2"], "pool", &dir, "a"), hold(&s, &["--permits", "2"], "pool", &dir, "b")];
    let [ka, ta, fa] = started(&dir, "a");
    let [kb, tb, fb] = started(&dir, "b");
    assert_eq!((ka.as_str(), kb.as_str()), ("pool", "pool"));
    assert_ne!(ta, tb);
    assert_ne!(fence(&fa), fence(&fb), "each grant has its own fence");
    let mut both = vec![ta.clone(), tb.clone()];
    both.sort();
    assert_eq!(holders(&s, "SEM.INFO", "pool"), both, "the server lists the tokens CMD was given");
    let o = cli(&["info", "--url", &s.url(), "pool"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let shown = cli_support::stdout(&o);
    for line in [
        "key: pool",
        "kind: semaphore",
        "limit: 2",
        &format!("holder: {ta} ttl-ms "),
        &format!("holder: {tb} ttl-ms "),
        "waiters: 0",
    ] {
        assert!(shown.contains(line), "no {line:?} in info:\n{shown}");
    }

    // A third: refused with -n (and -E), queued with -w until one ends.
    let o = cli(&["run", "--url", &s.url(), "--permits", "2", "-n", "pool", "--", "true"]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let o = cli(&["run", "--url", &s.url(), "--permits", "2", "-n", "-E", "3", "pool", "--", "true"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // Another limit while permits are held is the server's error.
    let o = cli(&["run", "--url", &s.url(), "--permits", "3", "-n", "pool", "--", "true"]);
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains("limit differs"), "{}", stderr(&o));
    let waiter = hold(&s, &["--permits", "2", "-w", "60"], "pool", &dir, "c");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!dir.join("c").exists(), "a third ran beside two permits");
    release_all(&dir, runs);
    let [_, tc, fc] = started(&dir, "c");
    assert!(fence(&fc) > fence(&fa).max(fence(&fb)), "a later grant, a larger fence");
    assert_eq!(holders(&s, "SEM.INFO", "pool"), vec![tc]);
    release_all(&dir, vec![waiter]);
    let gone: i64 = redis::cmd("EXISTS").arg("pool").query(&mut s.conn()).expect("EXISTS");
    assert_eq!(gone, 0, "every run released its permit");
}

#[test]
fn shared_runs_together_and_exclusive_waits() {
    let s = Server::start();
    let dir = scratch("rw");
    let readers = vec![hold(&s, &["--shared"], "doc", &dir, "r1"), hold(&s, &["-s"], "doc", &dir, "r2")];
    let [k, t1, f1] = started(&dir, "r1");
    let [_, t2, _] = started(&dir, "r2");
    assert_eq!(k, "doc");
    fence(&f1);
    let mut both = vec![t1, t2];
    both.sort();
    assert_eq!(holders(&s, "RWLOCK.INFO", "doc"), both);
    let o = cli(&["info", "--url", &s.url(), "doc"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(cli_support::stdout(&o).contains("kind: read-write lock\nmode: read\n"), "{}", cli_support::stdout(&o));
    for flag in ["--exclusive", "-x", "--write"] {
        let o = cli(&["run", "--url", &s.url(), flag, "-n", "doc", "--", "true"]);
        assert_eq!(o.status.code(), Some(75), "{flag}: {}", stderr(&o));
    }
    // The plain lock is another kind of key.
    let o = cli(&["run", "--url", &s.url(), "-n", "doc", "--", "true"]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let writer = hold(&s, &["-x", "-w", "60"], "doc", &dir, "w");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!dir.join("w").exists(), "a writer ran beside readers");
    release_all(&dir, readers);
    let [_, tw, _] = started(&dir, "w");
    assert_eq!(holders(&s, "RWLOCK.INFO", "doc"), vec![tw]);
    let o = cli(&["run", "--url", &s.url(), "--read", "-n", "doc", "--", "true"]);
    assert_eq!(o.status.code(), Some(75), "no reader beside the writer: {}", stderr(&o));
    release_all(&dir, vec![writer]);
    let o = cli(&["run", "--url", &s.url(), "-s", "-n", "doc", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn clashing_modes_are_usage_errors() {
    let s = Server::start();
    let dir = scratch("usage");
    let m = dir.join("ran");
    let touch = ["job", "--", "touch", m.to_str().expect("utf-8")];
    let url = s.url();
    let other = Server::start().url();
    for bad in [
        &["--url", &url, "--permits", "2", "--shared"][..],
        &["--url", &url, "--permits", "2", "-x"],
        &["--url", &url, "-s", "-x"],
        &["--url", &url, "--permits", "0"],
        &["--url", &url, "--permits", "9007199254740993"],
        &["--url", &url, "--permits", "two"],
        &["--url", &url, "--permits", "2", "--run-id", "r"],
        &["--url", &url, "-s", "--run-id", "r"],
        &["--url", &url, "--url", &other, "--permits", "2"],
        &["--url", &url, "--url", &other, "--shared"],
    ] {
        let o = cli(&[&["run"], bad, &touch[..]].concat());
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
    assert!(!m.exists(), "CMD ran after a usage error");

    // Without the module: a redis error that says so, and CMD does not run.
    let plain = Server::builder().without_module().start();
    for flag in ["--permits=2", "-s"] {
        let o = cli(&[&["run", "--url", &plain.url(), flag], &touch[..]].concat());
        assert_eq!(o.status.code(), Some(69), "{flag}: {}", stderr(&o));
        assert!(stderr(&o).contains("load the lock module"), "{}", stderr(&o));
    }
    assert!(!m.exists(), "CMD ran without its lock");
    let o = cli(&[&["run", "--url", &s.url(), "--permits", "1"], &touch[..]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(m.exists(), "CMD ran under its permit");
}

/// `--max-hold` with `--permits` and `-s`: the run's own permit or hold
/// gets the server's hold limit, and the run ends at it as a lost lock
/// (exit 79), as an exclusive run does.
#[test]
fn max_hold_ends_a_permit_or_shared_run_at_the_limit() {
    let s = Server::start();
    let url = s.url();
    // A key each: the first run's place may outlive its exit by a moment.
    for (mode, key) in [(&["--permits", "2"][..], "cli:capped:sem"), (&["-s"], "cli:capped:rw")] {
        let mut args = vec!["run", "--url", &url];
        args.extend_from_slice(mode);
        args.extend_from_slice(&["--ttl", "2000", "--max-hold", "5000", "--grace", "500", key]);
        args.extend_from_slice(&["--", "sleep", "60"]);
        let o = cli(&args);
        assert_eq!(o.status.code(), Some(79), "{mode:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("max-hold"), "{mode:?}: {}", stderr(&o));
    }
}
