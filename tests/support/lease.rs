//! Helpers of the lease tests (lock-delay and hold limits, on locks and on
//! holders): the server's clock, plain calls, and field/value replies.

use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, ToRedisArgs, Value};

/// The server's clock (Unix ms).
pub fn server_now(c: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(c).expect("TIME");
    s * 1000 + us / 1000
}

/// Waits (on the server's clock) until `at` has passed.
pub fn until_server_time(c: &mut Connection, at: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server_now(c) <= at {
        assert!(Instant::now() < deadline, "the server's clock did not reach {at}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// `args` (the command's name first) as one command.
pub fn cmd<A: ToRedisArgs>(c: &mut Connection, args: &[A]) -> redis::RedisResult<Value> {
    redis::Cmd::new().arg(args).query(c)
}

/// `args`' integer reply.
pub fn int<A: ToRedisArgs + std::fmt::Debug>(c: &mut Connection, args: &[A]) -> i64 {
    match cmd(c, args) {
        Ok(Value::Int(n)) => n,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// A field/value reply (`LOCK.INFO`, `SEM.INFO`, …) as pairs; `None` for nil.
pub fn fields_of<A: ToRedisArgs + std::fmt::Debug>(c: &mut Connection, args: &[A]) -> Option<Vec<(String, Value)>> {
    match cmd(c, args).expect("INFO") {
        Value::Nil => None,
        Value::Array(items) => Some(
            items
                .chunks(2)
                .map(|p| (redis::from_redis_value_ref::<String>(&p[0]).expect("name"), p[1].clone()))
                .collect(),
        ),
        Value::Map(pairs) => {
            Some(pairs.into_iter().map(|(k, v)| (redis::from_redis_value::<String>(k).expect("name"), v)).collect())
        }
        other => panic!("{args:?}: {other:?}"),
    }
}

/// The field `name` of [`fields_of`]'s pairs.
pub fn field(f: &[(String, Value)], name: &str) -> Value {
    f.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name} in {f:?}")).1.clone()
}
