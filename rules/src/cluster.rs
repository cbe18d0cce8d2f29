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

/// The state of `slot` on this node, from `CLUSTER NODES` output, for a
/// master about to grant (a waiter's question).
pub fn slot_state(nodes: &str, slot: u16) -> SlotState {
    let view = NodesView::parse(nodes);
    if view.migrating.contains(&slot) || view.importing.contains(&slot) {
        return SlotState::Moving;
    }
    match view.owner(slot) {
        Some(o) if o.myself => SlotState::Served,
        Some(o) => SlotState::Elsewhere { addr: o.addr.clone() },
        None => SlotState::Unassigned,
    }
}

/// One reading of `CLUSTER NODES`, parsed once and then asked about many
/// slots: O(nodes + ranges) to build, O(log ranges) per slot. This is what
/// lets one reading a second serve the observers of every observed slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodesView {
    /// This node's own line, if the text had one.
    me: Option<Me>,
    /// Slot ranges with their owner (an index into `owners`), sorted.
    ranges: Vec<(u16, u16, usize)>,
    owners: Vec<Owner>,
    /// Slots this node is migrating away / importing (only its own line
    /// lists them), sorted.
    migrating: Vec<u16>,
    importing: Vec<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Me {
    id: String,
    /// The master's id when this node is a replica (`None` for a master,
    /// or for a replica whose master is not known yet).
    replica_of: Option<String>,
    replica: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    id: String,
    /// "ip:port", what `MOVED` names.
    addr: String,
    myself: bool,
}

/// What to do with the blocked observers of a slot's keys, decided as
/// Redis decides for its own blocked clients in a cluster
/// (`clusterRedirectBlockedClientIfNeeded`, 7.0) and, on a replica, for a
/// `READONLY` read (`getNodeByQuery`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObserverSlot {
    /// They keep waiting: this master serves the slot (or imports it: they
    /// came with `ASKING`), or this replica's master serves it.
    Wait,
    /// This master is migrating the slot away: observers of a key still
    /// here keep waiting (its changes happen here, and Redis serves its
    /// reads here); of a key not here (moved already, or never written),
    /// they are answered `TRYAGAIN`, where a new command would be sent on
    /// with `ASK`.
    WaitIfKeyHere,
    /// They are answered this error (no leading `-`): `MOVED slot addr`,
    /// or `CLUSTERDOWN` for a slot nobody serves.
    Redirect(String),
}

impl NodesView {
    /// Parses `CLUSTER NODES` output; lines it cannot read are skipped.
    pub fn parse(nodes: &str) -> NodesView {
        let mut view = NodesView::default();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            let [id, addr, flags, master, _ping, _pong, _epoch, _link, slots @ ..] = &fields[..] else { continue };
            let myself = flags.split(',').any(|f| f == "myself");
            if myself {
                let replica = flags.split(',').any(|f| f == "slave" || f == "replica");
                let replica_of = (replica && *master != "-").then(|| master.to_string());
                view.me = Some(Me { id: id.to_string(), replica_of, replica });
            }
            // "ip:port@cport[,hostname]": clients want "ip:port".
            let addr = addr.split(['@', ',']).next().unwrap_or(addr).to_string();
            let owner = view.owners.len();
            let mut owns = false;
            for range in slots {
                if let Some(entry) = range.strip_prefix('[') {
                    // "[slot->-id]" (migrating) or "[slot-<-id]" (importing), listed
                    // only on this node's own line.
                    let here = entry.split(['-', '>', '<']).next().and_then(|s| s.parse::<u16>().ok());
                    if let (true, Some(slot)) = (myself, here) {
                        if entry.contains("->-") {
                            view.migrating.push(slot);
                        } else {
                            view.importing.push(slot);
                        }
                    }
                    continue;
                }
                let (lo, hi) = match range.split_once('-') {
                    Some((lo, hi)) => (lo.parse::<u16>(), hi.parse::<u16>()),
                    None => (range.parse::<u16>(), range.parse::<u16>()),
                };
                if let (Ok(lo), Ok(hi)) = (lo, hi) {
                    if lo <= hi {
                        view.ranges.push((lo, hi, owner));
                        owns = true;
                    }
                }
            }
            if owns {
                view.owners.push(Owner { id: id.to_string(), addr, myself });
            }
        }
        // Stable: of two lines starting a range at one slot, the later wins.
        view.ranges.sort_by_key(|&(lo, _, _)| lo);
        view.migrating.sort_unstable();
        view.importing.sort_unstable();
        view
    }

    /// The owner of `slot`: the range starting last at or before it, if it
    /// reaches it (ranges never overlap in a view Redis writes).
    fn owner(&self, slot: u16) -> Option<&Owner> {
        let upto = self.ranges.partition_point(|&(lo, _, _)| lo <= slot);
        let &(_, hi, o) = self.ranges.get(..upto)?.last()?;
        (slot <= hi).then(|| self.owners.get(o)).flatten()
    }

    /// Where the observers of `slot`'s keys belong. A view without this
    /// node's own line (an error, an empty reply) redirects nobody.
    pub fn observers_at(&self, slot: u16) -> ObserverSlot {
        let Some(me) = &self.me else { return ObserverSlot::Wait };
        let owner = self.owner(slot);
        if me.replica {
            return match owner {
                Some(o) if o.myself || me.replica_of.as_deref() == Some(o.id.as_str()) => ObserverSlot::Wait,
                Some(o) => ObserverSlot::Redirect(format!("MOVED {slot} {}", o.addr)),
                None => ObserverSlot::Redirect("CLUSTERDOWN Hash slot not served".into()),
            };
        }
        if self.importing.binary_search(&slot).is_ok() {
            return ObserverSlot::Wait;
        }
        match owner {
            Some(o) if o.myself && self.migrating.binary_search(&slot).is_ok() => ObserverSlot::WaitIfKeyHere,
            Some(o) if o.myself => ObserverSlot::Wait,
            Some(o) => ObserverSlot::Redirect(format!("MOVED {slot} {}", o.addr)),
            None => ObserverSlot::Redirect("CLUSTERDOWN Hash slot not served".into()),
        }
    }
}

