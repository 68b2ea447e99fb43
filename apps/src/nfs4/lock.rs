//! Byte-range locks (RFC 8881 s9, s18.10 LOCK, s18.11 LOCKT, s18.12 LOCKU).
//!
//! A lock stateid stands for one lock owner's locks on one file (s9.1.4);
//! it remembers the open stateid it came from (`open_to_lock_owner4`), so
//! CLOSE can tell whether locks would outlive the open (NFS4ERR_LOCKS_HELD,
//! s18.2.4) and free the lock stateids that hold nothing. The locks
//! themselves are POSIX-style byte ranges: a lock owner's new lock replaces
//! whatever it held in that range (an upgrade or downgrade), adjacent ranges
//! of one type merge, and LOCKU of the middle of a range splits it. Two lock
//! owners conflict when their ranges overlap and either holds a write lock;
//! a conflict is NFS4ERR_DENIED with the conflicting lock's range, type and
//! owner. The locks are advisory: READ and WRITE are not checked against
//! them (the Linux server does the same).
//!
//! A length of all ones reaches the end of every file; a length of zero, or
//! a range past 2^64 - 1, is NFS4ERR_INVAL (s18.10.3).
//!
//! Bounded: [`MAX_RANGES_PER_STATEID`] ranges per lock owner and file,
//! [`MAX_RANGES_PER_CLIENT`] per client, [`MAX_LOCK_STATEIDS`] lock
//! stateids in all; a LOCK or LOCKU that would go past them is
//! NFS4ERR_RESOURCE (the state it would need cannot be had; nothing else
//! changes).
//!
//! The lock table sits in [`super::state`]'s tables, under its mutex; the
//! range arithmetic here is pure and tested on its own.

use std::time::Instant;

use proto::nfs4::*;

use super::state::{FileKey, V4State};

/// Ranges one lock stateid (one owner, one file) may hold.
pub const MAX_RANGES_PER_STATEID: usize = 64;
/// Ranges one client may hold over all its lock stateids.
pub const MAX_RANGES_PER_CLIENT: usize = 4096;
/// Lock stateids kept (all clients).
pub const MAX_LOCK_STATEIDS: usize = 65_536;

/// One locked byte range, `first..=last` (`last` u64::MAX: to the end of
/// every file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub first: u64,
    pub last: u64,
    pub write: bool,
}

impl Range {
    fn overlaps(&self, first: u64, last: u64) -> bool {
        self.first <= last && first <= self.last
    }

    /// `offset4` and `length4` of the range as LOCK4denied gives them.
    pub fn offset_length(&self) -> (u64, u64) {
        let len = if self.last == u64::MAX {
            NFS4_LENGTH_EOF
        } else {
            self.last - self.first + 1
        };
        (self.first, len)
    }
}

/// The range of `offset` and `length` (RFC 8881 s18.10.3): a zero length,
/// or one reaching past 2^64 - 1, is NFS4ERR_INVAL; all ones reaches the end.
pub fn range_of(offset: u64, length: u64) -> Result<(u64, u64), u32> {
    match length {
        0 => Err(NFS4ERR_INVAL),
        NFS4_LENGTH_EOF => Ok((offset, u64::MAX)),
        n => offset
            .checked_add(n - 1)
            .map(|last| (offset, last))
            .ok_or(NFS4ERR_INVAL),
    }
}

/// Whether `t` is a write lock type.
pub fn is_write(t: u32) -> bool {
    matches!(t, WRITE_LT | WRITEW_LT)
}

/// `ranges` (sorted, disjoint) without `first..=last`: ranges across an end
/// are cut, one across both ends is split in two.
pub fn unlock_ranges(ranges: &mut Vec<Range>, first: u64, last: u64) {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges.iter() {
        if !r.overlaps(first, last) {
            out.push(*r);
            continue;
        }
        if r.first < first {
            out.push(Range { last: first - 1, ..*r });
        }
        if r.last > last {
            out.push(Range { first: last + 1, ..*r });
        }
    }
    *ranges = out;
}

