//! Sessions on a quorum's servers (docs/sessions.md, "Quorum locks"): the
//! renewal engine's own sessions (`session.rs`, `keepalive.rs`), with each
//! server of the quorum as one of its nodes — one session per server,
//! granted lazily, all of a server's sessions kept alive by one
//! `SESSION.KEEPALIVE` per TTL/3 — and a quorum lock's votes (`votes.rs`):
//! each server's grant held by that server's session where it has one, by
//! its own lease elsewhere.
//!
//! - **Acquire**: the session of each server is looked up (granted on
//!   first use) before the attempt's clock starts, and each server's
//!   `LOCK.ACQUIRE` carries its own session's id.
//! - **Renewal** (the engine's, every TTL/3 for each lock, at no cost for
//!   a lock whose votes its sessions keep): a vote of its own lease is
//!   renewed there; a vote gone (its session expired or unknown there, its
//!   key absent; not revoked) is taken again with that server's session
//!   where `QuorumOptions::reacquire_on_renew`; session-held votes are checked
//!   one by one (`LOCK.RENEW`, which changes nothing on them) at the
//!   engine's `session_checks` rate.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, BoxFuture};

use crate::attach::SessionLease;
use crate::cmd::LockCmd;
use crate::engine::Due;
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::quorum::ctx::Ctx;
use crate::quorum::node::{Answer, Taken};
use crate::quorum::round::Tally;
use crate::session::{session_ttl, SessionCalls, SessionUse};
use crate::state::{LossReason, Shared, Status};
use crate::votes::{Vote, Votes};
use crate::watchdog::interval;

/// The sessions of one acquire, server by server.
pub(crate) struct Asked {
    uses: Vec<Option<SessionUse>>,
    ttl: Option<Duration>,
}

impl Asked {
    /// The session each server's grant of a lock of `key` attaches to
    /// (`None` everywhere when it can have none), each looked up (and
    /// granted on first use: a server that does not answer the grant in
    /// time is not asked again for a second, see `SessionCalls for Ctx`).
    pub(crate) async fn ask(ctx: &Arc<Ctx>, key: &str, ttl: Duration, opts: &LockOptions) -> Asked {
        let none = || Asked { uses: ctx.nodes.iter().map(|_| None).collect(), ttl: None };
        let Ok(plain) = LockCmd::acquire(key, "-", ttl) else { return none() };
        let (Some(session_ttl), Some(engine)) = (session_ttl(&plain, ttl, opts, &ctx.client), ctx.engine()) else {
            return none();
        };
        ctx.note_session_ttl(session_ttl);
        let uses = join_all((0..ctx.nodes.len()).map(|i| {
            let calls: Arc<dyn SessionCalls> = Arc::new(OnNode { ctx: ctx.clone(), i });
            engine.sessions().session_for(calls, key, session_ttl, None, "LOCK.ACQUIRE")
        }))
        .await;
        Asked { uses, ttl: Some(session_ttl) }
    }

    /// Server `i`'s session.
    pub(crate) fn lease(&self, i: usize) -> Option<Arc<SessionLease>> {
        self.uses.get(i)?.as_ref().map(|u| u.lease.clone())
    }

    /// The votes of a grant held on `held_on` (`grants`: the acquire's
    /// answers), counted from `start`; `None` when no session holds any
    /// (the lock is then renewed on every server, lock by lock). A server
    /// whose grant may have come after the round was decided is asked at
    /// the first renewal (`Vote::Pending`).
    pub(crate) fn votes(
        &self,
        ctx: &Ctx,
        grants: &Tally,
        held_on: &[usize],
        start: Instant,
        ttl: Duration,
    ) -> Option<Votes> {
        let session_ttl = self.ttl?;
        let slots: Vec<Vote> = (0..ctx.nodes.len())
            .map(|i| match (held_on.contains(&i), grants.answer(i)) {
                (false, _) => self.lease(i).map_or(Vote::None, Vote::Pending),
                (true, Some(Answer::Yes { taken: Some(Taken::Session(s)), .. })) => Vote::Session(s.clone()),
                (true, Some(Answer::Yes { taken: Some(Taken::Lease), .. })) => Vote::Own(start + ttl),
                // Granted after the first round was decided (then floored).
                (true, _) => self.lease(i).map_or(Vote::Own(start + ttl), Vote::Session),
            })
            .collect();
        slots.iter().any(|v| matches!(v, Vote::Session(_))).then(|| {
            let next_check = ctx.next_check(start, ttl);
            Votes::new(slots, ctx.quorum(), ctx.opts.drift_for(ttl), session_ttl, next_check)
        })
    }
}

