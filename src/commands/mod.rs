//! Layer 5, the command handlers, one file per family: parse the arguments
//! (an iterator over them, extras rejected), let the pure rules of
//! `redis-lock-rules` decide, apply the effect through the storage layer,
//! block through `crate::blocked`, reply. A usage line is each handler's
//! doc comment. Families never import each other: what two share lives in
//! a layer below.

pub mod election;
pub mod guard;
pub mod holders;
pub mod lock;
pub mod multi;
pub mod revoke;
pub mod session;
pub mod top;
