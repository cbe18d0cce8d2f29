//! Layer 4, blocked clients: the one machine that blocks a client, times it
//! out, unblocks it on disconnect, checks its key when an event or timer
//! says so, and sends its answer (`machine`); and its kinds — the wait
//! queues (`waiters`: the kind and the hand-over of a freed key to its
//! queue's head; `claim`: what a waiter waits for; `session_waits`: the
//! waiting requests of each session; `queue`: what handlers and events see
//! of them) and the
//! election observers (`observers`); and the sessions' timer
//! (`session_end`: it ends sessions, answers their waiting requests and
//! releases their locks in slices). A new kind of blocked client is a new
//! [`machine::Kind`], not a copy of the machine.

pub mod claim;
pub mod machine;
pub mod observers;
pub mod orphan_walk;
pub mod queue;
pub mod session_end;
pub mod session_waits;
pub mod waiters;
