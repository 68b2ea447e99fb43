//! An NFSv4.1 client that holds a delegation and answers its recall
//! (issue 23): one connection whose CREATE_SESSION binds the backchannel
//! (CREATE_SESSION4_FLAG_CONN_BACK_CHAN, RFC 8881 s18.36.3), a requester
//! that offers backward credits and receives backward Calls (RFC 8167),
//! and the client side of the callback program: CB_NULL answered,
//! CB_SEQUENCE + CB_RECALL answered NFS4_OK and followed by DELEGRETURN
//! (s20.2, s18.6), CB_NOTIFY_LOCK answered and otherwise ignored, any
//! other operation answered NFS4ERR_NOTSUPP. With [`Holder::ignore_recalls`]
//! it is the client that never answers: the recall is left unanswered (the
//! backward credit stays used) and the delegation is not returned, so the
//! server revokes it a lease later.
//!
//! One thread drives it ([`Holder::serve`] between its own Calls); a
//! DELEGRETURN is one set-up Call at a time on slot 0 of the holder's
//! session, while backward Calls that arrive meanwhile wait in the
//! requester.

use std::time::{Duration, Instant};

use dataplane::Fabric;
use proto::nfs4::cb::{self, CbCall, CbOp};
use proto::nfs4::*;
use proto::ulb::Nfs3Binding;

use crate::engine::{FabricMaker, Pools, Session};
use crate::nfs::Cred;
use crate::nfs4::{self, Opened, Slot};
use crate::nfs4setup::CompoundCaller;
use crate::PerfError;

/// Backward credits the holder's requester offers (RFC 8167 s4-5).
pub const HOLDER_BACKWARD_CREDITS: u32 = 2;

/// What the holder did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HolderStats {
    /// CB_NULL probes answered.
    pub probes: u64,
    /// CB_RECALLs received.
    pub recalls: u64,
    /// Delegations returned (DELEGRETURN answered NFS4_OK).
    pub returned: u64,
    /// CB_RECALLs left unanswered ([`Holder::ignore_recalls`]).
    pub ignored: u64,
    /// Other callbacks answered (CB_NOTIFY_LOCK, or NFS4ERR_NOTSUPP).
    pub other: u64,
    /// Backward Calls that did not decode (not answered).
    pub malformed: u64,
}

/// A recall the holder answered: the delegation and when the CB_RECALL
/// arrived and the DELEGRETURN's reply did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Returned {
    pub stateid: Stateid,
    pub recalled_at: Instant,
    pub returned_at: Instant,
    /// DELEGRETURN's status (NFS4_OK, or NFS4ERR_DELEG_REVOKED when the
    /// server had given up).
    pub status: u32,
}

/// An NFSv4.1 client with a backchannel on its one connection.
pub struct Holder<'p, F: Fabric> {
    pub s: Session<'p, F>,
    pub cred: Cred,
    binding: Nfs3Binding,
    pub clientid: u64,
    pub session: SessionId,
    seq: u32,
    /// Leave recalls unanswered (a client that never answers).
    pub ignore_recalls: bool,
    pub stats: HolderStats,
    /// Backward Calls seen and deliberately left unanswered.
    ignored: Vec<u32>,
}

impl<F: Fabric> std::fmt::Debug for Holder<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holder")
            .field("clientid", &self.clientid)
            .field("stats", &self.stats)
            .finish()
    }
}

fn nfs_err(what: &'static str) -> impl Fn(PerfError) -> PerfError {
    move |e| match e {
        PerfError::Nfs { status, .. } => PerfError::Nfs { what, status },
        e => e,
    }
}

impl<'p, F: Fabric> Holder<'p, F> {
    /// EXCHANGE_ID as `owner`, CREATE_SESSION binding the backchannel to
    /// `s`'s connection (whose requester must offer backward credits), the
    /// CB_NULL probe answered, RECLAIM_COMPLETE.
    pub fn new(s: Session<'p, F>, cred: Cred, owner: &str) -> Result<Self, PerfError> {
        let mut h = Holder {
            s,
            cred,
            binding: Nfs3Binding::new(1 << 16),
            clientid: 0,
            session: [0; NFS4_SESSIONID_SIZE],
            seq: 0,
            ignore_recalls: false,
            stats: HolderStats::default(),
            ignored: Vec::new(),
        };
        let (b, cred) = (h.binding, h.cred.clone());
        let (clientid, cs_seq) =
            h.s.compound(
                &b,
                |buf| nfs4::encode_exchange_id(buf, 0, &cred, owner.as_bytes()),
                |v, xid| nfs4::parse_exchange_id(v, Some(xid)),
            )
            .map_err(nfs_err("EXCHANGE_ID"))?;
        let (sid, _) =
            h.s.compound(
                &b,
                |buf| {
                    let back = CREATE_SESSION4_FLAG_CONN_BACK_CHAN;
                    nfs4::encode_create_session(buf, 0, &cred, clientid, cs_seq, 1, 1 << 16, back)
                },
                |v, xid| nfs4::parse_create_session(v, Some(xid)),
            )
            .map_err(nfs_err("CREATE_SESSION"))?;
        h.clientid = clientid;
        h.session = sid;
        let t0 = Instant::now();
        while h.stats.probes == 0 {
            h.serve()?;
            if t0.elapsed() > h.s.timeout {
                return Err(PerfError::Other("no CB_NULL probe on the backchannel".into()));
            }
        }
        let sl = h.slot();
        h.s.compound(
            &b,
            |buf| nfs4::encode_reclaim_complete(buf, 0, &cred, &sl),
            |v, xid| nfs4::parse_status(v, Some(xid)),
        )
        .map_err(nfs_err("RECLAIM_COMPLETE"))?;
        Ok(h)
    }

