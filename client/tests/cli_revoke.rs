//! `redis-lock revoke` and what `run` and `elect` do with a revocation (issue 31):
//! the holder's CMD gets the `--on-revoke` signal on the watchdog's next
//! renewal, and the key is free once it exits, long before the deadline;
//! a CMD that ignores it is killed at the revocation's deadline, so nothing
//! `run` started outlives the lock. Each runs twice: with the lock held by
//! a session (the default: the session's keepalive hears the revocation)
//! and on its own lease (`--no-session`: its renewal hears it). Only
//! orders are asserted, no durations.
//!
//! Linux: a pid's liveness is read in /proc.

#![cfg(target_os = "linux")]

mod cli_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cli_support::{cli, stderr, stdout, BIN};
use redis_lock_harness::Server;

const PATIENCE: Duration = Duration::from_secs(60);

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("redis-lock-cli-revoke-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// `redis-lock ARGS` in the background, stderr to `dir/stderr`, the
/// signals it forwards at their defaults.
fn spawn(dir: &Path, args: &[&str]) -> Child {
    let err = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
    cli_support::spawn_with_default_signals(&mut cmd)
}

fn until_exists(path: &Path, child: &mut Child, dir: &Path) {
    let end = Instant::now() + PATIENCE;
    while !path.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "run exited early: {:?}",
            std::fs::read_to_string(dir.join("stderr"))
        );
        assert!(Instant::now() < end, "CMD did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn exit_code(child: &mut Child) -> i32 {
    let end = Instant::now() + PATIENCE;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code().expect("an exit code");
        }
        assert!(Instant::now() < end, "run did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get(s: &Server, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(&mut s.conn()).unwrap()
}

fn server_ms(s: &Server) -> i64 {
    let (secs, us): (i64, i64) = redis::cmd("TIME").query(&mut s.conn()).unwrap();
    secs * 1000 + us / 1000
}

/// A `/proc/PID` that is there and no zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()) != Some("Z"))
        .unwrap_or(false)
}

/// `--no-session` when `session` is false.
fn session_flag(session: bool) -> &'static [&'static str] {
    if session {
        &[]
    } else {
        &["--no-session"]
    }
}

/// The name of a scratch dir for `name` with or without a session.
fn named(name: &str, session: bool) -> String {
    format!("{name}-{}", if session { "session" } else { "lease" })
}

/// Whether `key` is held by a session on `s` (its value names one).
fn session_held(s: &Server, key: &str) -> bool {
    get(s, key).is_some_and(|v| v.contains("\"session\":\""))
}

#[test]
fn run_passes_a_revocation_to_cmd_and_frees_the_key_when_cmd_exits() {
    passes_a_revocation_to_cmd(true);
}

#[test]
fn run_passes_a_revocation_to_cmd_without_a_session() {
    passes_a_revocation_to_cmd(false);
}

