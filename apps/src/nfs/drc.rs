//! The duplicate request cache (DRC): a retransmitted non-idempotent NFSv3
//! Call is answered once.
//!
//! ONC RPC gives at-most-once semantics to nobody (RFC 5531 section 8: the
//! XID only lets a client match replies); a client that lost a reply, for
//! instance because its connection dropped, resends the Call with the same
//! XID. RFC 1813 section 4.5 (and section 3.3.12 for REMOVE) asks servers to
//! keep a cache of replies so a retransmitted REMOVE, RMDIR, RENAME, MKDIR
//! and the like is not run a second time (it would fail with NFS3ERR_NOENT or
//! NFS3ERR_EXIST, or remove a file created since).
//!
//! The key is the one the Linux server uses: XID, client address, program,
//! version, procedure, the length of the Call and a checksum of the first
//! [`CSUM_BYTES`] bytes of its arguments. The value is the RPC reply the
//! service built (its head: these procedures have no DDP data), not any
//! transport framing, so a retransmit over another connection, or over
//! another transport, is framed afresh by whatever carries it.
//!
//! The cache is bounded and allocated at start-up: [`ReplyCache::new`] makes
//! a fixed number of entries of at most [`DRC_REPLY_BYTES`] each, found
//! through fixed hash buckets and recycled by a clock (second-chance)
//! sweep. An entry is `InProgress` from the lookup that missed until the
//! reply is stored; a retransmit that finds it so is dropped (the client
//! resends again later). `InProgress` entries are never evicted.

use std::net::IpAddr;

use proto::nfs3 as p;

/// Entries of the cache each core (and each TCP listener) keeps.
pub const DRC_ENTRIES: usize = 1024;
/// Largest reply kept: every reply of the cached procedures fits (the largest,
/// MKDIR/CREATE/SYMLINK/MKNOD, is a header, a handle, attributes and
/// `wcc_data`, about 310 bytes).
pub const DRC_REPLY_BYTES: usize = 512;
/// Bytes of the arguments the checksum covers (as Linux's `RC_CSUMLEN`).
pub const CSUM_BYTES: usize = 256;

const NONE: u32 = u32::MAX;

/// Whether replies of NFSv3 procedure `proc_` are cached: the procedures
/// whose second execution differs from the first (RFC 1813 section 4.5):
/// SETATTR, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK.
/// READ, WRITE and COMMIT are safe to run again and not cached.
pub fn nfs3_cached(proc_: u32) -> bool {
    matches!(
        proc_,
        p::NFSPROC3_SETATTR
            | p::NFSPROC3_CREATE
            | p::NFSPROC3_MKDIR
            | p::NFSPROC3_SYMLINK
            | p::NFSPROC3_MKNOD
            | p::NFSPROC3_REMOVE
            | p::NFSPROC3_RMDIR
            | p::NFSPROC3_RENAME
            | p::NFSPROC3_LINK
    )
}

/// What identifies one Call of one client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Key {
    xid: u32,
    /// 0: no address (the fabric cannot tell), 4 or 6.
    family: u8,
    addr: [u8; 16],
    prog: u32,
    vers: u32,
    proc_: u32,
    len: u32,
    csum: u64,
}

