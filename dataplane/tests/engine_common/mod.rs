//! Shared pieces of the engine tests: pool construction, configurations, and
//! submitting and checking calls of `dataplane::testprog`.
#![allow(dead_code)]

use std::sync::Arc;

use dataplane::requester::{CallOutcome, Requester, RequesterConfig};
use dataplane::responder::ResponderConfig;
use dataplane::Fabric;
use mempool::pool::{ClassId, Mempool, PoolPlan};
use mempool::region::{Region, RegionConfig};
use proto::header::Limits;
use proto::negotiate::VersionRange;
use proto::plan::ReplyNeeds;
use proto::rpc;
use proto::ulb::{DdpItem, UpperLayerBinding};
use proto::xdr::{pad_len, Reader};

pub use dataplane::testprog::*;

/// Pool classes for the tests.
pub struct Pools {
    pub pool: &'static Mempool,
    pub regions: Vec<Arc<Region>>,
    pub recv: ClassId,
    pub send: ClassId,
    pub data: ClassId,
}

/// A pool for one responder (core 0) and up to `max_conns` requesters
/// (cores 1 to `max_conns`, each with its own per-core cache) with `inline`
/// byte receive buffers.
pub fn pools(inline: usize, credits: u32, max_conns: u32) -> Pools {
    pools_with_data(inline, credits, max_conns, 64 * 1024)
}

/// [`pools`] with data buffers of `data_bytes` (a multiple of 4096).
pub fn pools_with_data(inline: usize, credits: u32, max_conns: u32, data_bytes: usize) -> Pools {
    let mut plan = PoolPlan::new(1 + max_conns.max(1) as usize);
    let recv = plan.add_class("recv", inline, 8).unwrap();
    let send = plan.add_class("send", 8192, 8).unwrap();
    let data = plan.add_class("data", data_bytes, 4).unwrap();
    let srq = (credits * max_conns) as u64;
    // Responder: SRQ receives + receives held by requests; send + head per
    // request slot, which keeps them (a connection's share of slots is its
    // credits and its send-queue depth, `responder_cfg`'s 64); chunk + data
    // buffer per request.
    let slots = (credits as u64 + 64) * max_conns as u64;
    plan.reserve("responder-recv", recv, 2 * srq);
    plan.reserve("responder-send", send, 2 * slots);
    plan.reserve("responder-data", data, 2 * srq);
    // Requesters: receives per connection, a header, call, write, reply buffer per call.
    let c = (credits as u64 + 2) * max_conns as u64;
    plan.reserve("requester-recv", recv, 2 * c);
    plan.reserve("requester-send", send, c + max_conns as u64);
    plan.reserve("requester-data", data, 4 * c);
    let cfg = RegionConfig {
        lock: false,
        ..RegionConfig::default()
    };
    let pool = Box::leak(Box::new(Mempool::new(&plan, &cfg).expect("pool")));
    let regions = pool.regions().to_vec();
    Pools {
        pool,
        regions,
        recv,
        send,
        data,
    }
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
        backward_credits: 0,
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
        backward_credits: 0,
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

/// A requester on a fresh endpoint of `net` (core 1 of the pool), offering
/// every version and `credits`, asked to connect to the responder at `srv`.
#[allow(dead_code)]
pub fn sim_requester(
    p: &Pools,
    net: &dataplane::sim::SimNetwork,
    credits: u32,
) -> Requester<'static, dataplane::sim::SimFabric> {
    let mut cli = Requester::new(
        requester_cfg(p, VersionRange::ALL, credits),
        net.endpoint(),
        p.pool,
        &p.regions,
        1,
    )
    .unwrap();
    cli.connect("srv").unwrap();
    cli
}

/// Step `cli`, `srv` and the network until `cli` is connected and may
/// submit (a [`sim_requester`] against a responder on the same network).
#[allow(dead_code)]
pub fn sim_until_ready<S: dataplane::service::Service>(
    cli: &mut Requester<'static, dataplane::sim::SimFabric>,
    srv: &mut dataplane::responder::Responder<'static, dataplane::sim::SimFabric, S>,
    net: &dataplane::sim::SimNetwork,
) {
    let mut turns = 0;
    while cli.link() != dataplane::requester::LinkState::Ready || !cli.can_submit() {
        srv.poll();
        cli.poll();
        net.step();
        turns += 1;
        assert!(turns < 100_000, "never connected");
    }
}

/// Submit one call of `e` on `req`. Returns false if the requester was busy.
pub fn submit<F: Fabric>(req: &mut Requester<'_, F>, e: &Expect) -> Result<dataplane::requester::CallId, String> {
    let mut cb = req.call_buf().ok_or("no call buffer")?;
    let n = encode_call(cb.bytes_mut(), e.proc_, &e.arg, e.big_n, e.b).ok_or("call too large")?;
    let mut items = [DdpItem::default(); 1];
    let k = TestUlb
        .call_items(&cb.bytes_mut()[..n], &mut items)
        .map_err(|e| e.to_string())?;
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
pub fn check_reply<F: Fabric>(
    req: &Requester<'_, F>,
    id: dataplane::requester::CallId,
    e: &Expect,
) -> Result<(), String> {
    let v = req.reply(id).ok_or("no reply view")?;
    // Where the Write chunk's data goes: after the reply header and the length word.
    // Where each Write chunk's data goes in the reduced reply: right after its
    // length word (RFC 8166 s3.4.4.1); nothing when the item stayed inline.
    let used = |k: usize| v.write_chunk(k).is_some_and(|d| !d.is_empty());
    let p0 = (RPC_REPLY_HDR + 4) as u32;
    let positions: Vec<u32> = match e.proc_ {
        P_ECHO | P_WRLONG | P_WRTAIL if used(0) => vec![p0],
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
        P_TWO | P_WRLONG | P_WRTAIL => {
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

/// Shut both engines down (`settle` runs the network between the steps) and
/// check that neither holds a buffer or a request.
pub fn shutdown_both<F: Fabric, S: dataplane::service::Service>(
    cli: &mut Requester<'_, F>,
    srv: &mut dataplane::responder::Responder<'_, F, S>,
    settle: impl Fn(),
) -> Result<(), String> {
    let left = cli.shutdown(10_000);
    settle();
    let held = srv.shutdown(10_000);
    settle();
    srv.poll();
    if left != 0 || held.requests != 0 || held.recv != 0 || held.send != 0 || held.data != 0 || held.srq_posted != 0 {
        return Err(format!(
            "buffers held after teardown: requester calls {left}, responder {held:?}"
        ));
    }
    Ok(())
}

/// After both engines are dropped: every buffer of `p` is back in its pool.
pub fn pool_idle(p: &Pools) -> Result<(), String> {
    for class in [p.recv, p.send, p.data] {
        let st = p.pool.stats(class).ok_or("stats")?;
        if st.in_use != 0 {
            return Err(format!(
                "class {class:?}: {} buffers still in use after drop",
                st.in_use
            ));
        }
    }
    Ok(())
}
