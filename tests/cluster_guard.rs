//! LOCK.GUARD in a Redis Cluster: Redis routes it by all its keys (the lock
//! key and the inner command's, reported through the getkeys API), so it
//! behaves like a native multi-key command — `CROSSSLOT` when the keys hash
//! to different slots, `MOVED` to the slot's owner, and during a slot move
//! `ASK` when the keys have left and `TRYAGAIN` when only some have.

use redis::{Connection, Value};
use redis_lock_harness::Cluster;

fn run(c: &mut Connection, args: &[&str]) -> Result<Value, String> {
    redis::cmd(args[0]).arg(&args[1..]).query::<Value>(c).map_err(|e| match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    })
}

fn asking(c: &mut Connection) {
    let _: () = redis::cmd("ASKING").query(c).unwrap();
}

#[test]
fn the_guard_is_routed_by_every_key_like_a_native_multi_key_command() {
    let c = Cluster::start(3, 0);
    let owner = c.owner_of("job:{42}");
    let mut o = c.node(owner).conn();
    assert_eq!(run(&mut o, &["LOCK.ACQUIRE", "job:{42}", "t", "60000"]), Ok(Value::Int(1)));
    // Same hash tag: one slot, served here.
    assert_eq!(run(&mut o, &["LOCK.GUARD", "job:{42}", "t", "SET", "result:{42}", "done"]), Ok(Value::Okay));
    assert_eq!(run(&mut o, &["LOCK.GUARD", "job:{42}", "t", "MSET", "a:{42}", "1", "b:{42}", "2"]), Ok(Value::Okay));
    // An inner key in another slot, whichever node serves it.
    let foreign =
        ["result:{43}", "result:{44}", "other"].into_iter().find(|k| c.slot_of(k) != c.slot_of("job:{42}")).unwrap();
    let err = run(&mut o, &["LOCK.GUARD", "job:{42}", "t", "SET", foreign, "x"]).unwrap_err();
    assert!(err.starts_with("CROSSSLOT"), "{err}");
    let err = run(&mut o, &["LOCK.GUARD", "job:{42}", "t", "MSET", "a:{42}", "1", foreign, "2"]).unwrap_err();
    assert!(err.starts_with("CROSSSLOT"), "{err}");
    // Not held: NOTHELD, routed like any call.
    let err = run(&mut o, &["LOCK.GUARD", "job:{42}", "other", "SET", "result:{42}", "x"]).unwrap_err();
    assert!(err.starts_with("NOTHELD"), "{err}");
    // Sent to a node that does not serve the slot: MOVED to the owner.
    let elsewhere = c.masters().into_iter().find(|&m| m != owner).unwrap();
    let err =
        run(&mut c.node(elsewhere).conn(), &["LOCK.GUARD", "job:{42}", "t", "SET", "result:{42}", "x"]).unwrap_err();
    let slot = c.slot_of("job:{42}");
    assert!(
        err.starts_with(&format!("MOVED {slot} ")) && err.ends_with(&format!(":{}", c.node(owner).port())),
        "{err}"
    );
    // A key-less inner command is routed by the lock key alone.
    assert_eq!(run(&mut o, &["LOCK.GUARD", "job:{42}", "t", "PING"]), Ok(Value::SimpleString("PONG".into())));
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.GUARD")
        .arg("job:{42}")
        .arg("t")
        .arg("SET")
        .arg("result:{42}")
        .arg("v")
        .query(&mut o)
        .unwrap();
    assert_eq!(keys, ["job:{42}", "result:{42}"]);
    let value: Option<String> = redis::cmd("GET").arg("result:{42}").query(&mut o).unwrap();
    assert_eq!(value.as_deref(), Some("done"));
}

#[test]
fn while_the_slot_moves_the_guard_gets_tryagain_then_ask_and_runs_on_the_target() {
    let c = Cluster::start(3, 0);
    let from = c.owner_of("job:{7}");
    let to = c.masters().into_iter().find(|&m| m != from).unwrap();
    let slot = c.slot_of("job:{7}");
    let mut src = c.node(from).conn();
    assert_eq!(run(&mut src, &["LOCK.ACQUIRE", "job:{7}", "t", "60000"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut src, &["LOCK.GUARD", "job:{7}", "t", "SET", "result:{7}", "before"]), Ok(Value::Okay));

    c.open_slot_move(slot, from, to);
    // Every key still here: the source serves the call.
    assert_eq!(run(&mut src, &["LOCK.GUARD", "job:{7}", "t", "SET", "result:{7}", "during"]), Ok(Value::Okay));
    // One key here, one missing (it may be on the target): TRYAGAIN, and nothing ran.
    let err = run(&mut src, &["LOCK.GUARD", "job:{7}", "t", "SET", "new:{7}", "x"]).unwrap_err();
    assert!(err.starts_with("TRYAGAIN"), "{err}");

    // Both keys moved: the source sends the call to the target...
    c.migrate_slot_keys(slot, from, to);
    let err = run(&mut src, &["LOCK.GUARD", "job:{7}", "t", "SET", "result:{7}", "x"]).unwrap_err();
    assert_eq!(err, format!("ASK {slot} 127.0.0.1:{}", c.node(to).port()));
    // ...which runs it after ASKING, still checking the lock.
    let mut dst = c.node(to).conn();
    asking(&mut dst);
    let err = run(&mut dst, &["LOCK.GUARD", "job:{7}", "other", "SET", "result:{7}", "x"]).unwrap_err();
    assert!(err.starts_with("NOTHELD"), "{err}");
    asking(&mut dst);
    assert_eq!(run(&mut dst, &["LOCK.GUARD", "job:{7}", "t", "SET", "result:{7}", "after ask"]), Ok(Value::Okay));
    // Without ASKING the target redirects to the owner it knows (the source).
    let err = run(&mut dst, &["LOCK.GUARD", "job:{7}", "t", "SET", "result:{7}", "x"]).unwrap_err();
    assert!(err.starts_with("MOVED"), "{err}");

    c.close_slot_move(slot, from, to);
    assert_eq!(run(&mut dst, &["LOCK.GUARD", "job:{7}", "t", "INCR", "count:{7}"]), Ok(Value::Int(1)));
    let value: Option<String> = redis::cmd("GET").arg("result:{7}").query(&mut dst).unwrap();
    assert_eq!(value.as_deref(), Some("after ask"));
    let missing: Option<String> = redis::cmd("GET").arg("new:{7}").query(&mut dst).unwrap();
    assert_eq!(missing, None, "the refused call ran");
}
