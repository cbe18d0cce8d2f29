//! Redis Cluster: the same [`LockClient`](crate::LockClient) and [`Lock`](crate::Lock) API on
//! redis-rs's own cluster clients.
//!
//! - Every lock command goes through redis-rs's
//!   [`cluster_async::ClusterConnection`] (one per client, on the
//!   background runtime, for both APIs), which routes by the key's slot and
//!   follows `MOVED`/`ASK`, retrying on `TRYAGAIN`/`CLUSTERDOWN`. (Guarded
//!   writes use a second one, opened on the first, on which redis-rs never
//!   resends: see [`Cluster::call`]. Blocking waits use plain connections.) What
//!   escapes its retries in a topology change (a failover's refused
//!   connections, a redirect to a dead node, a long `CLUSTERDOWN`) is
//!   retried here with a fresh connection and slot map
//!   ([`Retrying`](crate::retry::Retrying)).
//!   The `LOCK.*` commands are unknown to redis-rs, which routes them by
//!   their first argument: the key. The scripts go as `EVALSHA sha 1 key`,
//!   routed by the key too. `LOCK.FENCEFLOOR`, whose argument is a number and
//!   not a key, is never sent by this client.
//! - **Backend per node**: the module may be loaded on some nodes and not on
//!   others (a rolling deploy). A slot whose node answered "unknown command"
//!   uses the scripts for [`SCRIPTS_RECHECK`], then the module is tried again,
//!   so a slot that moved to a node with the module gets fences back. Waits
//!   run on connections to one node and keep what they learn per node.
//! - **Waits** (`LOCK.ACQUIRE … WAIT`) block a connection for as long as the
//!   wait lasts, so they cannot share the cluster connection: each runs on a
//!   dedicated plain connection to the slot's owner (last known per slot,
//!   else a seed, which redirects). It is re-issued with what is left of the
//!   wait when the node answers `MOVED` (to the new owner), `ASK` (to the
//!   importing node, after `ASKING`), `TRYAGAIN`, `CLUSTERDOWN` or
//!   `UNBLOCKED` (after a short pause), or drops the connection (a failover:
//!   after a best-effort release, from the seeds again). A failover in
//!   progress (redirects going round, every node refusing) makes it start
//!   over from the seeds after a growing pause, until the wait ends.
//! - **Batches** (the renewal engine's): one pipeline per master, grouped
//!   by a `CLUSTER SLOTS` map; a key the map placed wrong (a `MOVED` in the
//!   pipeline) goes alone through redis-rs's routing.
//!
//! Here: the connections, the [`Transport`] and the commands' retries;
//! `urls.rs` names the nodes, `batch.rs` pipelines by slot map,
//! `route.rs` decides where a wait goes (no I/O) and `waiting.rs` sends it;
//! `observe.rs` sends an election observer's calls the same way.

