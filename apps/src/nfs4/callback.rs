//! The backchannel of NFSv4.1 sessions (RFC 8881 s2.10.3.1, s20): which
//! connection carries a session's callbacks, what waits to be sent on it,
//! and what its Replies say.
//!
//! A session's backchannel is bound to one connection, named by the core
//! whose service owns it and the engine's [`ConnId`] there ([`ConnKey`]):
//! by CREATE_SESSION with CREATE_SESSION4_FLAG_CONN_BACK_CHAN, or by
//! BIND_CONN_TO_SESSION (CDFC4_BACK, CDFC4_BACK_OR_BOTH, CDFC4_FORE_OR_BOTH).
//! Binding queues a CB_NULL probe; its Reply makes the backchannel *up*
//! (delegations are granted only then). A failed probe or a malformed
//! Reply makes it *faulty*; the transport's
//! [`backward_channel`](dataplane::service::Service::backward_channel)`(None)`
//! unbinds it. Either way the session's SEQUENCE carries
//! SEQ4_STATUS_CB_PATH_DOWN and SEQ4_STATUS_CB_PATH_DOWN_SESSION (through an
//! atomic word the session shares, so SEQUENCE takes no lock here) until
//! the client binds a connection again and the new probe answers.
//!
//! One callback is in flight per session (we grant one backchannel slot,
//! `ca_maxrequests` 1); others wait in the session's queue, at most
//! [`MAX_QUEUED`]. A callback in flight when its connection goes is put
//! back at the front with its CB_SEQUENCE sequence id, so the client sees
//! a retry after it rebinds (RFC 8881 s2.10.6.2).
//!
//! Each core has an atomic count of the sessions with a callback ready on
//! one of its connections, so the engine's per-turn
//! [`has_backward_calls`](dataplane::service::Service::has_backward_calls)
//! is one load; the tables behind a mutex are taken only when there is
//! something to send, on a Reply, and when a binding changes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dataplane::service::BackwardChannel;
use dataplane::ConnId;
use proto::nfs4::cb::{self, CbCompoundRes, CbOp, CbSec, CbSequence};
use proto::nfs4::*;
use proto::rpc::{self, AuthSysParms};

/// Per-core ready counts kept (a core number is taken modulo this).
pub const CORE_QUEUES: usize = 64;
/// Callbacks waiting per session; more are dropped (a recall dropped is
/// revoked after the lease, a lock notification is only a hint).
pub const MAX_QUEUED: usize = 64;
/// Backchannel slots we use (`ca_maxrequests` granted).
pub const CB_SLOTS: u32 = 1;
/// Operations per CB_COMPOUND we send (CB_SEQUENCE and one more).
pub const CB_OPS: u32 = 2;

/// A connection as callbacks name it: the core whose service owns it, and
/// its id in that core's engine (or TCP server).
pub type ConnKey = (usize, ConnId);

/// `callback_sec_parms4` kept from CREATE_SESSION or BACKCHANNEL_CTL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedSec {
    None,
    Sys {
        stamp: u32,
        machinename: Vec<u8>,
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
    },
}

impl OwnedSec {
    /// The client's choice, or AUTH_NONE when it offered nothing we speak.
    pub fn of(s: Option<CbSec<'_>>) -> OwnedSec {
        match s {
            Some(CbSec::Sys(p)) => OwnedSec::Sys {
                stamp: p.stamp,
                machinename: p.machinename.to_vec(),
                uid: p.uid,
                gid: p.gid,
                gids: p.gids().to_vec(),
            },
            _ => OwnedSec::None,
        }
    }

    fn wire(&self) -> CbSec<'_> {
        match self {
            OwnedSec::None => CbSec::None,
            OwnedSec::Sys {
                stamp,
                machinename,
                uid,
                gid,
                gids,
            } => match AuthSysParms::new(*stamp, machinename, *uid, *gid, gids) {
                Ok(p) => CbSec::Sys(p),
                // Bounded when decoded; never reached.
                Err(_) => CbSec::None,
            },
        }
    }
}

