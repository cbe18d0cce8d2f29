//! The `redis-lock` CLI's flock-style flags (`-n`, `-w SECONDS`, `-E CODE`),
//! the environment `run` gives its command, `--version`, help and shell
//! completions, against private servers.

mod cli_support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli_support::{cli, stderr, stdout, BIN};
use redis::Commands;
use redis_lock_harness::Server;

/// `redis-lock run --url <s> ARGS`.
fn run(s: &Server, args: &[&str]) -> Output {
    cli(&[&["run", "--url", &s.url()], args].concat())
}

/// A path no other test uses; removed first.
fn marker(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("redis-lock-cli-flags-{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn nonblock_and_conflict_exit_code() {
    let s = Server::start();
    let _: () = s.conn().pset_ex("job", "someone", 60_000).expect("SET");
    let m = marker("n");
    let touch = ["job", "--", "touch", m.to_str().expect("utf-8")];
    let o = run(&s, &[&["-n"], &touch[..]].concat());
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let o = run(&s, &[&["-n", "-E", "3"], &touch[..]].concat());
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("held by someone else"), "{}", stderr(&o));
    let o = run(&s, &[&["--conflict-exit-code", "0"], &touch[..]].concat());
    assert_eq!(o.status.code(), Some(0), "-E 0 is honoured: {}", stderr(&o));
    assert!(!m.exists(), "CMD ran without the lock");
    let v: Option<String> = s.conn().get("job").expect("GET");
    assert_eq!(v.as_deref(), Some("someone"), "the holder's value is untouched");

    // Usage errors: clashing waits, bad numbers, an exit status past 255.
    for bad in [
        &["-n", "--wait", "100"][..],
        &["-w", "1", "--wait", "100"],
        &["-n", "-w", "1"],
        &["-w", "-1"],
        &["-w", "abc"],
        &["-w", "nan"],
        &["-E", "256"],
    ] {
        let o = run(&s, &[bad, &touch[..]].concat());
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
    assert!(!m.exists(), "CMD ran after a usage error");

    // Free: -n and -E change nothing about a lock that can be had.
    let _: i64 = s.conn().del("job").expect("DEL");
    let o = run(&s, &[&["-n", "-E", "3"], &touch[..]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(m.exists(), "CMD ran under the lock");
    let _ = std::fs::remove_file(&m);
}

#[test]
fn wait_seconds_takes_fractions() {
    let s = Server::start();
    let _: () = s.conn().pset_ex("job", "someone", 60_000).expect("SET");
    let t = Instant::now();
    let o = run(&s, &["-w", "0.4", "job", "--", "true"]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(t.elapsed() >= Duration::from_millis(400), "gave up after {:?}, before its 0.4 s", t.elapsed());

    // A holder that expires after 0.7 s: a wait of 20.5 seconds (20.5 ms
    // would give up first) gets the lock, and CMD runs under it.
    for flag in ["-w", "--wait-seconds", "--timeout"] {
        let _: () = s.conn().pset_ex("job", "someone", 700).expect("SET");
        // The key holds CMD's token (as its session's lock: within JSON).
        let script = format!("redis-cli -p {} GET job | grep -qF \"$REDIS_LOCK_TOKEN\"", s.port());
        let o = run(&s, &[flag, "20.5", "job", "--", "sh", "-c", &script]);
        assert_eq!(o.status.code(), Some(0), "{flag} 20.5: {}", stderr(&o));
    }
}

/// What the child of `run` prints: `KEY|TOKEN|FENCE` (FENCE `unset` when
/// the variable is absent) and, on the next line, what `server` holds at
/// the key. The parent's environment has a stale `REDIS_LOCK_FENCE`.
fn child_env(s: &Server, urls: &[String], extra: &[&str]) -> (String, String, String, String) {
    let mut c = Command::new(BIN);
    c.arg("run");
    for u in urls {
        c.args(["--url", u]);
    }
    let script = format!(
        "echo \"$REDIS_LOCK_KEY|$REDIS_LOCK_TOKEN|${{REDIS_LOCK_FENCE-unset}}\"; redis-cli -p {} GET job",
        s.port()
    );
    let o = c
        .args(extra)
        .args(["--ttl", "5000", "job", "--", "sh", "-c", &script])
        .env_remove("REDIS_URL")
        .env("REDIS_LOCK_FENCE", "stale")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    let [env, held] = lines.as_slice() else { panic!("two lines expected: {out}") };
    let f: Vec<&str> = env.split('|').collect();
    let [key, token, fence] = f.as_slice() else { panic!("KEY|TOKEN|FENCE expected: {env}") };
    (key.to_string(), token.to_string(), fence.to_string(), held.to_string())
}

fn fence(f: &str) -> u64 {
    f.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| panic!("REDIS_LOCK_FENCE {f:?} is no positive integer"))
}

#[test]
fn run_tells_cmd_its_key_token_and_fence() {
    let s = Server::start();
    let (key, token, f1, held) = child_env(&s, &[s.url()], &[]);
    assert_eq!(key, "job");
    assert!(token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert!(held.contains(&format!("\"token\":\"{token}\"")), "the key holds the token CMD was given: {held}");
    let (_, token2, f2, _) = child_env(&s, &[s.url()], &["--token", "my-tok"]);
    assert_eq!(token2, "my-tok");
    assert!(fence(&f2) > fence(&f1), "fences increase: {f1} then {f2}");

    // Without the module there is no fence: the parent's stale one is not
    // passed on either.
    let plain = Server::builder().without_module().start();
    let (key, token, f, held) = child_env(&plain, &[plain.url()], &[]);
    assert_eq!((key.as_str(), f.as_str()), ("job", "unset"));
    assert_eq!(held, token);

    // A quorum lock: the same token on the servers (held by each server's
    // session), and its fence.
    let q: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let urls: Vec<String> = q.iter().map(Server::url).collect();
    let (_, token, f, held) = child_env(&q[1], &urls, &[]);
    assert!(held.contains(&format!("\"token\":\"{token}\"")), "the session's value holds the token: {held}");
    fence(&f);
}

#[test]
fn version_help_and_completions() {
    for flag in ["--version", "-V"] {
        let o = cli(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o), format!("redis-lock {}\n", env!("CARGO_PKG_VERSION")));
    }
    let o = cli(&["run", "--help"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for text in [
        "-w, --wait-seconds <SECONDS>",
        "-n, --nonblock",
        "-E, --conflict-exit-code <CODE>",
        "--wait <MS>",
        "REDIS_LOCK_TOKEN",
        "Exit status:",
    ] {
        assert!(stdout(&o).contains(text), "no {text:?} in run --help:\n{}", stdout(&o));
    }
    for args in [&["help", "list"][..], &["list", "-h"], &["info", "--help"], &["release", "--help"], &["--help"]] {
        let o = cli(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(
            stdout(&o).starts_with("Usage:") || stdout(&o).contains("\nUsage: redis-lock"),
            "{args:?}: {}",
            stdout(&o)
        );
    }
    assert_eq!(cli(&[]).status.code(), Some(2), "no subcommand is a usage error");
    for shell in ["bash", "zsh", "fish"] {
        let o = cli(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let script = stdout(&o);
        for word in ["redis-lock", "list", "completions", "nonblock", "wait-seconds"] {
            assert!(script.contains(word), "{shell} completions name no {word:?}");
        }
    }
    // The bash script is valid bash.
    let mut bash = Command::new("bash").arg("-n").stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("bash");
    bash.stdin.take().expect("stdin").write_all(&cli(&["completions", "bash"]).stdout).expect("write");
    let o = bash.wait_with_output().expect("bash -n");
    assert!(o.status.success(), "bash -n: {}", stderr(&o));
    assert_eq!(cli(&["completions", "tcsh"]).status.code(), Some(2));
}
