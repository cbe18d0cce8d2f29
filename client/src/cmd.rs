//! The one command builder behind both APIs: a [`LockCmd`] is sent with
//! [`LockCmd::query`] (sync) or [`LockCmd::query_async`] (tokio), as a
//! `LOCK.*` module command or, on a server without the module, as the
//! reference Lua scripts (and `SET NX PX` for acquire), which behave the
//! same by construction: the module was written against those scripts.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use redis::{Arg, Cmd, ErrorKind, RedisResult, Script, ServerErrorKind, Value};
use redis_lock_rules::{args, encode, holders, scripts, ArgError};

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

/// What was found out about one connection's server: its backend and
/// whether its module can block (`LOCK.ACQUIRE ... WAIT`). Detection costs
/// nothing extra: the first `LOCK.*` command either works or fails with
/// "unknown command", and then the same operation is replayed as a script;
/// the first `WAIT` either works or fails with "WAIT is not supported", and
/// then the caller polls.
#[derive(Debug, Default)]
pub(crate) struct BackendCell {
    backend: AtomicU8,
    /// 0 not asked yet, 1 works, 2 refused by the module.
    wait: AtomicU8,
}

impl BackendCell {
    pub(crate) fn get(&self) -> Backend {
        match self.backend.load(Ordering::Relaxed) {
            1 => Backend::Module,
            2 => Backend::Scripts,
            _ => Backend::Unknown,
        }
    }

    pub(crate) fn set(&self, b: Backend) {
        let v = match b {
            Backend::Unknown => 0,
            Backend::Module => 1,
            Backend::Scripts => 2,
        };
        self.backend.store(v, Ordering::Relaxed);
    }

    /// Whether a blocking `WAIT` may be tried: the module is there and has
    /// not refused `WAIT` yet.
    pub(crate) fn may_wait(&self) -> bool {
        self.get() == Backend::Module && self.wait.load(Ordering::Relaxed) != 2
    }

    pub(crate) fn set_wait(&self, supported: bool) {
        self.wait.store(if supported { 1 } else { 2 }, Ordering::Relaxed);
    }
}

/// What a lock grants its holder, and so which module commands serve it.
///
/// Every kind has the same lifecycle (acquire, renew, release, a watchdog
/// through the client's renewal engine, a loss signal, a fence per grant),
/// so one [`Lock`](crate::Lock) handle serves them all; only the commands
/// differ. Only the exclusive lock has a script fallback: the scripts are
/// the reference of the exclusive lock alone (see docs/semaphores.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The key alone: `LOCK.ACQUIRE` (a string key), with the scripts as
    /// fallback.
    Exclusive,
    /// One of `limit` permits of a counting semaphore: `SEM.*`.
    Permit {
        /// The most holders at a time; every acquirer of the key names the
        /// same one (the server refuses another while permits are held).
        limit: u64,
    },
    /// A read-write lock's shared side: beside other readers, never a
    /// writer (`RWLOCK.ACQUIRE … READ`).
    Read,
    /// A read-write lock's exclusive side: no other reader or writer
    /// (`RWLOCK.ACQUIRE … WRITE`).
    Write,
}

impl LockKind {
    /// The module's acquire, renew, release and info commands for this kind.
    fn commands(self) -> [&'static str; 4] {
        match self {
            LockKind::Exclusive => ["LOCK.ACQUIRE", "LOCK.RENEW", "LOCK.RELEASE", "LOCK.INFO"],
            LockKind::Permit { .. } => ["SEM.ACQUIRE", "SEM.RENEW", "SEM.RELEASE", "SEM.INFO"],
            LockKind::Read | LockKind::Write => ["RWLOCK.ACQUIRE", "RWLOCK.RENEW", "RWLOCK.RELEASE", "RWLOCK.INFO"],
        }
    }

    /// The info command of this kind's family.
    pub(crate) fn info_command(self) -> &'static str {
        self.commands()[3]
    }

    /// Whether a server without the module can serve it (by the scripts).
    pub(crate) fn has_fallback(self) -> bool {
        self == LockKind::Exclusive
    }

    /// A `command` error that says "no such command" as
    /// [`Error::Unsupported`] for a kind without a fallback; any other
    /// error unchanged.
    pub(crate) fn explain(self, command: &'static str, e: Error) -> Error {
        match e {
            Error::Redis(r) if !self.has_fallback() && is_unknown_command(&r) => Error::Unsupported { command },
            e => e,
        }
    }
}

