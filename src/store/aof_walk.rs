//! The node state an AOF rewrite without the RDB preamble would drop
//! (docs/sessions.md, "Persistence"): the sessions, their holds and
//! revoked holds, the revoked keys' notes and the fence mark live outside
//! keys (RDB aux data), and a rewrite with `aof-use-rdb-preamble no`
//! writes keys only. So after such a rewrite forks, the node restates
//! that state as the entries that replicate its changes anyway
//! (`SESSION.APPLY GRANT`, `END`, `ATTACH`, `REVOKEHOLD`, `NOTE`,
//! `EVICTHOLD`, and `LOCK.FENCEFLOOR`): Redis opened the new incremental file before the
//! fork, so they land after the new base, and whatever changes later is
//! replicated after them as usual. (`rewriteAppendOnlyFileBackground`
//! calls `openNewIncrAofForAppend` before `redisFork`, which sets the
//! child's type and then fires `FORK_CHILD_BORN` in the parent: read in
//! redis 7.0.15's and valkey's sources; `tests/aof_rewrite.rs` passes on
//! redis 7.0 and 8.2, valkey 8.1 and 9.1.) The old base and increments stay the
//! AOF until the rewrite is done.
//!
//! The walk runs in bounded slices from the sessions' timer
//! (`crate::blocked::session_end`), resuming from a cursor: the next
//! session slot (a session keeps its slot in the table's chunks while it
//! is there: `Sessions::walk_from`), the session whose holds it is at and
//! the last hold restated (the next slice reads the holds after it), the
//! last revoked hold, the last noted key, the last reason, the last
//! evicted hold's note. No step copies
//! a table: each reads at most 1024 slots or 8 entries. Each entry says
//! the state when it is sent, and what changes between slices is
//! replicated after it as usual: a session granted after the fork is in
//! the new AOF through its own `GRANT` (restated again if it took a free
//! slot ahead of the cursor: the same state); one that ends before the
//! walk reaches it is restated as `GRANT` then `END` (never alive after
//! its end), or not at all once forgotten (its own `END` and `FORGET` are
//! earlier in the file); one that ends after is ended by its own `END`,
//! after the walk's `GRANT`. A hold attached after the fork may be
//! restated again (an `ATTACH` of a hold already noted changes nothing).
//! A new rewrite restarts the walk.
//!
//! A replica walks after its own rewrite too (a full resync's included:
//! Redis restarts the AOF with a rewrite after it), into its own AOF only
//! (`crate::server::aof`): its state is its master's at that point of the
//! stream, and the master's entries follow in its AOF as they apply. The
//! master's walk reaches the replica as well, where its entries change
//! nothing: the same state, applied again (no counter counts an applied
//! entry). Not done: a restart from the rewritten AOF before the walk
//! ended (`INFO lock`'s `lock_aof_walking`) misses what was not restated
//! yet.

use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::boundary::ctx::Ctx;
use crate::server::aof;
use crate::server::counters::{AOF_WALKING, AOF_WALKS};
use crate::server::events::DbEvent;
use crate::server::revoked::{self, Holder};
use crate::store::hold_key::HoldKey;
use crate::store::session::{self, table};
use crate::store::{fence, session_evicted, session_gone, session_revoked};
use redis_lock_rules::session::{Id, SlotWalk};

/// Where a walk is.
enum Phase {
    Fence,
    /// The next session slot to look at, and the session whose holds
    /// are being restated with the last hold restated.
    Sessions {
        slot: usize,
        at: Option<(Id, Option<HoldKey>)>,
    },
    Revoked {
        after: Option<(i64, Id, HoldKey)>,
    },
    Notes {
        after: Option<(c_int, Vec<u8>)>,
    },
    Reasons {
        after: Option<Holder>,
    },
    Evicted {
        after: Option<(i64, Id, HoldKey)>,
    },
}

static WALK: Mutex<Option<Phase>> = Mutex::new(None);

fn walk() -> MutexGuard<'static, Option<Phase>> {
    WALK.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a slice may do: entries, key-name bytes, time.
pub struct Budget {
    pub entries: usize,
    pub bytes: usize,
    pub time: Duration,
}

