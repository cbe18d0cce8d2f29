//! Named handles for the kinds beyond the exclusive lock: a semaphore
//! ([`LockClient::semaphore`]) and the two sides of a read-write lock
//! ([`LockClient::rw_lock`]). A handle is a key and a [`LockKind`], cheap
//! to make and to clone; its methods are thin calls into the client's one
//! acquire, which every kind shares with the exclusive lock, and hand out
//! the same [`Lock`]: renewals, release on drop, the watchdog through the
//! client's renewal engine, the loss signal and the fence work as they do
//! for the exclusive lock.
//!
//! Module only (`SEM.*`, `RWLOCK.*`): a server without it answers
//! [`Error::Unsupported`](crate::Error::Unsupported). There is no script
//! fallback because the scripts are the reference of the exclusive lock
//! alone: a Lua semaphore would not share the module's FIFO queue or its
//! fences, so services mixing the two would break each other's
//! guarantees. There is no quorum variant either: permits counted on a
//! majority of N servers do not bound the holders (each server counts only
//! its own: with 3 servers of limit 2, holders granted on servers {1,2},
//! {2,3} and {1,3} all hold a majority, three holders of two permits), and
//! the server's queue cannot span servers.

use std::time::Duration;

use crate::client::{check_key, LockClient};
use crate::cmd::LockKind;
use crate::error::Result;
use crate::info::HoldersInfo;
use crate::lock::Lock;
use crate::options::LockOptions;
use crate::runtime;
use crate::transport::Api;

/// A semaphore, or one side of a read-write lock, by name: acquire it for
/// a [`Lock`]. From [`LockClient::semaphore`], [`RwLock::read`] and
/// [`RwLock::write`].
///
/// The methods are those of [`LockClient`]'s exclusive lock, for this key
/// and kind: `try_acquire` fails at once with
/// [`Error::NotAcquired`](crate::Error::NotAcquired) when no place is free
/// (or others wait: a newcomer never passes them); `acquire` waits in the
/// server's FIFO queue, shared with every other acquirer of the key.
#[derive(Clone, Debug)]
pub struct NamedLock {
    client: LockClient,
    key: String,
    kind: LockKind,
}

/// A read-write lock by name: [`RwLock::read`] for a shared (read) lease,
/// [`RwLock::write`] for the exclusive (write) one. From
/// [`LockClient::rw_lock`].
#[derive(Clone, Debug)]
pub struct RwLock {
    client: LockClient,
    key: String,
}

impl LockClient {
    /// The counting semaphore `key`: at most `limit` holders at a time,
    /// each with its own token, lease and fence. Every acquirer of the key
    /// must name the same `limit`: while permits are held, the server
    /// refuses another with [`Error::Redis`](crate::Error::Redis) (`ERR
    /// limit differs from the semaphore's: its limit is N`). `limit` is
    /// checked (1 to 2^53) when acquiring, before anything is sent.
    pub fn semaphore(&self, key: &str, limit: u64) -> NamedLock {
        NamedLock { client: self.clone(), key: key.into(), kind: LockKind::Permit { limit } }
    }

    /// The read-write lock `key`: any number of readers, or one writer.
    /// A waiting writer holds back the readers that come after it.
    pub fn rw_lock(&self, key: &str) -> RwLock {
        RwLock { client: self.clone(), key: key.into() }
    }
}

impl NamedLock {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// [`LockKind::Permit`], [`LockKind::Read`] or [`LockKind::Write`].
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// Takes a place for `ttl` if one is free; [`Error::NotAcquired`](crate::Error::NotAcquired) if not.
    pub fn try_acquire(&self, ttl: Duration) -> Result<Lock> {
        self.acquire_with(ttl, Duration::ZERO, &LockOptions::default())
    }

    /// [`NamedLock::try_acquire`] with options (token, watchdog, replicas).
    pub fn try_acquire_with(&self, ttl: Duration, opts: &LockOptions) -> Result<Lock> {
        self.acquire_with(ttl, Duration::ZERO, opts)
    }