/// `ranges` (sorted, disjoint) with `first..=last` locked as `write`: what
/// the owner held there is replaced (an upgrade or a downgrade), and
/// touching ranges of one type are merged.
pub fn lock_ranges(ranges: &mut Vec<Range>, first: u64, last: u64, write: bool) {
    unlock_ranges(ranges, first, last);
    let at = ranges.partition_point(|r| r.first < first);
    ranges.insert(at, Range { first, last, write });
    let mut merged: Vec<Range> = Vec::with_capacity(ranges.len());
    for r in ranges.iter() {
        match merged.last_mut() {
            Some(p) if p.write == r.write && p.last != u64::MAX && p.last + 1 == r.first => p.last = r.last,
            _ => merged.push(*r),
        }
    }
    *ranges = merged;
}

/// A conflicting lock: LOCK4denied (RFC 8881 s18.10.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub offset: u64,
    pub length: u64,
    pub locktype: u32,
    pub clientid: u64,
    pub owner: Vec<u8>,
}

/// Why LOCK or LOCKT did not lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockError {
    Status(u32),
    Denied(Denied),
}

impl From<u32> for LockError {
    fn from(s: u32) -> Self {
        LockError::Status(s)
    }
}

/// One lock owner's locks on one file, named by a lock stateid.
#[derive(Debug, Clone)]
pub(super) struct LockState {
    pub other: [u8; NFS4_OTHER_SIZE],
    pub seqid: u32,
    pub client: u64,
    pub owner: Vec<u8>,
    /// The open stateid (`other`) the owner's first lock came through.
    pub open: [u8; NFS4_OTHER_SIZE],
    pub file: FileKey,
    pub ranges: Vec<Range>,
}

/// Lock owners waiting for a lock (all clients): more are not recorded
/// (their clients poll, as without notifications).
pub const MAX_WAITERS: usize = 1024;

/// A lock owner whose blocking LOCK (READW_LT / WRITEW_LT) was denied: it
/// hears CB_NOTIFY_LOCK (RFC 8881 s20.11) when a lock on the file is
/// released, then is forgotten (the notification is a hint; the client
/// asks again).
#[derive(Debug, Clone)]
pub struct Waiter {
    pub client: u64,
    pub session: SessionId,
    pub owner: Vec<u8>,
    pub file: FileKey,
    /// The file's NFSv4 handle, for CB_NOTIFY_LOCK.
    pub fh: Vec<u8>,
}

/// Who asks LOCK for a lock.
#[derive(Clone, Copy, Debug)]
pub enum Requester<'a> {
    /// A new lock owner, through an open stateid.
    New { open: Stateid, owner: &'a [u8] },
    /// A lock stateid the owner holds.
    Exist(Stateid),
}

fn bump(seqid: u32) -> u32 {
    seqid.wrapping_add(1).max(1)
}

impl V4State {
    /// The first lock of another owner (of `client`, `owner`) on `file`
    /// conflicting with `first..=last`; locks of courtesy clients (whose
    /// lease expired) go instead, with the rest of their state.
    #[allow(clippy::too_many_arguments)]
    fn conflict(
        &self,
        t: &mut super::state::Tables,
        client: u64,
        owner: &[u8],
        file: &FileKey,
        first: u64,
        last: u64,
        write: bool,
    ) -> Option<Denied> {
        loop {
            let hit = t.locks.iter().find_map(|l| {
                if &l.file != file || (l.client == client && l.owner == owner) {
                    return None;
                }
                l.ranges
                    .iter()
                    .find(|r| r.overlaps(first, last) && (write || r.write))
                    .map(|r| (l.client, l.owner.clone(), *r))
            });
            let (other, other_owner, r) = hit?;
            if self.expired(t, other, Instant::now()) {
                self.purge_expired(t, other);
                continue;
            }
            let (offset, length) = r.offset_length();
            return Some(Denied {
                offset,
                length,
                locktype: if r.write { WRITE_LT } else { READ_LT },
                clientid: other,
                owner: other_owner,
            });
        }
    }

