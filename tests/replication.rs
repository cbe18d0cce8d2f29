//! What the LOCK.* commands send to replicas and the AOF: their effects with
//! absolute expiry times (`SET key value PXAT ms`, `PEXPIREAT key ms`,
//! `DEL key`), never the LOCK.* commands themselves and never a relative
//! expiry, so a replica, a restart or a server without the module ends up
//! with exactly the master's keys, values and expiry times. The one
//! exception is a fenced grant's `LOCK.FENCEFLOOR`, which carries the fence
//! mark rather than a key.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_harness::Server;

type Command = Vec<Vec<u8>>;

fn lock(con: &mut Connection, args: &[&str]) -> i64 {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    match c.query::<Value>(con) {
        Ok(Value::Int(n)) => n,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// A key as a client sees it: its value and its absolute expiry (PEXPIRETIME).
#[derive(Clone, Debug, PartialEq, Eq)]
struct KeyState {
    value: Option<Vec<u8>>,
    expire_time: i64,
}

fn state(con: &mut Connection, key: &str) -> KeyState {
    KeyState {
        value: redis::cmd("GET").arg(key).query(con).unwrap(),
        expire_time: redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap(),
    }
}

fn states(con: &mut Connection) -> BTreeMap<&'static str, KeyState> {
    SCENARIO_KEYS.iter().map(|&k| (k, state(con, k))).collect()
}

/// Every key the scenario touches.
const SCENARIO_KEYS: &[&str] =
    &["r:acq", "r:renew", "r:rel", "r:take", "r:legacy", "r:sr", "r:srel", "r:er", "r:exp", "r:never"];

/// Successful and refused calls of every command, with their replies checked.
/// Expiry times are a minute or more away, so nothing expires while the
/// tests compare (except `r:exp`, which is meant to).
fn scenario(con: &mut Connection) {
    // Acquire, then a refused acquire.
    assert_eq!(lock(con, &["LOCK.ACQUIRE", "r:acq", "tok", "60000"]), 1);
    assert_eq!(lock(con, &["LOCK.ACQUIRE", "r:acq", "other", "90000"]), 0);
    // Renew, then refused renews (wrong token, absent key) and a bad ttl.
    assert_eq!(lock(con, &["LOCK.ACQUIRE", "r:renew", "tok", "60000"]), 1);
    std::thread::sleep(Duration::from_millis(3));
    assert_eq!(lock(con, &["LOCK.RENEW", "r:renew", "tok", "120000"]), 1);
    assert_eq!(lock(con, &["LOCK.RENEW", "r:renew", "wrong", "1"]), 0);
    assert_eq!(lock(con, &["LOCK.RENEW", "r:never", "tok", "1000"]), 0);
    assert!(redis::cmd("LOCK.RENEW").arg("r:renew").arg("tok").arg("0").query::<Value>(con).is_err());
    // Release: refused, then granted; a refused release of an absent key.
    assert_eq!(lock(con, &["LOCK.ACQUIRE", "r:rel", "tok", "60000"]), 1);
    assert_eq!(lock(con, &["LOCK.RELEASE", "r:rel", "wrong"]), 0);
    assert_eq!(lock(con, &["LOCK.RELEASE", "r:rel", "tok"]), 1);
    assert_eq!(lock(con, &["LOCK.RELEASE", "r:never", "tok"]), 0);
    // Takeover: of an absent key, by the same run, refused for another run.
    assert_eq!(lock(con, &["LOCK.TAKEOVER", "r:take", "tok", "run", "60000"]), 1);
    assert_eq!(lock(con, &["LOCK.TAKEOVER", "r:take", "tok2", "run", "90000"]), 1);
    assert_eq!(lock(con, &["LOCK.TAKEOVER", "r:take", "tok3", "other", "90000"]), 0);
    // Takeover of a persistent legacy value.
    let _: () = redis::cmd("SET").arg("r:legacy").arg("bare").query(con).unwrap();
    assert_eq!(lock(con, &["LOCK.TAKEOVER", "r:legacy", "tok", "run", "60000"]), 1);
    // Renew and release of structured values.
    assert_eq!(lock(con, &["LOCK.TAKEOVER", "r:sr", "tok", "run", "60000"]), 1);
    assert_eq!(lock(con, &["LOCK.RENEW", "r:sr", "tok", "120000"]), 1);
    assert_eq!(lock(con, &["LOCK.TAKEOVER", "r:srel", "tok", "run", "60000"]), 1);
    assert_eq!(lock(con, &["LOCK.RELEASE", "r:srel", "tok"]), 1);
    // An empty run-id: a plain acquire.
    assert_eq!(lock(con, &["LOCK.TAKEOVER", "r:er", "tok", "", "60000"]), 1);
    // An expired lock is acquired again.
    assert_eq!(lock(con, &["LOCK.ACQUIRE", "r:exp", "tok", "20"]), 1);
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(lock(con, &["LOCK.ACQUIRE", "r:exp", "tok2", "60000"]), 1);

    // What the master must hold now.
    let v = |k: &str, con: &mut Connection| state(con, k).value;
    assert_eq!(v("r:acq", con).as_deref(), Some(&b"tok"[..]));
    assert_eq!(v("r:take", con).as_deref(), Some(&br#"{"owner":"tok2","runId":"run"}"#[..]));
    assert_eq!(v("r:legacy", con).as_deref(), Some(&br#"{"owner":"tok","runId":"run"}"#[..]));
    assert_eq!(v("r:er", con).as_deref(), Some(&b"tok"[..]));
    assert_eq!(v("r:exp", con).as_deref(), Some(&b"tok2"[..]));
    assert_eq!(v("r:rel", con), None);
    assert_eq!(v("r:srel", con), None);
    assert_eq!(v("r:never", con), None);
}

/// The master's state after the scenario, with sanity checks on the expiry
/// times (so an all-persistent result cannot pass as "identical").
fn master_after_scenario(con: &mut Connection) -> BTreeMap<&'static str, KeyState> {
    let now = now_ms(con);
    let all = states(con);
    for (k, s) in &all {
        match s.value {
            Some(_) => {
                assert!(s.expire_time > now + 50_000 && s.expire_time <= now + 120_000, "{k}: {s:?} (now {now})")
            }
            None => assert_eq!(s.expire_time, -2, "{k}"),
        }
    }
    assert!(all["r:renew"].expire_time > now + 110_000, "renew did not extend: {:?}", all["r:renew"]);
    all
}

fn now_ms(con: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * 1000 + us / 1000
}

// --- RESP commands in a byte stream ----------------------------------------

/// Parses complete RESP commands from `buf`, skipping the bare newlines a
/// master sends as keepalives; returns them and how many bytes they took.
fn parse_commands(buf: &[u8]) -> (Vec<Command>, usize) {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at..end], end + 2))
    }
    fn number(s: &[u8]) -> usize {
        std::str::from_utf8(s).ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("bad RESP length {s:?}"))
    }
    let mut out = Vec::new();
    let mut pos = 0;
    'commands: while pos < buf.len() {
        if buf[pos] == b'\n' {
            pos += 1;
            continue;
        }
        assert_eq!(
            buf[pos],
            b'*',
            "not a RESP array at byte {pos}: {:?}",
            String::from_utf8_lossy(&buf[pos..buf.len().min(pos + 40)])
        );
        let Some((n, mut at)) = line(buf, pos + 1) else { break };
        let mut cmd = Vec::new();
        for _ in 0..number(n) {
            if at >= buf.len() {
                break 'commands;
            }
            assert_eq!(buf[at], b'$', "not a bulk string at byte {at}");
            let Some((len, start)) = line(buf, at + 1) else { break 'commands };
            let end = start + number(len);
            if end + 2 > buf.len() {
                break 'commands;
            }
            cmd.push(buf[start..end].to_vec());
            at = end + 2;
        }
        out.push(cmd);
        pos = at;
    }
    (out, pos)
}

