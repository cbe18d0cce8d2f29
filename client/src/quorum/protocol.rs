//! The quorum algorithm: a two-phase acquire, renew, release, each a
//! [`round`] or two over all servers.
//!
//! **Acquire** (one attempt; `acquire` repeats it after a jittered pause):
//! 1. `LOCK.ACQUIRE key token ttl FENCE` on every server at once, each
//!    bounded by the node timeout. Decided once ⌊N/2⌋+1 granted, or once
//!    that many can no longer grant (fail fast).
//! 2. With fences F = the largest granted, `LOCK.RENEW key token ttl FLOOR F`
//!    on every server that granted one: each raises its fence mark to ≥ F
//!    while it still holds the key for us. Skipped when every server
//!    granted with F itself (their marks are at F already): always for
//!    N = 1.
//! 3. The lock is ours if a majority still holds it after step 2 and the
//!    validity `TTL − elapsed − drift` is positive. Its fence is F if a
//!    majority confirmed the floor, else none (servers without the module
//!    or too old for `FLOOR`). Otherwise the key is released everywhere.
//!
//! Why F never goes backwards: a later successful acquire is granted by a
//! majority, which shares a server X with the majority that confirmed F.
//! X's grant to us came before its grant to the later holder (X granted
//! nobody while our key lived there), and X raised its mark to ≥ F while
//! our key lived there; so X's fence for the later holder is > F, and so is
//! the later holder's maximum. No clock is compared anywhere: skewed
//! servers only raise F. The argument needs X to keep its mark, which a
//! restart without persistence breaks (see docs/quorum.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, BoxFuture};
use rand::Rng;

use crate::cmd::LockCmd;
use crate::engine::{Due, Renewed, Renewer};
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::quorum::ctx::Ctx;
use crate::quorum::node::Answer;
use crate::quorum::round::{round, Tally};
use crate::quorum::sessions::{self, Asked, Item, Plan};
use crate::state::Shared;
use crate::votes::Votes;

impl Renewer for Ctx {
    fn renew_all(self: Arc<Self>, due: Vec<Due>, batch: usize) -> BoxFuture<'static, Vec<Renewed>> {
        Box::pin(async move { renew_all(&self, &due, batch, false).await })
    }

    /// Releases on every server, each bounded by the node timeout.
    fn release_all(self: Arc<Self>, locks: Vec<Arc<Shared>>, batch: usize) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let timeout = self.opts.node_timeout.unwrap_or(Duration::from_secs(1));
            let cmds: Vec<LockCmd> = locks.iter().filter_map(|l| LockCmd::release(&l.key, &l.token).ok()).collect();
            let cmds = &cmds;
            futures_util::future::join_all(self.nodes.iter().map(|node| async move {
                let _ = tokio::time::timeout(timeout, node.release_batch(cmds.clone(), batch)).await;
            }))
            .await;
        })
    }
}

/// A successful acquire.
pub(crate) struct Acquired {
    /// When the validity counts from: the start of the attempt minus the
    /// drift allowance, so that `valid_from + ttl` is the end of the
    /// validity (`start + TTL − drift`, redsync's `until`).
    pub(crate) valid_from: Instant,
    pub(crate) fence: Option<u64>,
    /// The servers (indices) that held the key when the acquire was
    /// decided: a majority (for the trace's `server`).
    pub(crate) held_on: Vec<usize>,
    /// Its votes, when sessions hold some (`sessions.rs`).
    pub(crate) votes: Option<Votes>,
    /// The sessions asked, in use until the lock holds them.
    pub(crate) _asked: Asked,
}

/// Whether the validity that counts from `valid_from` for `ttl` still runs.
fn within(valid_from: Instant, ttl: Duration) -> bool {
    // A TTL too long for an Instant never runs out.
    valid_from.checked_add(ttl).is_none_or(|end| Instant::now() < end)
}

