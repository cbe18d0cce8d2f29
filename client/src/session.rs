//! The renewal engine's sessions (docs/sessions.md, "Client"): one session
//! per node (and per TTL and lock-delay in use, see
//! [`ClientOptions::session_ttl`](crate::ClientOptions::session_ttl)),
//! granted when the first lock that can use it is taken, which every
//! later such lock on that node attaches to (`SESSION id` on its acquire).
//! One task keeps them all alive: one `SESSION.KEEPALIVE` per node, for
//! all of that node's sessions, every TTL/3 (TTL/10 after a failure), so
//! the server's work for keeping N locks does not grow with N.
//!
//! - **Validity**: a session's locks share its [`SessionLease`], which
//!   each answered keepalive moves to its sending + TTL; a lock past it is
//!   lost as [`LossReason::Expired`] (as a lock whose renewals failed).
//! - **End**: a keepalive that says the session ended (`0`) has the engine
//!   ask the node how (`SESSION.INFO id`, one round trip: `keepalive.rs`),
//!   then ends every lock of it at once with that reason
//!   ([`LossReason::SessionExpired`], `SessionRevoked`, `SessionUnknown`),
//!   through each lock's loss signal; the session leaves the table and the
//!   next lock gets a new one.
//! - **Revocation**: a keepalive that says some of a session's locks are
//!   revoked (`-ttl`) has the engine read which (`SESSION.INFO`,
//!   `keepalive.rs`, which runs the keepalive task) and fire each one's
//!   revoked signal.
//! - **Idle**: a session holding nothing and used by no acquire on two
//!   keepalives in a row is revoked (`SESSION.REVOKE`) and forgotten.
//!
//! Nothing here costs a thread, task or connection per lock or session:
//! the table is one map, its locks one vector per session (pruned as it
//! grows), and the task one per client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::attach::{InUse, SessionLease};
use crate::cmd::LockCmd;
use crate::cmd::{grant_cmd, grant_reply, keepalive_cmd, keepalive_reply, session_refusal, Kept, Refusal};
use crate::error::{Error, Result};
use crate::options::{ClientOptions, LockOptions};
use crate::state::{LossReason, Shared, Status};
use crate::watchdog::{early, interval, retry_interval};
use futures_util::future::BoxFuture;

/// How long a node that has no sessions (no module, or one without
/// `SESSION.*`), or a command a node takes without `SESSION`, is not
/// asked again.
pub(crate) const SESSION_RECHECK: Duration = Duration::from_secs(60);

/// How long a node whose grant failed is not asked again.
const GRANT_RETRY: Duration = Duration::from_secs(1);

/// How the engine's sessions reach the client's nodes (the renewal
/// engine's [`Renewer`](crate::engine::Renewer)s are these too; by
/// default no node has sessions).
pub(crate) trait SessionCalls: Send + Sync + 'static {
    /// The node that serves `key`, as the client's sessions name it
    /// (`session.rs`); `None` where no session can hold it (sessions off,
    /// no module there, a client of one given sync connection, a quorum).
    fn session_node(self: Arc<Self>, _key: String) -> BoxFuture<'static, Option<String>> {
        Box::pin(async { None })
    }

    /// One session command on `node` (bounded by the client's timeouts).
    fn session_call(self: Arc<Self>, _node: String, _cmd: redis::Cmd) -> BoxFuture<'static, Result<redis::Value>> {
        Box::pin(async { Err(Error::Unsupported { command: "SESSION.GRANT" }) })
    }

    /// A node stopped answering its sessions' keepalives: the next
    /// [`SessionCalls::session_node`] reads the topology afresh.
    fn nodes_changed(&self) {}

    /// Checks each of `locks` on its own (a `LOCK.RENEW`, which changes
    /// nothing on a session's lock): whether its key still holds it; a
    /// revoked one's revocation (`-ms`) is noted and its signal fired.
    fn check(self: Arc<Self>, locks: Vec<Arc<Shared>>) -> BoxFuture<'static, Vec<Result<bool>>> {
        Box::pin(async move { locks.iter().map(|_| Ok(true)).collect() })
    }
}

