//! The lock rules of redis-lock, with no Redis types: the module (the Redis
//! adapter), the client's script fallback and the tests all decide through
//! this crate, so a rule is written once and checked without a server.
//!
//! - [`lock`]: the decisions of LOCK.ACQUIRE / RENEW / RELEASE / TAKEOVER.
//! - [`cjson`]: what Redis's bundled cjson makes of a stored value.
//! - [`cluster`]: hash slots, and a slot's state in `CLUSTER NODES`.
//! - [`error`]: the shared refusals: [`ArgError`] (with its error reply), [`WrongType`].
//! - [`number`]: the integer arguments (ttl-ms, limits' and COUNTs' syntax).
//! - [`args`]: argument validation.
//! - [`multi`]: LOCK.ACQUIREALL's keys (`numkeys`, the limit of 64, no key twice).
//! - [`election`]: LOCK.ELECT / PROCLAIM / LEADER / OBSERVE: who leads, what wakes an observer.
//! - [`observers`]: the observers' bookkeeping (per key, grouped by the revision they saw).
//! - [`encode`]: the structured value as Go's encoding/json writes it.
//! - [`eviction`]: which memory settings evict lock keys, the refusal, the evicted holds' table.
//! - [`eviction_window`]: holds given while nothing could be evicted: the window in which an eviction may have taken one.
//! - [`fence`]: fencing token numbering.
//! - [`guard`]: LOCK.GUARD's ownership rule and the inner commands it refuses.
//! - [`histogram`]: fixed-size duration histograms (`INFO lock` percentiles).
//! - [`holders`]: semaphores and read-write locks (several holders per key).
//! - [`hold_table`]: the holds `lock.hold-timing` times, and what their ends record.
//! - [`held`]: a lock held by a session: its grant, settling it when the session ended.
//! - [`hold_key`]: one hold of a session (database, key name, holder's token) as one byte string.
//! - [`hold_set`]: a session's holds: an ordered set of those strings, back to back in small leaves.
//! - [`session`]: a node's sessions: deadlines, holds, ending in bounded slices.
//! - [`session_gone`]: the sessions a node ended lately (why each ended, for its holder).
//! - [`session_revoked`]: the revoked holds of a node's sessions, in deadline order.
//! - [`session_evicted`]: the holds of a node's sessions lost to an eviction, kept for their holders.
//! - [`lease`]: LOCKDELAY and MAXHOLD: a grant's lease fields, renewals,
//!   settling an ended lease to its tombstone, what LOCK.INFO shows.
//! - [`blocked`]: the bookkeeping every kind of blocked client shares (per key, per client, check timers).
//! - [`queue`]: the wait queues (FIFO per key) on it.
//! - [`migration`]: atomic slot migration: which server speaks which dialect, what its events ask.
//! - [`revoke`]: LOCK.REVOKE: a revocation's deadline and mark, its renewal reply.
//! - [`scripts`]: the reference Lua scripts.
//! - [`top`]: LOCK.TOP's order of contended keys.
//! - [`value`]: the structured values the module writes (elections, hold
//!   limits, lock-delays) and their tombstone.

pub mod args;
pub mod blocked;
pub mod cjson;
pub mod cluster;
pub mod cluster_fence;
pub mod election;
pub mod encode;
pub mod error;
pub mod eviction;
pub mod eviction_window;
pub mod fence;
pub mod guard;
pub mod held;
pub mod histogram;
pub mod hold_key;
pub mod hold_set;
pub mod hold_table;
pub mod holders;
pub mod lease;
pub mod lock;
pub mod migration;
pub mod multi;
pub mod number;
pub mod observers;
pub mod orphan_walk;
pub mod queue;
pub mod revoke;
pub mod scripts;
pub mod session;
pub mod session_evicted;
pub mod session_gone;
pub mod session_revoked;
pub mod top;
pub mod value;

pub use error::{ArgError, WrongType};
pub use lock::{Entry, Remaining};
