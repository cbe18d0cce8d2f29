//! Helpers of the eviction tests (tests/eviction.rs,
//! tests/eviction_window.rs): `INFO lock` as a map, and one command.

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

/// `args` on `c`.
pub fn run(c: &mut Connection, args: &[&str]) -> RedisResult<Value> {
    redis::cmd(args[0]).arg(&args[1..]).query(c)
}
