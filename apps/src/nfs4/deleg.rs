//! Read and write delegations (RFC 8881 s10.2, s10.4): granted by OPEN,
//! recalled with CB_RECALL when another client (or NFSv3) is about to use
//! the file in a way the delegation does not allow, returned with
//! DELEGRETURN, revoked when not returned within a lease of the recall.
//!
//! OPEN grants one ([`V4State::offer`]) when `nfs4.delegations` is on, the
//! session's backchannel is up ([`super::callback`]), the client did not
//! say it wants none (OPEN4_SHARE_ACCESS_WANT_NO_DELEG; RFC 8881
//! s18.16.3), no recall of the file is in progress or ended less than
//! [`REGRANT_AFTER_RECALL`] ago (otherwise the holder, reopening at once
//! after its DELEGRETURN, would be granted a new delegation before the
//! conflicting client's retry arrives, and that client could be sent back
//! to wait again and again; the Linux server blocks recently recalled
//! files the same way), and the bounds allow ([`MAX_DELEGS`],
//! [`MAX_DELEGS_PER_CLIENT`]). Its type follows the open:
//! - an open for reading only gets OPEN_DELEGATE_READ, unless another
//!   client has the file open for writing (or denying reads) or holds a
//!   write delegation on it;
//! - an open for writing (WRITE or BOTH) gets OPEN_DELEGATE_WRITE when no
//!   other client has the file open at all or holds any delegation on it,
//!   and the backend's change attribute is consistent
//!   (`Backend::consistent_change`, docs/BACKENDS.md; WND4_WRITE_DELEG_NOT_SUPP_FTYPE
//!   otherwise). Its reply carries a space limit (NFS_LIMIT_SIZE: the size
//!   plus [`WRITE_DELEG_GROWTH_BYTES`], or the free space when less) and an
//!   ACE of what the mode bits allow every class (s18.16.1). A client's own
//!   read delegation is not upgraded (WND4_NOT_SUPP_UPGRADE).
//!
//! A client asking for a type (WANT_READ_DELEG, WANT_WRITE_DELEG) that is
//! not the one its open's access gets hears WND4_CONTENTION; WANT_ANY_DELEG
//! takes the open's type. A client that asked (any `WANT_*` bit) and gets
//! none hears why (OPEN_DELEGATE_NONE_EXT with a `WND4_*` reason); one that
//! did not, OPEN_DELEGATE_NONE. A client that holds one and opens again
//! gets the same stateid (s10.4.4). A write delegation's stateid reads,
//! writes and sets the size; a read one's only reads (s9.1.3).
//!
//! Conflicts ([`Conflict`]), from another client, or NFSv3:
//! - a change ([`Conflict::Change`]: an OPEN for writing or denying reads,
//!   WRITE, SETATTR of the size, an OPEN that truncates, REMOVE, RENAME or
//!   LINK of the file, ALLOCATE, DEALLOCATE, COPY's destination) recalls
//!   every delegation on the file;
//! - a look ([`Conflict::Read`]: any OPEN, READ, GETATTR or VERIFY asking
//!   for the size, change, space used or times, SETATTR of anything else,
//!   SEEK, COPY's source; NFSv3 READ, GETATTR, SETATTR) recalls a write
//!   delegation only: there is no CB_GETATTR here (s10.4.3), so the holder
//!   is made to flush and return, as the Linux server did before it had
//!   CB_GETATTR. READDIR's attributes of a delegated file are not a
//!   conflict (they may be stale while it is held).
//!
//! The holder's own operations never conflict. Each conflicting
//! delegation is recalled (once; the CB_RECALL goes on the holder's
//! backchannel) and the operation is answered NFS4ERR_DELAY until every
//! such delegation is returned or revoked. An NFSv3 one is held until then
//! ([`crate::nfs::delegwait`]; NFS3ERR_JUKEBOX when it cannot be: over TCP,
//! past the bound, or an NFSv3 READ whose data buffer may be the
//! requester's own memory). A read costs one atomic load while no write
//! delegation exists. A holder whose lease expired loses its state to the
//! conflict, as a courtesy client does (see [`super::state`]).
//!
//! On a recall the holder flushes what it cached (its WRITEs with the
//! delegation's stateid are its own) and may reopen under the delegation
//! (CLAIM_DELEGATE_CUR, CLAIM_DELEG_CUR_FH) before its DELEGRETURN.
//!
//! A delegation not returned within one lease of its recall is revoked
//! (RFC 8881 s10.2.1), by time: [`V4State::revoke_overdue`] runs on every
//! turn of each core's loop (from the service's `has_backward_calls`; one
//! atomic load while no recall is outstanding, and a clock read while one
//! is), so the conflicting operation's retry, or an NFSv3 Call held for
//! the recall ([`crate::nfs::delegwait`]), proceeds without waiting for a
//! Call to notice. A conflicting operation that retries checks the same
//! rule. The holder's SEQUENCE then carries
//! SEQ4_STATUS_RECALLABLE_STATE_REVOKED, the stateid is
//! NFS4ERR_DELEG_REVOKED until FREE_STATEID (or DELEGRETURN, which also
//! answers NFS4ERR_DELEG_REVOKED) takes it away; a revoked write
//! delegation's cached writes are lost to its holder (s10.4.1).
//!
//! The counters ([`super::deleg_stats`]) count write delegations apart as
//! well (`write_delegations_held`, `write_delegations_granted`,
//! `write_recalls`, `write_returned`, `write_revoked`).

