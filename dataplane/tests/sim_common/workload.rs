//! A small random workload over the sim fabric, with a checker of everything the
//! sim promises: each work request completes exactly once, send queues complete
//! in posting order and stop succeeding after the first error, delivered data is
//! right, failures disconnect both sides. Used by the determinism, fault and
//! many-seed tests.
#![allow(clippy::needless_range_loop)] // (side, connection) index several tables

use std::sync::Arc;

use dataplane::sim::{ConnState, SimConfig, SimNetwork, SimRng, SimStats};
use dataplane::{
    CmEvent, Completion, ConnId, Fabric, LocalBuf, QpConfig, RecvWr, RemoteBuf, SendOp, SendWr, SrqId, WcOpcode,
    WcStatus, WrId,
};
use mempool::region::Region;

use super::{read, write, Host};

/// Most operations one side posts on one connection.
pub const MAX_OPS: usize = 12;
/// Most connections.
pub const MAX_CONNS: usize = 3;
const SLOT: u64 = 256;
const HALF: u32 = 128;
const MAX_LEN: u32 = 200;
const SLOTS: u64 = (MAX_OPS * MAX_CONNS) as u64;
const _: () = assert!(MAX_LEN <= 2 * HALF && MAX_LEN as u64 <= SLOT);
const _: () = assert!(MAX_CONNS <= u8::MAX as usize);

// Areas of each side's region, `SLOTS` slots of `SLOT` bytes each.
const OUT: u64 = 0; // sources of my Sends and Writes
const RDST: u64 = 1; // destinations of my Reads
const WIN: u64 = 2; // targets of the peer's Writes
const RSRC: u64 = 3; // sources of the peer's Reads
const RECV: u64 = 4; // my receive buffers

fn at(area: u64, slot: u64) -> u64 {
    (area * SLOTS + slot) * SLOT
}

const SEND_TAG: u8 = 1;
const RECV_TAG: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
}

#[derive(Clone, Copy, Debug)]
struct Op {
    kind: Kind,
    len: u32,
    /// Two SGEs: the first `min(len, HALF)` bytes at the slot, the rest at
    /// slot + HALF.
    split: bool,
    /// Extra advertised segment length beyond `len` (Write/Read).
    slack: u32,
    signaled: bool,
}

impl Op {
    fn sges(&self, area: u64, slot: u64, region: u16) -> ([LocalBuf; 4], u8) {
        let mut sge = [LocalBuf::default(); 4];
        let base = at(area, slot);
        if self.split && self.len > 0 {
            let a = self.len.min(HALF);
            sge[0] = LocalBuf {
                region,
                offset: base,
                len: a,
            };
            sge[1] = LocalBuf {
                region,
                offset: base + u64::from(HALF),
                len: self.len - a,
            };
            (sge, 2)
        } else {
            sge[0] = LocalBuf {
                region,
                offset: base,
                len: self.len,
            };
            (sge, 1)
        }
    }
}

