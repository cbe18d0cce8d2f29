//! Distributed locks on Redis for the `lock` module's native commands
//! (`LOCK.ACQUIRE`, `LOCK.RENEW`, `LOCK.RELEASE`, `LOCK.TAKEOVER`), falling
//! back to the reference Lua scripts on servers without the module.
//!
//! - [`LockClient`] hands out locks: [`try_acquire`](LockClient::try_acquire),
//!   [`acquire`](LockClient::acquire) (waits in the server's FIFO queue with
//!   the module's `WAIT`, else with jittered backoff) and
//!   [`takeover`](LockClient::takeover), each with an `_async` twin (tokio)
//!   and a `_with` variant taking [`LockOptions`].
//!   [`info`](LockClient::info) tells who holds a key ([`LockInfo`]).
//! - With the module every grant carries a fencing token,
//!   [`Lock::fence`], strictly increasing per key (`None` without it).
//! - [`Lock::guard`] runs a command of yours only while the lock is held,
//!   decided by the server in the same step (`LOCK.GUARD`, module only),
//!   and returns its reply: a holder paused past its TTL cannot overwrite
//!   its successor's data on that server.
//! - A [`Lock`] renews, releases (idempotent), is released on drop, and can
//!   be kept alive by a watchdog ([`WatchdogOptions`]) that renews every TTL/3.
//!   All the watchdogs of a client are one renewal engine: one task on the
//!   process's one background thread, sending the renewals due together as
//!   one pipeline per node ([`ClientOptions::watchdog_batch`]), so holding
//!   100,000 locks costs no thread, task or connection per lock.
//! - A lost lock is never silent: [`Lock::is_held`], [`Lock::lost`] (a
//!   future) and [`LostSignal`] (blocking or async) report it with a
//!   [`LossReason`].
//! - Every failure is one [`Error`]: `NotAcquired`, `NotHeld`, `Redis`,
//!   `InvalidArgument`, `Unsupported` (no module for a command without a
//!   script fallback), and `NoQuorum` for quorum locks.
//! - [`QuorumClient`] holds a lock on a majority of N independent servers
//!   ([`QuorumLock`], the same methods as [`Lock`] but `guard`: no one
//!   server's copy of the lock is the majority's verdict), with fences that
//!   never go backwards whatever the servers' clocks.
//!   [`Lock`] and [`QuorumLock`] both implement [`HeldLock`], for code
//!   that holds either (`Box<dyn HeldLock>`).
//! - Semaphores and read-write locks (module only, `SEM.*`,
//!   `RWLOCK.*`): [`LockClient::semaphore`] and [`LockClient::rw_lock`]
//!   name one ([`NamedLock`], [`RwLock`]), whose `try_acquire`/`acquire`
//!   (with `_with` and `_async` variants) hand out the same [`Lock`], of
//!   another [`LockKind`]: renewals, release on drop, the watchdog through
//!   the same engine, the loss signal and a fence per grant work as for the
//!   exclusive lock; `info` gives [`HoldersInfo`]. Without the module they
//!   fail with [`Error::Unsupported`]; there is no script fallback (the
//!   scripts are the exclusive lock's reference, and a Lua semaphore would
//!   share neither the server's queue nor its fences) and no quorum variant
//!   (permits counted on a majority do not bound the holders). See
//!   docs/semaphores.md.
//!
//! The backend is detected once per connection: the first `LOCK.*` command
//! either works or fails with "unknown command", after which that connection
//! uses `SET key token NX PX ttl` for acquire and the reference scripts (by
//! `EVALSHA`, loaded on `NOSCRIPT`) for renew, release and takeover. Both
//! behave the same, except that only the module issues fences and queues
//! waiters; [`LockClient::backend`] tells which one is in use. Whether the
//! module supports `WAIT` is detected the same way, from its first refusal.
//!
//! # Sync
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{Error, LockClient, LockOptions, WatchdogOptions};
//!
//! fn main() -> Result<(), Error> {
//!     let client = LockClient::open("redis://127.0.0.1:6379/")?;
//!
//!     // Fails at once with Error::NotAcquired if someone else holds it.
//!     let lock = client.try_acquire("jobs:nightly", Duration::from_secs(30))?;
//!     // With the module: pass it along with each write the lock guards.
//!     let _fence: Option<u64> = lock.fence();
//!     // Or, for data on the same server: written only while held.
//!     match lock.guard(redis::cmd("SET").arg("jobs:nightly:result").arg("done")) {
//!         Ok(_reply) => {}
//!         Err(Error::NotHeld { .. }) => return Ok(()), // lost: nothing was written
//!         Err(e) => return Err(e),
//!     }
//!     lock.renew(Duration::from_secs(30))?;
//!     lock.release()?;
//!
//!     // Waits up to 5 s; a watchdog keeps it alive until it is dropped.
//!     let opts = LockOptions::new().watchdog(WatchdogOptions::new().max_lifetime(Duration::from_secs(3600)));
//!     let lock = client.acquire_with("jobs:nightly", Duration::from_secs(30), Duration::from_secs(5), &opts)?;
//!     let lost = lock.lost_signal();
//!     for step in 0..10 {
//!         if let Some(reason) = lost.reason() {
//!             eprintln!("lock lost at step {step}: {reason}");
//!             break;
//!         }
//!         // ... one step of the guarded work ...
//!     }
//!     Ok(()) // dropping `lock` releases it
//! }
//! ```
//!
//! # Async
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{Error, LockClient, LockOptions, WatchdogOptions};
//!
//! async fn guarded_work() {}
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let client = LockClient::open("redis://127.0.0.1:6379/")?;
//!     let opts = LockOptions::new().watchdog(WatchdogOptions::new());
//!     let lock = client.try_acquire_with_async("jobs:nightly", Duration::from_secs(30), &opts).await?;
//!     tokio::select! {
//!         _ = guarded_work() => lock.release_async().await?,
//!         reason = lock.lost() => eprintln!("lost the lock: {reason:?}"),
//!     }
//!     // Same-run takeover: a restarted instance of run "deploy-42" takes the
//!     // lock back from its predecessor.
//!     let _lock = client.takeover_async("jobs:producer", "deploy-42", Duration::from_secs(30)).await?;
//!     Ok(()) // dropping an async lock spawns its release; it never blocks
//! }
//! ```
//!
//! # Redis Cluster
//!
//! [`LockClient::open_cluster`] (or a `redis+cluster://h1:p1,h2:p2/` URL
//! to [`LockClient::open`]) gives the same API on a Redis Cluster, through
//! redis-rs's own cluster clients: commands are routed by the key's slot
//! and follow `MOVED`/`ASK`. A blocking `acquire` waits on a dedicated
//! connection to the slot's owner and is re-issued with the remaining wait
//! on `MOVED`, `ASK` (after `ASKING`), `TRYAGAIN`, `CLUSTERDOWN`, `UNBLOCKED`
//! or a dropped node. A topology change that redis-rs's own retries do not
//! absorb (a master killed, its replica not yet promoted) is retried with a
//! fresh slot map and a growing pause: until the wait ends for an
//! `acquire`, a few times for anything else; an acquire whose reply was
//! lost is released before it is tried again. The backend is detected per slot's node; a node found
//! without the module is asked again after [`SCRIPTS_RECHECK`]. Fences come
//! from each key's node, led by its configEpoch, so a key's fences keep
//! increasing across slot moves and failovers (see docs/cluster.md).
//!
//! # Elections
//!
//! [`LockClient::election`] gives an [`Election`]: [`campaign`](Election::campaign)
//! waits in the server's queue and returns a [`Leadership`] with a term
//! (its grant's fence, greater than every earlier leader's), renewed and
//! lost like a [`Lock`]; [`proclaim`](Leadership::proclaim) changes its
//! value, [`resign`](Leadership::resign) hands over. Anyone can read the
//! [`leader`](Election::leader) and follow it with
//! [`observe`](Election::observe), a `Stream` of changes that never misses
//! the latest one and reconnects by itself ([`LeaderStream`]; blocking:
//! [`Election::observe_blocking`]). Module only, one server or a cluster.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{LockClient, LockOptions, WatchdogOptions};
//!
//! fn main() -> Result<(), redis_lock_client::Error> {
//!     let client = LockClient::open("redis://127.0.0.1:6379/")?;
//!     let opts = LockOptions::new().watchdog(WatchdogOptions::new()).lock_delay(Duration::from_secs(5));
//!     let lead = client.election("service:primary").campaign_with(
//!         "10.0.0.7:8080",
//!         Duration::from_secs(10),
//!         Duration::from_secs(60),
//!         &opts,
//!     )?;
//!     println!("leading with term {}", lead.term());
//!     for state in client.election("service:primary").observe_blocking()?.take(2) {
//!         println!("{:?}", state?);
//!     }
//!     lead.resign()
//! }
//! ```
//!
//! # Layers
//!
//! From the bottom: errors and options (`error`, `failure`, `options`);
//! pure decisions taking `now` (`cmd` builds commands and reads replies,
//! `watchdog` the renewal schedule, `retry` backoff, failure kinds and
//! retries, `state` the lock state, `quorum::round`'s tally, `info`
//! parsing, leaders' replies included); the background `runtime` and the renewal `engine`; the
//! transport (`send`: each operation's steps, driven on a sync or an async
//! connection; `transport`: the seam, with one server in `single`, a
//! cluster in `cluster`, waits' shared rules in `wait`); the modes over it
//! (`holding`, the lifecycle every held lock shares, `lock`, `replicas`,
//! `quorum`, `observe`: the leader stream over a transport's observer
//! connection); the facade (`client`, the named semaphore and read-write
//! lock handles in `named`, elections in `election`, this file). No module imports one above it
//! (`tests/layers.rs` checks there is no cycle). Every operation is
//! implemented once, async; the sync API drives the same future to
//! completion on the calling thread.
//!
//! # Timing
//!
//! A lock is held, as far as this process knows, until the TTL of its last
//! successful acquire or renewal has run out, counted from when that command
//! was *sent* (the earliest the server could have started the TTL). A
//! renewal that answers 0 ends it at once. Commands fail after the response
//! timeout ([`ClientOptions::response_timeout`]), so a dead server surfaces
//! as [`Error::Redis`], never as a hang; a blocking `acquire` allows its
//! wait plus that timeout. A grant that came after a long wait in the
//! server's queue is confirmed by a renewal, so its validity is not counted
//! from the start of the wait.