/// Checks the arguments as a single-server lock would, before anything is
/// sent (and the TTL against the drift allowance).
pub(crate) fn check(ctx: &Ctx, key: &str, token: &str, ttl: Duration) -> Result<()> {
    LockCmd::acquire(key, token, ttl)?;
    ctx.valid_from(Instant::now(), ttl).map(drop)
}

/// Attempts until one succeeds or `wait` is over, pausing
/// `QuorumOptions::retry_delay` between attempts. The error is the last
/// attempt's.
pub(crate) async fn acquire(
    ctx: &Arc<Ctx>,
    key: &str,
    token: &str,
    ttl: Duration,
    wait: Duration,
    opts: &LockOptions,
) -> Result<Acquired> {
    let deadline = Instant::now().checked_add(wait);
    loop {
        let err = match attempt(ctx, key, token, ttl, opts).await {
            Ok(a) => return Ok(a),
            Err(e @ Error::InvalidArgument(_)) => return Err(e),
            Err(e) => e,
        };
        let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return Err(err);
        }
        let (min, max) = (ctx.opts.retry_min_delay, ctx.opts.retry_max_delay);
        let pause = if max > min { rand::thread_rng().gen_range(min..=max) } else { min };
        tokio::time::sleep(pause.min(left)).await;
    }
}

/// One two-phase attempt (see the module docs), each server's grant held
/// by its session where it can be (`sessions.rs`).
async fn attempt(ctx: &Arc<Ctx>, key: &str, token: &str, ttl: Duration, opts: &LockOptions) -> Result<Acquired> {
    let (n, q) = (ctx.nodes.len(), ctx.quorum());
    let timeout = ctx.opts.node_timeout_for(ttl);
    let acquire = LockCmd::acquire(key, token, ttl)?;
    let renew = LockCmd::renew(key, token, ttl)?;
    let sessions = Asked::ask(ctx, key, ttl, opts).await;
    let start = Instant::now();
    let valid_from = ctx.valid_from(start, ttl)?;
    // Dropped before the end (an async caller gave up): release everywhere.
    let mut guard = ReleaseGuard { ctx: ctx.clone(), release: Some(LockCmd::release(key, token)?) };

    let grants = round(
        &ctx.nodes,
        &ctx.all,
        timeout,
        |i, node| {
            let (cmd, session) = (acquire.clone(), sessions.lease(i));
            async move { node.acquire(&cmd, session).await }
        },
        |t| t.yes() >= q || t.yes() + t.pending() < q,
    )
    .await;
    let outcome = if grants.yes() < q {
        Err(if grants.no() > n - q {
            Error::NotAcquired { key: key.into() }
        } else {
            ctx.failure("acquire", key, &grants, &ctx.all, grants.yes(), false)
        })
    } else {
        let granted_on = |i: &usize| grants.yes_at(*i) == Some(true);
        let (held_on, fence, confirm) = match grants.fences().map(|(_, f)| f).max() {
            None => (ctx.all.iter().copied().filter(granted_on).collect::<Vec<_>>(), None, None),
            // Every server granted, each with the fence F itself (so each
            // has the module and granted): each mark
            // is already at F (it issued it), so no floor is left to push
            // (always so for N = 1, which then costs what a single-server
            // lock does).
            Some(floor) if grants.fences().filter(|&(_, f)| f == floor).count() == n => {
                (ctx.all.clone(), Some(floor), None)
            }
            Some(floor) => {
                // Every server but those that refused: one that granted
                // after the first round was decided holds our key too and
                // can take the floor (and one that cannot, e.g. a clock a
                // day behind, leaves the others to). Decided once a
                // majority took it, or it cannot while a majority holds.
                let asked: Vec<usize> = ctx.all.iter().copied().filter(|&i| !grants.refused_at(i)).collect();
                let t = round(
                    &ctx.nodes,
                    &asked,
                    timeout,
                    |_, node| {
                        let cmd = renew.clone();
                        async move { node.renew(&cmd, Some(floor), None).await }
                    },
                    |t| t.floored() >= q || t.pending() == 0 || (t.yes() >= q && t.floored() + t.pending() < q),
                )
                .await;
                // A server holds the key if it renewed now, or granted and
                // was not heard from again.
                let held_on = ctx.all.iter().copied().filter(|&i| t.yes_at(i).or(grants.yes_at(i)) == Some(true));
                (held_on.collect(), (t.floored() >= q).then_some(floor), Some((t, asked)))
            }
        };
        let (held, in_time) = (held_on.len(), within(valid_from, ttl));
        if held >= q && in_time {
            Ok((held_on, fence))
        } else {
            Err(match &confirm {
                Some((t, asked)) => ctx.failure("acquire", key, t, asked, held, !in_time),
                None => ctx.failure("acquire", key, &grants, &ctx.all, held, !in_time),
            })
        }
    };
    match outcome {
        Ok((held_on, fence)) => {
            guard.release = None;
            let votes = sessions.votes(ctx, &grants, &held_on, start, ttl);
            Ok(Acquired { valid_from, fence, held_on, votes, _asked: sessions })
        }
        Err(e) => {
            if let Some(cmd) = guard.release.take() {
                // Wait for the servers that granted; the rest finish alone.
                let granted = grants.yes();
                release_round(ctx, cmd, timeout, move |t| t.yes() >= granted).await;
            }
            Err(e)
        }
    }
}

