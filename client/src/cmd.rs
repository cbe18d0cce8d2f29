//! The one command builder behind both APIs: a [`LockCmd`] is sent with
//! [`LockCmd::query`] (sync) or [`LockCmd::query_async`] (tokio), as a
//! `LOCK.*` module command or, on a server without the module, as the
//! reference Lua scripts (and `SET NX PX` for acquire), which behave the
//! same by construction: the module was written against those scripts.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use redis::{Cmd, ErrorKind, RedisResult, Script, ServerErrorKind, Value};
use redis_lock_rules::{args, encode, scripts, ArgError};

use crate::error::{Error, Result};

static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RENEW));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RELEASE));
static TAKEOVER: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::TAKEOVER));

/// Which commands a connection's server understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// Not asked yet: the next lock command finds out.
    Unknown,
    /// The `lock` module is loaded: `LOCK.*` commands.
    Module,
    /// No module: the reference Lua scripts via `EVALSHA`.
    Scripts,
}

/// The detected backend of one connection. Detection costs nothing extra:
/// the first `LOCK.*` command either works or fails with "unknown command",
/// and then the same operation is replayed as a script.
#[derive(Debug, Default)]
pub(crate) struct BackendCell(AtomicU8);

impl BackendCell {
    pub(crate) fn get(&self) -> Backend {
        match self.0.load(Ordering::Relaxed) {
            1 => Backend::Module,
            2 => Backend::Scripts,
            _ => Backend::Unknown,
        }
    }

    fn set(&self, b: Backend) {
        let v = match b {
            Backend::Unknown => 0,
            Backend::Module => 1,
            Backend::Scripts => 2,
        };
        self.0.store(v, Ordering::Relaxed);
    }

    /// A new connection may reach another server.
    pub(crate) fn reset(&self) {
        self.set(Backend::Unknown);
    }
}

/// One lock operation with validated arguments.
#[derive(Clone, Debug)]
pub(crate) enum LockCmd {
    Acquire { key: String, token: String, ttl_ms: u64 },
    Renew { key: String, token: String, ttl_ms: u64 },
    Release { key: String, token: String },
    /// A non-empty run-id (an empty one is built as `Acquire`).
    Takeover { key: String, token: String, run_id: String, ttl_ms: u64 },
}

enum Fallback {
    Cmd(Cmd),
    Script(redis::ScriptInvocation<'static>),
}

impl LockCmd {
    pub(crate) fn acquire(key: &str, token: &str, ttl: Duration) -> Result<Self> {
        let ttl_ms = check(key, token, ttl)?;
        Ok(LockCmd::Acquire { key: key.into(), token: token.into(), ttl_ms })
    }

    pub(crate) fn renew(key: &str, token: &str, ttl: Duration) -> Result<Self> {
        let ttl_ms = check(key, token, ttl)?;
        Ok(LockCmd::Renew { key: key.into(), token: token.into(), ttl_ms })
    }

    pub(crate) fn release(key: &str, token: &str) -> Result<Self> {
        args::check_key_and_token(key.as_bytes(), token.as_bytes())?;
        Ok(LockCmd::Release { key: key.into(), token: token.into() })
    }

    pub(crate) fn takeover(key: &str, token: &str, run_id: &str, ttl: Duration) -> Result<Self> {
        let ttl_ms = check(key, token, ttl)?;
        if run_id.is_empty() {
            // As in the Go wrapper and LOCK.TAKEOVER: no run-id, plain acquire.
            return Ok(LockCmd::Acquire { key: key.into(), token: token.into(), ttl_ms });
        }
        Ok(LockCmd::Takeover { key: key.into(), token: token.into(), run_id: run_id.into(), ttl_ms })
    }

    fn module_cmd(&self) -> Cmd {
        let mut c;
        match self {
            LockCmd::Acquire { key, token, ttl_ms } => {
                c = redis::cmd("LOCK.ACQUIRE");
                c.arg(key).arg(token).arg(ttl_ms);
            }
            LockCmd::Renew { key, token, ttl_ms } => {
                c = redis::cmd("LOCK.RENEW");
                c.arg(key).arg(token).arg(ttl_ms);
            }
            LockCmd::Release { key, token } => {
                c = redis::cmd("LOCK.RELEASE");
                c.arg(key).arg(token);
            }
            LockCmd::Takeover { key, token, run_id, ttl_ms } => {
                c = redis::cmd("LOCK.TAKEOVER");
                c.arg(key).arg(token).arg(run_id).arg(ttl_ms);
            }
        }
        c
    }

    fn fallback(&self) -> Fallback {
        match self {
            LockCmd::Acquire { key, token, ttl_ms } => {
                let mut c = redis::cmd("SET");
                c.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
                Fallback::Cmd(c)
            }
            LockCmd::Renew { key, token, ttl_ms } => {
                let mut inv = RENEW.prepare_invoke();
                inv.key(key).arg(token).arg(ttl_ms);
                Fallback::Script(inv)
            }
            LockCmd::Release { key, token } => {
                let mut inv = RELEASE.prepare_invoke();
                inv.key(key).arg(token);
                Fallback::Script(inv)
            }
            LockCmd::Takeover { key, token, run_id, ttl_ms } => {
                let mut inv = TAKEOVER.prepare_invoke();
                inv.key(key).arg(encode::structured_value(token, run_id)).arg(ttl_ms);
                Fallback::Script(inv)
            }
        }
    }