/// The error for observers of a key that left a slot this master is
/// migrating (see [`ObserverSlot::WaitIfKeyHere`]).
pub fn observer_tryagain(slot: u16) -> String {
    format!("TRYAGAIN slot {slot} is moving and the key is no longer here, retry")
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

    #[test]
    fn a_master_keeps_observers_of_what_it_serves_or_imports() {
        let v = NodesView::parse(NODES);
        assert_eq!(v.observers_at(0), ObserverSlot::Wait);
        assert_eq!(v.observers_at(5460), ObserverSlot::Wait);
        assert_eq!(v.observers_at(100), ObserverSlot::WaitIfKeyHere, "migrating away: the key decides");
        assert_eq!(v.observers_at(6000), ObserverSlot::Wait, "importing: they came with ASKING");
        assert_eq!(v.observers_at(6001), ObserverSlot::Redirect("MOVED 6001 127.0.0.1:30002".into()));
        assert_eq!(v.observers_at(42), ObserverSlot::Redirect("MOVED 42 127.0.0.1:30003".into()));
        assert_eq!(v.observers_at(16383), ObserverSlot::Redirect("MOVED 16383 127.0.0.1:30003".into()));
    }

    /// Node 30004's view: a replica of 30001, which serves 0-5460 but
    /// 42; 5461-5999 is nobody's.
    const REPLICA: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004 myself,slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002,host-b master - 0 1426238316232 2 connected 6000-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383 42
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 master - 0 0 1 connected 0-41 43-5460
";

    #[test]
    fn a_replica_keeps_observers_while_its_master_serves_the_slot() {
        let v = NodesView::parse(REPLICA);
        assert_eq!(v.observers_at(0), ObserverSlot::Wait);
        assert_eq!(v.observers_at(41), ObserverSlot::Wait);
        assert_eq!(v.observers_at(43), ObserverSlot::Wait);
        assert_eq!(v.observers_at(42), ObserverSlot::Redirect("MOVED 42 127.0.0.1:30003".into()));
        assert_eq!(v.observers_at(6000), ObserverSlot::Redirect("MOVED 6000 127.0.0.1:30002".into()));
        assert_eq!(v.observers_at(5500), ObserverSlot::Redirect("CLUSTERDOWN Hash slot not served".into()));
        // Promoted: the same node, now a master with the slots.
        let promoted = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004 myself,master - 0 1426238317239 5 connected 0-41 43-5460
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383 42
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 slave 07c37dfeb235213a872192d90877d0cd55635b91 0 0 5 connected
";
        let p = NodesView::parse(promoted);
        assert_eq!(p.observers_at(0), ObserverSlot::Wait, "{promoted}");
        assert_eq!(p.observers_at(42), ObserverSlot::Redirect("MOVED 42 127.0.0.1:30003".into()));
        // A replica whose master is not known yet serves no slot.
        let orphan = REPLICA.replace("myself,slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", "myself,slave -");
        assert_eq!(NodesView::parse(&orphan).observers_at(0), ObserverSlot::Redirect("MOVED 0 127.0.0.1:30001".into()));
    }

    #[test]
    fn a_view_without_this_node_redirects_nobody() {
        for text in ["", "garbage\n\n x y z", "ERR This instance has cluster support disabled"] {
            assert_eq!(NodesView::parse(text).observers_at(7), ObserverSlot::Wait, "{text:?}");
        }
        let others_only: String = REPLICA.lines().skip(1).map(|l| format!("{l}\n")).collect();
        assert_eq!(NodesView::parse(&others_only).observers_at(42), ObserverSlot::Wait);
    }
}
