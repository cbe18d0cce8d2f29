//! `Lock::guard` / `guard_async` (LOCK.GUARD) against real servers: the
//! inner reply comes back exactly (RESP2 and RESP3), a lock held by
//! someone else writes nothing and is lost, a lock known lost or released
//! fails without a round trip, the inner command's own errors keep the lock,
//! a server without the module is `Unsupported`, a write that timed out is
//! not resent; and on a cluster, routing by the lock key's slot,
//! `CROSSSLOT`, and a slot that moved (`MOVED`) or is moving (`ASK`,
//! `TRYAGAIN`) under a client that knew the old owner.

mod support;

use std::time::Duration;

use redis::Value;
use redis_lock_client::{ClientOptions, Error, Lock, LockClient, LossReason};
use redis_lock_harness::{Cluster, Server};
use support::{eventually, ms, rt};

/// Long enough that no lock expires during a test on a loaded machine.
const TTL: Duration = Duration::from_secs(60);

fn opts() -> ClientOptions {
    ClientOptions::new().response_timeout(ms(5000)).connect_timeout(ms(5000))
}

fn client(url: &str) -> LockClient {
    LockClient::open_with(url, opts()).expect("client")
}

fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

/// `(calls, rejected_calls)` of LOCK.GUARD on this server (`INFO
/// commandstats`): what reached it, and what it redirected (`MOVED`, `ASK`).
fn guard_stats(con: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).expect("INFO commandstats");
    let Some(line) = info.lines().find_map(|l| l.strip_prefix("cmdstat_lock.guard:")) else { return (0, 0) };
    let field =
        |name: &str| line.split(',').find_map(|f| f.strip_prefix(name)?.strip_prefix('=')?.parse().ok()).unwrap_or(0);
    (field("calls"), field("rejected_calls"))
}

fn redis_code(r: Result<Value, Error>) -> String {
    match r {
        Err(Error::Redis(e)) => e.code().unwrap_or("(none)").to_string(),
        other => panic!("expected Error::Redis, got {other:?}"),
    }
}

/// A client whose replies time out quickly (connecting may take longer).
fn impatient() -> ClientOptions {
    ClientOptions::new().response_timeout(ms(500)).connect_timeout(ms(2000))
}

/// A guarded INCR whose reply does not come in time (`server` stopped):
/// `Error::Redis` with a timeout, the lock kept, and once the server runs
/// again the INCR has run once: a write whose outcome is unknown is not sent
/// again (redis-rs's cluster connection would resend it after its response
/// timeout, and the stopped server would then run every copy).
fn a_timed_out_write_is_not_resent(server: &Server, lock: &Lock, counter: &str) {
    // The connections are open before the server stops.
    assert_eq!(lock.guard(&cmd(&["GET", counter])).unwrap(), Value::Nil);
    server.set_paused(true);
    let r = lock.guard(&cmd(&["INCR", counter]));
    server.set_paused(false);
    assert!(matches!(&r, Err(Error::Redis(e)) if e.is_timeout()), "{r:?}");
    assert!(lock.is_held());
    let mut con = server.conn();
    let n = |con: &mut redis::Connection| redis::cmd("GET").arg(counter).query::<Option<i64>>(con).expect("GET");
    assert!(eventually(ms(10_000), || n(&mut con).is_some()), "the INCR sent before the stop ran");
    std::thread::sleep(ms(500));
    assert_eq!(n(&mut con), Some(1), "and ran once, never resent");
}

