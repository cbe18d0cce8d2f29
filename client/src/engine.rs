//! The renewal engine: one per client ([`LockClient`](crate::LockClient),
//! cluster or not, and [`QuorumClient`](crate::QuorumClient)), started with
//! its first watchdog lock. It owns every watchdog lock of that client in
//! one schedule, on the process's background runtime (`runtime.rs`), and
//! costs no thread, task or connection per lock:
//!
//! - **Renewals**: one task sleeps until the earliest renewal is due, then
//!   takes every renewal due within its early window (`watchdog::early`)
//!   and hands them to the client's [`Renewer`], which sends them as one
//!   pipeline per node (per slot owner in a cluster, per server in a
//!   quorum), at most `batch` commands each. Each lock's outcome is then
//!   applied by its schedule (`watchdog.rs`) exactly as a lone watchdog
//!   would: TTL/3 cadence, TTL/10 retry, `max_lifetime`, the loss signal.
//! - **Releases** of dropped async locks: queued (bounded) and sent by a
//!   second task the same way, so dropping many locks at once costs one
//!   round trip per batch, not one per lock.
//!
//! Locks that were released, dropped or lost are not removed at once: the
//! engine discards them when they come due (at most TTL/3 later).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use crate::adopt;
use crate::attach::SessionLease;
use crate::error::{Error, Result};
use crate::keepalive;
use crate::options::WatchdogOptions;
use crate::runtime;
use crate::session::{SessionCalls, Sessions};
use crate::state::{Shared, Status};
use crate::watchdog::{self, Outcome, Schedule};

/// Dropped locks whose release may wait in the queue; past it a drop
/// releases on its own (see [`Engine::queue_release`]).
const MAX_QUEUED_RELEASES: usize = 1 << 17;

/// The schedule's size below which released locks are never pruned from
/// it early (they leave when they come due).
const MIN_PRUNE: usize = 1024;

/// Pipelines one engine keeps in flight at once.
pub(crate) const MAX_IN_FLIGHT: usize = 16;

/// One renewal to send.
#[derive(Clone, Debug)]
pub(crate) struct Due {
    pub(crate) shared: Arc<Shared>,
    pub(crate) ttl: Duration,
    /// The lock's fence, for renewers that push it along (quorum floors).
    pub(crate) fence: Option<u64>,
}

/// A renewal's result: when the new validity counts from, and the outcome
/// (`Ok(true)` renewed, `Ok(false)` not the owner, else the error).
pub(crate) type Renewed = (Instant, Result<bool>);

/// How a kind of client sends many renewals and releases at once.
pub(crate) trait Renewer: SessionCalls {
    /// Renews every lock of `due`; answers in the same order.
    fn renew_all(self: Arc<Self>, due: Vec<Due>, batch: usize) -> BoxFuture<'static, Vec<Renewed>>;

    /// Releases every lock of `locks`, best effort.
    fn release_all(self: Arc<Self>, locks: Vec<Arc<Shared>>, batch: usize) -> BoxFuture<'static, ()>;
}

struct Entry {
    id: u64,
    shared: Arc<Shared>,
    schedule: Schedule,
    fence: Option<u64>,
}

#[derive(Default)]
struct State {
    /// Every watchdog lock, by when its next renewal is due (and a unique
    /// id, so equal instants do not collide).
    due: BTreeMap<(Instant, u64), Entry>,
    next_id: u64,
    releases: Vec<Arc<Shared>>,
    /// Keeps the client alive while its releases are queued: they must go
    /// out even when the last handle is dropped right after.
    release_owner: Option<Arc<dyn Renewer>>,
    closed: bool,
    /// `due`'s size at which the locks no longer held are pruned from it
    /// (a session's lock may come due only hours later).
    prune_at: usize,
}

/// Where a client keeps its engine: started by its first watchdog lock,
/// closed when the client goes.
#[derive(Default)]
pub(crate) struct EngineSlot(OnceLock<Option<Arc<Engine>>>);

