//! The client's `tracing` spans and events carry the fields that
//! docs/observability.md ("Client tracing") documents, on real servers:
//! a test subscriber (a `Layer` that keeps every span's and event's
//! fields) is installed once for the whole binary, and each test reads
//! what concerns its own keys (or its own server's address).

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::Commands;
use redis_lock_client::{
    trace, Error, LockClient, LockOptions, LossReason, QuorumClient, QuorumOptions, WatchdogOptions,
};
use redis_lock_harness::{Cluster, Server};
use support::{client, ms};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

type Fields = BTreeMap<String, String>;

/// A span as the subscriber saw it: its name, fields (as recorded, also
/// after it was created), whether it closed, its parent's name and the
/// spans it follows from.
#[derive(Clone, Debug, Default)]
struct SpanRec {
    name: String,
    fields: Fields,
    closed: bool,
    /// The creation numbers of the spans it follows from.
    follows: Vec<u64>,
    /// Its creation number.
    id: u64,
}

#[derive(Clone, Debug)]
struct EventRec {
    name: String,
    fields: Fields,
    /// The name and creation number of the span it was recorded in, if any.
    parent: Option<(String, u64)>,
}

/// Spans by creation order (a subscriber reuses the ids of closed spans).
#[derive(Default)]
struct Seen {
    spans: BTreeMap<u64, SpanRec>,
    /// Open spans: id → creation number.
    open: BTreeMap<u64, u64>,
    next: u64,
    events: Vec<EventRec>,
}

impl Seen {
    fn open(&mut self, id: &Id) -> Option<&mut SpanRec> {
        let n = *self.open.get(&id.into_u64())?;
        self.spans.get_mut(&n)
    }
}

struct Collect(Arc<Mutex<Seen>>);

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().into(), format!("{v:?}"));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name().into(), v.into());
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.0.insert(f.name().into(), v.to_string());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collect {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        let n = seen.next;
        seen.next += 1;
        let mut rec = SpanRec { name: attrs.metadata().name().into(), id: n, ..Default::default() };
        attrs.record(&mut Visitor(&mut rec.fields));
        seen.open.insert(id.into_u64(), n);
        seen.spans.insert(n, rec);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(rec) = self.0.lock().unwrap().open(id) {
            values.record(&mut Visitor(&mut rec.fields));
        }
    }
    fn on_follows_from(&self, id: &Id, follows: &Id, _: Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        let Some(&f) = seen.open.get(&follows.into_u64()) else { return };
        if let Some(rec) = seen.open(id) {
            rec.follows.push(f);
        }
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        let mut seen = self.0.lock().unwrap();
        let parent =
            ctx.event_span(event).and_then(|s| Some((s.name().to_string(), *seen.open.get(&s.id().into_u64())?)));
        seen.events.push(EventRec { name: event.metadata().name().into(), fields, parent });
    }
    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        if let Some(rec) = seen.open(&id) {
            rec.closed = true;
        }
        seen.open.remove(&id.into_u64());
    }
}

/// What the subscriber saw, installed on first use as the global default
/// (the renewal engine's events come from the client's own thread).
fn seen() -> Arc<Mutex<Seen>> {
    static SEEN: OnceLock<Arc<Mutex<Seen>>> = OnceLock::new();
    SEEN.get_or_init(|| {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let subscriber = tracing_subscriber::registry().with(Collect(seen.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
        seen
    })
    .clone()
}

/// The spans named `name` for `key`, in creation order.
fn spans(name: &str, key: &str) -> Vec<SpanRec> {
    let s = seen();
    let s = s.lock().unwrap();
    s.spans
        .values()
        .filter(|r| r.name == name && r.fields.get(trace::KEY).map(String::as_str) == Some(key))
        .cloned()
        .collect()
}

fn events(name: &str, f: impl Fn(&EventRec) -> bool) -> Vec<EventRec> {
    let s = seen();
    let s = s.lock().unwrap();
    s.events.iter().filter(|e| e.name == name && f(e)).cloned().collect()
}

fn field<'a>(r: &'a SpanRec, f: &str) -> &'a str {
    r.fields.get(f).map(String::as_str).unwrap_or_else(|| panic!("no field {f} in {r:?}"))
}

fn num(r: &SpanRec, f: &str) -> u64 {
    field(r, f).parse().unwrap_or_else(|_| panic!("{f} is not a number in {r:?}"))
}

fn addr(s: &Server) -> String {
    format!("127.0.0.1:{}", s.port())
}