mod adopt;
mod attach;
mod client;
mod cluster;
mod cmd;
mod election;
mod engine;
mod error;
mod failure;
mod holding;
mod info;
mod keepalive;
mod lock;
mod loss;
mod multi;
mod named;
mod observe;
mod options;
mod quorum;
mod replicas;
mod retry;
mod revocation;
mod runtime;
mod send;
mod session;
mod single;
mod state;
pub mod trace;
mod transport;
mod votes;
mod wait;
mod watchdog;

pub use client::LockClient;
pub use cluster::{cluster_seed_urls, is_cluster_url, SCRIPTS_RECHECK};
pub use cmd::{Backend, LockKind};
pub use election::{Election, Leadership};
pub use error::{Error, Result};

pub use holding::{HeldLock, LostSignal};
pub use info::{Holder, HoldersInfo, Leader, LockFormat, LockInfo};
pub use lock::Lock;
pub use named::{NamedLock, RwLock};
pub use observe::{LeaderIter, LeaderStream, OBSERVE_WAIT};
pub use options::{ClientOptions, LockOptions, WatchdogOptions};
pub use quorum::{QuorumClient, QuorumFailure, QuorumLock, QuorumOptions};
pub use revocation::{Revocation, RevokeOptions, RevokeOutcome, RevokeReply};
pub use state::LossReason;

/// Compiles the README's examples as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Compiles the examples of the project's docs pages as doctests.
#[cfg(doctest)]
mod docs_doctests {
    #[doc = include_str!("../../docs/cluster.md")]
    struct Cluster;
    #[doc = include_str!("../../docs/guarded-writes.md")]
    struct GuardedWrites;
    #[doc = include_str!("../../docs/quorum.md")]
    struct Quorum;
    #[doc = include_str!("../../docs/semaphores.md")]
    struct Semaphores;
}