fn name(cmd: &Command) -> String {
    String::from_utf8_lossy(&cmd[0]).to_ascii_uppercase()
}

fn show(cmd: &Command) -> String {
    cmd.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>().join(" ")
}

fn int(arg: &[u8]) -> i64 {
    std::str::from_utf8(arg).unwrap().parse().unwrap_or_else(|_| panic!("not an integer: {arg:?}"))
}

/// Checks a propagated command stream (replication or AOF): no LOCK.*, no
/// relative expiry; each scenario key got exactly the expected effects; and
/// replaying the stream gives the master's final state.
fn check_stream(commands: &[Command], master: &BTreeMap<&'static str, KeyState>) {
    for c in commands {
        let n = name(c);
        assert!(!n.starts_with("LOCK."), "a LOCK command was propagated: {}", show(c));
        assert!(
            !matches!(n.as_str(), "PEXPIRE" | "EXPIRE" | "EXPIREAT" | "SETEX" | "PSETEX"),
            "relative or second expiry propagated: {}",
            show(c)
        );
        if n == "SET" {
            let opts: Vec<String> = c[3..].iter().map(|a| String::from_utf8_lossy(a).to_ascii_uppercase()).collect();
            assert!(
                !opts.iter().any(|o| o == "PX" || o == "EX" || o == "NX" || o == "EXAT"),
                "SET with a relative expiry or condition: {}",
                show(c)
            );
        }
    }

    // The effects on each key, in order, by command name.
    let mut per_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut model: BTreeMap<Vec<u8>, KeyState> = BTreeMap::new();
    for c in commands {
        let n = name(c);
        if c.len() < 2 || matches!(n.as_str(), "SELECT" | "PING" | "REPLCONF" | "MULTI" | "EXEC") {
            continue;
        }
        if let Some(&k) = SCENARIO_KEYS.iter().find(|k| k.as_bytes() == c[1].as_slice()) {
            per_key.entry(k).or_default().push(if n == "UNLINK" { "DEL".into() } else { n.clone() });
        }
        match n.as_str() {
            "SET" => {
                let expire_time = match c.get(3).map(|o| String::from_utf8_lossy(o).to_ascii_uppercase()) {
                    Some(o) if o == "PXAT" => int(&c[4]),
                    None => -1,
                    Some(o) => panic!("unexpected SET option {o}: {}", show(c)),
                };
                model.insert(c[1].clone(), KeyState { value: Some(c[2].clone()), expire_time });
            }
            "PEXPIREAT" => {
                let s = model.get_mut(&c[1]).unwrap_or_else(|| panic!("PEXPIREAT of a key never set: {}", show(c)));
                s.expire_time = int(&c[2]);
            }
            "DEL" | "UNLINK" => {
                for k in &c[1..] {
                    model.remove(k);
                }
            }
            _ => {}
        }
    }
    let expect: &[(&str, &[&str])] = &[
        ("r:acq", &["SET"]),
        ("r:renew", &["SET", "PEXPIREAT"]),
        ("r:rel", &["SET", "DEL"]),
        ("r:take", &["SET", "SET"]),
        ("r:legacy", &["SET", "SET"]),
        ("r:sr", &["SET", "PEXPIREAT"]),
        ("r:srel", &["SET", "DEL"]),
        ("r:er", &["SET"]),
        ("r:exp", &["SET", "DEL", "SET"]),
    ];
    for (k, want) in expect {
        assert_eq!(
            per_key.get(k).map(|v| v.iter().map(String::as_str).collect::<Vec<_>>()).unwrap_or_default(),
            *want,
            "effects propagated for {k}"
        );
    }
    assert!(
        !per_key.contains_key("r:never"),
        "a refused command on an absent key propagated {:?}",
        per_key.get("r:never")
    );

    for (&k, want) in master {
        let got = model.get(k.as_bytes()).cloned().unwrap_or(KeyState { value: None, expire_time: -2 });
        assert_eq!(&got, want, "replaying the stream gives a different {k}");
    }
}

