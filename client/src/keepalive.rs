//! The keepalive task of one client's sessions (`session.rs` keeps the
//! table it works on), and a session's revoked locks as it hears them
//! (docs/revocation.md, "A lock held by a session"): a `SESSION.KEEPALIVE`
//! entry of `-ttl` says the session was kept alive and some of its locks
//! are revoked; the engine then reads which with one `SESSION.INFO id
//! COUNT 1000` to that node, and fires the revoked signal (reason and
//! deadline) of each attached lock, permit, guard or leadership whose key
//! it lists, the first time it hears of it. The work is one round trip
//! and O(revoked) per such keepalive (the session's locks are kept by
//! key), none for a session without revoked locks.
//!
//! The same listing names the session's holds lost to an eviction
//! (`evicted`: key and token): each such lock, permit, guard or
//! leadership is lost at once as [`LossReason::Evicted`].
//!
//! A session's locks are all this client's, in its connection's database,
//! so a listed key names them. Where the session holds several holds of
//! one key (two permits of a semaphore), the listing cannot tell which is
//! revoked: those are checked one by one (`SEM.RENEW`, which answers `-ms`
//! for a revoked holder only).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::attach::SessionLease;
use crate::cmd::{info_cmd, keepalive_cmd, keepalive_reply, revoke_cmd};
use crate::loss::session_end;
use crate::revocation::{session_evictions, session_revocations, text_field, Revocation, SessionRevoked};
use crate::runtime;
use crate::session::{follow, EndedSession, SessionCalls, Sessions};
use crate::state::{LossReason, Shared, Status};

/// The most revoked locks one `SESSION.INFO` lists (the module's maximum);
/// more are heard by later keepalives as the first ones end, or by each
/// lock's own check.
const LISTED: u32 = 1000;

/// How long the engine waits for a node to say how a session ended
/// before its locks are lost without the reason ([`LossReason::SessionEnded`]).
const ASK_HOW: Duration = Duration::from_secs(1);

/// What a session's listing says of its held locks: those it names alone,
/// with their revocations, and those whose key the session holds more than
/// once (to check one by one).
type Heard = (Vec<(Arc<Shared>, Revocation)>, Vec<Arc<Shared>>);

impl Sessions {
    /// The held locks of `lease` whose key and token `evicted` names.
    fn evicted_holds(&self, lease: &Arc<SessionLease>, evicted: &[(String, String)]) -> Vec<Arc<Shared>> {
        let t = self.lock();
        let Some(e) = t.sessions.get(&lease.id).filter(|e| Arc::ptr_eq(&e.lease, lease)) else { return Vec::new() };
        let held = |(key, token): &(String, String)| {
            let locks = e.attached.get(key).map_or(&[][..], Vec::as_slice);
            locks.iter().filter(|l| l.token == *token && l.status() == Status::Held).cloned().collect::<Vec<_>>()
        };
        evicted.iter().flat_map(held).collect()
    }

    /// The held locks of `lease` that `listed` names.
    fn revoked_holds(&self, lease: &Arc<SessionLease>, listed: Vec<SessionRevoked>) -> Heard {
        let t = self.lock();
        let (mut alone, mut shared) = (Vec::new(), Vec::new());
        let Some(e) = t.sessions.get(&lease.id).filter(|e| Arc::ptr_eq(&e.lease, lease)) else {
            return (alone, shared);
        };
        for r in listed {
            let Some(locks) = e.attached.get(&r.key) else { continue };
            let mut held = locks.iter().filter(|l| l.status() == Status::Held);
            match (held.next(), held.next()) {
                (Some(one), None) => alone.push((one.clone(), r.revocation)),
                (Some(a), Some(b)) => {
                    shared.extend([a.clone(), b.clone()]);
                    shared.extend(held.cloned());
                }
                _ => {}
            }
        }
        (alone, shared)
    }
}