use std::sync::atomic::Ordering;
use std::time::Instant;

use proto::nfs4::*;

use super::callback::Cb;
use super::state::{FileKey, Tables, V4State};

/// Delegations kept (all clients, revoked ones included).
pub const MAX_DELEGS: usize = 4096;
/// Delegations one client may hold.
pub const MAX_DELEGS_PER_CLIENT: usize = 256;
/// How long after a recall no delegation is granted on the file by default
/// (`nfs4.regrant_after_recall_ms`; the lease, when that is shorter): long enough for the conflicting client's
/// retry, which NFS4ERR_DELAY makes wait about a second or less.
pub const REGRANT_AFTER_RECALL: std::time::Duration = std::time::Duration::from_secs(30);
/// Recently recalled files remembered; beyond it the oldest is forgotten
/// (its file may then be delegated again early: a bound, not a rule).
pub const MAX_RECENT_RECALLS: usize = 1024;

/// One delegation.
#[derive(Debug, Clone)]
pub struct Deleg {
    pub other: [u8; NFS4_OTHER_SIZE],
    pub client: u64,
    /// The session it was granted on (its backchannel carries the recall).
    pub session: SessionId,
    pub file: FileKey,
    /// The file's NFSv4 handle, for CB_RECALL.
    pub fh: Vec<u8>,
    /// When the recall was queued.
    pub recalled: Option<Instant>,
    pub revoked: bool,
    /// OPEN_DELEGATE_WRITE (else OPEN_DELEGATE_READ).
    pub write: bool,
}

impl Deleg {
    pub fn stateid(&self) -> Stateid {
        Stateid {
            seqid: 1,
            other: self.other,
        }
    }
}

/// What OPEN says about a delegation (`open_delegation4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// OPEN_DELEGATE_NONE.
    None,
    /// OPEN_DELEGATE_NONE_EXT with a `WND4_*` reason.
    NoneExt(u32),
    /// OPEN_DELEGATE_READ with this stateid.
    Read(Stateid),
    /// OPEN_DELEGATE_WRITE with this stateid.
    Write(Stateid),
}

/// What another client's (or NFSv3's) operation does to a file, for the
/// delegations it conflicts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// It reads the file's data or attributes (READ, GETATTR, VERIFY, an
    /// OPEN for reading, a SETATTR of anything but the size): only write
    /// delegations conflict (RFC 8881 s10.4.3: there is no CB_GETATTR
    /// here, so the holder's cached changes are recalled instead).
    Read,
    /// It changes the file (WRITE, SETATTR of the size, an OPEN for writing
    /// or denying reads, REMOVE, RENAME, LINK): every delegation conflicts.
    Change,
}

/// The size a write delegation's holder may grow the file by before it
/// must flush on CLOSE (`space_limit`, NFS_LIMIT_SIZE; RFC 8881 s10.4.1,
/// s18.16.3), when the backend has that much space free.
pub const WRITE_DELEG_GROWTH_BYTES: u64 = 1 << 30;

/// What the grant rules need to know about the OPEN, beyond the tables.
#[derive(Debug, Clone, Copy)]
pub struct OpenFacts {
    /// The OPEN's `share_access`, `WANT_*` bits included.
    pub share_access: u32,
    /// Whether the backend's change attribute is consistent for the file
    /// (`Backend::consistent_change`): a write delegation needs it.
    pub consistent_change: bool,
}

impl V4State {
    /// Turn delegations on or off (`nfs4.delegations`).
    pub fn set_delegations(&self, on: bool) {
        self.delegations.store(on, Ordering::Relaxed);
    }