// --- A real replica ----------------------------------------------------------

fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().to_string()))
}

fn wait_for_link(replica: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_field(replica, "replication", "master_link_status").as_deref() != Some("up") {
        assert!(Instant::now() < deadline, "replica did not sync");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_replica_ends_with_the_masters_values_and_absolute_expiry_times() {
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);

    let mut m = master.conn();
    scenario(&mut m);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(&mut m).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
    let on_master = master_after_scenario(&mut m);
    let on_replica = states(&mut r);
    assert_eq!(on_replica, on_master);
}

#[test]
fn a_replica_attached_after_the_locks_were_taken_loads_them_with_their_expiry_times() {
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let mut m = master.conn();
    scenario(&mut m);
    let replica = Server::builder().arg("replicaof", &format!("127.0.0.1 {}", master.port())).start();
    let mut r = replica.conn();
    wait_for_link(&mut r);
    assert_eq!(states(&mut r), master_after_scenario(&mut m));
}

/// Attaches to `port` as a replica with `PSYNC ? -1`, reads past the RDB
/// payload, and returns the connection with any stream bytes already read.
fn attach_fake_replica(port: u16) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n").unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let mut read_more = |s: &mut TcpStream, buf: &mut Vec<u8>| {
        let n = s.read(&mut chunk).expect("read from master");
        assert!(n > 0, "master closed the replication link");
        buf.extend_from_slice(&chunk[..n]);
    };
    loop {
        // "+FULLRESYNC <id> <offset>\r\n", keepalive newlines, "$<len>\r\n<rdb>"
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            assert!(buf.starts_with(b"+FULLRESYNC"), "unexpected PSYNC reply {:?}", String::from_utf8_lossy(&buf));
            let mut at = end + 2;
            while at < buf.len() && buf[at] == b'\n' {
                at += 1;
            }
            if at < buf.len() {
                assert_eq!(buf[at], b'$', "expected the RDB bulk");
                if let Some(e) = buf[at..].windows(2).position(|w| w == b"\r\n") {
                    let len: usize = std::str::from_utf8(&buf[at + 1..at + e]).unwrap().parse().unwrap();
                    let start = at + e + 2;
                    if buf.len() >= start + len {
                        return (s, buf[start + len..].to_vec());
                    }
                }
            }
        }
        read_more(&mut s, &mut buf);
    }
}

