//! NFSv4.1 server state shared by every core and TCP connection: client
//! records (EXCHANGE_ID), sessions and their slot tables with the reply
//! cache (CREATE_SESSION, SEQUENCE), open stateids (OPEN, CLOSE), and the
//! tables of byte-range locks ([`super::lock`]) and the grace period
//! ([`super::grace`]).
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
//! client's OPEN or LOCK conflicts with one of its opens or locks, or the
//! client table is full; then its record, sessions, opens and locks go.
//!
//! One mutex guards the clients, opens and locks; the sessions sit in
//! 16 shards of their own (`SESSION_SHARDS`), so SEQUENCE (which renews the
//! lease through an atomic stamp) and its reply caching never wait for
//! OPEN or LOCK of another session. Lock order: the tables, then a shard.
//! Both are held for look-ups and a slot's reply copy only (no I/O under
//! them).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proto::nfs4::args::ChannelAttrs;
use proto::nfs4::*;

use super::callback::{Callbacks, ConnKey, OwnedSec, CB_OPS, CB_SLOTS};
use super::deleg::Deleg;
use super::grace::{Grace, Records};
use super::lock::{LockState, Waiter};

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
    /// The client's renewal stamp (shared with its record).
    renewed: Arc<AtomicU64>,
    /// SEQUENCE's status flags of this session's backchannel
    /// ([`super::callback`]) and of its client (revoked delegations).
    cb_flags: Arc<AtomicU32>,
    client_flags: Arc<AtomicU32>,
}

/// Session table shards: a session's shard is its counter word modulo
/// this, so SEQUENCE on one session never waits for another's.
const SESSION_SHARDS: usize = 16;

fn shard_of(sid: &SessionId) -> usize {
    u32::from_be_bytes([sid[8], sid[9], sid[10], sid[11]]) as usize % SESSION_SHARDS
}

#[derive(Debug)]
pub(super) struct Client {
    pub(super) id: u64,
    ownerid: Vec<u8>,
    verifier: Verifier,
    confirmed: bool,
    /// The last `csa_sequence` a CREATE_SESSION used, and its result.
    cs_seq: u32,
    cs_reply: Option<CreateSessionResult>,
    /// When a SEQUENCE last renewed the lease: milliseconds since the
    /// state began ([`V4State::stamp`]), shared with the client's sessions
    /// so SEQUENCE renews without the tables' lock.
    renewed: Arc<AtomicU64>,
    reclaim_complete: bool,
    /// SEQUENCE's status flags of the client (SEQ4_STATUS_RECALLABLE_STATE_REVOKED).
    pub(super) flags: Arc<AtomicU32>,
}

#[derive(Debug, Clone)]
pub(super) struct Open {
    pub other: [u8; NFS4_OTHER_SIZE],
    pub seqid: u32,
    pub client: u64,
    pub owner: Vec<u8>,
    pub file: FileKey,
    pub access: u32,
    pub deny: u32,
}

/// What a stateid names.
#[derive(Debug, Clone, Copy)]
enum Found {
    Open(usize),
    Lock(usize),
    Deleg(usize),
}

/// RFC 8881 s8.2.2: seqid 0 means the current one; an older one is
/// NFS4ERR_OLD_STATEID, a newer one NFS4ERR_BAD_STATEID.
fn check_seqid(sid: &Stateid, cur: u32) -> Result<(), u32> {
    if sid.seqid == 0 || sid.seqid == cur {
        Ok(())
    } else if sid.seqid < cur {
        Err(NFS4ERR_OLD_STATEID)
    } else {
        Err(NFS4ERR_BAD_STATEID)
    }
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

/// CREATE_SESSION's backchannel arguments and the connection it came on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCb {
    /// `csa_flags`.
    pub flags: u32,
    /// `csa_cb_program`.
    pub program: u32,
    /// The callback security chosen from `csa_sec_parms`.
    pub sec: OwnedSec,
    /// The connection CREATE_SESSION came on (none: a test without one).
    pub conn: Option<ConnKey>,
    /// The COMPOUND's minor version: the session's, which its CB_COMPOUNDs carry.
    pub minorversion: u32,
}

