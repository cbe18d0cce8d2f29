//! A private redis-server for tests and benchmarks.
//!
//! [`Server::start`] builds the module (once per process), starts
//! `redis-server` with it on a free loopback port in a fresh directory, and
//! waits until it answers. Dropping the [`Server`] kills the process and
//! removes the directory, also when a test panics. [`Server::builder`] adds
//! server options, leaves the module out, or keeps the data directory for a
//! restart. [`Cluster::start`] starts a Redis Cluster of such servers
//! (see the `cluster` module).
//!
//! [`Builder::clock_offset_ms`] shifts one server's wall clock (see the
//! `clock` module).
//!
//! Environment: `REDIS_SERVER` names the server binary (default
//! `redis-server` on `PATH`); `REDIS_LOCK_MODULE` names a prebuilt module to
//! load instead of building `target/release/libredis_lock.so`.
//! [`server_version`] tells which server that is (redis or valkey, and its
//! version) for tests whose right answer depends on it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod clock;
mod cluster;
pub mod layers;

pub use cluster::{key_in_slot, key_slot, Cluster, NodeView, SlotMigration, SLOTS};
mod version;
pub use version::{server_binary, server_version, Flavor, ServerVersion};

/// How long a server may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The module to load: `$REDIS_LOCK_MODULE`, or the workspace's release
/// build, brought up to date by `cargo build` the first time it is asked for.
pub fn module_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("REDIS_LOCK_MODULE") {
            return PathBuf::from(p);
        }
        let root = workspace_root();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--release", "--quiet", "-p", "redis-lock", "--lib"])
            .current_dir(&root)
            .status()
            .expect("run cargo to build the module");
        assert!(status.success(), "building the module failed");
        let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
        let so = target.join("release").join(format!(
            "{}redis_lock{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
        assert!(so.exists(), "module not found at {}", so.display());
        so
    })
    .clone()
}

/// The repository root (where `redis.conf` and the workspace manifest live).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("harness sits in the workspace").to_path_buf()
}

/// Options for a server; see [`Server::builder`].
#[derive(Clone, Debug)]
pub struct Builder {
    module: bool,
    args: Vec<String>,
    dir: Option<PathBuf>,
    /// Set by `restart`, to come back on the same port.
    port: Option<u16>,
    /// See [`Builder::cluster_bus`]; set to its port by `restart`.
    bus_port: Option<Option<u16>>,
    /// See [`Builder::clock_offset_ms`].
    clock_offset_ms: Option<i64>,
    /// Commands for an `appendonly.aof` the server loads at start.
    aof: Option<Vec<u8>>,
    /// See [`Builder::config_file`].
    config: Option<PathBuf>,
}

impl Builder {
    /// Start without the module (the script-only server the client falls back on).
    pub fn without_module(mut self) -> Self {
        self.module = false;
        self
    }

    /// Adds a server option, e.g. `.arg("appendonly", "yes")`.
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.args.push(format!("--{name}"));
        self.args.push(value.to_string());
        self
    }

    /// Runs in `dir` (created if missing) and leaves it in place on drop, so
    /// another server can start from its RDB or AOF.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Starts `redis-server CONF` in the file's folder, the way a user starts
    /// one, so the file's own `dir` and `loadmodule` paths resolve as they
    /// would for that user; the test defaults (a free port, loopback, no
    /// persistence) and [`Builder::arg`]s go on top. The harness loads no
    /// module of its own (the file says which); [`Server::dir`] then holds
    /// only the log.
    pub fn config_file(mut self, conf: impl Into<PathBuf>) -> Self {
        self.config = Some(std::path::absolute(conf.into()).expect("the configuration file's path"));
        self.module = false;
        self
    }

    /// Starts the server with AOF on, from an old-style `appendonly.aof`
    /// holding these commands: the way to put the server in a state that
    /// only a master or a replayed log may bring about (e.g. a fence mark
    /// no client may set). Redis 7+ adopts such a file as its AOF base.
    pub fn aof_commands(mut self, commands: &[&[&str]]) -> Self {
        let mut out = Vec::new();
        for args in commands {
            out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for a in *args {
                out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
        }
        self.aof = Some(out);
        self.arg("appendonly", "yes")
    }

    /// Cluster mode's bus on a free port of its own (`cluster-port`),
    /// chosen afresh with the server's port on each try to start it (a
    /// port found free can be taken before the server binds it), and kept
    /// by [`Server::restart`].
    pub fn cluster_bus(mut self) -> Self {
        self.bus_port = Some(None);
        self
    }

    /// Starts the server and waits until it answers PING.
    pub fn start(self) -> Server {
        Server::launch(self)
    }
}