/// One renewal (per server: the renewal, its fence floor, and the acquire
/// that takes an absent key again).
pub(crate) type Item = (LockCmd, Option<u64>, LockCmd);

/// What a renewal round sends for one lock, server by server.
pub(crate) struct Plan {
    pub(crate) items: Vec<Option<Item>>,
    /// Its session-held votes are checked in this round.
    checking: bool,
    /// Sessions asked for votes taken again, in use until applied.
    _uses: Vec<SessionUse>,
}

/// The round of `d` at `now`: for a lock without votes, a renewal on every
/// server; with votes (`votes.rs`), one where its own lease holds the
/// vote, where the vote is gone (taken again: `reacquire_on_renew`), and
/// where a session holds it only when its check is due (or `check_all`).
pub(crate) async fn plan(ctx: &Arc<Ctx>, d: &Due, now: Instant, check_all: bool) -> Result<Plan> {
    let (key, token) = (&d.shared.key, &d.shared.token);
    let (renew, acquire) = (LockCmd::renew(key, token, d.ttl)?, LockCmd::acquire(key, token, d.ttl)?);
    let item = |acquire: LockCmd| Some((renew.clone(), d.fence, acquire));
    let n = ctx.nodes.len();
    let reacquire = ctx.opts.reacquire_on_renew;
    let (asks, checking, session_ttl) = {
        let g = d.shared.lock();
        let Some(v) = g.votes.as_ref() else {
            return Ok(Plan { items: (0..n).map(|_| item(acquire.clone())).collect(), checking: false, _uses: vec![] });
        };
        let checking = check_all || v.next_check.is_some_and(|at| at <= now);
        let asks: Vec<Ask> = v
            .slots()
            .iter()
            .map(|slot| match slot {
                Vote::Own(_) => Ask::Renew(None),
                // Its grant confirmed by a renewal, without taking it again.
                Vote::Pending(l) if !reacquire => Ask::Renew(Some(l.clone())),
                Vote::None => Ask::Retake { session_only: false },
                // A revoke is final for the votes it ended (docs/sessions.md).
                Vote::Session(l) | Vote::Pending(l) if l.end_reason() == Some(LossReason::SessionRevoked) => {
                    Ask::Nothing
                }
                s if s.gone(now) => Ask::Retake { session_only: true },
                Vote::Session(l) if checking => Ask::Renew(Some(l.clone())),
                _ => Ask::Nothing,
            })
            .collect();
        (asks, checking, v.session_ttl)
    };
    let engine = ctx.engine();
    let mut items = Vec::with_capacity(n);
    let mut uses = Vec::new();
    for (i, ask) in asks.into_iter().enumerate() {
        items.push(match ask {
            Ask::Nothing => None,
            Ask::Renew(None) => item(acquire.clone()),
            Ask::Renew(Some(l)) => item(acquire.with_session(l)),
            Ask::Retake { .. } if !reacquire => None,
            Ask::Retake { session_only } => {
                let calls: Arc<dyn SessionCalls> = Arc::new(OnNode { ctx: ctx.clone(), i });
                let used = match engine {
                    Some(e) => e.sessions().session_for(calls, key, session_ttl, None, "LOCK.ACQUIRE").await,
                    None => None,
                };
                match used {
                    Some(u) => {
                        let taking = acquire.with_session(u.lease.clone());
                        uses.push(u);
                        item(taking)
                    }
                    // A server that held it (or was asked) with a session
                    // has sessions: one that cannot grant one now (down,
                    // restarting) is asked again at the next round, not
                    // taken on a lease of its own for good.
                    None if session_only => None,
                    None => item(acquire.clone()),
                }
            }
        });
    }
    Ok(Plan { items, checking, _uses: uses })
}

/// What a round does for one server's vote.
enum Ask {
    Nothing,
    /// A renewal of its own lease, or a check of its session's (which
    /// takes an absent key again with that session only).
    Renew(Option<Arc<SessionLease>>),
    /// Taken again (it is gone): with that server's session, or (not
    /// `session_only`: a server no session held it on) its own lease
    /// where it has none.
    Retake {
        session_only: bool,
    },
}