    fn slot(&mut self) -> Slot {
        self.seq = self.seq.wrapping_add(1);
        Slot {
            session: self.session,
            slot: 0,
            seq: self.seq,
            highest: 0,
        }
    }

    /// OPEN `dir`/`name` with `access` (OPEN4_SHARE_ACCESS_*): the file,
    /// its open stateid and any delegation.
    pub fn open(&mut self, dir: &str, name: &str, access: u32, create: bool) -> Result<Opened, PerfError> {
        let (b, cred, clientid) = (self.binding, self.cred.clone(), self.clientid);
        let sl = self.slot();
        let parts = dir.split('/').filter(|c| !c.is_empty()).count();
        self.s
            .compound(
                &b,
                |buf| nfs4::encode_open(buf, 0, &cred, &sl, clientid, dir, name, create, access),
                |v, xid| nfs4::parse_open(v, Some(xid), parts),
            )
            .map_err(nfs_err("OPEN"))
    }

    /// PUTFH `fh`, then CLOSE of `sid` or DELEGRETURN of it (`op`):
    /// its status.
    pub fn fh_stateid_op(&mut self, fh: &[u8], op: u32, sid: &Stateid) -> Result<u32, PerfError> {
        let (b, cred) = (self.binding, self.cred.clone());
        let sl = self.slot();
        match self.s.compound(
            &b,
            |buf| nfs4::encode_fh_stateid_op(buf, 0, &cred, &sl, fh, op, sid),
            |v, xid| nfs4::parse_status(v, Some(xid)),
        ) {
            Ok(()) => Ok(NFS4_OK),
            Err(PerfError::Nfs { status, .. }) => Ok(status),
            Err(e) => Err(e),
        }
    }

    /// SEQUENCE alone: its `sr_status_flags` (SEQ4_STATUS_*).
    pub fn status_flags(&mut self) -> Result<u32, PerfError> {
        let (b, cred) = (self.binding, self.cred.clone());
        let sl = self.slot();
        self.s.compound(
            &b,
            |buf| nfs4::encode_null(buf, 0, &cred, &sl),
            |v, xid| nfs4::parse_sequence_flags(v, Some(xid)),
        )
    }

    /// Poll the connection once and answer the backward Calls held: a
    /// CB_RECALL is answered and its delegation returned at once (unless
    /// [`Holder::ignore_recalls`]). Returns the delegations returned.
    pub fn serve(&mut self) -> Result<Vec<Returned>, PerfError> {
        self.s.req.poll();
        let mut out = Vec::new();
        loop {
            let next = self
                .s
                .req
                .backward_calls()
                .find(|(x, _)| !self.ignored.contains(x))
                .map(|(x, m)| (x, m.to_vec()));
            let Some((xid, msg)) = next else {
                break;
            };
            let at = Instant::now();
            let mut reply = [0u8; 256];
            let (n, recall) = match cb::decode_cb_call(&msg) {
                Ok((_, CbCall::Null)) => {
                    self.stats.probes += 1;
                    let n = proto::rpc::encode_success_reply_none(xid, &mut reply)
                        .ok_or_else(|| PerfError::Other("CB_NULL reply".into()))?;
                    (n, None)
                }
                Ok((_, CbCall::Compound { seq, op, .. })) => {
                    let (opnum, status, recall) = match op {
                        Some(Ok(CbOp::Recall { stateid, fh, .. })) => {
                            self.stats.recalls += 1;
                            if self.ignore_recalls {
                                self.stats.ignored += 1;
                                self.ignored.push(xid);
                                continue;
                            }
                            (Some(cb::OP_CB_RECALL), NFS4_OK, Some((stateid, fh.to_vec())))
                        }
                        Some(Ok(CbOp::NotifyLock { .. })) => {
                            self.stats.other += 1;
                            (Some(cb::OP_CB_NOTIFY_LOCK), NFS4_OK, None)
                        }
                        Some(Err(o)) => {
                            self.stats.other += 1;
                            (Some(o), NFS4ERR_NOTSUPP, None)
                        }
                        None => (None, NFS4_OK, None),
                    };
                    let n = cb::encode_cb_compound_reply(xid, &seq, opnum, status, &mut reply)
                        .map_err(|e| PerfError::Other(format!("CB_COMPOUND reply: {e}")))?;
                    (n, recall)
                }
                Err(_) => {
                    // Not answered: a malformed Call has no Reply to make.
                    self.stats.malformed += 1;
                    self.ignored.push(xid);
                    continue;
                }
            };
            self.s
                .req
                .reply_backward(xid, &reply[..n])
                .map_err(|e| PerfError::Other(format!("backward Reply: {e}")))?;
            if let Some((stateid, fh)) = recall {
                let status = self.fh_stateid_op(&fh, OP_DELEGRETURN, &stateid)?;
                if status == NFS4_OK {
                    self.stats.returned += 1;
                }
                out.push(Returned {
                    stateid,
                    recalled_at: at,
                    returned_at: Instant::now(),
                    status,
                });
            }
        }
        Ok(out)
    }