/// What a lock command did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Refused: the key is held by another token, or not ours to renew/release.
    Refused,
    /// Took effect; for acquire and takeover on the module, with the grant's
    /// fencing token.
    Granted(Option<u64>),
}

impl Grant {
    pub(crate) fn took_effect(self) -> bool {
        matches!(self, Grant::Granted(_))
    }
}

/// One lock operation with validated arguments.
#[derive(Clone, Debug)]
pub(crate) enum LockCmd {
    /// `wait_ms`: block in the server for up to this long (module only,
    /// never 0, which would mean forever).
    Acquire {
        kind: LockKind,
        key: String,
        token: String,
        ttl_ms: u64,
        wait_ms: Option<u64>,
    },
    /// `floor`: also raise the server's fence mark to at least this
    /// (`LOCK.RENEW ... FLOOR f`, for quorum locks; exclusive locks only).
    /// Module only: the fallback script renews without it, so a caller
    /// that needs the floor checks the connection's backend.
    Renew {
        kind: LockKind,
        key: String,
        token: String,
        ttl_ms: u64,
        floor: Option<u64>,
    },
    Release {
        kind: LockKind,
        key: String,
        token: String,
    },
    /// A non-empty run-id (an empty one is built as `Acquire`).
    Takeover {
        key: String,
        token: String,
        run_id: String,
        ttl_ms: u64,
    },
}

enum Fallback {
    Cmd(Cmd),
    Script(redis::ScriptInvocation<'static>),
}

impl LockCmd {
    /// An exclusive lock's acquire.
    pub(crate) fn acquire(key: &str, token: &str, ttl: Duration) -> Result<Self> {
        Self::acquire_of(LockKind::Exclusive, key, token, ttl)
    }

    pub(crate) fn acquire_of(kind: LockKind, key: &str, token: &str, ttl: Duration) -> Result<Self> {
        let ttl_ms = check(kind, key, token, ttl)?;
        Ok(LockCmd::Acquire { kind, key: key.into(), token: token.into(), ttl_ms, wait_ms: None })
    }

    /// The same acquire, blocking in the server for up to `wait_ms` (≥ 1).
    pub(crate) fn with_wait(&self, wait_ms: u64) -> Self {
        match self {
            LockCmd::Acquire { kind, key, token, ttl_ms, .. } => LockCmd::Acquire {
                kind: *kind,
                key: key.clone(),
                token: token.clone(),
                ttl_ms: *ttl_ms,
                wait_ms: Some(wait_ms.max(1)),
            },
            other => other.clone(),
        }
    }

    pub(crate) fn kind(&self) -> LockKind {
        match self {
            LockCmd::Acquire { kind, .. } | LockCmd::Renew { kind, .. } | LockCmd::Release { kind, .. } => *kind,
            LockCmd::Takeover { .. } => LockKind::Exclusive,
        }
    }

    /// The module command's name.
    pub(crate) fn name(&self) -> &'static str {
        let [acquire, renew, release, _] = self.kind().commands();
        match self {
            LockCmd::Acquire { .. } => acquire,
            LockCmd::Renew { .. } => renew,
            LockCmd::Release { .. } => release,
            LockCmd::Takeover { .. } => "LOCK.TAKEOVER",
        }
    }

    /// [`LockKind::explain`] for this command.
    pub(crate) fn explain(&self, e: Error) -> Error {
        self.kind().explain(self.name(), e)
    }

    /// The renewal of what this command acquires (same kind, key, token).
    pub(crate) fn renewal(&self, ttl: Duration) -> Result<Self> {
        Self::renew_of(self.kind(), self.key(), self.token(), ttl)
    }

    /// The release of what this command acquires (same kind, key, token).
    pub(crate) fn releasing(&self) -> Result<Self> {
        Self::release_of(self.kind(), self.key(), self.token())
    }

    pub(crate) fn key(&self) -> &str {
        match self {
            LockCmd::Acquire { key, .. }
            | LockCmd::Renew { key, .. }
            | LockCmd::Release { key, .. }
            | LockCmd::Takeover { key, .. } => key,
        }
    }

    pub(crate) fn token(&self) -> &str {
        match self {
            LockCmd::Acquire { token, .. }
            | LockCmd::Renew { token, .. }
            | LockCmd::Release { token, .. }
            | LockCmd::Takeover { token, .. } => token,
        }
    }

    /// An exclusive lock's renewal.
    pub(crate) fn renew(key: &str, token: &str, ttl: Duration) -> Result<Self> {
        Self::renew_of(LockKind::Exclusive, key, token, ttl)
    }

