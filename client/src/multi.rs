//! [`LockClient::lock_all`]: several exclusive locks for one token, all or
//! none, within one cumulative wait, over keys in any slots.
//!
//! The keys are taken in one global order (by hash slot, then by name; see
//! `cmd::all`), one `LOCK.ACQUIREALL` per group (one slot in a cluster, at
//! most 64 keys): atomic per group in the server, which waits in every
//! key's queue at once; all or nothing overall by rollback. Every caller
//! takes its groups in the same order, so callers over overlapping keys
//! cannot deadlock. A group refused, or not granted before the wait ends,
//! releases every key taken so far (by token, so a grant whose reply was
//! lost is released too). Once all are held, the earlier groups' keys get
//! a fresh lease (`LOCK.RENEW`), so every returned lock starts its `ttl`
//! together; only then are the [`Lock`] handles (and their watchdogs)
//! made. Needs the module (`LOCK.ACQUIREALL`).
//!
//! Watchdog locks are held by the client's sessions as single locks are
//! (docs/sessions.md, "Client"): each group is sent with `SESSION id` of
//! its node's session, and its keys are then kept by that session's
//! keepalives; a node that refuses the session (it does not know it, or
//! its module takes no `SESSION` on `LOCK.ACQUIREALL`) wrote nothing, and
//! the group is sent again without it (its locks renew on their own).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attach::SessionLease;

use crate::client::{lease_of, runtime, token_of, LockClient};
use crate::cmd::{acquire_all_cmd, groups, is_unknown_command, session_refusal, Lease, LockCmd};
use crate::error::{Error, Result};
use crate::holding::Flavor;
use crate::lock::Lock;
use crate::options::LockOptions;
use crate::runtime as background;
use crate::session::{self, SessionCalls, SessionUse};
use crate::transport::Api;

/// The command a group is sent as (a node may refuse `SESSION` on it).
const ACQUIREALL: &str = "LOCK.ACQUIREALL";

impl LockClient {
    /// Takes every key of `keys` for `ttl` with one token, waiting up to
    /// `wait` in all (one cumulative deadline), or none of them:
    /// [`Error::NotAcquired`] names the key of the group that was not
    /// granted. The locks come back in the order of `keys`, all with the
    /// same token, each with its own fence; each renews and releases as a
    /// lock of [`LockClient::acquire`] does. In a cluster the keys may be in
    /// any slots: atomic per slot, all or nothing overall by rollback (see
    /// docs/multi-key.md). Without the module: [`Error::Unsupported`].
    pub fn lock_all(&self, keys: &[&str], ttl: Duration, wait: Duration) -> Result<Vec<Lock>> {
        self.lock_all_with(keys, ttl, wait, &LockOptions::default())
    }

    /// [`LockClient::lock_all`] with options (token, watchdog, lock-delay,
    /// hold limit; not `wait_for_replicas`).
    pub fn lock_all_with(&self, keys: &[&str], ttl: Duration, wait: Duration, opts: &LockOptions) -> Result<Vec<Lock>> {
        self.core.transport.serves(Api::Sync)?;
        let (me, keys, opts) = (self.clone(), owned(keys), opts.clone());
        background::block(async move { me.lock_all_core(&keys, ttl, wait, &opts, Flavor::Sync).await })
    }

    /// The async twin of [`LockClient::lock_all`].
    pub async fn lock_all_async(&self, keys: &[&str], ttl: Duration, wait: Duration) -> Result<Vec<Lock>> {
        self.lock_all_with_async(keys, ttl, wait, &LockOptions::default()).await
    }

    /// The async twin of [`LockClient::lock_all_with`].
    pub async fn lock_all_with_async(
        &self,
        keys: &[&str],
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
    ) -> Result<Vec<Lock>> {
        let rt = runtime()?;
        self.core.transport.serves(Api::Async)?;
        self.lock_all_core(&owned(keys), ttl, wait, opts, Flavor::Async(rt)).await
    }

    async fn lock_all_core(
        &self,
        keys: &[String],
        ttl: Duration,
        wait: Duration,
        opts: &LockOptions,
        flavor: Flavor,
    ) -> Result<Vec<Lock>> {
        if opts.replicas.is_some() {
            return Err(Error::InvalidArgument("lock_all does not wait for replicas".into()));
        }
        let token = token_of(opts);
        let lease = lease_of(opts, ttl)?;
        // The checks of one lock's acquire, for every key, before anything is sent.
        let cmds =
            keys.iter().map(|k| Ok(LockCmd::acquire(k, &token, ttl)?.with_lease(lease))).collect::<Result<Vec<_>>>()?;
        let plan = groups(keys, self.core.transport.is_cluster())?;
        let deadline = Instant::now() + wait;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let mut granted: Vec<(String, u64, Instant)> = Vec::new();
        // The sessions the groups are held by (each in use until its locks
        // are made: an idle session is revoked).
        let mut held: Vec<(&[String], SessionUse)> = Vec::new();
        for group in &plan {
            let first = cmds.iter().find(|c| c.key() == group[0]).expect("a group's key is one of the keys");
            match self.acquire_group_held(group, first, (ttl, ttl_ms), deadline, opts).await {
                Ok((fences, used)) => {
                    let sent = Instant::now();
                    granted.extend(group.iter().cloned().zip(fences).map(|(k, f)| (k, f, sent)));
                    held.extend(used.map(|u| (group.as_slice(), u)));
                }
                Err(e) => {
                    self.roll_back(granted.iter().map(|(k, _, _)| k).chain(group), &token).await;
                    return Err(e);
                }
            }
        }
        // Every earlier group starts a fresh lease with the last one.
        let last = plan.last().map_or(0, Vec::len);
        let earlier = granted.len() - last;
        for i in 0..earlier {
            let sent = Instant::now();
            let key = granted[i].0.clone();
            if !self.core.run_ok(&LockCmd::renew(&key, &token, ttl)?).await.unwrap_or(false) {
                self.roll_back(granted.iter().map(|(k, _, _)| k), &token).await;
                return Err(Error::NotAcquired { key });
            }
            granted[i].2 = sent;
        }
        let locks = cmds
            .iter()
            .map(|cmd| {
                let (_, fence, sent) =
                    granted.iter().find(|(k, _, _)| k == cmd.key()).cloned().expect("every key granted");
                let cmd = match held.iter().find(|(keys, _)| keys.iter().any(|k| k == cmd.key())) {
                    Some((_, used)) => cmd.with_session(used.lease.clone()),
                    None => cmd.clone(),
                };
                let lock = Lock::new(self.core.clone(), &cmd, sent, ttl, opts, again(&flavor), Some(fence));
                if let Some(max_hold) = cmd.lease().max_hold() {
                    lock.limit_hold(sent, max_hold);
                }
                lock
            })
            .collect();
        Ok(locks)
    }