impl Default for SessionCb {
    fn default() -> Self {
        SessionCb {
            flags: 0,
            program: 0,
            sec: OwnedSec::None,
            conn: None,
            minorversion: 1,
        }
    }
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
    New {
        client: u64,
        slots: u32,
        cachethis: bool,
        /// `sr_status_flags` (RFC 8881 s18.46.3).
        status: u32,
    },
    /// A retry of the last request, whose reply (`n` bytes) was copied out.
    Replay(usize),
}

#[derive(Debug, Default)]
pub(super) struct Tables {
    pub(super) clients: Vec<Client>,
    pub opens: Vec<Open>,
    /// Lock stateids and their ranges ([`super::lock`]).
    pub locks: Vec<LockState>,
    /// The grace period after a restart ([`super::grace`]).
    pub grace: Grace,
    /// Delegations, held and revoked ([`super::deleg`]).
    pub delegs: Vec<Deleg>,
    /// Files whose delegations were recalled lately, oldest first: no new
    /// one is granted on them for a while ([`super::deleg`]), at most
    /// [`super::deleg::MAX_RECENT_RECALLS`].
    pub recent_recalls: std::collections::VecDeque<(FileKey, std::time::Instant)>,
    /// Lock owners waiting for a blocking lock ([`super::lock`]).
    pub waiters: Vec<Waiter>,
    next_client: u32,
    next_session: u32,
    next_state: u32,
}

/// The server's NFSv4 state.
#[derive(Debug)]
pub struct V4State {
    t: Mutex<Tables>,
    /// The sessions, apart from the other tables: SEQUENCE (twice per
    /// COMPOUND) takes only its session's shard. Lock order: `t` before a
    /// shard, never the other way.
    sessions: [Mutex<Vec<Session>>; SESSION_SHARDS],
    /// The origin of the renewal stamps.
    start: Instant,
    /// `start` on the coarse clock ([`coarse_ms`]), for [`Self::renew_stamp`].
    start_coarse_ms: u64,
    /// Seconds since the epoch at start-up (the pseudo directories' times).
    boot: u32,
    /// This instance's word in client ids, session ids and stateids, so
    /// none of an earlier process (or instance) is taken for one of ours:
    /// the start-up time in seconds, mixed with its nanoseconds and a
    /// counter of instances (two starts within one second differ).
    epoch: u32,
    max_slots: u32,
    max_request_bytes: u32,
    max_response_bytes: u32,
    /// The lease in milliseconds (tests shorten it).
    lease_ms: std::sync::atomic::AtomicU64,
    /// The stable client records ([`super::grace`]).
    records: Records,
    /// The sessions' backchannels ([`super::callback`]).
    pub(crate) cb: Callbacks,
    /// Whether OPEN grants delegations (`nfs4.delegations`).
    pub(super) delegations: std::sync::atomic::AtomicBool,
    /// [`super::deleg::REGRANT_AFTER_RECALL`] unless configured, in ms.
    pub(super) regrant_ms: std::sync::atomic::AtomicU64,
    /// Delegations in the table, so a change to a file looks at them only
    /// when there are some.
    pub(super) deleg_count: std::sync::atomic::AtomicUsize,
    /// Write delegations among them, so a read of a file (READ, GETATTR,
    /// an OPEN for reading) looks at them only when there are some.
    pub(super) write_deleg_count: std::sync::atomic::AtomicUsize,
    /// Delegation and recall counters ([`super::deleg_stats`]).
    pub(super) deleg_stats: super::deleg_stats::DelegStats,
    /// When the next recalled delegation is due for revocation, as a
    /// renewal stamp (`u64::MAX`: none is recalled); see
    /// [`V4State::revoke_overdue`].
    pub(super) revoke_due_ms: AtomicU64,
    /// Bumped whenever a delegation is returned, revoked or dropped, so
    /// Calls waiting for one ([`crate::nfs::delegwait`]) look again only
    /// then.
    pub(super) deleg_gen: AtomicU64,
}

/// Milliseconds of `CLOCK_MONOTONIC_COARSE` (the clock `Instant` reads, at
/// the kernel's tick): served from the vDSO's copy of the time whatever the
/// clock source.
fn coarse_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

