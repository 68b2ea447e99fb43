//! NFSv4.1 server state shared by every core and TCP connection: client
//! records (EXCHANGE_ID), sessions and their slot tables with the reply
//! cache (CREATE_SESSION, SEQUENCE), and open stateids (OPEN, CLOSE).
//!
//! Everything is bounded: [`MAX_CLIENTS`] clients, [`MAX_SESSIONS`]
//! sessions, [`MAX_OPENS`] opens (NFS4ERR_RESOURCE beyond), at most
//! `max_slots` slots per session (no more than the RDMA credits a
//! connection may hold, RFC 8881 s2.10.6.1, so a client never has more
//! Calls in flight than it has receives), each slot caching at most
//! [`SLOT_CACHE_BYTES`] of reply. A slot table is allocated when its
//! session is created, never per Call.
//!
//! Leases (RFC 8881 s8.3): every SEQUENCE renews its client. A client whose
//! lease expired keeps its state as a *courtesy* client until another
//! client's OPEN conflicts with one of its opens or the client table is
//! full; then its record, sessions and opens go.
//!
//! One mutex guards the tables; it is held for table look-ups and a slot's
//! reply copy only (no I/O under it).

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proto::nfs4::args::ChannelAttrs;
use proto::nfs4::*;

/// Lease time in seconds (`lease_time` attribute).
pub const LEASE_SECS: u32 = 90;
/// Client records kept.
pub const MAX_CLIENTS: usize = 1024;
/// Sessions kept (all clients).
pub const MAX_SESSIONS: usize = 1024;
/// Open stateids kept (all clients).
pub const MAX_OPENS: usize = 65_536;
/// Largest slot table a session gets.
pub const MAX_SLOTS: u32 = 64;
/// Bytes of reply a slot caches (`ca_maxresponsesize_cached`).
pub const SLOT_CACHE_BYTES: u32 = 4096;

/// What a slot holds from its last request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cached {
    /// Nothing yet (a fresh slot).
    Nothing,
    /// The COMPOUND4res bytes, in `buf[..len]`.
    Reply(usize),
    /// The client did not ask (or the reply did not fit): a retry gets
    /// NFS4ERR_RETRY_UNCACHED_REP.
    Uncached,
}

#[derive(Debug)]
struct Slot {
    seqid: u32,
    in_use: bool,
    cached: Cached,
    buf: Box<[u8]>,
}

#[derive(Debug)]
struct Session {
    id: SessionId,
    client: u64,
    slots: Vec<Slot>,
    fore: ChannelAttrs,
}

#[derive(Debug)]
struct Client {
    id: u64,
    ownerid: Vec<u8>,
    verifier: Verifier,
    confirmed: bool,
    /// The last `csa_sequence` a CREATE_SESSION used, and its result.
    cs_seq: u32,
    cs_reply: Option<CreateSessionResult>,
    renewed: Instant,
    reclaim_complete: bool,
}

#[derive(Debug, Clone)]
struct Open {
    other: [u8; NFS4_OTHER_SIZE],
    seqid: u32,
    client: u64,
    owner: Vec<u8>,
    file: FileKey,
    access: u32,
    deny: u32,
}

/// A file as state names it: the export and the backend handle's bytes.
pub type FileKey = (usize, crate::backend::FileHandle);

/// CREATE_SESSION's results (RFC 8881 s18.36.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateSessionResult {
    pub sessionid: SessionId,
    pub sequence: u32,
    pub flags: u32,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
}

/// EXCHANGE_ID's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangeIdResult {
    pub clientid: u64,
    pub sequenceid: u32,
    pub flags: u32,
}

/// What SEQUENCE found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqOutcome {
    /// A new request: run the COMPOUND; slots of the session.
    New { client: u64, slots: u32, cachethis: bool },
    /// A retry of the last request, whose reply (`n` bytes) was copied out.
    Replay(usize),
}

#[derive(Debug, Default)]
struct Tables {
    clients: Vec<Client>,
    sessions: Vec<Session>,
    opens: Vec<Open>,
    next_client: u32,
    next_session: u32,
    next_state: u32,
}

/// The server's NFSv4 state.
#[derive(Debug)]
pub struct V4State {
    t: Mutex<Tables>,
    /// Seconds since the epoch at start-up: in client ids, session ids and
    /// stateids, so none of an earlier process is taken for one of ours.
    boot: u32,
    max_slots: u32,
    max_request_bytes: u32,
    max_response_bytes: u32,
    lease: Duration,
}