/// The keepalive task of one client's sessions.
pub(crate) async fn keepalives(sessions: Arc<Sessions>, renewer: Weak<dyn SessionCalls>) {
    loop {
        let notified = sessions.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if sessions.lock().closed {
            return;
        }
        let (due, idle, next) = sessions.take_due(Instant::now());
        if due.is_empty() && idle.is_empty() {
            runtime::idle(notified, next).await;
            continue;
        }
        let Some(r) = renewer.upgrade() else { return };
        let revokes = idle.into_iter().map(|(node, id)| {
            let r = r.clone();
            async move {
                let _ = r.session_call(node, revoke_cmd(&id)).await;
            }
        });
        let calls = due.iter().map(|k| {
            let r = r.clone();
            async move {
                let sent = Instant::now();
                let ids = k.sessions.iter().map(|s| s.id.as_str());
                let reply = r.session_call(k.node.clone(), keepalive_cmd(ids)).await;
                (sent, reply.and_then(|v| Ok(keepalive_reply(v, k.sessions.len())?)))
            }
        });
        let (answers, _) =
            futures_util::future::join(futures_util::future::join_all(calls), futures_util::future::join_all(revokes))
                .await;
        let (mut failed, mut revoked, mut ended) = (Vec::new(), Vec::new(), Vec::new());
        for (k, (sent, reply)) in due.iter().zip(answers) {
            if reply.is_err() {
                failed.push(k);
            }
            let (gone, some_revoked, not_owner) = sessions.apply(k, sent, reply);
            for lock in not_owner {
                lock.mark_lost(LossReason::NotOwner);
            }
            ended.extend(gone.into_iter().map(|s| (k.node.clone(), s)));
            revoked.extend(some_revoked.into_iter().map(|lease| (k.node.clone(), lease)));
        }
        futures_util::future::join(end(&r, ended), hear(&sessions, &r, revoked)).await;
        for k in failed {
            follow(&sessions, &r, k).await;
        }
        drop(r);
    }
}

/// Ends each of `ended` (its node, its session and locks) as its node
/// says it ended: one `SESSION.INFO id` per session (a session's end is
/// rare; at most [`ASK_HOW`] is waited for it), its state `expired` or
/// `revoked` (with a revoke's `end-reason`), or nil (unknown there);
/// every lock of it is then lost with that reason at once.
async fn end(calls: &Arc<dyn SessionCalls>, ended: Vec<(String, EndedSession)>) {
    let asks = ended.into_iter().map(|(node, (lease, locks))| {
        let calls = calls.clone();
        async move {
            let info = tokio::time::timeout(ASK_HOW, calls.session_call(node, info_cmd(&lease.id, 1))).await;
            let info = info.ok().and_then(|r| r.ok());
            let why = info.clone().and_then(|v| text_field(v, "end-reason"));
            lease.end(session_end(info), why);
            let how = lease.end_reason().unwrap_or(LossReason::SessionEnded);
            for lock in locks {
                lock.mark_lost(how);
            }
        }
    });
    futures_util::future::join_all(asks).await;
}

