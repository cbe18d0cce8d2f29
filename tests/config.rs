//! The module's configuration (`lock.max-waiters`) in every way Redis sets
//! a module config: a line of the config file, `MODULE LOADEX ... CONFIG`,
//! `CONFIG SET` / `CONFIG GET`, and `CONFIG REWRITE` back to the file.

use redis::Value;
use redis_lock_harness::{module_path, Server};

fn max_waiters(c: &mut redis::Connection) -> String {
    let got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("lock.max-waiters").query(c).expect("CONFIG GET");
    assert_eq!(got.len(), 2, "{got:?}");
    got[1].clone()
}

/// `LOCK.ACQUIRE key token 60000 WAIT 0` on a new connection, in the
/// background; the key is held, so it blocks (or is refused at the cap).
fn start_waiting(server: &Server, key: &str) -> std::thread::JoinHandle<redis::RedisResult<Value>> {
    let mut c = server.conn();
    let key = key.to_string();
    std::thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE").arg(&key).arg("w").arg(60_000).arg("WAIT").arg(0).query(&mut c)
    })
}

fn waiting(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("lock").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("lock_waiting:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("lock_waiting")
}

#[test]
fn the_default_is_no_cap_of_the_modules_own() {
    let server = Server::start();
    assert_eq!(max_waiters(&mut server.conn()), "0");
}

#[test]
fn a_line_in_the_config_file_sets_it_at_load_and_config_rewrite_keeps_it() {
    // As in this repository's redis.conf: the config's line after the
    // module's loadmodule line.
    let dir = std::env::temp_dir().join(format!("redis-lock-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("redis.conf");
    std::fs::write(&conf, format!("loadmodule {}\nlock.max-waiters 1\n", module_path().display())).unwrap();
    let server = Server::builder().config_file(&conf).start();
    let mut c = server.conn();
    assert_eq!(max_waiters(&mut c), "1");
    // The cap is in force: one waiter blocks, the second is refused.
    let _: i64 = redis::cmd("LOCK.ACQUIRE").arg("k").arg("holder").arg(60_000).query(&mut c).unwrap();
    let first = start_waiting(&server, "k");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while waiting(&mut c) != 1 {
        assert!(std::time::Instant::now() < deadline, "the first waiter never blocked");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let err = start_waiting(&server, "k").join().unwrap().unwrap_err();
    assert!(err.to_string().contains("lock.max-waiters reached"), "{err}");
    let released: i64 = redis::cmd("LOCK.RELEASE").arg("k").arg("holder").query(&mut c).unwrap();
    assert_eq!(released, 1);
    assert_eq!(first.join().unwrap().unwrap(), Value::Int(1));

    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(250).query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut c).unwrap();
    let file = std::fs::read_to_string(&conf).unwrap();
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(file.lines().any(|l| l == "lock.max-waiters 250"), "CONFIG REWRITE wrote:\n{file}");
}

#[test]
fn module_loadex_sets_it_and_refuses_a_bad_value() {
    let server = Server::builder().without_module().arg("enable-module-command", "yes").start();
    let mut c = server.conn();
    let path = module_path().to_str().expect("utf-8 module path").to_string();
    let loadex = |c: &mut redis::Connection, value: &str| {
        redis::cmd("MODULE").arg("LOADEX").arg(&path).arg("CONFIG").arg("lock.max-waiters").arg(value).query::<Value>(c)
    };
    // A value out of range: the module does not load at all.
    assert!(loadex(&mut c, "-1").is_err());
    let err = redis::cmd("LOCK.ACQUIRE").arg("k").arg("t").arg(1000).query::<Value>(&mut c).unwrap_err();
    assert!(err.to_string().to_lowercase().contains("unknown command"), "not loaded: {err}");
    assert_eq!(loadex(&mut c, "7").unwrap(), Value::Okay);
    assert_eq!(max_waiters(&mut c), "7");
    let r: i64 = redis::cmd("LOCK.ACQUIRE").arg("k").arg("t").arg(1000).query(&mut c).unwrap();
    assert_eq!(r, 1, "the module serves");
}

#[test]
fn config_set_checks_its_bounds_and_changes_nothing_when_refused() {
    let server = Server::start();
    let mut c = server.conn();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(10_000).query(&mut c).unwrap();
    assert_eq!(max_waiters(&mut c), "10000");
    for bad in ["-1", "abc", "1.5", "9223372036854775808"] {
        let err = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(bad).query::<Value>(&mut c).unwrap_err();
        assert!(err.to_string().contains("max-waiters"), "{bad}: {err}");
        assert_eq!(max_waiters(&mut c), "10000", "after {bad}");
    }
    let _: () = redis::cmd("CONFIG").arg("SET").arg("lock.max-waiters").arg(0).query(&mut c).unwrap();
    assert_eq!(max_waiters(&mut c), "0");
}