#[test]
fn a_held_lock_runs_the_command_and_returns_its_reply_exactly() {
    let s = Server::start();
    let mut raw = s.conn();
    let c = client(&s.url());
    let lock = c.try_acquire("lock:job", TTL).unwrap();
    assert_eq!(lock.guard(&cmd(&["SET", "result", "done"])).unwrap(), Value::Okay);
    assert_eq!(lock.guard(&cmd(&["INCR", "n"])).unwrap(), Value::Int(1));
    assert_eq!(lock.guard(&cmd(&["INCR", "n"])).unwrap(), Value::Int(2));
    assert_eq!(lock.guard(&cmd(&["GET", "result"])).unwrap(), bulk("done"));
    assert_eq!(lock.guard(&cmd(&["GET", "missing"])).unwrap(), Value::Nil);
    assert_eq!(
        lock.guard(&cmd(&["PING"])).unwrap(),
        Value::SimpleString("PONG".into()),
        "an inner command without arguments"
    );
    lock.guard(&cmd(&["HSET", "h", "f", "v"])).unwrap();
    assert_eq!(lock.guard(&cmd(&["HGETALL", "h"])).unwrap(), Value::Array(vec![bulk("f"), bulk("v")]));
    // Binary arguments pass unchanged.
    let mut bin = redis::cmd("SET");
    bin.arg("b").arg(&b"\x00\xff\r\n"[..]);
    lock.guard(&bin).unwrap();
    assert_eq!(redis::cmd("GET").arg("b").query::<Vec<u8>>(&mut raw).unwrap(), b"\x00\xff\r\n");
    // The writes landed, and the typed reading of a reply converts with `?`.
    assert_eq!(get(&mut raw, "result").as_deref(), Some("done"));
    let n: Result<i64, Error> = lock.guard(&cmd(&["GET", "n"])).and_then(|v| Ok(redis::from_redis_value(v)?));
    assert_eq!(n.unwrap(), 2);
    let wrong: Result<i64, Error> = lock.guard(&cmd(&["GET", "result"])).and_then(|v| Ok(redis::from_redis_value(v)?));
    assert!(matches!(wrong, Err(Error::Redis(_))), "{wrong:?}");
    assert!(lock.is_held());
    assert_eq!(guard_stats(&mut raw).0, 11, "one LOCK.GUARD per call");

    // RESP3: the reply as the server sent it in that protocol.
    let c3 = client(&format!("{}?protocol=resp3", s.url()));
    let lock3 = c3.try_acquire("lock:job3", TTL).unwrap();
    match lock3.guard(&cmd(&["HGETALL", "h"])).unwrap() {
        Value::Map(m) => assert_eq!(m, vec![(bulk("f"), bulk("v"))]),
        other => panic!("a RESP3 map expected, got {other:?}"),
    }
    assert_eq!(lock3.guard(&cmd(&["INCR", "n"])).unwrap(), Value::Int(3));
    assert_eq!(lock3.guard(&cmd(&["SET", "result", "again"])).unwrap(), Value::Okay);
    assert_eq!(get(&mut raw, "result").as_deref(), Some("again"));
}

#[test]
fn a_timed_out_write_is_not_sent_again() {
    let s = Server::start();
    let lock = LockClient::open_with(&s.url(), impatient()).unwrap().try_acquire("lock:job", TTL).unwrap();
    a_timed_out_write_is_not_resent(&s, &lock, "n");
}

#[test]
fn a_lock_held_by_another_writes_nothing_and_is_lost() {
    let s = Server::start();
    let mut raw = s.conn();
    let (a, b) = (client(&s.url()), client(&s.url()));
    let lock = a.try_acquire("lock:job", TTL).unwrap();
    let lost = lock.lost_signal();
    // As if it expired during a pause: gone, then granted to someone else.
    let _: () = redis::cmd("DEL").arg("lock:job").query(&mut raw).unwrap();
    let other = b.try_acquire("lock:job", TTL).unwrap();
    assert!(lock.is_held(), "nothing told this process yet");
    let r = lock.guard(&cmd(&["SET", "result", "late"]));
    assert!(matches!(&r, Err(Error::NotHeld { key }) if key == "lock:job"), "{r:?}");
    assert_eq!(get(&mut raw, "result"), None, "nothing was written");
    assert!(!lock.is_held());
    assert_eq!(lock.loss_reason(), Some(LossReason::NotOwner));
    assert_eq!(lost.reason(), Some(LossReason::NotOwner), "observers learn it");
    // The holder writes; the lost one now fails without asking the server.
    assert_eq!(other.guard(&cmd(&["SET", "result", "mine"])).unwrap(), Value::Okay);
    let before = guard_stats(&mut raw);
    assert!(matches!(lock.guard(&cmd(&["SET", "result", "late"])), Err(Error::NotHeld { .. })));
    assert_eq!(guard_stats(&mut raw), before, "no round trip for a lock known lost");
    assert!(lock.renew(TTL).unwrap_err().is_not_held());
    assert_eq!(get(&mut raw, "result").as_deref(), Some("mine"));
    assert_eq!(get(&mut raw, "lock:job").as_deref(), Some(other.token()), "the other holder's lock is untouched");
}