/// The TTL of the session a lock of `cmd` (granted for `ttl`) can be held
/// by, if any: a watchdog lock without a maximum lifetime (a session would
/// outlive it), a plain acquire, sessions on, and a TTL no shorter than
/// the sessions' when they have one (see [`ClientOptions::sessions`]).
pub(crate) fn session_ttl(
    cmd: &LockCmd,
    ttl: Duration,
    opts: &LockOptions,
    client: &ClientOptions,
) -> Option<Duration> {
    let watchdog = opts.watchdog.as_ref()?;
    let plain = matches!(cmd, LockCmd::Acquire { session: None, .. });
    if !plain || watchdog.max_lifetime.is_some() || !client.sessions {
        return None;
    }
    let session_ttl = client.session_ttl.unwrap_or(ttl);
    (ttl >= session_ttl).then_some(session_ttl)
}

/// Which session a lock can use: its node's, of its TTL and lock-delay.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SessionKey {
    pub(crate) node: String,
    pub(crate) ttl_ms: u64,
    pub(crate) lock_delay_ms: Option<u64>,
}

pub(crate) struct Entry {
    pub(crate) key: SessionKey,
    /// The key of the lock it was granted for: where to look for its node
    /// again when that node stops answering (a failover).
    home: String,
    pub(crate) lease: Arc<SessionLease>,
    /// Its locks by key (those released or lost are pruned as they grow):
    /// a revoked key finds its locks in O(1).
    pub(crate) attached: HashMap<String, Vec<Arc<Shared>>>,
    /// How many locks `attached` has, all keys together.
    attached_n: usize,
    /// When its next keepalive is due.
    next: Instant,
    /// Keepalives in a row that found it holding nothing.
    idle: u8,
    /// Its locks a check found no longer their token's, until its next
    /// keepalive says whether the session ended ([`Sessions::suspect`]).
    suspects: Vec<Arc<Shared>>,
}

#[derive(Default)]
pub(crate) struct Table {
    /// By id.
    pub(crate) sessions: HashMap<String, Entry>,
    /// The live session of each key, by id.
    current: HashMap<SessionKey, String>,
    /// Nodes, or `node command` pairs, not to ask until then.
    refused: HashMap<String, Instant>,
    pub(crate) closed: bool,
}

/// An acquire under way with a session.
pub(crate) struct SessionUse {
    pub(crate) lease: Arc<SessionLease>,
    pub(crate) node: String,
    _in_use: InUse,
}

/// One client's sessions (see the module docs).
#[derive(Default)]
pub(crate) struct Sessions {
    table: Mutex<Table>,
    /// One grant at a time: locks taken together share one session.
    granting: tokio::sync::Mutex<()>,
    pub(crate) wake: Notify,
}

impl Sessions {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live session of `key`, counted in use.
    fn live(&self, key: &SessionKey, now: Instant) -> Option<SessionUse> {
        let t = self.lock();
        let e = t.sessions.get(t.current.get(key)?)?;
        e.lease.usable(now).then(|| SessionUse {
            lease: e.lease.clone(),
            node: key.node.clone(),
            _in_use: e.lease.start_use(),
        })
    }

    /// The session a lock on `lock_key` attaches to, granted now if its
    /// node has none yet: `None` when the lock renews on its own (the
    /// node has no sessions, refused this command with one lately, or the
    /// grant failed).
    pub(crate) async fn session_for(
        &self,
        renewer: Arc<dyn SessionCalls>,
        lock_key: &str,
        ttl: Duration,
        lock_delay_ms: Option<u64>,
        command: &str,
    ) -> Option<SessionUse> {
        let node = renewer.clone().session_node(lock_key.to_string()).await?;
        let ttl_ms = u64::try_from(ttl.as_millis()).ok().filter(|&ms| ms > 0)?;
        let key = SessionKey { node, ttl_ms, lock_delay_ms };
        let now = Instant::now();
        {
            let t = self.lock();
            let refused = |k: &str| t.refused.get(k).is_some_and(|until| *until > now);
            if t.closed || refused(&key.node) || refused(&format!("{} {command}", key.node)) {
                return None;
            }
        }
        if let Some(u) = self.live(&key, now) {
            return Some(u);
        }
        let _one = self.granting.lock().await;
        if let Some(u) = self.live(&key, Instant::now()) {
            return Some(u);
        }
        let sent = Instant::now();
        let granted = renewer.session_call(key.node.clone(), grant_cmd(ttl_ms, lock_delay_ms)).await;
        let id = match granted.and_then(|v| Ok(grant_reply(v)?)) {
            Ok(id) => id,
            Err(e) => {
                let recheck = match &e {
                    Error::Redis(r) if session_refusal(r) == Some(Refusal::NoSessions) => SESSION_RECHECK,
                    _ => GRANT_RETRY,
                };
                self.lock().refused.insert(key.node.clone(), Instant::now() + recheck);
                return None;
            }
        };
        let lease = Arc::new(SessionLease::new(id.clone(), Duration::from_millis(ttl_ms), sent));
        let use_ = SessionUse { lease: lease.clone(), node: key.node.clone(), _in_use: lease.start_use() };
        let next = sent + interval(lease.ttl);
        let mut t = self.lock();
        t.current.insert(key.clone(), id.clone());
        let home = lock_key.to_string();
        let suspects = Vec::new();
        t.sessions
            .insert(id, Entry { key, home, lease, attached: HashMap::new(), attached_n: 0, next, idle: 0, suspects });
        drop(t);
        self.wake.notify_one();
        Some(use_)
    }

