//! Helpers of the eviction tests (tests/eviction.rs, eviction_window.rs,
//! eviction_sessions.rs, eviction_loaded.rs): `INFO lock` as a map, one
//! command, a config set, the memory used, and memory filled past a limit.

use std::collections::HashMap;

use redis::{Connection, RedisResult, Value};

/// `INFO lock`'s fields, without their `lock_` prefix.
pub fn info(c: &mut Connection) -> HashMap<String, String> {
    super::lock_info(c)
}

/// Field `field` of [`info`] as a number.
pub fn num(i: &HashMap<String, String>, field: &str) -> u64 {
    i.get(field).unwrap_or_else(|| panic!("INFO lock has no {field}: {i:?}")).parse().unwrap()
}

/// `CONFIG SET name value`.
pub fn config_set(c: &mut Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(c).unwrap();
}

/// `INFO memory`'s `used_memory`.
pub fn used_memory(c: &mut Connection) -> u64 {
    let text: String = redis::cmd("INFO").arg("memory").query(c).unwrap();
    text.lines().find_map(|l| l.strip_prefix("used_memory:")).unwrap().trim().parse().unwrap()
}

/// Lets the server evict under `policy` once it uses `margin` bytes more
/// than now (`maxmemory` first, then the policy).
pub fn limit_memory(c: &mut Connection, margin: u64, policy: &str) {
    let limit = used_memory(c) + margin;
    config_set(c, "maxmemory", &limit.to_string());
    config_set(c, "maxmemory-policy", policy);
}

/// Writes `n` keys of 1 kB (`fill:0`…), with `EX ttl` if given; writes
/// refused for memory (OOM) are ignored.
pub fn fill(c: &mut Connection, n: usize, ttl: Option<u64>) {
    let v = "x".repeat(1000);
    for i in 0..n {
        let mut cmd = redis::cmd("SET");
        cmd.arg(format!("fill:{i}")).arg(&v);
        if let Some(ttl) = ttl {
            cmd.arg("EX").arg(ttl);
        }
        let _: RedisResult<Value> = cmd.query(c);
    }
}

/// `args` on `c`.
pub fn run(c: &mut Connection, args: &[&str]) -> RedisResult<Value> {
    redis::cmd(args[0]).arg(&args[1..]).query(c)
}