    /// [`Holder::serve`] until `f` holds of the delegations returned so
    /// far, or `limit` passes (false).
    pub fn serve_until(
        &mut self,
        limit: Duration,
        mut f: impl FnMut(&[Returned], &HolderStats) -> bool,
    ) -> Result<(bool, Vec<Returned>), PerfError> {
        let t0 = Instant::now();
        let mut all = Vec::new();
        loop {
            all.extend(self.serve()?);
            if f(&all, &self.stats) {
                return Ok((true, all));
            }
            if t0.elapsed() > limit {
                return Ok((false, all));
            }
        }
    }

    /// Disconnect and return the buffers.
    pub fn close(self) {
        self.s.close();
    }
}

/// What [`hold`] does.
#[derive(Clone, Debug)]
pub struct HoldConfig {
    pub target: String,
    pub version: u32,
    pub cred: Cred,
    pub export: String,
    pub file: String,
    pub create: bool,
    /// How long to hold (and re-take) the delegation.
    pub duration: Duration,
    pub timeout: Duration,
    /// Never answer a recall (the delegation is then revoked).
    pub ignore_recalls: bool,
}

/// What [`hold`] saw.
#[derive(Clone, Debug, Default)]
pub struct HoldReport {
    pub stats: HolderStats,
    /// OPENs that came with a delegation, and those that did not.
    pub granted: u64,
    pub refused: u64,
    /// For each delegation returned: from the CB_RECALL's arrival to the
    /// DELEGRETURN's reply.
    pub recall_to_return: Vec<Duration>,
    /// SEQUENCE's status flags at the end (RECALLABLE_STATE_REVOKED after
    /// an ignored recall the server revoked).
    pub final_flags: u32,
}

impl HoldReport {
    /// The `p`-th quantile (0..=1) of [`HoldReport::recall_to_return`].
    pub fn quantile(&self, p: f64) -> Option<Duration> {
        let mut v = self.recall_to_return.clone();
        v.sort();
        let i = ((v.len().checked_sub(1)? as f64) * p).round() as usize;
        v.get(i).copied()
    }
}

/// `perf deleg`: hold a read delegation on the file for the duration,
/// answering each recall with DELEGRETURN and opening again afterwards
/// (a file another client has open for writing gets no delegation: perf
/// closes and tries again 10 ms later), or never answering.
pub fn hold<M: FabricMaker>(maker: &M, cfg: &HoldConfig) -> Result<HoldReport, PerfError> {
    let pools = Pools::new(&[crate::engine::SESSION_DEPTH], Pools::data_bytes_for(4096))?;
    let req = crate::engine::connect_with(
        maker,
        &pools,
        0,
        &cfg.target,
        cfg.version,
        crate::engine::SESSION_DEPTH,
        true,
        cfg.timeout,
        HOLDER_BACKWARD_CREDITS,
    )?;
    let owner = format!("perf-deleg-{}", std::process::id());
    let s = Session {
        req,
        timeout: cfg.timeout,
    };
    let mut h = Holder::new(s, cfg.cred.clone(), &owner)?;
    h.ignore_recalls = cfg.ignore_recalls;
    let mut rep = HoldReport::default();
    let end = Instant::now() + cfg.duration;
    let mut create = cfg.create;
    while Instant::now() < end {
        let o = h.open(&cfg.export, &cfg.file, OPEN4_SHARE_ACCESS_READ, create)?;
        create = false;
        if o.deleg.is_none() {
            rep.refused += 1;
            h.fh_stateid_op(&o.fh, OP_CLOSE, &o.stateid)?;
            let t = Instant::now() + Duration::from_millis(10);
            while Instant::now() < t {
                h.serve()?;
            }
            continue;
        }
        rep.granted += 1;
        let left = end.saturating_duration_since(Instant::now());
        let (_, done) = h.serve_until(left, |r, st| !r.is_empty() || st.ignored > 0)?;
        rep.recall_to_return.extend(
            done.iter()
                .map(|r| r.returned_at.saturating_duration_since(r.recalled_at)),
        );
        if h.stats.ignored > 0 {
            // A client that never answers: hold on until the end.
            let left = end.saturating_duration_since(Instant::now());
            let t = Instant::now() + left;
            while Instant::now() < t {
                h.serve()?;
                h.status_flags()?;
                std::thread::sleep(Duration::from_millis(50));
            }
            break;
        }
        h.fh_stateid_op(&o.fh, OP_CLOSE, &o.stateid)?;
    }
    rep.final_flags = h.status_flags()?;
    rep.stats = h.stats;
    h.close();
    Ok(rep)
}