    /// An acquire with `used` was refused for its session (nothing was
    /// written): a command the node takes without `SESSION` is not sent
    /// with one again for a while. A session the node does not know (it
    /// ended, or the key moved to another node) is left to its keepalive.
    pub(crate) fn refused(&self, used: &SessionUse, why: Refusal, command: &str) {
        if why != Refusal::NoSuchSession {
            self.lock().refused.insert(format!("{} {command}", used.node), Instant::now() + SESSION_RECHECK);
        }
    }

    /// Keeps `lock` (just granted on `lease`) with its session's locks, to
    /// end it with them. A session already gone from the table has ended
    /// or run out, which the lock's state reads by itself.
    pub(crate) fn attach(&self, lease: &Arc<SessionLease>, lock: Arc<Shared>) {
        let mut t = self.lock();
        let Some(e) = t.sessions.get_mut(&lease.id).filter(|e| Arc::ptr_eq(&e.lease, lease)) else { return };
        if e.attached_n >= 2 * e.lease.held() + 64 {
            e.attached.retain(|_, locks| {
                locks.retain(|l| l.status() == Status::Held);
                !locks.is_empty()
            });
            e.attached_n = e.attached.values().map(Vec::len).sum();
        }
        e.attached.entry(lock.key.clone()).or_default().push(lock);
        e.attached_n += 1;
    }

    /// A check found `lock` of `lease` no longer its token's: its
    /// session's end may be why, which the session's keepalive, sent at
    /// once, tells before the lock is lost as [`LossReason::NotOwner`]
    /// ([`Sessions::apply`]). A session already out of the table is ending
    /// (its end, or its validity, tells its locks).
    pub(crate) fn suspect(&self, lease: &Arc<SessionLease>, lock: Arc<Shared>) {
        let mut t = self.lock();
        let Some(e) = t.sessions.get_mut(&lease.id).filter(|e| Arc::ptr_eq(&e.lease, lease)) else { return };
        e.suspects.push(lock);
        e.next = Instant::now();
        drop(t);
        self.wake.notify_one();
    }

    /// Forgets `lock` among `lease`'s locks (it moved to another session).
    pub(crate) fn detach(&self, lease: &Arc<SessionLease>, lock: &Arc<Shared>) {
        let mut t = self.lock();
        let Some(e) = t.sessions.get_mut(&lease.id).filter(|e| Arc::ptr_eq(&e.lease, lease)) else { return };
        if let Some(locks) = e.attached.get_mut(&lock.key) {
            let before = locks.len();
            locks.retain(|l| !Arc::ptr_eq(l, lock));
            e.attached_n -= before - locks.len();
        }
    }

    /// How many locks the client's sessions hold, all together.
    pub(crate) fn held(&self) -> usize {
        self.lock().sessions.values().map(|e| e.lease.held()).sum()
    }

    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    /// The keepalives due now, one per node, each with every session of
    /// the node; the idle sessions to revoke; else when to look again.
    pub(crate) fn take_due(&self, now: Instant) -> (Vec<NodeKeepalive>, Vec<(String, String)>, Option<Instant>) {
        let mut t = self.lock();
        let mut nodes: Vec<String> = Vec::new();
        let mut idle = Vec::new();
        let mut next: Option<Instant> = None;
        for (id, e) in t.sessions.iter_mut() {
            let ttl = e.lease.ttl;
            if e.next > now + early(ttl) {
                let at = e.next - early(ttl);
                next = Some(next.map_or(at, |n| n.min(at)));
                continue;
            }
            if e.lease.held() == 0 && e.lease.in_use() == 0 {
                e.idle += 1;
                if e.idle >= 2 {
                    idle.push((e.key.node.clone(), id.clone()));
                    continue;
                }
            } else {
                e.idle = 0;
            }
            if !nodes.contains(&e.key.node) {
                nodes.push(e.key.node.clone());
            }
        }
        for (_, id) in &idle {
            if let Some(e) = t.sessions.remove(id) {
                // Revoked by this client (it holds nothing).
                e.lease.end(LossReason::SessionRevoked, None);
                if t.current.get(&e.key).is_some_and(|c| c == id) {
                    t.current.remove(&e.key);
                }
            }
        }
        let due = nodes
            .into_iter()
            .map(|node| {
                let sessions: Vec<Arc<SessionLease>> =
                    t.sessions.values().filter(|e| e.key.node == node).map(|e| e.lease.clone()).collect();
                NodeKeepalive { node, sessions }
            })
            .collect();
        (due, idle, next)
    }