#[test]
fn an_acquire_and_its_hold_carry_the_documented_fields() {
    seen();
    let s = Server::start();
    let c = client(&s);
    let key = "trace:acquire";
    let first = c.try_acquire(key, ms(30_000)).expect("free key");
    // Refused at once while held.
    assert!(matches!(c.try_acquire(key, ms(30_000)), Err(Error::NotAcquired { .. })));
    let waiter = {
        let c = c.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let lock = c.acquire(key, ms(30_000), ms(10_000)).expect("granted once released");
            (lock, start.elapsed())
        })
    };
    std::thread::sleep(ms(300));
    first.release().expect("release");
    let (second, took) = waiter.join().unwrap();
    let fence = second.fence().expect("the module gives fences");
    drop(second);

    let acquires = spans(trace::ACQUIRE, key);
    assert_eq!(acquires.len(), 3, "{acquires:#?}");
    for a in &acquires {
        assert_eq!(field(a, trace::KIND), "exclusive");
        assert_eq!(field(a, trace::OP), "acquire");
        assert!(a.closed, "{a:?}");
    }
    let (granted, refused, waited) = (&acquires[0], &acquires[1], &acquires[2]);
    assert_eq!(field(granted, trace::OUTCOME), trace::GRANTED);
    assert_eq!(field(granted, trace::WAIT_MS), "0");
    assert_eq!(field(granted, trace::SERVER), addr(&s));
    assert_eq!(field(refused, trace::OUTCOME), trace::NOT_ACQUIRED);
    assert!(!refused.fields.contains_key(trace::FENCE), "{refused:?}");
    assert_eq!(field(waited, trace::OUTCOME), trace::GRANTED);
    assert_eq!(field(waited, trace::WAIT_MS), "10000");
    assert_eq!(field(waited, trace::FENCE), fence.to_string());
    assert_eq!(field(waited, trace::SERVER), addr(&s));
    assert!(num(waited, trace::WAITED_MS) <= took.as_millis() as u64, "{waited:?} took {took:?}");

    // One hold per grant: released, then dropped; each follows from its acquire.
    let holds = spans(trace::HELD, key);
    assert_eq!(holds.len(), 2, "{holds:#?}");
    assert_eq!(field(&holds[0], trace::ENDED), "released");
    assert_eq!(field(&holds[1], trace::ENDED), "dropped");
    assert_eq!(field(&holds[1], trace::FENCE), fence.to_string());
    assert_eq!(field(&holds[1], trace::SERVER), addr(&s));
    assert_eq!(holds[0].follows, [granted.id]);
    assert_eq!(holds[1].follows, [waited.id]);
    for h in &holds {
        assert_eq!(field(h, trace::KIND), "exclusive");
        assert!(h.fields.contains_key(trace::HELD_MS), "{h:?}");
        assert!(!h.fields.contains_key(trace::REASON), "{h:?}");
        assert!(h.closed, "{h:?}");
    }
}

#[test]
fn a_loss_and_the_renewal_batches_are_events() {
    seen();
    let s = Server::start();
    let c = client(&s);
    let key = "trace:lost";
    let opts = LockOptions::new().watchdog(WatchdogOptions::new());
    let lock = c.try_acquire_with(key, ms(1500), &opts).expect("free key");
    // The watchdog renews every 500 ms: wait for a batch, then take the key away.
    let node = addr(&s);
    let batch = |e: &EventRec| e.fields.get(trace::NODE) == Some(&node);
    assert!(support::eventually(ms(10_000), || !events(trace::BATCH, batch).is_empty()), "no renewal batch");
    let _: () = s.conn().del(key).unwrap();
    assert_eq!(lock.lost_signal().wait_timeout(Duration::from_secs(10)), Some(LossReason::NotOwner));

    let b = &events(trace::BATCH, batch)[0];
    assert_eq!(b.fields[trace::COMMAND], "LOCK.RENEW");
    assert_eq!(b.fields[trace::COUNT], "1");
    assert_eq!(b.fields[trace::FAILED], "0");
    assert!(b.fields[trace::RTT_MS].parse::<u64>().is_ok(), "{b:?}");

    let lost = events(trace::LOST, |e| e.fields.get(trace::KEY).map(String::as_str) == Some(key));
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].fields[trace::REASON], "not_owner");
    let held = &spans(trace::HELD, key)[0];
    assert_eq!(lost[0].parent, Some((trace::HELD.to_string(), held.id)), "in the hold's span");
    assert_eq!(field(held, trace::ENDED), "lost");
    assert_eq!(field(held, trace::REASON), "not_owner");
    drop(lock);
}