#[test]
fn a_released_lock_and_bad_commands_fail_before_sending() {
    let s = Server::start();
    let mut raw = s.conn();
    let c = client(&s.url());
    let lock = c.try_acquire("lock:job", TTL).unwrap();
    let empty = lock.guard(&redis::Cmd::new());
    assert!(matches!(&empty, Err(Error::InvalidArgument(m)) if m.contains("empty")), "{empty:?}");
    let mut scan = redis::cmd("SSCAN");
    scan.arg("set").cursor_arg(0);
    assert!(matches!(lock.guard(&scan), Err(Error::InvalidArgument(m)) if m.contains("cursor")));
    assert!(lock.is_held(), "bad input does not lose the lock");
    assert_eq!(guard_stats(&mut raw), (0, 0), "nothing was sent");
    lock.release().unwrap();
    assert!(matches!(lock.guard(&cmd(&["SET", "result", "x"])), Err(Error::NotHeld { .. })));
    assert_eq!(guard_stats(&mut raw), (0, 0), "no round trip for a released lock");
    assert_eq!(get(&mut raw, "result"), None);
}

#[test]
fn the_inner_command_s_own_errors_are_redis_errors_and_keep_the_lock() {
    let s = Server::start();
    let mut raw = s.conn();
    let c = client(&s.url());
    let lock = c.try_acquire("lock:job", TTL).unwrap();
    lock.guard(&cmd(&["RPUSH", "list", "a"])).unwrap();
    assert_eq!(redis_code(lock.guard(&cmd(&["INCR", "list"]))), "WRONGTYPE");
    // An unknown inner command is not a missing module.
    let r = lock.guard(&cmd(&["NOSUCHCMD", "x"]));
    assert!(matches!(&r, Err(Error::Redis(e)) if e.to_string().to_lowercase().contains("nosuchcmd")), "{r:?}");
    let r = lock.guard(&cmd(&["lock.guardx", "x"]));
    assert!(matches!(&r, Err(Error::Redis(_))), "{r:?}");
    // What LOCK.GUARD refuses to run inside.
    let r = lock.guard(&cmd(&["MULTI"]));
    assert!(matches!(&r, Err(Error::Redis(e)) if e.to_string().contains("cannot run MULTI")), "{r:?}");
    // The caller's ACL applies to the inner command.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .arg("-set")
        .query(&mut raw)
        .unwrap();
    let app = client(&format!("redis://app:pw@127.0.0.1:{}/", s.port()));
    let app_lock = app.try_acquire("lock:app", TTL).unwrap();
    assert_eq!(redis_code(app_lock.guard(&cmd(&["SET", "result", "x"]))), "NOPERM");
    assert_eq!(get(&mut raw, "result"), None);
    for l in [&lock, &app_lock] {
        assert!(l.is_held());
        assert_eq!(l.loss_reason(), None);
        l.renew(TTL).expect("still ours");
    }
    assert_eq!(app_lock.guard(&cmd(&["INCR", "n"])).unwrap(), Value::Int(1));
}

#[test]
fn a_server_without_the_module_is_unsupported() {
    let s = Server::builder().without_module().start();
    let mut raw = s.conn();
    let c = client(&s.url());
    let lock = c.try_acquire("lock:job", TTL).unwrap();
    let r = lock.guard(&cmd(&["SET", "result", "x"]));
    assert!(matches!(r, Err(Error::Unsupported { command: "LOCK.GUARD" })), "{r:?}");
    assert_eq!(get(&mut raw, "result"), None);
    assert!(lock.is_held(), "the lock itself is fine");
    lock.renew(TTL).unwrap();
    lock.release().unwrap();
}