    /// Applies one node's keepalive, sent at `sent`; returns the sessions
    /// it found ended (out of the table) with their locks, to be ended
    /// outside the table's lock once the node said how
    /// (`keepalive.rs`), the sessions it said have revoked locks, and the
    /// suspects of the sessions it kept alive: those are lost as deleted.
    pub(crate) fn apply(&self, k: &NodeKeepalive, sent: Instant, r: Result<Vec<Kept>>) -> Applied {
        let now = Instant::now();
        let mut t = self.lock();
        let (mut ended, mut revoked, mut not_owner) = (Vec::new(), Vec::new(), Vec::new());
        for (i, lease) in k.sessions.iter().enumerate() {
            let kept = match &r {
                Ok(v) => v.get(i).copied().unwrap_or(Kept::Unreadable),
                Err(_) => Kept::Unreadable,
            };
            let Some(e) = t.sessions.get_mut(&lease.id).filter(|e| Arc::ptr_eq(&e.lease, lease)) else { continue };
            let gone = match kept {
                Kept::Alive | Kept::Revoked => {
                    lease.kept(sent);
                    e.next = sent + interval(lease.ttl);
                    if kept == Kept::Revoked {
                        revoked.push(lease.clone());
                    }
                    not_owner.append(&mut e.suspects);
                    false
                }
                Kept::Ended => true,
                // Its locks run out at the session's validity by themselves;
                // past it, the session is of no more use.
                Kept::Unreadable => {
                    e.next = now + retry_interval(lease.ttl);
                    lease.valid_until() <= now
                }
            };
            if gone {
                if let Some(e) = t.sessions.remove(&lease.id) {
                    if t.current.get(&e.key).is_some_and(|c| *c == lease.id) {
                        t.current.remove(&e.key);
                    }
                    if kept == Kept::Ended {
                        ended.push((lease.clone(), e.attached.into_values().flatten().collect()));
                    }
                }
            }
        }
        (ended, revoked, not_owner)
    }
}

impl Sessions {
    /// Lock keys of `node`'s sessions, to find the node again: each
    /// session's first, and a few held ones (a slot may have moved away
    /// since).
    fn homes_of(&self, node: &str) -> Vec<String> {
        let t = self.lock();
        let mut keys = Vec::new();
        for e in t.sessions.values().filter(|e| e.key.node == node) {
            keys.push(e.home.clone());
            let held = e.attached.values().flatten().filter(|l| l.status() == Status::Held).take(4);
            keys.extend(held.map(|l| l.key.clone()));
        }
        keys
    }

    /// `to` kept alive (at `sent`) those of `k`'s sessions it answered
    /// for: it has them (ids are the node's own: it is a replica of their
    /// node, promoted), so they live there from now on. Returns their
    /// held locks, which the caller checks one by one: a grant made just
    /// before the failover may not have reached the promoted replica.
    fn moved(&self, k: &NodeKeepalive, to: &str, sent: Instant, kept: &[Kept]) -> Vec<Arc<Shared>> {
        let mut t = self.lock();
        let mut locks = Vec::new();
        for (lease, kept) in k.sessions.iter().zip(kept) {
            if !kept.alive() {
                continue;
            }
            let Some(e) = t.sessions.get_mut(&lease.id).filter(|e| Arc::ptr_eq(&e.lease, lease)) else { continue };
            lease.kept(sent);
            e.next = sent + interval(lease.ttl);
            let old = std::mem::replace(&mut e.key.node, to.to_string());
            let key = e.key.clone();
            locks.extend(e.attached.values().flatten().filter(|l| l.status() == Status::Held).cloned());
            let was = SessionKey { node: old, ..key.clone() };
            if t.current.get(&was).is_some_and(|c| *c == lease.id) {
                t.current.remove(&was);
            }
            t.current.entry(key).or_insert_with(|| lease.id.clone());
        }
        locks
    }
}