    pub(crate) fn renew_of(kind: LockKind, key: &str, token: &str, ttl: Duration) -> Result<Self> {
        let ttl_ms = check(kind, key, token, ttl)?;
        Ok(LockCmd::Renew { kind, key: key.into(), token: token.into(), ttl_ms, floor: None })
    }

    /// The same renewal with `FLOOR floor` (see [`LockCmd::Renew`]).
    pub(crate) fn with_floor(self, floor: u64) -> Self {
        match self {
            LockCmd::Renew { kind: LockKind::Exclusive, key, token, ttl_ms, .. } => {
                LockCmd::Renew { kind: LockKind::Exclusive, key, token, ttl_ms, floor: Some(floor) }
            }
            other => other,
        }
    }

    /// An exclusive lock's release.
    pub(crate) fn release(key: &str, token: &str) -> Result<Self> {
        Self::release_of(LockKind::Exclusive, key, token)
    }

    pub(crate) fn release_of(kind: LockKind, key: &str, token: &str) -> Result<Self> {
        args::check_key_and_token(key.as_bytes(), token.as_bytes())?;
        Ok(LockCmd::Release { kind, key: key.into(), token: token.into() })
    }

    pub(crate) fn takeover(key: &str, token: &str, run_id: &str, ttl: Duration) -> Result<Self> {
        if run_id.is_empty() {
            // As in the Go wrapper and LOCK.TAKEOVER: no run-id, plain acquire.
            return Self::acquire(key, token, ttl);
        }
        let ttl_ms = check(LockKind::Exclusive, key, token, ttl)?;
        Ok(LockCmd::Takeover { key: key.into(), token: token.into(), run_id: run_id.into(), ttl_ms })
    }

    /// The module command. Acquire and takeover always ask for a fence: the
    /// reply is then the fence or nil, never an ambiguous 1 (a valid fence).
    pub(crate) fn module_cmd(&self) -> Cmd {
        // Sized up front: a command grown argument by argument reallocates
        // its two buffers several times (~800 instructions per lock).
        let run_id = if let LockCmd::Takeover { run_id, .. } = self { run_id.len() } else { 0 };
        let mut c = Cmd::with_capacity(8, 100 + self.key().len() + self.token().len() + run_id);
        c.arg(self.name());
        match self {
            LockCmd::Acquire { kind, key, token, ttl_ms, wait_ms } => {
                c.arg(key).arg(token);
                match kind {
                    LockKind::Exclusive => {}
                    LockKind::Permit { limit } => {
                        c.arg(limit);
                    }
                    LockKind::Read => {
                        c.arg("READ");
                    }
                    LockKind::Write => {
                        c.arg("WRITE");
                    }
                }
                c.arg(ttl_ms).arg("FENCE");
                if let Some(ms) = wait_ms {
                    c.arg("WAIT").arg(ms);
                }
            }
            LockCmd::Renew { key, token, ttl_ms, floor, .. } => {
                c.arg(key).arg(token).arg(ttl_ms);
                if let Some(f) = floor {
                    c.arg("FLOOR").arg(f);
                }
            }
            LockCmd::Release { key, token, .. } => {
                c.arg(key).arg(token);
            }
            LockCmd::Takeover { key, token, run_id, ttl_ms } => {
                c.arg(key).arg(token).arg(run_id).arg(ttl_ms).arg("FENCE");
            }
        }
        c
    }

    /// `None` for a kind without a fallback.
    fn fallback(&self) -> Option<Fallback> {
        if !self.kind().has_fallback() {
            return None;
        }
        Some(match self {
            // Without the module there is no server-side queue: a waiting
            // acquire polls (the caller's backoff), so `wait_ms` is unused.
            LockCmd::Acquire { key, token, ttl_ms, .. } => {
                let mut c = redis::cmd("SET");
                c.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
                Fallback::Cmd(c)
            }
            LockCmd::Renew { key, token, ttl_ms, .. } => {
                let mut inv = RENEW.prepare_invoke();
                inv.key(key).arg(token).arg(ttl_ms);
                Fallback::Script(inv)
            }
            LockCmd::Release { key, token, .. } => {
                let mut inv = RELEASE.prepare_invoke();
                inv.key(key).arg(token);
                Fallback::Script(inv)
            }
            LockCmd::Takeover { key, token, run_id, ttl_ms } => {
                let mut inv = TAKEOVER.prepare_invoke();
                inv.key(key).arg(encode::structured_value(token, run_id)).arg(ttl_ms);
                Fallback::Script(inv)
            }
        })
    }

