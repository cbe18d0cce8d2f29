//! Which server the tests run on, for the few tests whose right answer
//! depends on it (scripts/test runs the suite on several: README,
//! Compatibility).
//!
//! Read from the binary (`$REDIS_SERVER --version`) rather than from a
//! running server's `INFO server`: every Valkey reports `redis_version:7.2.4`
//! there, and a test may need to know before it starts a server.

use std::fmt;
use std::process::Command;
use std::sync::OnceLock;

/// Whose server it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Redis,
    Valkey,
}

/// A server's name and version, e.g. valkey 9.1.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerVersion {
    pub flavor: Flavor,
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl ServerVersion {
    /// True for Valkey.
    pub fn is_valkey(&self) -> bool {
        self.flavor == Flavor::Valkey
    }

    /// True for Redis.
    pub fn is_redis(&self) -> bool {
        self.flavor == Flavor::Redis
    }

    /// `(major, minor)`, to compare: `v.is_redis() && v.major_minor() >= (7, 2)`.
    pub fn major_minor(&self) -> (u32, u32) {
        (self.major, self.minor)
    }

    /// The Redis release whose module API the server has: its own version
    /// for Redis; for Valkey 7.2, which it forked from and reports as
    /// `redis_version` (Valkey has everything up to Redis 7.2's API).
    pub fn redis_api(&self) -> (u32, u32) {
        match self.flavor {
            Flavor::Redis => self.major_minor(),
            Flavor::Valkey => (7, 2),
        }
    }

    /// Parses the first line of `redis-server --version` / `valkey-server
    /// --version`: "Redis server v=8.2.3 sha=…" or "Valkey server v=9.1.2 …".
    pub fn parse(version_output: &str) -> Option<ServerVersion> {
        let flavor = match version_output.split_whitespace().next()? {
            "Redis" => Flavor::Redis,
            "Valkey" => Flavor::Valkey,
            _ => return None,
        };
        let v = version_output.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
        let mut parts = v.split('.').map(|p| p.parse::<u32>());
        let (major, minor, patch) = (parts.next()?.ok()?, parts.next()?.ok()?, parts.next()?.ok()?);
        Some(ServerVersion { flavor, major, minor, patch })
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.flavor {
            Flavor::Redis => "redis",
            Flavor::Valkey => "valkey",
        };
        write!(f, "{name} {}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The server binary the harness starts: `$REDIS_SERVER`, else
/// `redis-server` on `PATH`.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// The version of [`server_binary`], asked once per test process.
pub fn server_version() -> ServerVersion {
    static VERSION: OnceLock<ServerVersion> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let binary = server_binary();
        let out =
            Command::new(&binary).arg("--version").output().unwrap_or_else(|e| panic!("run {binary} --version: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        ServerVersion::parse(&text).unwrap_or_else(|| panic!("{binary} --version printed no version I know: {text:?}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_and_valkey_version_lines() {
        let r = ServerVersion::parse(
            "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=6f3b2b8f0fc4b8a2\n",
        )
        .unwrap();
        assert_eq!(r, ServerVersion { flavor: Flavor::Redis, major: 7, minor: 0, patch: 15 });
        assert_eq!(r.redis_api(), (7, 0));
        let v = ServerVersion::parse("Valkey server v=9.1.2 sha=13710afe:0 malloc=libc bits=64 build=3b081598bf4f676e")
            .unwrap();
        assert_eq!(v.to_string(), "valkey 9.1.2");
        assert!(v.is_valkey() && v.redis_api() == (7, 2));
        assert_eq!(ServerVersion::parse("KeyDB server v=6.3.4"), None);
        assert_eq!(ServerVersion::parse("Redis server v=8.2"), None);
    }
}