impl V4State {
    /// State for a server whose connections hold at most `credits` Calls and
    /// whose READ/WRITE limit is `max_io_bytes`.
    pub fn new(credits: u32, max_io_bytes: u32) -> V4State {
        static INSTANCES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let boot = (now.as_secs() as u32).max(1);
        let n = INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let epoch = boot ^ (now.subsec_nanos() >> 8).rotate_left(20) ^ n.wrapping_mul(0x9e37_79b9);
        V4State {
            sessions: std::array::from_fn(|_| Mutex::new(Vec::new())),
            start: Instant::now(),
            start_coarse_ms: coarse_ms(),
            epoch,
            t: Mutex::new(Tables::default()),
            boot,
            max_slots: credits.clamp(1, MAX_SLOTS),
            // A WRITE's data and a COMPOUND's other operations.
            max_request_bytes: max_io_bytes + 8192,
            max_response_bytes: max_io_bytes + 8192,
            lease_ms: std::sync::atomic::AtomicU64::new(1000 * u64::from(LEASE_SECS)),
            records: Records::none(),
            cb: Callbacks::new(epoch),
            delegations: std::sync::atomic::AtomicBool::new(true),
            regrant_ms: std::sync::atomic::AtomicU64::new(super::deleg::REGRANT_AFTER_RECALL.as_millis() as u64),
            deleg_count: std::sync::atomic::AtomicUsize::new(0),
            write_deleg_count: std::sync::atomic::AtomicUsize::new(0),
            deleg_stats: Default::default(),
            revoke_due_ms: AtomicU64::new(u64::MAX),
            deleg_gen: AtomicU64::new(0),
        }
    }

    /// The same keeping stable client records in `records`: when they name
    /// clients, a grace period of one lease time begins now.
    pub fn with_records(mut self, records: Records) -> V4State {
        let known = records.known();
        self.t.get_mut().unwrap_or_else(|e| e.into_inner()).grace = Grace::new(known, Instant::now() + self.lease());
        self.records = records;
        self
    }

    /// The stable client records.
    pub fn records(&self) -> &Records {
        &self.records
    }

    /// The grace rules for an OPEN or LOCK of `client` (RFC 8881 s8.4.2):
    /// a reclaim outside the grace period, after the client's
    /// RECLAIM_COMPLETE, or by a client the records do not name is
    /// NFS4ERR_NO_GRACE; anything else during it is NFS4ERR_GRACE.
    pub fn check_grace(&self, client: u64, reclaim: bool) -> Result<(), u32> {
        let mut t = self.lock();
        let active = self.grace_active(&mut t);
        if !reclaim {
            return if active { Err(NFS4ERR_GRACE) } else { Ok(()) };
        }
        if !active {
            return Err(NFS4ERR_NO_GRACE);
        }
        let c = t
            .clients
            .iter()
            .find(|c| c.id == client)
            .ok_or(NFS4ERR_STALE_CLIENTID)?;
        if c.reclaim_complete || !t.grace.knows(&c.ownerid) {
            return Err(NFS4ERR_NO_GRACE);
        }
        Ok(())
    }

    /// Before `client` gets state on backend `backend`: its stable record
    /// there is durable, or NFS4ERR_DELAY while the record is written (off
    /// the core; the client's retry finds it done).
    pub fn record_open(&self, client: u64, backend: usize) -> Result<(), u32> {
        if !self.records.keeps(backend) {
            return Ok(());
        }
        let owner = {
            let t = self.lock();
            let c = t
                .clients
                .iter()
                .find(|c| c.id == client)
                .ok_or(NFS4ERR_STALE_CLIENTID)?;
            c.ownerid.clone()
        };
        if self.records.ensure(backend, &owner) {
            Ok(())
        } else {
            Err(NFS4ERR_DELAY)
        }
    }

    /// The same with a lease of `lease` (tests of expiry).
    pub fn with_lease(self, lease: Duration) -> V4State {
        self.set_lease(lease);
        self
    }

