//! One hold of a session: a lock key's database and name, and for a
//! semaphore's or read-write lock's holder its token, encoded as one byte
//! string (its *entry*). A [`HoldKey`] owns one entry in one allocation
//! behind a thin pointer (the revoked holds' table keeps them,
//! `crate::session_revoked` in the module); a [`HoldRef`] borrows one
//! from a session's [`crate::hold_set::HoldSet`], which keeps its entries
//! back to back. Ordered by the bytes after the length.
//!
//! Entry: `varint(len) varint(db * 2 + holder) [varint(token len)] name
//! [token]`, where `len` counts everything after itself (the *body*).

use std::alloc::{self, Layout};
use std::cmp::Ordering;
use std::ffi::c_int;
use std::ptr::NonNull;

/// A hold: see the module's documentation. Owns its bytes.
pub struct HoldKey(NonNull<u8>);

// The bytes are owned and never shared mutably.
unsafe impl Send for HoldKey {}
unsafe impl Sync for HoldKey {}

fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A varint at the start of `b`, and the bytes after it (a malformed one
/// reads as 0 and consumes what it saw: the bytes are always ours).
pub(crate) fn read_varint(b: &[u8]) -> (u64, &[u8]) {
    let mut n = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (n, &b[i + 1..]);
        }
    }
    (0, &[])
}

/// How many bytes `n` takes as a varint.
fn varint_len(n: u64) -> usize {
    1 + (63 - (n | 1).leading_zeros() as usize) / 7
}

/// The entry of the hold of `name` in `db`, with `token` for a holder (in
/// one allocation of its exact size).
pub fn entry(db: c_int, name: &[u8], token: Option<&[u8]>) -> Vec<u8> {
    let tagged = (u64::from(db as u32) << 1) | u64::from(token.is_some());
    let token_len = token.map_or(0, <[u8]>::len);
    let len = varint_len(tagged) + token.map_or(0, |t| varint_len(t.len() as u64)) + name.len() + token_len;
    let mut all = Vec::with_capacity(varint_len(len as u64) + len);
    push_varint(&mut all, len as u64);
    push_varint(&mut all, tagged);
    if let Some(t) = token {
        push_varint(&mut all, t.len() as u64);
    }
    all.extend_from_slice(name);
    all.extend_from_slice(token.unwrap_or_default());
    all
}

/// The body of the entry at the start of `b`, and the bytes after it
/// (entries are always ours: a short one is cut where `b` ends).
pub(crate) fn next_entry(b: &[u8]) -> (&[u8], &[u8]) {
    // One byte for any body below 128 bytes: the usual case first.
    let (len, rest) = match b.first() {
        Some(&n) if n < 0x80 => (usize::from(n), &b[1..]),
        _ => {
            let (n, rest) = read_varint(b);
            (n as usize, rest)
        }
    };
    rest.split_at(len.min(rest.len()))
}

/// A borrowed hold: an entry's body.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HoldRef<'a>(pub(crate) &'a [u8]);

impl<'a> HoldRef<'a> {
    /// Its database, key name, and token for a holder's.
    pub fn split(&self) -> (c_int, &'a [u8], Option<&'a [u8]>) {
        split_body(self.0)
    }

    /// Its key name's and token's bytes (a slice's budget).
    pub fn weight(&self) -> usize {
        self.0.len()
    }

    /// An owned copy.
    pub fn to_key(&self) -> HoldKey {
        let (db, name, token) = self.split();
        HoldKey::new(db, name, token)
    }
}

impl std::fmt::Debug for HoldRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.split())
    }
}

fn split_body(body: &[u8]) -> (c_int, &[u8], Option<&[u8]>) {
    let (tagged, rest) = read_varint(body);
    let db = (tagged >> 1) as u32 as c_int;
    if tagged & 1 == 0 {
        return (db, rest, None);
    }
    let (token_len, rest) = read_varint(rest);
    let (name, token) = rest.split_at(rest.len().saturating_sub(token_len as usize));
    (db, name, Some(token))
}