impl EngineSlot {
    /// The engine, started on first use for `owner` (the client, which
    /// the engine holds weakly); `None` if the background runtime cannot
    /// start: then watchdog locks are not renewed, and report their loss
    /// when their TTL runs out.
    pub(crate) fn get(
        &self,
        owner: impl FnOnce() -> Arc<dyn Renewer>,
        batch: usize,
        checks: u32,
    ) -> Option<&Arc<Engine>> {
        self.0.get_or_init(|| Engine::start(Arc::downgrade(&owner()), batch, checks).ok()).as_ref()
    }
}

impl EngineSlot {
    /// The engine, if started.
    pub(crate) fn started(&self) -> Option<&Arc<Engine>> {
        self.0.get()?.as_ref()
    }
}

impl Drop for EngineSlot {
    fn drop(&mut self) {
        if let Some(Some(e)) = self.0.get() {
            e.close();
        }
    }
}

/// One client's renewal engine.
pub(crate) struct Engine {
    state: Mutex<State>,
    /// The client's sessions, and the locks they hold.
    sessions: Arc<Sessions>,
    renew_wake: Notify,
    release_wake: Notify,
    batch: usize,
    /// Session-held locks checked one by one per second, at most
    /// (`ClientOptions::session_checks`).
    checks: u32,
}

impl Engine {
    /// Starts the engine of `renewer` on the background runtime.
    pub(crate) fn start(renewer: Weak<dyn Renewer>, batch: usize, checks: u32) -> Result<Arc<Engine>> {
        let engine = Arc::new(Engine {
            state: Mutex::default(),
            sessions: Arc::default(),
            renew_wake: Notify::new(),
            release_wake: Notify::new(),
            batch: batch.max(1),
            checks,
        });
        runtime::spawn(renewals(engine.clone(), renewer.clone()))?;
        runtime::spawn(releases(engine.clone()))?;
        runtime::spawn(adopt::sweeps(engine.sessions.clone(), renewer.clone()))?;
        runtime::spawn(keepalive::keepalives(engine.sessions.clone(), renewer))?;
        Ok(engine)
    }