    /// Takes a place for `ttl`, waiting up to `wait` in the server's queue;
    /// then [`Error::NotAcquired`](crate::Error::NotAcquired). As
    /// [`LockClient::acquire`].
    pub fn acquire(&self, ttl: Duration, wait: Duration) -> Result<Lock> {
        self.acquire_with(ttl, wait, &LockOptions::default())
    }

    /// [`NamedLock::acquire`] with options (token, watchdog, replicas).
    pub fn acquire_with(&self, ttl: Duration, wait: Duration, opts: &LockOptions) -> Result<Lock> {
        self.client.acquire_sync(self.kind, &self.key, ttl, wait, opts)
    }

    /// The async twin of [`NamedLock::try_acquire`].
    pub async fn try_acquire_async(&self, ttl: Duration) -> Result<Lock> {
        self.acquire_with_async(ttl, Duration::ZERO, &LockOptions::default()).await
    }

    /// The async twin of [`NamedLock::try_acquire_with`].
    pub async fn try_acquire_with_async(&self, ttl: Duration, opts: &LockOptions) -> Result<Lock> {
        self.acquire_with_async(ttl, Duration::ZERO, opts).await
    }

    /// The async twin of [`NamedLock::acquire`]; waits without blocking the
    /// runtime.
    pub async fn acquire_async(&self, ttl: Duration, wait: Duration) -> Result<Lock> {
        self.acquire_with_async(ttl, wait, &LockOptions::default()).await
    }

    /// The async twin of [`NamedLock::acquire_with`].
    pub async fn acquire_with_async(&self, ttl: Duration, wait: Duration, opts: &LockOptions) -> Result<Lock> {
        self.client.acquire_async_of(self.kind, &self.key, ttl, wait, opts).await
    }

    /// Who holds the key: [`RwLock::info`] for a read-write lock's side.
    pub fn info(&self) -> Result<Option<HoldersInfo>> {
        info(&self.client, self.kind, &self.key)
    }

    /// The async twin of [`NamedLock::info`].
    pub async fn info_async(&self) -> Result<Option<HoldersInfo>> {
        info_async(&self.client, self.kind, &self.key).await
    }
}

impl RwLock {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The shared side: granted beside other readers, while no writer
    /// holds and nobody waits.
    pub fn read(&self) -> NamedLock {
        NamedLock { client: self.client.clone(), key: self.key.clone(), kind: LockKind::Read }
    }

    /// The exclusive side: granted on a free key with nobody waiting.
    pub fn write(&self) -> NamedLock {
        NamedLock { client: self.client.clone(), key: self.key.clone(), kind: LockKind::Write }
    }

    /// Who holds the key (`RWLOCK.INFO`): its
    /// [`kind`](HoldersInfo::kind) is [`LockKind::Read`] or
    /// [`LockKind::Write`]; `None` when nobody does.
    pub fn info(&self) -> Result<Option<HoldersInfo>> {
        info(&self.client, LockKind::Read, &self.key)
    }

    /// The async twin of [`RwLock::info`].
    pub async fn info_async(&self) -> Result<Option<HoldersInfo>> {
        info_async(&self.client, LockKind::Read, &self.key).await
    }
}

/// `SEM.INFO` or `RWLOCK.INFO`, sync: a wrapper of [`info_async`].
fn info(client: &LockClient, kind: LockKind, key: &str) -> Result<Option<HoldersInfo>> {
    client.core.transport.serves(Api::Sync)?;
    let (client, key) = (client.clone(), key.to_string());
    runtime::block(async move { holders_info(&client, kind, &key).await })
}

async fn info_async(client: &LockClient, kind: LockKind, key: &str) -> Result<Option<HoldersInfo>> {
    client.core.transport.serves(Api::Async)?;
    holders_info(client, kind, key).await
}

async fn holders_info(client: &LockClient, kind: LockKind, key: &str) -> Result<Option<HoldersInfo>> {
    check_key(key)?;
    client.core.transport.holders_info(kind, key).await.map_err(|e| kind.explain(kind.info_command(), e))
}