/// After `k`'s keepalive failed: the master that serves its sessions' keys
/// now, if another one (a failover promoted a replica), is asked to keep
/// them alive, and takes those it knows. One it does not know (the slot
/// moved to a master of its own) is left to run out on its node.
pub(crate) async fn follow(sessions: &Sessions, calls: &Arc<dyn SessionCalls>, k: &NodeKeepalive) {
    calls.nodes_changed();
    let mut tried = vec![k.node.clone()];
    for home in sessions.homes_of(&k.node) {
        let Some(node) = calls.clone().session_node(home).await.filter(|n| !tried.contains(n)) else { continue };
        tried.push(node.clone());
        let sent = Instant::now();
        let ids = k.sessions.iter().map(|s| s.id.as_str());
        let reply = calls.clone().session_call(node.clone(), keepalive_cmd(ids)).await;
        let Ok(kept) = reply.and_then(|v| Ok(keepalive_reply(v, k.sessions.len())?)) else { continue };
        let locks = sessions.moved(k, &node, sent, &kept);
        let checked = calls.clone().check(locks.clone()).await;
        for (lock, r) in locks.iter().zip(checked) {
            if matches!(r, Ok(false)) {
                lock.mark_lost(LossReason::NotOwner);
            }
        }
        if kept.iter().any(|k| k.alive()) {
            return;
        }
    }
}

/// A session a keepalive found ended, and its locks.
pub(crate) type EndedSession = (Arc<SessionLease>, Vec<Arc<Shared>>);

/// What one keepalive said ([`Sessions::apply`]): the sessions ended, those
/// with revoked locks, and the locks lost as deleted.
pub(crate) type Applied = (Vec<EndedSession>, Vec<Arc<SessionLease>>, Vec<Arc<Shared>>);

/// One node's keepalive: all of its sessions, in the order sent.
pub(crate) struct NodeKeepalive {
    pub(crate) node: String,
    pub(crate) sessions: Vec<Arc<SessionLease>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_locks_a_session_holds() {
        let ttl = Duration::from_millis(1500);
        let acquire = LockCmd::acquire("k", "t", ttl).unwrap();
        let watched = LockOptions::new().watchdog(crate::WatchdogOptions::new());
        let on = ClientOptions::new();
        assert_eq!(session_ttl(&acquire, ttl, &watched, &on), Some(ttl), "a session of the lock's TTL");
        assert_eq!(session_ttl(&acquire, ttl, &LockOptions::new(), &on), None, "no watchdog: its own lease");
        let lifetime = LockOptions::new().watchdog(crate::WatchdogOptions::new().max_lifetime(ttl * 10));
        assert_eq!(session_ttl(&acquire, ttl, &lifetime, &on), None, "a session would outlive max_lifetime");
        assert_eq!(session_ttl(&acquire, ttl, &watched, &ClientOptions::new().sessions(false)), None);
        let takeover = LockCmd::takeover("k", "t", "run", ttl).unwrap();
        assert_eq!(session_ttl(&takeover, ttl, &watched, &on), None, "LOCK.TAKEOVER takes no session");
        let fixed = ClientOptions::new().session_ttl(Duration::from_millis(1000));
        assert_eq!(session_ttl(&acquire, ttl, &watched, &fixed), Some(Duration::from_millis(1000)));
        let short = ClientOptions::new().session_ttl(Duration::from_millis(2000));
        assert_eq!(session_ttl(&acquire, ttl, &watched, &short), None, "never held longer than its TTL");
        let lease = Arc::new(SessionLease::new("id".into(), ttl, Instant::now()));
        let attached = acquire.with_session(lease);
        assert_eq!(session_ttl(&attached, ttl, &watched, &on), None, "attached already");
        assert!(!attached.has_fallback(), "a session's grant never falls back to the scripts");
        let packed = |c: &LockCmd| String::from_utf8_lossy(&c.module_cmd().get_packed_command()).replace("\r\n", " ");
        assert!(packed(&attached).ends_with("$5 FENCE $7 SESSION $2 id "), "{}", packed(&attached));
        let delayed = crate::cmd::Lease::new(Some(Duration::from_millis(200)), None, ttl).unwrap();
        let delayed =
            acquire.with_lease(delayed).with_session(Arc::new(SessionLease::new("id".into(), ttl, Instant::now())));
        assert!(!packed(&delayed).contains("LOCKDELAY"), "the session's lock-delay is the lock's");
    }
}