/// A running redis-server, killed when dropped.
pub struct Server {
    child: Child,
    port: u16,
    /// The cluster bus's port, with [`Builder::cluster_bus`].
    bus_port: Option<u16>,
    dir: PathBuf,
    owns_dir: bool,
    builder: Builder,
}

impl Server {
    /// A server with the module loaded and the defaults of a test: no
    /// persistence, loopback only, a replica's first sync sent at once.
    pub fn start() -> Server {
        Self::builder().start()
    }

    /// A server to configure before starting.
    pub fn builder() -> Builder {
        Builder {
            module: true,
            args: Vec::new(),
            dir: None,
            port: None,
            bus_port: None,
            clock_offset_ms: None,
            aof: None,
            config: None,
        }
    }

    fn launch(builder: Builder) -> Server {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let (dir, owns_dir) = match &builder.dir {
            Some(d) => (d.clone(), false),
            None => {
                let n = COUNTER.fetch_add(1, Ordering::Relaxed);
                (std::env::temp_dir().join(format!("redis-lock-test-{}-{n}", std::process::id())), true)
            }
        };
        std::fs::create_dir_all(&dir).expect("create server dir");
        if let Some(aof) = &builder.aof {
            if !dir.join("appendonlydir").exists() {
                std::fs::write(dir.join("appendonly.aof"), aof).expect("write the AOF");
            }
        }
        let module = builder.module.then(module_path);
        let binary = server_binary();
        // A free port can be taken between our probe and the server's bind;
        // then the server exits and we try another.
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = builder.port.unwrap_or_else(free_port);
            let bus_port = builder.bus_port.map(|p| p.unwrap_or_else(free_port));
            let mut cmd = Command::new(&binary);
            if let Some(conf) = &builder.config {
                // The file's `dir` applies (relative to its folder), not ours.
                cmd.current_dir(conf.parent().expect("a file's folder")).arg(conf);
            } else {
                cmd.args(["--dir", dir.to_str().expect("utf-8 temp dir")]);
            }
            // Absolute: a configuration file's `dir` may move the server elsewhere.
            let log = std::path::absolute(dir.join("server.log")).expect("the log's path");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--logfile", log.to_str().expect("utf-8 temp dir"), "--daemonize", "no"])
                .args(["--enable-debug-command", "yes"])
                // A master sends a replica its first full copy at once: by
                // default it waits 5 s for more replicas to sync together
                // (diskless sync), which every test with a replica, and
                // every cluster with replicas, would spend idle.
                .args(["--repl-diskless-sync-delay", "0"]);
            if let Some(b) = bus_port {
                cmd.args(["--cluster-port", &b.to_string()]);
            }
            if let Some(m) = &module {
                cmd.args(["--loadmodule", m.to_str().expect("utf-8 module path")]);
            }
            if let Some(offset) = builder.clock_offset_ms {
                cmd.envs(clock::env(offset));
            }
            cmd.args(&builder.args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            let child = cmd.spawn().unwrap_or_else(|e| panic!("start {binary}: {e} (install redis-server)"));
            let mut server = Server { child, port, bus_port, dir: dir.clone(), owns_dir, builder: builder.clone() };
            if server.wait_ready() {
                return server;
            }
            last_log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            let _ = server.child.kill();
            let _ = server.child.wait();
            std::mem::forget(server); // the next attempt reuses the directory
        }
        panic!("redis-server did not start; its log:\n{last_log}");
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                if let Ok(mut c) = self.client().get_connection() {
                    // A server still loading its data answers PING with -LOADING.
                    if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                        // Another test's server may have taken the port
                        // first (ours then exits): only ours will do.
                        return self.answers_as_our_child(&mut c);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Whether the server behind `c` is this guard's process.
    fn answers_as_our_child(&self, c: &mut redis::Connection) -> bool {
        let info: String = redis::cmd("INFO").arg("server").query(c).unwrap_or_default();
        info.lines().filter_map(|l| l.strip_prefix("process_id:")).any(|pid| pid.trim() == self.child.id().to_string())
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's working directory (RDB, AOF and `server.log` live here).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A client for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("valid url")
    }

    /// A new connection to this server.
    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connect to test server")
    }

    /// The server's pid, e.g. to stop it abruptly.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server (no shutdown save) and starts it again with the same
    /// options, port and directory, so it loads whatever it had persisted.
    pub fn restart(&mut self) {
        self.kill();
        let mut builder = self.builder.clone();
        builder.dir = Some(self.dir.clone());
        builder.port = Some(self.port);
        if self.bus_port.is_some() {
            builder.bus_port = Some(self.bus_port);
        }
        let mut again = Server::launch(builder);
        again.owns_dir = self.owns_dir;
        again.builder = self.builder.clone();
        // The old guard's process is already reaped and its directory is
        // now the new server's: drop it without its Drop.
        std::mem::forget(std::mem::replace(self, again));
    }

    /// As [`Server::restart`], with the server's wall clock shifted by
    /// `offset_ms` from then on ([`Builder::clock_offset_ms`]): a clock
    /// that jumped while the server was down.
    pub fn restart_with_clock_offset_ms(&mut self, offset_ms: i64) {
        self.builder.clock_offset_ms = Some(offset_ms);
        self.restart();
    }

    /// Stops (SIGSTOP) or continues (SIGCONT) the server: a paused server
    /// keeps its connections and data but answers nothing, like a machine
    /// in a long pause or behind a partition. The guard's SIGKILL on drop
    /// ends a stopped process too, so a failing test leaves nothing behind.
    pub fn set_paused(&self, paused: bool) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: signalling our own child process.
        let r = unsafe { libc::kill(pid, if paused { libc::SIGSTOP } else { libc::SIGCONT }) };
        assert_eq!(r, 0, "kill({pid})");
    }

