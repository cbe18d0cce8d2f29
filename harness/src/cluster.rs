//! A private Redis Cluster for tests and benchmarks.
//!
//! [`Cluster::start`] starts `masters × (1 + replicas_per_master)`
//! redis-servers with `--cluster-enabled yes` (each a [`Server`], so each
//! has its own directory, a free loopback port, the module loaded, and is
//! killed on drop, also when a test panics), joins them with
//! `redis-cli --cluster create`, and waits until every node reports
//! `cluster_state:ok` with all 16384 slots covered, every node known to every
//! other and every replica's link up.
//!
//! Helpers move a slot (by hand with `CLUSTER SETSLOT` + `MIGRATE`, step by
//! step or whole, and through `redis-cli --cluster reshard`), fail a master
//! over (`CLUSTER FAILOVER [FORCE|TAKEOVER]` on a replica, or kill -9 and let
//! the cluster promote one), and find the node that owns a key.
//!
//! Atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`): start one
//! ([`Cluster::start_atomic_migration`]), move slots and wait for the
//! hand-over ([`Cluster::atomic_move_slots`]), read the nodes' migration
//! jobs ([`Cluster::slot_migrations`]), cancel them
//! ([`Cluster::cancel_atomic_migrations`]) or fail one by killing its
//! target mid-way ([`Cluster::atomic_migration_to_killed_target`]).
//! [`Cluster::has_atomic_migration`] says whether the server has it.
//!
//! Nodes keep the index they were started with ([`Cluster::node`]); roles
//! change with failovers, so ask [`Cluster::masters`] or
//! [`Cluster::owner_of`] rather than assuming node 0 is a master.
//!
//! Environment: `REDIS_CLI` names the redis-cli binary (default `redis-cli`
//! on `PATH`), besides the server's `REDIS_SERVER` and `REDIS_LOCK_MODULE`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Builder, Server};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How long the cluster may take to agree after a change (create, slot
/// move, failover). Failure detection alone takes two node timeouts plus an
/// election (0.5–1 s + rank × 1 s).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// `cluster-node-timeout`: short, so an automatic failover after a kill
/// completes in a few seconds rather than the default 15 s + election.
const NODE_TIMEOUT_MS: u64 = 1000;

/// A running cluster of redis-servers, all killed (and their directories
/// removed) when it is dropped.
pub struct Cluster {
    nodes: Vec<Server>,
    /// Node ids (`CLUSTER MYID`), by node index.
    ids: Vec<String>,
    /// False once a node was killed with [`Cluster::kill_node`] (and not restarted).
    alive: Vec<bool>,
}

/// One line of `CLUSTER NODES`, as the node itself announces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// The node id.
    pub id: String,
    /// `master` or `slave` (Redis's word), from the flags.
    pub master: bool,
    /// For a replica, its master's id.
    pub master_id: Option<String>,
    /// The node's configEpoch.
    pub config_epoch: u64,
    /// Slots this node serves (single slots, ranges expanded).
    pub slots: Vec<u16>,
    /// Slots being moved: `(slot, true)` importing, `(slot, false)` migrating.
    pub moving: Vec<(u16, bool)>,
}

/// One job of `CLUSTER GETSLOTMIGRATIONS` (Valkey 9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotMigration {
    pub name: String,
    /// `EXPORT` or `IMPORT`.
    pub operation: String,
    /// As the server writes them: `12182-12182`.
    pub slot_ranges: String,
    /// `connecting`, …, `success`, `failed`, `cancelled`.
    pub state: String,
    pub message: String,
}

impl SlotMigration {
    /// Whether the job is over (succeeded, failed or was cancelled).
    pub fn finished(&self) -> bool {
        matches!(self.state.as_str(), "success" | "failed" | "cancelled")
    }
}

impl Cluster {
    /// A cluster of `masters` masters with `replicas_per_master` replicas
    /// each, module loaded everywhere. `masters` must be at least 3 (what
    /// `redis-cli --cluster create` accepts).
    pub fn start(masters: usize, replicas_per_master: usize) -> Cluster {
        Self::start_with(masters, replicas_per_master, |_| Server::builder())
    }

