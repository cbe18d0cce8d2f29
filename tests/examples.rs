//! The client examples of docs/clients.md run against real servers with
//! the module, so they cannot rot: `examples/python/locks.py` (redis-py)
//! and `examples/node/locks.js` (ioredis) on one server,
//! `examples/python/cluster.py` (redis-py's `RedisCluster`) and
//! `examples/node/cluster.js` (ioredis's `Redis.Cluster`) on a 3-master
//! cluster. Each example checks every reply itself and exits non-zero on
//! the first wrong one; the harness stops the servers when a test ends,
//! passed or failed. The packages are pinned and installed by
//! `scripts/deps.sh --servers` into the ignored `.servers/` (redis-py into
//! `.servers/python`, ioredis into `.servers/node`), as `scripts/test` runs
//! it first. (The Go example is not compiled here: see docs/clients.md.)

use std::process::Command;

use redis_lock_harness::{workspace_root, Cluster, Server};

/// Runs `program script args…` with `env`, and checks that it passed and
/// printed `done`.
fn run_example(program: &str, env: (&str, &str), script: &str, args: &[&str], done: &str) {
    let root = workspace_root();
    let out = Command::new(program)
        .env(env.0, root.join(env.1))
        .arg(root.join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/deps.sh --servers installs it)"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script} failed ({}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains(done), "{script} did not finish:\n{stdout}\n{stderr}");
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn the_python_example_runs_against_one_server() {
    let server = Server::start();
    run_example(
        &python(),
        ("PYTHONPATH", ".servers/python"),
        "examples/python/locks.py",
        &[&server.url()],
        "python example: every reply as documented",
    );
}

#[test]
fn the_python_cluster_example_runs_against_a_cluster() {
    let c = Cluster::start(3, 0);
    let port = c.node(c.masters()[0]).port().to_string();
    run_example(
        &python(),
        ("PYTHONPATH", ".servers/python"),
        "examples/python/cluster.py",
        &[&port],
        "python cluster example: every reply as documented",
    );
}

#[test]
fn the_node_example_runs_against_one_server() {
    let server = Server::start();
    run_example(
        "node",
        ("NODE_PATH", ".servers/node/node_modules"),
        "examples/node/locks.js",
        &[&server.url()],
        "node example: every reply as documented",
    );
}

#[test]
fn the_node_cluster_example_runs_against_a_cluster() {
    let c = Cluster::start(3, 0);
    let port = c.node(c.masters()[0]).port().to_string();
    run_example(
        "node",
        ("NODE_PATH", ".servers/node/node_modules"),
        "examples/node/cluster.js",
        &[&port],
        "node cluster example: every reply as documented",
    );
}
