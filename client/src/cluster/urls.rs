//! Naming a cluster's nodes: the cluster URL forms, and a node's
//! `host:port`.

use redis::{ConnectionAddr, ConnectionInfo};

/// `host:port` of a node.
pub(crate) type Addr = (String, u16);

/// True for `redis+cluster://` and `rediss+cluster://` URLs, which
/// [`LockClient::open`](crate::LockClient::open) opens as a cluster.
pub fn is_cluster_url(url: &str) -> bool {
    url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://")
}

/// `redis+cluster://h1:p1,h2:p2/` (or one URL per seed) as plain
/// `redis://` seed URLs, the form redis-rs connects to, for a tool that
/// talks to the nodes itself (the `redis-lock` CLI's `list`): the
/// credentials before the first host and the path after the last apply to
/// every seed.
///
/// ```
/// assert_eq!(
///     redis_lock_client::cluster_seed_urls(&["redis+cluster://:pw@a:1,b:2/0"]),
///     ["redis://:pw@a:1/0", "redis://:pw@b:2/0"]
/// );
/// ```
pub fn cluster_seed_urls<S: AsRef<str>>(urls: &[S]) -> Vec<String> {
    let mut out = Vec::new();
    for u in urls {
        let u = u.as_ref();
        let (scheme, rest) = match u.split_once("://") {
            Some((s, r)) => (s.trim_end_matches("+cluster"), r),
            None => ("redis", u),
        };
        // A comma-separated host list: credentials before the first host and
        // the path after the last apply to every seed.
        let (auth, hosts) = match rest.rsplit_once('@') {
            Some((a, h)) => (format!("{a}@"), h),
            None => (String::new(), rest),
        };
        let (hosts, path) = match hosts.find(['/', '?']) {
            Some(i) => hosts.split_at(i),
            None => (hosts, ""),
        };
        for h in hosts.split(',').filter(|h| !h.is_empty()) {
            out.push(format!("{scheme}://{auth}{h}{path}"));
        }
    }
    out
}

pub(crate) fn parse_addr(s: &str) -> Option<Addr> {
    let (h, p) = s.rsplit_once(':')?;
    Some((h.trim_start_matches('[').trim_end_matches(']').to_string(), p.parse().ok()?))
}

pub(crate) fn addr_of(info: &ConnectionInfo) -> Option<Addr> {
    match info.addr() {
        ConnectionAddr::Tcp(h, p) => Some((h.clone(), *p)),
        ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use cluster_seed_urls as seed_urls;

    #[test]
    fn cluster_urls_become_seed_urls() {
        assert_eq!(
            seed_urls(&["redis+cluster://127.0.0.1:7000,127.0.0.1:7001/"]),
            ["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]
        );
        assert_eq!(seed_urls(&["rediss+cluster://u:p@a:1,b:2/0"]), ["rediss://u:p@a:1/0", "rediss://u:p@b:2/0"]);
        assert_eq!(seed_urls(&["redis://a:1/", "redis://b:2"]), ["redis://a:1/", "redis://b:2"]);
        assert!(is_cluster_url("redis+cluster://a:1/"));
        assert!(!is_cluster_url("redis://a:1/"));
    }
}
