//! Windows: what one connection's peer may RDMA-Read or RDMA-Write of this
//! side's memory ([`crate::fabric::Fabric::expose`], RFC 8166 s8.1).
//!
//! Each side's ring file (one per connection, shared with that peer only)
//! holds a *window table* of [`WINDOW_WORDS`]-word entries the owner writes
//! and the peer reads before every RDMA Read or Write it makes:
//!
//! | word | what |
//! |---|---|
//! | 0 | `key << 32 \| access` (0: closed; [`ACCESS_READ`], [`ACCESS_WRITE`]) |
//! | 1 | region id |
//! | 2 | first byte (region-relative offset) |
//! | 3 | length in bytes |
//!
//! A key is `slot << 16 | generation` (the generation is never 0): it means
//! something on this connection only, so a key seen on, or guessed for,
//! another connection opens nothing, and a stale key of a reused slot fails
//! the generation check. The owner opens a window by writing words 1–3 and
//! then word 0 (Release), and closes it by storing 0 in word 0; the peer
//! reads word 0 (Acquire), words 1–3, and word 0 again (seqlock), so an entry
//! changing under it reads as closed. Opening and closing are plain stores:
//! no system call.
//!
//! The checks are made by the peer's process (it is the one copying), so
//! they protect this side from a *buggy* peer; a hostile peer is kept out by
//! what it maps: a peer maps this side's regions only if they were registered
//! [`crate::fabric::RegionAccess::Exposable`] (a responder registers none),
//! and it never maps another connection's ring file.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::mapping::SharedFile;
use crate::fabric::Access;

/// Words of a window entry.
pub const WINDOW_WORDS: usize = 4;
/// Bytes of a window entry.
pub const WINDOW_BYTES: usize = WINDOW_WORDS * 8;
/// Most window entries a ring file may hold (the key's 16 slot bits).
pub const MAX_WINDOWS: u32 = 1 << 16;

pub const ACCESS_READ: u64 = 1;
pub const ACCESS_WRITE: u64 = 2;

fn access_code(a: Access) -> u64 {
    match a {
        Access::Read => ACCESS_READ,
        Access::Write => ACCESS_WRITE,
        Access::ReadWrite => ACCESS_READ | ACCESS_WRITE,
    }
}

fn word(file: &SharedFile, off: usize) -> &AtomicU64 {
    debug_assert!(off & 7 == 0 && off + 8 <= file.len());
    // SAFETY: callers pass an 8-aligned offset inside the table, which
    // `ring_file_layout` placed inside the mapping (checked against its
    // length when the file was created or attached); AtomicU64 is valid for
    // any bit pattern; the reference borrows `file`, keeping it mapped.
    unsafe { &*file.as_ptr().add(off).cast::<AtomicU64>() }
}

/// A window as the peer's table says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open {
    pub region: u16,
    pub start: u64,
    pub len: u64,
}

/// Read entry `key` of the window table at `off` (`count` entries) of
/// `file`: the window if it is open with that key for `access`. Data path.
#[inline]
pub fn lookup(file: &SharedFile, off: usize, count: u32, key: u32, access: Access) -> Option<Open> {
    let slot = key >> 16;
    if slot >= count || key & 0xffff == 0 {
        return None;
    }
    let e = off + slot as usize * WINDOW_BYTES;
    // Acquire: pairs with the owner's Release store that opened the window,
    // so words 1-3 below are the ones it wrote before.
    let w0 = word(file, e).load(Ordering::Acquire);
    if w0 >> 32 != u64::from(key) || w0 & access_code(access) != access_code(access) {
        return None;
    }
    let region = word(file, e + 8).load(Ordering::Relaxed);
    let start = word(file, e + 16).load(Ordering::Relaxed);
    let len = word(file, e + 24).load(Ordering::Relaxed);
    // Seqlock re-check: the entry was not closed or reused while read.
    fence(Ordering::Acquire);
    if word(file, e).load(Ordering::Relaxed) != w0 || region > u64::from(u16::MAX) {
        return None;
    }
    Some(Open {
        region: region as u16,
        start,
        len,
    })
}

/// Whether `key` names an open window (any access) of the table.
#[inline]
pub fn is_open(file: &SharedFile, off: usize, count: u32, key: u32) -> bool {
    let slot = key >> 16;
    if slot >= count || key & 0xffff == 0 {
        return false;
    }
    let w = word(file, off + slot as usize * WINDOW_BYTES).load(Ordering::Acquire);
    w >> 32 == u64::from(key) && w & 0xff != 0
}

/// The owner's side of its window table: which slots are free, and which
/// key each taken slot was handed out with.
#[derive(Debug)]
pub struct Windows {
    off: usize,
    free: Vec<u32>,
    /// The key each slot is out with (0: free).
    issued: Box<[u32]>,
    /// The generation the next key carries (never 0).
    gen: u16,
}

impl Windows {
    /// The table of `count` entries at `off` of our ring file (zeroed: all
    /// closed); the first key's generation is `seed` (made non-zero), so
    /// keys do not start alike on every connection. Control path.
    pub fn new(off: usize, count: u32, seed: u16) -> Windows {
        Windows {
            off,
            free: (0..count).rev().collect(),
            issued: vec![0; count as usize].into_boxed_slice(),
            gen: seed.max(1),
        }
    }

    /// Open a window on `[start, start + len)` of `region` for `access`;
    /// returns its key. `None` when every slot is taken. Data path.
    #[inline]
    pub fn open(&mut self, file: &SharedFile, region: u16, start: u64, len: u64, access: Access) -> Option<u32> {
        let slot = self.free.pop()?;
        let key = slot << 16 | u32::from(self.gen);
        self.gen = self.gen.wrapping_add(1).max(1);
        self.issued[slot as usize] = key;
        let e = self.off + slot as usize * WINDOW_BYTES;
        word(file, e + 8).store(u64::from(region), Ordering::Relaxed);
        word(file, e + 16).store(start, Ordering::Relaxed);
        word(file, e + 24).store(len, Ordering::Relaxed);
        // Release: the peer's Acquire load of word 0 sees words 1-3.
        word(file, e).store(u64::from(key) << 32 | access_code(access), Ordering::Release);
        Some(key)
    }

    /// The slot of `key` if this table handed it out and has not taken it
    /// back.
    #[inline]
    fn slot_of(&self, key: u32) -> Option<usize> {
        let slot = (key >> 16) as usize;
        (key != 0 && self.issued.get(slot) == Some(&key)).then_some(slot)
    }

    /// Close `key` (the peer invalidated it with a Send with Invalidate): the
    /// slot stays taken until [`Windows::close`]. `false` when `key` is not
    /// a window of ours. Data path.
    pub fn invalidate(&mut self, file: &SharedFile, key: u32) -> bool {
        let Some(slot) = self.slot_of(key) else { return false };
        word(file, self.off + slot * WINDOW_BYTES).store(0, Ordering::Release);
        true
    }

    /// Close `key` and free its slot. Idempotent. Data path.
    #[inline]
    pub fn close(&mut self, file: &SharedFile, key: u32) {
        let Some(slot) = self.slot_of(key) else { return };
        // Release: orders our earlier use of the memory before the close.
        word(file, self.off + slot * WINDOW_BYTES).store(0, Ordering::Release);
        self.issued[slot] = 0;
        self.free.push(slot as u32);
    }
}