impl V4State {
    /// State for a server whose connections hold at most `credits` Calls and
    /// whose READ/WRITE limit is `max_io_bytes`.
    pub fn new(credits: u32, max_io_bytes: u32) -> V4State {
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        V4State {
            t: Mutex::new(Tables::default()),
            boot,
            max_slots: credits.clamp(1, MAX_SLOTS),
            // A WRITE's data and a COMPOUND's other operations.
            max_request_bytes: max_io_bytes + 8192,
            max_response_bytes: max_io_bytes + 8192,
            lease: Duration::from_secs(u64::from(LEASE_SECS)),
        }
    }

    /// The same with a lease of `lease` (tests of expiry).
    pub fn with_lease(mut self, lease: Duration) -> V4State {
        self.lease = lease;
        self
    }

    /// Seconds since the epoch at start-up (the pseudo directories' times).
    pub fn boot(&self) -> u32 {
        self.boot
    }

    /// The slots a session gets at most.
    pub fn max_slots(&self) -> u32 {
        self.max_slots
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        // Every update leaves the tables consistent between statements that
        // can panic (none do on peer input), so a poisoned lock is used.
        self.t.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// EXCHANGE_ID (RFC 8881 s18.35.4), without state protection (SP4_NONE
    /// only; the caller refuses the others).
    pub fn exchange_id(&self, verifier: Verifier, ownerid: &[u8], flags: u32) -> Result<ExchangeIdResult, u32> {
        if flags & !EXCHGID4_FLAG_MASK_A != 0 {
            return Err(NFS4ERR_INVAL);
        }
        let mut t = self.lock();
        let found = t.clients.iter().position(|c| c.ownerid == ownerid && c.confirmed);
        let out_flags =
            |confirmed: bool| EXCHGID4_FLAG_USE_NON_PNFS | if confirmed { EXCHGID4_FLAG_CONFIRMED_R } else { 0 };
        if flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0 {
            // An update of a confirmed record (case 6/7/8).
            let Some(i) = found else { return Err(NFS4ERR_NOENT) };
            let c = &mut t.clients[i];
            if c.verifier != verifier {
                return Err(NFS4ERR_NOT_SAME);
            }
            return Ok(ExchangeIdResult {
                clientid: c.id,
                sequenceid: c.cs_seq.wrapping_add(1),
                flags: out_flags(true),
            });
        }
        if let Some(i) = found {
            let c = &mut t.clients[i];
            if c.verifier == verifier {
                // The same incarnation again (case 2).
                c.renewed = Instant::now();
                return Ok(ExchangeIdResult {
                    clientid: c.id,
                    sequenceid: c.cs_seq.wrapping_add(1),
                    flags: out_flags(true),
                });
            }
            // A rebooted client (case 5): a new unconfirmed record; the old
            // one goes when the new one is confirmed.
        }
        // Drop an unconfirmed record of the same owner (case 4).
        t.clients.retain(|c| c.confirmed || c.ownerid != ownerid);
        if t.clients.len() >= MAX_CLIENTS && !self.reap_one_expired(&mut t) {
            return Err(NFS4ERR_RESOURCE);
        }
        t.next_client = t.next_client.wrapping_add(1);
        let id = (u64::from(self.boot) << 32) | u64::from(t.next_client);
        t.clients.push(Client {
            id,
            ownerid: ownerid.to_vec(),
            verifier,
            confirmed: false,
            cs_seq: 0,
            cs_reply: None,
            renewed: Instant::now(),
            reclaim_complete: false,
        });
        Ok(ExchangeIdResult {
            clientid: id,
            sequenceid: 1,
            flags: out_flags(false),
        })
    }

    /// Forget one client whose lease expired (a courtesy client), with its
    /// sessions and opens. Whether one was found.
    fn reap_one_expired(&self, t: &mut Tables) -> bool {
        let now = Instant::now();
        let Some(i) = t
            .clients
            .iter()
            .position(|c| now.duration_since(c.renewed) > self.lease)
        else {
            return false;
        };
        let id = t.clients[i].id;
        Self::purge_client(t, id);
        true
    }

    fn purge_client(t: &mut Tables, id: u64) {
        t.clients.retain(|c| c.id != id);
        t.sessions.retain(|s| s.client != id);
        t.opens.retain(|o| o.client != id);
    }

    /// CREATE_SESSION (RFC 8881 s18.36.4): confirms the client, replaces
    /// an earlier incarnation, and makes a session whose fore channel is
    /// bounded by our buffers and credits. No back channel is granted
    /// (flags 0; delegations and callbacks are a later step).
    pub fn create_session(
        &self,
        clientid: u64,
        sequence: u32,
        fore: &ChannelAttrs,
        back: &ChannelAttrs,
    ) -> Result<CreateSessionResult, u32> {
        let mut t = self.lock();
        let Some(ci) = t.clients.iter().position(|c| c.id == clientid) else {
            return Err(NFS4ERR_STALE_CLIENTID);
        };
        let c = &t.clients[ci];
        if c.confirmed && sequence == c.cs_seq {
            // A retry of the last CREATE_SESSION (s18.36.4 item 2).
            return c.cs_reply.ok_or(NFS4ERR_SEQ_MISORDERED);
        }
        let expected = if c.confirmed { c.cs_seq.wrapping_add(1) } else { 1 };
        if sequence != expected {
            return Err(NFS4ERR_SEQ_MISORDERED);
        }
        if fore.maxrequests == 0 || fore.maxoperations == 0 {
            return Err(NFS4ERR_INVAL);
        }
        if fore.maxrequestsize < 512 || fore.maxresponsesize < 512 {
            return Err(NFS4ERR_TOOSMALL);
        }
        if t.sessions.len() >= MAX_SESSIONS {
            return Err(NFS4ERR_NOSPC);
        }
        let slots = fore.maxrequests.min(self.max_slots);
        let cached = fore.maxresponsesize_cached.min(SLOT_CACHE_BYTES);
        let granted = ChannelAttrs {
            headerpadsize: 0,
            maxrequestsize: fore.maxrequestsize.min(self.max_request_bytes),
            maxresponsesize: fore.maxresponsesize.min(self.max_response_bytes),
            maxresponsesize_cached: cached,
            maxoperations: fore.maxoperations.min(MAX_OPS),
            maxrequests: slots,
            rdma_ird: None,
        };
        t.next_session = t.next_session.wrapping_add(1);
        let mut sid = [0u8; NFS4_SESSIONID_SIZE];
        sid[..8].copy_from_slice(&clientid.to_be_bytes());
        sid[8..12].copy_from_slice(&t.next_session.to_be_bytes());
        sid[12..].copy_from_slice(&self.boot.to_be_bytes());
        let res = CreateSessionResult {
            sessionid: sid,
            sequence,
            flags: 0,
            fore: granted,
            back: ChannelAttrs {
                rdma_ird: None,
                ..*back
            },
        };
        // Confirming a record replaces every other record of its owner
        // (a rebooted client's old state goes, s18.35.4 case 5).
        let owner = std::mem::take(&mut t.clients[ci].ownerid);
        let old: Vec<u64> = t
            .clients
            .iter()
            .filter(|o| o.id != clientid && o.ownerid == owner)
            .map(|o| o.id)
            .collect();
        for id in old {
            Self::purge_client(&mut t, id);
        }
        let ci = t.clients.iter().position(|c| c.id == clientid).unwrap_or(0);
        let c = &mut t.clients[ci];
        c.ownerid = owner;
        c.confirmed = true;
        c.cs_seq = sequence;
        c.cs_reply = Some(res);
        c.renewed = Instant::now();
        let slots = (0..slots)
            .map(|_| Slot {
                seqid: 0,
                in_use: false,
                cached: Cached::Nothing,
                buf: vec![0u8; cached as usize].into_boxed_slice(),
            })
            .collect();
        t.sessions.push(Session {
            id: sid,
            client: clientid,
            slots,
            fore: granted,
        });
        Ok(res)
    }

    /// SEQUENCE (RFC 8881 s18.46.3, s2.10.6.1): a new request marks the slot
    /// in use; a retry of the slot's last request copies its cached reply
    /// into `out` (NFS4ERR_RETRY_UNCACHED_REP when there is none, or it does
    /// not fit `out`); one while the first is still running is
    /// NFS4ERR_DELAY; any other sequence id NFS4ERR_SEQ_MISORDERED.
    pub fn sequence(
        &self,
        sid: &SessionId,
        seqid: u32,
        slotid: u32,
        cachethis: bool,
        out: &mut [u8],
    ) -> Result<SeqOutcome, u32> {
        let mut t = self.lock();
        let Some(s) = t.sessions.iter_mut().find(|s| &s.id == sid) else {
            return Err(NFS4ERR_BADSESSION);
        };
        let client = s.client;
        let nslots = s.slots.len() as u32;
        let Some(slot) = s.slots.get_mut(slotid as usize) else {
            return Err(NFS4ERR_BADSLOT);
        };
        let out = if seqid == slot.seqid && slot.seqid != 0 {
            if slot.in_use {
                return Err(NFS4ERR_DELAY);
            }
            match slot.cached {
                Cached::Reply(n) if n <= out.len() => {
                    out[..n].copy_from_slice(&slot.buf[..n]);
                    SeqOutcome::Replay(n)
                }
                _ => return Err(NFS4ERR_RETRY_UNCACHED_REP),
            }
        } else if seqid == slot.seqid.wrapping_add(1) {
            slot.seqid = seqid;
            slot.in_use = true;
            slot.cached = Cached::Nothing;
            SeqOutcome::New {
                client,
                slots: nslots,
                cachethis,
            }
        } else {
            return Err(NFS4ERR_SEQ_MISORDERED);
        };
        if let Some(c) = t.clients.iter_mut().find(|c| c.id == client) {
            c.renewed = Instant::now();
        }
        Ok(out)
    }

    /// The request on a slot is answered: keep `reply` (the COMPOUND4res
    /// bytes) for a retry when `cache` and it fits, else remember it was not
    /// kept.
    pub fn sequence_done(&self, sid: &SessionId, slotid: u32, reply: Option<&[u8]>) {
        let mut t = self.lock();
        let Some(slot) = t
            .sessions
            .iter_mut()
            .find(|s| &s.id == sid)
            .and_then(|s| s.slots.get_mut(slotid as usize))
        else {
            return;
        };
        slot.in_use = false;
        slot.cached = match reply {
            Some(r) if r.len() <= slot.buf.len() => {
                slot.buf[..r.len()].copy_from_slice(r);
                Cached::Reply(r.len())
            }
            _ => Cached::Uncached,
        };
    }

    /// The session's granted fore channel.
    pub fn fore_channel(&self, sid: &SessionId) -> Option<ChannelAttrs> {
        self.lock().sessions.iter().find(|s| &s.id == sid).map(|s| s.fore)
    }

    /// DESTROY_SESSION (RFC 8881 s18.37). `own_slot`: the slot this
    /// COMPOUND's SEQUENCE holds when it runs in the same session.
    pub fn destroy_session(&self, sid: &SessionId, own_slot: Option<u32>) -> Result<(), u32> {
        let mut t = self.lock();
        let Some(i) = t.sessions.iter().position(|s| &s.id == sid) else {
            return Err(NFS4ERR_BADSESSION);
        };
        let busy = t.sessions[i]
            .slots
            .iter()
            .enumerate()
            .any(|(k, s)| s.in_use && own_slot != Some(k as u32));
        if busy {
            return Err(NFS4ERR_DELAY);
        }
        t.sessions.remove(i);
        Ok(())
    }

    /// Whether the session exists (BIND_CONN_TO_SESSION).
    pub fn has_session(&self, sid: &SessionId) -> bool {
        self.lock().sessions.iter().any(|s| &s.id == sid)
    }

    /// DESTROY_CLIENTID (RFC 8881 s18.50).
    pub fn destroy_clientid(&self, id: u64) -> Result<(), u32> {
        let mut t = self.lock();
        if !t.clients.iter().any(|c| c.id == id) {
            return Err(NFS4ERR_STALE_CLIENTID);
        }
        if t.sessions.iter().any(|s| s.client == id) {
            return Err(NFS4ERR_CLIENTID_BUSY);
        }
        Self::purge_client(&mut t, id);
        Ok(())
    }

    /// RECLAIM_COMPLETE (RFC 8881 s18.51) for the whole client.
    pub fn reclaim_complete(&self, client: u64) -> Result<(), u32> {
        let mut t = self.lock();
        let c = t
            .clients
            .iter_mut()
            .find(|c| c.id == client)
            .ok_or(NFS4ERR_STALE_CLIENTID)?;
        if c.reclaim_complete {
            return Err(NFS4ERR_COMPLETE_ALREADY);
        }
        c.reclaim_complete = true;
        Ok(())
    }

    /// OPEN's share reservation (RFC 8881 s9.7): a new open stateid, or the
    /// owner's open of the file upgraded (its seqid bumped). A conflict with
    /// another owner's access or deny is NFS4ERR_SHARE_DENIED, unless the
    /// other owner's client is a courtesy client, whose state then goes.
    pub fn open(&self, client: u64, owner: &[u8], file: FileKey, access: u32, deny: u32) -> Result<Stateid, u32> {
        let mut t = self.lock();
        let now = Instant::now();
        loop {
            let conflict = t.opens.iter().find(|o| {
                o.file == file
                    && !(o.client == client && o.owner == owner)
                    && (o.deny & access != 0 || deny & o.access != 0)
            });
            let Some(o) = conflict else { break };
            let other = o.client;
            let expired = t
                .clients
                .iter()
                .find(|c| c.id == other)
                .is_none_or(|c| now.duration_since(c.renewed) > self.lease);
            if !expired {
                return Err(NFS4ERR_SHARE_DENIED);
            }
            Self::purge_client(&mut t, other);
        }
        if let Some(o) = t
            .opens
            .iter_mut()
            .find(|o| o.file == file && o.client == client && o.owner == owner)
        {
            o.access |= access;
            o.deny |= deny;
            o.seqid = o.seqid.wrapping_add(1).max(1);
            return Ok(Stateid {
                seqid: o.seqid,
                other: o.other,
            });
        }
        if t.opens.len() >= MAX_OPENS {
            return Err(NFS4ERR_RESOURCE);
        }
        t.next_state = t.next_state.wrapping_add(1);
        let mut other = [0u8; NFS4_OTHER_SIZE];
        other[..4].copy_from_slice(&self.boot.to_be_bytes());
        other[4..8].copy_from_slice(&t.next_state.to_be_bytes());
        other[8..].copy_from_slice(&(client as u32).to_be_bytes());
        t.opens.push(Open {
            other,
            seqid: 1,
            client,
            owner: owner.to_vec(),
            file,
            access,
            deny,
        });
        Ok(Stateid { seqid: 1, other })
    }

    /// Find an open stateid and check its seqid (RFC 8881 s8.2.2: 0 means
    /// the current one; an older one is NFS4ERR_OLD_STATEID, a newer one
    /// NFS4ERR_BAD_STATEID); one of another process is NFS4ERR_STALE_STATEID.
    fn find_open(&self, t: &Tables, sid: &Stateid) -> Result<usize, u32> {
        let i = t.opens.iter().position(|o| o.other == sid.other);
        let Some(i) = i else {
            let boot = u32::from_be_bytes([sid.other[0], sid.other[1], sid.other[2], sid.other[3]]);
            return Err(if boot != self.boot {
                NFS4ERR_STALE_STATEID
            } else {
                NFS4ERR_BAD_STATEID
            });
        };
        let cur = t.opens[i].seqid;
        if sid.seqid == 0 || sid.seqid == cur {
            Ok(i)
        } else if sid.seqid < cur {
            Err(NFS4ERR_OLD_STATEID)
        } else {
            Err(NFS4ERR_BAD_STATEID)
        }
    }

    /// CLOSE: the open goes (RFC 8881 s18.2.4).
    pub fn close(&self, sid: &Stateid, file: &FileKey) -> Result<(), u32> {
        let mut t = self.lock();
        let i = self.find_open(&t, sid)?;
        if &t.opens[i].file != file {
            return Err(NFS4ERR_BAD_STATEID);
        }
        t.opens.remove(i);
        Ok(())
    }

    /// OPEN_DOWNGRADE (RFC 8881 s18.18): access and deny narrowed to subsets.
    pub fn downgrade(&self, sid: &Stateid, file: &FileKey, access: u32, deny: u32) -> Result<Stateid, u32> {
        let mut t = self.lock();
        let i = self.find_open(&t, sid)?;
        let o = &mut t.opens[i];
        if &o.file != file {
            return Err(NFS4ERR_BAD_STATEID);
        }
        if access & !o.access != 0 || deny & !o.deny != 0 || access == 0 {
            return Err(NFS4ERR_INVAL);
        }
        o.access = access;
        o.deny = deny;
        o.seqid = o.seqid.wrapping_add(1).max(1);
        Ok(Stateid {
            seqid: o.seqid,
            other: o.other,
        })
    }

    /// The stateid of a READ, WRITE or SETATTR of size (RFC 8881 s8.2.3,
    /// s9.1.2): a special stateid acts with no open (share reservations
    /// of others still apply); an open stateid must be this file's and
    /// grant the access (NFS4ERR_OPENMODE otherwise).
    pub fn check_io(&self, sid: &Stateid, file: &FileKey, write: bool) -> Result<(), u32> {
        let t = self.lock();
        let want = if write {
            OPEN4_SHARE_ACCESS_WRITE
        } else {
            OPEN4_SHARE_ACCESS_READ
        };
        if sid.is_special() {
            let allowed = *sid == Stateid::ANONYMOUS || (*sid == Stateid::BYPASS && !write);
            if !allowed {
                return Err(NFS4ERR_BAD_STATEID);
            }
            let denied = t.opens.iter().any(|o| &o.file == file && o.deny & want != 0);
            return if denied { Err(NFS4ERR_LOCKED) } else { Ok(()) };
        }
        let i = self.find_open(&t, sid)?;
        let o = &t.opens[i];
        if &o.file != file {
            return Err(NFS4ERR_BAD_STATEID);
        }
        // A READ through a write-only open is allowed (RFC 8881 s9.1.2
        // lets the server permit it; the Linux server does).
        if write && o.access & OPEN4_SHARE_ACCESS_WRITE == 0 {
            return Err(NFS4ERR_OPENMODE);
        }
        Ok(())
    }

    /// TEST_STATEID's verdict on one stateid of `client`.
    pub fn test_stateid(&self, client: u64, sid: &Stateid) -> u32 {
        if sid.is_special() {
            return NFS4ERR_BAD_STATEID;
        }
        let t = self.lock();
        match self.find_open(&t, sid) {
            Ok(i) if t.opens[i].client == client => NFS4_OK,
            Ok(_) => NFS4ERR_BAD_STATEID,
            Err(e) => e,
        }
    }

    /// FREE_STATEID: an open stateid is freed by CLOSE, not here
    /// (NFS4ERR_LOCKS_HELD, as for a stateid still in use).
    pub fn free_stateid(&self, client: u64, sid: &Stateid) -> u32 {
        match self.test_stateid(client, sid) {
            NFS4_OK => NFS4ERR_LOCKS_HELD,
            e => e,
        }
    }

    /// Open stateids held (tests, statistics).
    pub fn opens(&self) -> usize {
        self.lock().opens.len()
    }

    /// Client records held.
    pub fn clients(&self) -> usize {
        self.lock().clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FileHandle;

    fn attrs(slots: u32) -> ChannelAttrs {
        ChannelAttrs {
            headerpadsize: 0,
            maxrequestsize: 1 << 20,
            maxresponsesize: 1 << 20,
            maxresponsesize_cached: 8192,
            maxoperations: 8,
            maxrequests: slots,
            rdma_ird: None,
        }
    }

    fn client(s: &V4State, owner: &[u8]) -> (u64, SessionId) {
        let e = s.exchange_id(*b"verifier", owner, 0).unwrap();
        let c = s
            .create_session(e.clientid, e.sequenceid, &attrs(64), &attrs(1))
            .unwrap();
        (e.clientid, c.sessionid)
    }

    #[test]
    fn slots_bounded_by_credits_and_replies_cached() {
        let s = V4State::new(8, 1 << 20);
        let e = s.exchange_id(*b"verifier", b"c", 0).unwrap();
        let c = s
            .create_session(e.clientid, e.sequenceid, &attrs(64), &attrs(1))
            .unwrap();
        assert_eq!(c.fore.maxrequests, 8);
        assert_eq!(c.fore.maxresponsesize_cached, SLOT_CACHE_BYTES);
        // CREATE_SESSION retried: the same session.
        let again = s
            .create_session(e.clientid, e.sequenceid, &attrs(64), &attrs(1))
            .unwrap();
        assert_eq!(again.sessionid, c.sessionid);
        let sid = c.sessionid;
        let mut out = [0u8; 64];
        assert!(matches!(
            s.sequence(&sid, 1, 0, true, &mut out),
            Ok(SeqOutcome::New { slots: 8, .. })
        ));
        // While the first is running, its retry waits.
        assert_eq!(s.sequence(&sid, 1, 0, true, &mut out), Err(NFS4ERR_DELAY));
        s.sequence_done(&sid, 0, Some(b"reply!!!"));
        assert_eq!(s.sequence(&sid, 1, 0, true, &mut out), Ok(SeqOutcome::Replay(8)));
        assert_eq!(&out[..8], b"reply!!!");
        // A reply larger than the caller's room is not copied.
        assert_eq!(
            s.sequence(&sid, 1, 0, true, &mut out[..4]),
            Err(NFS4ERR_RETRY_UNCACHED_REP)
        );
        assert_eq!(s.sequence(&sid, 3, 0, true, &mut out), Err(NFS4ERR_SEQ_MISORDERED));
        assert_eq!(s.sequence(&sid, 1, 8, true, &mut out), Err(NFS4ERR_BADSLOT));
        // A reply too large for the slot is remembered as not kept.
        assert!(matches!(
            s.sequence(&sid, 2, 0, true, &mut out),
            Ok(SeqOutcome::New { .. })
        ));
        s.sequence_done(&sid, 0, Some(&vec![0u8; SLOT_CACHE_BYTES as usize + 4]));
        assert_eq!(s.sequence(&sid, 2, 0, true, &mut out), Err(NFS4ERR_RETRY_UNCACHED_REP));
    }

    /// An expired client keeps its opens until another client's OPEN
    /// conflicts with them (courtesy), then its state goes.
    #[test]
    fn expired_clients_are_courtesy_clients() {
        let s = V4State::new(8, 1 << 20).with_lease(Duration::from_millis(30));
        let (a, _) = client(&s, b"a");
        let (b, sid_b) = client(&s, b"b");
        let f = (0, FileHandle::new(&[1, 2, 3]).unwrap());
        s.open(a, b"oa", f, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_BOTH)
            .unwrap();
        assert_eq!(
            s.open(b, b"ob", f, OPEN4_SHARE_ACCESS_READ, 0),
            Err(NFS4ERR_SHARE_DENIED)
        );
        std::thread::sleep(Duration::from_millis(60));
        // b renews; a has expired and keeps its state until the conflict.
        let mut out = [0u8; 16];
        s.sequence(&sid_b, 1, 0, false, &mut out).unwrap();
        s.sequence_done(&sid_b, 0, None);
        assert_eq!((s.clients(), s.opens()), (2, 1));
        s.open(b, b"ob", f, OPEN4_SHARE_ACCESS_READ, 0).unwrap();
        assert_eq!((s.clients(), s.opens()), (1, 1), "a's record and open went");
    }

    #[test]
    fn stateid_seqids() {
        let s = V4State::new(8, 1 << 20);
        let (a, _) = client(&s, b"a");
        let f = (0, FileHandle::new(&[9]).unwrap());
        let g = (0, FileHandle::new(&[8]).unwrap());
        let s1 = s.open(a, b"o", f, OPEN4_SHARE_ACCESS_READ, 0).unwrap();
        let s2 = s.open(a, b"o", f, OPEN4_SHARE_ACCESS_WRITE, 0).unwrap();
        assert_eq!((s1.other, s2.seqid), (s2.other, 2));
        assert_eq!(s.check_io(&s1, &f, false), Err(NFS4ERR_OLD_STATEID));
        assert_eq!(
            s.check_io(&Stateid { seqid: 3, ..s2 }, &f, false),
            Err(NFS4ERR_BAD_STATEID)
        );
        assert_eq!(s.check_io(&Stateid { seqid: 0, ..s2 }, &f, true), Ok(()));
        assert_eq!(s.check_io(&s2, &g, false), Err(NFS4ERR_BAD_STATEID));
        let mut stale = s2;
        stale.other[0] ^= 0xff;
        assert_eq!(s.check_io(&stale, &f, false), Err(NFS4ERR_STALE_STATEID));
        assert_eq!(s.downgrade(&s2, &f, OPEN4_SHARE_ACCESS_READ, 0).map(|x| x.seqid), Ok(3));
        assert_eq!(s.check_io(&Stateid { seqid: 3, ..s2 }, &f, true), Err(NFS4ERR_OPENMODE));
        assert_eq!(s.close(&Stateid { seqid: 3, ..s2 }, &f), Ok(()));
        assert_eq!(s.opens(), 0);
    }
}