    /// [`Cluster::start`] with a [`Builder`] per node index (e.g. one
    /// without the module, or with extra server options). The cluster
    /// options are added to what the builder has.
    pub fn start_with(masters: usize, replicas_per_master: usize, builder: impl Fn(usize) -> Builder) -> Cluster {
        assert!(masters >= 3, "redis-cli --cluster create needs at least 3 masters");
        let n = masters * (1 + replicas_per_master);
        let nodes: Vec<Server> = (0..n)
            .map(|i| {
                builder(i)
                    .arg("cluster-enabled", "yes")
                    .arg("cluster-config-file", "nodes.conf")
                    .arg("cluster-node-timeout", &NODE_TIMEOUT_MS.to_string())
                    // The bus port is port + 10000 by default, which may be
                    // taken or beyond 65535.
                    .cluster_bus()
                    // A replica may always be promoted, however long its
                    // link was down (tests kill masters on purpose).
                    .arg("cluster-replica-validity-factor", "0")
                    // Keep the topology the test built: no replica moves to
                    // an orphaned master by itself.
                    .arg("cluster-allow-replica-migration", "no")
                    .start()
            })
            .collect();
        let ids = nodes
            .iter()
            .map(|s| redis::cmd("CLUSTER").arg("MYID").query::<String>(&mut s.conn()).expect("CLUSTER MYID"))
            .collect();
        let cluster = Cluster { nodes, ids, alive: vec![true; n] };
        let mut create = cli();
        create.arg("--cluster").arg("create");
        for s in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", s.port()));
        }
        create.args(["--cluster-replicas", &replicas_per_master.to_string(), "--cluster-yes"]);
        run_cli(create, "redis-cli --cluster create");
        cluster.wait_ok();
        cluster.wait_until("every replica's link to its master is up", |c| {
            c.live().all(|i| {
                let info: String =
                    redis::cmd("INFO").arg("replication").query(&mut c.nodes[i].conn()).unwrap_or_default();
                info.contains("role:master") || info.contains("master_link_status:up")
            })
        });
        cluster
    }

    /// Node `i` (by start order), dead or alive.
    pub fn node(&self, i: usize) -> &Server {
        &self.nodes[i]
    }

    /// Node `i`'s id.
    pub fn id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// How many nodes were started.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has at least three nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The index of the node with this id.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    /// Indexes of the nodes not killed.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.alive[i])
    }

    /// `redis://127.0.0.1:PORT/` of every live node: seed nodes for a
    /// cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.live().map(|i| self.nodes[i].url()).collect()
    }

    /// What live node `i` announces about itself (its `myself` line of
    /// `CLUSTER NODES`).
    pub fn view(&self, i: usize) -> NodeView {
        let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut self.nodes[i].conn()).expect("CLUSTER NODES");
        let line = text
            .lines()
            .find(|l| l.split(' ').nth(2).is_some_and(|f| f.split(',').any(|f| f == "myself")))
            .expect("a myself line");
        parse_node_line(line)
    }

    /// Indexes of live nodes that are masters serving at least one slot,
    /// in index order.
    pub fn masters(&self) -> Vec<usize> {
        self.live()
            .filter(|&i| {
                let v = self.view(i);
                v.master && !v.slots.is_empty()
            })
            .collect()
    }

    /// Indexes of the live replicas of master `m`.
    pub fn replicas_of(&self, m: usize) -> Vec<usize> {
        self.live().filter(|&i| self.view(i).master_id.as_deref() == Some(self.id(m))).collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, hash tags included).
    pub fn slot_of(&self, key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    /// The live master that serves `slot`, as it announces itself.
    pub fn owner_of_slot(&self, slot: u16) -> usize {
        self.live()
            .find(|&i| {
                let v = self.view(i);
                v.master && v.slots.contains(&slot)
            })
            .unwrap_or_else(|| panic!("no live master serves slot {slot}"))
    }

    /// The live master that serves `key`'s slot.
    pub fn owner_of(&self, key: &str) -> usize {
        self.owner_of_slot(self.slot_of(key))
    }

    /// A key `"{prefix}…"`-free name starting with `prefix` whose slot is
    /// `slot` (found by trying suffixes; CRC16 is cheap).
    pub fn key_in_slot(&self, prefix: &str, slot: u16) -> String {
        key_in_slot(prefix, slot)
    }

    /// A key starting with `prefix` served by master `m`.
    pub fn key_on(&self, prefix: &str, m: usize) -> String {
        let slots = self.view(m).slots;
        assert!(!slots.is_empty(), "node {m} serves no slot");
        (0u64..)
            .map(|n| format!("{prefix}{n}"))
            .find(|k| slots.binary_search(&key_slot(k.as_bytes())).is_ok())
            .expect("some key lands there")
    }

    /// Moves `slot` to master `to` by hand, the way `redis-cli --cluster
    /// reshard` does: [`open_slot_move`](Self::open_slot_move),
    /// [`migrate_slot_keys`](Self::migrate_slot_keys),
    /// [`close_slot_move`](Self::close_slot_move), then waits until every
    /// live node sees `to` as the owner.
    pub fn move_slot(&self, slot: u16, to: usize) {
        let from = self.owner_of_slot(slot);
        if from == to {
            return;
        }
        self.open_slot_move(slot, from, to);
        self.migrate_slot_keys(slot, from, to);
        self.close_slot_move(slot, from, to);
    }

    /// Step 1 of a slot move: `SETSLOT slot IMPORTING` on `to`, then
    /// `MIGRATING` on `from` (this order, so no `ASK` points at a node not
    /// yet importing). From here a missing key's command on `from` gets
    /// `-ASK slot to`.
    pub fn open_slot_move(&self, slot: u16, from: usize, to: usize) {
        self.setslot(to, slot, "IMPORTING", Some(from));
        self.setslot(from, slot, "MIGRATING", Some(to));
    }

    /// Step 2: `MIGRATE` every key of the slot from `from` to `to` (in
    /// batches of 100 with `KEYS`, as `redis-cli --cluster` does). A
    /// `MIGRATE` that times out talking to the target (`IOERR`, a loaded
    /// machine) leaves its keys on the source, and is tried again until
    /// [`SETTLE_TIMEOUT`].
    pub fn migrate_slot_keys(&self, slot: u16, from: usize, to: usize) {
        let mut con = self.nodes[from].conn();
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let keys: Vec<Vec<u8>> =
                redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(100).query(&mut con).expect("GETKEYSINSLOT");
            if keys.is_empty() {
                return;
            }
            let mut m = redis::cmd("MIGRATE");
            m.arg("127.0.0.1").arg(self.nodes[to].port()).arg("").arg(0).arg(5000).arg("KEYS").arg(&keys);
            let r: redis::RedisResult<redis::Value> = m.query(&mut con);
            match r {
                Ok(_) => {}
                Err(e) if e.code() == Some("IOERR") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("MIGRATE of slot {slot} from node {from} to {to}: {e}"),
            }
        }
    }

    /// Step 3: `SETSLOT slot NODE to` on `to`, then on `from`, then on the
    /// other masters (as redis-cli does), and wait until every live node
    /// agrees.
    pub fn close_slot_move(&self, slot: u16, from: usize, to: usize) {
        self.setslot(to, slot, "NODE", Some(to));
        self.setslot(from, slot, "NODE", Some(to));
        for m in self.masters() {
            if m != from && m != to {
                self.setslot(m, slot, "NODE", Some(to));
            }
        }
        self.wait_slot_owner(slot, to);
    }

    /// `CLUSTER SETSLOT` on node `on`. Valkey 8+ has a master's replicas
    /// apply it first and answers `NOREPLICAS` when they have not confirmed
    /// within 2 s (a loaded machine): the command changes nothing then on
    /// the master and is idempotent, so it is sent again, until
    /// [`SETTLE_TIMEOUT`].
    fn setslot(&self, on: usize, slot: u16, sub: &str, node: Option<usize>) {
        let mut c = redis::cmd("CLUSTER");
        c.arg("SETSLOT").arg(slot).arg(sub);
        if let Some(n) = node {
            c.arg(self.id(n));
        }
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let r: redis::RedisResult<()> = c.query(&mut self.nodes[on].conn());
            match r {
                Ok(()) => return,
                Err(e) if e.code() == Some("NOREPLICAS") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("CLUSTER SETSLOT {slot} {sub} on node {on}: {e}"),
            }
        }
    }

    /// Moves the first `count` slots of master `from` to master `to` with
    /// `redis-cli --cluster reshard` (which takes a source's slots from its
    /// lowest), asserts it exits 0, waits until all nodes agree, and returns
    /// the slots moved.
    pub fn reshard(&self, from: usize, to: usize, count: usize) -> Vec<u16> {
        let moved: Vec<u16> = self.view(from).slots.into_iter().take(count).collect();
        let mut c = cli();
        c.arg("--cluster").arg("reshard").arg(format!("127.0.0.1:{}", self.nodes[to].port()));
        c.args([
            "--cluster-from",
            self.id(from),
            "--cluster-to",
            self.id(to),
            "--cluster-slots",
            &count.to_string(),
            "--cluster-yes",
        ]);
        run_cli(c, "redis-cli --cluster reshard");
        for &s in &moved {
            self.wait_slot_owner(s, to);
        }
        moved
    }

    /// Waits until every live node's view has `slot` served by `to`, with
    /// no slot half-moved, and the cluster is ok.
    pub fn wait_slot_owner(&self, slot: u16, to: usize) {
        self.wait_until(&format!("every node sees slot {slot} served by node {to}"), |c| {
            c.live().all(|i| {
                let Ok(slots) = redis::cmd("CLUSTER").arg("SLOTS").query::<Vec<redis::Value>>(&mut c.nodes[i].conn())
                else {
                    return false;
                };
                slots_owner(&slots, slot) == Some(c.nodes[to].port())
            })
        });
        self.wait_ok();
    }

    /// Whether the nodes have atomic slot migration (`CLUSTER
    /// MIGRATESLOTS`: Valkey 9; Redis 8.4's `CLUSTER MIGRATION` is not
    /// driven here).
    pub fn has_atomic_migration(&self) -> bool {
        let i = self.live().next().expect("a live node");
        let help: Vec<String> = redis::cmd("CLUSTER").arg("HELP").query(&mut self.nodes[i].conn()).unwrap_or_default();
        help.iter().any(|l| l.contains("MIGRATESLOTS"))
    }

    /// `CLUSTER MIGRATESLOTS SLOTSRANGE first last NODE <to>` on the
    /// slots' owner: the server's reply (it only starts the migration).
    pub fn start_atomic_migration(&self, first: u16, last: u16, to: usize) -> redis::RedisResult<()> {
        let from = self.owner_of_slot(first);
        redis::cmd("CLUSTER")
            .arg("MIGRATESLOTS")
            .arg("SLOTSRANGE")
            .arg(first)
            .arg(last)
            .arg("NODE")
            .arg(self.id(to))
            .query(&mut self.nodes[from].conn())
    }

    /// Node `i`'s slot migration jobs (`CLUSTER GETSLOTMIGRATIONS`),
    /// newest first; empty where the server has none or no such command.
    pub fn slot_migrations(&self, i: usize) -> Vec<SlotMigration> {
        let jobs: Vec<redis::Value> =
            redis::cmd("CLUSTER").arg("GETSLOTMIGRATIONS").query(&mut self.nodes[i].conn()).unwrap_or_default();
        jobs.iter().filter_map(parse_migration).collect()
    }

    /// The newest job of node `i` for exactly `first..=last`, if any.
    pub fn slot_migration(&self, i: usize, first: u16, last: u16) -> Option<SlotMigration> {
        let ranges = format!("{first}-{last}");
        self.slot_migrations(i).into_iter().find(|j| j.slot_ranges == ranges)
    }

    /// Moves slots `first..=last` (all of one master) to master `to` with
    /// `CLUSTER MIGRATESLOTS`, and waits until the source's export job
    /// succeeded and every live node sees `to` as their owner. Panics if
    /// the server refuses to start it or the job fails.
    pub fn atomic_move_slots(&self, first: u16, last: u16, to: usize) {
        let from = self.owner_of_slot(first);
        assert_ne!(from, to, "slots {first}-{last} are on node {to} already");
        let before = self.slot_migration(from, first, last).map(|j| j.name);
        self.start_atomic_migration(first, last, to)
            .unwrap_or_else(|e| panic!("CLUSTER MIGRATESLOTS {first}-{last} from node {from} to {to}: {e}"));
        let mut job = None;
        self.wait_until(&format!("the export of slots {first}-{last} from node {from} finished"), |c| {
            job = c.slot_migration(from, first, last).filter(|j| Some(&j.name) != before.as_ref() && j.finished());
            job.is_some()
        });
        let job = job.expect("found above");
        assert_eq!(job.state, "success", "migration of slots {first}-{last} to node {to}: {job:?}");
        self.wait_slot_owner(first, to);
    }

    /// `CLUSTER CANCELSLOTMIGRATIONS` on node `i` (Valkey 9.1 takes no
    /// argument).
    pub fn cancel_atomic_migrations(&self, i: usize) -> redis::RedisResult<()> {
        redis::cmd("CLUSTER").arg("CANCELSLOTMIGRATIONS").query(&mut self.nodes[i].conn())
    }

    /// Starts migrating slots `first..=last` to master `to` and kills `to`
    /// (SIGKILL) in the middle: `to` is stopped (SIGSTOP) first, so the
    /// source connects and sends its handshake but the migration cannot
    /// finish; once the source's job is past connecting, `to` is killed.
    /// Waits until the source's job failed and the cluster promoted a
    /// replica of `to` (it needs one) and is ok again. Returns the
    /// source's job and the promoted node.
    pub fn atomic_migration_to_killed_target(&mut self, first: u16, last: u16, to: usize) -> (SlotMigration, usize) {
        let from = self.owner_of_slot(first);
        // Read before `to` stops: a stopped node answers nothing.
        let (replicas, slots) = (self.replicas_of(to), self.view(to).slots);
        assert!(!replicas.is_empty(), "node {to} has no live replica to promote");
        self.nodes[to].set_paused(true);
        self.alive[to] = false; // no more questions to it
        self.start_atomic_migration(first, last, to)
            .unwrap_or_else(|e| panic!("CLUSTER MIGRATESLOTS {first}-{last} from node {from} to {to}: {e}"));
        self.wait_until(&format!("node {from} connected to stopped node {to}"), |c| {
            c.slot_migration(from, first, last).is_some_and(|j| j.state != "connecting" || j.finished())
        });
        self.kill_node(to);
        let mut job = None;
        self.wait_until(&format!("the export of slots {first}-{last} failed"), |c| {
            job = c.slot_migration(from, first, last).filter(SlotMigration::finished);
            job.is_some()
        });
        let promoted = self.await_promotion(to, &replicas, &slots);
        (job.expect("found above"), promoted)
    }

    /// A manual failover of master `m`: `CLUSTER FAILOVER` (`mode`: `""`,
    /// `"FORCE"` or `"TAKEOVER"`) on its first replica; waits until that
    /// replica serves `m`'s slots, `m` has become its replica, and the
    /// cluster is ok. Returns the promoted node.
    pub fn failover(&self, m: usize, mode: &str) -> usize {
        let replica = *self.replicas_of(m).first().unwrap_or_else(|| panic!("node {m} has no live replica"));
        let slots = self.view(m).slots;
        // A master ignores a manual failover request (MFSTART) from a node
        // it does not yet know as its replica, and the replica gives up
        // after 5 s: right after a failover or a rejoin, wait for the
        // master's view to catch up.
        self.wait_until(&format!("master {m} knows node {replica} as its replica"), |c| {
            c.seen_by(m, replica).is_some_and(|v| v.master_id.as_deref() == Some(c.id(m)))
        });
        self.wait_replicas_linked();
        let swapped = |c: &Cluster| {
            let v = c.view(replica);
            v.master && v.slots == slots && c.view(m).master_id.as_deref() == Some(c.id(replica))
        };
        // A manual failover gives up after 5 s when the replica does not
        // catch up with its paused master in time (e.g. on a loaded
        // machine); then it is asked again.
        for attempt in 1..=4 {
            let mut c = redis::cmd("CLUSTER");
            c.arg("FAILOVER");
            if !mode.is_empty() {
                c.arg(mode);
            }
            let r: redis::RedisResult<()> = c.query(&mut self.nodes[replica].conn());
            r.unwrap_or_else(|e| panic!("CLUSTER FAILOVER {mode} on node {replica}: {e}"));
            if attempt == 4 {
                self.wait_until(&format!("node {replica} replaced master {m}"), swapped);
            } else if poll(Duration::from_secs(7), || swapped(self)) {
                break;
            }
        }
        for &s in slots.first().iter().chain(slots.last().iter()) {
            self.wait_slot_owner(*s, replica);
        }
        self.wait_until(&format!("node {replica} knows node {m} as its replica"), |c| {
            c.seen_by(replica, m).is_some_and(|v| v.master_id.as_deref() == Some(c.id(replica)))
        });
        self.wait_replicas_linked();
        replica
    }

    /// What live node `by` believes about node `of` (its line for `of` in
    /// `CLUSTER NODES`).
    pub fn seen_by(&self, by: usize, of: usize) -> Option<NodeView> {
        let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut self.nodes[by].conn()).ok()?;
        text.lines().find(|l| l.starts_with(self.id(of))).map(parse_node_line)
    }

    /// Kills node `i` with SIGKILL (no save, no goodbye to the cluster).
    pub fn kill_node(&mut self, i: usize) {
        self.nodes[i].kill();
        self.alive[i] = false;
    }

    /// Kills master `m` with SIGKILL and waits until the cluster has
    /// promoted one of its replicas and is ok again. Returns the promoted node.
    pub fn kill_master(&mut self, m: usize) -> usize {
        let replicas = self.replicas_of(m);
        assert!(!replicas.is_empty(), "node {m} has no live replica to promote");
        let slots = self.view(m).slots;
        self.kill_node(m);
        self.await_promotion(m, &replicas, &slots)
    }

    /// Waits until one of `replicas` of killed node `m` is a master with
    /// its `slots` and the cluster sends the first of them there; returns it.
    fn await_promotion(&mut self, m: usize, replicas: &[usize], slots: &[u16]) -> usize {
        let mut promoted = None;
        self.wait_until(&format!("a replica of killed node {m} promoted"), |c| {
            promoted = replicas.iter().copied().find(|&r| {
                let v = c.view(r);
                v.master && v.slots == slots
            });
            promoted.is_some()
        });
        let promoted = promoted.expect("found above");
        self.wait_slot_owner(slots[0], promoted);
        promoted
    }

    /// Starts killed node `i` again on its port and directory; it rejoins
    /// from its `nodes.conf` (a former master as a replica of whoever took
    /// its slots). Waits until the cluster is ok and replicas are linked.
    pub fn restart_node(&mut self, i: usize) {
        self.nodes[i].restart();
        self.alive[i] = true;
        self.wait_agreed();
        self.wait_ok();
        self.wait_replicas_linked();
        // A rejoined replica: its master must know it before it can take
        // part in a manual failover.
        if let Some(m) = self.view(i).master_id.and_then(|id| self.index_of(&id)) {
            self.wait_until(&format!("node {m} knows rejoined node {i} as its replica"), |c| {
                c.seen_by(m, i).is_some_and(|v| v.master_id.as_deref() == Some(c.id(m)))
            });
        }
    }

    /// Waits until every live node says `cluster_state:ok`, all slots ok and
    /// every other live node known.
    pub fn wait_ok(&self) {
        let n = self.live().count();
        self.wait_until("cluster_state:ok on every node", |c| {
            c.live().all(|i| {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c.nodes[i].conn()).unwrap_or_default();
                let field = |name: &str| {
                    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim).unwrap_or("")
                };
                field("cluster_state") == "ok"
                    && field("cluster_slots_ok") == "16384"
                    && field("cluster_known_nodes").parse::<usize>().is_ok_and(|k| k >= n)
            })
        });
    }

    /// Waits until every live node gives the same slot map (`CLUSTER SLOTS`:
    /// ranges and their masters' ports), e.g. after a node rejoined with a
    /// stale view of its own.
    pub fn wait_agreed(&self) {
        self.wait_until("every node gives the same CLUSTER SLOTS", |c| {
            let maps: Vec<Vec<(i64, i64, Option<u16>)>> = c
                .live()
                .map(|i| {
                    let slots: Vec<redis::Value> =
                        redis::cmd("CLUSTER").arg("SLOTS").query(&mut c.nodes[i].conn()).unwrap_or_default();
                    let mut m: Vec<_> = slots.iter().filter_map(slot_range).collect();
                    m.sort();
                    m
                })
                .collect();
            maps.windows(2).all(|w| w[0] == w[1]) && maps.first().is_some_and(|m| !m.is_empty())
        });
    }

    fn wait_replicas_linked(&self) {
        self.wait_until("every replica's link up", |c| {
            c.live().all(|i| {
                let info: String =
                    redis::cmd("INFO").arg("replication").query(&mut c.nodes[i].conn()).unwrap_or_default();
                info.contains("role:master") || info.contains("master_link_status:up")
            })
        });
    }

    /// Polls `f` every 20 ms until it holds; panics after 30 s, naming `what`.
    pub fn wait_until(&self, what: &str, mut f: impl FnMut(&Cluster) -> bool) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while Instant::now() < deadline {
            if f(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let views: Vec<String> = self
            .live()
            .map(|i| {
                let v = self.view(i);
                let role = if v.master {
                    "master".to_string()
                } else {
                    format!("replica of {:?}", v.master_id.as_deref().and_then(|id| self.index_of(id)))
                };
                let log = std::fs::read_to_string(self.nodes[i].dir().join("server.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(6).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!(
                    "node {i}: {role}, epoch {}, {} slots, moving {:?}; log:\n    {}",
                    v.config_epoch,
                    v.slots.len(),
                    v.moving,
                    tail.join("\n    ")
                )
            })
            .collect();
        panic!("cluster: timed out waiting until {what}\n{}", views.join("\n"));
    }
}

/// Polls `f` every 20 ms for up to `within`; whether it came true.
fn poll(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// One range of a `CLUSTER SLOTS` reply: first slot, last slot, the
/// master's port.
fn slot_range(range: &redis::Value) -> Option<(i64, i64, Option<u16>)> {
    use redis::Value;
    let Value::Array(items) = range else { return None };
    let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(master))) =
        (items.first(), items.get(1), items.get(2))
    else {
        return None;
    };
    let port = match master.get(1) {
        Some(Value::Int(p)) => u16::try_from(*p).ok(),
        _ => None,
    };
    Some((*lo, *hi, port))
}

