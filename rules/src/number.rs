//! The numbers of command arguments, in the strict integer syntax Redis
//! accepts for `PX` (no sign, no leading zeros, no spaces, fits in 64
//! bits): one parser, and a name for each thing it reads, so that a limit
//! or a COUNT is not read by a function named for a ttl.

use crate::error::ArgError;

/// Why an argument is not a positive integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotPositive {
    /// Empty, 0, signed, a leading zero, or not digits.
    Syntax,
    /// More than `i64::MAX`.
    TooLarge,
}

/// A positive integer in Redis's strict syntax.
pub fn parse_positive(arg: &[u8]) -> Result<i64, NotPositive> {
    let (&first, rest) = arg.split_first().ok_or(NotPositive::Syntax)?;
    if !(b'1'..=b'9').contains(&first) {
        return Err(NotPositive::Syntax);
    }
    let mut v = i64::from(first - b'0');
    for &b in rest {
        if !b.is_ascii_digit() {
            return Err(NotPositive::Syntax);
        }
        v = v.checked_mul(10).and_then(|v| v.checked_add(i64::from(b - b'0'))).ok_or(NotPositive::TooLarge)?;
    }
    Ok(v)
}

/// `ttl-ms`: a positive integer, refused with the ttl's own error replies.
pub fn parse_ttl(arg: &[u8]) -> Result<i64, ArgError> {
    parse_positive(arg).map_err(|e| match e {
        NotPositive::Syntax => ArgError::TtlNotPositive,
        NotPositive::TooLarge => ArgError::TtlTooLarge,
    })
}

/// A `COUNT n` (how many items to list): a positive integer, `None` if it
/// is not one. The caller refuses with its command's own error reply and
/// applies its own cap.
pub fn parse_count(arg: &[u8]) -> Option<usize> {
    // On a 32-bit target a count beyond `usize` lists everything.
    parse_positive(arg).ok().map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_accepts_only_positive_canonical_integers() {
        assert_eq!(parse_ttl(b"1"), Ok(1));
        assert_eq!(parse_ttl(b"30000"), Ok(30_000));
        assert_eq!(parse_ttl(b"9223372036854775807"), Ok(i64::MAX));
        for bad in [&b""[..], b"0", b"-1", b"+1", b"01", b"1.5", b"1e3", b" 1", b"1 ", b"abc", b"0x10"] {
            assert_eq!(parse_ttl(bad), Err(ArgError::TtlNotPositive), "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_ttl(b"9223372036854775808"), Err(ArgError::TtlTooLarge));
        assert_eq!(parse_ttl(b"99999999999999999999999"), Err(ArgError::TtlTooLarge));
    }

    #[test]
    fn counts_are_positive_integers() {
        assert_eq!(parse_count(b"1"), Some(1));
        assert_eq!(parse_count(b"1000"), Some(1000));
        for bad in [&b""[..], b"0", b"-1", b"01", b"1.5", b"x", b"99999999999999999999"] {
            assert_eq!(parse_count(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_positive(b"0"), Err(NotPositive::Syntax));
        assert_eq!(parse_positive(b"9223372036854775808"), Err(NotPositive::TooLarge));
    }
}
