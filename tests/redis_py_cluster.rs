//! Every module command through a client nobody here wrote: redis-py's
//! `RedisCluster` (8.2.0, installed by `scripts/deps.sh` into
//! `.servers/python`), against a cluster of
//! the harness. redis-py refuses a command name with two dots before
//! sending it (`module.command` is the convention of `JSON.SET`, `FT.SEARCH`,
//! `BF.ADD`), and routes by the key specs `COMMAND` reports: the script
//! `tests/redis_py/cluster_commands.py` checks every reply and where each
//! key landed.

use std::process::Command;

use redis_lock_harness::{workspace_root, Cluster};

#[test]
fn every_module_command_goes_through_redis_py_cluster() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let c = Cluster::start(3, 0);
    let script = workspace_root().join("tests/redis_py/cluster_commands.py");
    let out = Command::new(&python)
        .env("PYTHONPATH", workspace_root().join(".servers/python"))
        .arg(&script)
        .arg(c.node(c.masters()[0]).port().to_string())
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e} (scripts/deps.sh installs python3 and redis-py)"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("all module commands answered through RedisCluster"), "{stdout}");
    for command in [
        "LOCK.ACQUIRE",
        "LOCK.GUARD",
        "LOCK.TAKEOVER",
        "SEM.ACQUIRE",
        "SEM.INFO",
        "RWLOCK.ACQUIRE",
        "RWLOCK.INFO",
        "SESSION.GRANT",
        "SESSION.KEEPALIVE",
        "SESSION.REVOKE",
    ] {
        assert!(stdout.contains(&format!("ok {command}")), "{command} not checked:\n{stdout}");
    }
}
