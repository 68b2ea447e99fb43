//! The requester against responders that hold it to the letter of the
//! specifications, on the sim fabric: a responder whose Send buffers are
//! small (RFC 8166 s3.3.3, RFC 8797), and a scripted responder that sends
//! what a requester must ignore (RFC 8166 s4.6; draft -09 s5.3.3, s5.3.4).

mod engine_common;

use std::sync::OnceLock;

use dataplane::requester::{CallId, CallOutcome, LinkState, Requester, RequesterConfig};
use dataplane::responder::{Responder, ResponderConfig};
use dataplane::sim::{SimConfig, SimFabric, SimNetwork};
use dataplane::{
    CmEvent, Completion, ConnId, CqId, Fabric, LocalBuf, QpConfig, RecvWr, RegionAccess, SendOp, SendWr, WcOpcode,
    WrId,
};
use engine_common::*;
use mempool::pool::{BufRef, ClassId, Mempool, PoolPlan};
use mempool::region::RegionConfig;
use proto::header::{self, Body, BodyOut, ChunksOut, HeaderOut, Limits, Property, V1Error, RPCRDMA2_F_RESPONSE};
use proto::negotiate::VersionRange;
use proto::plan::{ReplyKind, ReplyNeeds};
use proto::ulb::{DdpItem, UpperLayerBinding};

const CREDITS: u32 = 4;

/// Buffers of two sizes: the responder's receives and Sends are 1 KiB (its
/// RFC 8797 Send Size is 1024), the requester's are 8 KiB.
struct SplitPools {
    pool: &'static Mempool,
    regions: Vec<std::sync::Arc<mempool::region::Region>>,
    small_recv: ClassId,
    small_send: ClassId,
    big_recv: ClassId,
    big_send: ClassId,
    data: ClassId,
}

fn split_pools() -> &'static SplitPools {
    static P: OnceLock<SplitPools> = OnceLock::new();
    P.get_or_init(|| {
        let mut plan = PoolPlan::new(3);
        let small_recv = plan.add_class("recv-1k", 1024, 8).unwrap();
        let small_send = plan.add_class("send-1k", 1024, 8).unwrap();
        let big_recv = plan.add_class("recv-8k", 8192, 8).unwrap();
        let big_send = plan.add_class("send-8k", 8192, 8).unwrap();
        let data = plan.add_class("data", 64 * 1024, 4).unwrap();
        plan.reserve("responder-recv", small_recv, 4 * u64::from(CREDITS));
        plan.reserve("responder-send", small_send, 2 * (u64::from(CREDITS) + 64));
        plan.reserve("responder-data", data, 4 * u64::from(CREDITS));
        plan.reserve("requester-recv", big_recv, 4 * (u64::from(CREDITS) + 2));
        plan.reserve("requester-send", big_send, 2 * (u64::from(CREDITS) + 2));
        plan.reserve("requester-data", data, 8 * (u64::from(CREDITS) + 2));
        let cfg = RegionConfig {
            lock: false,
            ..RegionConfig::default()
        };
        let pool = Box::leak(Box::new(Mempool::new(&plan, &cfg).expect("pool")));
        SplitPools {
            regions: pool.regions().to_vec(),
            pool,
            small_recv,
            small_send,
            big_recv,
            big_send,
            data,
        }
    })
}

/// Submit a READ of `n` bytes whose data item the requester does not
/// take by DDP (no Write chunk: as for a reply without a DDP-eligible
/// item), so the reply, as the Upper-Layer Binding bounds it (RFC 8166
/// s6.2), is at most the RPC reply header, the data's length word and `n`
/// bytes rounded up to 4.
fn submit_read(req: &mut Requester<'_, SimFabric>, n: u32) -> Result<CallId, String> {
    let mut cb = req.call_buf().ok_or("no call buffer")?;
    let len = encode_call(cb.bytes_mut(), P_READ, &[], n, 0).ok_or("call too large")?;
    let mut items = [DdpItem::default(); 1];
    let k = TestUlb
        .call_items(&cb.bytes_mut()[..len], &mut items)
        .map_err(|e| e.to_string())?;
    let needs = ReplyNeeds::new(&[], RPC_REPLY_HDR as u32 + 4 + n.next_multiple_of(4)).ok_or("needs")?;
    req.submit(cb, len, &items[..k], &needs).map_err(|(err, cb)| {
        req.discard(cb);
        err.to_string()
    })
}