/// The listener's part: a child was forked. True when it is an AOF
/// rewrite without the preamble, with the AOF on, and a walk (re)starts:
/// the caller arms the sessions' timer. A master that becomes a replica
/// walks on (its state is still what its AOF lacks; a full resync stops
/// the AOF and restarts it with a new rewrite, which restarts the walk).
pub fn on_db_event(ctx: Ctx, ev: &DbEvent) -> bool {
    match ev {
        DbEvent::Forked if aof::rewrite_without_preamble(ctx) => {
            *walk() = Some(Phase::Fence);
            AOF_WALKS.add();
            AOF_WALKING.store(1, Ordering::Relaxed);
            true
        }
        _ => false,
    }
}

/// Whether a walk is under way.
pub fn walking() -> bool {
    AOF_WALKING.load(Ordering::Relaxed) != 0
}

/// One slice of the walk, within `budget` (at least one entry); whether
/// work remains. Writes not paused (the caller's check).
pub fn step(ctx: Ctx, budget: Budget) -> bool {
    if !walking() {
        return false;
    }
    let started = Instant::now();
    let mut w = walk();
    let Some(phase) = w.take() else { return false };
    let mut slice = Slice { ctx, budget, started, entries: 0, bytes: 0 };
    let next = slice.run(phase);
    let more = next.is_some();
    *w = next;
    drop(w);
    if !more {
        AOF_WALKING.store(0, Ordering::Relaxed);
    }
    more
}

/// Holds (revoked holds, notes, reasons) read at a time.
const CHUNK: usize = 8;
/// Session slots looked at in one step (free ones are skipped): 40 KiB.
const SLOTS: usize = 1024;

struct Slice {
    ctx: Ctx,
    budget: Budget,
    started: Instant,
    entries: usize,
    bytes: usize,
}

impl Slice {
    fn spent(&self) -> bool {
        self.entries > 0
            && (self.entries >= self.budget.entries
                || self.bytes >= self.budget.bytes
                || self.started.elapsed() >= self.budget.time)
    }

    /// One entry sent (or one step that sent none), of `bytes` key bytes.
    fn sent(&mut self, bytes: usize) {
        self.entries += 1;
        self.bytes += bytes;
    }

    /// Runs phases until the budget is spent: where the walk is then
    /// (`None`: done).
    fn run(&mut self, mut phase: Phase) -> Option<Phase> {
        loop {
            phase = match phase {
                Phase::Fence => {
                    let mark = fence::mark();
                    if mark > 0 {
                        fence::replicate_floor(self.ctx, mark);
                        self.sent(0);
                    }
                    Phase::Sessions { slot: 0, at: None }
                }
                Phase::Sessions { slot, at } => match self.sessions(slot, at) {
                    Ok(done) => done,
                    Err(paused) => return Some(paused),
                },
                Phase::Revoked { after } => match self.revoked(after) {
                    Ok(done) => done,
                    Err(paused) => return Some(paused),
                },
                Phase::Notes { after } => match self.notes(after) {
                    Ok(done) => done,
                    Err(paused) => return Some(paused),
                },
                Phase::Reasons { after } => match self.reasons(after) {
                    Ok(next) => next,
                    Err(left) => return Some(left),
                },
                Phase::Evicted { after } => return self.evicted(after),
            };
            if self.spent() {
                return Some(phase);
            }
        }
    }

    /// The sessions, slot by slot: each one's grant (and end), then its
    /// holds. `Ok`: the next phase; `Err`: where to resume.
    fn sessions(&mut self, mut slot: usize, mut at: Option<(Id, Option<HoldKey>)>) -> Result<Phase, Phase> {
        loop {
            if self.spent() {
                return Err(Phase::Sessions { slot, at });
            }
            let Some((id, after)) = at.take() else {
                // (The table's lock is not held past the step.)
                let step = table().walk_from(slot, SLOTS);
                match step {
                    SlotWalk::At { slot: found, id } => {
                        slot = found + 1;
                        match self.restate_session(id) {
                            true => at = Some((id, None)),
                            false => self.sent(0),
                        }
                    }
                    // Free slots (sessions gone): a step all the same.
                    SlotWalk::Skipped { next } => {
                        slot = next;
                        self.sent(0);
                    }
                    SlotWalk::End => return Ok(Phase::Revoked { after: None }),
                }
                continue;
            };
            let holds: Vec<HoldKey> =
                table().holds_after(id, after.as_ref(), CHUNK).iter().map(|h| h.to_key()).collect();
            let Some(last) = holds.last().cloned() else { continue };
            for hold in &holds {
                session::replicate_attach(self.ctx, id, hold);
                self.sent(hold.weight());
            }
            at = Some((id, Some(last)));
        }
    }