    /// Delegations held or revoked-and-not-freed (tests, statistics).
    /// How long after a recall the file gets no delegation (the config's
    /// `nfs4.regrant_after_recall_ms`; the lease caps it). Any core.
    pub fn set_regrant_after_recall(&self, d: std::time::Duration) {
        self.regrant_ms
            .store(d.as_millis().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// Write delegations held or revoked-and-not-freed. No lock.
    pub fn write_delegations(&self) -> usize {
        self.write_deleg_count.load(Ordering::Relaxed)
    }

    pub fn delegations(&self) -> usize {
        self.lock_tables().delegs.len()
    }

    /// The delegation and recall counters.
    pub fn deleg_stats(&self) -> &super::deleg_stats::DelegStats {
        &self.deleg_stats
    }

    /// The "nfs4" section of the statistics: delegations, recalls and the
    /// backchannel's counters. Takes no lock.
    pub fn stats_json(&self) -> serde_json::Value {
        let mut v = self.deleg_stats.json(
            self.deleg_count.load(Ordering::Relaxed),
            self.write_deleg_count.load(Ordering::Relaxed),
        );
        v["callbacks"] = self.cb.stats.json();
        v
    }

    /// After an OPEN of `file` succeeded: a read or write delegation, or
    /// why none (see the module's rules).
    pub(super) fn offer(&self, client: u64, session: &SessionId, file: FileKey, fh: &[u8], facts: OpenFacts) -> Offer {
        let share_access = facts.share_access;
        let want = share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK;
        let asked = want != OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE;
        let no = |why| if asked { Offer::NoneExt(why) } else { Offer::None };
        // A write delegation for an open for writing, a read one for an
        // open for reading only.
        let write = share_access & OPEN4_SHARE_ACCESS_WRITE != 0;
        match want {
            OPEN4_SHARE_ACCESS_WANT_NO_DELEG => return Offer::NoneExt(WND4_NOT_WANTED),
            OPEN4_SHARE_ACCESS_WANT_CANCEL => return Offer::NoneExt(WND4_CANCELLED),
            // The type asked is not the one this open's access gets.
            OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG if !write => return Offer::NoneExt(WND4_CONTENTION),
            OPEN4_SHARE_ACCESS_WANT_READ_DELEG if write => return Offer::NoneExt(WND4_CONTENTION),
            OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE
            | OPEN4_SHARE_ACCESS_WANT_READ_DELEG
            | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG
            | OPEN4_SHARE_ACCESS_WANT_ANY_DELEG => {}
            // An unknown want: none (OPEN itself does not fail for it).
            _ => return Offer::NoneExt(WND4_NOT_WANTED),
        }
        if !self.delegations.load(Ordering::Relaxed) {
            return no(WND4_RESOURCE);
        }
        if write && !facts.consistent_change {
            return no(WND4_WRITE_DELEG_NOT_SUPP_FTYPE);
        }
        if !self.cb.usable(session) {
            return no(WND4_RESOURCE);
        }
        let mut t = self.lock_tables();
        let now = Instant::now();
        let cooldown = std::time::Duration::from_millis(self.regrant_ms.load(Ordering::Relaxed)).min(self.lease());
        while t
            .recent_recalls
            .front()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) >= cooldown)
        {
            t.recent_recalls.pop_front();
        }
        if t.recent_recalls.iter().any(|(f, _)| *f == file) {
            return no(WND4_CONTENTION);
        }
        let contended = t.opens.iter().any(|o| {
            // Any open of another client contends with a write delegation,
            // one for writing (or denying reads) with a read one.
            o.file == file
                && o.client != client
                && (write || o.access & OPEN4_SHARE_ACCESS_WRITE != 0 || o.deny & OPEN4_SHARE_ACCESS_READ != 0)
        }) || t.delegs.iter().any(|d| {
            d.file == file && (d.recalled.is_some() || (!d.revoked && d.client != client && (write || d.write)))
        });
        if contended {
            return no(WND4_CONTENTION);
        }
        if let Some(d) = t
            .delegs
            .iter()
            .find(|d| d.file == file && d.client == client && !d.revoked)
        {
            // The client has one already (RFC 8881 s10.4.4: the same); a
            // read one is not turned into a write one.
            return match (d.write, write) {
                (true, _) => Offer::Write(d.stateid()),
                (false, false) => Offer::Read(d.stateid()),
                (false, true) => no(WND4_NOT_SUPP_UPGRADE),
            };
        }
        let mine = t.delegs.iter().filter(|d| d.client == client).count();
        if t.delegs.len() >= MAX_DELEGS || mine >= MAX_DELEGS_PER_CLIENT {
            return no(WND4_RESOURCE);
        }
        let other = self.new_other(&mut t, client);
        t.delegs.push(Deleg {
            other,
            client,
            session: *session,
            file,
            fh: fh.to_vec(),
            recalled: None,
            revoked: false,
            write,
        });
        self.counted(&t);
        self.deleg_stats.granted(write);
        let sid = Stateid { seqid: 1, other };
        if write {
            Offer::Write(sid)
        } else {
            Offer::Read(sid)
        }
    }