impl HoldKey {
    /// The hold of `name` in `db`, with `token` for a holder.
    pub fn new(db: c_int, name: &[u8], token: Option<&[u8]>) -> HoldKey {
        // Its exact size: the box takes the vector's allocation as it is.
        let all = entry(db, name, token).into_boxed_slice();
        let p = Box::into_raw(all) as *mut u8;
        // SAFETY: a box's pointer is never null (at least the length byte:
        // a non-empty allocation of alignment 1, freed in `drop` as such).
        HoldKey(unsafe { NonNull::new_unchecked(p) })
    }

    /// A copy of `all`, a whole entry as [`entry`] makes it.
    pub(crate) fn from_entry(all: &[u8]) -> HoldKey {
        let layout = Layout::from_size_align(all.len(), 1).unwrap_or_else(|_| Layout::new::<u8>());
        // SAFETY: `layout` has a non-zero size (at least the length byte).
        let p = unsafe { alloc::alloc(layout) };
        let Some(p) = NonNull::new(p) else { alloc::handle_alloc_error(layout) };
        // SAFETY: `p` has room for `all.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), p.as_ptr(), all.len()) };
        HoldKey(p)
    }

    /// Its whole entry.
    pub(crate) fn entry(&self) -> &[u8] {
        self.whole().1
    }

    /// Borrowed.
    pub fn as_hold(&self) -> HoldRef<'_> {
        HoldRef(self.body())
    }

    /// The length varint's size, and every byte of the allocation.
    fn whole(&self) -> (usize, &[u8]) {
        let p = self.0.as_ptr();
        let (mut len, mut n) = (0usize, 0usize);
        // SAFETY: the allocation starts with the length varint `new` wrote
        // (at most 5 bytes: a length below 2^35), then that many bytes.
        unsafe {
            loop {
                let b = *p.add(n);
                len |= usize::from(b & 0x7f) << (7 * n);
                n += 1;
                if b & 0x80 == 0 || n == 5 {
                    break;
                }
            }
            (n, std::slice::from_raw_parts(p, n + len))
        }
    }

    /// The bytes after the length: what orders holds.
    pub(crate) fn body(&self) -> &[u8] {
        let (n, whole) = self.whole();
        &whole[n..]
    }

    /// Its database, key name, and token for a holder's.
    pub fn split(&self) -> (c_int, &[u8], Option<&[u8]>) {
        split_body(self.body())
    }

    /// Its key name's and token's bytes (a slice's budget).
    pub fn weight(&self) -> usize {
        self.body().len()
    }
}

impl Drop for HoldKey {
    fn drop(&mut self) {
        let size = self.whole().1.len();
        // SAFETY: allocated in `new` with this size and alignment 1.
        unsafe { alloc::dealloc(self.0.as_ptr(), Layout::from_size_align_unchecked(size, 1)) };
    }
}

impl Clone for HoldKey {
    fn clone(&self) -> HoldKey {
        let (db, name, token) = self.split();
        HoldKey::new(db, name, token)
    }
}

impl PartialEq for HoldKey {
    fn eq(&self, other: &Self) -> bool {
        self.body() == other.body()
    }
}

impl Eq for HoldKey {}

impl PartialOrd for HoldKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HoldKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.body().cmp(other.body())
    }
}

impl std::fmt::Debug for HoldKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.split())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_keeps_its_parts() {
        let long = vec![7u8; 300];
        for (db, name, token) in
            [(0, &b"k"[..], None), (15, b"", Some(&b"t"[..])), (1 << 20, &long[..], Some(&long[..5]))]
        {
            let h = HoldKey::new(db, name, token);
            assert_eq!(h.split(), (db, name, token));
            assert_eq!(HoldKey::new(db, name, token), h);
            assert_eq!(h.clone().split(), (db, name, token));
        }
        assert!(HoldKey::new(0, b"a", None) < HoldKey::new(0, b"b", None));
        let h = HoldKey::new(3, &long, None);
        assert_eq!(next_entry(h.entry()), (h.body(), &[][..]));
        assert_eq!(h.as_hold().split(), (3, &long[..], None));
        assert_eq!(h.as_hold().to_key(), h);
        assert_eq!(h.as_hold().weight(), h.weight());
    }
}