/// The owner's port of `slot` in a `CLUSTER SLOTS` reply.
fn slots_owner(slots: &[redis::Value], slot: u16) -> Option<u16> {
    slots.iter().filter_map(slot_range).find(|(lo, hi, _)| (*lo..=*hi).contains(&i64::from(slot))).and_then(|r| r.2)
}

fn parse_node_line(line: &str) -> NodeView {
    let f: Vec<&str> = line.split(' ').collect();
    let flags: Vec<&str> = f[2].split(',').collect();
    let mut slots = Vec::new();
    let mut moving = Vec::new();
    for s in &f[8..] {
        if let Some(inner) = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            // [slot->-id] migrating, [slot-<-id] importing
            if let Some((n, _)) = inner.split_once("->-") {
                moving.push((n.parse().expect("slot"), false));
            } else if let Some((n, _)) = inner.split_once("-<-") {
                moving.push((n.parse().expect("slot"), true));
            }
        } else if let Some((a, b)) = s.split_once('-') {
            let (a, b): (u16, u16) = (a.parse().expect("slot"), b.parse().expect("slot"));
            slots.extend(a..=b);
        } else if !s.is_empty() {
            slots.push(s.parse().expect("slot"));
        }
    }
    NodeView {
        id: f[0].to_string(),
        master: flags.contains(&"master"),
        master_id: (f[3] != "-").then(|| f[3].to_string()),
        config_epoch: f[6].parse().expect("config epoch"),
        slots,
        moving,
    }
}