#[test]
fn semaphores_and_read_write_locks_name_their_kind() {
    seen();
    let s = Server::start();
    let c = client(&s);
    let permit = c.semaphore("trace:sem", 2).try_acquire(ms(30_000)).expect("permit");
    let read = c.rw_lock("trace:rw").read().try_acquire(ms(30_000)).expect("read");
    assert_eq!(field(&spans(trace::ACQUIRE, "trace:sem")[0], trace::KIND), "semaphore");
    assert_eq!(field(&spans(trace::ACQUIRE, "trace:rw")[0], trace::KIND), "read");
    assert_eq!(field(&spans(trace::HELD, "trace:sem")[0], trace::KIND), "semaphore");
    let taken = c.takeover("trace:takeover", "run-1", ms(30_000)).expect("takeover of a free key");
    let t = &spans(trace::ACQUIRE, "trace:takeover")[0];
    assert_eq!((field(t, trace::OP), field(t, trace::OUTCOME)), ("takeover", trace::GRANTED));
    drop((permit, read, taken));
}

/// A quorum acquire (3 servers) and its hold: the same spans, `server`
/// naming the servers that held the key (a majority at least).
#[test]
fn a_quorum_acquire_and_its_hold_are_spans() {
    seen();
    let s: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let urls: Vec<String> = s.iter().map(Server::url).collect();
    let opts = QuorumOptions::new().node_timeout(ms(2000));
    let c = QuorumClient::open_with(&urls, opts.clone()).expect("client");
    let other = QuorumClient::open_with(&urls, opts).expect("client");
    let key = "trace:quorum";
    let lock = c.acquire(key, ms(30_000), ms(5000)).expect("free key");
    let fence = lock.fence().expect("the module gives fences");
    assert!(matches!(other.try_acquire(key, ms(30_000)), Err(Error::NotAcquired { .. })));
    lock.release().expect("release");
    // The async API, dropped while held.
    let rt = support::rt();
    let again = rt.block_on(c.acquire_async(key, ms(30_000), ms(5000))).expect("free again");
    rt.block_on(async move { drop(again) });

    let acquires = spans(trace::ACQUIRE, key);
    assert_eq!(acquires.len(), 3, "{acquires:#?}");
    for a in &acquires {
        assert_eq!((field(a, trace::KIND), field(a, trace::OP)), ("exclusive", "acquire"));
        assert!(a.closed, "{a:?}");
    }
    let (granted, refused, async_granted) = (&acquires[0], &acquires[1], &acquires[2]);
    assert_eq!(field(granted, trace::OUTCOME), trace::GRANTED);
    assert_eq!(field(granted, trace::WAIT_MS), "5000");
    assert_eq!(field(granted, trace::FENCE), fence.to_string());
    assert_eq!(field(refused, trace::OUTCOME), trace::NOT_ACQUIRED);
    assert_eq!(field(refused, trace::WAIT_MS), "0");
    assert!(!refused.fields.contains_key(trace::SERVER), "{refused:?}");
    assert_eq!(field(async_granted, trace::OUTCOME), trace::GRANTED);
    let all: Vec<String> = s.iter().map(addr).collect();
    for a in [granted, async_granted] {
        let held_on: Vec<&str> = field(a, trace::SERVER).split(',').collect();
        assert!(held_on.len() >= 2, "a majority of 3: {a:?}");
        assert!(held_on.iter().all(|h| all.iter().any(|s| s == h)), "{held_on:?} not among {all:?}");
        let mut distinct = held_on.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), held_on.len(), "{held_on:?}");
    }

    let holds = spans(trace::HELD, key);
    assert_eq!(holds.len(), 2, "{holds:#?}");
    assert_eq!(field(&holds[0], trace::ENDED), "released");
    assert_eq!(field(&holds[1], trace::ENDED), "dropped");
    assert_eq!(field(&holds[0], trace::FENCE), fence.to_string());
    assert_eq!(field(&holds[0], trace::SERVER), field(granted, trace::SERVER));
    assert_eq!(holds[0].follows, [granted.id]);
    assert_eq!(holds[1].follows, [async_granted.id]);
    for h in &holds {
        assert_eq!(field(h, trace::KIND), "exclusive");
        assert!(h.fields.contains_key(trace::HELD_MS), "{h:?}");
        assert!(h.closed, "{h:?}");
    }
}

