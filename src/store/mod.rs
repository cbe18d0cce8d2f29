//! Layer 3, storage: the keys the module writes and how each change is
//! replicated — the exclusive lock's string (`lock_key`) and its lease
//! (`lease`), a semaphore's or read-write lock's sorted set
//! (`holders_key`), several lock keys granted together (`lock_set`), the
//! fence mark (`fence`), and who leads an election's key (`leadership`);
//! the node's sessions (`session`: the table and its replication,
//! `hold_key`: one hold as the table keeps it, `session_rdb`: their RDB
//! aux data; `session_revoked`: their revoked holds; `session_gone`: how
//! the lately ended ones ended; `aof_walk`: that state restated after an
//! AOF rewrite without the RDB preamble). It imports the server layer and
//! the boundary.

pub mod aof_walk;
pub mod eviction_rdb;
pub mod fence;
pub mod hold_key;
pub mod holders_commit;
pub mod holders_key;
pub mod holders_orphans;
pub mod leadership;
pub mod lease;
pub mod lock_key;
pub mod lock_set;
pub mod session;
pub mod session_evicted;
pub mod session_gone;
pub mod session_rdb;
pub mod session_revoked;