/// A callback to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cb {
    /// CB_NULL: the probe of a new binding.
    Null,
    /// CB_RECALL of a delegation (RFC 8881 s20.2).
    Recall { stateid: Stateid, fh: Vec<u8> },
    /// CB_NOTIFY_LOCK (s20.11): a lock the owner waited for may be free.
    NotifyLock { fh: Vec<u8>, clientid: u64, owner: Vec<u8> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// Bound, the CB_NULL not answered yet.
    Unknown,
    Up,
    /// The probe failed or a Reply was malformed: nothing is sent until
    /// the client binds again.
    Faulty,
}

/// A queued callback and, for a retry, the CB_SEQUENCE sequence id it had.
type Queued = (Cb, Option<u32>);

#[derive(Debug)]
struct Chan {
    session: SessionId,
    client: u64,
    /// The minor version the session was created with (CB_COMPOUND's).
    minor: u32,
    program: u32,
    sec: OwnedSec,
    /// The client asked for a backchannel (so its absence is reported).
    wanted: bool,
    conn: Option<ConnKey>,
    probe: Probe,
    /// The last CB_SEQUENCE sequence id used on slot 0.
    seq: u32,
    /// The largest Call the client takes (`ca_maxrequestsize`).
    max_call_bytes: u32,
    queue: VecDeque<Queued>,
    in_flight: Option<(u32, Queued)>,
    /// The call in flight is a retry (sent before, on a lost connection).
    retrying: bool,
    /// SEQUENCE's session flags (shared with the session).
    flags: Arc<AtomicU32>,
}

impl Chan {
    fn live(&self, live: &[(ConnKey, BackwardChannel)]) -> Option<ConnKey> {
        self.conn.filter(|k| live.iter().any(|(l, _)| l == k))
    }

    fn ready(&self, live: &[(ConnKey, BackwardChannel)]) -> Option<ConnKey> {
        if self.in_flight.is_some() || self.queue.is_empty() || self.probe == Probe::Faulty {
            return None;
        }
        self.live(live)
    }

    /// Whether the session should hear that its backchannel is down.
    fn down(&self) -> bool {
        self.wanted && (self.conn.is_none() || self.probe == Probe::Faulty)
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Connections the transport says can carry backward Calls.
    live: Vec<(ConnKey, BackwardChannel)>,
    chans: Vec<Chan>,
    xid: u32,
}

/// Counters of the backchannel (all sessions).
#[derive(Debug, Default)]
pub struct CbStats {
    /// Backward Calls handed to the transport.
    pub calls: AtomicU64,
    /// Replies matched to a Call.
    pub replies: AtomicU64,
    /// Replies matching no Call in flight (late, duplicated, forged).
    pub unmatched: AtomicU64,
    /// Replies that failed or did not decode (the backchannel then faulty).
    pub faults: AtomicU64,
    /// Callbacks dropped: queue full, or no backchannel at all.
    pub dropped: AtomicU64,
    /// CB_RECALLs handed to the transport (retries included).
    pub recalls_sent: AtomicU64,
    /// CB_RECALL Replies that said NFS4_OK.
    pub recalls_answered: AtomicU64,
}

impl CbStats {
    /// The counters as JSON (`rpcrdma-target stats`).
    pub fn json(&self) -> serde_json::Value {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "calls": l(&self.calls),
            "replies": l(&self.replies),
            "unmatched": l(&self.unmatched),
            "faults": l(&self.faults),
            "dropped": l(&self.dropped),
            "recalls_sent": l(&self.recalls_sent),
            "recalls_answered": l(&self.recalls_answered),
        })
    }
}

/// The server's backchannels.
#[derive(Debug)]
pub struct Callbacks {
    ready: [AtomicU32; CORE_QUEUES],
    inner: Mutex<Inner>,
    pub stats: CbStats,
}