#[test]
fn the_async_twin_and_clients_built_from_connections() {
    let s = Server::start();
    let mut raw = s.conn();
    let rt = rt();
    rt.block_on(async {
        let c = client(&s.url());
        let lock = c.try_acquire_async("lock:job", TTL).await.unwrap();
        assert_eq!(lock.guard_async(&cmd(&["SET", "result", "a"])).await.unwrap(), Value::Okay);
        assert_eq!(lock.guard_async(&cmd(&["INCR", "n"])).await.unwrap(), Value::Int(1));
        assert_eq!(lock.guard(&cmd(&["INCR", "n"])).unwrap(), Value::Int(2), "the sync method inside a runtime");
        let _: () = redis::cmd("DEL").arg("lock:job").query(&mut raw).unwrap();
        let r = lock.guard_async(&cmd(&["SET", "result", "late"])).await;
        assert!(matches!(r, Err(Error::NotHeld { .. })), "{r:?}");
        assert_eq!(tokio::time::timeout(ms(5000), lock.lost()).await, Ok(Some(LossReason::NotOwner)));
        assert!(
            matches!(lock.guard_async(&redis::Cmd::new()).await, Err(Error::NotHeld { .. })),
            "known lost before the argument is looked at"
        );

        // Given a multiplexed connection: the async API only.
        let m = s.client().get_multiplexed_async_connection().await.unwrap();
        let c = LockClient::from_multiplexed(m, opts());
        let lock = c.try_acquire_async("lock:m", TTL).await.unwrap();
        assert_eq!(lock.guard_async(&cmd(&["GET", "n"])).await.unwrap(), bulk("2"));
        assert!(matches!(lock.guard(&cmd(&["GET", "n"])), Err(Error::InvalidArgument(_))));
        lock.release_async().await.unwrap();
    });
    assert_eq!(get(&mut raw, "result").as_deref(), Some("a"));

    // Given a sync connection: the sync API, on that connection.
    let c = LockClient::from_connection(s.conn(), opts()).unwrap();
    let lock = c.try_acquire("lock:s", TTL).unwrap();
    assert_eq!(lock.guard(&cmd(&["INCR", "n"])).unwrap(), Value::Int(3));
    assert_eq!(redis_code(lock.guard(&cmd(&["HSET", "n", "f", "v"]))), "WRONGTYPE");
    let r = rt.block_on(lock.guard_async(&cmd(&["INCR", "n"])));
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    assert!(lock.is_held());
}

/// A hash tag (`{N}`) whose slot master `m` serves.
fn tag_on(c: &Cluster, m: usize) -> String {
    c.key_on("", m)
}

fn assert_guard_reached_only(c: &Cluster, node: usize, before: &[(u64, u64)]) {
    for i in c.masters() {
        let now = guard_stats(&mut c.node(i).conn());
        if i == node {
            assert!(now.0 > before[i].0, "LOCK.GUARD ran on node {node}: {now:?}");
        } else {
            assert_eq!(now, before[i], "LOCK.GUARD neither ran on nor was redirected by node {i}");
        }
    }
}

fn stats(c: &Cluster) -> Vec<(u64, u64)> {
    (0..c.len()).map(|i| guard_stats(&mut c.node(i).conn())).collect()
}

