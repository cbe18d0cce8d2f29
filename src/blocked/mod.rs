//! Layer 4, blocked clients: the one machine that blocks a client, times it
//! out, unblocks it on disconnect, checks its key when an event or timer
//! says so, and sends its answer (`machine`); and its kinds — the wait
//! queues (`waiters`: the kind and the hand-over of a freed key to its
//! queue's head; `queue`: what handlers and events see of them) and the
//! election observers (`observers`); and the sessions' timer
//! (`session_end`: it ends sessions, answers their waiting requests and
//! releases their locks in slices). A new kind of blocked client is a new
//! [`machine::Kind`], not a copy of the machine.

pub mod machine;
pub mod observers;
pub mod queue;
pub mod session_end;
pub mod waiters;
