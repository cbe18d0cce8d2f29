//! Which servers a command talks to: `--url` (repeatable), `--cluster`,
//! `$REDIS_URL`, and the clients opened on them.

use redis_lock_client::{is_cluster_url, ClientOptions, Error, LockClient, QuorumClient, QuorumOptions};

use crate::args::Target;
use crate::fail::{redis_fail, usage, Fail};

/// What the `--url`s (else `$REDIS_URL`) name.
pub enum Servers {
    /// One server.
    One(String),
    /// The seed nodes of one Redis Cluster: `--cluster`, or a
    /// `redis+cluster://` URL.
    Cluster(Vec<String>),
    /// Several independent servers: a quorum lock's.
    Quorum(Vec<String>),
}

impl Target {
    pub fn servers(&self) -> Servers {
        let urls = if self.urls.is_empty() { vec![default_url()] } else { self.urls.clone() };
        if self.cluster || urls.iter().any(|u| is_cluster_url(u)) {
            Servers::Cluster(urls)
        } else if urls.len() > 1 {
            Servers::Quorum(urls)
        } else {
            Servers::One(urls.into_iter().next().unwrap_or_else(default_url))
        }
    }

    /// The client of a one-lock-service command: a cluster or one server.
    pub fn open(&self, opts: ClientOptions) -> Result<LockClient, Fail> {
        match self.servers() {
            Servers::Cluster(seeds) => LockClient::open_cluster_with(&seeds, opts),
            Servers::One(url) => LockClient::open_with(&url, opts),
            Servers::Quorum(_) => return Err(usage("this command takes one --url (or --cluster)")),
        }
        .map_err(client_fail)
    }
}

/// Opens a quorum client on `urls`, its locks held with a session on each
/// server unless `sessions` is off (`--no-session`).
pub fn open_quorum(urls: &[String], sessions: bool) -> Result<QuorumClient, Fail> {
    QuorumClient::open_with(urls, QuorumOptions::new().sessions(sessions)).map_err(client_fail)
}

/// A bad URL or option is a usage error; anything else is Redis's.
pub fn client_fail(e: Error) -> Fail {
    match e {
        e @ Error::InvalidArgument(_) => usage(e.to_string()),
        e => redis_fail(e),
    }
}

fn default_url() -> String {
    std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "redis://127.0.0.1:6379/".into())
}

#[cfg(test)]
mod tests {
    use redis_lock_client::cluster_seed_urls as seed_urls;

    #[test]
    fn cluster_urls_become_seeds() {
        let s = |u: &[&str]| seed_urls(&u.iter().map(|u| u.to_string()).collect::<Vec<_>>());
        assert_eq!(s(&["redis+cluster://:pw@a:1,b:2/0"]), ["redis://:pw@a:1/0", "redis://:pw@b:2/0"]);
        assert_eq!(s(&["rediss+cluster://a:1"]), ["rediss://a:1"]);
        assert_eq!(s(&["redis://a:1/", "b:2"]), ["redis://a:1/", "redis://b:2"]);
    }
}
