//! Atomic slot migration (Valkey 9 `CLUSTER MIGRATESLOTS`, Redis 8.4
//! `CLUSTER MIGRATION`): which server speaks which dialect, what each of
//! its server events means to the module, and which slots an event names.
//! No Redis types: the module (`src/migration.rs`) feeds the event ids, the
//! subevents and the slot ranges it reads, and acts on the answers.
//!
//! The two servers number their events differently, and the numbers
//! collide: Valkey's `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` is 19 with
//! six subevents (import/export × started/aborted/completed); Redis 8.4's
//! `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION` is 18 (import/migrate ×
//! started/failed/completed, and a module-propagate one) and its
//! `…_TRIM` is 19 (trim started/completed/background). So the module asks
//! the server which dialect it speaks (see [`Dialect::detect`]) before
//! subscribing to anything.

use crate::cluster::SlotState;

/// Valkey 9: `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`. Without
/// it, `CLUSTER MIGRATESLOTS` refuses to run while the module is loaded.
pub const VALKEY_OPTION_HANDLE_ASM: i32 = 1 << 5;

/// Valkey 9's event id (`VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION`).
pub const VALKEY_EVENT: u64 = 19;
/// Redis 8.4's event ids (`REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION`, `…_TRIM`).
pub const REDIS_EVENT: u64 = 18;
pub const REDIS_TRIM_EVENT: u64 = 19;

/// Valkey's subevents, in `valkeymodule.h`'s order.
pub mod valkey {
    pub const IMPORT_STARTED: u64 = 0;
    pub const EXPORT_STARTED: u64 = 1;
    pub const IMPORT_ABORTED: u64 = 2;
    pub const EXPORT_ABORTED: u64 = 3;
    pub const IMPORT_COMPLETED: u64 = 4;
    pub const EXPORT_COMPLETED: u64 = 5;
}

/// Redis 8.4's subevents, in `redismodule.h`'s order.
pub mod redis {
    pub const IMPORT_STARTED: u64 = 0;
    pub const IMPORT_FAILED: u64 = 1;
    pub const IMPORT_COMPLETED: u64 = 2;
    pub const MIGRATE_STARTED: u64 = 3;
    pub const MIGRATE_FAILED: u64 = 4;
    pub const MIGRATE_COMPLETED: u64 = 5;
    pub const MIGRATE_MODULE_PROPAGATE: u64 = 6;
    pub const TRIM_STARTED: u64 = 0;
    pub const TRIM_COMPLETED: u64 = 1;
    pub const TRIM_BACKGROUND: u64 = 2;
}

/// Which atomic slot migration a server has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// None (Redis 7.0–8.2, Valkey 8): nothing to declare or subscribe.
    None,
    /// Valkey 9: declare [`VALKEY_OPTION_HANDLE_ASM`], subscribe to [`VALKEY_EVENT`].
    Valkey,
    /// Redis 8.4+: subscribe to [`REDIS_EVENT`] and [`REDIS_TRIM_EVENT`];
    /// there is no option to declare.
    Redis,
}

impl Dialect {
    /// Decides from what the server says it supports: `options_all` is
    /// `RM_GetModuleOptionsAll()` (`None` where the server lacks the call,
    /// Redis 7.0), `supported(event, subevent)` is
    /// `RM_IsSubEventSupported`.
    ///
    /// Valkey 9 is the only server whose module options include bit 5
    /// (Valkey 9.1.2 answers 63; Valkey 8.1 31, Redis 8.2 15: measured).
    /// Its own `IsSubEventSupported` does not list its migration event
    /// (9.1.2 answers 0 for event 19, every subevent: measured), so a
    /// `Valkey` answer is a candidate the module confirms by subscribing
    /// to [`VALKEY_EVENT`] (`RM_SubscribeToServerEvent` refuses an event id
    /// the server does not know) before it declares the option. Redis 8.4
    /// is recognised by its event 18's seventh subevent (6, module
    /// propagate) together with a trim event (its test module asserts
    /// `IsSubEventSupported` for both). Anything else is `None`: the
    /// module then declares nothing, so an option bit an older server does
    /// not know is never set.
    pub fn detect(options_all: Option<i32>, supported: impl Fn(u64, u64) -> bool) -> Dialect {
        if options_all.is_some_and(|all| all & VALKEY_OPTION_HANDLE_ASM != 0) {
            return Dialect::Valkey;
        }
        if supported(REDIS_EVENT, redis::MIGRATE_MODULE_PROPAGATE) && supported(REDIS_TRIM_EVENT, redis::TRIM_STARTED) {
            return Dialect::Redis;
        }
        Dialect::None
    }

