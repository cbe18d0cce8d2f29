//! Sending on one connection. Each operation is an [`Exchange`]: pure
//! steps that say what to send next and what a reply means (including the
//! backend detection: the first `LOCK.*` command either works or fails with
//! "unknown command", and then the same operation is replayed as a script).
//! Two thin drivers run an exchange: [`drive`] on a sync connection,
//! [`drive_async`] on an async one, so no operation is written twice.
//! Pipelines of many commands ([`pipeline`]) are the renewal engine's.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::LazyLock;

use redis::{Cmd, RedisError, RedisResult, Script, Value};

use crate::cmd::{
    fallback_reply, is_unknown_command, module_reply, no_fallback, unexpected, Backend, Fallback, Grant, LockCmd,
};
use crate::info::{self, LockInfo};

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

/// One thing to send.
pub(crate) enum Request {
    Cmd(Cmd),
    /// `EVALSHA`, then `SCRIPT LOAD` and `EVALSHA` again on `NOSCRIPT`.
    Script(redis::ScriptInvocation<'static>),
}

impl From<Fallback> for Request {
    fn from(f: Fallback) -> Self {
        match f {
            Fallback::Cmd(c) => Request::Cmd(c),
            Fallback::Script(s) => Request::Script(s),
        }
    }
}

/// What an exchange does next.
pub(crate) enum Next<T> {
    Send(Request),
    Done(RedisResult<T>),
}

/// One operation's conversation with a server, without I/O: [`start`]
/// says what to send first, [`reply`] what a reply means (another request,
/// or the outcome).
///
/// [`start`]: Exchange::start
/// [`reply`]: Exchange::reply
pub(crate) trait Exchange {
    type Output;
    fn start(&mut self) -> Next<Self::Output>;
    fn reply(&mut self, r: RedisResult<Value>) -> Next<Self::Output>;
}

/// Runs `e` on a sync connection.
pub(crate) fn drive<E: Exchange>(mut e: E, con: &mut dyn redis::ConnectionLike) -> RedisResult<E::Output> {
    let mut next = e.start();
    loop {
        next = match next {
            Next::Done(r) => return r,
            Next::Send(Request::Cmd(c)) => e.reply(c.query::<Value>(con)),
            Next::Send(Request::Script(s)) => e.reply(s.invoke::<Value>(con)),
        }
    }
}

/// Runs `e` on an async connection.
pub(crate) async fn drive_async<E, C>(mut e: E, con: &mut C) -> RedisResult<E::Output>
where
    E: Exchange,
    C: redis::aio::ConnectionLike + Send,
{
    let mut next = e.start();
    loop {
        next = match next {
            Next::Done(r) => return r,
            Next::Send(Request::Cmd(c)) => e.reply(c.query_async::<Value>(con).await),
            Next::Send(Request::Script(s)) => e.reply(s.invoke_async::<Value>(con).await),
        }
    }
}

/// A lock command: the module's, or (on a server found without it) its
/// fallback. A module that refuses `WAIT` answers an error the caller
/// recognises with `cmd::is_wait_unsupported`.
pub(crate) struct Lock<'a> {
    cmd: &'a LockCmd,
    backend: &'a BackendCell,
    /// Whether the request out is the fallback.
    fallback: bool,
}

impl<'a> Lock<'a> {
    pub(crate) fn new(cmd: &'a LockCmd, backend: &'a BackendCell) -> Self {
        Lock { cmd, backend, fallback: false }
    }

    fn fall_back(&mut self) -> Next<Grant> {
        self.fallback = true;
        match self.cmd.fallback() {
            Some(f) => Next::Send(f.into()),
            None => Next::Done(Err(no_fallback())),
        }
    }
}

impl Exchange for Lock<'_> {
    type Output = Grant;

    fn start(&mut self) -> Next<Grant> {
        // A command without a fallback always asks the module (it may have
        // been loaded since), and its "unknown command" is the caller's.
        if self.backend.get() == Backend::Scripts && self.cmd.has_fallback() {
            return self.fall_back();
        }
        Next::Send(Request::Cmd(self.cmd.module_cmd()))
    }

    fn reply(&mut self, r: RedisResult<Value>) -> Next<Grant> {
        if self.fallback {
            return Next::Done(r.and_then(fallback_reply));
        }
        match r {
            Ok(v) => {
                self.backend.set(Backend::Module);
                Next::Done(module_reply(v, self.cmd.fenced()))
            }
            Err(e) if self.cmd.has_fallback() && is_unknown_command(&e) => {
                self.backend.set(Backend::Scripts);
                self.fall_back()
            }
            Err(e) => Next::Done(Err(e)),
        }
    }
}

/// `LOCK.INFO key`, or on a server without the module the same computed
/// from `GET` and `PTTL` read together.
pub(crate) struct Info<'a> {
    key: &'a str,
    backend: &'a BackendCell,
    computed: bool,
}

impl<'a> Info<'a> {
    pub(crate) fn new(key: &'a str, backend: &'a BackendCell) -> Self {
        Info { key, backend, computed: false }
    }

    fn compute(&mut self) -> Next<Option<LockInfo>> {
        self.computed = true;
        Next::Send(Request::Script(GET_PTTL.key(self.key)))
    }
}

