//! The opt-in background renewal of one lock: a thread for locks taken with
//! the sync API, a tokio task for the async API, one schedule for both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::cmd::LockCmd;
use crate::error::Error;
use crate::options::WatchdogOptions;
use crate::state::{LossReason, Shared};

/// Renew every TTL/3: a live holder's remaining TTL then never falls below
/// 2·TTL/3, which is what the takeover rule's TTL/2 staleness test assumes.
fn interval(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(1))
}

/// After a failed renewal, try again sooner than the cadence: the lock has
/// at most 2·TTL/3 left and every attempt counts.
fn retry_interval(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(1))
}

/// What a renewal's outcome means for the schedule.
enum Outcome {
    /// Renewed: next one at this instant.
    Next(Instant),
    /// Stop renewing.
    Stop,
}

struct Schedule {
    started: Instant,
    max_lifetime: Option<Duration>,
}

impl Schedule {
    fn new(opts: &WatchdogOptions) -> Self {
        Schedule { started: Instant::now(), max_lifetime: opts.max_lifetime }
    }

    /// Past its maximum lifetime the watchdog retires: the lock runs out its
    /// current TTL and the state reports `MaxLifetime`.
    fn retired(&self, shared: &Shared) -> bool {
        if self.max_lifetime.is_some_and(|m| self.started.elapsed() >= m) {
            shared.retire();
            return true;
        }
        false
    }

    fn after(&self, shared: &Shared, sent: Instant, ttl: Duration, r: Result<bool, Error>) -> Outcome {
        match r {
            Ok(true) if shared.renewed(sent, ttl) => Outcome::Next(sent + interval(ttl)),
            // Released meanwhile.
            Ok(true) => Outcome::Stop,
            Ok(false) => {
                shared.mark_lost(LossReason::NotOwner);
                Outcome::Stop
            }
            // Connection trouble: keep trying; once the validity has passed
            // the state turns Lost(Expired) by itself and the wait ends.
            Err(_) => Outcome::Next(Instant::now() + retry_interval(ttl)),
        }
    }
}

pub(crate) fn spawn_sync(shared: Arc<Shared>, client: LockClient, opts: &WatchdogOptions) {
    let schedule = Schedule::new(opts);
    let mut next = schedule.started + interval(shared.ttl());
    let spawned = std::thread::Builder::new().name(format!("redis-lock watchdog {}", shared.key)).spawn(move || {
        while shared.watchdog_wait(next) {
            if schedule.retired(&shared) {
                return;
            }
            let ttl = shared.ttl();
            let sent = Instant::now();
            let r = LockCmd::renew(&shared.key, &shared.token, ttl).and_then(|c| client.inner.run(&c));
            match schedule.after(&shared, sent, ttl, r) {
                Outcome::Next(at) => next = at,
                Outcome::Stop => return,
            }
        }
    });
    // Without a thread there are no renewals; the state still turns
    // Lost(Expired) at the end of the TTL, so the loss is not silent.
    drop(spawned);
}

pub(crate) fn spawn_async(shared: Arc<Shared>, client: LockClient, opts: &WatchdogOptions, rt: &tokio::runtime::Handle) -> tokio::task::JoinHandle<()> {
    spawn_async_with(shared, opts, rt, move |shared, ttl| {
        let client = client.clone();
        async move {
            let sent = Instant::now();
            let r = match LockCmd::renew(&shared.key, &shared.token, ttl) {
                Ok(c) => client.inner.run_async(&c).await,
                Err(e) => Err(e),
            };
            (sent, r)
        }
    })
}

/// The async watchdog with the renewal given by the caller (the quorum
/// lock renews on several servers): `renew(shared, ttl)` answers when the
/// renewal's validity starts (the `sent` of a single-server renewal) and
/// its outcome, read as for a single server.
pub(crate) fn spawn_async_with<F, Fut>(shared: Arc<Shared>, opts: &WatchdogOptions, rt: &tokio::runtime::Handle, renew: F) -> tokio::task::JoinHandle<()>
where
    F: Fn(Arc<Shared>, Duration) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (Instant, Result<bool, Error>)> + Send + 'static,
{
    let schedule = Schedule::new(opts);
    rt.spawn(async move {
        let mut next = schedule.started + interval(shared.ttl());
        while shared.watchdog_wait_async(next).await {
            if schedule.retired(&shared) {
                return;
            }
            let ttl = shared.ttl();
            let (sent, r) = renew(shared.clone(), ttl).await;
            match schedule.after(&shared, sent, ttl, r) {
                Outcome::Next(at) => next = at,
                Outcome::Stop => return,
            }
        }
    })
}
