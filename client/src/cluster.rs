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
//!   retried here with a fresh connection and slot map ([`Retrying`]).
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async;
use redis::cluster_routing::{Route as SlotRoute, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError, RedisResult,
    ServerErrorKind, Value,
};

use crate::cmd::{is_wait_unsupported, Backend, BackendCell, Grant, LockCmd, LockKind};
use crate::error::{Error, Result};
use crate::info::{self, HoldersInfo, LockInfo};
use crate::options::ClientOptions;
use crate::retry::{self, Failure};
use crate::runtime;
use crate::transport::{self, bounded, Api, Transport};
use crate::wait::{self, ReleaseOnCancel, Waited};

/// How long a slot whose node lacked the module keeps using the scripts
/// before the module is tried again (one extra round trip per slot then).
pub const SCRIPTS_RECHECK: Duration = Duration::from_secs(5);

/// Redirects one wait may follow before giving up: a slot moving back and
/// forth faster than this is not a cluster to wait in.
const MAX_REDIRECTS: usize = 16;

/// Pause before re-issuing a wait the node could not serve just now
/// (`TRYAGAIN`, `CLUSTERDOWN`, `UNBLOCKED`, a dropped connection).
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// `host:port` of a node.
type Addr = (String, u16);

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

/// Slot ranges (inclusive) and their masters.
type SlotMap = Vec<(u16, u16, Addr)>;

/// How long a slot map is trusted without a redirect proving it wrong.
const SLOT_MAP_MAX_AGE: Duration = Duration::from_secs(5);

/// True for `redis+cluster://` and `rediss+cluster://` URLs.
pub(crate) fn is_cluster_url(url: &str) -> bool {
    url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://")
}

/// `redis+cluster://h1:p1,h2:p2/` (or one URL per seed) as plain
/// `redis://` seed URLs, the form redis-rs understands.
fn seed_urls<S: AsRef<str>>(urls: &[S]) -> Vec<String> {
    let mut out = Vec::new();
    for u in urls {
        let u = u.as_ref();
        let (scheme, rest) = match u.split_once("://") {
            Some((s, r)) => (s.trim_end_matches("+cluster"), r),
            None => ("redis", u),
        };
        // A comma-separated host list: credentials before the first host and
        // the path after the last apply to every seed.
        let (auth, hosts) = match rest.rsplit_once('@') {
            Some((a, h)) => (format!("{a}@"), h),
            None => (String::new(), rest),
        };
        let (hosts, path) = match hosts.find(['/', '?']) {
            Some(i) => hosts.split_at(i),
            None => (hosts, ""),
        };
        for h in hosts.split(',').filter(|h| !h.is_empty()) {
            out.push(format!("{scheme}://{auth}{h}{path}"));
        }
    }
    out
}

fn parse_addr(s: &str) -> Option<Addr> {
    let (h, p) = s.rsplit_once(':')?;
    Some((h.trim_start_matches('[').trim_end_matches(']').to_string(), p.parse().ok()?))
}