    /// LOCK (RFC 8881 s18.10.4) of `first..=last` of `file` for `client`:
    /// the lock stateid, its seqid bumped (1 for a new one). The open
    /// stateid of a new owner, or the owner's lock stateid, must be the
    /// client's and the file's (NFS4ERR_BAD_STATEID), and the open must
    /// allow the lock's type (a write lock needs write access, a read lock
    /// read access: NFS4ERR_OPENMODE). `wait`: the owner asked for a
    /// blocking lock on this session and file handle, so a denial records
    /// it as a [`Waiter`].
    #[allow(clippy::too_many_arguments)]
    pub fn lock_range(
        &self,
        client: u64,
        file: &FileKey,
        write: bool,
        first: u64,
        last: u64,
        who: Requester<'_>,
        wait: Option<(SessionId, &[u8])>,
    ) -> Result<Stateid, LockError> {
        let mut t = self.lock_tables();
        // Who the owner is, and the open its locks hang on.
        let (owner, open_other): (Vec<u8>, [u8; NFS4_OTHER_SIZE]) = match who {
            Requester::New { open, owner } => {
                let i = self.find_open(&t, &open)?;
                let o = &t.opens[i];
                if o.client != client || &o.file != file {
                    return Err(LockError::Status(NFS4ERR_BAD_STATEID));
                }
                (owner.to_vec(), o.other)
            }
            Requester::Exist(sid) => {
                let i = self.find_lock(&t, &sid)?;
                let l = &t.locks[i];
                if l.client != client || &l.file != file {
                    return Err(LockError::Status(NFS4ERR_BAD_STATEID));
                }
                (l.owner.clone(), l.open)
            }
        };
        let access = t
            .opens
            .iter()
            .find(|o| o.other == open_other)
            .map(|o| o.access)
            .ok_or(LockError::Status(NFS4ERR_BAD_STATEID))?;
        let need = if write {
            OPEN4_SHARE_ACCESS_WRITE
        } else {
            OPEN4_SHARE_ACCESS_READ
        };
        if access & need == 0 {
            return Err(LockError::Status(NFS4ERR_OPENMODE));
        }
        if let Some(d) = self.conflict(&mut t, client, &owner, file, first, last, write) {
            if let Some((session, fh)) = wait {
                let known = t
                    .waiters
                    .iter()
                    .any(|w| w.client == client && w.owner == owner && &w.file == file);
                if !known && t.waiters.len() < MAX_WAITERS {
                    t.waiters.push(Waiter {
                        client,
                        session,
                        owner,
                        file: *file,
                        fh: fh.to_vec(),
                    });
                }
            }
            return Err(LockError::Denied(d));
        }
        t.waiters
            .retain(|w| !(w.client == client && w.owner == owner && &w.file == file));
        // The owner's lock stateid for the file (a new owner's second
        // open_to_lock_owner4 finds the first one, as RFC 8881 s18.10.4
        // allows for NFSv4.1).
        let at = t
            .locks
            .iter()
            .position(|l| l.client == client && l.owner == owner && &l.file == file);
        let mut ranges = at.map(|i| t.locks[i].ranges.clone()).unwrap_or_default();
        let before = ranges.len();
        lock_ranges(&mut ranges, first, last, write);
        self.check_bounds(&t, client, before, ranges.len(), at.is_none())?;
        Ok(match at {
            Some(i) => {
                let l = &mut t.locks[i];
                l.ranges = ranges;
                l.seqid = bump(l.seqid);
                Stateid {
                    seqid: l.seqid,
                    other: l.other,
                }
            }
            None => {
                let other = self.new_other(&mut t, client);
                t.locks.push(LockState {
                    other,
                    seqid: 1,
                    client,
                    owner,
                    open: open_other,
                    file: *file,
                    ranges,
                });
                Stateid { seqid: 1, other }
            }
        })
    }

