//! `scripts/serve` runs `redis-server redis.conf` from the repository root:
//! that configuration must load the module as written.

use redis_lock_harness::{module_path, workspace_root, Server};

#[test]
fn redis_conf_loads_the_module_when_started_from_the_repository_root() {
    // The path redis.conf names is the default release build, which this builds.
    module_path();
    let root = workspace_root();
    std::fs::create_dir_all(root.join("var")).unwrap();
    // Only the port and persistence differ from serving: no files written.
    let server = Server::builder().config_file(root.join("redis.conf")).start();
    let granted: i64 = redis::cmd("LOCK.ACQUIRE").arg("serve:k").arg("t").arg(1000).query(&mut server.conn()).unwrap();
    assert_eq!(granted, 1);
}
