//! LOCK.ACQUIREALL's keys: `numkeys key [key ...]`, as Redis's own
//! multi-key commands declare theirs, at most [`MAX_KEYS`] distinct
//! non-empty keys. The rest of its arguments (token, ttl-ms, options) are
//! LOCK.ACQUIRE's ([`crate::args`]).

use crate::error::ArgError;
use crate::number::{parse_positive, NotPositive};

/// The most keys one request may take (Consul's transactions take 64 too):
/// a request's cost grows with its keys, and a waiter on N keys holds a
/// place in N lines.
pub const MAX_KEYS: usize = 64;

/// `numkeys`: an integer from 1 to [`MAX_KEYS`].
pub fn parse_numkeys(arg: &[u8]) -> Result<usize, ArgError> {
    match parse_positive(arg) {
        Ok(n) if n as u64 <= MAX_KEYS as u64 => Ok(n as usize),
        Ok(_) | Err(NotPositive::TooLarge) => Err(ArgError::TooManyKeys),
        Err(NotPositive::Syntax) => Err(ArgError::NumKeysInvalid),
    }
}

/// The keys themselves: none empty, none twice. O(N log N).
pub fn check_keys(keys: &[&[u8]]) -> Result<(), ArgError> {
    if keys.iter().any(|k| k.is_empty()) {
        return Err(ArgError::KeyOrTokenMissing);
    }
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(ArgError::DuplicateKey);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numkeys_is_an_integer_from_one_to_the_limit() {
        assert_eq!(parse_numkeys(b"1"), Ok(1));
        assert_eq!(parse_numkeys(b"64"), Ok(64));
        assert_eq!(parse_numkeys(b"65"), Err(ArgError::TooManyKeys));
        assert_eq!(parse_numkeys(b"99999999999999999999"), Err(ArgError::TooManyKeys));
        for bad in [&b""[..], b"0", b"-1", b"01", b"x", b"1.0"] {
            assert_eq!(parse_numkeys(bad), Err(ArgError::NumKeysInvalid), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn keys_are_distinct_and_not_empty() {
        assert_eq!(check_keys(&[b"a", b"b", b"c"]), Ok(()));
        assert_eq!(check_keys(&[b"a", b"b", b"a"]), Err(ArgError::DuplicateKey));
        assert_eq!(check_keys(&[b"a", b""]), Err(ArgError::KeyOrTokenMissing));
        assert!(ArgError::TooManyKeys.reply().contains("64"));
    }
}