/// Renews on every server (taking an absent key again if so configured,
/// with the fence floor where the lock has a fence). Answers as the
/// watchdog expects: when the new validity counts from, and `Ok(true)`
/// renewed by a majority in time, `Ok(false)` a majority says the key is
/// not ours, else the error.
pub(crate) async fn renew(
    ctx: &Arc<Ctx>,
    key: &str,
    token: &str,
    ttl: Duration,
    fence: Option<u64>,
) -> (Instant, Result<bool>) {
    let start = Instant::now();
    let (cmds, valid_from) =
        match (LockCmd::renew(key, token, ttl), LockCmd::acquire(key, token, ttl), ctx.valid_from(start, ttl)) {
            (Ok(r), Ok(a), Ok(v)) => ((r, a), v),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return (start, Err(e)),
        };
    let q = ctx.quorum();
    let reacquire = ctx.opts.reacquire_on_renew;
    let t = round(
        &ctx.nodes,
        &ctx.all,
        ctx.opts.node_timeout_for(ttl),
        |_, node| {
            let (renew, acquire) = cmds.clone();
            async move { node.renew(&renew, fence, reacquire.then_some(&acquire)).await }
        },
        |t| t.yes() >= q || t.yes() + t.pending() < q,
    )
    .await;
    (valid_from, renew_outcome(ctx, key, &t, valid_from, ttl))
}

/// What a renewal round's answers mean: `Ok(true)` renewed by a majority
/// within the validity, `Ok(false)` a majority says the key is not ours,
/// else the error.
fn renew_outcome(ctx: &Ctx, key: &str, t: &Tally, valid_from: Instant, ttl: Duration) -> Result<bool> {
    let (n, q) = (ctx.nodes.len(), ctx.quorum());
    if t.yes() >= q && within(valid_from, ttl) {
        Ok(true)
    } else if t.no() > n - q {
        Ok(false)
    } else {
        Err(ctx.failure("renew", key, t, &ctx.all, t.yes(), t.yes() >= q))
    }
}

