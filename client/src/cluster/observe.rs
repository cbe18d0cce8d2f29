//! An observer in a cluster: one blocking `LOCK.OBSERVE` at a time on a
//! connection of its own to the slot's owner, routed like a wait
//! (`route.rs`): it follows `MOVED` (and `ASK`, after `ASKING`) at once,
//! pauses on `TRYAGAIN`, `CLUSTERDOWN` and `UNBLOCKED`, and moves on to
//! other nodes when one drops or refuses the connection (a failover), for
//! up to [`RIDE_OUT`] per call. Nothing is granted, so nothing is released
//! on the way. What it learns about the slot's owner serves the waits too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::cluster_routing::Slot;
use redis::Value;

use crate::cluster::route::{Router, Then};
use crate::cluster::urls::Addr;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::transport::Observer;

/// How long one call keeps trying through a topology change before it
/// hands the error to the observer's stream (which pauses and calls again).
const RIDE_OUT: Duration = Duration::from_secs(30);

/// One observer's connection to the owner of its key's slot.
pub(super) struct ClusterObserver {
    cluster: Arc<Cluster>,
    slot: Slot,
    con: Option<(Addr, MultiplexedConnection)>,
}

impl ClusterObserver {
    pub(super) fn new(cluster: Arc<Cluster>, key: &str) -> ClusterObserver {
        ClusterObserver { cluster, slot: Slot::for_key(key), con: None }
    }

    async fn call_once(&mut self, cmd: &redis::Cmd, wait: Duration) -> Result<Value> {
        let cl = self.cluster.clone();
        let slot = self.slot;
        let mut route = Router::new(&cl.seeds, cl.owner(slot), Instant::now(), RIDE_OUT)
            .ok_or_else(|| Error::InvalidArgument("no cluster seed node".into()))?;
        loop {
            let addr = route.addr().clone();
            let (mut con, reused) = match self.con.take() {
                Some((a, c)) if a == addr => (c, true),
                _ => match cl.open_wait(&addr).await? {
                    Ok(c) => (c, false),
                    Err(e) => {
                        let action = route.unreachable(Instant::now(), rand::random(), cl.owner(slot));
                        for note in action.notes {
                            cl.learn_route(slot, Some(note));
                        }
                        match action.then {
                            Then::Retry(pause) => {
                                tokio::time::sleep(pause).await;
                                continue;
                            }
                            Then::GiveUp | Then::Fail => return Err(e.into()),
                        }
                    }
                },
            };
            con.set_response_timeout(wait.saturating_add(cl.opts.response_timeout));
            let asked = if route.asking() { redis::cmd("ASKING").query_async::<()>(&mut con).await } else { Ok(()) };
            let r = match asked {
                Ok(()) => cmd.query_async::<Value>(&mut con).await,
                Err(e) => Err(e),
            };
            let e = match r {
                Ok(v) => {
                    cl.learn_route(slot, route.granted());
                    self.con = Some((addr, con));
                    return Ok(v);
                }
                Err(e) => e,
            };
            let action = route.failed(&e, reused, Instant::now(), rand::random(), cl.owner(slot));
            if action.keep_connection {
                self.con = Some((addr, con));
            }
            for note in action.notes {
                cl.learn_route(slot, Some(note));
            }
            match action.then {
                Then::Retry(pause) if pause.is_zero() => {}
                Then::Retry(pause) => tokio::time::sleep(pause).await,
                Then::GiveUp | Then::Fail => return Err(e.into()),
            }
        }
    }
}

impl Observer for ClusterObserver {
    fn call<'a>(&'a mut self, cmd: &'a redis::Cmd, wait: Duration) -> BoxFuture<'a, Result<Value>> {
        Box::pin(self.call_once(cmd, wait))
    }
}