#[test]
fn the_replication_stream_carries_effects_with_absolute_expiry_and_no_lock_commands() {
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let (mut link, buf) = attach_fake_replica(master.port());
    let mut m = master.conn();
    scenario(&mut m);
    let on_master = master_after_scenario(&mut m);
    let commands = read_stream_to_marker(&mut m, &mut link, buf);
    check_stream(&commands, &on_master);
}

/// Sets an end marker on the master and reads the stream up to it.
fn read_stream_to_marker(m: &mut Connection, link: &mut TcpStream, mut buf: Vec<u8>) -> Vec<Command> {
    let _: () = redis::cmd("SET").arg("r:end").arg("1").query(m).unwrap();
    let mut chunk = [0u8; 65536];
    loop {
        let (commands, _) = parse_commands(&buf);
        if commands.iter().any(|c| name(c) == "SET" && c[1] == b"r:end") {
            return commands;
        }
        let n = link.read(&mut chunk).expect("read the replication stream");
        assert!(n > 0, "master closed the replication link");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The one LOCK.* command replicas and the AOF see: `LOCK.FENCEFLOOR` with
/// the fence just issued, in the same MULTI/EXEC as the grant's effect, so
/// a promoted replica or a restarted server never issues it again.
#[test]
fn a_fenced_grant_propagates_its_fence_as_a_floor_with_its_effect() {
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let (mut link, buf) = attach_fake_replica(master.port());
    let mut m = master.conn();
    let acquired = lock(&mut m, &["LOCK.ACQUIRE", "r:f", "tok", "60000", "FENCE"]);
    assert_eq!(lock(&mut m, &["LOCK.RELEASE", "r:f", "tok"]), 1);
    let taken = lock(&mut m, &["LOCK.TAKEOVER", "r:f", "tok2", "run", "60000", "FENCE"]);
    assert!(acquired > 0 && taken > acquired, "fences {acquired}, {taken}");
    let commands = read_stream_to_marker(&mut m, &mut link, buf);
    let shown: Vec<String> = commands
        .iter()
        .filter(|c| !matches!(name(c).as_str(), "SELECT" | "PING" | "REPLCONF"))
        // The expiry times are checked by the other stream tests.
        .map(|c| if name(c) == "SET" && c.len() == 5 { show(&c[..4].to_vec()) } else { show(c) })
        .collect();
    let expected = [
        "MULTI".to_string(),
        "SET r:f tok PXAT".into(),
        format!("LOCK.FENCEFLOOR {acquired}"),
        "EXEC".into(),
        "DEL r:f".into(),
        "MULTI".into(),
        r#"SET r:f {"owner":"tok2","runId":"run"} PXAT"#.into(),
        format!("LOCK.FENCEFLOOR {taken}"),
        "EXEC".into(),
        "SET r:end 1".into(),
    ];
    assert_eq!(shown, expected);
}

// --- The AOF -----------------------------------------------------------------

/// A fresh directory that no harness guard removes, deleted on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "redis-lock-repl-test-{tag}-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn aof_server(dir: &Path, module: bool) -> Server {
    let mut b = Server::builder()
        .dir(dir)
        .arg("appendonly", "yes")
        .arg("aof-use-rdb-preamble", "no")
        .arg("appendfsync", "always");
    if !module {
        b = b.without_module();
    }
    b.start()
}

/// Every command in the AOF (its base file, then its increments, as the
/// manifest lists them).
fn read_aof(dir: &Path) -> Vec<Command> {
    let aof_dir = dir.join("appendonlydir");
    let manifest = std::fs::read_to_string(aof_dir.join("appendonly.aof.manifest"))
        .unwrap_or_else(|e| panic!("{}: {e}", aof_dir.display()));
    // Lines like "file appendonly.aof.1.base.aof seq 1 type b".
    let mut base = Vec::new();
    let mut incr = Vec::new();
    for line in manifest.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let field = |name: &str| words.iter().position(|w| *w == name).and_then(|i| words.get(i + 1)).copied();
        match (field("file"), field("type")) {
            (Some(f), Some("b")) => base.push(f.to_string()),
            (Some(f), Some("i")) => incr.push(f.to_string()),
            _ => {}
        }
    }
    assert!(!incr.is_empty(), "no incremental AOF in the manifest:\n{manifest}");
    let mut commands = Vec::new();
    for f in base.iter().chain(&incr) {
        let path = aof_dir.join(f);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!bytes.starts_with(b"REDIS"), "{} is an RDB preamble despite aof-use-rdb-preamble no", path.display());
        let (cmds, used) = parse_commands(&bytes);
        assert_eq!(used, bytes.len(), "{} has a partial command at its end", path.display());
        commands.extend(cmds);
    }
    commands
}

