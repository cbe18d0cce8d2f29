//! `redis-lock run KEY KEY... -- CMD`: several plain locks held at once, or
//! none (LOCK.ACQUIREALL through `LockClient::lock_all`), against a private
//! server with the module.

mod cli_support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli_support::{stderr, stdout, BIN};
use redis::Commands;
use redis_lock_harness::Server;

fn cli(s: &Server, args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("REDIS_URL", s.url()).stdin(Stdio::null()).output().expect("run redis-lock")
}

fn get(s: &Server, key: &str) -> Option<String> {
    s.conn().get(key).expect("GET")
}

#[test]
fn run_holds_every_key_while_cmd_runs_and_releases_them_all() {
    let s = Server::start();
    let port = s.port();
    // CMD checks, while it runs, that each key holds its token (held by
    // run's session: the value names the token), and prints the keys it
    // was told of.
    let check = format!(
        "for k in acct:{{7}}:a acct:{{7}}:b; do case \"$(redis-cli -p {port} GET $k)\" in *\\\"token\\\":\\\"$REDIS_LOCK_TOKEN\\\"*) ;; *) exit 9;; esac; done; \
         printf '%s|%s' \"$REDIS_LOCK_KEYS\" \"${{REDIS_LOCK_KEY-unset}}\""
    );
    let o = cli(&s, &["run", "--ttl", "5000", "acct:{7}:a", "acct:{7}:b", "--", "sh", "-c", &check]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "acct:{7}:a\nacct:{7}:b|unset");
    assert_eq!(get(&s, "acct:{7}:a"), None, "released after CMD exits");
    assert_eq!(get(&s, "acct:{7}:b"), None, "released after CMD exits");
}

#[test]
fn one_held_key_refuses_them_all_and_cmd_never_runs() {
    let s = Server::start();
    let _: () = s.conn().pset_ex("b", "someone", 10_000).expect("SET");
    let marker = std::env::temp_dir().join(format!("redis-lock-multi-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let touch = format!("touch {}", marker.display());
    let o = cli(&s, &["run", "-n", "a", "b", "--", "sh", "-c", &touch]);
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(!marker.exists(), "CMD ran without its locks");
    assert_eq!(get(&s, "a"), None, "no partial hold: the free key was not taken");
    assert_eq!(get(&s, "b").as_deref(), Some("someone"));
}

#[test]
fn the_loss_of_any_key_ends_cmd() {
    let s = Server::start();
    let port = s.port();
    let t = Instant::now();
    // CMD deletes one of its two locks behind the watchdog's back, then
    // would run for a long time.
    let o = cli(
        &s,
        &[
            "run",
            "--ttl",
            "300",
            "--grace",
            "200",
            "a",
            "b",
            "--",
            "sh",
            "-c",
            &format!("redis-cli -p {port} DEL b >/dev/null; exec sleep 30"),
        ],
    );
    assert_eq!(o.status.code(), Some(79), "{}", stderr(&o));
    assert!(t.elapsed() < Duration::from_secs(20), "took {:?}", t.elapsed());
    assert!(stderr(&o).contains("lost lock"), "{}", stderr(&o));
    assert_eq!(get(&s, "a"), None, "the key still held is released");
}

#[test]
fn several_keys_are_plain_locks_only() {
    let s = Server::start();
    for extra in [&["--permits", "2"][..], &["-s"], &["--run-id", "r1"]] {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        args.extend(["a", "b", "--", "true"]);
        let o = cli(&s, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("several keys"), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(get(&s, "a"), None);
}
