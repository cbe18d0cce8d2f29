//! The shared state of one lock: held, released or lost, and until when it
//! is surely valid. The handle, its watchdog and every [`LostSignal`] read
//! the same state, so a loss is seen by all of them at once.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::attach::SessionLease;
use crate::cmd::LockKind;
use crate::revocation::Revocation;
use crate::trace;
use crate::votes::Votes;

pub use crate::loss::LossReason;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    Released,
    Lost(LossReason),
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) status: Status,
    /// The earliest moment the key may expire on the server: when the last
    /// successful acquire or renew was *sent*, plus its TTL. Past it we can
    /// no longer claim the lock.
    pub(crate) valid_until: Instant,
    /// The TTL of the last acquire or renew, which the watchdog reuses.
    pub(crate) ttl: Duration,
    /// The watchdog stopped at its maximum lifetime.
    pub(crate) retired: bool,
    /// The server's hold limit, as this process can tell it: when the
    /// granting command was sent, plus `MAXHOLD` (the server counts from
    /// the grant, never earlier). No validity goes past it.
    pub(crate) hold_until: Option<Instant>,
    /// A renewal was cut short by the hold limit: `valid_until` is the
    /// limit's, and its end is a [`LossReason::MaxHold`].
    pub(crate) capped: bool,
    /// The module said an eviction took the key (`LOCK.EVICTED`): a loss
    /// found by a renewal or release is then a [`LossReason::Evicted`].
    evicted: bool,
    /// The hold was revoked: its deadline caps the validity
    /// (`hold_until`); `revoke_told`: the signal fired (with the reason).
    pub(crate) revoked: Option<Revocation>,
    pub(crate) revoke_told: bool,
    /// Release or drop asked the watchdog to stop (the engine drops the
    /// lock from its schedule when it next comes due).
    pub(crate) stop: bool,
    /// Threads asleep on `cond`: a notify with none is a wasted futex call
    /// on every release.
    sleepers: usize,
    /// The hold's `trace::HELD` span, while held and traced (boxed: a
    /// pointer per lock when tracing is off).
    held: Option<Box<Held>>,
    /// The session that holds it, if any: its validity is the session's
    /// (capped by `hold_until`), and its end is the lock's.
    pub(crate) session: Option<Arc<SessionLease>>,
    /// A quorum lock's votes, when sessions hold some of them: its
    /// validity and loss are theirs (`votes.rs`).
    pub(crate) votes: Option<Box<Votes>>,
}

/// A traced hold: its span and when it began.
#[derive(Debug)]
struct Held {
    span: tracing::Span,
    since: Instant,
}

impl Inner {
    /// Until when the lock is surely held: its own validity, or for a
    /// session's lock the session's, never past a hold limit or a
    /// revocation's deadline.
    pub(crate) fn until(&self) -> Instant {
        if let Some(v) = &self.votes {
            // Fewer votes than a quorum: lost now (see `lost_at`).
            return v.until().unwrap_or(self.valid_until.min(Instant::now()));
        }
        match &self.session {
            Some(s) => {
                let end = s.valid_until();
                self.hold_until.map_or(end, |h| h.min(end))
            }
            None => self.valid_until,
        }
    }

    /// Why a held lock is lost at `now`, if it is.
    fn lost_at(&self, now: Instant) -> Option<LossReason> {
        if let Some(how) = self.session.as_ref().and_then(|s| s.end_reason()) {
            return Some(how);
        }
        if let Some(r) = self.votes.as_ref().and_then(|v| v.lost()) {
            return Some(r);
        }
        if now < self.until() {
            return None;
        }
        // A session's lock is capped when its limit came before the
        // session's validity did.
        let capped =
            self.capped || self.session.as_ref().is_some_and(|s| self.hold_until.is_some_and(|h| h <= s.valid_until()));
        Some(if self.revoked.is_some() {
            LossReason::Revoked
        } else if capped {
            LossReason::MaxHold
        } else if self.retired {
            LossReason::MaxLifetime
        } else {
            LossReason::Expired
        })
    }

    /// Ends the hold's span and reports a loss, on the status's first
    /// change from `Held` (`how`: `released` or `dropped` when not lost).
    fn ended(&mut self, key: &str, how: &'static str) {
        if let Some(s) = &self.session {
            s.let_go();
        }
        if let Some(v) = &self.votes {
            v.hold_all(false);
        }
        let held = self.held.take();
        if let Some(h) = &held {
            h.span.record(trace::HELD_MS, trace::ms(h.since.elapsed()));
        }
        let Status::Lost(reason) = self.status else {
            if let Some(h) = held {
                h.span.record(trace::ENDED, how);
            }
            return;
        };
        let reason = reason.trace_name();
        if let Some(h) = &held {
            h.span.record(trace::ENDED, "lost");
            h.span.record(trace::REASON, reason);
        }
        // Also without a span: a filter at WARN keeps losses and nothing else.
        tracing::warn!(
            name: trace::LOST,
            target: trace::TARGET,
            parent: held.as_ref().and_then(|h| h.span.id()),
            { { trace::KEY } = key, { trace::REASON } = reason },
            "{}",
            trace::LOST
        );
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) key: String,
    pub(crate) token: String,
    /// Which commands renew and release it.
    pub(crate) kind: LockKind,
    inner: Mutex<Inner>,
    /// Wakes blocking waiters.
    cond: Condvar,
    /// Wakes async waiters.
    pub(crate) notify: Notify,
}