impl Key {
    /// The key of a Call: `args` are its arguments (after the RPC header),
    /// `call_len` the length of the whole Call.
    pub fn new(xid: u32, peer: Option<IpAddr>, prog: u32, vers: u32, proc_: u32, args: &[u8], call_len: usize) -> Key {
        let (family, addr) = match peer {
            None => (0, [0; 16]),
            Some(IpAddr::V4(a)) => {
                let mut b = [0; 16];
                b[..4].copy_from_slice(&a.octets());
                (4, b)
            }
            Some(IpAddr::V6(a)) => (6, a.octets()),
        };
        // FNV-1a, 64 bits, over the first CSUM_BYTES bytes of the arguments.
        let mut csum: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in &args[..args.len().min(CSUM_BYTES)] {
            csum = (csum ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Key {
            xid,
            family,
            addr,
            prog,
            vers,
            proc_,
            len: call_len.min(u32::MAX as usize) as u32,
            csum,
        }
    }

    fn hash(&self) -> u64 {
        let mut h = u64::from(self.xid) ^ (self.csum.rotate_left(17)) ^ (u64::from(self.proc_) << 40);
        for c in self.addr.chunks_exact(8) {
            h ^= u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        h ^ (h >> 29)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    InProgress,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    key: Key,
    state: State,
    /// Clock bit: set when the entry is made or hit, cleared by the sweep.
    referenced: bool,
    len: u16,
    /// Next entry in the same bucket.
    next: u32,
}

/// Counters of one cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrcStats {
    /// Retransmits answered from the cache.
    pub hits: u64,
    /// Retransmits dropped because the first Call was still being served.
    pub in_progress_drops: u64,
    /// Replies stored.
    pub inserts: u64,
    /// Stored replies recycled to make room.
    pub evictions: u64,
    /// Calls served without the cache: every entry in progress, or the reply
    /// too large to keep.
    pub uncached: u64,
}

/// What [`ReplyCache::begin`] found.
#[derive(Debug)]
pub enum Lookup<'a> {
    /// A retransmit of a Call already answered: its reply.
    Hit(&'a [u8]),
    /// A retransmit of a Call still being served: drop it.
    InProgress,
    /// A new Call: run it, then [`ReplyCache::complete`] this entry.
    Miss(u32),
    /// A new Call and no entry free: run it uncached.
    NoRoom,
}

/// A bounded reply cache (see the module docs). Not shared by itself: a
/// core owns one, or TCP connection threads share one behind a mutex.
#[derive(Debug)]
pub struct ReplyCache {
    slots: Box<[Slot]>,
    replies: Box<[u8]>,
    buckets: Box<[u32]>,
    hand: usize,
    used: usize,
    stats: DrcStats,
}

impl ReplyCache {
    /// A cache of `entries` entries (at least one), all memory allocated
    /// here. Any thread.
    pub fn new(entries: usize) -> ReplyCache {
        let n = entries.clamp(1, NONE as usize - 1);
        let nb = (2 * n).next_power_of_two();
        ReplyCache {
            slots: vec![
                Slot {
                    key: Key::default(),
                    state: State::Free,
                    referenced: false,
                    len: 0,
                    next: NONE,
                };
                n
            ]
            .into_boxed_slice(),
            replies: vec![0u8; n * DRC_REPLY_BYTES].into_boxed_slice(),
            buckets: vec![NONE; nb].into_boxed_slice(),
            hand: 0,
            used: 0,
            stats: DrcStats::default(),
        }
    }

    /// Entries this cache holds at most.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Entries in use (in progress or answered).
    pub fn len(&self) -> usize {
        self.used
    }

    /// No entry in use.
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    pub fn stats(&self) -> DrcStats {
        self.stats
    }

    fn bucket(&self, key: &Key) -> usize {
        (key.hash() as usize) & (self.buckets.len() - 1)
    }

    /// Look `key` up; on a miss, take an entry for it (state in progress).
    pub fn begin(&mut self, key: &Key) -> Lookup<'_> {
        let b = self.bucket(key);
        let mut i = self.buckets[b];
        while i != NONE {
            let s = &mut self.slots[i as usize];
            if s.key == *key {
                return match s.state {
                    State::Done => {
                        s.referenced = true;
                        self.stats.hits += 1;
                        let at = i as usize * DRC_REPLY_BYTES;
                        Lookup::Hit(&self.replies[at..at + usize::from(s.len)])
                    }
                    _ => {
                        self.stats.in_progress_drops += 1;
                        Lookup::InProgress
                    }
                };
            }
            i = s.next;
        }
        let Some(v) = self.victim() else {
            self.stats.uncached += 1;
            return Lookup::NoRoom;
        };
        let s = &mut self.slots[v];
        s.key = *key;
        s.state = State::InProgress;
        s.referenced = true;
        s.len = 0;
        s.next = self.buckets[b];
        self.buckets[b] = v as u32;
        self.used += 1;
        Lookup::Miss(v as u32)
    }

    /// Store the reply of the Call that took entry `slot` ([`Lookup::Miss`]),
    /// or free the entry when there is no reply to keep (`None`: the Call was
    /// dropped or answered with an RPC-level error) or it is too large.
    pub fn complete(&mut self, slot: u32, reply: Option<&[u8]>) {
        let i = slot as usize;
        if self.slots.get(i).is_none_or(|s| s.state != State::InProgress) {
            return;
        }
        match reply {
            Some(r) if r.len() <= DRC_REPLY_BYTES => {
                let at = i * DRC_REPLY_BYTES;
                self.replies[at..at + r.len()].copy_from_slice(r);
                let s = &mut self.slots[i];
                s.len = r.len() as u16;
                s.state = State::Done;
                self.stats.inserts += 1;
            }
            r => {
                if r.is_some() {
                    self.stats.uncached += 1;
                }
                self.release(i);
            }
        }
    }

    /// Unlink entry `i` from its bucket and mark it free.
    fn release(&mut self, i: usize) {
        let key = self.slots[i].key;
        let b = self.bucket(&key);
        let next = self.slots[i].next;
        if self.buckets[b] == i as u32 {
            self.buckets[b] = next;
        } else {
            let mut j = self.buckets[b];
            while j != NONE {
                if self.slots[j as usize].next == i as u32 {
                    self.slots[j as usize].next = next;
                    break;
                }
                j = self.slots[j as usize].next;
            }
        }
        let s = &mut self.slots[i];
        s.state = State::Free;
        s.next = NONE;
        s.len = 0;
        self.used -= 1;
    }

    /// The entry to reuse: a free one, or the first answered one the clock
    /// hand finds unreferenced (clearing the bits it passes). In-progress
    /// entries are skipped; `None` when every entry is in progress.
    fn victim(&mut self) -> Option<usize> {
        let n = self.slots.len();
        for _ in 0..2 * n + 1 {
            let i = self.hand;
            self.hand = (self.hand + 1) % n;
            let s = &mut self.slots[i];
            match s.state {
                State::Free => return Some(i),
                State::InProgress => {}
                State::Done if s.referenced => s.referenced = false,
                State::Done => {
                    self.release(i);
                    self.stats.evictions += 1;
                    return Some(i);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(xid: u32, args: &[u8]) -> Key {
        Key::new(
            xid,
            Some("10.0.0.1".parse().unwrap()),
            100_003,
            3,
            p::NFSPROC3_REMOVE,
            args,
            100,
        )
    }

    #[test]
    fn miss_complete_hit() {
        let mut c = ReplyCache::new(4);
        let k = key(1, b"abc");
        let Lookup::Miss(s) = c.begin(&k) else { panic!("miss") };
        assert!(matches!(c.begin(&k), Lookup::InProgress));
        c.complete(s, Some(b"reply"));
        assert!(matches!(c.begin(&k), Lookup::Hit(b"reply")));
        // Another XID, address, or argument bytes: a miss.
        assert!(matches!(c.begin(&key(2, b"abc")), Lookup::Miss(_)));
        assert!(matches!(c.begin(&key(1, b"abd")), Lookup::Miss(_)));
        let other = Key::new(
            1,
            Some("10.0.0.2".parse().unwrap()),
            100_003,
            3,
            p::NFSPROC3_REMOVE,
            b"abc",
            100,
        );
        assert!(matches!(c.begin(&other), Lookup::Miss(_)));
        assert_eq!(c.len(), 4);
        // Every entry in progress but the answered one: it is evicted.
        assert!(matches!(c.begin(&key(9, b"x")), Lookup::Miss(_)));
        assert!(matches!(c.begin(&key(10, b"x")), Lookup::NoRoom));
        assert_eq!(c.stats().evictions, 1);
    }

    #[test]
    fn stays_bounded_and_evicts_the_oldest_unreferenced() {
        let mut c = ReplyCache::new(8);
        for x in 0..100u32 {
            let Lookup::Miss(s) = c.begin(&key(x, b"a")) else {
                panic!("miss {x}")
            };
            c.complete(s, Some(&x.to_be_bytes()));
            assert!(c.len() <= 8);
        }
        assert_eq!(c.stats().evictions, 92);
        assert!(matches!(c.begin(&key(99, b"a")), Lookup::Hit(b) if b == 99u32.to_be_bytes()));
        let Lookup::Miss(s) = c.begin(&key(0, b"a")) else {
            panic!("evicted")
        };
        // A reply too large, or none: the entry is freed.
        c.complete(s, Some(&[0u8; DRC_REPLY_BYTES + 1]));
        assert!(matches!(c.begin(&key(0, b"a")), Lookup::Miss(_)));
    }
}