    /// Keep the delegation counts the lock-free checks read.
    fn counted(&self, t: &Tables) {
        self.deleg_count.store(t.delegs.len(), Ordering::Relaxed);
        let w = t.delegs.iter().filter(|d| d.write).count();
        self.write_deleg_count.store(w, Ordering::Relaxed);
    }

    /// `file` is about to change by `client` (`None`: NFSv3): recall the
    /// delegations of other clients on it; NFS4ERR_DELAY while any is
    /// still held. Free when no delegation exists at all.
    pub fn deleg_conflict(&self, file: &FileKey, client: Option<u64>) -> Result<(), u32> {
        self.deleg_conflict_as(file, client, Conflict::Change)
    }

    /// `file` is about to be read, or changed, by `client` (`None`:
    /// NFSv3): recall the delegations of other clients on it that the
    /// access conflicts with; NFS4ERR_DELAY while any is still held. One
    /// atomic load when no such delegation exists at all (a read: no write
    /// delegation).
    pub fn deleg_conflict_as(&self, file: &FileKey, client: Option<u64>, kind: Conflict) -> Result<(), u32> {
        let count = match kind {
            Conflict::Read => &self.write_deleg_count,
            Conflict::Change => &self.deleg_count,
        };
        if count.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let mut t = self.lock_tables();
        self.recall_conflicts(&mut t, file, client, kind)
    }

    /// [`Self::deleg_conflict_as`] with the tables held.
    pub(super) fn recall_conflicts(
        &self,
        t: &mut Tables,
        file: &FileKey,
        client: Option<u64>,
        kind: Conflict,
    ) -> Result<(), u32> {
        let lease = self.lease();
        let mut held = false;
        let mut i = 0;
        // The clock is read once a conflicting delegation is found: a
        // holder's own READs and WRITEs (a kernel client's every op under
        // its write delegation) come here and find none, and where the
        // clock source has no vDSO path (hpet in a TCG guest) each read
        // is a system call (issue 22).
        let mut clock = None;
        while i < t.delegs.len() {
            let d = &t.delegs[i];
            if &d.file != file || Some(d.client) == client || d.revoked || (kind == Conflict::Read && !d.write) {
                i += 1;
                continue;
            }
            let now = *clock.get_or_insert_with(Instant::now);
            let holder = d.client;
            if self.expired(t, holder, now) {
                // A courtesy client's state goes at the first conflict.
                self.purge_expired(t, holder);
                i = 0;
                continue;
            }
            match d.recalled {
                None => {
                    let (session, cb) = (
                        d.session,
                        Cb::Recall {
                            stateid: d.stateid(),
                            fh: d.fh.clone(),
                        },
                    );
                    t.delegs[i].recalled = Some(now);
                    self.deleg_stats.recalled(t.delegs[i].write);
                    if t.recent_recalls.len() >= MAX_RECENT_RECALLS {
                        t.recent_recalls.pop_front();
                    }
                    t.recent_recalls.push_back((*file, now));
                    self.cb.queue(holder, &session, cb);
                    self.rearm(t);
                    held = true;
                }
                Some(at) if now.saturating_duration_since(at) > lease => self.revoke(t, i),
                Some(_) => held = true,
            }
            i += 1;
        }
        if held {
            Err(NFS4ERR_DELAY)
        } else {
            Ok(())
        }
    }

    /// Revoke delegation `i` (not returned a lease after its recall).
    fn revoke(&self, t: &mut Tables, i: usize) {
        let d = &mut t.delegs[i];
        d.revoked = true;
        self.deleg_stats.revoked(d.write);
        let client = d.client;
        if let Some(c) = t.clients.iter().find(|c| c.id == client) {
            c.flags
                .fetch_or(SEQ4_STATUS_RECALLABLE_STATE_REVOKED, Ordering::Relaxed);
        }
        self.deleg_gen.fetch_add(1, Ordering::Release);
        self.rearm(t);
    }