mod batch;
mod observe;
mod route;
mod urls;
mod waiting;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async;
use redis::cluster_routing::{Route as SlotRoute, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{ConnectionInfo, IntoConnectionInfo, RedisError, RedisResult, Value};

use crate::cmd::{Backend, Grant, LockCmd, LockKind};
use crate::error::{Error, Result};
use crate::info::{self, HoldersInfo, LockInfo};
use crate::options::ClientOptions;
use crate::retry::{self, Failure, Retrying, Step};
use crate::runtime;
use crate::send::{self, BackendCell};
use crate::trace;
use crate::transport::{bounded, Api, Observer, Transport};
use crate::wait::{self, Waited};
use route::{next_after, Next};
use urls::{addr_of, Addr};
pub use urls::{cluster_seed_urls, is_cluster_url};

/// How long a slot whose node lacked the module keeps using the scripts
/// before the module is tried again (one extra round trip per slot then).
pub const SCRIPTS_RECHECK: Duration = Duration::from_secs(5);

/// Slot ranges (inclusive) and their masters.
type SlotMap = Vec<(u16, u16, Addr)>;

/// The transport to a Redis Cluster, of a client built with
/// [`LockClient::open_cluster`](crate::LockClient::open_cluster).
pub(crate) struct Cluster {
    client: ClusterClient,
    /// The same cluster without redis-rs's retries, for the caller's own
    /// commands (guarded writes): see [`Cluster::call`].
    once_client: ClusterClient,
    /// Seed nodes, in the order given: where a wait starts when the slot's
    /// owner is not known (or no longer answers).
    seeds: Vec<Addr>,
    /// Connection settings (credentials, TLS, database) of the first seed,
    /// used for the dedicated wait connections to any node.
    template: ConnectionInfo,
    /// Replaced after a topology failure, so the next command starts from
    /// a fresh slot map.
    aio: tokio::sync::Mutex<Option<cluster_async::ClusterConnection>>,
    /// A connection of `once_client`, opened on the first guarded write.
    once: tokio::sync::Mutex<Option<cluster_async::ClusterConnection>>,
    /// Slots whose node answered "unknown command", until when to use the
    /// scripts there. Absent: try the module.
    scripts: Mutex<HashMap<Slot, Instant>>,
    /// The owner a wait last reached, per slot.
    owners: Mutex<HashMap<Slot, Addr>>,
    /// What each node's wait connections found it to speak.
    nodes: Mutex<HashMap<Addr, Arc<BackendCell>>>,
    /// Idle wait connections, per node.
    waits: wait::Pool<Addr>,
    pub(crate) opts: ClientOptions,
    /// What the last node a command reached was found to speak, for the
    /// client's [`backend`](crate::LockClient::backend) getters.
    pub(crate) backend: BackendCell,
    /// Which master serves which slots (`CLUSTER SLOTS`), for grouping
    /// batched commands by node; `None` until read, and again once a
    /// redirect showed it stale.
    slot_map: Mutex<Option<(Instant, Arc<SlotMap>)>>,
}

impl Cluster {
    /// The cluster of these seed nodes (see `LockClient::open_cluster`).
    /// Does not connect yet.
    pub(crate) fn open<S: AsRef<str>>(urls: &[S], opts: ClientOptions) -> Result<Cluster> {
        let urls = cluster_seed_urls(urls);
        let infos = urls.iter().map(|u| u.as_str().into_connection_info()).collect::<RedisResult<Vec<_>>>()?;
        let Some(template) = infos.first().cloned() else {
            return Err(Error::InvalidArgument("a cluster client needs at least one seed node".into()));
        };
        let seeds = infos.iter().filter_map(addr_of).collect::<Vec<_>>();
        if seeds.len() != infos.len() {
            return Err(Error::InvalidArgument("cluster seed nodes must be TCP addresses".into()));
        }
        let builder = || {
            ClusterClient::builder(infos.clone())
                .connection_timeout(opts.connect_timeout)
                .response_timeout(opts.response_timeout)
        };
        let once_client = builder().retries(0).build()?;
        let client = builder()
            // redis-rs waits 1.28 s and more between retries by default;
            // a lock's renewals cannot sit that long, and the watchdog
            // retries by itself (every TTL/10).
            .retries(6)
            .min_retry_wait(10)
            .max_retry_wait(250)
            .build()?;
        let cluster = Cluster {
            client,
            once_client,
            seeds,
            template,
            aio: tokio::sync::Mutex::new(None),
            once: tokio::sync::Mutex::new(None),
            scripts: Mutex::default(),
            owners: Mutex::default(),
            nodes: Mutex::default(),
            waits: wait::Pool::default(),
            opts,
            backend: BackendCell::default(),
            slot_map: Mutex::default(),
        };
        Ok(cluster)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cluster {
    /// A backend cell for one command on `slot`: Scripts while the slot's
    /// node is known to lack the module, else Unknown (the module is tried).
    fn slot_cell(&self, slot: Slot) -> BackendCell {
        let cell = BackendCell::default();
        let mut scripts = lock(&self.scripts);
        match scripts.get(&slot) {
            Some(until) if *until > Instant::now() => cell.set(Backend::Scripts),
            Some(_) => {
                scripts.remove(&slot);
            }
            None => {}
        }
        cell
    }

    /// Records what the command on `slot` found, for the slot and for the
    /// client's [`backend`](crate::LockClient::backend) getters.
    fn learn(&self, slot: Slot, cell: &BackendCell) {
        match cell.get() {
            Backend::Scripts => {
                lock(&self.scripts).entry(slot).or_insert_with(|| Instant::now() + SCRIPTS_RECHECK);
            }
            Backend::Module => {}
            Backend::Unknown => return,
        }
        self.backend.set(cell.get());
    }

    pub(crate) async fn conn(&self) -> Result<cluster_async::ClusterConnection> {
        self.conn_of(&self.aio, &self.client).await
    }

    async fn conn_of(
        &self,
        cell: &tokio::sync::Mutex<Option<cluster_async::ClusterConnection>>,
        client: &ClusterClient,
    ) -> Result<cluster_async::ClusterConnection> {
        let mut con = cell.lock().await;
        if let Some(c) = con.as_ref() {
            return Ok(c.clone());
        }
        let cfg = ClusterConfig::new()
            .set_connection_timeout(self.opts.connect_timeout)
            .set_response_timeout(self.opts.response_timeout);
        // On the background runtime, which then drives it: it outlives the
        // caller's runtime, and the renewal engine there shares it.
        let client = client.clone();
        let c = runtime::on_background(async move { client.get_async_connection_with_config(cfg).await }).await??;
        *con = Some(c.clone());
        Ok(c)
    }

    /// Drops the async cluster connection after a topology failure.
    async fn forget_async(&self) {
        *self.aio.lock().await = None;
    }

    /// A caller's command (a guarded write) on the master of `key`'s slot,
    /// its reply as the server sent it.
    ///
    /// It may write, so it is sent again only after a failure showing that
    /// it did not run: on the connection without retries, since redis-rs
    /// resends a command after a dropped connection or a response timeout,
    /// when it may have run. `MOVED` and `ASK` (after `ASKING`) are followed
    /// at once to the node they name; `TRYAGAIN`, `CLUSTERDOWN`,
    /// `MASTERDOWN`, `LOADING` (all refused before the command runs), a
    /// refused connection and an unknown node are retried after a growing
    /// pause with a fresh slot map ([`retry::classify`]'s `NotApplied`),
    /// [`retry::TOPOLOGY_ATTEMPTS`] attempts in all. Any other failure —
    /// a connection lost after sending, a timeout — reaches the caller, for
    /// whom the outcome is unknown.
    pub(crate) async fn call(&self, key: &str, cmd: &redis::Cmd) -> Result<Value> {
        let slot = Slot::for_key(key);
        let mut redirect = None;
        let mut failed = 0;
        loop {
            let r = self.call_once(slot, cmd, redirect.take()).await;
            let Err(Error::Redis(e)) = &r else { return r };
            failed += 1;
            if retry::classify(e) != Failure::NotApplied || failed >= retry::TOPOLOGY_ATTEMPTS {
                return r;
            }
            match next_after(e) {
                n @ (Next::Moved(_) | Next::Ask(_)) => {
                    trace::retry_event(key, "cluster", e, Duration::ZERO);
                    redirect = Some(n)
                }
                _ => {
                    *self.once.lock().await = None;
                    let pause = retry::pause(failed - 1, rand::random::<f64>());
                    trace::retry_event(key, "cluster", e, pause);
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// One attempt of [`Cluster::call`]: to the slot's master as the slot
    /// map knows it, or to where a redirect said.
    async fn call_once(&self, slot: Slot, cmd: &redis::Cmd, redirect: Option<Next>) -> Result<Value> {
        let fut = async {
            let mut con = self.conn_of(&self.once, &self.once_client).await?;
            let v = match redirect {
                Some(Next::Moved((host, port))) => {
                    con.route_command(
                        cmd.clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
                    )
                    .await?
                }
                Some(Next::Ask((host, port))) => {
                    let mut pipe = redis::pipe();
                    pipe.cmd("ASKING").add_command(cmd.clone());
                    let mut v = con.route_pipeline(pipe, 1, 1, SingleNodeRoutingInfo::ByAddress { host, port }).await?;
                    v.pop().ok_or_else(|| crate::cmd::unexpected(Value::Array(Vec::new())))?
                }
                _ => {
                    let master = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(SlotRoute::with_slot(
                        slot,
                        SlotAddr::Master,
                    )));
                    con.route_command(cmd.clone(), master).await?
                }
            };
            Ok::<_, Error>(v.extract_error()?)
        };
        bounded(&self.opts, fut).await
    }

    /// A lock command, routed by redis-rs, retried through topology
    /// changes (see [`Retrying`]).
    pub(crate) async fn run(&self, cmd: &LockCmd) -> Result<Grant> {
        self.run_until(cmd, None).await
    }

    /// [`Cluster::run`], retrying until `deadline` too (an acquire's wait).
    pub(crate) async fn run_until(&self, cmd: &LockCmd, deadline: Option<Instant>) -> Result<Grant> {
        let mut t = Retrying::new(cmd, deadline);
        loop {
            if let Some(release) = t.release_first() {
                let _ = self.run_once(&release).await;
            }
            let r = self.run_once(cmd).await;
            match t.after(&r, Instant::now(), rand::random::<f64>()) {
                Step::Again(pause) => {
                    if let Err(Error::Redis(e)) = &r {
                        trace::retry_event(cmd.key(), "cluster", e, pause);
                    }
                    self.forget_async().await;
                    tokio::time::sleep(pause).await;
                }
                Step::Done => return t.settle(r),
                Step::Doubt(release) => {
                    let _ = self.run_once(&release).await;
                    return r;
                }
            }
        }
    }

    async fn run_once(&self, cmd: &LockCmd) -> Result<Grant> {
        let slot = Slot::for_key(cmd.key());
        let cell = self.slot_cell(slot);
        let fut = async {
            let mut con = self.conn().await?;
            Ok::<_, Error>(send::drive_async(send::Lock::new(cmd, &cell), &mut con).await?)
        };
        let r = bounded(&self.opts, fut).await;
        self.learn(slot, &cell);
        r
    }

    /// `renew`, then `wait` on the node that renewed (see `replicas.rs`):
    /// the replicas that acknowledged, `None` when the renewal found the
    /// lock gone.
    pub(crate) async fn renew_then_wait(&self, renew: &LockCmd, wait: redis::Cmd) -> Result<Option<i64>> {
        let fut = async {
            let mut con = self.conn().await?;
            let cell = BackendCell::default();
            if !send::drive_async(send::Lock::new(renew, &cell), &mut con).await?.took_effect() {
                return Ok(None);
            }
            // To the master of the key's slot, where the renewal went, so
            // WAIT counts that node's replicas (redis-rs would otherwise
            // send it to every master).
            let owner = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(SlotRoute::with_slot(
                Slot::for_key(renew.key()),
                SlotAddr::Master,
            )));
            let v = con.route_command(wait, owner).await?;
            Ok::<_, Error>(Some(redis::from_redis_value(v).map_err(RedisError::from)?))
        };
        bounded(&self.opts, fut).await
    }

    /// `LOCK.INFO` (or its script twin) on the key's node.
    pub(crate) async fn info(&self, key: &str) -> Result<Option<LockInfo>> {
        let slot = Slot::for_key(key);
        let cell = self.slot_cell(slot);
        let fut = async {
            let mut con = self.conn().await?;
            Ok::<_, Error>(send::drive_async(send::Info::new(key, &cell), &mut con).await?)
        };
        let r = bounded(&self.opts, fut).await;
        self.learn(slot, &cell);
        r
    }

    /// `SEM.INFO` or `RWLOCK.INFO` on the key's node (module only:
    /// no backend to learn).
    pub(crate) async fn holders_info(&self, kind: LockKind, key: &str) -> Result<Option<HoldersInfo>> {
        let cmd = info::holders_cmd(kind, key);
        let fut = async {
            let mut con = self.conn().await?;
            Ok::<_, Error>(cmd.query_async::<Value>(&mut con).await?)
        };
        Ok(info::parse_holders(bounded(&self.opts, fut).await?)?)
    }
}

impl Transport for Cluster {
    fn serves(&self, _api: Api) -> Result<()> {
        Ok(())
    }

    fn backend(&self) -> &BackendCell {
        &self.backend
    }

    fn run<'a>(&'a self, cmd: &'a LockCmd, deadline: Option<Instant>) -> BoxFuture<'a, Result<Grant>> {
        Box::pin(self.run_until(cmd, deadline))
    }

    fn run_batch(
        self: Arc<Self>,
        cmds: Vec<LockCmd>,
        batch: usize,
    ) -> BoxFuture<'static, Vec<(Instant, Result<Grant>)>> {
        Box::pin(async move { Cluster::run_batch(&self, cmds, batch).await })
    }

    fn info<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<LockInfo>>> {
        Box::pin(Cluster::info(self, key))
    }

    fn holders_info<'a>(&'a self, kind: LockKind, key: &'a str) -> BoxFuture<'a, Result<Option<HoldersInfo>>> {
        Box::pin(Cluster::holders_info(self, kind, key))
    }

    /// Waits run on connections of their own to the slot's owner.
    fn may_block(&self, left: Duration) -> Option<Duration> {
        (self.backend.may_wait() && left >= Duration::from_millis(1)).then_some(left)
    }

    fn wait_acquire<'a>(
        self: Arc<Self>,
        cmd: &'a LockCmd,
        ttl: Duration,
        left: Duration,
    ) -> BoxFuture<'a, Result<Waited>> {
        Box::pin(async move { Cluster::wait_acquire(&self, cmd, ttl, left).await })
    }

    fn renew_then_wait<'a>(&'a self, renew: &'a LockCmd, wait: redis::Cmd) -> BoxFuture<'a, Result<Option<i64>>> {
        Box::pin(Cluster::renew_then_wait(self, renew, wait))
    }

    fn call<'a>(&'a self, key: &'a str, cmd: &'a redis::Cmd) -> BoxFuture<'a, Result<Value>> {
        Box::pin(Cluster::call(self, key, cmd))
    }

    fn is_cluster(&self) -> bool {
        true
    }

    /// The master of the key's slot in the slot map read for batches,
    /// unless the slot's node lacks the module.
    fn node_of<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let scripts = lock(&self.scripts).get(&Slot::for_key(key)).is_some_and(|until| *until > Instant::now());
            if scripts {
                return None;
            }
            let map = self.slot_map().await?;
            let (host, port) = batch::owner_of(&map, redis_lock_rules::cluster::key_slot(key.as_bytes()))?;
            Some(format!("{host}:{port}"))
        })
    }

    fn nodes_changed(&self) {
        self.slot_map_stale();
    }

    /// To the node by its address, whatever slots it serves now: a
    /// session lives on the node that granted it.
    fn node_call<'a>(&'a self, node: &'a str, cmd: &'a redis::Cmd) -> BoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            let (host, port) = node
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                .ok_or_else(|| Error::InvalidArgument(format!("not a node address: {node}")))?;
            let mut con = self.conn().await?;
            let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
            Ok(con.route_command(cmd.clone(), to).await?.extract_error()?)
        })
    }

    /// The master a wait last reached for the key's slot, else the one of
    /// the slot map read for batches, else `cluster`.
    fn server_of(&self, key: &str) -> String {
        let slot = Slot::for_key(key);
        let owner = lock(&self.owners).get(&slot).cloned().or_else(|| {
            let map = lock(&self.slot_map).as_ref().map(|(_, m)| m.clone())?;
            batch::owner_of(&map, redis_lock_rules::cluster::key_slot(key.as_bytes())).cloned()
        });
        owner.map_or_else(|| "cluster".into(), |(host, port)| format!("{host}:{port}"))
    }

    fn observer(self: Arc<Self>, key: &str) -> Result<Box<dyn Observer>> {
        Ok(Box::new(observe::ClusterObserver::new(self, key)))
    }
}
