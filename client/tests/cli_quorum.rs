//! `redis-lock run` / `release` with several `--url`s: a quorum lock.

mod cli_support;
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli_support::{stderr, BIN};
use redis::Commands;
use redis_lock_harness::Server;
use support::get;

fn cli(servers: &[&Server], args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg(args[0]);
    for s in servers {
        c.args(["--url", &s.url()]);
    }
    c.args(&args[1..]).env_remove("REDIS_URL").stdin(Stdio::null());
    c
}

#[test]
fn run_holds_a_majority_while_cmd_runs_with_one_server_down() {
    let mut s: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    s[2].kill();
    let all: Vec<&Server> = s.iter().collect();
    // The command checks that both live servers hold its 32-hex token (in
    // the value of a lock held by each server's session).
    let check = format!(
        "a=$(redis-cli -p {} GET job); b=$(redis-cli -p {} GET job); t=$REDIS_LOCK_TOKEN; \
         echo \"$t\" | grep -Eq '^[0-9a-f]{{32}}$' && echo \"$a\" | grep -q \"$t\" && echo \"$b\" | grep -q \"$t\"",
        s[0].port(),
        s[1].port()
    );
    let o = cli(&all, &["run", "--ttl", "2000", "job", "--", "sh", "-c", &check]).output().expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!((get(&s[0], "job"), get(&s[1], "job")), (None, None), "released on exit");
}

#[test]
fn run_without_a_majority_exits_69_and_does_not_run_cmd() {
    let mut s: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    s[1].kill();
    s[2].kill();
    let all: Vec<&Server> = s.iter().collect();
    let marker = std::env::temp_dir().join(format!("redis-lock-cli-quorum-{}", std::process::id()));
    let o = cli(&all, &["run", "--ttl", "2000", "job", "--", "touch", marker.to_str().expect("utf-8")])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no quorum: acquire of lock \"job\" succeeded on 1 of 3 servers (2 needed)"),
        "{}",
        stderr(&o)
    );
    assert!(!marker.exists(), "CMD ran without the lock");
    assert_eq!(get(&s[0], "job"), None, "the one grant was released");
}

#[test]
fn two_processes_take_turns_and_a_third_finds_it_held() {
    let s: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let all: Vec<&Server> = s.iter().collect();
    let dir = std::env::temp_dir().join(format!("redis-lock-cli-quorum-cs-{}", std::process::id()));
    let _ = std::fs::remove_dir(&dir);
    // mkdir is atomic: it fails if the other process is inside too.
    let cs = format!("mkdir {0} || exit 99; sleep 1.5; rmdir {0}", dir.display());
    let t = Instant::now();
    let kids: Vec<_> = (0..2)
        .map(|_| {
            cli(&all, &["run", "--ttl", "2000", "--wait", "20000", "job", "--", "sh", "-c", &cs])
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    // The third comes while the first is inside its critical section.
    while !dir.exists() {
        assert!(t.elapsed() < Duration::from_secs(20), "neither process got the lock");
        std::thread::sleep(Duration::from_millis(5));
    }
    let third = cli(&all, &["run", "--ttl", "2000", "job", "--", "true"]).output().expect("run");
    assert_eq!(third.status.code(), Some(75), "held by one of the two: {}", stderr(&third));
    for k in kids {
        let o = k.wait_with_output().expect("wait");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    assert!(t.elapsed() >= Duration::from_millis(3000), "the two critical sections ran one after the other");
}

#[test]
fn release_with_several_urls_releases_everywhere() {
    let s: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let all: Vec<&Server> = s.iter().collect();
    for x in &s[..2] {
        let _: () = x.conn().pset_ex("job", "tok", 10_000).expect("SET");
    }
    let o = cli(&all, &["release", "job", "wrong"]).output().expect("release");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = cli(&all, &["release", "job", "tok"]).output().expect("release");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(s.iter().all(|x| get(x, "job").is_none()));
    let o = cli(&all, &["info", "job"]).output().expect("info");
    assert_eq!(o.status.code(), Some(2), "info takes one server: {}", stderr(&o));
}

/// `run` holds a quorum lock with a session on each server (its value there
/// names the server's session), and with `--no-session` on its own leases
/// (the bare token, renewed lock by lock).
#[test]
fn run_holds_a_quorum_lock_with_sessions_unless_no_session() {
    let s: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let all: Vec<&Server> = s.iter().collect();
    let gets: Vec<String> = s.iter().map(|x| format!("redis-cli -p {} GET job", x.port())).collect();
    // A majority at least (the third grant may still be on its way).
    let session_held = format!(
        "n=0; for v in \"$({})\" \"$({})\" \"$({})\"; do echo \"$v\" | grep '\"session\"' | grep -q \"$REDIS_LOCK_TOKEN\" && n=$((n+1)); done; [ $n -ge 2 ]",
        gets[0], gets[1], gets[2]
    );
    let o = cli(&all, &["run", "--ttl", "2000", "job", "--", "sh", "-c", &session_held]).output().expect("run");
    assert_eq!(o.status.code(), Some(0), "each server's session holds it: {}", stderr(&o));
    let own = format!(
        "n=0; for v in \"$({})\" \"$({})\" \"$({})\"; do [ \"$v\" = \"$REDIS_LOCK_TOKEN\" ] && n=$((n+1)); done; [ $n -ge 2 ]",
        gets[0], gets[1], gets[2]
    );
    let o = cli(&all, &["run", "--ttl", "2000", "--no-session", "job", "--", "sh", "-c", &own]).output().expect("run");
    assert_eq!(o.status.code(), Some(0), "its own lease on each server: {}", stderr(&o));
    assert!(s.iter().all(|x| get(x, "job").is_none()), "released on exit");
}
