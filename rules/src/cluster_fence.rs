//! Fences in a Redis Cluster: led by the node's configEpoch.
//!
//! A key's slot is served by one master at a time, and Redis Cluster gives
//! every new owner of a slot a larger configEpoch than the owner before it:
//! a replica promoted by a failover wins an election for a new epoch, and a
//! node that imports a slot bumps its own epoch (`CLUSTER SETSLOT … NODE` on
//! the importing node does; the module bumps it itself, `CLUSTER BUMPEPOCH`,
//! before its first fenced grant after an import began, which covers grants
//! made through `ASK` before the move completes). So a fence made of
//!
//! ```text
//! OFFSET + configEpoch × 2^47 + ticks        (ticks: 1/32 ms since 2025-01-01)
//! ```
//!
//! and never below the node's own mark + 1 is, for every key, above every
//! fence an earlier owner handed out, whatever the owners' clocks say: the
//! epoch decides between nodes, and within one node and epoch the mark keeps
//! the order and the clock only matters where the mark was lost.
//!
//! `OFFSET` = 2^51 puts every cluster fence above the single-server fences
//! (microseconds since 1970, below 2^51 until 2041), so a server that
//! handed those out before it joined a cluster does not go back either.
//! Epochs up to [`MAX_EPOCH`] fit in 63 bits; beyond it (tens of thousands of
//! failovers and imports) the node falls back to single-server fences: still
//! increasing on each node, no longer ordered across nodes.

/// Every cluster fence is at least this: above single-server fences.
pub const OFFSET: u64 = 1 << 51;

/// Bits below the epoch.
pub const LOW_BITS: u32 = 47;

/// The largest configEpoch that still fits: OFFSET + (MAX_EPOCH + 1) × 2^47 = 2^63.
pub const MAX_EPOCH: u64 = (1 << 16) - 16 - 1;

/// 2025-01-01T00:00:00Z in Unix ms: ticks count from here.
pub const BASE_MS: i64 = 1_735_689_600_000;

/// Ticks per ms: a node may grant this many fenced locks per ms before its
/// mark runs ahead of its clock (which only matters if the mark is lost).
/// 2^47 ticks last ~139 years.
pub const TICKS_PER_MS: u64 = 32;

/// The lowest fence a node at `epoch` may hand out at `now_ms`, or `None`
/// when the epoch does not fit (use the single-server floor then).
pub fn floor(epoch: u64, now_ms: i64) -> Option<u64> {
    if epoch > MAX_EPOCH {
        return None;
    }
    let ms = u64::try_from(now_ms.saturating_sub(BASE_MS)).unwrap_or(0);
    let ticks = ms.saturating_mul(TICKS_PER_MS).min((1 << LOW_BITS) - 1);
    Some(OFFSET + (epoch << LOW_BITS) + ticks)
}

/// The next fence after `last` with this floor; `None` once the 63-bit
/// space is used up.
pub fn next(last: u64, floor: u64) -> Option<u64> {
    let next = last.checked_add(1)?.max(floor);
    (next <= crate::fence::MAX).then_some(next)
}

/// This node's configEpoch, `cluster_my_epoch:<n>`, from `CLUSTER INFO`.
pub fn my_epoch(cluster_info: &str) -> Option<u64> {
    cluster_info.lines().find_map(|l| l.strip_prefix("cluster_my_epoch:")).and_then(|v| v.trim().parse().ok())
}

/// The epoch a cluster fence was made in (for tests and diagnostics).
pub fn epoch_of(fence: u64) -> Option<u64> {
    fence.checked_sub(OFFSET).map(|f| f >> LOW_BITS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence;

    const NOW: i64 = 1_796_269_101_247; // 2026-12-03

    #[test]
    fn reads_my_epoch_from_cluster_info() {
        let info =
            "cluster_state:ok\r\ncluster_current_epoch:7\r\ncluster_my_epoch:4\r\ncluster_stats_messages_sent:1\r\n";
        assert_eq!(my_epoch(info), Some(4));
        assert_eq!(my_epoch("cluster_state:ok\r\n"), None);
    }

    #[test]
    fn a_larger_epoch_wins_over_any_clock() {
        // The old owner's clock 30 s ahead, the new one's 30 s behind.
        let old = floor(3, NOW + 30_000).unwrap();
        let new = floor(4, NOW - 30_000).unwrap();
        assert!(new > old);
        // Even a clock at 0 and one at the end of the tick range.
        assert!(floor(4, 0).unwrap() > floor(3, i64::MAX).unwrap());
        assert_eq!(epoch_of(floor(7, NOW).unwrap()), Some(7));
    }

    #[test]
    fn within_an_epoch_the_clock_and_the_mark_order_fences() {
        let a = floor(5, NOW).unwrap();
        assert_eq!(floor(5, NOW + 1).unwrap() - a, TICKS_PER_MS);
        assert_eq!(next(a, floor(5, NOW).unwrap()), Some(a + 1));
        // A clock that went back does not take fences back with it.
        assert_eq!(next(a, floor(5, NOW - 60_000).unwrap()), Some(a + 1));
        assert_eq!(next(a, floor(6, NOW - 60_000).unwrap()), floor(6, NOW - 60_000));
    }

    #[test]
    fn cluster_fences_sit_above_single_server_fences_and_fit_in_63_bits() {
        assert!(floor(0, BASE_MS).unwrap() > fence::clock_floor(NOW));
        assert!(OFFSET > fence::clock_floor(2_200_000_000_000)); // 2039
        assert_eq!(floor(MAX_EPOCH, i64::MAX), Some(fence::MAX));
        assert_eq!(floor(MAX_EPOCH + 1, NOW), None);
        assert_eq!(next(fence::MAX, 0), None);
        assert_eq!(floor(1, i64::MIN), Some(OFFSET + (1 << LOW_BITS)));
    }
}
