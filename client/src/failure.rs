//! [`QuorumFailure`]: what each server answered when a quorum operation
//! fell short, carried by [`Error::NoQuorum`](crate::Error::NoQuorum). At
//! the bottom layer with the error it is part of: it imports nothing.

use std::fmt;

/// A quorum operation that reached no majority: how many servers did what.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct QuorumFailure {
    /// The lock key.
    pub key: String,
    /// `"acquire"`, `"renew"` or `"release"`.
    pub operation: &'static str,
    /// Servers in the quorum client.
    pub nodes: usize,
    /// The majority: ⌊nodes/2⌋ + 1.
    pub needed: usize,
    /// Servers where the operation took effect (and, for acquire, the fence
    /// floor was confirmed where the server supports it).
    pub succeeded: usize,
    /// Servers that answered no (the key is another token's, or absent).
    pub refused: usize,
    /// Servers that failed, with why: connection errors, error replies, no
    /// answer within the node timeout. Their URLs are shown without
    /// user name and password.
    pub failed: Vec<(String, String)>,
    /// A majority did answer, but only after the lock's validity (TTL −
    /// elapsed − drift allowance) had run out.
    pub validity_ran_out: bool,
}

impl fmt::Display for QuorumFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of lock {:?} succeeded on {} of {} servers ({} needed)",
            self.operation, self.key, self.succeeded, self.nodes, self.needed
        )?;
        if self.validity_ran_out {
            write!(f, ", but only after the lock's validity ran out")?;
        }
        if self.refused > 0 {
            write!(f, "; {} refused", self.refused)?;
        }
        if !self.failed.is_empty() {
            write!(f, "; {} failed:", self.failed.len())?;
            for (i, (node, why)) in self.failed.iter().enumerate() {
                write!(f, "{} {node}: {why}", if i == 0 { "" } else { ";" })?;
            }
        }
        Ok(())
    }
}

/// `url` without its user name and password, for messages and logs.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}{}", &url[..scheme + 3], &url[at + 1..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(redact("redis://:secret@10.0.0.1:6379/0"), "redis://10.0.0.1:6379/0");
        assert_eq!(redact("rediss://user:pw@host/"), "rediss://host/");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }

    #[test]
    fn display_names_every_failed_server() {
        let f = QuorumFailure {
            key: "k".into(),
            operation: "acquire",
            nodes: 5,
            needed: 3,
            succeeded: 2,
            refused: 0,
            failed: vec![
                ("redis://a/".into(), "connection refused".into()),
                ("redis://b/".into(), "no answer within 50 ms".into()),
            ],
            validity_ran_out: false,
        };
        assert_eq!(
            f.to_string(),
            "acquire of lock \"k\" succeeded on 2 of 5 servers (3 needed); 2 failed: redis://a/: connection refused; redis://b/: no answer within 50 ms"
        );
    }
}
