//! The masters of a Redis Cluster, from a seed's `CLUSTER NODES`: every
//! key lives on exactly one of them, so listing them all lists the cluster.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult};

use crate::scan::connect;

/// Each master's connection info: the first seed that answers, with its
/// address swapped for each master's (credentials and TLS kept).
pub fn masters(seeds: &[String]) -> Result<Vec<ConnectionInfo>, String> {
    let mut errors = Vec::new();
    for seed in seeds {
        match ask(seed) {
            Ok(m) => return Ok(m),
            Err(e) => errors.push(format!("{seed}: {e}")),
        }
    }
    Err(format!("no cluster seed answered CLUSTER NODES ({})", errors.join("; ")))
}

fn ask(seed: &str) -> RedisResult<Vec<ConnectionInfo>> {
    let info = seed.into_connection_info()?;
    let mut con = connect(info.clone())?;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con)?;
    Ok(master_addrs(&nodes)
        .into_iter()
        .map(|(host, port)| info.clone().set_addr(moved(info.addr(), host, port)))
        .collect())
}

/// The seed's kind of address (TCP or TLS, with its TLS settings) at
/// another host and port.
fn moved(addr: &ConnectionAddr, host: String, port: u16) -> ConnectionAddr {
    match addr {
        ConnectionAddr::TcpTls { insecure, tls_params, .. } => {
            ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: tls_params.clone() }
        }
        _ => ConnectionAddr::Tcp(host, port),
    }
}

/// `host, port` of every reachable master in a `CLUSTER NODES` reply:
/// `<id> <ip:port@cport[,hostname]> <flags> ...`, flags such as
/// `myself,master`; one that has `fail`, `handshake` or `noaddr` has no
/// keys to show.
fn master_addrs(nodes: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in nodes.lines() {
        let mut f = line.split_whitespace();
        let (Some(_id), Some(addr), Some(flags)) = (f.next(), f.next(), f.next()) else { continue };
        let flags: Vec<&str> = flags.split(',').collect();
        if !flags.contains(&"master") || flags.iter().any(|f| matches!(*f, "fail" | "handshake" | "noaddr")) {
            continue;
        }
        let addr = addr.split(['@', ',']).next().unwrap_or("");
        let Some((host, port)) = addr.rsplit_once(':') else { continue };
        let (Ok(port), false) = (port.parse::<u16>(), host.is_empty()) else { continue };
        out.push((host.trim_start_matches('[').trim_end_matches(']').to_string(), port));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_of_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002,host-b master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7004@17004 slave a1 0 1 1 connected
d4 127.0.0.1:7003@17003 master,fail - 0 1 3 disconnected
e5 :0@0 master,noaddr - 0 1 4 disconnected
f6 [::1]:7005@17005 master - 0 1 5 connected 10923-16383
";
        assert_eq!(master_addrs(nodes), [("127.0.0.1".into(), 7001), ("127.0.0.1".into(), 7002), ("::1".into(), 7005)]);
    }
}