    /// The module option bits to declare on this server.
    pub fn options(self) -> i32 {
        match self {
            Dialect::Valkey => VALKEY_OPTION_HANDLE_ASM,
            Dialect::None | Dialect::Redis => 0,
        }
    }
}

/// What a migration event asks of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// This node starts importing slots: its next fenced grant must first
    /// bump its epoch above the source's (the rule of `SETSLOT …
    /// IMPORTING`), and its cached epoch is stale.
    ImportStarted,
    /// This node now owns the imported slots: the server bumped its epoch
    /// as it took them; the cache is stale, and the next fenced grant
    /// checks the bump again.
    ImportCompleted,
    /// The import failed or was cancelled: the server deletes what was
    /// copied; this node's epoch may have changed (re-read it).
    ImportAborted,
    /// This node gave the slots away: their waiters and observers are
    /// redirected, their timed holds forgotten.
    Exported,
    /// The source's copies of the slots' keys are being (or were) deleted
    /// (Redis 8.4's trim): their timed holds are forgotten. Idempotent with
    /// [`Step::Exported`].
    Trimmed,
    /// This node starts exporting slots: until it ends, the module
    /// replicates no command without a key (see `src/migration.rs`).
    ExportStarted,
    /// The export failed or was cancelled: the slots stay here and so does
    /// every waiter; only the export's end counts.
    ExportAborted,
    /// Nothing to do (Redis's module-propagate hook, trim completed, an
    /// unknown subevent).
    Nothing,
}

/// What `event`/`subevent` of `dialect` asks.
pub fn step(dialect: Dialect, event: u64, subevent: u64) -> Step {
    match (dialect, event, subevent) {
        (Dialect::Valkey, VALKEY_EVENT, valkey::IMPORT_STARTED) => Step::ImportStarted,
        (Dialect::Valkey, VALKEY_EVENT, valkey::IMPORT_COMPLETED) => Step::ImportCompleted,
        (Dialect::Valkey, VALKEY_EVENT, valkey::IMPORT_ABORTED) => Step::ImportAborted,
        (Dialect::Valkey, VALKEY_EVENT, valkey::EXPORT_COMPLETED) => Step::Exported,
        (Dialect::Valkey, VALKEY_EVENT, valkey::EXPORT_STARTED) => Step::ExportStarted,
        (Dialect::Valkey, VALKEY_EVENT, valkey::EXPORT_ABORTED) => Step::ExportAborted,
        (Dialect::Redis, REDIS_EVENT, redis::IMPORT_STARTED) => Step::ImportStarted,
        (Dialect::Redis, REDIS_EVENT, redis::IMPORT_COMPLETED) => Step::ImportCompleted,
        (Dialect::Redis, REDIS_EVENT, redis::IMPORT_FAILED) => Step::ImportAborted,
        (Dialect::Redis, REDIS_EVENT, redis::MIGRATE_COMPLETED) => Step::Exported,
        (Dialect::Redis, REDIS_EVENT, redis::MIGRATE_STARTED) => Step::ExportStarted,
        (Dialect::Redis, REDIS_EVENT, redis::MIGRATE_FAILED) => Step::ExportAborted,
        (Dialect::Redis, REDIS_TRIM_EVENT, redis::TRIM_STARTED | redis::TRIM_BACKGROUND) => Step::Trimmed,
        _ => Step::Nothing,
    }
}

/// Inclusive slot ranges, as the events carry them. Ranges outside
/// 0..16384 or reversed are dropped (a server never sends them; a module
/// must not trust a pointer's contents to index anything).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ranges(Vec<(u16, u16)>);

impl Ranges {
    pub fn new(ranges: impl IntoIterator<Item = (i64, i64)>) -> Ranges {
        let valid = |(a, b): (i64, i64)| (0..16384).contains(&a) && (a..16384).contains(&b);
        Ranges(ranges.into_iter().filter(|r| valid(*r)).map(|(a, b)| (a as u16, b as u16)).collect())
    }

    pub fn contains(&self, slot: u16) -> bool {
        self.0.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `0-10 20-20`, for the log.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(a, b)| format!("{a}-{b}")).collect();
        parts.join(" ")
    }
}

