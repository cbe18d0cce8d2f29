//! Redis Cluster facts the module needs without asking the server for each
//! key: a key's hash slot, and what `CLUSTER NODES` says about a slot here.

/// The hash slot of `key` (CRC16/XMODEM of the key, or of its first
/// non-empty `{...}` hash tag, modulo 16384), as `CLUSTER KEYSLOT` computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        key[open + 1..].iter().position(|&b| b == b'}').filter(|&len| len > 0).map(|len| &key[open + 1..open + 1 + len])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// What this node may do with a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// A master serving the slot, not moving it: grants may happen here.
    Served,
    /// Served here but being migrated away, or being imported here: where
    /// the key lives is in flux (`TRYAGAIN`).
    Moving,
    /// Served by another node (`MOVED slot addr`).
    Elsewhere { addr: String },
    /// No node serves it (`CLUSTERDOWN`).
    Unassigned,
}

/// The state of `slot` on this node, from `CLUSTER NODES` output.
pub fn slot_state(nodes: &str, slot: u16) -> SlotState {
    let mut owner: Option<(bool, &str)> = None;
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let [_id, addr, flags, _master, _ping, _pong, _epoch, _link, slots @ ..] = &fields[..] else { continue };
        let myself = flags.split(',').any(|f| f == "myself");
        for range in slots {
            if let Some(entry) = range.strip_prefix('[') {
                // "[slot->-id]" (migrating) or "[slot-<-id]" (importing), listed
                // only on this node's own line.
                let here = entry.split(['-', '>', '<']).next().and_then(|s| s.parse::<u16>().ok());
                if myself && here == Some(slot) {
                    return SlotState::Moving;
                }
                continue;
            }
            let (lo, hi) = match range.split_once('-') {
                Some((lo, hi)) => (lo.parse::<u16>(), hi.parse::<u16>()),
                None => (range.parse::<u16>(), range.parse::<u16>()),
            };
            if let (Ok(lo), Ok(hi)) = (lo, hi) {
                if (lo..=hi).contains(&slot) {
                    owner = Some((myself, addr));
                }
            }
        }
    }
    match owner {
        Some((true, _)) => SlotState::Served,
        // "ip:port@cport[,hostname]": clients want "ip:port".
        Some((false, addr)) => SlotState::Elsewhere { addr: addr.split(['@', ',']).next().unwrap_or(addr).to_string() },
        None => SlotState::Unassigned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on redis 7.0.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"job:42"), key_slot(b"job:42"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"), "an empty tag hashes the whole key");
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b""), 0);
    }

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-a slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383 42
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-41 43-5460 [100->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [6000-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]
";

    #[test]
    fn a_slot_is_served_here_moving_elsewhere_or_unassigned() {
        assert_eq!(slot_state(NODES, 0), SlotState::Served);
        assert_eq!(slot_state(NODES, 5460), SlotState::Served);
        assert_eq!(slot_state(NODES, 100), SlotState::Moving, "migrating away");
        assert_eq!(slot_state(NODES, 6000), SlotState::Moving, "importing");
        assert_eq!(slot_state(NODES, 6001), SlotState::Elsewhere { addr: "127.0.0.1:30002".into() });
        assert_eq!(slot_state(NODES, 42), SlotState::Elsewhere { addr: "127.0.0.1:30003".into() });
        assert_eq!(slot_state("", 7), SlotState::Unassigned);
        assert_eq!(slot_state("garbage\n\n x y z", 7), SlotState::Unassigned);
    }
}