fn passes_a_revocation_to_cmd(session: bool) {
    let s = Server::start();
    let url = s.url();
    let dir = scratch(&named("term", session));
    let d = dir.to_str().unwrap();
    let script = format!("trap 'echo term > {d}/got; exit 0' TERM; touch {d}/started; while :; do sleep 0.05; done");
    let args = ["run", "--url", &url, "--ttl", "1500"];
    let mut run = spawn(&dir, &[&args[..], session_flag(session), &["rv:job", "--", "sh", "-c", &script]].concat());
    until_exists(&dir.join("started"), &mut run, &dir);
    assert_eq!(session_held(&s, "rv:job"), session, "{:?}", get(&s, "rv:job"));
    let o = cli(&["revoke", "--url", &url, "--grace", "60000", "--reason", "drain", "rv:job"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("revoked rv:job token "), "{out}");
    let deadline: i64 = out.split_whitespace().last().unwrap().parse().expect("the deadline");
    assert_eq!(exit_code(&mut run), 0, "CMD exited on the signal: {:?}", std::fs::read_to_string(dir.join("stderr")));
    assert!(std::fs::read_to_string(dir.join("got")).is_ok_and(|t| t.trim() == "term"), "CMD got SIGTERM");
    assert_eq!(get(&s, "rv:job"), None, "run released the key once CMD exited");
    assert!(server_ms(&s) < deadline, "freed before the deadline");
    let err = std::fs::read_to_string(dir.join("stderr")).unwrap();
    assert!(err.contains("revoked (drain)"), "{err}");
    // Nothing is held now: a revoke finds no holder.
    let o = cli(&["revoke", "--url", &url, "rv:job"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cmd_that_ignores_the_signal_is_killed_at_the_deadline() {
    killed_at_the_deadline(true);
}

#[test]
fn a_cmd_that_ignores_the_signal_is_killed_at_the_deadline_without_a_session() {
    killed_at_the_deadline(false);
}

fn killed_at_the_deadline(session: bool) {
    let s = Server::start();
    let url = s.url();
    let dir = scratch(&named("ignore", session));
    let d = dir.to_str().unwrap();
    let script = format!("trap '' TERM; echo $$ > {d}/pid.tmp; mv {d}/pid.tmp {d}/pid; while :; do sleep 0.05; done");
    // A grace far past the revocation's: the kill comes from the deadline.
    let args = ["run", "--url", &url, "--ttl", "1500", "--grace", "600000"];
    let mut run =
        spawn(&dir, &[&args[..], session_flag(session), &["rv:stubborn", "--", "sh", "-c", &script]].concat());
    until_exists(&dir.join("pid"), &mut run, &dir);
    assert_eq!(session_held(&s, "rv:stubborn"), session, "{:?}", get(&s, "rv:stubborn"));
    let pid: i32 = std::fs::read_to_string(dir.join("pid")).unwrap().trim().parse().unwrap();
    let o = cli(&["revoke", "--url", &url, "--grace", "2000", "rv:stubborn"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let code = exit_code(&mut run);
    // Killed (137, then released) or lost at the deadline (79).
    assert!(code == 79 || code == 137, "exit {code}: {:?}", std::fs::read_to_string(dir.join("stderr")));
    assert!(!alive(pid), "CMD outlived the lock");
    if get(&s, "rv:stubborn").is_some() {
        panic!("the revoked hold is still there after run exited");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn elect_passes_a_revocation_of_its_leadership_to_cmd() {
    elect_passes_it(true);
}

#[test]
fn elect_passes_a_revocation_of_its_leadership_to_cmd_without_a_session() {
    elect_passes_it(false);
}

fn elect_passes_it(session: bool) {
    let s = Server::start();
    let url = s.url();
    let dir = scratch(&named("elect", session));
    let d = dir.to_str().unwrap();
    let script = format!("trap 'echo usr1 > {d}/got; exit 0' USR1; touch {d}/started; while :; do sleep 0.05; done");
    let args = ["elect", "--url", &url, "--value", "me", "--ttl", "1500", "--on-revoke", "USR1"];
    let mut elect =
        spawn(&dir, &[&args[..], session_flag(session), &["rv:leader", "--", "sh", "-c", &script]].concat());
    until_exists(&dir.join("started"), &mut elect, &dir);
    assert_eq!(session_held(&s, "rv:leader"), session, "{:?}", get(&s, "rv:leader"));
    let o = cli(&["revoke", "--url", &url, "--grace", "60000", "--reason", "better candidate", "rv:leader"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(exit_code(&mut elect), 0, "{:?}", std::fs::read_to_string(dir.join("stderr")));
    assert!(std::fs::read_to_string(dir.join("got")).is_ok_and(|t| t.trim() == "usr1"), "CMD got --on-revoke's USR1");
    assert_eq!(get(&s, "rv:leader"), None, "elect resigned once CMD exited");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn revoke_refuses_a_quorum_and_a_bad_grace() {
    let s = Server::start();
    let url = s.url();
    let o = cli(&["revoke", "--url", &url, "--url", &url, "k"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = cli(&["revoke", "--url", &url, "--grace", "-1", "k"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = cli(&["run", "--url", &url, "--on-revoke", "SIGNOPE", "k", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