/// The reply a blocked client on a key of `slot` gets once the slot was
/// exported, given the slot's state as this node now reads it (`CLUSTER
/// NODES`): what Redis answers its own blocked clients
/// (`clusterRedirectBlockedClientIfNeeded`): `MOVED` to the owner,
/// `CLUSTERDOWN` for a slot nobody serves. `None`: the slot is (still)
/// served here, or is moving the old way: the client keeps waiting, and
/// the usual checks (`crate::cluster` in the module) decide later.
pub fn exported_reply(state: &SlotState, slot: u16) -> Option<String> {
    match state {
        SlotState::Elsewhere { addr } => Some(format!("MOVED {slot} {addr}")),
        SlotState::Unassigned => Some("CLUSTERDOWN Hash slot not served".to_string()),
        SlotState::Served | SlotState::Moving => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supports(list: &'static [(u64, u64)]) -> impl Fn(u64, u64) -> bool {
        move |e, s| list.iter().any(|&(le, ls)| le == e && s <= ls)
    }

    #[test]
    fn valkey_9_is_recognised_and_declares_bit_5() {
        // Valkey 9.1.2: options 63, and no event listed as supported.
        let d = Dialect::detect(Some(63), supports(&[]));
        assert_eq!(d, Dialect::Valkey);
        assert_eq!(d.options(), 1 << 5);
    }

    #[test]
    fn redis_8_4_is_recognised_and_declares_nothing() {
        // Redis 8.4: options up to bit 3, event 18 with seven subevents, 19 with three.
        let d = Dialect::detect(Some((1 << 4) - 1), supports(&[(18, 6), (19, 2)]));
        assert_eq!(d, Dialect::Redis);
        assert_eq!(d.options(), 0);
    }

    #[test]
    fn older_servers_get_neither_option_nor_subscription() {
        // Redis 7.0: no GetModuleOptionsAll, no event 18/19.
        assert_eq!(Dialect::detect(None, supports(&[(17, 2)])), Dialect::None);
        // Redis 8.2 / Valkey 8.1: options up to bit 3 or 4, no migration events.
        assert_eq!(Dialect::detect(Some(15), supports(&[(17, 2)])), Dialect::None);
        assert_eq!(Dialect::detect(Some(31), supports(&[(17, 2)])), Dialect::None);
        assert_eq!(Dialect::None.options(), 0);
        // An event 19 alone (Redis's trim) with no option bit 5 is not Valkey.
        assert_eq!(Dialect::detect(Some(15), supports(&[(19, 5)])), Dialect::None);
        // Redis's trim without its migration event is not Redis 8.4.
        assert_eq!(Dialect::detect(Some(15), supports(&[(19, 2)])), Dialect::None);
    }

    #[test]
    fn steps_per_dialect() {
        use Step::*;
        let v = |s| step(Dialect::Valkey, VALKEY_EVENT, s);
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 6].map(v),
            [ImportStarted, ExportStarted, ImportAborted, ExportAborted, ImportCompleted, Exported, Nothing]
        );
        let r = |s| step(Dialect::Redis, REDIS_EVENT, s);
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 6, 7].map(r),
            [ImportStarted, ImportAborted, ImportCompleted, ExportStarted, ExportAborted, Exported, Nothing, Nothing]
        );
        let t = |s| step(Dialect::Redis, REDIS_TRIM_EVENT, s);
        assert_eq!([0, 1, 2, 3].map(t), [Trimmed, Nothing, Trimmed, Nothing]);
        // Valkey's 19 is not Redis's trim, nor the other way round.
        assert_eq!(step(Dialect::Redis, VALKEY_EVENT, valkey::EXPORT_COMPLETED), Nothing);
        assert_eq!(step(Dialect::Valkey, REDIS_EVENT, redis::MIGRATE_COMPLETED), Nothing);
        assert_eq!(step(Dialect::None, VALKEY_EVENT, valkey::EXPORT_COMPLETED), Nothing);
    }

    #[test]
    fn ranges_contain_their_ends_and_drop_nonsense() {
        let r = Ranges::new([(0, 10), (100, 100), (20, 5), (-1, 3), (16000, 16384)]);
        assert!(r.contains(0) && r.contains(10) && r.contains(100));
        assert!(!r.contains(11) && !r.contains(99) && !r.contains(101) && !r.contains(7000));
        assert_eq!(r.describe(), "0-10 100-100");
        assert!(Ranges::new([]).is_empty());
        assert!(Ranges::new([(16383, 16383)]).contains(16383));
    }

    #[test]
    fn exported_keys_are_sent_where_the_slot_went() {
        let moved = SlotState::Elsewhere { addr: "127.0.0.1:7001".into() };
        assert_eq!(exported_reply(&moved, 42).as_deref(), Some("MOVED 42 127.0.0.1:7001"));
        assert_eq!(exported_reply(&SlotState::Unassigned, 42).as_deref(), Some("CLUSTERDOWN Hash slot not served"));
        assert_eq!(exported_reply(&SlotState::Served, 42), None);
        assert_eq!(exported_reply(&SlotState::Moving, 42), None);
    }
}
