//! `scripts/serve` runs `redis-server redis.conf` from the repository root:
//! that configuration must load the module as written.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_lock_harness::{module_path, server_binary, workspace_root};

/// Kills the server even when an assertion fails.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn redis_conf_loads_the_module_when_started_from_the_repository_root() {
    // The path redis.conf names is the default release build, which this builds.
    module_path();
    let root = workspace_root();
    std::fs::create_dir_all(root.join("var")).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let binary = server_binary();
    // Only the port and persistence differ from serving: no files written.
    let child = Command::new(binary)
        .args(["redis.conf", "--port", &port.to_string(), "--appendonly", "no", "--save", ""])
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let mut server = Guard(child);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut con = loop {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!("redis-server redis.conf exited ({status}): the module did not load");
        }
        if let Ok(mut c) = client.get_connection() {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                break c;
            }
        }
        assert!(Instant::now() < deadline, "redis-server redis.conf did not answer");
        std::thread::sleep(Duration::from_millis(20));
    };
    let granted: i64 = redis::cmd("LOCK.ACQUIRE").arg("serve:k").arg("t").arg(1000).query(&mut con).unwrap();
    assert_eq!(granted, 1);
}