/// One job of a `CLUSTER GETSLOTMIGRATIONS` reply (a map as a flat array
/// in RESP2).
fn parse_migration(job: &redis::Value) -> Option<SlotMigration> {
    use redis::Value;
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    let pairs: Vec<(String, String)> = match job {
        Value::Array(items) => {
            items.chunks(2).filter_map(|p| Some((text(p.first()?)?, text(p.get(1)?).unwrap_or_default()))).collect()
        }
        Value::Map(items) => items.iter().filter_map(|(k, v)| Some((text(k)?, text(v).unwrap_or_default()))).collect(),
        _ => return None,
    };
    let field = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    Some(SlotMigration {
        name: field("name")?,
        operation: field("operation")?,
        slot_ranges: field("slot_ranges")?,
        state: field("state")?,
        message: field("message").unwrap_or_default(),
    })
}

fn cli() -> Command {
    Command::new(std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".into()))
}

fn run_cli(mut c: Command, what: &str) {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e} (install redis-tools)"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub use redis_lock_rules::cluster::key_slot;

/// A key starting with `prefix` whose slot is `slot`.
pub fn key_in_slot(prefix: &str, slot: u16) -> String {
    (0u64..).map(|n| format!("{prefix}{n}")).find(|k| key_slot(k.as_bytes()) == slot).expect("every slot is reachable")
}