    /// A module command's reply in a pipeline; `None` when the command
    /// has to run again alone (the module is not there, or no longer).
    pub(crate) fn batch_reply(&self, v: Value) -> Option<RedisResult<Grant>> {
        match v {
            Value::ServerError(e) => {
                let e = redis::RedisError::from(e);
                (!is_unknown_command(&e)).then_some(Err(e))
            }
            v => Some(module_reply(v, self.fenced())),
        }
    }

    /// Whether it grants the key (acquire, takeover): then an outcome in
    /// doubt may have left a grant to release.
    pub(crate) fn grants(&self) -> bool {
        self.fenced()
    }

    /// Whether the module's reply is a fence (or nil) rather than 1/0.
    fn fenced(&self) -> bool {
        matches!(self, LockCmd::Acquire { .. } | LockCmd::Takeover { .. })
    }

    /// Runs the operation on a sync connection. A module that refuses `WAIT`
    /// answers an error the caller recognises with [`is_wait_unsupported`].
    pub(crate) fn query(&self, con: &mut dyn redis::ConnectionLike, backend: &BackendCell) -> RedisResult<Grant> {
        // A kind without a fallback always asks the module (it may have
        // been loaded since), and its "unknown command" is the caller's.
        let fallback = self.kind().has_fallback();
        if backend.get() != Backend::Scripts || !fallback {
            match self.module_cmd().query::<Value>(con) {
                Ok(v) => {
                    backend.set(Backend::Module);
                    return module_reply(v, self.fenced());
                }
                Err(e) if fallback && is_unknown_command(&e) => backend.set(Backend::Scripts),
                Err(e) => return Err(e),
            }
        }
        match self.fallback() {
            Some(Fallback::Cmd(c)) => fallback_reply(c.query::<Value>(con)?),
            // invoke = EVALSHA, then SCRIPT LOAD and EVALSHA again on NOSCRIPT.
            Some(Fallback::Script(inv)) => fallback_reply(inv.invoke::<Value>(con)?),
            None => Err(no_fallback()),
        }
    }

    /// The `_async` twin of [`LockCmd::query`].
    pub(crate) async fn query_async<C>(&self, con: &mut C, backend: &BackendCell) -> RedisResult<Grant>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        // A kind without a fallback always asks the module (it may have
        // been loaded since), and its "unknown command" is the caller's.
        let fallback = self.kind().has_fallback();
        if backend.get() != Backend::Scripts || !fallback {
            match self.module_cmd().query_async::<Value>(con).await {
                Ok(v) => {
                    backend.set(Backend::Module);
                    return module_reply(v, self.fenced());
                }
                Err(e) if fallback && is_unknown_command(&e) => backend.set(Backend::Scripts),
                Err(e) => return Err(e),
            }
        }
        match self.fallback() {
            Some(Fallback::Cmd(c)) => fallback_reply(c.query_async::<Value>(con).await?),
            Some(Fallback::Script(inv)) => fallback_reply(inv.invoke_async::<Value>(con).await?),
            None => Err(no_fallback()),
        }
    }
}

/// The script a fallback command runs (its source, to load it) and the
/// `EVALSHA` that runs it; for renew and release only, the operations the
/// engine batches.
fn batch_script(cmd: &LockCmd) -> Option<(&'static str, Cmd)> {
    if !cmd.kind().has_fallback() {
        return None;
    }
    let (source, script) = match cmd {
        LockCmd::Renew { .. } => (scripts::RENEW, &*RENEW),
        LockCmd::Release { .. } => (scripts::RELEASE, &*RELEASE),
        _ => return None,
    };
    let mut c = redis::cmd("EVALSHA");
    c.arg(script.get_hash()).arg(1).arg(cmd.key()).arg(cmd.token());
    if let LockCmd::Renew { ttl_ms, .. } = cmd {
        c.arg(ttl_ms);
    }
    Some((source, c))
}

