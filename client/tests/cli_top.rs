//! `redis-lock top` against a real server under a scripted workload
//! (clients blocked in WAIT on known keys): `--once` and `--json` for
//! scripts, and the live view in a real terminal (tmux), quit with `q`
//! and with Ctrl-C, the terminal restored each time.

mod cli_support;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cli_support::{cli, stderr, stdout, BIN};
use redis_lock_client::LockClient;
use redis_lock_harness::{Cluster, Server};
use serde_json::Value;
use support::{client, eventually, ms};

/// Holds `top:busy` with 3 waiters and `top:less` with 1 (each waiting up
/// to a minute), and keeps waits on `top:short` timing out every 100 ms,
/// so every interval has waits that ended.
struct Workload {
    holder: LockClient,
    token: String,
    _locks: Vec<redis_lock_client::Lock>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Workload {
    fn start(s: &Server) -> Workload {
        let holder = client(s);
        let locks: Vec<_> = ["top:busy", "top:less", "top:short"]
            .iter()
            .map(|k| holder.try_acquire(k, Duration::from_secs(120)).expect("free key"))
            .collect();
        let token = locks[0].token().to_string();
        for (key, n) in [("top:busy", 3), ("top:less", 1)] {
            for _ in 0..n {
                let c = client(s);
                // Never granted while the test runs: the server answers at the end of the wait.
                std::thread::spawn(move || c.acquire(key, ms(60_000), ms(60_000)));
            }
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let (c, stop) = (client(s), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = c.acquire("top:short", ms(60_000), ms(100));
                }
            });
        }
        for (key, n) in [("top:busy", 3), ("top:less", 1)] {
            assert!(
                eventually(ms(20_000), || holder.info(key).unwrap().is_some_and(|i| i.waiters == n)),
                "{n} waiters on {key}"
            );
        }
        Workload { holder, token, _locks: locks, stop }
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = &self.holder;
    }
}

