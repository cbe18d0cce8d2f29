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

/// `args`' error, as text (the command must be refused).
pub fn err<A: ToRedisArgs + std::fmt::Debug>(c: &mut Connection, args: &[A]) -> String {
    cmd(c, args).expect_err(&format!("{args:?} refused")).to_string()
}

/// The whole sorted set, as the server prints it (members and scores).
pub fn zrange(c: &mut Connection, key: &str) -> Vec<(Vec<u8>, String)> {
    redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query(c).expect("ZRANGE")
}

/// `member`'s score in `key`, if it is there.
pub fn score<M: ToRedisArgs>(c: &mut Connection, key: &str, member: M) -> Option<f64> {
    redis::cmd("ZSCORE").arg(key).arg(member).query(c).expect("ZSCORE")
}

pub fn pexpiretime(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).expect("PEXPIRETIME")
}

/// A holder's score: the end of its place (lease end + the key's delay).
pub fn place(c: &mut Connection, key: &str, token: &str) -> i64 {
    score(c, key, token).unwrap_or_else(|| panic!("{token} holds no place in {key}")) as i64
}