impl Shared {
    pub(crate) fn new(key: String, token: String, kind: LockKind, sent_at: Instant, ttl: Duration) -> Self {
        Shared {
            key,
            token,
            kind,
            inner: Mutex::new(Inner {
                status: Status::Held,
                valid_until: sent_at + ttl,
                ttl,
                retired: false,
                hold_until: None,
                capped: false,
                evicted: false,
                revoked: None,
                revoke_told: false,
                stop: false,
                sleepers: 0,
                held: None,
                session: None,
                votes: None,
            }),
            cond: Condvar::new(),
            notify: Notify::new(),
        }
    }

    /// The same lock, held by `session` (see [`Inner::until`]).
    pub(crate) fn with_session(mut self, session: Arc<SessionLease>) -> Self {
        let g = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        if g.session.is_none() && g.status == Status::Held {
            // Counted down by `Inner::ended`, on the first change from held.
            session.hold();
            g.session = Some(session);
        }
        self
    }

    /// The session that holds it, if any.
    pub(crate) fn session(&self) -> Option<Arc<SessionLease>> {
        self.lock().session.clone()
    }

    /// The state, with expiry applied: a held lock past its validity is lost.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding this mutex leaves consistent data
        // (every update is a single assignment), so poisoning is ignored.
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.status == Status::Held {
            if let Some(reason) = g.lost_at(Instant::now()) {
                g.status = Status::Lost(reason);
                g.ended(&self.key, "");
                self.wake(&g);
            }
        }
        g
    }

    /// Called with the state locked, so no sleeper can be between its
    /// check and its wait.
    pub(crate) fn wake(&self, g: &Inner) {
        if g.sleepers > 0 {
            self.cond.notify_all();
        }
        self.notify.notify_waiters();
    }

    /// Sleeps on `cond` until notified or `until`, then relocks.
    pub(crate) fn sleep<'a>(&'a self, mut g: MutexGuard<'a, Inner>, until: Instant) -> MutexGuard<'a, Inner> {
        g.sleepers += 1;
        let timeout = until.saturating_duration_since(Instant::now());
        let (mut g, _) = self.cond.wait_timeout(g, timeout).unwrap_or_else(|p| p.into_inner());
        g.sleepers -= 1;
        drop(g);
        self.lock()
    }

    pub(crate) fn status(&self) -> Status {
        self.lock().status
    }

    /// A successful renewal sent at `sent_at`: extends validity if still
    /// held, never past the hold limit.
    pub(crate) fn renewed(&self, sent_at: Instant, ttl: Duration) -> bool {
        let mut g = self.lock();
        if g.status != Status::Held {
            return false;
        }
        let end = sent_at + ttl;
        match g.hold_until {
            Some(limit) if end >= limit => {
                g.valid_until = limit;
                g.capped = true;
            }
            // Capped by the server at a limit this process cannot place
            // (it knows none): the lease may end any moment after the
            // last validity, which is therefore not extended.
            None if g.capped => {}
            _ => g.valid_until = end,
        }
        g.ttl = ttl;
        true
    }

    /// The grant was made no earlier than `asked` with a hold limit of
    /// `max_hold`: no validity goes past `asked + max_hold`.
    pub(crate) fn limit_hold(&self, asked: Instant, max_hold: Duration) {
        let mut g = self.lock();
        let limit = asked + max_hold;
        g.hold_until = Some(limit);
        if g.valid_until >= limit {
            g.valid_until = limit;
            g.capped = true;
        }
    }

    /// A renewal answered that the hold limit cut it short (`LOCK.RENEW`
    /// replied 2): its end is then a [`LossReason::MaxHold`].
    pub(crate) fn mark_capped(&self) {
        self.lock().capped = true;
    }

    /// A renewal heard the hold is revoked until `deadline`: no validity
    /// goes past it. Whether this is the first it heard (then the caller
    /// reads the reason and calls [`Shared::tell_revoked`]). Not a quorum
    /// lock's vote: one server does not revoke it (docs/revocation.md).
    pub(crate) fn mark_revoked(&self, deadline: Instant) -> bool {
        let mut g = self.lock();
        if g.votes.is_some() {
            return false;
        }
        let first = g.revoked.is_none();
        let reason = g.revoked.take().and_then(|r| r.reason);
        let deadline = g.hold_until.map_or(deadline, |h| h.min(deadline));
        g.hold_until = Some(deadline);
        g.valid_until = g.valid_until.min(deadline);
        g.revoked = Some(Revocation { deadline, reason });
        first
    }

    /// Fires the revoked signal, with the revoke's reason if known.
    pub(crate) fn tell_revoked(&self, reason: Option<String>) {
        let mut g = self.lock();
        if let Some(r) = g.revoked.as_mut() {
            r.reason = reason;
            g.revoke_told = true;
            self.wake(&g);
        }
    }

    /// Why the lock was lost, if it was.
    pub(crate) fn loss_reason(&self) -> Option<LossReason> {
        match self.status() {
            Status::Lost(r) => Some(r),
            _ => None,
        }
    }

    /// Refuses to renew a lock that is released or lost: it stays so.
    pub(crate) fn check_renewable(&self) -> crate::Result<()> {
        match self.status() {
            Status::Held => Ok(()),
            Status::Released | Status::Lost(_) => Err(crate::Error::NotHeld { key: self.key.clone() }),
        }
    }

    /// Applies a renewal's outcome: `true` (it took effect, counted from
    /// `valid_from`) extends the validity; `false` (not the owner) loses the
    /// lock.
    pub(crate) fn after_renew(&self, valid_from: Instant, ttl: Duration, r: crate::Result<bool>) -> crate::Result<()> {
        match r? {
            true if self.renewed(valid_from, ttl) => Ok(()),
            // Released by another thread meanwhile: the renewal was void.
            true => Err(crate::Error::NotHeld { key: self.key.clone() }),
            false => {
                self.mark_lost(LossReason::NotOwner);
                Err(crate::Error::NotHeld { key: self.key.clone() })
            }
        }
    }

    /// The server's module told that an eviction took this hold.
    pub(crate) fn mark_evicted(&self) {
        self.lock().evicted = true;
    }

    /// Ends the hold as `reason`; a quorum lock's session's end is one
    /// server's vote only, which its state (read here) counts.
    pub(crate) fn mark_lost(&self, reason: LossReason) {
        let mut g = self.lock();
        if g.votes.is_some() && reason.is_session_end() {
            return;
        }
        let reason = if reason == LossReason::NotOwner && g.evicted { LossReason::Evicted } else { reason };
        if g.status == Status::Held {
            g.status = Status::Lost(reason);
            g.ended(&self.key, "");
            self.wake(&g);
        }
    }

    pub(crate) fn mark_released(&self) {
        self.mark_released_as("released");
    }

    /// Released because the handle was dropped (for the trace).
    pub(crate) fn mark_dropped(&self) {
        self.mark_released_as("dropped");
    }

    fn mark_released_as(&self, how: &'static str) {
        let mut g = self.lock();
        if g.status != Status::Released {
            let was_held = g.status == Status::Held;
            g.status = Status::Released;
            if was_held {
                g.ended(&self.key, how);
            }
            self.wake(&g);
        }
    }

    /// Opens the hold's `trace::HELD` span (if a subscriber wants it):
    /// the caller's span is its parent, and it follows from the acquire's.
    /// `kind`: `trace::KIND` (the lock's, or an election's).
    pub(crate) fn trace_held(
        &self,
        acquire: &tracing::Span,
        kind: &str,
        fence: Option<u64>,
        server: impl FnOnce() -> String,
    ) {
        let span = tracing::info_span!(
            target: trace::TARGET,
            trace::HELD,
            { trace::KEY } = self.key.as_str(),
            { trace::KIND } = kind,
            { trace::FENCE } = fence,
            { trace::SERVER } = tracing::field::Empty,
            { trace::HELD_MS } = tracing::field::Empty,
            { trace::ENDED } = tracing::field::Empty,
            { trace::REASON } = tracing::field::Empty,
        );
        if span.is_disabled() {
            return;
        }
        span.follows_from(acquire);
        span.record(trace::SERVER, server());
        let mut g = self.lock();
        g.held = Some(Box::new(Held { span, since: Instant::now() }));
        if g.status != Status::Held {
            // Ended before it could be traced (a loss is reported anyway).
            let how = if g.status == Status::Released { "released" } else { "" };
            if let Some(h) = g.held.take() {
                h.span.record(trace::HELD_MS, 0u64);
                h.span.record(trace::ENDED, if how.is_empty() { "lost" } else { how });
            }
        }
    }

    pub(crate) fn stop_watchdog(&self) {
        let mut g = self.lock();
        if !g.stop {
            g.stop = true;
            self.wake(&g);
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.lock().ttl
    }

    pub(crate) fn retire(&self) {
        self.lock().retired = true;
    }

    /// Blocks until the lock is no longer held or `deadline` passes; returns
    /// the status then. Wakes at the validity end to apply expiry.
    pub(crate) fn wait_until(&self, deadline: Option<Instant>) -> Status {
        let mut g = self.lock();
        loop {
            if g.status != Status::Held {
                return g.status;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return g.status;
            }
            let wake = deadline.map_or(g.until(), |d| d.min(g.until()));
            g = self.sleep(g, wake);
        }
    }

    /// The async twin of [`Shared::wait_until`] without a deadline.
    pub(crate) async fn wait_async(&self) -> Status {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so a wake in between is not missed.
            notified.as_mut().enable();
            let valid_until = {
                let g = self.lock();
                if g.status != Status::Held {
                    return g.status;
                }
                g.until()
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(valid_until.into()) => {}
            }
        }
    }
}