fn fill(seed: u64, len: usize) -> Vec<u8> {
    let mut r = SimRng::new(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn gather(r: &Region, sges: &[LocalBuf]) -> Vec<u8> {
    let mut v = Vec::new();
    for s in sges {
        v.extend_from_slice(&read(r, s.offset, s.len as usize));
    }
    v
}

/// What a run produced, for determinism comparisons.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub hash: u64,
    /// (side, completion) in polling order.
    pub completions: Vec<(usize, Completion)>,
    pub cm: Vec<(usize, CmEvent)>,
    pub stats: SimStats,
    pub now_ns: u64,
}

macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Run the workload for `seed` on a network configured by `cfg` (its `seed`
/// field is what drives the network; `seed` drives the workload plan). `regions`
/// are reused across runs (one per side).
pub fn run(seed: u64, cfg: SimConfig, regions: &(Arc<Region>, Arc<Region>)) -> Result<Outcome, String> {
    let faults = cfg.faults != dataplane::sim::SimFaults::NONE;
    let net = SimNetwork::new(cfg);
    let mut hosts = [Host::new(&net, regions.0.clone()), Host::new(&net, regions.1.clone())];
    let mut w = SimRng::new(seed ^ 0x9a3f_11c0_77e5_d2b1);
    let nconns = 1 + w.index(MAX_CONNS);
    let srq_mode = w.below(2) == 1;
    let rnr_retry = if faults { w.range_inclusive(2, 7) as u8 } else { 7 };

    // plan[side][conn]
    let mut plan: Vec<Vec<Vec<Op>>> = vec![vec![Vec::new(); nconns]; 2];
    for side_plan in &mut plan {
        for ops in side_plan.iter_mut() {
            let n = w.index(MAX_OPS + 1);
            for _ in 0..n {
                let kind = match w.below(3) {
                    0 => Kind::Send,
                    1 => Kind::Write,
                    _ => Kind::Read,
                };
                ops.push(Op {
                    kind,
                    len: w.range_inclusive(0, u64::from(MAX_LEN)) as u32,
                    split: w.below(2) == 1,
                    slack: w.range_inclusive(0, 16) as u32,
                    signaled: kind != Kind::Write || w.below(4) != 0,
                });
            }
        }
    }
    let sends = |side: usize, k: usize| plan[side][k].iter().filter(|o| o.kind == Kind::Send).count();

    // Memory: fresh patterns in sources, zeros in destinations, for used slots.
    for side in 0..2 {
        for k in 0..nconns {
            for i in 0..plan[side][k].len() {
                let g = (k * MAX_OPS + i) as u64;
                let r = &hosts[side].region;
                write(
                    r,
                    at(OUT, g),
                    &fill(seed.wrapping_mul(31) ^ (g << 8) ^ side as u64, SLOT as usize),
                );
                write(
                    r,
                    at(RSRC, g),
                    &fill(seed.wrapping_mul(37) ^ (g << 8) ^ side as u64 ^ 0xff, SLOT as usize),
                );
                for area in [RDST, WIN, RECV] {
                    write(r, at(area, g), &[0u8; SLOT as usize]);
                }
            }
        }
    }

    // Receives: the number of Sends the peer will make, per connection (RQ)
    // or in total (SRQ on the server).
    let srq: Option<SrqId> = if srq_mode {
        let total: usize = (0..nconns).map(|k| sends(0, k)).sum();
        let s = hosts[1]
            .fab
            .create_srq(total.max(1) as u32)
            .map_err(|e| e.to_string())?;
        let region = hosts[1].region.id();
        for slot in 0..total as u64 {
            let buf = LocalBuf {
                region,
                offset: at(RECV, slot),
                len: SLOT as u32,
            };
            hosts[1]
                .fab
                .post_srq_recv(
                    s,
                    &RecvWr {
                        wr_id: WrId::new(RECV_TAG, slot),
                        buf,
                    },
                )
                .map_err(|e| e.to_string())?;
        }
        Some(s)
    } else {
        None
    };
    let qp_for = |h: &Host, side: usize, k: usize| QpConfig {
        cq: h.cq,
        srq: if side == 1 { srq } else { None },
        send_depth: plan[side][k].len().max(1) as u32,
        recv_depth: sends(1 - side, k).max(1) as u32,
        rnr_retry,
        ..QpConfig::default()
    };
    let post_recvs = |h: &mut Host, side: usize, k: usize, conn: ConnId| -> Result<(), String> {
        if side == 1 && srq.is_some() {
            return Ok(());
        }
        let region = h.region.id();
        for j in 0..sends(1 - side, k) {
            let slot = (k * MAX_OPS + j) as u64;
            let buf = LocalBuf {
                region,
                offset: at(RECV, slot),
                len: SLOT as u32,
            };
            h.fab
                .post_recv(
                    conn,
                    &RecvWr {
                        wr_id: WrId::new(RECV_TAG, slot),
                        buf,
                    },
                )
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };

    // Connect.
    hosts[1].fab.listen("server").map_err(|e| e.to_string())?;
    let mut conns: [Vec<Option<ConnId>>; 2] = [vec![None; nconns], vec![None; nconns]];
    let mut cm: Vec<(usize, CmEvent)> = Vec::new();
    for k in 0..nconns {
        let q = qp_for(&hosts[0], 0, k);
        let c = hosts[0]
            .fab
            .connect("server", &q, &[k as u8])
            .map_err(|e| e.to_string())?;
        post_recvs(&mut hosts[0], 0, k, c)?;
        conns[0][k] = Some(c);
    }
    loop {
        while let Some(ev) = hosts[1].fab.poll_cm() {
            cm.push((1, ev));
            if let CmEvent::ConnectRequest { req, private_data, .. } = ev {
                let k = *private_data.as_bytes().first().ok_or("empty private data")? as usize;
                check!(
                    k < nconns && conns[1][k].is_none(),
                    "bad or repeated request for connection {k}"
                );
                let q = qp_for(&hosts[1], 1, k);
                let c = hosts[1].fab.accept(req, &q, b"ok").map_err(|e| e.to_string())?;
                post_recvs(&mut hosts[1], 1, k, c)?;
                conns[1][k] = Some(c);
            }
        }
        while let Some(ev) = hosts[0].fab.poll_cm() {
            cm.push((0, ev));
        }
        let connecting = conns[0]
            .iter()
            .flatten()
            .any(|&c| hosts[0].fab.conn_state(c) == Some(ConnState::Connecting));
        if !connecting {
            break;
        }
        check!(net.step(), "network idle while connecting");
    }
    let conns: [Vec<ConnId>; 2] = [
        conns[0].iter().map(|c| c.expect("client conn")).collect(),
        conns[1]
            .iter()
            .map(|c| c.ok_or("a request never arrived"))
            .collect::<Result<_, _>>()?,
    ];

    // Each side exposes its region (Read and Write) to each connection's
    // peer: windows are per connection.
    let mut win = [vec![0u32; nconns], vec![0u32; nconns]];
    for s in 0..2 {
        for k in 0..nconns {
            hosts[s].expose_region(conns[s][k]);
            win[s][k] = hosts[s].window;
        }
    }

    // Post the operations in random batches, stepping in between.
    let mut cursor = [vec![0usize; nconns], vec![0usize; nconns]];
    loop {
        let open: Vec<(usize, usize)> = (0..2)
            .flat_map(|s| (0..nconns).map(move |k| (s, k)))
            .filter(|&(s, k)| cursor[s][k] < plan[s][k].len())
            .collect();
        if open.is_empty() {
            break;
        }
        let (side, k) = open[w.index(open.len())];
        let batch = 1 + w.index(4);
        for _ in 0..batch {
            let i = cursor[side][k];
            if i >= plan[side][k].len() {
                break;
            }
            cursor[side][k] += 1;
            let op = plan[side][k][i];
            let g = (k * MAX_OPS + i) as u64;
            let h = &hosts[side];
            let peer = &hosts[1 - side];
            let region = h.region.id();
            let (sop, area, remote) = match op.kind {
                Kind::Send => (SendOp::Send, OUT, Default::default()),
                Kind::Write => (SendOp::RdmaWrite, OUT, peer.segment(at(WIN, g), op.len + op.slack)),
                Kind::Read => (SendOp::RdmaRead, RDST, peer.segment(at(RSRC, g), op.len + op.slack)),
            };
            let remote = RemoteBuf {
                handle: win[1 - side][k],
                ..remote
            };
            let (sge, num_sge) = op.sges(area, g, region);
            let wr = SendWr {
                wr_id: WrId::new(SEND_TAG, g),
                op: sop,
                sge,
                num_sge,
                remote,
                signaled: op.signaled,
            };
            hosts[side]
                .fab
                .post_send(conns[side][k], &wr)
                .map_err(|e| format!("post_send: {e}"))?;
        }
        for _ in 0..w.index(20) {
            net.step();
        }
    }
    net.run_until_idle(1_000_000).map_err(|e| e.to_string())?;

    // Collect.
    let mut comps: Vec<(usize, Completion)> = Vec::new();
    for (side, h) in hosts.iter_mut().enumerate() {
        comps.extend(h.drain().into_iter().map(|c| (side, c)));
        while let Some(ev) = h.fab.poll_cm() {
            cm.push((side, ev));
        }
    }

    // ---- checks
    for side in 0..2 {
        let peer = 1 - side;
        for k in 0..nconns {
            let conn = conns[side][k];
            let pconn = conns[peer][k];
            // Send-queue completions of this QP, in order.
            let sq: Vec<&Completion> = comps
                .iter()
                .filter(|(s, c)| *s == side && c.conn == conn && c.opcode != WcOpcode::Recv)
                .map(|(_, c)| c)
                .collect();
            let idx: Vec<u64> = sq.iter().map(|c| c.wr_id.index() - (k * MAX_OPS) as u64).collect();
            check!(
                idx.windows(2).all(|p| p[0] < p[1]),
                "side {side} conn {k}: send completions out of order: {idx:?}"
            );
            if let Some(first_err) = sq.iter().position(|c| !c.status.is_success()) {
                check!(
                    sq[first_err + 1..].iter().all(|c| c.status == WcStatus::Flushed),
                    "side {side} conn {k}: completions after the first error are not all flushed: {sq:?}"
                );
            }
            for (i, op) in plan[side][k].iter().enumerate() {
                let g = (k * MAX_OPS + i) as u64;
                let n = sq.iter().filter(|c| c.wr_id == WrId::new(SEND_TAG, g)).count();
                let failed = sq
                    .iter()
                    .any(|c| c.wr_id == WrId::new(SEND_TAG, g) && !c.status.is_success());
                if op.signaled {
                    check!(
                        n == 1,
                        "side {side} conn {k} op {i}: {n} completions for a signaled work request"
                    );
                } else {
                    check!(
                        n == 0 || (n == 1 && failed),
                        "side {side} conn {k} op {i}: unsignaled success completed"
                    );
                }
                if !faults {
                    check!(!failed, "side {side} conn {k} op {i}: failed without faults: {sq:?}");
                }
            }
            // Data: Writes and Reads that succeeded.
            for (i, op) in plan[side][k].iter().enumerate() {
                let g = (k * MAX_OPS + i) as u64;
                // Failures and flushes always complete, so an unsignaled work
                // request without a completion succeeded.
                let done_ok = sq
                    .iter()
                    .any(|c| c.wr_id == WrId::new(SEND_TAG, g) && c.status.is_success())
                    || (!op.signaled && !sq.iter().any(|c| c.wr_id == WrId::new(SEND_TAG, g)));
                if !done_ok {
                    continue;
                }
                let mine = &hosts[side].region;
                let theirs = &hosts[peer].region;
                match op.kind {
                    Kind::Write => {
                        let (sge, n) = op.sges(OUT, g, mine.id());
                        let want = gather(mine, &sge[..n as usize]);
                        check!(
                            read(theirs, at(WIN, g), op.len as usize) == want,
                            "side {side} conn {k} op {i}: written data differs"
                        );
                    }
                    Kind::Read => {
                        let (sge, n) = op.sges(RDST, g, mine.id());
                        let got = gather(mine, &sge[..n as usize]);
                        check!(
                            got == read(theirs, at(RSRC, g), op.len as usize),
                            "side {side} conn {k} op {i}: read data differs"
                        );
                    }
                    Kind::Send => {}
                }
            }
            // Sends: the j-th successful receive on the peer's connection carries
            // the j-th Send of this QP.
            let my_sends: Vec<(usize, &Op)> = plan[side][k]
                .iter()
                .enumerate()
                .filter(|(_, o)| o.kind == Kind::Send)
                .collect();
            let got: Vec<&Completion> = comps
                .iter()
                .filter(|(s, c)| *s == peer && c.conn == pconn && c.opcode == WcOpcode::Recv && c.status.is_success())
                .map(|(_, c)| c)
                .collect();
            check!(
                got.len() <= my_sends.len(),
                "side {side} conn {k}: more receives than sends"
            );
            for (j, rc) in got.iter().enumerate() {
                let (i, op) = my_sends[j];
                let g = (k * MAX_OPS + i) as u64;
                check!(
                    rc.byte_len == op.len,
                    "side {side} conn {k} send {i}: byte_len {} != {}",
                    rc.byte_len,
                    op.len
                );
                let mine = &hosts[side].region;
                let (sge, n) = op.sges(OUT, g, mine.id());
                let want = gather(mine, &sge[..n as usize]);
                let slot = rc.wr_id.index();
                check!(
                    read(&hosts[peer].region, at(RECV, slot), op.len as usize) == want,
                    "side {side} conn {k} send {i}: received bytes differ"
                );
            }
            for (j, (i, _)) in my_sends.iter().enumerate() {
                let g = (k * MAX_OPS + i) as u64;
                let ok = sq
                    .iter()
                    .any(|c| c.wr_id == WrId::new(SEND_TAG, g) && c.status.is_success());
                check!(
                    !ok || j < got.len(),
                    "side {side} conn {k} send {i} succeeded but was not received"
                );
            }
            if !faults {
                check!(
                    got.len() == my_sends.len(),
                    "side {side} conn {k}: {} of {} sends received",
                    got.len(),
                    my_sends.len()
                );
            }
            // CM: Disconnected at most once; a failure disconnects both sides.
            let disc = |s: usize, c: ConnId| {
                cm.iter()
                    .filter(|(x, e)| *x == s && *e == CmEvent::Disconnected { conn: c })
                    .count()
            };
            check!(disc(side, conn) <= 1, "side {side} conn {k}: Disconnected twice");
            let any_failure = comps.iter().any(|(s, c)| {
                ((*s == side && c.conn == conn) || (*s == peer && c.conn == pconn)) && !c.status.is_success()
            });
            if any_failure {
                check!(
                    disc(side, conn) == 1 && disc(peer, pconn) == 1,
                    "conn {k}: a failure did not disconnect both sides"
                );
            }
            if !faults {
                check!(
                    disc(side, conn) == 0,
                    "side {side} conn {k}: disconnected without faults"
                );
            }
        }
    }
    // Every receive posted comes back exactly once, or is still in the SRQ.
    for side in 0..2 {
        let mut posted = 0usize;
        for k in 0..nconns {
            posted += sends(1 - side, k);
        }
        let recv_done: Vec<u64> = comps
            .iter()
            .filter(|(s, c)| *s == side && c.opcode == WcOpcode::Recv)
            .map(|(_, c)| c.wr_id.index())
            .collect();
        let mut uniq = recv_done.clone();
        uniq.sort_unstable();
        uniq.dedup();
        check!(uniq.len() == recv_done.len(), "side {side}: a receive completed twice");
        let still = match (side, srq) {
            (1, Some(s)) => hosts[1].fab.srq_len(s),
            _ => 0,
        };
        check!(
            recv_done.len() + still == posted,
            "side {side}: {} receives back + {still} still posted != {posted}",
            recv_done.len()
        );
    }
    Ok(Outcome {
        hash: net.trace_hash(),
        completions: comps,
        cm,
        stats: net.stats(),
        now_ns: net.now_ns(),
    })
}