/// Runs `cmds` as one pipeline: one round trip for all of them. The outer
/// error is the pipeline's (the connection failed: every outcome is
/// unknown); the inner ones are each command's. An undetected backend is
/// found out by the first command alone; a command the pipeline could not
/// serve as planned (the module vanished, a script was flushed, or an
/// acquire or takeover on a server without the module) runs again alone.
pub(crate) async fn query_batch<C>(
    cmds: &[LockCmd],
    con: &mut C,
    backend: &BackendCell,
) -> RedisResult<Vec<RedisResult<Grant>>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let mut out = Vec::with_capacity(cmds.len());
    let mut rest = cmds;
    if backend.get() == Backend::Unknown {
        let Some((first, tail)) = cmds.split_first() else { return Ok(out) };
        out.push(first.query_async(con, backend).await);
        rest = tail;
    }
    if rest.is_empty() {
        return Ok(out);
    }
    let scripts = backend.get() == Backend::Scripts;
    let planned: Vec<Option<Cmd>> =
        rest.iter().map(|c| if scripts { batch_script(c).map(|(_, e)| e) } else { Some(c.module_cmd()) }).collect();
    let mut pipe = redis::pipe();
    // Loaded in the same round trip, ahead of their EVALSHAs (loading a
    // loaded script is a no-op): no NOSCRIPT to recover from.
    let mut preload: Vec<&'static str> = Vec::new();
    if scripts {
        for (source, _) in rest.iter().filter_map(batch_script) {
            if !preload.contains(&source) {
                preload.push(source);
                pipe.cmd("SCRIPT").arg("LOAD").arg(source);
            }
        }
    }
    // A command that cannot be planned is replaced by a PING, so the
    // replies keep their places; it runs again alone below.
    for p in &planned {
        match p {
            Some(c) => pipe.add_command(c.clone()),
            None => pipe.cmd("PING"),
        };
    }
    let replies = con.req_packed_commands(&pipe, preload.len(), rest.len()).await?;
    if replies.len() != rest.len() {
        return Err(unexpected(Value::Array(replies)));
    }
    for ((c, p), v) in rest.iter().zip(&planned).zip(replies) {
        let r = match v {
            _ if p.is_none() => None,
            Value::ServerError(e) if scripts => {
                let e = redis::RedisError::from(e);
                (e.code() != Some("NOSCRIPT")).then_some(Err(e))
            }
            v if scripts => Some(fallback_reply(v)),
            v => c.batch_reply(v),
        };
        out.push(match r {
            Some(r) => r,
            None => c.query_async(con, backend).await,
        });
    }
    Ok(out)
}

/// `LOCK.GUARD key token <inner's name and arguments>`, checked before
/// anything is sent: the key and token as for every lock command, and an
/// inner command that can be forwarded as it is.
pub(crate) fn guard_cmd(key: &str, token: &str, inner: &Cmd) -> Result<Cmd> {
    args::check_key_and_token(key.as_bytes(), token.as_bytes())?;
    let mut inner_args = Vec::with_capacity(inner.args_iter().len());
    for a in inner.args_iter() {
        match a {
            Arg::Simple(a) => inner_args.push(a),
            // redis-rs fills a cursor in page by page for its own iterators;
            // one guarded call cannot page.
            _ => {
                return Err(Error::InvalidArgument(
                    "LOCK.GUARD cannot forward a cursor argument (cursor_arg): pass the cursor as a plain argument"
                        .into(),
                ))
            }
        }
    }
    if inner_args.is_empty() {
        return Err(Error::InvalidArgument("LOCK.GUARD needs a command to run: this one is empty".into()));
    }
    // Sized up front, as `module_cmd` is.
    let bytes: usize = inner_args.iter().map(|a| a.len()).sum();
    let mut c = Cmd::with_capacity(3 + inner_args.len(), 10 + key.len() + token.len() + bytes);
    c.arg("LOCK.GUARD").arg(key).arg(token);
    for a in inner_args {
        c.arg(a);
    }
    Ok(c)
}

/// Why LOCK.GUARD ran nothing, when it says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GuardRefusal {
    /// `NOTHELD …`: the token does not hold the lock (absent, expired or
    /// another owner's).
    NotHeld,
    /// The server does not know LOCK.GUARD itself (no module, or an older
    /// one). Told from an unknown *inner* command, which the module answers
    /// with the same words about that command's name.
    NoModule,
}

pub(crate) fn guard_refusal(e: &redis::RedisError) -> Option<GuardRefusal> {
    if e.code() == Some("NOTHELD") {
        return Some(GuardRefusal::NotHeld);
    }
    (is_unknown_command(e) && unknown_command_name(e).is_some_and(|n| n.eq_ignore_ascii_case("LOCK.GUARD")))
        .then_some(GuardRefusal::NoModule)
}

/// The name in `unknown command 'NAME', with args …` (Redis 6 quotes it
/// with backticks: `NAME`).
fn unknown_command_name(e: &redis::RedisError) -> Option<&str> {
    let rest = e.detail()?.trim_start().get("unknown command".len()..)?.trim_start();
    let open = rest.chars().next().filter(|c| matches!(c, '\'' | '`'))?;
    let rest = &rest[open.len_utf8()..];
    rest.find(['\'', '`']).map(|end| &rest[..end])
}

