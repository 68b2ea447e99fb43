//! Read delegations (RFC 8881 s10.2, s10.4): granted by OPEN, recalled
//! with CB_RECALL when another client (or NFSv3) is about to change the
//! file, returned with DELEGRETURN, revoked when not returned within a
//! lease of the recall.
//!
//! OPEN grants OPEN_DELEGATE_READ when `nfs4.delegations` is on, the open
//! is for reading only, the session's backchannel is up
//! ([`super::callback`]), the client did not say it wants none
//! (OPEN4_SHARE_ACCESS_WANT_NO_DELEG; RFC 8881 s18.16.3), no other client
//! has the file open for writing (or denies reading), no recall of the
//! file is in progress or ended less than [`REGRANT_AFTER_RECALL`] ago
//! (otherwise the holder, reopening at once after its DELEGRETURN, would
//! be granted a new delegation before the conflicting client's retry
//! arrives, and that client could be sent back to wait again and again;
//! the Linux server blocks recently recalled files the same way), and the
//! bounds allow ([`MAX_DELEGS`],
//! [`MAX_DELEGS_PER_CLIENT`]). A client that asked (a `WANT_*` bit) and
//! gets none hears why (OPEN_DELEGATE_NONE_EXT with a `WND4_*` reason).
//! Write delegations are not granted (WND4_CONTENTION to a client that
//! wants only one).
//!
//! A conflict: another client's OPEN for writing (or denying reading),
//! WRITE, SETATTR of the size, REMOVE, RENAME or LINK of the file, through
//! NFSv4 or NFSv3. Each delegation of another client on the file is then
//! recalled (once; the CB_RECALL goes on the holder's backchannel) and the
//! conflicting operation is answered NFS4ERR_DELAY until every such
//! delegation is returned or revoked. An NFSv3 one is held until then
//! ([`crate::nfs::delegwait`]; NFS3ERR_JUKEBOX when it cannot be, over TCP
//! or past the bound).
//! A holder whose lease expired loses its state to the conflict, as a
//! courtesy client does (see [`super::state`]).
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
//! answers NFS4ERR_DELEG_REVOKED) takes it away.

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
        let mut v = self.deleg_stats.json(self.deleg_count.load(Ordering::Relaxed));
        v["callbacks"] = self.cb.stats.json();
        v
    }

    /// After an OPEN of `file` with `share_access` succeeded: a read
    /// delegation, or why none (see the module's rules).
    pub(super) fn offer_read(
        &self,
        client: u64,
        session: &SessionId,
        file: FileKey,
        fh: &[u8],
        share_access: u32,
    ) -> Offer {
        let want = share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK;
        let asked = want != OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE;
        let no = |why| if asked { Offer::NoneExt(why) } else { Offer::None };
        match want {
            OPEN4_SHARE_ACCESS_WANT_NO_DELEG => return Offer::NoneExt(WND4_NOT_WANTED),
            OPEN4_SHARE_ACCESS_WANT_CANCEL => return Offer::NoneExt(WND4_CANCELLED),
            OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG => return Offer::NoneExt(WND4_CONTENTION),
            _ => {}
        }
        if !self.delegations.load(Ordering::Relaxed) {
            return no(WND4_RESOURCE);
        }
        if share_access & OPEN4_SHARE_ACCESS_WRITE != 0 {
            // No write delegations.
            return no(WND4_CONTENTION);
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
            o.file == file
                && o.client != client
                && (o.access & OPEN4_SHARE_ACCESS_WRITE != 0 || o.deny & OPEN4_SHARE_ACCESS_READ != 0)
        }) || t.delegs.iter().any(|d| d.file == file && d.recalled.is_some());
        if contended {
            return no(WND4_CONTENTION);
        }
        if let Some(d) = t
            .delegs
            .iter()
            .find(|d| d.file == file && d.client == client && !d.revoked)
        {
            // The client has one already (RFC 8881 s10.4.4: the same).
            return Offer::Read(d.stateid());
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
        });
        self.deleg_count.store(t.delegs.len(), Ordering::Relaxed);
        self.deleg_stats.granted();
        Offer::Read(Stateid { seqid: 1, other })
    }

    /// `file` is about to change by `client` (`None`: NFSv3): recall the
    /// delegations of other clients on it; NFS4ERR_DELAY while any is
    /// still held. Free when no delegation exists at all.
    pub fn deleg_conflict(&self, file: &FileKey, client: Option<u64>) -> Result<(), u32> {
        if self.deleg_count.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let mut t = self.lock_tables();
        self.recall_conflicts(&mut t, file, client)
    }

    /// [`Self::deleg_conflict`] with the tables held.
    pub(super) fn recall_conflicts(&self, t: &mut Tables, file: &FileKey, client: Option<u64>) -> Result<(), u32> {
        let now = Instant::now();
        let lease = self.lease();
        let mut held = false;
        let mut i = 0;
        while i < t.delegs.len() {
            let d = &t.delegs[i];
            if &d.file != file || Some(d.client) == client || d.revoked {
                i += 1;
                continue;
            }
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
                    self.deleg_stats.recalled();
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
        self.deleg_stats.revoked();
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
        self.deleg_count.store(t.delegs.len(), Ordering::Relaxed);
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
        self.deleg_count.store(t.delegs.len(), Ordering::Relaxed);
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
        self.deleg_stats.returned(d.recalled.map(|at| at.elapsed()));
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