impl Callbacks {
    pub fn new(xid_seed: u32) -> Callbacks {
        Callbacks {
            ready: std::array::from_fn(|_| AtomicU32::new(0)),
            inner: Mutex::new(Inner {
                xid: xid_seed,
                ..Inner::default()
            }),
            stats: CbStats::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves the tables consistent between statements
        // that can panic (none on peer input).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Recount the per-core ready sessions and every session's flags
    /// (after any change; the tables are small and changes rare).
    fn refresh(&self, t: &Inner) {
        let mut n = [0u32; CORE_QUEUES];
        for c in &t.chans {
            if let Some((core, _)) = c.ready(&t.live) {
                n[core % CORE_QUEUES] += 1;
            }
            let f = if c.down() {
                SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION
            } else {
                0
            };
            c.flags.store(f, Ordering::Relaxed);
        }
        for (a, v) in self.ready.iter().zip(n) {
            a.store(v, Ordering::Release);
        }
    }

    /// A new session: its callback program and security, and the
    /// connection that created it when it asked for the backchannel there
    /// (a CB_NULL probe is queued).
    #[allow(clippy::too_many_arguments)]
    pub fn register(
        &self,
        session: SessionId,
        client: u64,
        minor: u32,
        program: u32,
        sec: OwnedSec,
        max_call_bytes: u32,
        conn: Option<ConnKey>,
        flags: Arc<AtomicU32>,
    ) {
        let mut t = self.lock();
        t.chans.retain(|c| c.session != session);
        let mut queue = VecDeque::new();
        if conn.is_some() {
            queue.push_back((Cb::Null, None));
        }
        t.chans.push(Chan {
            session,
            client,
            minor,
            program,
            sec,
            wanted: conn.is_some(),
            conn,
            probe: Probe::Unknown,
            seq: 0,
            max_call_bytes,
            queue,
            in_flight: None,
            retrying: false,
            flags,
        });
        self.refresh(&t);
    }

    /// BACKCHANNEL_CTL (RFC 8881 s18.33): a new program and security for
    /// later callbacks. False: no such session.
    pub fn set_program(&self, session: &SessionId, program: u32, sec: OwnedSec) -> bool {
        let mut t = self.lock();
        let Some(c) = t.chans.iter_mut().find(|c| &c.session == session) else {
            return false;
        };
        c.program = program;
        c.sec = sec;
        true
    }

    /// Bind `conn` as the session's backchannel (BIND_CONN_TO_SESSION):
    /// a new probe goes first, then whatever waited (a callback that was
    /// in flight on the old connection again, as a retry). False: no such
    /// session.
    pub fn bind(&self, session: &SessionId, conn: ConnKey) -> bool {
        let mut t = self.lock();
        let Some(c) = t.chans.iter_mut().find(|c| &c.session == session) else {
            return false;
        };
        if let Some((_, q)) = c.in_flight.take() {
            if q.0 != Cb::Null {
                c.queue.push_front(q);
            }
        }
        c.queue.retain(|q| q.0 != Cb::Null);
        c.queue.push_front((Cb::Null, None));
        c.conn = Some(conn);
        c.wanted = true;
        c.probe = Probe::Unknown;
        self.refresh(&t);
        true
    }

    /// The session went (DESTROY_SESSION, or its client did).
    pub fn forget_session(&self, session: &SessionId) {
        let mut t = self.lock();
        t.chans.retain(|c| &c.session != session);
        self.refresh(&t);
    }

    /// Every session of `client` went.
    pub fn forget_client(&self, client: u64) {
        let mut t = self.lock();
        t.chans.retain(|c| c.client != client);
        self.refresh(&t);
    }

    /// Whether the session's backchannel is up (bound to a live
    /// connection whose probe answered).
    pub fn usable(&self, session: &SessionId) -> bool {
        let t = self.lock();
        t.chans
            .iter()
            .any(|c| &c.session == session && c.probe == Probe::Up && c.live(&t.live).is_some())
    }

    /// Queue `cb` for `client`: on `session` when that one has a
    /// backchannel, else on another of the client's that has. False when
    /// none has or the queue is full (the callback is dropped).
    pub fn queue(&self, client: u64, session: &SessionId, cb: Cb) -> bool {
        let mut t = self.lock();
        let at = t
            .chans
            .iter()
            .position(|c| &c.session == session && c.wanted)
            .or_else(|| t.chans.iter().position(|c| c.client == client && c.wanted));
        let ok = match at {
            Some(i) if t.chans[i].queue.len() < MAX_QUEUED => {
                t.chans[i].queue.push_back((cb, None));
                true
            }
            _ => false,
        };
        if !ok {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.refresh(&t);
        ok
    }

    /// Whether a callback is ready on a connection of `core`: one atomic
    /// load.
    pub fn has_calls(&self, core: usize) -> bool {
        self.ready[core % CORE_QUEUES].load(Ordering::Acquire) > 0
    }

    /// The next callback for `conn`, written whole into `buf`; `None` when
    /// none waits there. A callback that does not fit `buf` or the
    /// client's `ca_maxrequestsize` is dropped (counted).
    pub fn poll(&self, conn: ConnKey, buf: &mut [u8]) -> Option<usize> {
        let mut t = self.lock();
        let out = loop {
            let Inner { live, chans, xid } = &mut *t;
            let Some(c) = chans.iter_mut().find(|c| c.ready(live) == Some(conn)) else {
                break None;
            };
            let Some((cb, retry_seq)) = c.queue.pop_front() else {
                break None;
            };
            *xid = xid.wrapping_add(1);
            let x = *xid;
            let room = buf.len().min(c.max_call_bytes as usize);
            let sec = c.sec.wire();
            let mut seq = CbSequence {
                sessionid: c.session,
                sequenceid: 0,
                slotid: 0,
                highest_slotid: 0,
                cachethis: false,
            };
            let used = match &cb {
                Cb::Null => None,
                _ => {
                    let s = retry_seq.unwrap_or(c.seq.wrapping_add(1));
                    seq.sequenceid = s;
                    Some(s)
                }
            };
            let n = match &cb {
                Cb::Null => cb::encode_cb_null(x, c.program, &sec, &mut buf[..room]),
                Cb::Recall { stateid, fh } => cb::encode_cb_compound(
                    x,
                    c.program,
                    c.minor,
                    &sec,
                    &seq,
                    &CbOp::Recall {
                        stateid: *stateid,
                        truncate: false,
                        fh,
                    },
                    &mut buf[..room],
                ),
                Cb::NotifyLock { fh, clientid, owner } => cb::encode_cb_compound(
                    x,
                    c.program,
                    c.minor,
                    &sec,
                    &seq,
                    &CbOp::NotifyLock {
                        fh,
                        clientid: *clientid,
                        owner,
                    },
                    &mut buf[..room],
                ),
            };
            match n {
                Ok(n) => {
                    if let Some(s) = used {
                        c.seq = s;
                    }
                    c.retrying = retry_seq.is_some();
                    if matches!(cb, Cb::Recall { .. }) {
                        self.stats.recalls_sent.fetch_add(1, Ordering::Relaxed);
                    }
                    c.in_flight = Some((x, (cb, used)));
                    self.stats.calls.fetch_add(1, Ordering::Relaxed);
                    break Some(n);
                }
                Err(_) => {
                    // Does not fit: not sent (RFC 8167 s4 has no chunks
                    // for backward Calls); a CB_NULL that cannot be sent
                    // leaves the backchannel faulty.
                    if cb == Cb::Null {
                        c.probe = Probe::Faulty;
                    }
                    self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        self.refresh(&t);
        out
    }

    /// The Reply `msg` to a backward Call arrived on `conn` (peer input).
    pub fn reply(&self, conn: ConnKey, msg: &[u8]) {
        let Ok((xid, mtype)) = rpc::peek_msg(msg) else {
            self.stats.unmatched.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut t = self.lock();
        let found = t
            .chans
            .iter_mut()
            .find(|c| c.conn == Some(conn) && c.in_flight.as_ref().is_some_and(|f| f.0 == xid));
        let Some(c) = found.filter(|_| mtype == rpc::REPLY) else {
            self.stats.unmatched.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some((_, (cb, used))) = c.in_flight.take() else {
            return;
        };
        let retry = c.retrying;
        c.retrying = false;
        self.stats.replies.fetch_add(1, Ordering::Relaxed);
        let ok = match rpc::decode_reply(msg) {
            Ok((h, off)) if h.is_success() => match cb {
                Cb::Null => off == msg.len(),
                _ => match CbCompoundRes::decode(&msg[off..]) {
                    Ok(r) => match r.sequence {
                        Some(Ok(s)) => {
                            let ok = s.sessionid == c.session && Some(s.sequenceid) == used;
                            if ok && r.status == NFS4_OK && matches!(cb, Cb::Recall { .. }) {
                                self.stats.recalls_answered.fetch_add(1, Ordering::Relaxed);
                            }
                            ok
                        }
                        // A retry (after a rebind) of a call the client
                        // had run: it did what was asked (RFC 8881
                        // s2.10.6.1.3).
                        Some(Err(NFS4ERR_RETRY_UNCACHED_REP)) => retry,
                        // The client is busy: the same call again later.
                        Some(Err(NFS4ERR_DELAY)) => {
                            c.queue.push_front((cb.clone(), used));
                            true
                        }
                        _ => false,
                    },
                    Err(_) => false,
                },
            },
            _ => false,
        };
        if !ok {
            c.probe = Probe::Faulty;
            self.stats.faults.fetch_add(1, Ordering::Relaxed);
        } else if cb == Cb::Null {
            c.probe = Probe::Up;
        }
        self.refresh(&t);
    }

    /// The transport's word on `conn` ([`dataplane::service::Service::backward_channel`]):
    /// it can carry backward Calls with `chan`'s limits, or no longer can;
    /// sessions bound to it are then unbound (CB_PATH_DOWN) and a callback
    /// in flight there waits for the next binding.
    pub fn transport(&self, conn: ConnKey, chan: Option<BackwardChannel>) {
        let mut t = self.lock();
        t.live.retain(|(k, _)| *k != conn);
        match chan {
            Some(ch) => t.live.push((conn, ch)),
            None => {
                for c in t.chans.iter_mut().filter(|c| c.conn == Some(conn)) {
                    if let Some((_, q)) = c.in_flight.take() {
                        if q.0 != Cb::Null {
                            c.queue.push_front(q);
                        }
                    }
                    c.conn = None;
                }
            }
        }
        self.refresh(&t);
    }

    /// Callbacks waiting or in flight for `session` (tests, statistics).
    pub fn pending(&self, session: &SessionId) -> usize {
        let t = self.lock();
        t.chans
            .iter()
            .filter(|c| &c.session == session)
            .map(|c| c.queue.len() + usize::from(c.in_flight.is_some()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CH: BackwardChannel = BackwardChannel {
        credits: 1,
        max_call_bytes: 1024,
        max_reply_bytes: 1024,
    };

    fn sid(n: u8) -> SessionId {
        [n; NFS4_SESSIONID_SIZE]
    }

    /// Each core counts only the sessions ready on its own connections; a
    /// callback in flight, or one on a connection the transport has not
    /// announced, is not ready; a Call that does not fit is not sent.
    #[test]
    fn ready_counts_are_per_core() {
        let cb = Callbacks::new(7);
        let (c0, c1) = ((0, ConnId(5)), (1, ConnId(5)));
        let flags = || Arc::new(AtomicU32::new(0));
        cb.register(sid(1), 1, 1, 9, OwnedSec::None, 4096, Some(c0), flags());
        cb.register(sid(2), 2, 2, 9, OwnedSec::None, 4096, Some(c1), flags());
        assert!(!cb.has_calls(0) && !cb.has_calls(1), "not announced yet");
        cb.transport(c0, Some(CH));
        cb.transport(c1, Some(CH));
        assert!(cb.has_calls(0) && cb.has_calls(1));
        let mut buf = [0u8; 512];
        assert_eq!(cb.poll((0, ConnId(6)), &mut buf), None, "another connection");
        let n = cb.poll(c0, &mut buf).expect("CB_NULL on core 0");
        assert_eq!(
            &buf[12..24],
            &[0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0],
            "program 9, version 1, CB_NULL"
        );
        assert!(n > 0 && !cb.has_calls(0) && cb.has_calls(1), "in flight on core 0");
        assert_eq!(cb.poll(c0, &mut buf), None, "one in flight per session");
        // Too small a buffer: not sent, the probe fails, the session is down.
        assert_eq!(cb.poll(c1, &mut buf[..16]), None);
        assert!(!cb.has_calls(1));
        assert_eq!(cb.stats.dropped.load(Ordering::Relaxed), 1);
        assert!(!cb.usable(&sid(2)));
        // The transport withdraws core 0's connection: nothing ready anywhere.
        cb.transport(c0, None);
        assert!(!cb.has_calls(0));
        assert_eq!(cb.pending(&sid(1)), 0, "a probe in flight is not kept");
        // Forgetting a client's sessions empties its queues.
        assert!(cb.bind(&sid(2), c1));
        assert!(cb.has_calls(1));
        cb.forget_client(2);
        assert!(!cb.has_calls(1));
        assert!(!cb.bind(&sid(2), c1), "no such session any more");
    }
}