/// Applies a round's answers (`t`: one per server, none where nothing was
/// asked) sent at `start` to the votes of `shared`, and says what they
/// mean: `Ok(true)` a majority of votes is fresh (renewed now, or kept by
/// a live session), `Ok(false)` fewer than a quorum are alive, `Err` too
/// few answered; `None` for a lock without votes.
pub(crate) fn apply(
    ctx: &Arc<Ctx>,
    shared: &Arc<Shared>,
    plan: &Plan,
    t: &Tally,
    start: Instant,
    ttl: Duration,
) -> Option<std::result::Result<bool, ()>> {
    let (now, reacquire) = (Instant::now(), ctx.opts.reacquire_on_renew);
    let mut g = shared.lock();
    let held = g.status == Status::Held;
    let v = g.votes.as_mut()?;
    if !held {
        return Some(Ok(true));
    }
    let mut attach = Vec::new();
    let mut fresh = 0;
    for i in 0..v.slots().len() {
        let a = t.answer(i);
        let vote = match (a, &v.slots()[i]) {
            (Some(Answer::Yes { taken: Some(Taken::Session(s)), .. }), _) => Some(Vote::Session(s.clone())),
            (Some(Answer::Yes { taken: Some(Taken::Lease), .. }), _) => Some(Vote::Own(start + ttl)),
            // A session's key renewed: the session still keeps it (a
            // renewal changes nothing there).
            (Some(Answer::Yes { .. }), Vote::Session(_)) => None,
            (Some(Answer::Yes { .. }), Vote::Pending(s)) => Some(Vote::Session(s.clone())),
            (Some(Answer::Yes { .. }), _) => Some(Vote::Own(start + ttl)),
            // Not ours there (yet): taken again with a session.
            (Some(Answer::No), Vote::Session(s) | Vote::Pending(s)) if reacquire => Some(Vote::Pending(s.clone())),
            (Some(Answer::No), _) => Some(Vote::None),
            (Some(Answer::Failed(_)) | None, _) => None,
        };
        if let Some(vote) = vote {
            attach.extend(v.set(i, vote));
        }
        let kept = matches!(&v.slots()[i], Vote::Session(s) if s.usable(now));
        fresh += usize::from(matches!(a, Some(Answer::Yes { .. })) || kept);
    }
    if plan.checking {
        v.next_check = ctx.next_check(now, ttl);
    }
    let (alive, q) = (v.alive(), ctx.quorum());
    drop(g);
    if let Some(e) = ctx.engine.started() {
        for s in attach {
            e.attach(&s, shared.clone());
        }
    }
    // Below a quorum, reading the state ends the lock, with its reason.
    let _ = shared.status();
    Some(if fresh >= q {
        Ok(true)
    } else if alive < q {
        Ok(false)
    } else {
        Err(())
    })
}

/// Sessions on one server of a quorum, for the engine's sessions to grant
/// one there.
struct OnNode {
    ctx: Arc<Ctx>,
    i: usize,
}

impl SessionCalls for OnNode {
    fn session_node(self: Arc<Self>, key: String) -> BoxFuture<'static, Option<String>> {
        Box::pin(async move { self.ctx.nodes[self.i].core.clone().session_node(key).await })
    }

    fn session_call(self: Arc<Self>, node: String, cmd: redis::Cmd) -> BoxFuture<'static, Result<redis::Value>> {
        self.ctx.clone().session_call(node, cmd)
    }
}

/// The engine's sessions reach a quorum's servers by their `host:port`,
/// each call bounded by a sixth of the shortest session TTL (or the
/// shorter `QuorumOptions::node_timeout`): a server that does not answer
/// delays the others' keepalives (one task sends them all) by no more, so
/// they still go out every TTL/2 at the latest.
impl SessionCalls for Ctx {
    fn session_call(self: Arc<Self>, node: String, cmd: redis::Cmd) -> BoxFuture<'static, Result<redis::Value>> {
        Box::pin(async move {
            let Some(n) = self.nodes.iter().find(|n| n.server() == node) else {
                return Err(Error::InvalidArgument(format!("no server {node} in this quorum")));
            };
            let ttl = Duration::from_millis(self.session_ttl_ms.load(Ordering::Relaxed));
            let bound = self.opts.node_timeout.map_or(ttl / 6, |t| t.min(ttl / 6)).max(Duration::from_millis(1));
            match tokio::time::timeout(bound, n.core.clone().session_call(node, cmd)).await {
                Ok(r) => r,
                Err(_) => Err(Error::Redis(
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "session command timed out").into(),
                )),
            }
        })
    }
}

impl Ctx {
    /// A session TTL in use: session calls are bounded by the shortest.
    fn note_session_ttl(&self, ttl: Duration) {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.session_ttl_ms.fetch_min(ms, Ordering::Relaxed);
    }

    /// When a lock of `ttl` checked at `now` is checked next: its share of
    /// the engine's checks a second, and no sooner than TTL/3; `None`:
    /// no checks.
    fn next_check(self: &Ctx, now: Instant, ttl: Duration) -> Option<Instant> {
        let spacing = self.engine.started()?.check_spacing()?;
        now.checked_add(spacing.max(interval(ttl)))
    }
}
