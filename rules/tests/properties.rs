//! Properties of the pure rules over random input: nothing panics, and the
//! rules agree with each other. (The agreement with redis-server itself is
//! the differential test's job: tests/differential in the workspace root.)

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis_lock_rules::cjson::{decode, is_valid, Decoded, Field};
use redis_lock_rules::encode::structured_value;
use redis_lock_rules::lock::{may_take_over, owner_of, owns, Owner};
use redis_lock_rules::{Entry, Remaining};

fn random_value(rng: &mut StdRng) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b"{",
        b"}",
        b"[",
        b"]",
        b":",
        b",",
        b"\"",
        b"\\",
        b"\\u",
        b"d800",
        b"dc00",
        b"0041",
        b"owner",
        b"runId",
        b"\"owner\"",
        b"\"runId\"",
        b"true",
        b"false",
        b"null",
        b"1",
        b"-",
        b"+",
        b".",
        b"e",
        b"0x",
        b"inf",
        b"nan(",
        b")",
        b" ",
        b"\t",
        b"\0",
        b"\xff",
        b"\x01",
        b"tok",
    ];
    let n = rng.gen_range(0..24);
    let mut v = Vec::new();
    for _ in 0..n {
        if rng.gen_bool(0.9) {
            v.extend_from_slice(PIECES[rng.gen_range(0..PIECES.len())]);
        } else {
            v.push(rng.gen());
        }
    }
    v
}

#[test]
fn random_values_never_panic_and_rules_stay_consistent() {
    let mut rng = StdRng::seed_from_u64(42);
    for _ in 0..200_000 {
        let v = random_value(&mut rng);
        let d = decode(&v);
        if matches!(d, Decoded::Table { .. }) {
            assert!(is_valid(&v), "a table must be a valid document: {:?}", String::from_utf8_lossy(&v));
        }
        // A value that is not a structured owner is owned by exactly itself.
        match owner_of(&v) {
            Owner::Raw(raw) => {
                assert_eq!(raw, &v[..]);
                assert!(owns(&v, &v));
            }
            Owner::Str(s) => assert!(owns(&v, &s.to_vec())),
            Owner::Unmatchable => assert!(!owns(&v, &v)),
        }
        // A structured value is never taken over for a run it does not name.
        if let Decoded::Table { run_id, .. } = d {
            let named = matches!(run_id, Field::Str(s) if s.decodes_to(b"zz-other-run"));
            assert_eq!(may_take_over(Entry::Str(&v), b"zz-other-run", 1000, || Remaining::Persistent), Ok(named));
        }
    }
}

#[test]
fn structured_values_round_trip_through_cjson() {
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..20_000 {
        let gen = |rng: &mut StdRng| -> String {
            (0..rng.gen_range(1..12))
                .map(|_| char::from_u32(rng.gen_range(0..0x11_0000)).unwrap_or('\u{fffd}'))
                .collect()
        };
        let (token, run) = (gen(&mut rng), gen(&mut rng));
        let v = structured_value(&token, &run);
        assert!(owns(&v, token.as_bytes()), "{token:?}");
        assert_eq!(may_take_over(Entry::Str(&v), run.as_bytes(), 1000, || Remaining::Persistent), Ok(true));
        assert!(std::str::from_utf8(&v).is_ok());
    }
}