    /// The client's sessions.
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Keeps `shared` (just granted on `session`) alive with its session
    /// instead of renewing it on its own.
    pub(crate) fn attach(&self, session: &Arc<SessionLease>, shared: Arc<Shared>) {
        self.sessions.attach(session, shared);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a few assignments: a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts renewing `shared` (just acquired) on its schedule; a lock
    /// held by a session is checked instead, on a schedule stretched to
    /// the engine's checks a second (see [`Engine::check_spacing`]).
    pub(crate) fn add(&self, shared: Arc<Shared>, opts: &WatchdogOptions, fence: Option<u64>) {
        let now = Instant::now();
        let schedule = Schedule::new(opts, now);
        let mut at = schedule.first(shared.ttl());
        if shared.session().is_some() {
            let Some(spacing) = self.check_spacing() else { return };
            at = at.max(now + spacing);
        }
        if shared.lock().votes.as_ref().is_some_and(|v| v.unsure()) {
            // A quorum lock asks its late grants at once (`votes.rs`).
            at = now;
        }
        let mut st = self.lock();
        if st.due.len() >= st.prune_at.max(MIN_PRUNE) {
            // Amortized O(1) a lock: the schedule stays within twice the
            // locks held.
            st.due.retain(|_, e| e.shared.status() == Status::Held);
            st.prune_at = 2 * st.due.len();
        }
        let id = st.next_id;
        st.next_id += 1;
        let earliest = st.due.first_key_value().is_none_or(|((first, _), _)| at < *first);
        st.due.insert((at, id), Entry { id, shared, schedule, fence });
        drop(st);
        if earliest {
            // Stored as a permit if the task is not asleep yet.
            self.renew_wake.notify_one();
        }
    }

    /// How long a session-held lock waits between its checks, beyond its
    /// TTL/3: long enough that all of them together make at most
    /// `checks` a second. `None`: no checks.
    pub(crate) fn check_spacing(&self) -> Option<Duration> {
        (self.checks > 0).then(|| Duration::from_secs_f64(self.sessions.held() as f64 / f64::from(self.checks)))
    }

    /// Queues the release of a dropped lock. False when the queue is full
    /// (or the engine closed): the caller releases by itself.
    pub(crate) fn queue_release(&self, owner: Arc<dyn Renewer>, lock: Arc<Shared>) -> bool {
        let mut st = self.lock();
        if st.closed || st.releases.len() >= MAX_QUEUED_RELEASES {
            return false;
        }
        st.releases.push(lock);
        let first = st.release_owner.is_none();
        st.release_owner.get_or_insert(owner);
        drop(st);
        if first {
            self.release_wake.notify_one();
        }
        true
    }

    /// Stops both tasks (the client is gone); queued releases still go out.
    pub(crate) fn close(&self) {
        self.sessions.close();
        self.lock().closed = true;
        self.renew_wake.notify_one();
        self.release_wake.notify_one();
    }

    /// Takes the renewals to send now; else when to look again.
    fn take_due(&self, now: Instant) -> (Vec<Entry>, Option<Instant>) {
        let mut st = self.lock();
        let mut out = Vec::new();
        while let Some(((at, _), e)) = st.due.first_key_value() {
            if *at > now + watchdog::MAX_EARLY {
                break;
            }
            let ttl = e.shared.ttl();
            if *at > now + watchdog::early(ttl) {
                // Due soon, but too soon to send already: it may still share
                // a later round trip. Entries behind it wait too (at most
                // MAX_EARLY longer than their own window allows).
                break;
            }
            let Some((_, e)) = st.due.pop_first() else { break };
            out.push(e);
        }
        let next =
            st.due.first_key_value().map(|((at, _), e)| at.checked_sub(watchdog::early(e.shared.ttl())).unwrap_or(*at));
        (out, next)
    }

    /// Puts renewed locks back on the schedule.
    fn reschedule(&self, done: Vec<(Entry, Instant)>) {
        let mut st = self.lock();
        for (e, at) in done {
            st.due.insert((at, e.id), e);
        }
    }

    fn take_releases(&self) -> (Vec<Arc<Shared>>, Option<Arc<dyn Renewer>>, bool) {
        let mut st = self.lock();
        (std::mem::take(&mut st.releases), st.release_owner.take(), st.closed)
    }
}

/// Whether the lock is still the watchdog's to renew.
fn renewable(e: &Entry, now: Instant) -> bool {
    let g = e.shared.lock();
    let live = g.status == Status::Held && !g.stop;
    drop(g);
    if live && e.schedule.retired(now) {
        e.shared.retire();
        return false;
    }
    live
}

/// The renewal task.
async fn renewals(engine: Arc<Engine>, renewer: Weak<dyn Renewer>) {
    loop {
        let notified = engine.renew_wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if engine.lock().closed {
            return;
        }
        let now = Instant::now();
        let (taken, next) = engine.take_due(now);
        let live: Vec<Entry> = taken.into_iter().filter(|e| renewable(e, now)).collect();
        if live.is_empty() {
            runtime::idle(notified, next).await;
            continue;
        }
        let Some(r) = renewer.upgrade() else { return };
        let due = live
            .iter()
            .map(|e| Due { shared: e.shared.clone(), ttl: e.shared.ttl(), fence: e.fence })
            .collect::<Vec<_>>();
        let ttls: Vec<Duration> = due.iter().map(|d| d.ttl).collect();
        let results = r.renew_all(due, engine.batch).await;
        let now = Instant::now();
        let mut again = Vec::with_capacity(live.len());
        let mut results = results.into_iter();
        for (e, ttl) in live.into_iter().zip(ttls) {
            // A renewer that answered short: those count as failed attempts.
            let (sent, r) =
                results.next().unwrap_or_else(|| (now, Err(Error::InvalidArgument("no renewal answer".into()))));
            if let (Ok(false), Some(lease)) = (&r, e.shared.session()) {
                // Deleted, or its session ended: the keepalive tells first.
                engine.sessions.suspect(&lease, e.shared.clone());
                continue;
            }
            if let Outcome::Next(at) = e.schedule.after(&e.shared, sent, ttl, r, now) {
                // A session's lock: checked again no sooner than its share
                // of the engine's checks allows.
                let at = match e.shared.session().map(|_| engine.check_spacing()) {
                    Some(Some(spacing)) => at.max(now + spacing),
                    Some(None) => continue,
                    None => at,
                };
                again.push((e, at));
            }
        }
        engine.reschedule(again);
    }
}

/// The release task.
async fn releases(engine: Arc<Engine>) {
    loop {
        let notified = engine.release_wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (locks, owner, closed) = engine.take_releases();
        match owner {
            Some(owner) if !locks.is_empty() => owner.release_all(locks, engine.batch).await,
            _ if closed => return,
            _ => notified.await,
        }
    }
}

/// Runs `f` on `items` in chunks of `batch`, at most [`MAX_IN_FLIGHT`]
/// chunks at once, and concatenates the answers in order.
pub(crate) async fn in_chunks<T, R, F, Fut>(items: Vec<T>, batch: usize, f: F) -> Vec<R>
where
    F: Fn(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = Vec<R>>,
{
    use futures_util::stream::{self, StreamExt};
    let n = items.len();
    let mut chunks = Vec::with_capacity(n.div_ceil(batch.max(1)));
    let mut it = items.into_iter().peekable();
    while it.peek().is_some() {
        chunks.push(it.by_ref().take(batch.max(1)).collect::<Vec<T>>());
    }
    let answers: Vec<Vec<R>> = stream::iter(chunks).map(f).buffered(MAX_IN_FLIGHT).collect().await;
    let mut out = Vec::with_capacity(n);
    for a in answers {
        out.extend(a);
    }
    out
}

/// `n` copies of a failure that hit a whole pipeline.
pub(crate) fn failed_all<T>(e: &Error, n: usize) -> Vec<Result<T>> {
    (0..n).map(|_| Err(copy_error(e))).collect()
}

/// The watchdog only tells failures from answers; the copy keeps the
/// message and whether it was a timeout.
fn copy_error(e: &Error) -> Error {
    let kind = match e {
        Error::Redis(r) if r.is_timeout() => std::io::ErrorKind::TimedOut,
        _ => std::io::ErrorKind::Other,
    };
    Error::Redis(std::io::Error::new(kind, e.to_string()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn chunks_keep_order_and_size() {
        let sizes = std::sync::Mutex::new(Vec::new());
        let out = in_chunks((0..250).collect(), 100, |c: Vec<i32>| {
            sizes.lock().unwrap().push(c.len());
            async move { c.into_iter().map(|x| x * 2).collect::<Vec<_>>() }
        })
        .await;
        assert_eq!(out, (0..250).map(|x| x * 2).collect::<Vec<_>>());
        assert_eq!(*sizes.lock().unwrap(), vec![100, 100, 50]);
    }

    #[test]
    fn due_renewals_are_taken_with_their_early_window() {
        let e = Engine {
            state: Mutex::default(),
            sessions: Arc::default(),
            renew_wake: Notify::new(),
            release_wake: Notify::new(),
            batch: 100,
            checks: 0,
        };
        let now = Instant::now();
        let ttl = Duration::from_millis(3000); // early window: 100 ms
        let add = |at: Instant| {
            let mut st = e.lock();
            let id = st.next_id;
            st.next_id += 1;
            let shared = Arc::new(Shared::new("k".into(), "t".into(), crate::cmd::LockKind::Exclusive, now, ttl));
            st.due.insert(
                (at, id),
                Entry { id, shared, schedule: Schedule::new(&WatchdogOptions::new(), now), fence: None },
            );
        };
        add(now);
        add(now + Duration::from_millis(50));
        add(now + Duration::from_millis(500));
        let (taken, next) = e.take_due(now);
        assert_eq!(taken.len(), 2, "due now, and due within the window");
        assert_eq!(next, Some(now + Duration::from_millis(400)), "wakes at the next one's window");
    }
}
