//! The renewal engine's batches in a cluster: one pipeline per master,
//! grouped by a `CLUSTER SLOTS` map; a key the map placed wrong (a `MOVED`
//! in the pipeline) goes alone through redis-rs's routing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::cluster_routing::{Route as SlotRoute, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::Value;

use crate::cluster::urls::Addr;
use crate::cluster::{lock, Cluster, SlotMap};
use crate::cmd::{Grant, LockCmd};
use crate::engine;
use crate::error::{Error, Result};
use crate::trace;
use crate::transport::bounded;

/// How long a slot map is trusted without a redirect proving it wrong.
const SLOT_MAP_MAX_AGE: Duration = Duration::from_secs(5);

/// A `CLUSTER SLOTS` reply: `[start, end, [host, port, ...], replicas...]`
/// per range. `None` when it does not read as one.
fn parse_slots(v: Value) -> Option<SlotMap> {
    let Value::Array(ranges) = v else { return None };
    let mut map = Vec::with_capacity(ranges.len());
    for r in ranges {
        let Value::Array(r) = r else { return None };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (r.first(), r.get(1), r.get(2))
        else {
            return None;
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
            Some(Value::SimpleString(h)) => h.clone(),
            _ => return None,
        };
        let Some(Value::Int(port)) = master.get(1) else { return None };
        map.push((u16::try_from(*start).ok()?, u16::try_from(*end).ok()?, (host, u16::try_from(*port).ok()?)));
    }
    Some(map)
}

pub(crate) fn owner_of(map: &SlotMap, slot: u16) -> Option<&Addr> {
    owner_in(map, slot)
}

fn owner_in(map: &SlotMap, slot: u16) -> Option<&Addr> {
    map.iter().find(|(a, b, _)| (*a..=*b).contains(&slot)).map(|(_, _, addr)| addr)
}

