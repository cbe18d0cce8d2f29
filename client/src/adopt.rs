//! Session-held locks whose key moved to another node (docs/sessions.md,
//! "A key moved to another node"): a resharding, `MIGRATE` or an atomic
//! slot migration takes a key to a node that does not know the session
//! holding it. The module there keeps it for its holder for
//! `lock.orphan-grace` (a minute by default) from the first command that
//! finds it, then lets it expire; this task has the holder keep it.
//!
//! Every [`SWEEP`] the task reads, for each session's held locks, which
//! node serves their key now (the transport's slot map, read again when
//! 5 s old; one look per slot in use, not per lock). A lock whose node is
//! no longer its session's is adopted there: the client's session on that
//! node (granted now if it has none, as for an acquire) takes it with
//! `SESSION.ADOPT key token id`; on `1` the lock is that session's from
//! then on (its validity, its end). On `0` (the node knows its session, or
//! another token holds the key) the lock is checked on its own (a
//! `LOCK.RENEW`, which changes nothing on a session's lock) and, if it is
//! no longer held, lost as [`LossReason::NotOwner`]. A lock released or
//! lost meanwhile whose adoption succeeded is released again: the node
//! holds it for nobody.
//!
//! The work is client-side O(held locks) every 5 s (no server call per
//! lock unless its key moved), plus one `CLUSTER SLOTS` at most.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::attach::SessionLease;
use crate::cmd::{adopt_cmd, LockCmd};
use crate::session::{SessionCalls, Sessions};
use crate::state::{LossReason, Shared, Status};

/// How often the client looks for its moved locks.
pub(crate) const SWEEP: Duration = Duration::from_secs(5);

/// One session's held locks, as a sweep reads them.
struct Held {
    lease: Arc<SessionLease>,
    node: String,
    ttl: Duration,
    lock_delay_ms: Option<u64>,
    locks: Vec<Arc<Shared>>,
}

impl Sessions {
    /// Every session holding locks, with those it holds.
    fn held_by_session(&self) -> Vec<Held> {
        let t = self.lock();
        t.sessions
            .values()
            .filter(|e| e.lease.held() > 0)
            .map(|e| Held {
                lease: e.lease.clone(),
                node: e.key.node.clone(),
                ttl: Duration::from_millis(e.key.ttl_ms),
                lock_delay_ms: e.key.lock_delay_ms,
                locks: e.attached.values().flatten().filter(|l| l.status() == Status::Held).cloned().collect(),
            })
            .collect()
    }
}

impl Shared {
    /// Held by `to` from now on, instead of the session that held it (its
    /// key moved to `to`'s node, which adopted it): false, and nothing
    /// changed, if it is no longer held.
    pub(crate) fn move_to(&self, to: Arc<SessionLease>) -> bool {
        let mut g = self.lock();
        if g.status != Status::Held {
            return false;
        }
        to.hold();
        if let Some(old) = g.session.replace(to) {
            old.let_go();
        }
        true
    }
}

/// The task: a sweep every [`SWEEP`] until the client or its sessions close.
pub(crate) async fn sweeps(sessions: Arc<Sessions>, calls: Weak<dyn SessionCalls>) {
    loop {
        tokio::time::sleep(SWEEP).await;
        if sessions.lock().closed {
            return;
        }
        let Some(calls) = calls.upgrade() else { return };
        sweep(&sessions, &calls).await;
    }
}

/// Adopts, where its key is now, every held lock whose key moved off its
/// session's node.
pub(crate) async fn sweep(sessions: &Sessions, calls: &Arc<dyn SessionCalls>) {
    let mut node_of_slot: HashMap<u16, Option<String>> = HashMap::new();
    for held in sessions.held_by_session() {
        for lock in &held.locks {
            let slot = redis_lock_rules::cluster::key_slot(lock.key.as_bytes());
            let node = match node_of_slot.get(&slot) {
                Some(n) => n.clone(),
                None => {
                    let n = calls.clone().session_node(lock.key.clone()).await;
                    node_of_slot.insert(slot, n.clone());
                    n
                }
            };
            if node.is_some_and(|n| n != held.node) {
                adopt(sessions, calls, &held, lock.clone()).await;
            }
        }
    }
}

/// `lock` (of `held`'s session) moved: has the client's session of its
/// new node adopt it.
async fn adopt(sessions: &Sessions, calls: &Arc<dyn SessionCalls>, held: &Held, lock: Arc<Shared>) {
    let Some(used) =
        sessions.session_for(calls.clone(), &lock.key, held.ttl, held.lock_delay_ms, "SESSION.ADOPT").await
    else {
        return;
    };
    let reply = calls.clone().session_call(used.node.clone(), adopt_cmd(&lock.key, &lock.token, &used.lease.id)).await;
    match reply {
        Ok(redis::Value::Int(1)) => {
            // Off the old session's list first: its end must not end it.
            sessions.detach(&held.lease, &lock);
            if lock.move_to(used.lease.clone()) {
                sessions.attach(&used.lease, lock);
            } else if let Ok(release) = LockCmd::release_of(lock.kind, &lock.key, &lock.token) {
                // Released or lost meanwhile: the node holds it for nobody.
                let _ = calls.clone().session_call(used.node.clone(), release.module_cmd()).await;
            }
        }
        Ok(_) => {
            // Not an orphan of its token there: its own check tells.
            let checked = calls.clone().check(vec![lock.clone()]).await;
            if matches!(checked.first(), Some(Ok(false))) {
                lock.mark_lost(LossReason::NotOwner);
            }
        }
        // Unanswered, or a module without SESSION.ADOPT: the next sweep
        // tries again, the lock's own checks go on.
        Err(_) => {}
    }
}