    /// NFS4ERR_RESOURCE when a change from `before` to `after` ranges of
    /// one lock stateid (a new one when `new`) would pass a bound.
    fn check_bounds(
        &self,
        t: &super::state::Tables,
        client: u64,
        before: usize,
        after: usize,
        new: bool,
    ) -> Result<(), u32> {
        if after > MAX_RANGES_PER_STATEID {
            return Err(NFS4ERR_RESOURCE);
        }
        if after > before {
            let held: usize = t
                .locks
                .iter()
                .filter(|l| l.client == client)
                .map(|l| l.ranges.len())
                .sum();
            if held + (after - before) > MAX_RANGES_PER_CLIENT {
                return Err(NFS4ERR_RESOURCE);
            }
        }
        if new && t.locks.len() >= MAX_LOCK_STATEIDS {
            return Err(NFS4ERR_RESOURCE);
        }
        Ok(())
    }

    /// LOCKT (RFC 8881 s18.11.4): whether `owner` of `client` could lock
    /// `first..=last` of `file` (its own locks never conflict).
    pub fn lockt(
        &self,
        client: u64,
        owner: &[u8],
        file: &FileKey,
        write: bool,
        first: u64,
        last: u64,
    ) -> Result<(), LockError> {
        let mut t = self.lock_tables();
        match self.conflict(&mut t, client, owner, file, first, last, write) {
            Some(d) => Err(LockError::Denied(d)),
            None => Ok(()),
        }
    }

    /// LOCKU (RFC 8881 s18.12.4): `first..=last` unlocked (a range across
    /// it is cut or split); the lock stateid with its seqid bumped.
    pub fn locku(&self, client: u64, sid: &Stateid, file: &FileKey, first: u64, last: u64) -> Result<Stateid, u32> {
        let mut t = self.lock_tables();
        let i = self.find_lock(&t, sid)?;
        if t.locks[i].client != client || &t.locks[i].file != file {
            return Err(NFS4ERR_BAD_STATEID);
        }
        let mut ranges = t.locks[i].ranges.clone();
        let before = ranges.len();
        unlock_ranges(&mut ranges, first, last);
        self.check_bounds(&t, client, before, ranges.len(), false)?;
        let released = ranges != t.locks[i].ranges;
        let l = &mut t.locks[i];
        l.ranges = ranges;
        l.seqid = bump(l.seqid);
        let sid = Stateid {
            seqid: l.seqid,
            other: l.other,
        };
        if released {
            self.notify_waiters(&mut t, file);
        }
        Ok(sid)
    }

    /// A lock on `file` was released: CB_NOTIFY_LOCK to each owner waiting
    /// for one there, which is then forgotten.
    pub(super) fn notify_waiters(&self, t: &mut super::state::Tables, file: &FileKey) {
        let mut i = 0;
        while i < t.waiters.len() {
            if &t.waiters[i].file != file {
                i += 1;
                continue;
            }
            let w = t.waiters.swap_remove(i);
            self.cb.queue(
                w.client,
                &w.session,
                super::callback::Cb::NotifyLock {
                    fh: w.fh,
                    clientid: w.client,
                    owner: w.owner,
                },
            );
        }
    }

    /// Lock owners waiting for a lock (tests, statistics).
    pub fn lock_waiters(&self) -> usize {
        self.lock_tables().waiters.len()
    }

    /// Locked ranges held (tests, statistics).
    pub fn locked_ranges(&self) -> usize {
        self.lock_tables().locks.iter().map(|l| l.ranges.len()).sum()
    }

    /// Lock stateids held.
    pub fn lock_stateids(&self) -> usize {
        self.lock_tables().locks.len()
    }
}

// ---------------------------------------------------------------------------
// The operations
// ---------------------------------------------------------------------------

use dataplane::service::ReplyBuilder;
use proto::nfs4::args::Locker;
use proto::xdr::Writer;

use super::ops::{backend, cur_real, current_sid, put_stateid, w_at, Real, R};
use super::{Ctx, St};
use crate::backend::FileType;