/// Both reads at one moment. `GET` fails with `WRONGTYPE` on other types,
/// as `LOCK.INFO` does, and a script passes that code on (a `MULTI` would
/// wrap it in a pipeline error). A missing key reads as `false`, which
/// keeps the table's length and arrives as nil.
static GET_PTTL: LazyLock<Script> =
    LazyLock::new(|| Script::new("return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}"));

impl Exchange for Info<'_> {
    type Output = Option<LockInfo>;

    fn start(&mut self) -> Next<Option<LockInfo>> {
        if self.backend.get() == Backend::Scripts {
            return self.compute();
        }
        let mut c = redis::cmd("LOCK.INFO");
        c.arg(self.key);
        Next::Send(Request::Cmd(c))
    }

    fn reply(&mut self, r: RedisResult<Value>) -> Next<Option<LockInfo>> {
        if self.computed {
            let read = r.and_then(|v| redis::from_redis_value::<(Option<Vec<u8>>, i64)>(v).map_err(RedisError::from));
            return Next::Done(read.and_then(|(value, pttl)| info::computed(value, pttl)));
        }
        match r {
            Ok(v) => {
                self.backend.set(Backend::Module);
                Next::Done(info::parse(v))
            }
            Err(e) if is_unknown_command(&e) => {
                // No `LOCK.INFO`: on an undetected connection that means no
                // module. A module already seen answering `LOCK.*` but
                // lacking `LOCK.INFO` is an older one; it keeps serving the
                // lock commands (and their fences).
                if self.backend.get() == Backend::Unknown {
                    self.backend.set(Backend::Scripts);
                }
                self.compute()
            }
            Err(e) => Next::Done(Err(e)),
        }
    }
}

/// A renewal, then (if it took effect) `wait` on the same connection: the
/// replicas that acknowledged, `None` when the lock was gone.
pub(crate) struct RenewThenWait<'a> {
    renew: Lock<'a>,
    wait: Option<Cmd>,
}

impl<'a> RenewThenWait<'a> {
    pub(crate) fn new(renew: &'a LockCmd, backend: &'a BackendCell, wait: Cmd) -> Self {
        RenewThenWait { renew: Lock::new(renew, backend), wait: Some(wait) }
    }

    fn after_renew(&mut self, next: Next<Grant>) -> Next<Option<i64>> {
        match next {
            Next::Send(r) => Next::Send(r),
            Next::Done(Err(e)) => Next::Done(Err(e)),
            Next::Done(Ok(g)) if !g.took_effect() => Next::Done(Ok(None)),
            Next::Done(Ok(_)) => match self.wait.take() {
                Some(w) => Next::Send(Request::Cmd(w)),
                None => Next::Done(Err(unexpected(Value::Nil))),
            },
        }
    }
}

impl Exchange for RenewThenWait<'_> {
    type Output = Option<i64>;

    fn start(&mut self) -> Next<Option<i64>> {
        let next = self.renew.start();
        self.after_renew(next)
    }

    fn reply(&mut self, r: RedisResult<Value>) -> Next<Option<i64>> {
        if self.wait.is_none() {
            return Next::Done(r.and_then(|v| redis::from_redis_value(v).map_err(RedisError::from)).map(Some));
        }
        let next = self.renew.reply(r);
        self.after_renew(next)
    }
}

/// One command, its reply as the server sent it (error replies as errors).
pub(crate) struct Plain(pub(crate) Option<Cmd>);

impl Exchange for Plain {
    type Output = Value;

    fn start(&mut self) -> Next<Value> {
        match self.0.take() {
            Some(c) => Next::Send(Request::Cmd(c)),
            None => Next::Done(Err(unexpected(Value::Nil))),
        }
    }

    fn reply(&mut self, r: RedisResult<Value>) -> Next<Value> {
        Next::Done(r)
    }
}

/// Runs `cmds` as one pipeline: one round trip for all of them. The outer
/// error is the pipeline's (the connection failed: every outcome is
/// unknown); the inner ones are each command's. An undetected backend is
/// found out by the first command alone; a command the pipeline could not
/// serve as planned (the module vanished, a script was flushed, or an
/// acquire or takeover on a server without the module) runs again alone.
pub(crate) async fn pipeline<C>(
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
        out.push(drive_async(Lock::new(first, backend), con).await);
        rest = tail;
    }
    if rest.is_empty() {
        return Ok(out);
    }
    let scripts = backend.get() == Backend::Scripts;
    let planned: Vec<Option<Cmd>> =
        rest.iter().map(|c| if scripts { c.batch_script().map(|(_, e)| e) } else { Some(c.module_cmd()) }).collect();
    let mut pipe = redis::pipe();
    // Loaded in the same round trip, ahead of their EVALSHAs (loading a
    // loaded script is a no-op): no NOSCRIPT to recover from.
    let mut preload: Vec<&'static str> = Vec::new();
    if scripts {
        for (source, _) in rest.iter().filter_map(LockCmd::batch_script) {
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
            None => drive_async(Lock::new(c, backend), con).await,
        });
    }
    Ok(out)
}
