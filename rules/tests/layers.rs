//! The rules' modules keep their layers (rules/README.md): each imports
//! only its own layer and those below, with no import cycle, and every
//! module is in a layer. The check is the harness's
//! (`harness/src/layers.rs`, which says what counts as an import),
//! included by path rather than as a dev-dependency: the harness depends on
//! this crate (for `cluster::key_slot`), and a dependency back would be a
//! cycle of crates.

#[path = "../../harness/src/layers.rs"]
#[allow(dead_code)]
mod layers;

use std::path::PathBuf;

use layers::{assert_layers, Layers, Sources};

/// The layers, bottom first.
const RULES: Layers = &[
    // The shared refusals and the integer arguments.
    ("errors and numbers", &["error", "number"]),
    // What a stored value is and how it is written; pure arithmetic and
    // tables with no rule of a command in them.
    ("values", &["cjson", "encode", "value", "fence", "cluster", "histogram", "scripts", "hold_key", "hold_set"]),
    // Each command's arguments.
    ("arguments", &["args", "multi"]),
    // What a command does to a key.
    (
        "decisions",
        &["lock", "holders", "lease", "election", "guard", "cluster_fence", "migration", "eviction", "revoke", "held"],
    ),
    // State kept across commands: the wait queues, the observers, hold
    // timing, LOCK.TOP's view of the queues.
    (
        "bookkeeping",
        &[
            "blocked",
            "queue",
            "observers",
            "hold_table",
            "top",
            "session",
            "session_gone",
            "session_revoked",
            "session_evicted",
            "eviction_window",
            "orphan_walk",
        ],
    ),
    ("root", &["crate"]),
];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_rules_keep_their_layers() {
    assert_layers(src(), RULES, None);
    let modules = Sources::read(src()).unwrap().modules().count();
    assert!(modules > 18, "found {modules} modules: is the source walk right?");
}

/// The check finds the circle this crate had (`args` ↔ `holders`), planted
/// again, and an import up the layers.
#[test]
fn a_planted_cycle_or_upward_import_is_found() {
    let planted = |into: &str, code: &str| {
        let mut s = Sources::read(src()).unwrap();
        s.plant(into, code);
        s.problems(RULES, None)
    };
    let p = planted("args", "fn f() -> u8 { crate::holders::TAG.len() as u8 }");
    assert!(p.iter().any(|p| p.starts_with("import cycle: args") && p.contains("holders")), "{p:?}");
    assert!(p.iter().any(|p| p.starts_with("args (layer arguments) imports holders (layer decisions")), "{p:?}");
    let p = planted("error", "use crate::ArgError;");
    assert_eq!(p, Vec::<String>::new(), "a module's own re-export is no edge");
    // Nothing below imports `queue`, so this is no cycle, only wrong.
    let p = planted("fence", "use crate::queue::MAX_TIMER_MS;");
    assert_eq!(p, ["fence (layer values) imports queue (layer bookkeeping, higher): crate::queue::MAX_TIMER_MS"]);
}