/// `ERR WAIT is not supported by this version of the lock module`: a module
/// that has `FENCE` but not yet the blocking wait.
pub(crate) fn is_wait_unsupported(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.detail().is_some_and(|d| d.to_ascii_lowercase().contains("wait is not supported"))
}

/// `ERR unknown command 'LOCK.ACQUIRE', with args beginning with: ...`
/// (Redis 6 quotes with backticks; both start the same).
pub(crate) fn is_unknown_command(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && e.detail().is_some_and(|d| d.trim_start().to_ascii_lowercase().starts_with("unknown command"))
}

/// A module reply: with `FENCE` (acquire, takeover) a positive fence or
/// nil; otherwise (renew, release) 1/0.
fn module_reply(v: Value, fenced: bool) -> RedisResult<Grant> {
    match (fenced, v) {
        (true, Value::Int(n)) if n > 0 => Ok(Grant::Granted(Some(n.unsigned_abs()))),
        (true, Value::Nil) => Ok(Grant::Refused),
        (false, v) => fallback_reply(v),
        (true, other) => Err(unexpected(other)),
    }
}

/// Scripts answer 1/0; `SET NX` answers OK/nil. No fence without the module.
fn fallback_reply(v: Value) -> RedisResult<Grant> {
    match v {
        Value::Int(1) | Value::Okay => Ok(Grant::Granted(None)),
        Value::Int(0) | Value::Nil => Ok(Grant::Refused),
        Value::SimpleString(s) if s == "OK" => Ok(Grant::Granted(None)),
        other => Err(unexpected(other)),
    }
}

/// Unreachable: a kind without a fallback returns the module's answer.
fn no_fallback() -> redis::RedisError {
    redis::RedisError::from((ErrorKind::Client, "no script fallback for this lock kind"))
}

pub(crate) fn unexpected(v: Value) -> redis::RedisError {
    redis::RedisError::from((ErrorKind::UnexpectedReturnType, "unexpected reply to a lock command", format!("{v:?}")))
}

/// The checks of `redis_lock_rules::args` (and `holders` for the kinds
/// stored as sorted sets), made before anything is sent so module and
/// fallback reject the same calls with the same words.
fn check(kind: LockKind, key: &str, token: &str, ttl: Duration) -> Result<u64> {
    args::check_key_and_token(key.as_bytes(), token.as_bytes())?;
    if let LockKind::Permit { limit } = kind {
        if limit == 0 || limit > holders::MAX_EXACT.unsigned_abs() {
            return Err(ArgError::LimitInvalid.into());
        }
    }
    let ms = ttl.as_millis();
    if ms == 0 {
        return Err(ArgError::TtlNotPositive.into());
    }
    let ms = i64::try_from(ms).map_err(|_| Error::from(ArgError::TtlTooLarge))?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    // A lease end is a sorted-set score, exact only up to 2^53.
    if kind.has_fallback() {
        args::expiry_at(now, ms)?;
    } else {
        holders::lease_end(now, ms)?;
    }
    // ms > 0, so the conversion is lossless.
    Ok(ms.unsigned_abs())
}