#[test]
fn a_cluster_routes_by_the_lock_key_s_slot_and_follows_a_moving_slot() {
    let c = Cluster::start(3, 0);
    let masters = c.masters();
    let seed = masters[0];
    let client = LockClient::open_cluster_with(&[c.node(seed).url()], opts()).unwrap();
    for (i, &m) in masters.iter().enumerate() {
        let tag = tag_on(&c, m);
        let (lock_key, data) = (format!("job:{{{tag}}}"), format!("result:{{{tag}}}"));
        let lock = client.try_acquire(&lock_key, TTL).unwrap();
        let before = stats(&c);
        assert_eq!(lock.guard(&cmd(&["SET", &data, "done"])).unwrap(), Value::Okay);
        assert_guard_reached_only(&c, m, &before);
        assert_eq!(get(&mut c.node(m).conn(), &data).as_deref(), Some("done"), "written on the slot's master");
        // A key of another slot: the server's CROSSSLOT, the lock kept.
        let foreign = format!("result:{{{}}}", tag_on(&c, masters[(i + 1) % masters.len()]));
        assert_eq!(redis_code(lock.guard(&cmd(&["SET", &foreign, "x"]))), "CROSSSLOT");
        assert!(lock.is_held());
        let r = rt().block_on(lock.guard_async(&cmd(&["INCR", &format!("n:{{{tag}}}")])));
        assert_eq!(r.unwrap(), Value::Int(1));
        // Someone else's now: nothing written, the lock lost.
        let _: () = redis::cmd("DEL").arg(&lock_key).query(&mut c.node(m).conn()).unwrap();
        assert!(matches!(lock.guard(&cmd(&["SET", &data, "late"])), Err(Error::NotHeld { .. })));
        assert_eq!(get(&mut c.node(m).conn(), &data).as_deref(), Some("done"));
        assert_eq!(lock.loss_reason(), Some(LossReason::NotOwner));
    }

    // The slot moves under a client that has guarded there before: the
    // old owner answers MOVED, followed to the new one.
    let (from, to) = (masters[1], masters[2]);
    let tag = tag_on(&c, from);
    let (lock_key, data) = (format!("job:{{{tag}}}"), format!("result:{{{tag}}}"));
    let slot = c.slot_of(&lock_key);
    let lock = client.try_acquire(&lock_key, TTL).unwrap();
    lock.guard(&cmd(&["SET", &data, "1"])).unwrap();
    c.move_slot(slot, to);
    let before = stats(&c);
    assert_eq!(lock.guard(&cmd(&["SET", &data, "2"])).unwrap(), Value::Okay);
    let after = stats(&c);
    assert!(after[to].0 > before[to].0, "ran on the new owner");
    assert_eq!(after[from].0, before[from].0, "never ran on the old owner");
    assert!(
        after[from].1 > before[from].1,
        "the old owner redirected it (MOVED): {:?} then {:?}",
        before[from],
        after[from]
    );
    assert_eq!(get(&mut c.node(to).conn(), &data).as_deref(), Some("2"));

    // While the slot moves, with its keys already on the target: the
    // source answers ASK, followed with ASKING.
    let back = from;
    c.open_slot_move(slot, to, back);
    c.migrate_slot_keys(slot, to, back);
    let before = stats(&c);
    let r = lock.guard(&cmd(&["SET", &data, "3"]));
    let after = stats(&c);
    c.close_slot_move(slot, to, back);
    assert_eq!(r.unwrap(), Value::Okay);
    assert!(after[back].0 > before[back].0, "ran on the importing node");
    assert_eq!(after[to].0, before[to].0, "never ran on the migrating node");
    assert!(
        after[to].1 > before[to].1,
        "the migrating node redirected it (ASK): {:?} then {:?}",
        before[to],
        after[to]
    );
    assert_eq!(get(&mut c.node(back).conn(), &data).as_deref(), Some("3"));
    assert!(lock.is_held());

    // While the slot moves with only the lock key gone: the source answers
    // TRYAGAIN (nothing ran), which is retried a few times, then reported.
    c.open_slot_move(slot, back, to);
    let migrate = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(c.node(to).port())
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&lock_key)
        .clone();
    let _: Value = migrate.query(&mut c.node(back).conn()).unwrap();
    let before = stats(&c);
    let r = lock.guard(&cmd(&["SET", &data, "4"]));
    let after = stats(&c);
    assert_eq!(redis_code(r), "TRYAGAIN");
    let tries = after[back].1 - before[back].1;
    assert!((2..=4).contains(&tries), "retried a bounded number of times: {tries}");
    assert!((0..c.len()).all(|i| after[i].0 == before[i].0), "ran nowhere");
    c.migrate_slot_keys(slot, back, to);
    c.close_slot_move(slot, back, to);
    assert_eq!(get(&mut c.node(to).conn(), &data).as_deref(), Some("3"));
    assert!(lock.is_held());
    assert_eq!(lock.guard(&cmd(&["SET", &data, "5"])).unwrap(), Value::Okay);
    assert_eq!(get(&mut c.node(to).conn(), &data).as_deref(), Some("5"));
    lock.release().unwrap();

    let m = masters[0];
    let tag = tag_on(&c, m);
    let lock = LockClient::open_cluster_with(&c.urls(), impatient())
        .unwrap()
        .try_acquire(&format!("job:{{{tag}}}"), TTL)
        .unwrap();
    a_timed_out_write_is_not_resent(c.node(m), &lock, &format!("timeout:{{{tag}}}"));
    c.wait_ok();
}

/// The module on some nodes only: a guard where it is missing is
/// `Unsupported`, where it is loaded runs.
#[test]
fn a_cluster_node_without_the_module_is_unsupported() {
    let c = Cluster::start_with(3, 0, |i| if i == 2 { Server::builder().without_module() } else { Server::builder() });
    let client = LockClient::open_cluster_with(&c.urls(), opts()).unwrap();
    let with: Lock = client.try_acquire(&format!("job:{{{}}}", tag_on(&c, 0)), TTL).unwrap();
    let without: Lock = client.try_acquire(&format!("job:{{{}}}", tag_on(&c, 2)), TTL).unwrap();
    assert_eq!(with.guard(&cmd(&["INCR", &format!("n:{{{}}}", tag_on(&c, 0))])).unwrap(), Value::Int(1));
    let r = without.guard(&cmd(&["INCR", &format!("n:{{{}}}", tag_on(&c, 2))]));
    assert!(matches!(r, Err(Error::Unsupported { command: "LOCK.GUARD" })), "{r:?}");
    assert!(without.is_held());
}
