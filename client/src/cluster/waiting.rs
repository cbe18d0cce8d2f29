//! A blocking acquire in a cluster: the I/O half of a wait, on a dedicated
//! connection to the slot's owner; where it goes after each failure is the
//! router's (`route.rs`), and what it learns about owners and nodes is kept
//! here for the next waits.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::cluster_routing::Slot;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisResult};

use crate::cluster::route::{Action, Note, Router, Then};
use crate::cluster::urls::Addr;
use crate::cluster::{lock, Cluster};
use crate::cmd::{is_wait_unsupported, Backend, LockCmd};
use crate::error::{Error, Result};
use crate::runtime;
use crate::send::{self, BackendCell};
use crate::trace;
use crate::transport;
use crate::wait::{self, ReleaseOnCancel, Waited};

impl Cluster {
    /// A blocking acquire in a cluster, on a dedicated connection to the
    /// slot's owner (see the module docs).
    pub(crate) async fn wait_acquire(self: &Arc<Self>, cmd: &LockCmd, ttl: Duration, left: Duration) -> Result<Waited> {
        let cl = self;
        let slot = Slot::for_key(cmd.key());
        let mut route = Router::new(&cl.seeds, cl.owner(slot), Instant::now(), left)
            .ok_or_else(|| Error::InvalidArgument("no cluster seed node".into()))?;
        loop {
            let addr = route.addr().clone();
            let cell = cl.node_cell(&addr);
            let pooled = cl.waits.take(&addr);
            let reused = pooled.is_some();
            let mut con = match pooled {
                Some(c) => c,
                None => match cl.open_wait(&addr).await? {
                    Ok(c) => c,
                    Err(_) => {
                        let action = route.unreachable(Instant::now(), rand::random(), cl.owner(slot));
                        match cl.follow(slot, cmd, action).await {
                            Then::Retry(_) => continue,
                            Then::GiveUp => return Ok(Waited::Refused),
                            Then::Fail => unreachable!("a refused connection only moves the wait"),
                        }
                    }
                },
            };
            let left = route.left(Instant::now());
            con.set_response_timeout(left.saturating_add(cl.opts.response_timeout));
            let guard = ReleaseOnCancel::new(transport::release_later(cl.clone(), cmd));
            let asked = if route.asking() { redis::cmd("ASKING").query_async::<()>(&mut con).await } else { Ok(()) };
            let sent = Instant::now();
            let r = match asked {
                Ok(()) => {
                    let waiting = cmd.with_wait(wait::wait_ms(left));
                    send::drive_async(send::Lock::new(&waiting, &cell), &mut con).await
                }
                Err(e) => Err(e),
            };
            match r {
                Ok(g) if g.took_effect() => {
                    let fence = g.fence();
                    cl.learn_route(slot, route.granted());
                    cell.set_wait(true);
                    cl.backend.set(Backend::Module);
                    cl.waits.put(&addr, con);
                    return wait::confirm(cmd, ttl, fence, sent, guard, |renew| async move { cl.run(&renew).await })
                        .await;
                }
                Ok(_) => {
                    guard.disarm();
                    cl.waits.put(&addr, con);
                    let w = wait::refused(&cell);
                    if cell.get() == Backend::Scripts {
                        cl.backend.set(Backend::Scripts);
                    }
                    return Ok(w);
                }
                Err(e) if is_wait_unsupported(&e) => {
                    guard.disarm();
                    cell.set_wait(false);
                    cl.backend.set_wait(false);
                    cl.waits.put(&addr, con);
                    return Ok(Waited::Unsupported);
                }
                Err(e) => {
                    // Released below when the router says the wait may
                    // have been granted, not by the guard's spawned task,
                    // which could otherwise run after a retry's grant.
                    guard.disarm();
                    let action = route.failed(&e, reused, Instant::now(), rand::random(), cl.owner(slot));
                    if let Then::Retry(pause) = &action.then {
                        trace::retry_event(cmd.key(), format_args!("{}:{}", addr.0, addr.1), &e, *pause);
                    }
                    if action.keep_connection {
                        cl.waits.put(&addr, con);
                    } else {
                        drop(con);
                    }
                    match cl.follow(slot, cmd, action).await {
                        Then::Retry(_) => {}
                        Then::GiveUp => return Ok(Waited::Refused),
                        Then::Fail => return Err(e.into()),
                    }
                }
            }
        }
    }

    /// Carries out the router's `action` after a failure: the release of a
    /// possible grant, what it learned, its pause.
    async fn follow(self: &Arc<Self>, slot: Slot, cmd: &LockCmd, action: Action) -> Then {
        if action.release_first {
            transport::release_later(self.clone(), cmd).await;
        }
        for note in action.notes {
            self.learn_route(slot, Some(note));
        }
        if let Then::Retry(pause) = action.then {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        action.then
    }

    pub(super) fn learn_route(&self, slot: Slot, note: Option<Note>) {
        match note {
            Some(Note::Owner(a)) => {
                lock(&self.owners).insert(slot, a);
            }
            Some(Note::NotOwner(a)) => {
                let mut owners = lock(&self.owners);
                if owners.get(&slot) == Some(&a) {
                    owners.remove(&slot);
                }
            }
            // Its idle wait connections are closed too.
            Some(Note::NodeDown(a)) => self.waits.forget(&a),
            None => {}
        }
    }

    /// The owner a wait last reached, for `slot`.
    pub(super) fn owner(&self, slot: Slot) -> Option<Addr> {
        lock(&self.owners).get(&slot).cloned()
    }

    fn node_cell(&self, addr: &Addr) -> Arc<BackendCell> {
        lock(&self.nodes).entry(addr.clone()).or_default().clone()
    }

    /// A dedicated connection to `addr`, on the background runtime. The
    /// outer error is the runtime's, the inner one the connection's.
    pub(super) async fn open_wait(&self, addr: &Addr) -> Result<RedisResult<MultiplexedConnection>> {
        // No response timeout of its own: each use sets one.
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.opts.connect_timeout))
            .set_response_timeout(None);
        let info = self.info_for(addr);
        runtime::on_background(async move {
            redis::Client::open(info)?.get_multiplexed_async_connection_with_config(&cfg).await
        })
        .await
    }

    /// The first seed's connection settings (credentials, TLS) at `addr`.
    fn info_for(&self, addr: &Addr) -> ConnectionInfo {
        let a = match self.template.addr() {
            ConnectionAddr::TcpTls { insecure, tls_params, .. } => ConnectionAddr::TcpTls {
                host: addr.0.clone(),
                port: addr.1,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(addr.0.clone(), addr.1),
        };
        self.template.clone().set_addr(a)
    }
}