    /// Runs the operation on a sync connection: true when it took effect.
    pub(crate) fn query(&self, con: &mut dyn redis::ConnectionLike, backend: &BackendCell) -> RedisResult<bool> {
        if backend.get() != Backend::Scripts {
            match self.module_cmd().query::<Value>(con) {
                Ok(v) => {
                    backend.set(Backend::Module);
                    return reply_to_bool(v);
                }
                Err(e) if is_unknown_command(&e) => backend.set(Backend::Scripts),
                Err(e) => return Err(e),
            }
        }
        match self.fallback() {
            Fallback::Cmd(c) => reply_to_bool(c.query::<Value>(con)?),
            // invoke = EVALSHA, then SCRIPT LOAD and EVALSHA again on NOSCRIPT.
            Fallback::Script(inv) => reply_to_bool(inv.invoke::<Value>(con)?),
        }
    }

    /// The `_async` twin of [`LockCmd::query`].
    pub(crate) async fn query_async<C>(&self, con: &mut C, backend: &BackendCell) -> RedisResult<bool>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        if backend.get() != Backend::Scripts {
            match self.module_cmd().query_async::<Value>(con).await {
                Ok(v) => {
                    backend.set(Backend::Module);
                    return reply_to_bool(v);
                }
                Err(e) if is_unknown_command(&e) => backend.set(Backend::Scripts),
                Err(e) => return Err(e),
            }
        }
        match self.fallback() {
            Fallback::Cmd(c) => reply_to_bool(c.query_async::<Value>(con).await?),
            Fallback::Script(inv) => reply_to_bool(inv.invoke_async::<Value>(con).await?),
        }
    }
}

/// `ERR unknown command 'LOCK.ACQUIRE', with args beginning with: ...`
/// (Redis 6 quotes with backticks; both start the same).
fn is_unknown_command(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.detail().is_some_and(|d| d.trim_start().to_ascii_lowercase().starts_with("unknown command"))
}

/// Module commands and scripts answer 1/0; `SET NX` answers OK/nil.
fn reply_to_bool(v: Value) -> RedisResult<bool> {
    match v {
        Value::Int(1) | Value::Okay => Ok(true),
        Value::Int(0) | Value::Nil => Ok(false),
        Value::SimpleString(s) if s == "OK" => Ok(true),
        other => Err(redis::RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "unexpected reply to a lock command",
            format!("{other:?}"),
        ))),
    }
}

/// The checks of `redis_lock_rules::args`, made before anything is sent so
/// module and fallback reject the same calls with the same words.
fn check(key: &str, token: &str, ttl: Duration) -> Result<u64> {
    args::check_key_and_token(key.as_bytes(), token.as_bytes())?;
    let ms = ttl.as_millis();
    if ms == 0 {
        return Err(ArgError::TtlNotPositive.into());
    }
    let ms = i64::try_from(ms).map_err(|_| Error::from(ArgError::TtlTooLarge))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    args::expiry_at(i64::try_from(now).unwrap_or(i64::MAX), ms)?;
    // ms > 0, so the conversion is lossless.
    Ok(ms.unsigned_abs())
}

/// A fresh token: 128 bits from the OS RNG, as 32 lowercase hex digits.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_differ() {
        let a = random_token();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, random_token());
    }

    #[test]
    fn arguments_are_checked_before_sending() {
        let ttl = Duration::from_millis(100);
        assert!(matches!(LockCmd::acquire("", "t", ttl), Err(Error::InvalidArgument(_))));
        assert!(matches!(LockCmd::acquire("k", "", ttl), Err(Error::InvalidArgument(_))));
        assert!(matches!(LockCmd::renew("k", "t", Duration::from_micros(999)), Err(Error::InvalidArgument(m)) if m.contains("ttl")));
        assert!(matches!(LockCmd::renew("k", "t", Duration::MAX), Err(Error::InvalidArgument(m)) if m.contains("too large")));
        assert!(matches!(LockCmd::takeover("k", "t", "", ttl), Ok(LockCmd::Acquire { .. })));
        assert!(matches!(LockCmd::takeover("k", "t", "r", ttl), Ok(LockCmd::Takeover { ttl_ms: 100, .. })));
    }

    #[test]
    fn replies_map_to_effect() {
        assert!(reply_to_bool(Value::Int(1)).unwrap());
        assert!(!reply_to_bool(Value::Int(0)).unwrap());
        assert!(reply_to_bool(Value::Okay).unwrap());
        assert!(!reply_to_bool(Value::Nil).unwrap());
        assert!(reply_to_bool(Value::Int(2)).is_err());
    }
}