    /// Shorten (or lengthen) the lease: tests of expiry through a running
    /// service. The `lease_time` attribute still says [`LEASE_SECS`].
    #[doc(hidden)]
    pub fn set_lease(&self, lease: Duration) {
        self.lease_ms
            .store(lease.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms.load(std::sync::atomic::Ordering::Relaxed))
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

    fn shard(&self, sid: &SessionId) -> MutexGuard<'_, Vec<Session>> {
        self.sessions[shard_of(sid)].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn shards(&self) -> impl Iterator<Item = MutexGuard<'_, Vec<Session>>> {
        self.sessions
            .iter()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Now as a renewal stamp.
    pub(super) fn stamp(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// [`Self::stamp`] on the coarse clock: what SEQUENCE renews a lease
    /// with on every COMPOUND. A lease is seconds long, and the coarse clock
    /// is behind by at most a tick (a few milliseconds) but never reads the
    /// hardware clock, which where the clock source has no vDSO path (hpet
    /// in a TCG guest) is a system call per COMPOUND (issue 22).
    pub(super) fn renew_stamp(&self) -> u64 {
        coarse_ms().saturating_sub(self.start_coarse_ms)
    }

    /// `at` as a renewal stamp.
    pub(super) fn stamp_of(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_millis() as u64
    }

    /// Whether the stamp `renewed` is older than the lease at `now`.
    fn lapsed(&self, renewed: &AtomicU64, now: Instant) -> bool {
        let at = self.start + Duration::from_millis(renewed.load(Ordering::Relaxed));
        now.saturating_duration_since(at) > self.lease()
    }

    /// The tables, for the byte-range locks ([`super::lock`]).
    pub(super) fn lock_tables(&self) -> MutexGuard<'_, Tables> {
        self.lock()
    }

    /// Whether `client`'s lease has expired (or the client is gone).
    pub(super) fn expired(&self, t: &Tables, client: u64, now: Instant) -> bool {
        t.clients
            .iter()
            .find(|c| c.id == client)
            .is_none_or(|c| self.lapsed(&c.renewed, now))
    }

    /// Forget `client`, whose lease expired, with its sessions, opens and
    /// locks, and take it out of the stable records: state another client
    /// may now get must not be reclaimed by it after a restart (RFC 8881
    /// s8.4.3).
    pub(super) fn purge_expired(&self, t: &mut Tables, client: u64) {
        if let Some(c) = t.clients.iter().find(|c| c.id == client) {
            self.records.forget(&c.ownerid);
        }
        self.purge_client(t, client);
    }

    /// Whether the grace period runs; when it has just ended, the clients
    /// the records named that did not come back leave them.
    pub(super) fn grace_active(&self, t: &mut Tables) -> bool {
        let was = t.grace.running();
        let active = t.grace.active(Instant::now());
        if was && !active {
            for o in t.grace.unreclaimed() {
                if !t.clients.iter().any(|c| c.ownerid == o) {
                    self.records.forget(&o);
                }
            }
        }
        active
    }

    /// A new stateid `other`: the boot time, a counter shared by open and
    /// lock stateids, the client's low word.
    pub(super) fn new_other(&self, t: &mut Tables, client: u64) -> [u8; NFS4_OTHER_SIZE] {
        t.next_state = t.next_state.wrapping_add(1);
        let mut other = [0u8; NFS4_OTHER_SIZE];
        other[..4].copy_from_slice(&self.epoch.to_be_bytes());
        other[4..8].copy_from_slice(&t.next_state.to_be_bytes());
        other[8..].copy_from_slice(&(client as u32).to_be_bytes());
        other
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
                c.renewed.store(self.stamp(), Ordering::Relaxed);
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
        let id = (u64::from(self.epoch) << 32) | u64::from(t.next_client);
        t.clients.push(Client {
            id,
            ownerid: ownerid.to_vec(),
            verifier,
            confirmed: false,
            cs_seq: 0,
            cs_reply: None,
            renewed: Arc::new(AtomicU64::new(self.stamp())),
            reclaim_complete: false,
            flags: Arc::new(AtomicU32::new(0)),
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
        let Some(i) = t.clients.iter().position(|c| self.lapsed(&c.renewed, now)) else {
            return false;
        };
        let id = t.clients[i].id;
        self.purge_expired(t, id);
        true
    }

    fn purge_client(&self, t: &mut Tables, id: u64) {
        t.clients.retain(|c| c.id != id);
        for mut shard in self.shards() {
            shard.retain(|s| s.client != id);
        }
        t.opens.retain(|o| o.client != id);
        // Its locks go: owners of other clients waiting on them hear of it.
        let files: Vec<FileKey> = t
            .locks
            .iter()
            .filter(|l| l.client == id && !l.ranges.is_empty())
            .map(|l| l.file)
            .collect();
        t.locks.retain(|l| l.client != id);
        t.waiters.retain(|w| w.client != id);
        for f in files {
            self.notify_waiters(t, &f);
        }
        self.drop_client_delegs(t, id);
        self.cb.forget_client(id);
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
        self.create_session_cb(clientid, sequence, fore, back, &SessionCb::default())
    }

    /// CREATE_SESSION with its backchannel arguments (RFC 8881 s18.36.3):
    /// with CREATE_SESSION4_FLAG_CONN_BACK_CHAN the creating connection
    /// becomes the backchannel (the flag is returned) when the client's
    /// back channel attributes allow our CB_COMPOUNDs (two operations, one
    /// slot), and a CB_NULL probe is queued.
    pub fn create_session_cb(
        &self,
        clientid: u64,
        sequence: u32,
        fore: &ChannelAttrs,
        back: &ChannelAttrs,
        cb: &SessionCb,
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
        if self.shards().map(|s| s.len()).sum::<usize>() >= MAX_SESSIONS {
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
        sid[12..].copy_from_slice(&self.epoch.to_be_bytes());
        let back_ok = back.maxrequests >= 1 && back.maxoperations >= CB_OPS && back.maxrequestsize >= 512;
        let bind = (cb.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 && back_ok)
            .then_some(cb.conn)
            .flatten();
        let res = CreateSessionResult {
            sessionid: sid,
            sequence,
            flags: if bind.is_some() {
                CREATE_SESSION4_FLAG_CONN_BACK_CHAN
            } else {
                0
            },
            back: ChannelAttrs {
                headerpadsize: 0,
                maxrequestsize: back.maxrequestsize,
                maxresponsesize: back.maxresponsesize,
                // We never ask the client to cache a callback's reply.
                maxresponsesize_cached: 0,
                maxoperations: back.maxoperations.min(CB_OPS),
                maxrequests: back.maxrequests.clamp(1, CB_SLOTS),
                rdma_ird: None,
            },
            fore: granted,
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
            self.purge_client(&mut t, id);
        }
        let ci = t.clients.iter().position(|c| c.id == clientid).unwrap_or(0);
        let c = &mut t.clients[ci];
        c.ownerid = owner;
        c.confirmed = true;
        c.cs_seq = sequence;
        c.cs_reply = Some(res);
        c.renewed.store(self.stamp(), Ordering::Relaxed);
        let renewed = c.renewed.clone();
        let client_flags = c.flags.clone();
        let cb_flags = Arc::new(AtomicU32::new(0));
        self.cb.register(
            sid,
            clientid,
            cb.minorversion,
            cb.program,
            cb.sec.clone(),
            back.maxrequestsize,
            bind,
            cb_flags.clone(),
        );
        let slots = (0..slots)
            .map(|_| Slot {
                seqid: 0,
                in_use: false,
                cached: Cached::Nothing,
                buf: vec![0u8; cached as usize].into_boxed_slice(),
            })
            .collect();
        self.shard(&sid).push(Session {
            id: sid,
            client: clientid,
            slots,
            fore: granted,
            renewed,
            cb_flags,
            client_flags,
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
        let mut shard = self.shard(sid);
        let Some(s) = shard.iter_mut().find(|s| &s.id == sid) else {
            return Err(NFS4ERR_BADSESSION);
        };
        let renewed = s.renewed.clone();
        let client = s.client;
        let status = s.cb_flags.load(Ordering::Relaxed) | s.client_flags.load(Ordering::Relaxed);
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
                status,
            }
        } else {
            return Err(NFS4ERR_SEQ_MISORDERED);
        };
        renewed.fetch_max(self.renew_stamp(), Ordering::Relaxed);
        Ok(out)
    }

    /// The request on a slot is answered: keep `reply` (the COMPOUND4res
    /// bytes) for a retry when `cache` and it fits, else remember it was not
    /// kept.
    pub fn sequence_done(&self, sid: &SessionId, slotid: u32, reply: Option<&[u8]>) {
        let mut shard = self.shard(sid);
        let Some(slot) = shard
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
        self.shard(sid).iter().find(|s| &s.id == sid).map(|s| s.fore)
    }

    /// DESTROY_SESSION (RFC 8881 s18.37). `own_slot`: the slot this
    /// COMPOUND's SEQUENCE holds when it runs in the same session.
    pub fn destroy_session(&self, sid: &SessionId, own_slot: Option<u32>) -> Result<(), u32> {
        let mut shard = self.shard(sid);
        let Some(i) = shard.iter().position(|s| &s.id == sid) else {
            return Err(NFS4ERR_BADSESSION);
        };
        let busy = shard[i]
            .slots
            .iter()
            .enumerate()
            .any(|(k, s)| s.in_use && own_slot != Some(k as u32));
        if busy {
            return Err(NFS4ERR_DELAY);
        }
        shard.remove(i);
        drop(shard);
        self.cb.forget_session(sid);
        Ok(())
    }

    /// Whether the session exists (BIND_CONN_TO_SESSION).
    pub fn has_session(&self, sid: &SessionId) -> bool {
        self.shard(sid).iter().any(|s| &s.id == sid)
    }

    /// The sessions' backchannels (statistics, tests).
    pub fn callbacks(&self) -> &Callbacks {
        &self.cb
    }

    /// The client of a session.
    pub fn session_client(&self, sid: &SessionId) -> Option<u64> {
        self.shard(sid).iter().find(|s| &s.id == sid).map(|s| s.client)
    }

    /// DESTROY_CLIENTID (RFC 8881 s18.50).
    pub fn destroy_clientid(&self, id: u64) -> Result<(), u32> {
        let mut t = self.lock();
        if !t.clients.iter().any(|c| c.id == id) {
            return Err(NFS4ERR_STALE_CLIENTID);
        }
        if self.shards().any(|s| s.iter().any(|s| s.client == id)) {
            return Err(NFS4ERR_CLIENTID_BUSY);
        }
        let owner = t.clients.iter().find(|c| c.id == id).map(|c| c.ownerid.clone());
        self.purge_client(&mut t, id);
        drop(t);
        if let Some(o) = owner {
            self.records.forget(&o);
        }
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
        let owner = c.ownerid.clone();
        t.grace.complete(&owner);
        Ok(())
    }

    /// OPEN's share reservation (RFC 8881 s9.7): a new open stateid, or the
    /// owner's open of the file upgraded (its seqid bumped). A conflict with
    /// another owner's access or deny is NFS4ERR_SHARE_DENIED, unless the
    /// other owner's client is a courtesy client, whose state then goes.
    pub fn open(&self, client: u64, owner: &[u8], file: FileKey, access: u32, deny: u32) -> Result<Stateid, u32> {
        let mut t = self.lock();
        let now = Instant::now();
        // Another client's delegation the open conflicts with is recalled
        // first (RFC 8881 s10.4.1): any delegation for an open for writing
        // (or denying reads), a write delegation for any open; and
        // NFS4ERR_DELAY until it is returned.
        let kind = if access & OPEN4_SHARE_ACCESS_WRITE != 0 || deny & OPEN4_SHARE_ACCESS_READ != 0 {
            super::deleg::Conflict::Change
        } else {
            super::deleg::Conflict::Read
        };
        self.recall_conflicts(&mut t, &file, Some(client), kind)?;
        loop {
            let conflict = t.opens.iter().find(|o| {
                o.file == file
                    && !(o.client == client && o.owner == owner)
                    && (o.deny & access != 0 || deny & o.access != 0)
            });
            let Some(o) = conflict else { break };
            let other = o.client;
            if !self.expired(&t, other, now) {
                return Err(NFS4ERR_SHARE_DENIED);
            }
            self.purge_expired(&mut t, other);
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
        let other = self.new_other(&mut t, client);
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
    pub(super) fn find_open(&self, t: &Tables, sid: &Stateid) -> Result<usize, u32> {
        let i = t.opens.iter().position(|o| o.other == sid.other);
        let Some(i) = i else { return Err(self.unknown(sid)) };
        check_seqid(sid, t.opens[i].seqid).map(|()| i)
    }

    /// Find a lock stateid, its seqid checked as [`Self::find_open`] does.
    pub(super) fn find_lock(&self, t: &Tables, sid: &Stateid) -> Result<usize, u32> {
        let i = t.locks.iter().position(|l| l.other == sid.other);
        let Some(i) = i else { return Err(self.unknown(sid)) };
        check_seqid(sid, t.locks[i].seqid).map(|()| i)
    }

    /// An open or a lock stateid.
    fn find_any(&self, t: &Tables, sid: &Stateid) -> Result<Found, u32> {
        match self.find_open(t, sid) {
            Ok(i) => Ok(Found::Open(i)),
            Err(NFS4ERR_BAD_STATEID) | Err(NFS4ERR_STALE_STATEID) if t.locks.iter().any(|l| l.other == sid.other) => {
                self.find_lock(t, sid).map(Found::Lock)
            }
            Err(NFS4ERR_BAD_STATEID) | Err(NFS4ERR_STALE_STATEID) if t.delegs.iter().any(|d| d.other == sid.other) => {
                self.find_deleg(t, sid).map(Found::Deleg)
            }
            Err(e) => Err(e),
        }
    }

    /// The status of a stateid no table holds: one of an earlier boot is
    /// stale, one of ours was freed (or never was).
    fn unknown(&self, sid: &Stateid) -> u32 {
        let boot = u32::from_be_bytes([sid.other[0], sid.other[1], sid.other[2], sid.other[3]]);
        if boot != self.epoch {
            NFS4ERR_STALE_STATEID
        } else {
            NFS4ERR_BAD_STATEID
        }
    }

    /// CLOSE: the open goes (RFC 8881 s18.2.4), with the lock stateids
    /// that came through it; while one of them still holds a lock, nothing
    /// goes and the answer is NFS4ERR_LOCKS_HELD.
    pub fn close(&self, sid: &Stateid, file: &FileKey) -> Result<(), u32> {
        let mut t = self.lock();
        let i = self.find_open(&t, sid)?;
        if &t.opens[i].file != file {
            return Err(NFS4ERR_BAD_STATEID);
        }
        let other = t.opens[i].other;
        if t.locks.iter().any(|l| l.open == other && !l.ranges.is_empty()) {
            return Err(NFS4ERR_LOCKS_HELD);
        }
        t.locks.retain(|l| l.open != other);
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
        let o = match self.find_any(&t, sid)? {
            Found::Deleg(i) => {
                // A read delegation's stateid reads, a write delegation's
                // reads and writes (RFC 8881 s9.1.3, s10.4).
                let d = &t.delegs[i];
                if d.revoked {
                    return Err(NFS4ERR_DELEG_REVOKED);
                }
                if &d.file != file {
                    return Err(NFS4ERR_BAD_STATEID);
                }
                return if write && !d.write {
                    Err(NFS4ERR_OPENMODE)
                } else {
                    Ok(())
                };
            }
            Found::Open(i) => &t.opens[i],
            Found::Lock(i) => {
                // A lock stateid acts with the access of its open.
                let l = &t.locks[i];
                if &l.file != file {
                    return Err(NFS4ERR_BAD_STATEID);
                }
                t.opens.iter().find(|o| o.other == l.open).ok_or(NFS4ERR_BAD_STATEID)?
            }
        };
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
        match self.find_any(&t, sid) {
            Ok(Found::Open(i)) if t.opens[i].client == client => NFS4_OK,
            Ok(Found::Lock(i)) if t.locks[i].client == client => NFS4_OK,
            Ok(Found::Deleg(i)) if t.delegs[i].client == client => {
                if t.delegs[i].revoked {
                    NFS4ERR_DELEG_REVOKED
                } else {
                    NFS4_OK
                }
            }
            Ok(_) => NFS4ERR_BAD_STATEID,
            Err(e) => e,
        }
    }

    /// FREE_STATEID (RFC 8881 s18.38): a lock stateid holding no lock goes;
    /// one still holding locks is NFS4ERR_LOCKS_HELD, and so is an open
    /// stateid (CLOSE frees it).
    pub fn free_stateid(&self, client: u64, sid: &Stateid) -> u32 {
        if sid.is_special() {
            return NFS4ERR_BAD_STATEID;
        }
        let mut t = self.lock();
        match self.find_any(&t, sid) {
            Ok(Found::Open(i)) if t.opens[i].client == client => NFS4ERR_LOCKS_HELD,
            Ok(Found::Lock(i)) if t.locks[i].client == client => {
                if !t.locks[i].ranges.is_empty() {
                    return NFS4ERR_LOCKS_HELD;
                }
                t.locks.remove(i);
                NFS4_OK
            }
            // A revoked delegation goes (RFC 8881 s8.5.1); a held one is
            // returned with DELEGRETURN.
            Ok(Found::Deleg(i)) if t.delegs[i].client == client => {
                if !t.delegs[i].revoked {
                    return NFS4ERR_LOCKS_HELD;
                }
                self.remove_deleg(&mut t, i);
                NFS4_OK
            }
            Ok(_) => NFS4ERR_BAD_STATEID,
            Err(e) => e,
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
pub(crate) mod tests {
    use super::*;
    use crate::backend::FileHandle;

    /// Fore-channel attributes with `slots` slots (also for `deleg`'s tests).
    pub(crate) fn attrs(slots: u32) -> ChannelAttrs {
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

    /// The stable records lose a client whose expired state another client
    /// took, and, when the grace period ends, the clients named in them
    /// that did not come back.
    #[test]
    fn records_forget_expired_and_unreclaimed_clients() {
        let dir = std::env::temp_dir().join(format!("nfs4-state-records-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let open_records = || Records::open(&dir, &[("u", true)]).unwrap();
        let s = V4State::new(8, 1 << 20)
            .with_lease(Duration::from_millis(40))
            .with_records(open_records());
        assert!(!s.in_grace());
        let (a, _) = client(&s, b"a");
        let (b, sid_b) = client(&s, b"b");
        assert_eq!(s.record_open(a, 0), Err(NFS4ERR_DELAY), "written first");
        assert!(s.records().wait_durable(60_000));
        assert_eq!(s.record_open(a, 0), Ok(()));
        assert_eq!(s.record_open(b, 0), Err(NFS4ERR_DELAY));
        assert!(s.records().wait_durable(60_000));
        assert_eq!(open_records().known(), vec![b"a".to_vec(), b"b".to_vec()]);
        let f = (0, FileHandle::new(&[4]).unwrap());
        s.open(a, b"oa", f, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_BOTH)
            .unwrap();
        std::thread::sleep(Duration::from_millis(80));
        let mut out = [0u8; 16];
        s.sequence(&sid_b, 1, 0, false, &mut out).unwrap();
        s.sequence_done(&sid_b, 0, None);
        s.open(b, b"ob", f, OPEN4_SHARE_ACCESS_READ, 0).unwrap();
        assert!(s.records().wait_durable(60_000));
        assert_eq!(open_records().known(), vec![b"b".to_vec()], "a's expired state went");
        drop(s);
        // A restart: "b" is named; it does not come back, "c" is a new
        // client. When the grace period ends, "b" leaves the records.
        let s = V4State::new(8, 1 << 20)
            .with_lease(Duration::from_millis(40))
            .with_records(open_records());
        assert!(s.in_grace());
        let (c, _) = client(&s, b"c");
        assert_eq!(s.check_grace(c, false), Err(NFS4ERR_GRACE));
        assert_eq!(s.check_grace(c, true), Err(NFS4ERR_NO_GRACE), "not named");
        std::thread::sleep(Duration::from_millis(60));
        assert!(!s.in_grace());
        assert_eq!(s.check_grace(c, false), Ok(()));
        assert!(s.records().wait_durable(60_000));
        assert!(open_records().known().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// SEQUENCE and its completion take only their session's shard: they
    /// run while another thread holds the tables (OPEN, LOCK, ...).
    #[test]
    fn sequence_does_not_wait_for_the_tables() {
        let s = V4State::new(8, 1 << 20);
        let (_, sid) = client(&s, b"a");
        let t = s.lock_tables();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let mut out = [0u8; 16];
                let r = s.sequence(&sid, 1, 0, false, &mut out);
                s.sequence_done(&sid, 0, None);
                let _ = tx.send(r.is_ok());
            });
            let got = rx.recv_timeout(Duration::from_secs(5));
            drop(t);
            assert_eq!(got, Ok(true), "SEQUENCE waited for the tables' lock");
        });
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
