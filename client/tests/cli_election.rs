//! `redis-lock elect` and `redis-lock leader` against a private server:
//! `elect` runs its command only while leader and hands over after a
//! `kill -9`; `leader --watch --json` prints one line per change.

mod cli_support;
mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cli_support::{cli, stdout, BIN};
use redis_lock_client::{ClientOptions, LockClient, LockOptions, WatchdogOptions};
use redis_lock_harness::Server;
use serde_json::Value;
use support::ms;

const PATIENCE: Duration = Duration::from_secs(30);

/// A process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("redis-lock-cli-election-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// `redis-lock elect` whose CMD writes its term to `file`, then sleeps.
fn elect(s: &Server, key: &str, value: &str, file: &std::path::Path) -> Proc {
    let script = format!(
        "echo \"$REDIS_LOCK_TERM $REDIS_LOCK_FENCE\" > {0}.tmp; mv {0}.tmp {0}; exec sleep 300",
        file.display()
    );
    let child = Command::new(BIN)
        .args(["elect", "--url", &s.url(), "--value", value, "--ttl", "1500", "--grace", "500", key, "--", "sh", "-c"])
        .arg(script)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn elect");
    Proc(child)
}

/// The term CMD wrote (and checks the fence is the same number).
fn term_in(file: &std::path::Path) -> Option<u64> {
    let s = std::fs::read_to_string(file).ok()?;
    let mut it = s.split_whitespace();
    let (term, fence) = (it.next()?.parse::<u64>().ok()?, it.next()?.parse::<u64>().ok()?);
    assert_eq!(term, fence, "REDIS_LOCK_FENCE is the term");
    Some(term)
}

#[test]
fn elect_runs_its_command_only_while_leader_and_the_next_takes_over_after_kill_9() {
    let s = Server::start();
    let d = scratch("kill9");
    let (fa, fb) = (d.join("a"), d.join("b"));
    let mut a = elect(&s, "cli:elect", "a", &fa);
    assert!(support::eventually(PATIENCE, || fa.exists()), "a leads and runs its command");
    let term_a = term_in(&fa).expect("a's term");
    let b = elect(&s, "cli:elect", "b", &fb);
    // b campaigns (in the server's queue) but runs nothing while a leads.
    let c = LockClient::open_with(&s.url(), ClientOptions::new()).unwrap();
    assert!(support::eventually(PATIENCE, || c.info("cli:elect").ok().flatten().is_some_and(|i| i.waiters == 1)));
    std::thread::sleep(ms(500));
    assert!(!fb.exists(), "b's command must not run while a leads");
    let o = cli(&["leader", "--url", &s.url(), "cli:elect"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with(&format!("term {term_a} rev ")), "{}", stdout(&o));
    assert!(stdout(&o).trim_end().ends_with("value a"), "{}", stdout(&o));
    let _ = a.0.kill();
    let _ = a.0.wait();
    assert!(support::eventually(PATIENCE, || fb.exists()), "b leads once a's lease ran out");
    let term_b = term_in(&fb).expect("b's term");
    assert!(term_b > term_a, "{term_b} after {term_a}");
    drop(b);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn elect_waits_no_longer_than_asked_and_exits_75() {
    let s = Server::start();
    let c = LockClient::open_with(&s.url(), ClientOptions::new()).unwrap();
    let _lead = c.election("cli:busy").campaign("other", Duration::from_secs(60), Duration::ZERO).unwrap();
    let o = cli(&["elect", "--url", &s.url(), "--value", "v", "-w", "0.3", "cli:busy", "--", "true"]);
    assert_eq!(o.status.code(), Some(75), "{}", cli_support::stderr(&o));
    let o = cli(&["elect", "--url", &s.url(), "--url", &s.url(), "--value", "v", "cli:busy", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "no quorum election");
    let o = cli(&["leader", "--url", &s.url(), "cli:nobody"]);
    assert_eq!((o.status.code(), stdout(&o).trim()), (Some(1), "none"));
}

#[test]
fn leader_watch_json_prints_one_line_per_change() {
    let s = Server::start();
    let key = "cli:watch";
    let mut watch = Proc(
        Command::new(BIN)
            .args(["leader", "--url", &s.url(), "--watch", "--json", key])
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn leader --watch"),
    );
    let out = watch.0.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = || -> Value {
        let line = rx.recv_timeout(PATIENCE).expect("a line from leader --watch");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON object a line: {line:?}: {e}"))
    };
    let first = next();
    assert_eq!(first["key"], key);
    assert!(first["term"].is_null() && first["value"].is_null(), "{first}");
    let c = LockClient::open_with(&s.url(), ClientOptions::new()).unwrap();
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let lead = c.election(key).campaign_with("one", Duration::from_secs(3), Duration::ZERO, &opts).unwrap();
    let l = next();
    assert_eq!((l["value"].as_str(), l["term"].as_u64()), (Some("one"), Some(lead.term())), "{l}");
    lead.proclaim("two").unwrap();
    let p = next();
    assert_eq!((p["value"].as_str(), p["term"].as_u64()), (Some("two"), Some(lead.term())), "{p}");
    assert!(p["rev"].as_u64() > l["rev"].as_u64());
    lead.resign().unwrap();
    let end = Instant::now() + PATIENCE;
    let gone = next();
    assert!(gone["term"].is_null(), "resigned: {gone}");
    assert!(Instant::now() < end);
    assert!(rx.try_recv().is_err(), "nothing more: one line per change");
}

#[test]
fn run_with_max_hold_ends_its_command_at_the_limit_and_lock_delay_is_skipped_by_a_release() {
    let s = Server::start();
    let o = cli(&[
        "run",
        "--url",
        &s.url(),
        "--ttl",
        "2000",
        "--max-hold",
        "5000",
        "--grace",
        "500",
        "cli:maxhold",
        "--",
        "sleep",
        "60",
    ]);
    assert_eq!(o.status.code(), Some(79), "{}", cli_support::stderr(&o));
    assert!(cli_support::stderr(&o).contains("max-hold"), "{}", cli_support::stderr(&o));
    let o = cli(&["run", "--url", &s.url(), "--lock-delay", "30000", "cli:delay", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", cli_support::stderr(&o));
    let o = cli(&["run", "--url", &s.url(), "cli:delay", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "released: no delay: {}", cli_support::stderr(&o));
    let o = cli(&["run", "--url", &s.url(), "--ttl", "1000", "--max-hold", "999", "cli:bad", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "MAXHOLD below the TTL is a usage error");
}
