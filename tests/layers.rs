//! The module's layers (docs/repository.md, "The module's layers"): each
//! module imports only its own layer and those below, with no import cycle;
//! every module is in a layer; no file is over 500 lines; and the command
//! families never import each other. The check is the harness's
//! (`harness/src/layers.rs`, which says what counts as an import).

use std::path::PathBuf;

use redis_lock_harness::layers::{assert_layers, Layers, Sources};

/// The layers, bottom first.
const MODULE: Layers = &[
    // The edge with the server: the API, the context, the reply sender.
    ("boundary", &["boundary"]),
    // Configs, counters, INFO, events, the cluster: no lock key.
    ("server", &["server"]),
    // The keys and their replicated effects.
    ("storage", &["store"]),
    // The one blocked-client machine and its kinds.
    ("blocked", &["blocked"]),
    // The handlers, one file per family.
    ("commands", &["commands"]),
    // The wiring: the command table, the listeners, the hooks.
    ("top", &["registration", "command_info", "crate"]),
];

/// The families, each a module of `commands`: none may name another.
const FAMILIES: &[&str] = &["lock", "election", "holders", "guard", "top", "multi", "revoke", "session"];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_module_keeps_its_layers() {
    assert_layers(src(), MODULE, Some(500));
    let modules = Sources::read(src()).unwrap().modules().count();
    assert!(modules > 30, "found {modules} modules: is the source walk right?");
}

#[test]
fn command_families_never_import_each_other() {
    let edges = Sources::read(src()).unwrap().edges();
    for family in FAMILIES {
        let from = format!("commands::{family}");
        let deps = edges.get(&from).map(|d| d.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        for other in FAMILIES.iter().filter(|f| *f != family) {
            let to = format!("commands::{other}");
            assert!(!deps.contains(&to), "{from} imports {to}: what two families share goes down a layer");
        }
    }
}

/// The check finds what it is for: the circle the module had (an event
/// source naming its consumer, which imports it back), planted again, and
/// an import up the layers.
#[test]
fn a_planted_cycle_or_upward_import_is_found() {
    let planted = |into: &str, code: &str| {
        let mut s = Sources::read(src()).unwrap();
        s.plant(into, code);
        s.problems(MODULE, Some(500))
    };
    let p = planted("server::events", "fn f() { crate::blocked::queue::on_key_event; }");
    assert!(p.iter().any(|p| p.starts_with("server::events (layer server) imports blocked::queue")), "{p:?}");
    assert!(p.iter().any(|p| p.starts_with("import cycle:") && p.contains("server::events")), "{p:?}");
    let p = planted("store::fence", "fn f() { crate::commands::lock::fence_floor; }");
    assert!(p.iter().any(|p| p.contains("store::fence (layer storage) imports commands::lock")), "{p:?}");
}