/// A fresh token: 128 random bits as 32 lowercase hex digits. From
/// `thread_rng`, a CSPRNG seeded from the OS and reseeded after a fork (and
/// every 64 KiB), not `OsRng`: with a `getrandom` syscall per lock the
/// client's acquire+release measured ~2 µs slower than with a fixed token
/// (51.4 vs 49.4 µs, `benches/round_trip.rs`, busy cores).
pub(crate) fn random_token() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    // By table: `format!("{:032x}")` costs ~750 instructions per lock.
    bytes.iter().flat_map(|&b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]).map(char::from).collect()
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
        assert!(
            matches!(LockCmd::renew("k", "t", Duration::from_micros(999)), Err(Error::InvalidArgument(m)) if m.contains("ttl"))
        );
        assert!(
            matches!(LockCmd::renew("k", "t", Duration::MAX), Err(Error::InvalidArgument(m)) if m.contains("too large"))
        );
        assert!(matches!(LockCmd::takeover("k", "t", "", ttl), Ok(LockCmd::Acquire { .. })));
        assert!(matches!(LockCmd::takeover("k", "t", "r", ttl), Ok(LockCmd::Takeover { ttl_ms: 100, .. })));
    }

    #[test]
    fn replies_map_to_effect() {
        assert_eq!(fallback_reply(Value::Int(1)).unwrap(), Grant::Granted(None));
        assert_eq!(fallback_reply(Value::Int(0)).unwrap(), Grant::Refused);
        assert_eq!(fallback_reply(Value::Okay).unwrap(), Grant::Granted(None));
        assert_eq!(fallback_reply(Value::Nil).unwrap(), Grant::Refused);
        assert!(fallback_reply(Value::Int(2)).is_err());
        // With FENCE, 1 is a fence like any other, and refusal is nil.
        assert_eq!(module_reply(Value::Int(1), true).unwrap(), Grant::Granted(Some(1)));
        assert_eq!(module_reply(Value::Int(i64::MAX), true).unwrap(), Grant::Granted(Some(i64::MAX as u64)));
        assert_eq!(module_reply(Value::Nil, true).unwrap(), Grant::Refused);
        assert!(module_reply(Value::Int(0), true).is_err());
        assert!(module_reply(Value::Int(-3), true).is_err());
        assert_eq!(module_reply(Value::Int(1), false).unwrap(), Grant::Granted(None));
        assert_eq!(module_reply(Value::Int(0), false).unwrap(), Grant::Refused);
    }

    #[test]
    fn module_commands_ask_for_fences_and_waits() {
        let ttl = Duration::from_millis(100);
        let packed = |c: &LockCmd| String::from_utf8_lossy(&c.module_cmd().get_packed_command()).replace("\r\n", " ");
        let a = LockCmd::acquire("k", "t", ttl).unwrap();
        assert!(packed(&a).ends_with("$5 FENCE "), "{}", packed(&a));
        assert!(packed(&a.with_wait(250)).ends_with("$5 FENCE $4 WAIT $3 250 "), "{}", packed(&a.with_wait(250)));
        assert!(packed(&a.with_wait(0)).ends_with("$4 WAIT $1 1 "), "0 would mean forever");
        assert!(packed(&LockCmd::takeover("k", "t", "r", ttl).unwrap()).ends_with("$5 FENCE "));
        assert!(!packed(&LockCmd::renew("k", "t", ttl).unwrap()).contains("FENCE"));
        assert!(packed(&LockCmd::renew("k", "t", ttl).unwrap().with_floor(17)).ends_with("$3 100 $5 FLOOR $2 17 "));
    }

    #[test]
    fn guard_wraps_the_inner_command_and_refuses_what_it_cannot_forward() {
        let packed = |c: &Cmd| String::from_utf8_lossy(&c.get_packed_command()).replace("\r\n", " ");
        let mut set = redis::cmd("SET");
        set.arg("d:{1}").arg(b"v\0w");
        let g = guard_cmd("k:{1}", "t", &set).unwrap();
        assert_eq!(packed(&g), "*6 $10 LOCK.GUARD $5 k:{1} $1 t $3 SET $5 d:{1} $3 v\0w ");
        assert!(matches!(guard_cmd("k", "t", &Cmd::new()), Err(Error::InvalidArgument(m)) if m.contains("empty")));
        assert!(matches!(guard_cmd("", "t", &set), Err(Error::InvalidArgument(_))));
        assert!(matches!(guard_cmd("k", "", &set), Err(Error::InvalidArgument(_))));
        let mut scan = redis::cmd("SCAN");
        scan.cursor_arg(0);
        assert!(matches!(guard_cmd("k", "t", &scan), Err(Error::InvalidArgument(m)) if m.contains("cursor")));
    }

    #[test]
    fn guard_refusals_are_told_from_the_inner_command_s_errors() {
        let server = |line: &str| {
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error).unwrap_err()
        };
        let refusal = |line: &str| guard_refusal(&server(line));
        assert_eq!(
            refusal(
                "NOTHELD the token does not hold the lock (absent, expired, or another owner); the command did not run"
            ),
            Some(GuardRefusal::NotHeld)
        );
        // No module: Redis 7+ quotes the name, Redis 6 uses backticks.
        assert_eq!(
            refusal("ERR unknown command 'LOCK.GUARD', with args beginning with: 'k' 't' 'SET' "),
            Some(GuardRefusal::NoModule)
        );
        assert_eq!(
            refusal("ERR unknown command `lock.guard`, with args beginning with: `k`, "),
            Some(GuardRefusal::NoModule)
        );
        // An unknown inner command, as the module replies it: the module is there.
        assert_eq!(refusal("ERR unknown command 'nosuchcommand', with args beginning with: 'd' "), None);
        assert_eq!(refusal("ERR unknown command ''"), None);
        assert_eq!(refusal("ERR unknown command 'LOCK.GUARDX'"), None);
        assert_eq!(refusal("WRONGTYPE Operation against a key holding the wrong kind of value"), None);
        assert_eq!(refusal("ERR LOCK.GUARD cannot run MULTI, EXEC, DISCARD, WATCH or UNWATCH: send LOCK.GUARD calls inside MULTI instead"), None);
    }

    #[test]
    fn kinds_send_their_module_commands() {
        let ttl = Duration::from_millis(100);
        let packed = |c: &LockCmd| String::from_utf8_lossy(&c.module_cmd().get_packed_command()).replace("\r\n", " ");
        let sem = LockCmd::acquire_of(LockKind::Permit { limit: 5 }, "k", "t", ttl).unwrap();
        assert!(
            packed(&sem.with_wait(7)).ends_with("$11 SEM.ACQUIRE $1 k $1 t $1 5 $3 100 $5 FENCE $4 WAIT $1 7 "),
            "{}",
            packed(&sem)
        );
        assert!(packed(&sem.renewal(ttl).unwrap()).ends_with("$9 SEM.RENEW $1 k $1 t $3 100 "));
        assert!(packed(&sem.releasing().unwrap()).ends_with("$11 SEM.RELEASE $1 k $1 t "));
        let read = LockCmd::acquire_of(LockKind::Read, "k", "t", ttl).unwrap();
        assert!(packed(&read).ends_with("$14 RWLOCK.ACQUIRE $1 k $1 t $4 READ $3 100 $5 FENCE "), "{}", packed(&read));
        assert!(packed(&LockCmd::acquire_of(LockKind::Write, "k", "t", ttl).unwrap()).contains("$5 WRITE $3 100 "));
        assert!(packed(&read.renewal(ttl).unwrap()).contains("RWLOCK.RENEW"));
        assert!(
            !packed(&read.renewal(ttl).unwrap().with_floor(3)).contains("FLOOR"),
            "RENEW of the holders' kinds takes no FLOOR"
        );
        for limit in [0, (1 << 53) + 1] {
            assert!(
                matches!(LockCmd::acquire_of(LockKind::Permit { limit }, "k", "t", ttl), Err(Error::InvalidArgument(m)) if m.contains("limit"))
            );
        }
        assert!(LockCmd::acquire_of(LockKind::Permit { limit: 1 << 53 }, "k", "t", ttl).is_ok());
        // A lease end is a score, exact only up to 2^53 ms.
        let long = Duration::from_millis(1 << 53);
        assert!(
            matches!(LockCmd::acquire_of(LockKind::Read, "k", "t", long), Err(Error::InvalidArgument(m)) if m.contains("too large"))
        );
    }

    #[test]
    fn unknown_commands_of_kinds_without_fallback_are_unsupported() {
        let server = |line: &str| {
            Error::Redis(
                redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error).unwrap_err(),
            )
        };
        let ttl = Duration::from_millis(100);
        let unknown = "ERR unknown command 'SEM.ACQUIRE', with args beginning with: ";
        let sem = LockCmd::acquire_of(LockKind::Permit { limit: 2 }, "k", "t", ttl).unwrap();
        assert!(matches!(sem.explain(server(unknown)), Error::Unsupported { command: "SEM.ACQUIRE" }));
        assert!(matches!(
            sem.releasing().unwrap().explain(server(unknown)),
            Error::Unsupported { command: "SEM.RELEASE" }
        ));
        assert!(matches!(
            sem.explain(server("ERR limit differs from the semaphore's: its limit is 3")),
            Error::Redis(_)
        ));
        assert!(
            matches!(LockCmd::acquire("k", "t", ttl).unwrap().explain(server(unknown)), Error::Redis(_)),
            "the exclusive lock falls back instead"
        );
    }

    #[test]
    fn wait_refusal_is_recognised() {
        // Errors as the connection parses them off the wire.
        let server = |line: &str| {
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error).unwrap_err()
        };
        assert!(is_wait_unsupported(&server("ERR WAIT is not supported by this version of the lock module")));
        assert!(!is_wait_unsupported(&server("ERR unknown command 'LOCK.ACQUIRE', with args beginning with: ")));
        assert!(is_unknown_command(&server("ERR unknown command 'LOCK.ACQUIRE', with args beginning with: ")));
        assert!(!is_wait_unsupported(&server("ERR syntax error")));
    }
}