    /// The revocation timer: revoke every delegation recalled more than a
    /// lease ago and not returned (RFC 8881 s10.2.1). Called on each turn
    /// of every core's loop; while no recall is outstanding it is one
    /// atomic load, while one is a clock read, and it takes the tables
    /// only once one is due.
    pub fn revoke_overdue(&self) {
        let due = self.revoke_due_ms.load(Ordering::Relaxed);
        if due == u64::MAX || self.stamp() < due {
            return;
        }
        let mut t = self.lock_tables();
        let now = Instant::now();
        let lease = self.lease();
        let mut i = 0;
        while i < t.delegs.len() {
            let d = &t.delegs[i];
            if !d.revoked && d.recalled.is_some_and(|at| now.saturating_duration_since(at) > lease) {
                self.revoke(&mut t, i);
            }
            i += 1;
        }
        self.rearm(&t);
    }

    /// Recompute when the revocation timer is next due: a millisecond
    /// after a lease from the oldest outstanding recall.
    pub(super) fn rearm(&self, t: &Tables) {
        let lease_ms = self.lease().as_millis() as u64;
        let due = t
            .delegs
            .iter()
            .filter(|d| !d.revoked)
            .filter_map(|d| d.recalled)
            .map(|at| self.stamp_of(at).saturating_add(lease_ms + 1))
            .min()
            .unwrap_or(u64::MAX);
        self.revoke_due_ms.store(due, Ordering::Relaxed);
    }

    /// Delegations returned, revoked or dropped so far (Calls waiting for a
    /// recall look again when it moves).
    pub fn deleg_generation(&self) -> u64 {
        self.deleg_gen.load(Ordering::Acquire)
    }

    /// Whether a delegation of another client than `client` (`None`:
    /// NFSv3) on `file` is still held, recall or not. Takes the tables only
    /// when a delegation exists.
    pub fn deleg_held(&self, file: &FileKey, client: Option<u64>) -> bool {
        if self.deleg_count.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let t = self.lock_tables();
        t.delegs
            .iter()
            .any(|d| &d.file == file && Some(d.client) != client && !d.revoked)
    }

    /// Delegation `i` goes; the client's "revoked" flag is cleared when it
    /// was its last revoked one.
    pub(super) fn remove_deleg(&self, t: &mut Tables, i: usize) {
        let d = t.delegs.remove(i);
        self.counted(t);
        self.deleg_gen.fetch_add(1, Ordering::Release);
        if d.recalled.is_some() {
            self.rearm(t);
        }
        if d.revoked && !t.delegs.iter().any(|o| o.client == d.client && o.revoked) {
            if let Some(c) = t.clients.iter().find(|c| c.id == d.client) {
                c.flags
                    .fetch_and(!SEQ4_STATUS_RECALLABLE_STATE_REVOKED, Ordering::Relaxed);
            }
        }
    }

    /// Every delegation of `client` goes (its state is purged).
    pub(super) fn drop_client_delegs(&self, t: &mut Tables, client: u64) {
        t.delegs.retain(|d| d.client != client);
        self.counted(t);
        self.deleg_gen.fetch_add(1, Ordering::Release);
        self.rearm(t);
    }

    /// Find a delegation stateid (seqid 0 or 1).
    pub(super) fn find_deleg(&self, t: &Tables, sid: &Stateid) -> Result<usize, u32> {
        let i = t
            .delegs
            .iter()
            .position(|d| d.other == sid.other)
            .ok_or(NFS4ERR_BAD_STATEID)?;
        match sid.seqid {
            0 | 1 => Ok(i),
            _ => Err(NFS4ERR_BAD_STATEID),
        }
    }

    /// DELEGRETURN (RFC 8881 s18.6) of `client`'s delegation `sid` on
    /// `file`: it goes; a revoked one is NFS4ERR_DELEG_REVOKED (and stays
    /// until FREE_STATEID).
    pub fn delegreturn(&self, client: u64, sid: &Stateid, file: &FileKey) -> Result<(), u32> {
        if sid.is_special() {
            return Err(NFS4ERR_BAD_STATEID);
        }
        let mut t = self.lock_tables();
        let i = self.find_deleg(&t, sid)?;
        let d = &t.delegs[i];
        if d.client != client || &d.file != file {
            return Err(NFS4ERR_BAD_STATEID);
        }
        if d.revoked {
            return Err(NFS4ERR_DELEG_REVOKED);
        }
        self.deleg_stats.returned(d.recalled.map(|at| at.elapsed()), d.write);
        self.remove_deleg(&mut t, i);
        Ok(())
    }

