//! Shared pieces of the engine tests: a small RPC program with its own
//! Upper-Layer Binding, a service for it, and pool construction.
#![allow(dead_code)]

use std::sync::Arc;

use dataplane::requester::{CallOutcome, Requester, RequesterConfig};
use dataplane::responder::ResponderConfig;
use dataplane::service::{CallView, ReplyBuilder, Service, ServiceError};
use dataplane::Fabric;
use mempool::pool::{ClassId, Mempool, PoolPlan};
use mempool::region::{Region, RegionConfig};
use proto::header::Limits;
use proto::negotiate::VersionRange;
use proto::plan::ReplyNeeds;
use proto::rpc::{self, CallHeader, OpaqueAuth, ReplyHeader};
use proto::ulb::{DdpItem, UpperLayerBinding};
use proto::xdr::{pad_len, Reader, Writer};
use proto::DecodeError;

/// Test program number (transient range).
pub const PROG: u32 = 0x4000_0001;
pub const VERS: u32 = 1;
/// NULL: no arguments, no results.
pub const P_NULL: u32 = 0;
/// ECHO: args `opaque data<>` (DDP-eligible), results `opaque data<>` (DDP-eligible).
pub const P_ECHO: u32 = 1;
/// BIG: args `uint32 n`, results `opaque data<n>` kept inline (not DDP-eligible),
/// so a large `n` needs a Reply chunk.
pub const P_BIG: u32 = 2;
/// SUM: args `opaque data<>` not DDP-eligible (a large one needs a Position-Zero
/// Read chunk), results `uint32 len, uint32 checksum`.
pub const P_SUM: u32 = 3;
/// RDLONG: args `opaque data<>` (DDP-eligible) and `uint32 n`; results
/// `uint32 checksum, opaque pad<n>` (not DDP-eligible): Read list + Reply chunk.
pub const P_RDLONG: u32 = 4;
/// TWO: args `uint32 a, uint32 b`; results `opaque x<a>, opaque y<b>`, both
/// DDP-eligible: two Write chunks.
pub const P_TWO: u32 = 5;
/// WRLONG: args `uint32 a, uint32 m`; results `opaque x<a>` (DDP-eligible) and
/// `opaque y<m>` (not): Write list + Reply chunk.
pub const P_WRLONG: u32 = 6;

pub const MAX_DATA: u32 = 48 * 1024;
pub const RPC_CALL_HDR: usize = 40;
pub const RPC_REPLY_HDR: usize = 24;

/// Deterministic pattern bytes.
pub fn pattern(salt: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(salt.wrapping_mul(7)) as u8).collect()
}

pub fn checksum(b: &[u8]) -> u32 {
    b.iter().fold(0x811c_9dc5u32, |h, &x| (h ^ x as u32).wrapping_mul(0x0100_0193))
}

/// The ULB of the test program (RFC 8166 section 6).
#[derive(Debug, Default, Clone, Copy)]
pub struct TestUlb;

impl UpperLayerBinding for TestUlb {
    fn program(&self) -> u32 {
        PROG
    }
    fn supports_version(&self, v: u32) -> bool {
        v == VERS
    }
    fn call_items(&self, call: &[u8], out: &mut [DdpItem]) -> Result<usize, DecodeError> {
        let (h, at) = CallHeader::decode(call)?;
        if h.prog != PROG || !(h.proc_ == P_ECHO || h.proc_ == P_RDLONG) || out.is_empty() {
            return Ok(0);
        }
        let mut r = Reader::with_base(&call[at..], at);
        let d = r.opaque_var(MAX_DATA, "data")?;
        out[0] = DdpItem { offset: (at + 4) as u32, len: d.len() as u32 };
        Ok(1)
    }
    fn reply_items(&self, _v: u32, p: u32, reply: &[u8], out: &mut [DdpItem]) -> Result<usize, DecodeError> {
        if p != P_ECHO || out.is_empty() {
            return Ok(0);
        }
        let (_, at) = rpc::decode_reply(reply)?;
        let mut r = Reader::with_base(&reply[at..], at);
        let d = r.opaque_var(MAX_DATA, "data")?;
        out[0] = DdpItem { offset: (at + 4) as u32, len: d.len() as u32 };
        Ok(1)
    }
    fn reply_ddp_max(&self, _v: u32, p: u32) -> Option<u32> {
        (p == P_ECHO || p == P_WRLONG).then_some(MAX_DATA)
    }
    fn max_reply_size(&self, _v: u32, p: u32) -> u32 {
        match p {
            P_BIG | P_RDLONG | P_WRLONG => RPC_REPLY_HDR as u32 + 12 + MAX_DATA,
            _ => 64,
        }
    }
}