    /// `id`'s grant with its deadline (and its end, if it ended); false
    /// when it is gone.
    fn restate_session(&mut self, id: Id) -> bool {
        let Some((ttl, lock_delay, deadline, ended)) =
            table().info(id, 0).map(|i| (i.ttl, i.lock_delay, i.deadline, i.ended))
        else {
            return false;
        };
        session::replicate_grant(self.ctx, id, ttl, lock_delay, deadline);
        self.sent(0);
        if let Some(e) = ended {
            // A revoke's reason too, while this node remembers it.
            let why = session_gone::get(id, self.ctx.now_ms()).and_then(|g| g.why);
            session::replicate_end(self.ctx, id, (e.at, e.reason, why.as_deref()));
            self.sent(0);
        }
        // An ended session's holds are still to release: restated after its
        // end (an applied `ATTACH` takes a hold of an ended session).
        true
    }

    fn revoked(&mut self, mut after: Option<(i64, Id, HoldKey)>) -> Result<Phase, Phase> {
        loop {
            if self.spent() {
                return Err(Phase::Revoked { after });
            }
            let found = session_revoked::after(after.as_ref(), CHUNK);
            if found.is_empty() {
                return Ok(Phase::Notes { after: None });
            }
            for (deadline, id, hold, reason) in found {
                let (db, name, token) = hold.split();
                self.ctx.select(db);
                let name = self.ctx.string(name);
                let token = token.map(|t| self.ctx.string(t));
                session_revoked::replicate_revoke(self.ctx, id, name, token, deadline, reason.as_bytes());
                token.into_iter().for_each(|t| self.ctx.free(t));
                self.ctx.free(name);
                self.sent(hold.weight());
                after = Some((deadline, id, hold));
            }
        }
    }

    fn notes(&mut self, mut after: Option<(c_int, Vec<u8>)>) -> Result<Phase, Phase> {
        loop {
            if self.spent() {
                return Err(Phase::Notes { after });
            }
            let found = revoked::notes_after(after.as_ref(), CHUNK);
            if found.is_empty() {
                return Ok(Phase::Reasons { after: None });
            }
            for ((db, key), deadline) in found {
                self.ctx.select(db);
                let name = self.ctx.string(&key);
                revoked::replicate_note(self.ctx, name, deadline, None);
                self.ctx.free(name);
                self.sent(key.len());
                after = Some((db, key));
            }
        }
    }

    /// The revoked holders' reasons (each with its key's note: a reason
    /// whose key has none is not restated).
    fn reasons(&mut self, mut after: Option<Holder>) -> Result<Phase, Phase> {
        loop {
            if self.spent() {
                return Err(Phase::Reasons { after });
            }
            let found = revoked::reasons_after(after.as_ref(), CHUNK);
            if found.is_empty() {
                return Ok(Phase::Evicted { after: None });
            }
            for ((db, key, token), why) in found {
                if let Some(deadline) = revoked::note_of(db, &key) {
                    self.ctx.select(db);
                    let name = self.ctx.string(&key);
                    revoked::replicate_note(self.ctx, name, deadline, Some((&token, why.as_bytes())));
                    self.ctx.free(name);
                }
                self.sent(key.len() + token.len());
                after = Some((db, key, token));
            }
        }
    }

    /// The sessions' holds lost to an eviction (`SESSION.APPLY
    /// EVICTHOLD`). The last phase.
    fn evicted(&mut self, mut after: Option<(i64, Id, HoldKey)>) -> Option<Phase> {
        loop {
            if self.spent() {
                return Some(Phase::Evicted { after });
            }
            let found = session_evicted::after(after.as_ref(), CHUNK);
            if found.is_empty() {
                return None;
            }
            for (until, id, hold, at) in found {
                let (db, name, token) = hold.split();
                self.ctx.select(db);
                session_evicted::replicate_entry(self.ctx, id, name, at, token.unwrap_or_default());
                self.sent(hold.weight());
                after = Some((until, id, hold));
            }
        }
    }
}