/// Renews many locks at once, for the renewal engine (and for the `renew`
/// of a lock with votes, which then checks them all: `check_all`): every
/// server gets one pipeline per `batch` of its renewals (all servers at
/// once, each bounded by the node timeout). A lock without votes is
/// renewed on every server, its answers read as [`renew`] reads them; a
/// lock with votes sends what its plan says and reads them as its votes
/// (`sessions.rs`).
pub(crate) async fn renew_all(ctx: &Arc<Ctx>, due: &[Due], batch: usize, check_all: bool) -> Vec<Renewed> {
    let start = Instant::now();
    let planned: Vec<Result<(Instant, Plan)>> = join_all(due.iter().map(|d| async move {
        let valid_from = ctx.valid_from(start, d.ttl)?;
        Ok((valid_from, sessions::plan(ctx, d, start, check_all).await?))
    }))
    .await;
    let timeout = due.iter().map(|d| ctx.opts.node_timeout_for(d.ttl)).min().unwrap_or(Duration::from_secs(1));
    let reacquire = ctx.opts.reacquire_on_renew;
    let plans = &planned;
    let per_node = join_all(ctx.nodes.iter().enumerate().map(|(i, node)| async move {
        let items: Vec<Item> = plans.iter().filter_map(|p| p.as_ref().ok()?.1.items[i].clone()).collect();
        let n = items.len();
        tokio::time::timeout(timeout, node.renew_batch(&items, reacquire, batch)).await.unwrap_or_else(|_| {
            (0..n)
                .map(|_| {
                    Answer::Failed(format!(
                        "no answer within {} ms (node timeout: down, unreachable or slow)",
                        timeout.as_millis()
                    ))
                })
                .collect()
        })
    }))
    .await;
    let mut per_node: Vec<_> = per_node.into_iter().map(Vec::into_iter).collect();
    due.iter()
        .zip(planned)
        .map(|(d, p)| match p {
            Ok((valid_from, plan)) => {
                let answers =
                    plan.items.iter().zip(per_node.iter_mut()).map(|(item, a)| item.as_ref().and_then(|_| a.next()));
                let t = Tally::of(answers.collect());
                let key = &d.shared.key;
                let r = match sessions::apply(ctx, &d.shared, &plan, &t, start, d.ttl) {
                    None => renew_outcome(ctx, key, &t, valid_from, d.ttl),
                    Some(Ok(r)) => Ok(r),
                    Some(Err(())) => {
                        let asked: Vec<usize> = (0..ctx.nodes.len()).filter(|&i| plan.items[i].is_some()).collect();
                        Err(ctx.failure("renew", key, &t, &asked, t.yes(), false))
                    }
                };
                (valid_from, r)
            }
            Err(e) => (start, Err(e)),
        })
        .collect()
}

/// Releases on every server. `Ok(true)`: a majority deleted it;
/// `Ok(false)`: no majority held it (it was lost); else the error, and the
/// key may still be held until its validity ends.
pub(crate) async fn release(ctx: &Arc<Ctx>, key: &str, token: &str, timeout: Duration) -> Result<bool> {
    let (n, q) = (ctx.nodes.len(), ctx.quorum());
    let t = release_round(ctx, LockCmd::release(key, token)?, timeout, move |t| t.yes() >= q || t.no() > n - q).await;
    if t.yes() >= q {
        Ok(true)
    } else if t.no() > n - q || t.yes() + t.no() == n {
        // A majority refused, or all answered and no majority had it.
        Ok(false)
    } else {
        Err(ctx.failure("release", key, &t, &ctx.all, t.yes(), false))
    }
}

/// A release on all servers, decided by `enough` (or when all answered);
/// the others finish in the background.
async fn release_round(ctx: &Arc<Ctx>, cmd: LockCmd, timeout: Duration, enough: impl Fn(&Tally) -> bool) -> Tally {
    round(
        &ctx.nodes,
        &ctx.all,
        timeout,
        |_, node| {
            let cmd = cmd.clone();
            async move { node.step(&cmd).await }
        },
        |t| t.pending() == 0 || enough(t),
    )
    .await
}

/// Releases everywhere if an acquire is abandoned half-way (its future
/// dropped): a grant may have landed on some servers.
struct ReleaseGuard {
    ctx: Arc<Ctx>,
    release: Option<LockCmd>,
}

impl Drop for ReleaseGuard {
    fn drop(&mut self) {
        let Some(cmd) = self.release.take() else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let ctx = self.ctx.clone();
        let timeout = ctx.opts.node_timeout.unwrap_or(Duration::from_secs(1));
        rt.spawn(async move {
            release_round(&ctx, cmd, timeout, |_| false).await;
        });
    }
}