/// A reply in a batch that the routed single command handles better: a
/// redirect (the map was stale), or a node that cannot serve now.
fn retry_alone(v: &Value) -> bool {
    let Value::ServerError(e) = v else { return false };
    matches!(e.code(), "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "MASTERDOWN")
}

impl Cluster {
    /// The slot map, read again when stale.
    pub(crate) async fn slot_map(&self) -> Option<Arc<SlotMap>> {
        if let Some((at, map)) = lock(&self.slot_map).as_ref() {
            if at.elapsed() < SLOT_MAP_MAX_AGE {
                return Some(map.clone());
            }
        }
        let fut = async {
            let mut con = self.conn().await?;
            let v = con
                .route_command(
                    redis::cmd("CLUSTER").arg("SLOTS").clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                )
                .await?;
            Ok::<_, Error>(v)
        };
        let map = Arc::new(parse_slots(bounded(&self.opts, fut).await.ok()?)?);
        *lock(&self.slot_map) = Some((Instant::now(), map.clone()));
        Some(map)
    }

    pub(crate) fn slot_map_stale(&self) {
        *lock(&self.slot_map) = None;
    }

    /// Many renew or release commands: one pipeline per master (at most
    /// `batch` commands each) for the keys the slot map places there, the
    /// rest (and those a pipeline found moved) alone through redis-rs's
    /// routing. Per command when it was sent and its outcome.
    pub(crate) async fn run_batch(&self, cmds: Vec<LockCmd>, batch: usize) -> Vec<(Instant, Result<Grant>)> {
        use futures_util::stream::{self, StreamExt};
        let map = self.slot_map().await;
        let now = Instant::now();
        let mut groups: HashMap<&Addr, Vec<usize>> = HashMap::new();
        let mut alone = Vec::new();
        for (i, c) in cmds.iter().enumerate() {
            let slot = redis_lock_rules::cluster::key_slot(c.key().as_bytes());
            let scripts = lock(&self.scripts).get(&Slot::for_key(c.key())).is_some_and(|until| *until > now);
            match map.as_deref().and_then(|m| owner_in(m, slot)) {
                Some(addr) if !scripts => groups.entry(addr).or_default().push(i),
                _ => alone.push(i),
            }
        }
        let jobs: Vec<Vec<usize>> = groups
            .into_values()
            .flat_map(|idx| idx.chunks(batch.max(1)).map(<[usize]>::to_vec).collect::<Vec<_>>())
            .collect();
        let cmds = &cmds;
        let map = &map;
        let sent_pipelines: Vec<(Vec<usize>, Instant, Result<Vec<Value>>)> = stream::iter(jobs)
            .map(|idx| async move {
                let mut pipe = redis::pipe();
                for &i in &idx {
                    pipe.add_command(cmds[i].module_cmd());
                }
                // Routed to the master of the group's first key: all of the
                // group's keys are there as far as the map knows.
                let route = SingleNodeRoutingInfo::SpecificNode(SlotRoute::with_slot(
                    Slot::for_key(cmds[idx[0]].key()),
                    SlotAddr::Master,
                ));
                let n = idx.len();
                let sent = Instant::now();
                let fut = async {
                    let mut con = self.conn().await?;
                    Ok::<_, Error>(con.route_pipeline(pipe, 0, n, route).await?)
                };
                let r = bounded(&self.opts, fut).await;
                if let Some((host, port)) = map
                    .as_deref()
                    .and_then(|m| owner_in(m, redis_lock_rules::cluster::key_slot(cmds[idx[0]].key().as_bytes())))
                {
                    let failed = match &r {
                        Ok(v) => v.iter().filter(|v| matches!(v, Value::ServerError(_))).count(),
                        Err(_) => n,
                    };
                    trace::batch_event(format_args!("{host}:{port}"), cmds[idx[0]].name(), n, failed, sent);
                }
                (idx, sent, r)
            })
            .buffer_unordered(engine::MAX_IN_FLIGHT)
            .collect()
            .await;
        let mut out: Vec<Option<(Instant, Result<Grant>)>> = (0..cmds.len()).map(|_| None).collect();
        for (idx, sent, r) in sent_pipelines {
            match r {
                Ok(values) if values.len() == idx.len() => {
                    for (i, v) in idx.into_iter().zip(values) {
                        if retry_alone(&v) {
                            self.slot_map_stale();
                            alone.push(i);
                            continue;
                        }
                        match cmds[i].batch_reply(v) {
                            Some(r) => out[i] = Some((sent, r.map_err(Error::from))),
                            None => alone.push(i),
                        }
                    }
                }
                // The node failed (a failover?): the watchdog retries these
                // after TTL/10, by then through a fresh map.
                Ok(_) | Err(_) => {
                    self.slot_map_stale();
                    let e = match r {
                        Err(e) => e,
                        Ok(v) => Error::Redis(crate::cmd::unexpected(Value::Array(v))),
                    };
                    let n = idx.len();
                    for (i, f) in idx.into_iter().zip(engine::failed_all(&e, n)) {
                        out[i] = Some((sent, f));
                    }
                }
            }
        }
        let routed = (alone.len(), alone.first().map_or("", |&i| cmds[i].name()), Instant::now());
        let singles: Vec<(usize, Instant, Result<Grant>)> = stream::iter(alone)
            .map(|i| async move {
                let sent = Instant::now();
                (i, sent, self.run(&cmds[i]).await)
            })
            .buffer_unordered(engine::MAX_IN_FLIGHT)
            .collect()
            .await;
        if routed.0 > 0 {
            let failed = singles.iter().filter(|(_, _, r)| r.is_err()).count();
            trace::batch_event("routed", routed.1, routed.0, failed, routed.2);
        }
        for (i, sent, r) in singles {
            out[i] = Some((sent, r));
        }
        out.into_iter().map(|o| o.unwrap_or_else(|| (now, Err(Error::InvalidArgument("no answer".into()))))).collect()
    }
}