#[test]
fn the_aof_holds_effects_with_absolute_expiry_and_no_lock_commands() {
    let dir = TempDir::new("aof");
    let server = aof_server(&dir.0, true);
    let mut con = server.conn();
    scenario(&mut con);
    let on_master = master_after_scenario(&mut con);
    let commands = read_aof(&dir.0);
    let text: Vec<String> = commands.iter().map(show).collect();
    assert!(text.iter().any(|c| c.starts_with("SET r:acq tok PXAT ")), "no SET ... PXAT in {text:#?}");
    assert!(text.iter().any(|c| c.starts_with("PEXPIREAT r:renew ")), "no PEXPIREAT in {text:#?}");
    assert!(text.iter().any(|c| c == "DEL r:rel"), "no DEL in {text:#?}");
    check_stream(&commands, &on_master);
}

#[test]
fn locks_survive_a_restart_from_the_aof_with_their_exact_values_and_expiry_times() {
    let dir = TempDir::new("restart");
    let server = aof_server(&dir.0, true);
    let mut con = server.conn();
    scenario(&mut con);
    let before = master_after_scenario(&mut con);
    // Kill -9 and start again on the same directory. (Not `Server::restart`:
    // it waits for the server on a new port while the server listens on the
    // old one, so it never sees it start.) Dropping it is a SIGKILL.
    drop(server);
    let server = aof_server(&dir.0, true);
    let mut con = server.conn();
    assert_eq!(states(&mut con), before);
    // The restarted server goes on enforcing them.
    assert_eq!(lock(&mut con, &["LOCK.ACQUIRE", "r:acq", "other", "1000"]), 0);
    assert_eq!(lock(&mut con, &["LOCK.RELEASE", "r:take", "tok2"]), 1);
}

#[test]
fn a_server_without_the_module_loads_the_aof_and_gets_the_same_locks() {
    let dir = TempDir::new("nomodule");
    let before = {
        let mut server = aof_server(&dir.0, true);
        let mut con = server.conn();
        assert!(module_names(&mut con).contains(&"lock".to_string()));
        scenario(&mut con);
        let s = master_after_scenario(&mut con);
        server.kill();
        s
    };
    // A LOCK.* command in the AOF would make this server refuse to start.
    let plain = aof_server(&dir.0, false);
    let mut con = plain.conn();
    let names = module_names(&mut con);
    assert!(!names.contains(&"lock".to_string()), "the module is loaded: {names:?}");
    assert_eq!(states(&mut con), before);
}