    /// One group's grant, held by the client's session on its node where
    /// one can hold it (`first`: the acquire of its first key, as a single
    /// lock's would be sent; see the module docs): its fences and the
    /// session, or why not.
    async fn acquire_group_held(
        &self,
        group: &[String],
        first: &LockCmd,
        (ttl, ttl_ms): (Duration, u64),
        deadline: Instant,
        opts: &LockOptions,
    ) -> Result<(Vec<u64>, Option<SessionUse>)> {
        let (token, lease) = (first.token(), first.lease());
        if let Some(used) = self.group_session(first, ttl, opts).await {
            // The session's lock-delay is the keys': the grant names none.
            let held = Lease { lock_delay_ms: None, ..lease };
            let r = self.acquire_group(group, token, ttl_ms, held, Some(&used.lease), deadline).await;
            let refusal = match &r {
                Err(Error::Redis(e)) => session_refusal(e),
                _ => None,
            };
            match (refusal, self.core.engine()) {
                (Some(why), Some(engine)) => engine.sessions().refused(&used, why, ACQUIREALL),
                _ => return r.map(|fences| (fences, Some(used))),
            }
        }
        Ok((self.acquire_group(group, token, ttl_ms, lease, None, deadline).await?, None))
    }

    /// The session `first`'s group can be held by, if any (as a single
    /// lock's, `LockClient::acquire_cmd`; refusals noted for ACQUIREALL).
    async fn group_session(&self, first: &LockCmd, ttl: Duration, opts: &LockOptions) -> Option<SessionUse> {
        let session_ttl = session::session_ttl(first, ttl, opts, &self.core.opts)?;
        let (engine, calls) = (self.core.engine()?, self.core.clone() as Arc<dyn SessionCalls>);
        let delay = first.lease().lock_delay_ms;
        engine.sessions().session_for(calls, first.key(), session_ttl, delay, ACQUIREALL).await
    }

    /// One group's `LOCK.ACQUIREALL` (with `SESSION id` of `session`),
    /// blocked in the server until `deadline` on a connection of its own
    /// (one attempt where the client cannot open one): its fences, or why
    /// not.
    async fn acquire_group(
        &self,
        group: &[String],
        token: &str,
        ttl_ms: u64,
        lease: Lease,
        session: Option<&Arc<SessionLease>>,
        deadline: Instant,
    ) -> Result<Vec<u64>> {
        let t = &self.core.transport;
        let left = deadline.saturating_duration_since(Instant::now());
        // Every module with LOCK.ACQUIREALL has its WAIT: no backend check.
        let blocking = (left >= Duration::from_millis(1)).then(|| t.clone().observer(&group[0]).ok()).flatten();
        let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = acquire_all_cmd(group, token, ttl_ms, blocking.is_some().then_some(ms), lease);
        if let Some(s) = session {
            cmd.arg("SESSION").arg(&s.id);
        }
        let reply = match blocking {
            Some(mut conn) => conn.call(&cmd, left).await,
            None => t.call(&group[0], &cmd).await,
        };
        let reply = reply.map_err(|e| match e {
            Error::Redis(r) if is_unknown_command(&r) => Error::Unsupported { command: "LOCK.ACQUIREALL" },
            e => e,
        })?;
        match reply {
            redis::Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    redis::Value::Int(f) if *f > 0 => Ok(*f as u64),
                    other => Err(Error::Redis(unexpected(other))),
                })
                .collect(),
            redis::Value::Nil | redis::Value::Int(0) => Err(Error::NotAcquired { key: group[0].clone() }),
            other => Err(Error::Redis(unexpected(&other))),
        }
    }

    /// Releases `keys` where `token` holds them (errors ignored: a key left
    /// behind expires with its lease).
    async fn roll_back<'a>(&self, keys: impl Iterator<Item = &'a String>, token: &str) {
        for key in keys {
            if let Ok(cmd) = LockCmd::release(key, token) {
                let _ = self.core.run_ok(&cmd).await;
            }
        }
    }
}

/// Another handle of the same flavor, for the next lock.
fn again(flavor: &Flavor) -> Flavor {
    match flavor {
        Flavor::Sync => Flavor::Sync,
        Flavor::Async(rt) => Flavor::Async(rt.clone()),
    }
}

fn owned(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

fn unexpected(v: &redis::Value) -> redis::RedisError {
    std::io::Error::other(format!("unexpected LOCK.ACQUIREALL reply: {v:?}")).into()
}