    /// An OPEN with CLAIM_DELEGATE_CUR or CLAIM_DELEG_CUR_FH: `sid` must be
    /// a delegation `client` holds on `file`.
    pub fn check_deleg_claim(&self, client: u64, sid: &Stateid, file: &FileKey) -> Result<(), u32> {
        let t = self.lock_tables();
        let i = self.find_deleg(&t, sid)?;
        let d = &t.delegs[i];
        if d.client != client || &d.file != file {
            return Err(NFS4ERR_BAD_STATEID);
        }
        if d.revoked {
            return Err(NFS4ERR_DELEG_REVOKED);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;

    use dataplane::service::BackwardChannel;
    use dataplane::ConnId;

    use super::*;
    use crate::backend::FileHandle;
    use crate::nfs4::callback::OwnedSec;
    use crate::nfs4::state::tests::attrs;
    use crate::nfs4::state::SessionCb;

    /// A client whose session's backchannel is up on connection `conn`
    /// (bound by CREATE_SESSION, announced, its CB_NULL probe answered).
    fn client(s: &V4State, owner: &[u8], conn: u32) -> (u64, SessionId) {
        let e = s.exchange_id(*b"verifier", owner, 0).unwrap();
        let key = (0, ConnId(conn));
        let cb = SessionCb {
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            program: 9,
            sec: OwnedSec::None,
            conn: Some(key),
            minorversion: 1,
        };
        let c = s
            .create_session_cb(e.clientid, e.sequenceid, &attrs(8), &attrs(1), &cb)
            .unwrap();
        let chan = BackwardChannel {
            credits: 1,
            max_call_bytes: 1024,
            max_reply_bytes: 1024,
        };
        s.cb.transport(key, Some(chan));
        let mut buf = [0u8; 512];
        s.cb.poll(key, &mut buf).expect("CB_NULL probe");
        // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS.
        let mut reply = buf[..4].to_vec();
        for w in [1u32, 0, 0, 0, 0] {
            reply.extend_from_slice(&w.to_be_bytes());
        }
        s.cb.reply(key, &reply);
        assert!(s.cb.usable(&c.sessionid), "probe answered");
        (e.clientid, c.sessionid)
    }

    fn file(n: u8) -> FileKey {
        (0, FileHandle::new(&[b'f', n]).unwrap())
    }

    fn facts(share_access: u32) -> OpenFacts {
        OpenFacts {
            share_access,
            consistent_change: true,
        }
    }

    const RW: u32 = OPEN4_SHARE_ACCESS_BOTH;
    const RD: u32 = OPEN4_SHARE_ACCESS_READ;

    /// Open `f` for `access` and ask for a delegation as OPEN does.
    fn open(s: &V4State, (c, sid): (u64, SessionId), f: FileKey, access: u32) -> Offer {
        s.open(c, b"o", f, access & OPEN4_SHARE_ACCESS_BOTH, 0).unwrap();
        s.offer(c, &sid, f, b"fh", facts(access))
    }

    /// An open for writing gets a write delegation, one for reading a read
    /// delegation (RFC 8881 s10.4); the counters tell them apart; a write
    /// delegation's stateid reads and writes, a read one's only reads.
    #[test]
    fn write_open_gets_a_write_delegation() {
        let s = V4State::new(8, 1 << 20);
        let a = client(&s, b"a", 1);
        let Offer::Write(w) = open(&s, a, file(1), RW) else {
            panic!("no write delegation")
        };
        let Offer::Read(r) = open(&s, a, file(2), RD) else {
            panic!("no read delegation")
        };
        assert_eq!(s.check_io(&w, &file(1), true), Ok(()));
        assert_eq!(s.check_io(&w, &file(1), false), Ok(()));
        assert_eq!(s.check_io(&r, &file(2), true), Err(NFS4ERR_OPENMODE));
        assert_eq!(s.check_io(&r, &file(2), false), Ok(()));
        assert_eq!(s.check_io(&w, &file(2), true), Err(NFS4ERR_BAD_STATEID), "another file");
        let st = s.deleg_stats();
        assert_eq!((st.granted.load(Relaxed), st.granted_write.load(Relaxed)), (2, 1));
        let j = s.stats_json();
        assert_eq!(
            (j["delegations_held"].as_u64(), j["write_delegations_held"].as_u64()),
            (Some(2), Some(1))
        );
        // The same client asking again gets the same one.
        assert_eq!(open(&s, a, file(1), RW), Offer::Write(w));
        assert_eq!(
            open(&s, a, file(1), RD),
            Offer::Write(w),
            "a read open under a write delegation"
        );
    }

    /// No write delegation while another client has the file open (for
    /// reading even) or holds a delegation on it; no read delegation while
    /// another client holds a write one; a client's own read delegation is
    /// not upgraded.
    #[test]
    fn write_delegation_needs_the_file_to_itself() {
        let s = V4State::new(8, 1 << 20);
        let (a, b) = (client(&s, b"a", 1), client(&s, b"b", 2));
        s.open(b.0, b"o", file(1), RD, 0).unwrap();
        assert_eq!(open(&s, a, file(1), RW), Offer::None);
        assert_eq!(
            open(&s, a, file(1), RW | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG),
            Offer::NoneExt(WND4_CONTENTION)
        );
        // B holds a read delegation on file 2: A's open for writing
        // recalls it, and while it is held no write one is granted.
        assert!(matches!(open(&s, b, file(2), RD), Offer::Read(_)));
        assert_eq!(s.open(a.0, b"o", file(2), RW, 0), Err(NFS4ERR_DELAY));
        assert_eq!(
            s.offer(a.0, &a.1, file(2), b"fh", facts(RW | OPEN4_SHARE_ACCESS_WANT_ANY_DELEG)),
            Offer::NoneExt(WND4_CONTENTION)
        );
        // A holds a write delegation on file 3: B's reading open (had it
        // got past the recall) gets no read delegation.
        assert!(matches!(open(&s, a, file(3), RW), Offer::Write(_)));
        assert_eq!(
            s.offer(
                b.0,
                &b.1,
                file(3),
                b"fh",
                facts(RD | OPEN4_SHARE_ACCESS_WANT_READ_DELEG)
            ),
            Offer::NoneExt(WND4_CONTENTION)
        );
        // A's own read delegation on file 4, then A opens it for writing.
        assert!(matches!(open(&s, a, file(4), RD), Offer::Read(_)));
        assert_eq!(
            open(&s, a, file(4), RW | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG),
            Offer::NoneExt(WND4_NOT_SUPP_UPGRADE)
        );
    }

    /// The client's wishes (RFC 8881 s18.16.3) and the backend's
    /// capability, with the WND4_* reasons.
    #[test]
    fn wants_and_the_backend_decide() {
        let s = V4State::new(8, 1 << 20);
        let a = client(&s, b"a", 1);
        let (c, sid) = a;
        let f = file(1);
        s.open(c, b"o", f, RW, 0).unwrap();
        let ask = |bits, consistent| {
            s.offer(
                c,
                &sid,
                f,
                b"fh",
                OpenFacts {
                    share_access: RW | bits,
                    consistent_change: consistent,
                },
            )
        };
        assert_eq!(
            ask(OPEN4_SHARE_ACCESS_WANT_NO_DELEG, true),
            Offer::NoneExt(WND4_NOT_WANTED)
        );
        assert_eq!(
            ask(OPEN4_SHARE_ACCESS_WANT_CANCEL, true),
            Offer::NoneExt(WND4_CANCELLED)
        );
        assert_eq!(
            ask(OPEN4_SHARE_ACCESS_WANT_READ_DELEG, true),
            Offer::NoneExt(WND4_CONTENTION),
            "no read delegation for an open for writing"
        );
        assert_eq!(ask(0, false), Offer::None, "not asked: plain NONE");
        assert_eq!(
            ask(OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG, false),
            Offer::NoneExt(WND4_WRITE_DELEG_NOT_SUPP_FTYPE)
        );
        assert_eq!(s.delegations(), 0);
        assert!(matches!(ask(OPEN4_SHARE_ACCESS_WANT_ANY_DELEG, true), Offer::Write(_)));
        // A read open on such a backend still gets a read delegation.
        let g = file(2);
        s.open(c, b"o", g, RD, 0).unwrap();
        let r = s.offer(
            c,
            &sid,
            g,
            b"fh",
            OpenFacts {
                share_access: RD,
                consistent_change: false,
            },
        );
        assert!(matches!(r, Offer::Read(_)));
        assert_eq!(
            s.offer(c, &sid, g, b"fh", facts(RD | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG)),
            Offer::NoneExt(WND4_CONTENTION)
        );
        s.set_delegations(false);
        let h = file(3);
        s.open(c, b"o", h, RW, 0).unwrap();
        assert_eq!(s.offer(c, &sid, h, b"fh", facts(RW)), Offer::None);
    }

    /// Another client's read of a file (Conflict::Read) recalls a write
    /// delegation on it, not a read one; its change recalls both; the
    /// holder's own accesses recall nothing; NFSv3 (no client) conflicts
    /// as another client does.
    #[test]
    fn reads_recall_write_delegations_only() {
        let s = V4State::new(8, 1 << 20);
        let (a, b) = (client(&s, b"a", 1), client(&s, b"b", 2));
        let Offer::Write(w) = open(&s, a, file(1), RW) else {
            panic!("no write delegation")
        };
        assert!(matches!(open(&s, a, file(2), RD), Offer::Read(_)));
        assert_eq!(s.deleg_conflict_as(&file(1), Some(a.0), Conflict::Read), Ok(()));
        assert_eq!(s.deleg_conflict_as(&file(1), Some(a.0), Conflict::Change), Ok(()));
        assert_eq!(s.deleg_conflict_as(&file(2), Some(b.0), Conflict::Read), Ok(()));
        assert_eq!(s.deleg_conflict_as(&file(2), None, Conflict::Read), Ok(()));
        assert_eq!(s.cb.pending(&a.1), 0, "nothing recalled");
        assert_eq!(
            s.deleg_conflict_as(&file(1), Some(b.0), Conflict::Read),
            Err(NFS4ERR_DELAY)
        );
        assert_eq!(s.cb.pending(&a.1), 1, "CB_RECALL queued");
        assert_eq!(s.deleg_conflict_as(&file(1), None, Conflict::Read), Err(NFS4ERR_DELAY));
        assert_eq!(s.cb.pending(&a.1), 1, "recalled once");
        // B's reading OPEN waits too.
        assert_eq!(s.open(b.0, b"o", file(1), RD, 0), Err(NFS4ERR_DELAY));
        let st = s.deleg_stats();
        assert_eq!((st.recalls.load(Relaxed), st.recalls_write.load(Relaxed)), (1, 1));
        // The holder still writes with its delegation while recalled, then
        // returns it; the read proceeds.
        assert_eq!(s.check_io(&w, &file(1), true), Ok(()));
        assert_eq!(s.delegreturn(a.0, &w, &file(1)), Ok(()));
        assert_eq!(st.returned_write.load(Relaxed), 1);
        assert_eq!(s.deleg_conflict_as(&file(1), Some(b.0), Conflict::Read), Ok(()));
        assert_eq!(s.stats_json()["write_delegations_held"].as_u64(), Some(0));
        // A change recalls the read delegation.
        assert_eq!(
            s.deleg_conflict_as(&file(2), Some(b.0), Conflict::Change),
            Err(NFS4ERR_DELAY)
        );
    }

    /// A write delegation not returned within a lease of its recall is
    /// revoked, and counted as a write one.
    #[test]
    fn unreturned_write_delegation_is_revoked() {
        let s = V4State::new(8, 1 << 20).with_lease(std::time::Duration::from_millis(50));
        let (a, b) = (client(&s, b"a", 1), client(&s, b"b", 2));
        let Offer::Write(w) = open(&s, a, file(1), RW) else {
            panic!("no write delegation")
        };
        assert_eq!(
            s.deleg_conflict_as(&file(1), Some(b.0), Conflict::Read),
            Err(NFS4ERR_DELAY)
        );
        let t0 = Instant::now();
        let mut seq = 0;
        let mut out = [0u8; 512];
        while t0.elapsed() < std::time::Duration::from_millis(80) {
            // A keeps its lease (SEQUENCE), never answering the recall.
            seq += 1;
            s.sequence(&a.1, seq, 0, false, &mut out).unwrap();
            s.sequence_done(&a.1, 0, None);
            assert_eq!(
                s.check_io(&w, &file(1), true),
                Ok(()),
                "held until the lease has passed"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
            if t0.elapsed() < std::time::Duration::from_millis(40) {
                assert_eq!(
                    s.deleg_conflict_as(&file(1), Some(b.0), Conflict::Read),
                    Err(NFS4ERR_DELAY)
                );
            }
        }
        s.revoke_overdue();
        assert_eq!(s.deleg_conflict_as(&file(1), Some(b.0), Conflict::Read), Ok(()));
        assert_eq!(s.check_io(&w, &file(1), true), Err(NFS4ERR_DELEG_REVOKED));
        assert_eq!(s.deleg_stats().revoked_write.load(Relaxed), 1);
    }
}