/// A responder with 1 KiB Send buffers (RFC 8797 Send Size 1024) and a
/// requester with 8 KiB receives: every reply of 1 to 4 KiB needs the Reply
/// chunk the requester offers, because the responder can Send at most 1 KiB
/// (RFC 8166 s3.3.3: the reply inline threshold is the smaller of the
/// requester's receive size and the responder's send size). The Calls
/// succeed, the replies coming back through the Reply chunk (RDMA_NOMSG).
/// Before, the requester decided with its own receive size (8 KiB), offered
/// no Reply chunk, and every such Call got ERR_CHUNK (RDMA2_ERR_REPLY_RESOURCE
/// in version 2).
#[test]
fn hostile_peer_requester_offers_a_reply_chunk_when_the_reply_exceeds_the_responders_send_size() {
    let p = split_pools();
    for (seed, vers) in [(31u64, 1u32), (32, 2)] {
        let versions = VersionRange::only(vers).unwrap();
        let net = SimNetwork::new(SimConfig::with_seed(seed));
        let scfg = ResponderConfig {
            versions,
            credits: CREDITS,
            max_conns: 1,
            send_depth: 64,
            max_rdma_reads: 4,
            limits: Limits::DEFAULT,
            max_read_bytes: 64 * 1024,
            recv_class: p.small_recv,
            send_class: p.small_send,
            data_class: p.data,
            remote_invalidation: false,
        };
        let mut srv = Responder::new(
            scfg,
            net.endpoint(),
            TestService::default(),
            p.pool,
            &p.regions,
            0,
            Some("srv"),
        )
        .unwrap();
        let ccfg = RequesterConfig {
            versions,
            credits: CREDITS,
            send_depth: 64,
            limits: Limits::DEFAULT,
            recv_class: p.big_recv,
            send_class: p.big_send,
            data_class: p.data,
            ddp: true,
            pad_read_chunks: false,
        };
        let mut cli = Requester::new(ccfg, net.endpoint(), p.pool, &p.regions, 1).unwrap();
        cli.connect("srv").unwrap();
        let sizes = [1100u32, 2000, 3000, 4000];
        let mut next = 0;
        let mut done = Vec::new();
        for _ in 0..100_000 {
            srv.poll();
            cli.poll();
            if next < sizes.len() && cli.can_submit() {
                let id = submit_read(&mut cli, sizes[next]).unwrap();
                done.push((id, sizes[next], None));
                next += 1;
            }
            while let Some(c) = cli.poll_completion() {
                let k = done.iter().position(|d| d.0 == c.id).expect("a Call of ours");
                done[k].2 = Some(c.outcome);
            }
            assert_ne!(cli.link(), LinkState::Failed, "v{vers}: {:?}", cli.stats());
            if done.iter().all(|d| d.2.is_some()) && next == sizes.len() {
                break;
            }
            for _ in 0..4 {
                net.step();
            }
        }
        assert_eq!(cli.version(), vers);
        for &(id, n, outcome) in &done {
            assert_eq!(
                outcome,
                Some(CallOutcome::Reply),
                "v{vers}: a reply of {n} bytes from a responder that Sends at most 1 KiB: {:?} {:?}",
                cli.stats(),
                srv.stats()
            );
            let v = cli.reply(id).expect("a reply");
            assert_eq!(v.kind, ReplyKind::Long, "v{vers} n {n}: the reply came in the Reply chunk");
            let (rh, at) = proto::rpc::decode_reply(v.reduced).expect("an RPC reply");
            assert_eq!(rh.xid, v.xid);
            let mut r = proto::xdr::Reader::new(&v.reduced[at..]);
            assert_eq!(r.opaque_var(n, "data").unwrap().len(), n as usize, "v{vers}: the whole data");
            cli.release(id);
        }
        let s = srv.stats();
        assert_eq!(
            (s.replies, s.replies_long, s.error_replies),
            (sizes.len() as u64, sizes.len() as u64, 0),
            "v{vers}: every reply through its Reply chunk: {s:?}"
        );
        shutdown_both(&mut cli, &mut srv, || {
            let _ = net.run_until_idle(1_000_000);
        })
        .unwrap();
    }
}