/// A campaign is an acquire span of kind `election`, op `campaign`, its
/// leadership a hold that resigning ends as `released`.
#[test]
fn a_campaign_and_its_leadership_are_spans() {
    seen();
    let s = Server::start();
    let c = client(&s);
    let key = "trace:election";
    let election = c.election(key);
    let leader = election.campaign("node-a", ms(30_000), ms(5000)).expect("no leader yet");
    let term = leader.term();
    // A second candidate, refused at once.
    assert!(matches!(c.election(key).campaign("node-b", ms(30_000), Duration::ZERO), Err(Error::NotAcquired { .. })));
    leader.resign().expect("resign");
    // The async API, won at once.
    let rt = support::rt();
    let next = rt.block_on(election.campaign_async("node-c", ms(30_000), Duration::ZERO)).expect("free again");
    let next_term = next.term();
    rt.block_on(next.resign_async()).expect("resign");

    let campaigns = spans(trace::ACQUIRE, key);
    assert_eq!(campaigns.len(), 3, "{campaigns:#?}");
    for a in &campaigns {
        assert_eq!((field(a, trace::KIND), field(a, trace::OP)), ("election", "campaign"));
        assert!(a.closed, "{a:?}");
    }
    let (won, refused, won_async) = (&campaigns[0], &campaigns[1], &campaigns[2]);
    assert_eq!(field(won, trace::OUTCOME), trace::GRANTED);
    assert_eq!(field(won, trace::WAIT_MS), "5000");
    assert_eq!(field(won, trace::FENCE), term.to_string());
    assert_eq!(field(won, trace::SERVER), addr(&s));
    assert_eq!(field(refused, trace::OUTCOME), trace::NOT_ACQUIRED);
    assert_eq!(field(won_async, trace::OUTCOME), trace::GRANTED);
    assert_eq!(field(won_async, trace::FENCE), next_term.to_string());

    let holds = spans(trace::HELD, key);
    assert_eq!(holds.len(), 2, "{holds:#?}");
    for (h, (a, t)) in holds.iter().zip([(won, term), (won_async, next_term)]) {
        assert_eq!(field(h, trace::KIND), "election");
        assert_eq!(field(h, trace::ENDED), "released");
        assert_eq!(field(h, trace::FENCE), t.to_string());
        assert_eq!(field(h, trace::SERVER), addr(&s));
        assert_eq!(h.follows, [a.id]);
        assert!(h.closed, "{h:?}");
    }
    drop((leader, next));
}

/// A wait sent to a node that does not own the key's slot is redirected:
/// a retry event names the cause.
#[test]
fn a_redirected_wait_is_an_event() {
    seen();
    let cluster = Cluster::start(3, 0);
    let key = cluster.key_on("trace:moved:", 1);
    // Only node 0 as seed: the wait starts there and is sent on by MOVED.
    let seed = cluster.node(0).url();
    let holder = LockClient::open_cluster(&[seed.as_str()]).expect("cluster client");
    let held = holder.try_acquire(&key, ms(30_000)).expect("free key");
    let waiter = {
        let (seed, key) = (seed.clone(), key.clone());
        std::thread::spawn(move || {
            let c = LockClient::open_cluster(&[seed.as_str()]).expect("cluster client");
            // First attempt on the shared connection (refused), then the wait.
            c.acquire(&key, ms(30_000), ms(10_000)).map(|l| l.fence())
        })
    };
    let mine = |e: &EventRec| e.fields.get(trace::KEY) == Some(&key);
    assert!(support::eventually(ms(10_000), || !events(trace::RETRY, mine).is_empty()), "no retry event");
    held.release().expect("release");
    assert!(waiter.join().unwrap().expect("granted").is_some());
    let r = &events(trace::RETRY, mine)[0];
    assert_eq!(r.fields[trace::CAUSE], "MOVED", "{r:?}");
    assert_eq!(r.fields[trace::NODE], format!("127.0.0.1:{}", cluster.node(0).port()));
    let a = spans(trace::ACQUIRE, &key);
    let waited =
        a.iter().find(|a| a.fields.get(trace::WAIT_MS).map(String::as_str) == Some("10000")).expect("the wait");
    assert_eq!(field(waited, trace::OUTCOME), trace::GRANTED);
    assert_eq!(field(waited, trace::SERVER), format!("127.0.0.1:{}", cluster.node(1).port()));
}