/// The regular file the current filehandle names (RFC 8881 s18.10.4:
/// a directory is NFS4ERR_ISDIR, a symlink NFS4ERR_SYMLINK, anything else
/// NFS4ERR_WRONG_TYPE... as OPEN answers them).
fn lock_file(cx: &Ctx<'_>) -> Result<Real, St> {
    let o = cur_real(cx, NFS4ERR_ISDIR)?;
    match backend(cx, &o).getattr(&o.fh)?.ftype {
        FileType::Regular => Ok(o),
        FileType::Directory => Err(St(NFS4ERR_ISDIR)),
        FileType::Symlink => Err(St(NFS4ERR_SYMLINK)),
        _ => Err(St(NFS4ERR_WRONG_TYPE)),
    }
}

fn client_of(cx: &Ctx<'_>) -> Result<u64, St> {
    cx.session.map(|s| s.2).ok_or(St(NFS4ERR_OP_NOT_IN_SESSION))
}

/// LOCK4denied after the status; the operation fails with NFS4ERR_DENIED.
fn denied(cx: &mut Ctx<'_>, reply: &mut ReplyBuilder<'_>, at: usize, limit: usize, d: &Denied) -> R {
    let mut w = w_at(reply, at, limit);
    put_denied(&mut w, d)?;
    cx.err_body = w.len();
    Err(St(NFS4ERR_DENIED))
}

fn put_denied(w: &mut Writer<'_>, d: &Denied) -> Result<(), St> {
    w.put_u64(d.offset)?;
    w.put_u64(d.length)?;
    w.put_u32(d.locktype)?;
    w.put_u64(d.clientid)?;
    w.put_opaque_var(&d.owner)?;
    Ok(())
}

/// LOCK (RFC 8881 s18.10). The `clientid` of a new lock owner is not
/// looked at: in NFSv4.1 the session names the client.
#[allow(clippy::too_many_arguments)]
pub(super) fn op_lock(
    cx: &mut Ctx<'_>,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    locktype: u32,
    reclaim: bool,
    (offset, length): (u64, u64),
    locker: Locker<'_>,
) -> R {
    let client = client_of(cx)?;
    let o = lock_file(cx)?;
    let (first, last) = range_of(offset, length)?;
    cx.sh.v4.check_grace(client, reclaim)?;
    let who = match locker {
        Locker::New {
            open_stateid, owner, ..
        } => Requester::New {
            open: current_sid(cx, open_stateid)?,
            owner: owner.owner,
        },
        Locker::Exist { lock_stateid, .. } => Requester::Exist(current_sid(cx, lock_stateid)?),
    };
    // A blocking lock's owner hears when a lock on the file is released,
    // where the session has a backchannel (RFC 8881 s9.6, s20.11).
    let mut wire = [0u8; crate::backend::FH_MAX_BYTES];
    let blocking = matches!(locktype, READW_LT | WRITEW_LT);
    let fh_len = super::fh::encode(cx.sh, &super::fh::Fh::Real { ex: o.ex, fh: o.fh }, &mut wire);
    let wait = match (cx.session, fh_len) {
        (Some((sid, _, _)), Some(n)) if blocking => Some((sid, &wire[..n])),
        _ => None,
    };
    match cx
        .sh
        .v4
        .lock_range(client, &(o.ex, o.fh), is_write(locktype), first, last, who, wait)
    {
        Ok(sid) => {
            cx.cur_sid = Some(sid);
            let mut w = w_at(reply, at, limit);
            put_stateid(&mut w, &sid)?;
            Ok(w.len())
        }
        Err(LockError::Status(s)) => Err(St(s)),
        Err(LockError::Denied(d)) => denied(cx, reply, at, limit, &d),
    }
}

/// LOCKT (RFC 8881 s18.11): in the grace period NFS4ERR_GRACE, as a
/// conflict with a lock not yet reclaimed cannot be ruled out.
pub(super) fn op_lockt(
    cx: &mut Ctx<'_>,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    locktype: u32,
    (offset, length): (u64, u64),
    owner: &[u8],
) -> R {
    let client = client_of(cx)?;
    let o = lock_file(cx)?;
    let (first, last) = range_of(offset, length)?;
    cx.sh.v4.check_grace(client, false)?;
    match cx
        .sh
        .v4
        .lockt(client, owner, &(o.ex, o.fh), is_write(locktype), first, last)
    {
        Ok(()) => Ok(0),
        Err(LockError::Status(s)) => Err(St(s)),
        Err(LockError::Denied(d)) => denied(cx, reply, at, limit, &d),
    }
}

