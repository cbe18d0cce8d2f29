//! Layer 2, the server's machinery: the module's configs (`config`), its
//! counters (`counters`) and `INFO lock` (`info`, with the wait and hold
//! distributions of `timings`), the one subscription to each server event
//! and its listeners (`events`), the cluster as this node sees it
//! (`cluster`) and the fence floor it sets (`cluster_fence`), what a
//! forked child is (`aof`: an AOF rewrite without the RDB preamble). It knows no
//! lock key: it imports only the boundary.

pub mod aof;
pub mod cluster;
pub mod cluster_fence;
pub mod config;
pub mod counters;
pub mod events;
pub mod eviction;
pub mod eviction_sessions;
pub mod eviction_window;
pub mod holder_commit;
pub mod info;
pub mod migration;
pub mod revoked;
pub mod timings;