/// The service: answers the test program.
#[derive(Debug, Default)]
pub struct TestService {
    pub calls: u64,
}

impl Service for TestService {
    fn reply_data_hint(&mut self, call: &CallView<'_>) -> usize {
        // ECHO returns as many bytes as it got, in the data buffer.
        let head = call.head();
        match CallHeader::decode(head) {
            Ok((h, _)) if h.proc_ == P_ECHO => call.len(),
            _ => 0,
        }
    }

    fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
        self.calls += 1;
        // Reassemble (tests favour clarity; the NFS service works on pieces).
        let mut msg = vec![0u8; call.len()];
        call.copy_to(&mut msg);
        let (h, at) = CallHeader::decode(&msg).map_err(|_| ServiceError::Drop)?;
        let args = &msg[at..];
        let mut data_out: Option<Vec<u8>> = None;
        let mut marks: Vec<(usize, usize)> = Vec::new();
        let head = reply.head_mut();
        let mut w = Writer::new(head);
        rpc::encode_reply_header(&mut w, &ReplyHeader::success(h.xid, OpaqueAuth::NONE)).map_err(|_| ServiceError::Drop)?;
        match h.proc_ {
            P_NULL => {}
            P_ECHO => {
                let d = Reader::new(args).opaque_var(MAX_DATA, "data").map_err(|_| ServiceError::Drop)?;
                w.put_u32(d.len() as u32).map_err(|_| ServiceError::Drop)?;
                data_out = Some(d.to_vec());
            }
            P_BIG => {
                let n = Reader::new(args).u32("n").map_err(|_| ServiceError::Drop)?;
                w.put_opaque_var(&pattern(n, n as usize)).map_err(|_| ServiceError::Drop)?;
            }
            P_SUM => {
                let d = Reader::new(args).opaque_var(MAX_DATA, "data").map_err(|_| ServiceError::Drop)?;
                w.put_u32(d.len() as u32).map_err(|_| ServiceError::Drop)?;
                w.put_u32(checksum(d)).map_err(|_| ServiceError::Drop)?;
            }
            P_RDLONG => {
                let mut r = Reader::new(args);
                let d = r.opaque_var(MAX_DATA, "data").map_err(|_| ServiceError::Drop)?;
                let n = r.u32("n").map_err(|_| ServiceError::Drop)?;
                w.put_u32(checksum(d)).map_err(|_| ServiceError::Drop)?;
                w.put_opaque_var(&pattern(n, n as usize)).map_err(|_| ServiceError::Drop)?;
            }
            P_TWO | P_WRLONG => {
                let mut r = Reader::new(args);
                let a = r.u32("a").map_err(|_| ServiceError::Drop)?;
                let b = r.u32("b").map_err(|_| ServiceError::Drop)?;
                let x = pattern(a, a as usize);
                let y = pattern(b ^ 0x55, b as usize);
                w.put_u32(a).map_err(|_| ServiceError::Drop)?;
                let x_at = w.len();
                w.put_opaque_fixed(&x).map_err(|_| ServiceError::Drop)?;
                w.put_u32(b).map_err(|_| ServiceError::Drop)?;
                let y_at = w.len();
                w.put_opaque_fixed(&y).map_err(|_| ServiceError::Drop)?;
                marks.push((x_at, x.len()));
                if h.proc_ == P_TWO {
                    marks.push((y_at, y.len()));
                }
            }
            _ => return Err(ServiceError::Drop),
        }
        let n = w.len();
        reply.set_head_len(n);
        for (at, len) in marks {
            assert!(reply.add_head_item(at, len), "marking a head item");
        }
        if let Some(d) = data_out {
            let buf = reply.data_mut().ok_or(ServiceError::Drop)?;
            buf[..d.len()].copy_from_slice(&d);
            reply.set_data(d.len(), true);
        }
        Ok(())
    }
}