/// `MODULE LIST`'s names. Not necessarily empty without ours: Redis 8
/// lists its built-in `vectorset`, Valkey 9 its `lua`.
fn module_names(con: &mut redis::Connection) -> Vec<String> {
    let modules: Vec<Vec<Value>> = redis::cmd("MODULE").arg("LIST").query(con).unwrap();
    modules.iter().filter_map(|m| m.get(1)).map(|n| redis::from_redis_value(n.clone()).unwrap()).collect()
}

/// LOCKDELAY and MAXHOLD (docs/lease.md) propagate as effects with
/// absolute times too: a grant and a renewal that rewrites `leaseEnd` as
/// `SET … PXAT`, a renewal without a delay as `PEXPIREAT`, a release as
/// `DEL`, and settling an ended lease as its tombstone's `SET … PXAT`
/// with the expiry unchanged.
#[test]
fn lease_terms_propagate_as_set_pxat_pexpireat_and_del() {
    let master = Server::builder().arg("repl-diskless-sync", "no").start();
    let (mut link, buf) = attach_fake_replica(master.port());
    let mut m = master.conn();
    let get = |m: &mut Connection, k: &str| -> String { redis::cmd("GET").arg(k).query(m).unwrap() };
    let expiry = |m: &mut Connection, k: &str| -> i64 { redis::cmd("PEXPIRETIME").arg(k).query(m).unwrap() };
    let mut expected = Vec::new();
    assert_eq!(lock(&mut m, &["LOCK.ACQUIRE", "r:l", "tok", "60000", "LOCKDELAY", "5000", "MAXHOLD", "90000"]), 1);
    expected.push(format!("SET r:l {} PXAT {}", get(&mut m, "r:l"), expiry(&mut m, "r:l")));
    assert_eq!(lock(&mut m, &["LOCK.RENEW", "r:l", "tok", "120000"]), 2);
    let renewed = get(&mut m, "r:l");
    assert!(renewed.contains(r#""lockDelay":5000,"leaseEnd":"#), "{renewed}");
    expected.push(format!("SET r:l {renewed} PXAT {}", expiry(&mut m, "r:l")));
    assert_eq!(lock(&mut m, &["LOCK.ACQUIRE", "r:m", "tok", "60000", "MAXHOLD", "90000"]), 1);
    expected.push(format!("SET r:m {} PXAT {}", get(&mut m, "r:m"), expiry(&mut m, "r:m")));
    assert_eq!(lock(&mut m, &["LOCK.RENEW", "r:m", "tok", "1000"]), 1);
    expected.push(format!("PEXPIREAT r:m {}", expiry(&mut m, "r:m")));
    assert_eq!(lock(&mut m, &["LOCK.RELEASE", "r:l", "tok"]), 1);
    expected.push("DEL r:l".into());
    assert_eq!(lock(&mut m, &["LOCK.ACQUIRE", "r:t", "tok", "100", "LOCKDELAY", "60000"]), 1);
    expected.push(format!("SET r:t {} PXAT {}", get(&mut m, "r:t"), expiry(&mut m, "r:t")));
    let pxat = expiry(&mut m, "r:t");
    while now_ms(&mut m) <= pxat - 60_000 {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lock(&mut m, &["LOCK.ACQUIRE", "r:t", "other", "60000"]), 0);
    assert_eq!(get(&mut m, "r:t"), format!(r#"{{"owner":null,"delayedUntil":{pxat}}}"#));
    assert_eq!(expiry(&mut m, "r:t"), pxat, "settling kept the expiry");
    expected.push(format!(r#"SET r:t {{"owner":null,"delayedUntil":{pxat}}} PXAT {pxat}"#));
    expected.push("SET r:end 1".into());
    let commands = read_stream_to_marker(&mut m, &mut link, buf);
    let shown: Vec<String> =
        commands.iter().filter(|c| !matches!(name(c).as_str(), "SELECT" | "PING" | "REPLCONF")).map(show).collect();
    assert_eq!(shown, expected);
}
