//! The locks of one server: `SCAN ... MATCH ... COUNT`, then one pipeline
//! of `LOCK.INFO` per batch of keys (a script reading `TYPE`, `GET` and
//! `PTTL` together on a server without the module).

use std::time::Duration;

use redis::{Connection, ConnectionInfo, RedisError, RedisResult, Value};
use redis_lock_rules::lock::describe;

/// Connect and reply timeout of each server: a dead one is reported,
/// not waited for.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one server (a listed one, or a cluster seed), every
/// wait on it bounded by [`TIMEOUT`].
pub fn connect(info: ConnectionInfo) -> RedisResult<Connection> {
    let con = redis::Client::open(info)?.get_connection_with_timeout(TIMEOUT)?;
    con.set_read_timeout(Some(TIMEOUT))?;
    con.set_write_timeout(Some(TIMEOUT))?;
    Ok(con)
}

/// What one key holds, as `LOCK.INFO` reports it.
pub struct Row {
    /// `host:port` of the server that has the key.
    pub server: String,
    pub key: Vec<u8>,
    pub state: State,
}

pub enum State {
    /// A string: LOCK.INFO's fields.
    Lock {
        owner: Option<Vec<u8>>,
        run_id: Option<Vec<u8>>,
        /// `legacy` or `structured`.
        format: &'static str,
        /// -1 when the key has no expiry.
        ttl_ms: i64,
        fence: Option<u64>,
        waiters: u64,
    },
    /// Another type: no lock, yet it keeps `acquire` from taking the key.
    Other,
}

/// Every key matching `pattern` on `con`'s server, described in batches
/// of at most `count` keys.
pub fn scan(con: &mut Connection, server: &str, pattern: &str, count: usize) -> RedisResult<Vec<Row>> {
    let mut rows = Vec::new();
    // Cleared by the first "unknown command" reply to LOCK.INFO.
    let mut module = true;
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) =
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(count).query(con)?;
        for batch in keys.chunks(count) {
            for (key, state) in batch.iter().zip(states(con, batch, &mut module)?) {
                // None: the key expired or was deleted since SCAN saw it.
                if let Some(state) = state {
                    rows.push(Row { server: server.to_string(), key: key.clone(), state });
                }
            }
        }
        if next == 0 {
            return Ok(rows);
        }
        cursor = next;
    }
}

/// Reads the type, value and TTL of a key at one moment, as `LOCK.INFO`
/// does: a key cannot expire between the reads.
const TYPE_GET_PTTL: &str = "local t = redis.call('TYPE', KEYS[1])['ok'] \
    if t ~= 'string' then return {t} end \
    return {t, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}";

/// One pipeline for the batch: `LOCK.INFO`, else the script.
fn states(con: &mut Connection, keys: &[Vec<u8>], module: &mut bool) -> RedisResult<Vec<Option<State>>> {
    if *module {
        let mut p = redis::pipe();
        p.ignore_errors();
        for k in keys {
            p.cmd("LOCK.INFO").arg(k);
        }
        let replies: Vec<RedisResult<Value>> = p.query(con)?;
        if !replies.iter().any(|r| matches!(r, Err(e) if is_unknown_command(e))) {
            return replies.into_iter().map(from_module).collect();
        }
        *module = false;
    }
    let mut p = redis::pipe();
    for k in keys {
        p.cmd("EVAL").arg(TYPE_GET_PTTL).arg(1).arg(k);
    }
    let replies: Vec<Value> = p.query(con)?;
    replies.into_iter().map(from_script).collect()
}

fn is_unknown_command(e: &RedisError) -> bool {
    e.detail().is_some_and(|d| d.trim_start().to_ascii_lowercase().starts_with("unknown command"))
}

/// A `LOCK.INFO` reply: nil, `WRONGTYPE`, or field/value pairs (a flat
/// array, or a map under RESP3). Unknown fields are skipped, so a newer
/// module may add some.
fn from_module(v: Result<Value, RedisError>) -> RedisResult<Option<State>> {
    let pairs: Vec<(Value, Value)> = match v {
        Ok(Value::Nil) => return Ok(None),
        Err(e) if e.code() == Some("WRONGTYPE") => return Ok(Some(State::Other)),
        Err(e) => return Err(e),
        Ok(Value::Map(m)) => m,
        Ok(Value::Array(items)) if items.len() % 2 == 0 => {
            let mut it = items.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        Ok(other) => return Err(unexpected("LOCK.INFO reply", &other)),
    };
    let (mut owner, mut run_id, mut format, mut ttl_ms, mut fence, mut waiters) = (None, None, None, None, None, 0);
    for (name, value) in pairs {
        match (bytes(name)?.as_deref(), value) {
            (Some(b"owner"), v) => owner = bytes(v)?,
            (Some(b"run-id"), v) => run_id = bytes(v)?,
            (Some(b"format"), v) => {
                format = match bytes(v)?.as_deref() {
                    Some(b"legacy") => Some("legacy"),
                    Some(b"structured") => Some("structured"),
                    _ => return Err(unexpected("LOCK.INFO format", &Value::Nil)),
                }
            }
            (Some(b"ttl-ms"), Value::Int(n)) => ttl_ms = Some(n),
            (Some(b"fence"), Value::Int(n)) => fence = u64::try_from(n).ok(),
            (Some(b"waiters"), Value::Int(n)) => waiters = u64::try_from(n).unwrap_or(0),
            _ => {}
        }
    }
    match (format, ttl_ms) {
        (Some(format), Some(ttl_ms)) => Ok(Some(State::Lock { owner, run_id, format, ttl_ms, fence, waiters })),
        _ => Err(unexpected("LOCK.INFO reply without format or ttl-ms", &Value::Nil)),
    }
}

/// The script's `{type}` or `{"string", value, pttl}`, decoded by the
/// rules the module itself uses.
fn from_script(v: Value) -> RedisResult<Option<State>> {
    let Value::Array(items) = v else { return Err(unexpected("script reply", &v)) };
    let mut it = items.into_iter();
    let kind = it.next().map(bytes).transpose()?.flatten();
    match (kind.as_deref(), it.next(), it.next()) {
        (Some(b"none"), ..) => Ok(None),
        (Some(b"string"), Some(value), Some(Value::Int(ttl_ms))) => {
            let value = bytes(value)?.unwrap_or_default();
            let d = describe(&value);
            let format = if d.structured { "structured" } else { "legacy" };
            Ok(Some(State::Lock { owner: d.owner, run_id: d.run_id, format, ttl_ms, fence: None, waiters: 0 }))
        }
        (Some(_), None, None) => Ok(Some(State::Other)),
        _ => Err(unexpected("script reply", &Value::Nil)),
    }
}

fn bytes(v: Value) -> RedisResult<Option<Vec<u8>>> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) => Ok(Some(b)),
        Value::SimpleString(s) => Ok(Some(s.into_bytes())),
        other => Err(unexpected("string", &other)),
    }
}

fn unexpected(what: &str, v: &Value) -> RedisError {
    RedisError::from((redis::ErrorKind::UnexpectedReturnType, "unexpected reply", format!("{what}: {v:?}")))
}