/// Encode a test Call into `out`; returns its length.
pub fn encode_call(out: &mut [u8], proc_: u32, arg: &[u8], big_n: u32, b: u32) -> usize {
    let mut w = Writer::new(out);
    // The XID is set by the requester at submit.
    rpc::encode_call_header(&mut w, &CallHeader::new(0, PROG, VERS, proc_, OpaqueAuth::NONE, OpaqueAuth::NONE))
        .unwrap();
    match proc_ {
        P_ECHO | P_SUM => w.put_opaque_var(arg).unwrap(),
        P_BIG => w.put_u32(big_n).unwrap(),
        P_RDLONG => {
            w.put_opaque_var(arg).unwrap();
            w.put_u32(big_n).unwrap();
        }
        P_TWO | P_WRLONG => {
            w.put_u32(big_n).unwrap();
            w.put_u32(b).unwrap();
        }
        _ => {}
    }
    w.len()
}

/// Pool classes for the tests.
pub struct Pools {
    pub pool: &'static Mempool,
    pub regions: Vec<Arc<Region>>,
    pub recv: ClassId,
    pub send: ClassId,
    pub data: ClassId,
}

/// A pool for one responder and one requester (cores 0 and 1) with `inline`
/// byte receive buffers.
pub fn pools(inline: usize, credits: u32, max_conns: u32) -> Pools {
    let mut plan = PoolPlan::new(2);
    let recv = plan.add_class("recv", inline, 8).unwrap();
    let send = plan.add_class("send", 8192, 8).unwrap();
    let data = plan.add_class("data", 64 * 1024, 4).unwrap();
    let srq = (credits * max_conns) as u64;
    // Responder: SRQ receives + receives held by requests; send + head per
    // request; chunk + data buffer per request.
    plan.reserve("responder-recv", recv, 2 * srq);
    plan.reserve("responder-send", send, 2 * srq);
    plan.reserve("responder-data", data, 2 * srq);
    // Requesters: receives per connection, a header, call, write, reply buffer per call.
    let c = (credits as u64 + 2) * max_conns as u64;
    plan.reserve("requester-recv", recv, 2 * c);
    plan.reserve("requester-send", send, c + max_conns as u64);
    plan.reserve("requester-data", data, 4 * c);
    let cfg = RegionConfig { lock: false, ..RegionConfig::default() };
    let pool = Box::leak(Box::new(Mempool::new(&plan, &cfg).expect("pool")));
    let regions = pool.regions().to_vec();
    Pools { pool, regions, recv, send, data }
}

pub fn responder_cfg(p: &Pools, versions: VersionRange, credits: u32, max_conns: u32) -> ResponderConfig {
    ResponderConfig {
        versions,
        credits,
        max_conns,
        send_depth: 64,
        max_rdma_reads: 4,
        limits: Limits::DEFAULT,
        max_read_bytes: 64 * 1024,
        recv_class: p.recv,
        send_class: p.send,
        data_class: p.data,
        remote_invalidation: false,
    }
}

pub fn requester_cfg(p: &Pools, versions: VersionRange, credits: u32) -> RequesterConfig {
    RequesterConfig {
        versions,
        credits,
        send_depth: 64,
        limits: Limits::DEFAULT,
        recv_class: p.recv,
        send_class: p.send,
        data_class: p.data,
        ddp: true,
        pad_read_chunks: false,
    }
}

/// What one test call expects back.
#[derive(Debug, Clone)]
pub struct Expect {
    pub proc_: u32,
    pub arg: Vec<u8>,
    pub big_n: u32,
    /// Second size (TWO, WRLONG).
    pub b: u32,
}