/// LOCKU (RFC 8881 s18.12).
pub(super) fn op_locku(
    cx: &mut Ctx<'_>,
    reply: &mut ReplyBuilder<'_>,
    at: usize,
    limit: usize,
    stateid: Stateid,
    (offset, length): (u64, u64),
) -> R {
    let client = client_of(cx)?;
    let o = lock_file(cx)?;
    let (first, last) = range_of(offset, length)?;
    let sid = current_sid(cx, stateid)?;
    let sid = cx.sh.v4.locku(client, &sid, &(o.ex, o.fh), first, last)?;
    cx.cur_sid = Some(sid);
    let mut w = w_at(reply, at, limit);
    put_stateid(&mut w, &sid)?;
    Ok(w.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(first: u64, last: u64, write: bool) -> Range {
        Range { first, last, write }
    }

    #[test]
    fn ranges_of_offsets_and_lengths() {
        assert_eq!(range_of(0, 0), Err(NFS4ERR_INVAL));
        assert_eq!(range_of(10, 5), Ok((10, 14)));
        assert_eq!(range_of(10, NFS4_LENGTH_EOF), Ok((10, u64::MAX)));
        assert_eq!(range_of(u64::MAX, 1), Ok((u64::MAX, u64::MAX)));
        assert_eq!(range_of(u64::MAX, 2), Err(NFS4ERR_INVAL));
        assert_eq!(range_of(1, u64::MAX - 1), Ok((1, u64::MAX - 1)));
        assert_eq!(range_of(2, u64::MAX - 1), Ok((2, u64::MAX)), "ends at 2^64 - 1");
        assert_eq!(range_of(3, u64::MAX - 1), Err(NFS4ERR_INVAL));
        assert_eq!(r(5, u64::MAX, true).offset_length(), (5, NFS4_LENGTH_EOF));
        assert_eq!(r(5, 9, true).offset_length(), (5, 5));
    }

    #[test]
    fn unlock_splits_and_cuts() {
        let mut v = vec![r(0, 99, true)];
        unlock_ranges(&mut v, 10, 19);
        assert_eq!(v, [r(0, 9, true), r(20, 99, true)]);
        unlock_ranges(&mut v, 5, 25);
        assert_eq!(v, [r(0, 4, true), r(26, 99, true)]);
        unlock_ranges(&mut v, 0, u64::MAX);
        assert!(v.is_empty());
        let mut v = vec![r(10, u64::MAX, false)];
        unlock_ranges(&mut v, 20, u64::MAX);
        assert_eq!(v, [r(10, 19, false)]);
        // Unlocking what is not locked changes nothing.
        unlock_ranges(&mut v, 100, 200);
        assert_eq!(v, [r(10, 19, false)]);
    }

    #[test]
    fn lock_upgrades_downgrades_and_merges() {
        let mut v = vec![];
        lock_ranges(&mut v, 0, 9, false);
        lock_ranges(&mut v, 10, 19, false);
        assert_eq!(v, [r(0, 19, false)], "touching ranges of one type merge");
        // An upgrade of the middle splits the read lock around it.
        lock_ranges(&mut v, 5, 14, true);
        assert_eq!(v, [r(0, 4, false), r(5, 14, true), r(15, 19, false)]);
        // A downgrade back merges all.
        lock_ranges(&mut v, 5, 14, false);
        assert_eq!(v, [r(0, 19, false)]);
        lock_ranges(&mut v, 30, u64::MAX, true);
        lock_ranges(&mut v, 20, 29, true);
        assert_eq!(v, [r(0, 19, false), r(20, u64::MAX, true)]);
        lock_ranges(&mut v, 0, u64::MAX, true);
        assert_eq!(v, [r(0, u64::MAX, true)]);
    }
}