    /// Waits up to `timeout` for the server to exit by itself (after
    /// `SHUTDOWN`, or a crash) and returns how it ended.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// The server's log so far (`server.log` in its directory).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// SHUTDOWN-free stop: SIGKILL, then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A server that crashed takes its log with its directory: show the
        // end of it (the crash report) with the failing test's output.
        if let Ok(Some(status)) = self.child.try_wait() {
            use std::os::unix::process::ExitStatusExt;
            if matches!(status.signal(), Some(4 | 6 | 7 | 8 | 11)) {
                let log = self.log();
                let lines: Vec<&str> = log.lines().collect();
                // Redis and Valkey open their crash report with this line;
                // the stack trace follows it.
                let from =
                    lines.iter().position(|l| l.contains("BUG REPORT START")).unwrap_or(lines.len().saturating_sub(40));
                let report = lines[from..].iter().take(40).copied().collect::<Vec<_>>().join("\n");
                eprintln!("{} on port {} crashed ({status}); its log:\n{report}", server_binary(), self.port);
            }
        }
        self.kill();
        unclaim(self.port);
        if let Some(b) = self.bus_port {
            unclaim(b);
        }
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Where this machine's test processes note the ports their servers own.
fn claims() -> std::path::PathBuf {
    std::env::temp_dir().join("redis-lock-ports")
}

/// Notes `port` as this process's for as long as its server's guard lives,
/// across the guard's restarts: a cluster node or a restarted server comes
/// back on the same port, and while it is down another test binary (they
/// run side by side) found the port free and started its own server
/// there, so that every attempt to restart failed. A claim whose process
/// is gone is taken over. False: another live process holds it.
fn claim(port: u16) -> bool {
    let dir = claims();
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(port.to_string());
    let me = std::process::id().to_string();
    for _ in 0..2 {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                use std::io::Write;
                return f.write_all(me.as_bytes()).is_ok();
            }
            Err(_) => {
                let owner = std::fs::read_to_string(&path).unwrap_or_default();
                let owner = owner.trim();
                if owner == me {
                    return true;
                }
                if !owner.is_empty() && std::path::Path::new("/proc").join(owner).exists() {
                    return false;
                }
                // A dead process's claim (or one being written): take it over.
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    false
}

/// Gives up this process's claim on `port` ([`claim`]).
fn unclaim(port: u16) {
    let path = claims().join(port.to_string());
    if std::fs::read_to_string(&path).is_ok_and(|o| o.trim() == std::process::id().to_string()) {
        let _ = std::fs::remove_file(&path);
    }
}

/// A port free now for a new server, from below the kernel's ephemeral
/// range (`ip_local_port_range`): a port from `bind(0)` lies in that range,
/// where any client's outgoing connection (tests open many) may take it
/// between this probe and the server's bind, or while a killed server is
/// restarted on it; below the range only another listener can. Picked at
/// random and checked with a bind; `bind(0)` when the range leaves too
/// little room below it.
pub(crate) fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    const FIRST: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .min(65_536);
    if ephemeral >= FIRST + 4_000 {
        for _ in 0..200 {
            // RandomState is seeded per process and per instance.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            let port = FIRST + (h.finish() % u64::from(ephemeral - FIRST)) as u32;
            let port = u16::try_from(port).expect("below 65536");
            if TcpListener::bind(("127.0.0.1", port)).is_ok() && claim(port) {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("bind a loopback port")
}