/// Submit one call of `e` on `req`. Returns false if the requester was busy.
pub fn submit<F: Fabric>(req: &mut Requester<'_, F>, e: &Expect) -> Result<dataplane::requester::CallId, String> {
    let mut cb = req.call_buf().ok_or("no call buffer")?;
    let n = encode_call(cb.as_mut(), e.proc_, &e.arg, e.big_n, e.b);
    let mut items = [DdpItem::default(); 1];
    let k = TestUlb.call_items(&cb.as_mut()[..n], &mut items).map_err(|e| e.to_string())?;
    let needs = if e.proc_ == P_TWO {
        // Two DDP-eligible results: two Write chunks (the ULB trait describes one).
        ReplyNeeds::new(&[MAX_DATA / 2, MAX_DATA / 2], 64).ok_or("needs")?
    } else {
        ReplyNeeds::from_ulb(&TestUlb, VERS, e.proc_)
    };
    req.submit(cb, n, &items[..k], &needs).map_err(|(err, cb)| {
        req.discard(cb);
        err.to_string()
    })
}

/// Check a reply against what was asked.
pub fn check_reply<F: Fabric>(req: &Requester<'_, F>, id: dataplane::requester::CallId, e: &Expect) -> Result<(), String> {
    let v = req.reply(id).ok_or("no reply view")?;
    // Where the Write chunk's data goes: after the reply header and the length word.
    // Where each Write chunk's data goes in the reduced reply: right after its
    // length word (RFC 8166 s3.4.4.1); nothing when the item stayed inline.
    let used = |k: usize| v.write_chunk(k).is_some_and(|d| !d.is_empty());
    let p0 = (RPC_REPLY_HDR + 4) as u32;
    let positions: Vec<u32> = match e.proc_ {
        P_ECHO | P_WRLONG if used(0) => vec![p0],
        P_TWO if used(0) && used(1) => vec![p0, p0 + 4],
        P_TWO if used(0) => vec![p0],
        _ => vec![],
    };
    let positions = &positions[..];
    let mut out = vec![0u8; 128 * 1024];
    let n = v.reassemble(positions, &mut out).ok_or("reassembly failed")?;
    let msg = &out[..n];
    let (rh, at) = rpc::decode_reply(msg).map_err(|e| e.to_string())?;
    if rh.xid != v.xid {
        return Err(format!("xid {:#x} != {:#x}", rh.xid, v.xid));
    }
    let mut r = Reader::new(&msg[at..]);
    match e.proc_ {
        P_NULL => {}
        P_ECHO => {
            let d = r.opaque_var(MAX_DATA, "data").map_err(|e| e.to_string())?;
            if d != &e.arg[..] {
                return Err(format!("echo mismatch: {} bytes vs {}", d.len(), e.arg.len()));
            }
        }
        P_BIG => {
            let d = r.opaque_var(MAX_DATA, "data").map_err(|e| e.to_string())?;
            if d != &pattern(e.big_n, e.big_n as usize)[..] {
                return Err("big mismatch".into());
            }
        }
        P_SUM => {
            let len = r.u32("len").map_err(|e| e.to_string())?;
            let sum = r.u32("sum").map_err(|e| e.to_string())?;
            if len as usize != e.arg.len() || sum != checksum(&e.arg) {
                return Err("sum mismatch".into());
            }
        }
        P_RDLONG => {
            let sum = r.u32("sum").map_err(|e| e.to_string())?;
            let d = r.opaque_var(MAX_DATA, "pad").map_err(|e| e.to_string())?;
            if sum != checksum(&e.arg) || d != &pattern(e.big_n, e.big_n as usize)[..] {
                return Err("rdlong mismatch".into());
            }
        }
        P_TWO | P_WRLONG => {
            let x = r.opaque_var(MAX_DATA, "x").map_err(|e| e.to_string())?;
            let y = r.opaque_var(MAX_DATA, "y").map_err(|e| e.to_string())?;
            if x != &pattern(e.big_n, e.big_n as usize)[..] || y != &pattern(e.b ^ 0x55, e.b as usize)[..] {
                return Err(format!("two/wrlong mismatch ({} {} bytes)", x.len(), y.len()));
            }
        }
        _ => {}
    }
    let _ = pad_len(0);
    Ok(())
}

/// Translate a finished call's outcome into a test result.
pub fn outcome_ok(o: CallOutcome) -> Result<(), String> {
    match o {
        CallOutcome::Reply => Ok(()),
        other => Err(format!("call ended with {other:?}")),
    }
}