#[test]
fn json_shows_the_contended_keys_and_the_rates() {
    let s = Server::start();
    let w = Workload::start(&s);
    let o = cli(&["top", "--url", &s.url(), "--once", "--json", "--interval", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(v["servers"], serde_json::json!([format!("127.0.0.1:{}", s.port())]));
    let keys = v["keys"].as_array().expect("keys");
    assert_eq!(keys[0]["key"], "top:busy", "{v}");
    assert_eq!(keys[0]["waiters"], 3);
    assert_eq!(keys[0]["family"], "exclusive");
    assert_eq!(keys[0]["holders"], 1);
    assert_eq!(keys[0]["owner"], w.token.as_str());
    assert!(keys[0]["ttl_ms"].as_i64().is_some_and(|t| t > 0 && t <= 120_000), "{v}");
    assert!(keys[0]["oldest_wait_ms"].as_u64().is_some(), "{v}");
    let less: Vec<&Value> = keys.iter().filter(|k| k["key"] == "top:less").collect();
    assert_eq!(less.len(), 1, "{v}");
    assert_eq!(less[0]["waiters"], 1);
    // The waits on top:short that timed out in the interval.
    assert!(v["waits_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    assert!(v["timeouts_per_s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    assert!(v["wait_p50_ms"].as_u64().is_some() && v["wait_p99_ms"].as_u64().is_some(), "{v}");
    assert!(v["waiting"].as_u64().is_some_and(|n| n >= 4), "{v}");
    assert_eq!(v["errors"], serde_json::json!([]));
}

#[test]
fn once_prints_one_text_frame() {
    let s = Server::start();
    let _w = Workload::start(&s);
    let o = cli(&["top", "--url", &s.url(), "--once", "--interval", "0.5", "--sort", "key"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].contains("sort: key"), "{out}");
    assert!(lines[1].starts_with("grants/s ") && lines[1].contains("wait p50 "), "{out}");
    let header = lines.iter().position(|l| l.starts_with("KEY ")).expect("the table's header");
    let rows: Vec<Vec<&str>> = lines[header + 1..].iter().map(|l| l.split_whitespace().collect()).collect();
    // Sorted by key: top:busy before top:less.
    let busy = rows.iter().position(|r| r[0] == "top:busy").expect("top:busy");
    let less = rows.iter().position(|r| r[0] == "top:less").expect("top:less");
    assert!(busy < less, "{out}");
    assert_eq!(&rows[busy][1..3], ["exclusive", "3"], "{out}");
    assert_eq!(rows[less][2], "1", "{out}");
}

#[test]
fn a_server_that_cannot_be_read_is_reported() {
    let s = Server::start();
    let port = s.port();
    drop(s);
    let o = cli(&["top", "--url", &format!("redis://127.0.0.1:{port}/"), "--once", "--json", "--interval", "0.1"]);
    assert_eq!(o.status.code(), Some(69), "{}", stdout(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert!(v["errors"][0].as_str().is_some_and(|e| e.contains(&port.to_string())), "{v}");
}

/// On a cluster, `top` reads every master (`--cluster` with one seed, and
/// a `redis+cluster://` URL naming another), and no replica: the contended
/// keys of each master, with their waiter counts and the master that
/// serves them, most waiters first across the masters.
#[test]
fn a_cluster_shows_the_keys_of_every_master() {
    let cluster = Cluster::start(3, 1);
    let masters = cluster.masters();
    let seed = cluster.node(masters[0]).url();
    let holder = LockClient::open_cluster(&[seed.as_str()]).expect("cluster client");
    // Master i's key has i + 1 waiters (1, 2, 3: their order in LOCK.TOP's).
    let keys: Vec<(String, usize, u64)> =
        masters.iter().enumerate().map(|(i, &m)| (cluster.key_on(&format!("top:m{i}:"), m), m, i as u64 + 1)).collect();
    let _held: Vec<_> =
        keys.iter().map(|(k, _, _)| holder.try_acquire(k, Duration::from_secs(120)).expect("free key")).collect();
    for (key, _, n) in &keys {
        for _ in 0..*n {
            let (seed, key) = (seed.clone(), key.clone());
            std::thread::spawn(move || {
                let c = LockClient::open_cluster(&[seed.as_str()]).expect("cluster client");
                // Never granted while the test runs.
                c.acquire(&key, ms(60_000), ms(60_000))
            });
        }
    }
    for (key, _, n) in &keys {
        assert!(
            eventually(ms(20_000), || holder.info(key).unwrap().is_some_and(|i| i.waiters == *n)),
            "{n} waiters on {key}"
        );
    }
    let addr = |m: usize| format!("127.0.0.1:{}", cluster.node(m).port());
    let all_masters: Vec<String> = masters.iter().map(|&m| addr(m)).collect();
    let cluster_url = format!("redis+cluster://127.0.0.1:{}/", cluster.node(masters[1]).port());
    for target in [vec!["--cluster", "--url", seed.as_str()], vec!["--url", cluster_url.as_str()]] {
        let mut args = vec!["top", "--once", "--json", "--interval", "0.5"];
        args.extend(target.iter().copied());
        let o = cli(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        let v: Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
        let mut servers: Vec<String> =
            v["servers"].as_array().expect("servers").iter().map(|s| s.as_str().unwrap_or("").to_string()).collect();
        servers.sort();
        let mut expected = all_masters.clone();
        expected.sort();
        assert_eq!(servers, expected, "{args:?}: {v}");
        assert_eq!(v["errors"], serde_json::json!([]), "{v}");
        assert!(v["waiting"].as_u64().is_some_and(|n| n >= 6), "{v}");
        let shown = v["keys"].as_array().expect("keys");
        assert_eq!(shown.len(), 3, "{v}");
        // Most waiters first, across the masters.
        for (row, (key, m, n)) in shown.iter().zip(keys.iter().rev()) {
            assert_eq!(row["key"], key.as_str(), "{v}");
            assert_eq!(row["waiters"], *n, "{v}");
            assert_eq!(row["server"], addr(*m), "{v}");
            assert_eq!(row["holders"], 1, "{v}");
        }
    }
}

/// A tmux server of its own (its own socket), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("run tmux")
    }

    fn pane(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Polls the pane until `f` holds (20 s at most); the last capture.
    fn until(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let p = self.pane();
            if f(&p) {
                return p;
            }
            assert!(Instant::now() < end, "{what}: the pane shows\n{p}");
            std::thread::sleep(ms(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// The line of the pane's table for `key`, split on spaces.
fn row(pane: &str, key: &str) -> Option<Vec<String>> {
    pane.lines().find(|l| l.starts_with(key)).map(|l| l.split_whitespace().map(String::from).collect())
}

#[test]
fn the_live_view_in_a_real_terminal() {
    if Command::new("tmux").arg("-V").output().map(|o| !o.status.success()).unwrap_or(true) {
        println!("SKIPPED: tmux is not installed (scripts/deps.sh installs it)");
        return;
    }
    let s = Server::start();
    let _w = Workload::start(&s);
    let dir = s.dir().to_path_buf();
    let t = Tmux { socket: format!("redis-lock-top-{}", std::process::id()) };
    let shell = t.cmd(&["new-session", "-d", "-s", "top", "-x", "140", "-y", "30", "bash --norc --noprofile"]);
    assert!(shell.status.success(), "{}", String::from_utf8_lossy(&shell.stderr));
    // The terminal's settings before and after each run: restored means equal.
    let run = |n: u32| {
        format!(
            "stty -g > {d}/before{n}; {BIN} top --url {u}; echo top-exited-$?-{n}; stty -g > {d}/after{n}",
            d = dir.display(),
            u = s.url()
        )
    };
    let restored = |n: u32| {
        let read = |f: &str| std::fs::read_to_string(Path::new(&dir).join(format!("{f}{n}"))).unwrap_or_default();
        eventually(ms(10_000), || !read("after").is_empty()) && read("before") == read("after")
    };
    for (n, quit) in [(1, "q"), (2, "C-c")] {
        assert!(t.cmd(&["send-keys", "-t", "top", &run(n), "Enter"]).status.success());
        let pane = t.until("top shows the contended key and its 3 waiters", |p| {
            row(p, "top:busy").is_some_and(|r| r.get(1).map(String::as_str) == Some("exclusive") && r[2] == "3")
        });
        assert!(pane.contains("grants/s") && pane.contains("OLDEST-WAIT-MS"), "{pane}");
        assert!(row(&pane, "top:less").is_some_and(|r| r[2] == "1"), "{pane}");
        if n == 1 {
            // The capture in docs/observability.md comes from here.
            println!("{pane}");
        }
        assert!(t.cmd(&["send-keys", "-t", "top", quit]).status.success());
        let done = format!("top-exited-0-{n}");
        let pane = t.until("top exits on its key", |p| p.lines().any(|l| l.trim() == done));
        // Back on the shell's screen: the alternate screen is gone.
        assert!(!pane.contains("OLDEST-WAIT-MS"), "{pane}");
        assert!(restored(n), "the terminal's settings after {quit} differ from before");
    }
}