fn addr_of(info: &ConnectionInfo) -> Option<Addr> {
    match info.addr() {
        ConnectionAddr::Tcp(h, p) => Some((h.clone(), *p)),
        ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

impl Cluster {
    /// The cluster of these seed nodes (see `LockClient::open_cluster`).
    /// Does not connect yet.
    pub(crate) fn open<S: AsRef<str>>(urls: &[S], opts: ClientOptions) -> Result<Cluster> {
        let urls = seed_urls(urls);
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
                n @ (Next::Moved(_) | Next::Ask(_)) => redirect = Some(n),
                _ => {
                    *self.once.lock().await = None;
                    tokio::time::sleep(retry::pause(failed - 1, rand::random::<f64>())).await;
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
            match t.after(&r) {
                Step::Again(pause) => {
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
            Ok::<_, Error>(cmd.query_async(&mut con, &cell).await?)
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
            if !renew.query_async(&mut con, &cell).await?.took_effect() {
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
            Ok::<_, Error>(info::query_async(key, &mut con, &cell).await?)
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

    fn node_cell(&self, addr: &Addr) -> Arc<BackendCell> {
        lock(&self.nodes).entry(addr.clone()).or_default().clone()
    }

    /// Where a wait on `slot` starts: its last known owner, else the first
    /// seed not known to be down.
    fn first_target(&self, slot: Slot, down: &[Addr]) -> Option<Addr> {
        if let Some(a) = lock(&self.owners).get(&slot) {
            if !down.contains(a) {
                return Some(a.clone());
            }
        }
        self.seeds.iter().find(|s| !down.contains(s)).cloned()
    }

    fn info_for(&self, addr: &Addr) -> ConnectionInfo {
        let a = match self.template.addr() {
            ConnectionAddr::TcpTls { insecure, tls_params, .. } => ConnectionAddr::TcpTls {
                host: addr.0.clone(),
                port: addr.1,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(addr.0.clone(), addr.1),
        };
        self.template.clone().set_addr(a)
    }

    /// Drops the idle wait connections to `addr` (it closed one on us).
    fn forget_node(&self, addr: &Addr) {
        self.waits.forget(addr);
    }

    fn remember_owner(&self, slot: Slot, addr: &Addr) {
        lock(&self.owners).insert(slot, addr.clone());
    }

    fn forget_owner(&self, slot: Slot, addr: &Addr) {
        let mut owners = lock(&self.owners);
        if owners.get(&slot) == Some(addr) {
            owners.remove(&slot);
        }
    }
}

/// A `CLUSTER SLOTS` reply: `[start, end, [host, port, ...], replicas...]`
/// per range. `None` when it does not read as one.
fn parse_slots(v: Value) -> Option<SlotMap> {
    let Value::Array(ranges) = v else { return None };
    let mut map = Vec::with_capacity(ranges.len());
    for r in ranges {
        let Value::Array(r) = r else { return None };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (r.first(), r.get(1), r.get(2))
        else {
            return None;
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
            Some(Value::SimpleString(h)) => h.clone(),
            _ => return None,
        };
        let Some(Value::Int(port)) = master.get(1) else { return None };
        map.push((u16::try_from(*start).ok()?, u16::try_from(*end).ok()?, (host, u16::try_from(*port).ok()?)));
    }
    Some(map)
}

fn owner_in(map: &SlotMap, slot: u16) -> Option<&Addr> {
    map.iter().find(|(a, b, _)| (*a..=*b).contains(&slot)).map(|(_, _, addr)| addr)
}

/// A reply in a batch that the routed single command handles better: a
/// redirect (the map was stale), or a node that cannot serve now.
fn retry_alone(v: &Value) -> bool {
    let Value::ServerError(e) = v else { return false };
    matches!(e.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "MASTERDOWN")
}

impl Cluster {
    /// The slot map, read again when stale.
    async fn slot_map(&self) -> Option<Arc<SlotMap>> {
        if let Some((at, map)) = lock(&self.slot_map).as_ref() {
            if at.elapsed() < SLOT_MAP_MAX_AGE {
                return Some(map.clone());
            }
        }
        let fut = async {
            let mut con = self.conn().await?;
            let v = con
                .route_command(
                    redis::cmd("CLUSTER").arg("SLOTS").clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                )
                .await?;
            Ok::<_, Error>(v)
        };
        let map = Arc::new(parse_slots(bounded(&self.opts, fut).await.ok()?)?);
        *lock(&self.slot_map) = Some((Instant::now(), map.clone()));
        Some(map)
    }

    fn slot_map_stale(&self) {
        *lock(&self.slot_map) = None;
    }

    /// Many renew or release commands: one pipeline per master (at most
    /// `batch` commands each) for the keys the slot map places there, the
    /// rest (and those a pipeline found moved) alone through redis-rs's
    /// routing. Per command when it was sent and its outcome.
    pub(crate) async fn run_batch(&self, cmds: Vec<LockCmd>, batch: usize) -> Vec<(Instant, Result<Grant>)> {
        use futures_util::stream::{self, StreamExt};
        let map = self.slot_map().await;
        let now = Instant::now();
        let mut groups: HashMap<&Addr, Vec<usize>> = HashMap::new();
        let mut alone = Vec::new();
        for (i, c) in cmds.iter().enumerate() {
            let slot = redis_lock_rules::cluster::key_slot(c.key().as_bytes());
            let scripts = lock(&self.scripts).get(&Slot::for_key(c.key())).is_some_and(|until| *until > now);
            match map.as_deref().and_then(|m| owner_in(m, slot)) {
                Some(addr) if !scripts => groups.entry(addr).or_default().push(i),
                _ => alone.push(i),
            }
        }
        let jobs: Vec<Vec<usize>> = groups
            .into_values()
            .flat_map(|idx| idx.chunks(batch.max(1)).map(<[usize]>::to_vec).collect::<Vec<_>>())
            .collect();
        let cmds = &cmds;
        let sent_pipelines: Vec<(Vec<usize>, Instant, Result<Vec<Value>>)> = stream::iter(jobs)
            .map(|idx| async move {
                let mut pipe = redis::pipe();
                for &i in &idx {
                    pipe.add_command(cmds[i].module_cmd());
                }
                // Routed to the master of the group's first key: all of the
                // group's keys are there as far as the map knows.
                let route = SingleNodeRoutingInfo::SpecificNode(SlotRoute::with_slot(
                    Slot::for_key(cmds[idx[0]].key()),
                    SlotAddr::Master,
                ));
                let n = idx.len();
                let sent = Instant::now();
                let fut = async {
                    let mut con = self.conn().await?;
                    Ok::<_, Error>(con.route_pipeline(pipe, 0, n, route).await?)
                };
                (idx, sent, bounded(&self.opts, fut).await)
            })
            .buffer_unordered(crate::engine::MAX_IN_FLIGHT)
            .collect()
            .await;
        let mut out: Vec<Option<(Instant, Result<Grant>)>> = (0..cmds.len()).map(|_| None).collect();
        for (idx, sent, r) in sent_pipelines {
            match r {
                Ok(values) if values.len() == idx.len() => {
                    for (i, v) in idx.into_iter().zip(values) {
                        if retry_alone(&v) {
                            self.slot_map_stale();
                            alone.push(i);
                            continue;
                        }
                        match cmds[i].batch_reply(v) {
                            Some(r) => out[i] = Some((sent, r.map_err(Error::from))),
                            None => alone.push(i),
                        }
                    }
                }
                // The node failed (a failover?): the watchdog retries these
                // after TTL/10, by then through a fresh map.
                Ok(_) | Err(_) => {
                    self.slot_map_stale();
                    let e = match r {
                        Err(e) => e,
                        Ok(v) => Error::Redis(crate::cmd::unexpected(Value::Array(v))),
                    };
                    let n = idx.len();
                    for (i, f) in idx.into_iter().zip(crate::engine::failed_all(&e, n)) {
                        out[i] = Some((sent, f));
                    }
                }
            }
        }
        let singles: Vec<(usize, Instant, Result<Grant>)> = stream::iter(alone)
            .map(|i| async move {
                let sent = Instant::now();
                (i, sent, self.run(&cmds[i]).await)
            })
            .buffer_unordered(crate::engine::MAX_IN_FLIGHT)
            .collect()
            .await;
        for (i, sent, r) in singles {
            out[i] = Some((sent, r));
        }
        out.into_iter().map(|o| o.unwrap_or_else(|| (now, Err(Error::InvalidArgument("no answer".into()))))).collect()
    }
}

/// One cluster command's attempts through a topology change: a failure
/// that did not apply it (a redirect that escaped redis-rs, `TRYAGAIN`,
/// `CLUSTERDOWN`, a refused connection) or may have (a connection reset)
/// is tried again after a growing pause, [`retry::TOPOLOGY_ATTEMPTS`]
/// times in all, or until the deadline of an acquire's wait. An acquire
/// or takeover that may have been applied is released before it is sent
/// again, and once more if it finally fails, so its grant is never left
/// behind; a release refused after a possibly applied attempt had most
/// likely been done by it, and counts as done.
struct Retrying<'a> {
    cmd: &'a LockCmd,
    deadline: Option<Instant>,
    failed: usize,
    doubt: bool,
}

/// What [`Retrying::after`] says to do.
enum Step {
    /// Pause, then try again.
    Again(Duration),
    /// Give the caller this outcome.
    Done,
    /// Give the caller this failure, after sending this release.
    Doubt(LockCmd),
}

impl<'a> Retrying<'a> {
    fn new(cmd: &'a LockCmd, deadline: Option<Instant>) -> Self {
        Retrying { cmd, deadline, failed: 0, doubt: false }
    }

    /// The release of a grant an earlier attempt may have made, to send
    /// before the next attempt.
    fn release_first(&self) -> Option<LockCmd> {
        (self.doubt && self.cmd.grants()).then(|| self.cmd.releasing().ok()).flatten()
    }

    fn after(&mut self, r: &Result<Grant>) -> Step {
        let Err(Error::Redis(e)) = r else { return Step::Done };
        let failure = retry::classify(e);
        if failure == Failure::Unknown {
            self.doubt = true;
        }
        let pause = retry::pause(self.failed, rand::random::<f64>());
        self.failed += 1;
        let more = self.failed < retry::TOPOLOGY_ATTEMPTS || self.deadline.is_some_and(|d| Instant::now() + pause < d);
        match (failure, more, self.release_first()) {
            (Failure::Final, _, Some(release)) | (_, false, Some(release)) => Step::Doubt(release),
            (Failure::Final, _, None) | (_, false, None) => Step::Done,
            _ => Step::Again(pause),
        }
    }

    fn settle(&self, r: Result<Grant>) -> Result<Grant> {
        match r {
            Ok(Grant::Refused) if self.doubt && matches!(self.cmd, LockCmd::Release { .. }) => Ok(Grant::Granted(None)),
            r => r,
        }
    }
}

/// What to do after a wait's error reply.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// `MOVED`: the slot's owner is this node; re-issue there.
    Moved(Addr),
    /// `ASK`: re-issue once on this (importing) node, after `ASKING`.
    Ask(Addr),
    /// `TRYAGAIN`, `CLUSTERDOWN`, `UNBLOCKED` (and `LOADING`, `MASTERDOWN`):
    /// the node cannot serve it now; re-issue after a pause.
    Later,
    /// Anything else ends the wait with the error.
    Fail,
}

fn next_after(e: &RedisError) -> Next {
    if let Some((addr, _slot)) = e.redirect_node() {
        let Some(addr) = parse_addr(addr) else { return Next::Fail };
        return match e.kind() {
            redis::ErrorKind::Server(ServerErrorKind::Ask) => Next::Ask(addr),
            _ => Next::Moved(addr),
        };
    }
    match e.code() {
        Some("TRYAGAIN" | "CLUSTERDOWN" | "UNBLOCKED" | "LOADING" | "MASTERDOWN") => Next::Later,
        _ => Next::Fail,
    }
}

/// The state of one wait as it moves between nodes.
struct Route {
    slot: Slot,
    deadline: Instant,
    addr: Addr,
    asking: bool,
    redirects: usize,
    /// Nodes that refused a connection or dropped one during this wait.
    down: Vec<Addr>,
    /// Times the wait started over ([`Route::settle`]).
    settled: usize,
}

impl Route {
    fn new(cl: &Cluster, key: &str, left: Duration) -> Result<Route> {
        let slot = Slot::for_key(key);
        let addr = cl.first_target(slot, &[]).ok_or_else(|| Error::InvalidArgument("no cluster seed node".into()))?;
        let deadline =
            Instant::now().checked_add(left).unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        Ok(Route { slot, deadline, addr, asking: false, redirects: 0, down: Vec::new(), settled: 0 })
    }

    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Follows a redirect; false when there have been too many.
    fn redirect(&mut self, cl: &Cluster, next: Next) -> bool {
        self.redirects += 1;
        match next {
            Next::Moved(a) => {
                cl.remember_owner(self.slot, &a);
                self.addr = a;
                self.asking = false;
            }
            Next::Ask(a) => {
                self.addr = a;
                self.asking = true;
            }
            Next::Later | Next::Fail => {}
        }
        self.redirects <= MAX_REDIRECTS
    }

    /// The node at `addr` is unreachable: start again from another.
    fn node_down(&mut self, cl: &Cluster) -> bool {
        cl.forget_owner(self.slot, &self.addr);
        cl.forget_node(&self.addr);
        self.down.push(self.addr.clone());
        self.asking = false;
        match cl.first_target(self.slot, &self.down) {
            Some(a) => {
                self.addr = a;
                true
            }
            None => false,
        }
    }

    /// Too many redirects, or no node left to try: the topology is
    /// changing under the wait (a failover in progress). Start again from
    /// the seeds after a growing pause; `None` once the wait is over.
    fn settle(&mut self, cl: &Cluster) -> Option<Duration> {
        let left = self.left();
        if left.is_zero() {
            return None;
        }
        let pause = retry::pause(self.settled, rand::random::<f64>()).min(left);
        self.settled += 1;
        cl.forget_owner(self.slot, &self.addr);
        self.redirects = 0;
        self.down.clear();
        self.asking = false;
        self.addr = cl.first_target(self.slot, &[])?;
        Some(pause)
    }

    /// A pause before re-issuing, cut to the deadline; false once the wait
    /// is over.
    fn pause(&self) -> Option<Duration> {
        let left = self.left();
        (!left.is_zero()).then(|| RETRY_PAUSE.min(left))
    }
}

impl Cluster {
    /// A blocking acquire in a cluster, on a dedicated connection to the
    /// slot's owner (see the module docs).
    pub(crate) async fn wait_acquire(self: &Arc<Self>, cmd: &LockCmd, ttl: Duration, left: Duration) -> Result<Waited> {
        let cl = self;
        let mut route = Route::new(cl, cmd.key(), left)?;
        loop {
            let cell = cl.node_cell(&route.addr);
            let pooled = cl.waits.take(&route.addr);
            let reused = pooled.is_some();
            let mut con = match pooled {
                Some(c) => c,
                None => {
                    // No response timeout of its own: each use sets one below.
                    let cfg = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(cl.opts.connect_timeout))
                        .set_response_timeout(None);
                    let info = cl.info_for(&route.addr);
                    let opened = runtime::on_background(async move {
                        redis::Client::open(info)?.get_multiplexed_async_connection_with_config(&cfg).await
                    })
                    .await?;
                    match opened {
                        Ok(c) => c,
                        Err(_) if route.node_down(cl) => continue,
                        Err(_) => match route.settle(cl) {
                            Some(p) => {
                                tokio::time::sleep(p).await;
                                continue;
                            }
                            None => return Ok(Waited::Refused),
                        },
                    }
                }
            };
            let left = route.left();
            con.set_response_timeout(left.saturating_add(cl.opts.response_timeout));
            let guard = ReleaseOnCancel::new(transport::release_later(cl.clone(), cmd));
            let asked = if route.asking { redis::cmd("ASKING").query_async::<()>(&mut con).await } else { Ok(()) };
            let sent = Instant::now();
            let r = match asked {
                Ok(()) => cmd.with_wait(wait::wait_ms(left)).query_async(&mut con, &cell).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(Grant::Granted(fence)) => {
                    if !route.asking {
                        cl.remember_owner(route.slot, &route.addr);
                    }
                    cell.set_wait(true);
                    cl.backend.set(Backend::Module);
                    cl.waits.put(&route.addr, con);
                    if !wait::needs_confirming(sent, ttl, Instant::now()) {
                        guard.disarm();
                        return Ok(Waited::Granted { fence, sent });
                    }
                    let renew = cmd.renewal(ttl)?;
                    let sent = Instant::now();
                    return match cl.run(&renew).await {
                        Ok(Grant::Granted(_)) => {
                            guard.disarm();
                            Ok(Waited::Granted { fence, sent })
                        }
                        Ok(Grant::Refused) => {
                            guard.disarm();
                            Ok(Waited::Refused)
                        }
                        // The guard releases.
                        Err(e) => Err(e),
                    };
                }
                Ok(Grant::Refused) => {
                    guard.disarm();
                    cl.waits.put(&route.addr, con);
                    let w = wait::refused(&cell);
                    if cell.get() == Backend::Scripts {
                        cl.backend.set(Backend::Scripts);
                    }
                    return Ok(w);
                }
                Err(e) if is_wait_unsupported(&e) => {
                    guard.disarm();
                    cell.set_wait(false);
                    cl.backend.set_wait(false);
                    cl.waits.put(&route.addr, con);
                    return Ok(Waited::Unsupported);
                }
                Err(e) => match next_after(&e) {
                    n @ (Next::Moved(_) | Next::Ask(_)) => {
                        guard.disarm();
                        let from = route.addr.clone();
                        cl.waits.put(&from, con);
                        if !route.redirect(cl, n) {
                            match route.settle(cl) {
                                Some(p) => tokio::time::sleep(p).await,
                                None => return Ok(Waited::Refused),
                            }
                        }
                    }
                    Next::Later => {
                        guard.disarm();
                        cl.waits.put(&route.addr, con);
                        match route.pause() {
                            Some(p) => tokio::time::sleep(p).await,
                            None => return Ok(Waited::Refused),
                        }
                    }
                    Next::Fail => {
                        drop(con);
                        if !wait::outcome_unknown(&e) {
                            guard.disarm();
                            return Err(e.into());
                        }
                        // Released here, not by the guard's spawned task, which
                        // could otherwise run after a retry's grant.
                        guard.disarm();
                        transport::release_later(cl.clone(), cmd).await;
                        if wait::stale(&e, reused) {
                            cl.forget_node(&route.addr);
                            continue;
                        }
                        if e.is_timeout() {
                            return Err(e.into());
                        }
                        let pause = if route.node_down(cl) { route.pause() } else { route.settle(cl) };
                        match pause {
                            Some(p) => tokio::time::sleep(p).await,
                            None => return Ok(Waited::Refused),
                        }
                    }
                },
            }
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_become_seed_urls() {
        assert_eq!(
            seed_urls(&["redis+cluster://127.0.0.1:7000,127.0.0.1:7001/"]),
            ["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]
        );
        assert_eq!(seed_urls(&["rediss+cluster://u:p@a:1,b:2/0"]), ["rediss://u:p@a:1/0", "rediss://u:p@b:2/0"]);
        assert_eq!(seed_urls(&["redis://a:1/", "redis://b:2"]), ["redis://a:1/", "redis://b:2"]);
        assert!(is_cluster_url("redis+cluster://a:1/"));
        assert!(!is_cluster_url("redis://a:1/"));
    }

    #[test]
    fn wait_errors_are_followed_or_retried() {
        let server = |line: &str| {
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
                .and_then(redis::Value::extract_error)
                .unwrap_err()
        };
        assert_eq!(next_after(&server("MOVED 3999 127.0.0.1:6381")), Next::Moved(("127.0.0.1".into(), 6381)));
        assert_eq!(next_after(&server("ASK 3999 127.0.0.1:6382")), Next::Ask(("127.0.0.1".into(), 6382)));
        assert_eq!(next_after(&server("TRYAGAIN Multiple keys request during rehashing of slot")), Next::Later);
        assert_eq!(next_after(&server("CLUSTERDOWN The cluster is down")), Next::Later);
        assert_eq!(next_after(&server("UNBLOCKED client unblocked via CLIENT UNBLOCK")), Next::Later);
        assert_eq!(next_after(&server("ERR syntax error")), Next::Fail);
    }
}