/// Reads the revoked locks of each of `revoked` (its node, its session)
/// and fires their revoked signals.
async fn hear(sessions: &Sessions, calls: &Arc<dyn SessionCalls>, revoked: Vec<(String, Arc<SessionLease>)>) {
    if revoked.is_empty() {
        return;
    }
    let reads = revoked.into_iter().map(|(node, lease)| {
        let calls = calls.clone();
        async move {
            let sent = Instant::now();
            let info = calls.session_call(node, info_cmd(&lease.id, LISTED)).await;
            (lease, info.map(|v| (session_evictions(&v), session_revocations(v, sent))))
        }
    });
    let mut several = Vec::new();
    for (lease, listed) in futures_util::future::join_all(reads).await {
        // Unanswered: the next keepalive says `-ttl` again, and asks again.
        let Ok((evicted, listed)) = listed else { continue };
        // Lost to an eviction: its key is gone, so at once.
        for lock in sessions.evicted_holds(&lease, &evicted) {
            lock.mark_lost(LossReason::Evicted);
        }
        let (alone, shared) = sessions.revoked_holds(&lease, listed);
        for (lock, r) in alone {
            if lock.mark_revoked(r.deadline) {
                lock.tell_revoked(r.reason);
            }
        }
        several.extend(shared);
    }
    if several.is_empty() {
        return;
    }
    // Each check hears its own lock's revocation (`-ms`) and fires it.
    let checked = calls.clone().check(several.clone()).await;
    for (lock, r) in several.iter().zip(checked) {
        if matches!(r, Ok(false)) {
            lock.mark_lost(LossReason::NotOwner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::LockKind;
    use crate::error::Result;
    use futures_util::future::BoxFuture;
    use redis::Value::{Array, BulkString, Int};
    use std::sync::Mutex;
    use std::time::Duration;

    /// A node with one session, whose `SESSION.INFO` lists `info`, and
    /// whose checks answer `-ms` for the tokens in `revoked`.
    struct Node {
        info: redis::Value,
        revoked: Vec<&'static str>,
        checked: Mutex<Vec<String>>,
    }

    impl SessionCalls for Node {
        fn session_node(self: Arc<Self>, _key: String) -> BoxFuture<'static, Option<String>> {
            Box::pin(async { Some("n".to_string()) })
        }

        fn session_call(self: Arc<Self>, _node: String, cmd: redis::Cmd) -> BoxFuture<'static, Result<redis::Value>> {
            let grant = String::from_utf8_lossy(&cmd.get_packed_command()).contains("SESSION.GRANT");
            let v = if grant { BulkString(b"id".to_vec()) } else { self.info.clone() };
            Box::pin(async move { Ok(v) })
        }

        fn check(self: Arc<Self>, locks: Vec<Arc<Shared>>) -> BoxFuture<'static, Vec<Result<bool>>> {
            Box::pin(async move {
                for l in &locks {
                    self.checked.lock().unwrap().push(l.token.clone());
                    if self.revoked.contains(&l.token.as_str()) && l.mark_revoked(Instant::now()) {
                        l.tell_revoked(None);
                    }
                }
                locks.iter().map(|_| Ok(true)).collect()
            })
        }
    }

    fn b(s: &str) -> redis::Value {
        BulkString(s.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn a_listed_key_fires_its_locks_revocation_once_and_a_shared_key_is_checked() {
        let revoked = Array(vec![b("a"), Int(0), Int(10_500), b("drain"), b("s"), Int(0), Int(10_500), b("")]);
        let info = Array(vec![b("ttl-left-ms"), Int(50_000), b("deadline"), Int(60_000), b("revoked"), revoked]);
        let node = Arc::new(Node { info, revoked: vec!["s1"], checked: Mutex::default() });
        let calls: Arc<dyn SessionCalls> = node.clone();
        let sessions = Sessions::default();
        let ttl = Duration::from_secs(60);
        let used = sessions.session_for(calls.clone(), "a", ttl, None, "LOCK.ACQUIRE").await.expect("granted");
        let now = Instant::now();
        let lock = |key: &str, token: &str| {
            let s =
                Shared::new(key.into(), token.into(), LockKind::Exclusive, now, ttl).with_session(used.lease.clone());
            let s = Arc::new(s);
            sessions.attach(&used.lease, s.clone());
            s
        };
        let (a, other, s1, s2) = (lock("a", "ta"), lock("b", "tb"), lock("s", "s1"), lock("s", "s2"));
        hear(&sessions, &calls, vec![("n".into(), used.lease.clone())]).await;
        let r = {
            let g = a.lock();
            g.revoked.clone().filter(|_| g.revoke_told).expect("a heard it")
        };
        assert_eq!(r.reason.as_deref(), Some("drain"));
        assert!(
            r.deadline > now + Duration::from_millis(400) && r.deadline <= Instant::now() + Duration::from_millis(500)
        );
        assert!(other.lock().revoked.is_none(), "b is not listed");
        assert_eq!(*node.checked.lock().unwrap(), vec!["s1", "s2"], "a key held twice is checked hold by hold");
        assert!(s1.lock().revoke_told && s2.lock().revoked.is_none());
        // A later keepalive's listing fires nothing again.
        a.lock().revoke_told = false;
        hear(&sessions, &calls, vec![("n".into(), used.lease.clone())]).await;
        assert!(!a.lock().revoke_told, "told once");
        // A lock released meanwhile is not told.
        let listed = || vec![SessionRevoked { key: "b".into(), db: 0, revocation: r.clone() }];
        assert_eq!(sessions.revoked_holds(&used.lease, listed()).0.len(), 1);
        other.mark_released();
        assert!(sessions.revoked_holds(&used.lease, listed()).0.is_empty());
    }
}
