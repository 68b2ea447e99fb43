//! The requester against responders that hold it to the letter of the
//! specifications, on the sim fabric: a responder whose Send buffers are
//! small (RFC 8166 s3.3.3, RFC 8797), and a scripted responder that sends
//! what a requester must ignore (RFC 8166 s4.6; draft -09 s5.3.3, s5.3.4).

mod engine_common;

use std::sync::OnceLock;

use dataplane::requester::{CallId, CallOutcome, LinkState, Requester, RequesterConfig, SubmitError};
use dataplane::responder::{Responder, ResponderConfig};
use dataplane::sim::{SimConfig, SimFabric, SimNetwork};
use dataplane::{
    CmEvent, Completion, ConnId, CqId, Fabric, LocalBuf, QpConfig, RecvWr, RegionAccess, SendOp, SendWr, WcOpcode, WrId,
};
use engine_common::*;
use mempool::pool::{BufRef, ClassId, Mempool, PoolPlan};
use mempool::region::RegionConfig;
use proto::header::{self, Body, BodyOut, ChunksOut, HeaderOut, Limits, V1Error, RPCRDMA2_F_RESPONSE};
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

/// The pools of test `test`: one per test, since the tests run at once and
/// each uses the per-core caches of cores 0 (responder) and 1 (requester).
fn split_pools(test: usize) -> &'static SplitPools {
    static P: [OnceLock<SplitPools>; 7] = [const { OnceLock::new() }; 7];
    P[test].get_or_init(|| {
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
    let p = split_pools(0);
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
            backward_credits: 0,
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
            backward_credits: 0,
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
            assert_eq!(
                v.kind,
                ReplyKind::Long,
                "v{vers} n {n}: the reply came in the Reply chunk"
            );
            let (rh, at) = proto::rpc::decode_reply(v.reduced).expect("an RPC reply");
            assert_eq!(rh.xid, v.xid);
            let mut r = proto::xdr::Reader::new(&v.reduced[at..]);
            assert_eq!(
                r.opaque_var(n, "data").unwrap().len(),
                n as usize,
                "v{vers}: the whole data"
            );
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

/// A scripted responder: it accepts one connection at "srv" (with no RFC
/// 8797 private data), posts receives, and sends whatever bytes the test
/// gives it.
struct Scripted {
    fab: SimFabric,
    cq: CqId,
    conn: Option<ConnId>,
    recv_cache: mempool::pool::PoolCache<'static>,
    send_cache: mempool::pool::PoolCache<'static>,
    p: &'static SplitPools,
    /// Each message received, in order.
    received: Vec<Vec<u8>>,
}

impl Scripted {
    fn new(net: &SimNetwork, p: &'static SplitPools) -> Self {
        let mut fab = net.endpoint();
        for r in &p.regions {
            fab.register_region(r, RegionAccess::Local).unwrap();
        }
        let cq = fab.create_cq(64).unwrap();
        fab.listen("srv").unwrap();
        Scripted {
            fab,
            cq,
            conn: None,
            recv_cache: p.pool.cache(p.small_recv, 0).unwrap(),
            send_cache: p.pool.cache(p.small_send, 0).unwrap(),
            p,
            received: vec![],
        }
    }

    fn local(&self, b: BufRef, len: u32) -> LocalBuf {
        LocalBuf {
            region: b.region,
            offset: self.p.pool.offset(b).unwrap() as u64,
            len,
        }
    }

    fn poll(&mut self) {
        while let Some(ev) = self.fab.poll_cm() {
            if let CmEvent::ConnectRequest { req, .. } = ev {
                let qp = QpConfig {
                    cq: self.cq,
                    recv_depth: 32,
                    ..QpConfig::default()
                };
                let conn = self.fab.accept(req, &qp, &[]).unwrap();
                for _ in 0..16 {
                    let b = self.recv_cache.get().expect("receive buffer").into_raw();
                    let wr = RecvWr {
                        wr_id: WrId::new(1, b.to_u64()),
                        buf: self.local(b, 1024),
                    };
                    self.fab.post_recv(conn, &wr).unwrap();
                }
                self.conn = Some(conn);
            }
        }
        let mut wcs = [Completion::EMPTY; 16];
        let n = self.fab.poll_cq(self.cq, &mut wcs);
        for wc in &wcs[..n] {
            if wc.opcode == WcOpcode::Recv && wc.status.is_success() {
                let b = BufRef::from_u64(wc.wr_id.index()).unwrap();
                // SAFETY: the receive completed; this test holds the buffer.
                let bytes = unsafe { self.p.pool.bytes(b) }.unwrap();
                self.received.push(bytes[..wc.byte_len as usize].to_vec());
            }
        }
    }

    /// Send `msg` as one message (never returned to the pool: the test
    /// ends before the buffers could run out).
    fn send(&mut self, msg: &[u8]) {
        let b = self.send_cache.get().expect("send buffer").into_raw();
        // SAFETY: this test is the only holder of `b`; it is never returned.
        let bytes = unsafe { self.p.pool.bytes_mut(b) }.unwrap();
        bytes[..msg.len()].copy_from_slice(msg);
        let wr = SendWr::new(
            WrId::new(9, 0),
            SendOp::Send,
            self.local(b, msg.len() as u32),
            Default::default(),
        );
        self.fab.post_send(self.conn.expect("connected"), &wr).unwrap();
    }

    /// The transport header of the `k`th message received.
    fn header(&self, k: usize) -> header::Header<'_> {
        header::decode(&self.received[k], &Limits::DEFAULT).expect("a header")
    }
}

/// A transport header `h` followed by `payload`.
fn message(h: &HeaderOut<'_>, payload: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    let n = header::encode(h, &mut m).unwrap();
    m.truncate(n);
    m.extend_from_slice(payload);
    m
}

const EMPTY: ChunksOut<'static> = ChunksOut {
    reads: &[],
    writes: &[],
    reply: None,
};

/// The RPC Reply to a NULL Call with `xid`: accepted, AUTH_NONE, SUCCESS
/// (RFC 5531 s9).
fn null_reply(xid: u32) -> Vec<u8> {
    [xid, 1, 0, 0, 0, 0].iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// The Reply to Call `xid` in version `vers` granting `credits`.
fn reply_msg(vers: u32, xid: u32, credits: u32) -> Vec<u8> {
    let flags = if vers == 2 { RPCRDMA2_F_RESPONSE } else { 0 };
    let h = HeaderOut {
        xid,
        vers,
        credits,
        flags,
        body: BodyOut::Msg {
            inv_handle: 0,
            chunks: EMPTY,
        },
    };
    message(&h, &null_reply(xid))
}

/// The transport error ERR_CHUNK / RDMA2_ERR_SYSTEM answering Call `xid`,
/// with `credits` in its credit field, which the requester must ignore
/// (draft -09 s5.3.3).
fn error_msg(vers: u32, xid: u32, credits: u32) -> Vec<u8> {
    let (flags, body) = if vers == 2 {
        (RPCRDMA2_F_RESPONSE, BodyOut::ErrorV2(header::V2Error::System))
    } else {
        (0, BodyOut::ErrorV1(V1Error::Chunk))
    };
    message(
        &HeaderOut {
            xid,
            vers,
            credits,
            flags,
            body,
        },
        &[],
    )
}

/// A requester of `vers` connected to a scripted responder: for version
/// 2, the responder answers RDMA2_CONNPROP granting `grant` credits.
fn connect_scripted(
    test: usize,
    seed: u64,
    vers: u32,
    grant: u32,
) -> (SimNetwork, Scripted, Requester<'static, SimFabric>) {
    connect_scripted_backward(test, seed, vers, grant, 0)
}

/// [`connect_scripted`] with a requester whose backchannel takes `backward`
/// Calls at once (RFC 8167; 0: none).
fn connect_scripted_backward(
    test: usize,
    seed: u64,
    vers: u32,
    grant: u32,
    backward: u32,
) -> (SimNetwork, Scripted, Requester<'static, SimFabric>) {
    let p = split_pools(test);
    let net = SimNetwork::new(SimConfig::with_seed(seed));
    let mut srv = Scripted::new(&net, p);
    let ccfg = RequesterConfig {
        versions: VersionRange::only(vers).unwrap(),
        credits: CREDITS,
        send_depth: 64,
        limits: Limits::DEFAULT,
        recv_class: p.big_recv,
        send_class: p.big_send,
        data_class: p.data,
        backward_credits: backward,
        ddp: true,
        pad_read_chunks: false,
    };
    let mut cli = Requester::new(ccfg, net.endpoint(), p.pool, &p.regions, 1).unwrap();
    cli.connect("srv").unwrap();
    pump(&net, &mut srv, &mut cli);
    if vers == 2 {
        assert_eq!(srv.received.len(), 1, "the requester opens with RDMA2_CONNPROP");
        let h = srv.header(0);
        assert!(matches!(h.body, Body::ConnProp(_)), "{:?}", h.body);
        let xid = h.xid;
        let answer = message(
            &HeaderOut {
                xid,
                vers: 2,
                credits: grant,
                flags: RPCRDMA2_F_RESPONSE,
                body: BodyOut::ConnProp(&[]),
            },
            &[],
        );
        srv.send(&answer);
        pump(&net, &mut srv, &mut cli);
    }
    assert_eq!(cli.link(), LinkState::Ready, "{:?}", cli.stats());
    assert_eq!(cli.version(), vers);
    (net, srv, cli)
}

/// Run both ends and the network for more turns than the requester's
/// interval between connection-event polls (`CM_POLL_INTERVAL`).
fn pump(net: &SimNetwork, srv: &mut Scripted, cli: &mut Requester<'static, SimFabric>) {
    for _ in 0..2 * dataplane::requester::CM_POLL_INTERVAL + 8 {
        srv.poll();
        cli.poll();
        for _ in 0..2 {
            net.step();
        }
    }
}

const NULL: Expect = Expect {
    proc_: P_NULL,
    arg: vec![],
    big_n: 0,
    b: 0,
};

/// The XID of the Call the scripted responder received last.
fn last_xid(srv: &Scripted) -> u32 {
    srv.header(srv.received.len() - 1).xid
}

/// A responder that sends no RFC 8797 private data is taken to Send at
/// most 1024 bytes (RFC 8166 s3.3.3, RFC 8797 s5.1): a requester with 8
/// KiB receives offers a Reply chunk with every Call whose reply may be
/// larger than that, and none when the reply fits. Before, it used its own
/// receive size and offered none up to 8 KiB.
#[test]
fn hostile_peer_requester_assumes_the_1024_byte_default_without_private_data() {
    let (net, mut srv, mut cli) = connect_scripted(3, 61, 1, CREDITS);
    for (k, n) in [1100u32, 900, 2000, 4000].into_iter().enumerate() {
        let id = submit_read(&mut cli, n).unwrap();
        pump(&net, &mut srv, &mut cli);
        assert_eq!(srv.received.len(), k + 1, "the Call arrived");
        let h = srv.header(k);
        let reply_chunk = h.chunks().expect("a Call with chunk lists").reply.is_some();
        // Header (7 words) plus reply (RPC header, length, data) within 1024?
        let fits = 28 + RPC_REPLY_HDR as u32 + 4 + n <= 1024;
        assert_eq!(
            reply_chunk,
            !fits,
            "a reply of up to {} bytes",
            RPC_REPLY_HDR as u32 + 4 + n
        );
        srv.send(&reply_msg(1, h.xid, CREDITS));
        pump(&net, &mut srv, &mut cli);
        let c = cli.poll_completion().expect("the Call completes");
        assert_eq!(c.id, id);
        cli.release(id);
    }
    assert_eq!(cli.shutdown(10_000), 0);
}

/// RDMA_DONE and RDMA_MSGP (version 1) and RDMA2_CONNPROP (version 2, as
/// a request and as a response) never answer a Call (RFC 8166 s4.6; draft
/// -09 s5.3.4): sent with the XID of the Call in flight, before its Reply,
/// each is ignored, and the Call completes with the Reply that follows.
/// Before, the first of them completed the Call as BadReply and the real
/// Reply was then unmatched.
#[test]
fn hostile_peer_requester_ignores_done_msgp_and_connprop_carrying_a_calls_xid() {
    for (seed, vers) in [(41u64, 1u32), (42, 2)] {
        let (net, mut srv, mut cli) = connect_scripted(1, seed, vers, CREDITS);
        let before = srv.received.len();
        let id = submit(&mut cli, &NULL).unwrap();
        pump(&net, &mut srv, &mut cli);
        assert_eq!(srv.received.len(), before + 1, "v{vers}: the Call arrived");
        let xid = last_xid(&srv);
        let decoys: Vec<Vec<u8>> = if vers == 1 {
            vec![
                message(
                    &HeaderOut {
                        xid,
                        vers,
                        credits: CREDITS,
                        flags: 0,
                        body: BodyOut::Done,
                    },
                    &[],
                ),
                message(
                    &HeaderOut {
                        xid,
                        vers,
                        credits: CREDITS,
                        flags: 0,
                        body: BodyOut::MsgP {
                            align: 4,
                            thresh: 1024,
                            chunks: EMPTY,
                        },
                    },
                    &null_reply(xid),
                ),
            ]
        } else {
            [0, RPCRDMA2_F_RESPONSE]
                .iter()
                .map(|&flags| {
                    message(
                        &HeaderOut {
                            xid,
                            vers,
                            credits: CREDITS,
                            flags,
                            body: BodyOut::ConnProp(&[]),
                        },
                        &[],
                    )
                })
                .collect()
        };
        for m in &decoys {
            srv.send(m);
        }
        pump(&net, &mut srv, &mut cli);
        assert_eq!(cli.poll_completion(), None, "v{vers}: no decoy completes the Call");
        srv.send(&reply_msg(vers, xid, CREDITS));
        pump(&net, &mut srv, &mut cli);
        let c = cli.poll_completion().expect("the Call completes");
        assert_eq!((c.id, c.xid, c.outcome), (id, xid, CallOutcome::Reply), "v{vers}");
        check_reply(&cli, id, &NULL).unwrap();
        cli.release(id);
        let s = cli.stats();
        assert_eq!(
            (s.ignored, s.replies, s.bad_replies, s.unmatched),
            (decoys.len() as u64, 1, 0, 0),
            "v{vers}: {s:?}"
        );
        assert_eq!(cli.link(), LinkState::Ready);
        assert_eq!(cli.shutdown(10_000), 0);
    }
}

/// Submit NULL Calls while the requester allows; their ids and XIDs as the
/// scripted responder received them.
fn submit_all(net: &SimNetwork, srv: &mut Scripted, cli: &mut Requester<'static, SimFabric>) -> Vec<(CallId, u32)> {
    let mut ids = vec![];
    while cli.can_submit() {
        ids.push(submit(cli, &NULL).unwrap());
        assert!(ids.len() <= CREDITS as usize, "more Calls than the requester asked for");
    }
    let before = srv.received.len();
    pump(net, srv, cli);
    assert_eq!(srv.received.len(), before + ids.len());
    ids.iter()
        .enumerate()
        .map(|(k, &id)| (id, srv.header(before + k).xid))
        .collect()
}

/// The credit field of RDMA_ERROR / RDMA2_ERROR is ignored (draft -09
/// s5.3.3: the requester MUST ignore it): an error answering the first
/// version 1 Call does not lift the one-message limit of negotiation (s7),
/// and an error never changes the limit the last grant set. Before, the
/// error's credit value became the limit (here: the requester's whole
/// request of 4).
#[test]
fn hostile_peer_requester_ignores_the_credit_field_of_error_replies() {
    for (seed, vers) in [(51u64, 1u32), (52, 2)] {
        let (net, mut srv, mut cli) = connect_scripted(2, seed, vers, 2);
        if vers == 1 {
            // One message at a time until a valid non-error grant (s7).
            let calls = submit_all(&net, &mut srv, &mut cli);
            assert_eq!(calls.len(), 1, "v1: one message until the first grant");
            srv.send(&error_msg(vers, calls[0].1, 32));
            pump(&net, &mut srv, &mut cli);
            let c = cli.poll_completion().expect("the error completes the Call");
            assert_eq!(c.outcome, CallOutcome::TransportErrorV1(V1Error::Chunk));
            cli.release(c.id);
            let calls = submit_all(&net, &mut srv, &mut cli);
            assert_eq!(calls.len(), 1, "v1: an error lifts no limit");
            srv.send(&reply_msg(vers, calls[0].1, 2));
            pump(&net, &mut srv, &mut cli);
            let c = cli.poll_completion().expect("the Reply");
            assert_eq!(c.outcome, CallOutcome::Reply);
            cli.release(c.id);
        }
        // Granted 2 (by the Reply in v1, by the RDMA2_CONNPROP answer in v2).
        let calls = submit_all(&net, &mut srv, &mut cli);
        assert_eq!(calls.len(), 2, "v{vers}: the grant of 2");
        srv.send(&error_msg(vers, calls[0].1, CREDITS));
        pump(&net, &mut srv, &mut cli);
        let c = cli.poll_completion().expect("the error completes the Call");
        assert_eq!(c.id, calls[0].0);
        assert!(
            matches!(
                c.outcome,
                CallOutcome::TransportErrorV1(_) | CallOutcome::TransportErrorV2(_)
            ),
            "{:?}",
            c.outcome
        );
        cli.release(c.id);
        let more = submit_all(&net, &mut srv, &mut cli);
        assert_eq!(
            more.len(),
            1,
            "v{vers}: still 2 in flight at most, not the error's {CREDITS}"
        );
        for (id, xid) in [calls[1], more[0]] {
            srv.send(&reply_msg(vers, xid, 2));
            pump(&net, &mut srv, &mut cli);
            let c = cli.poll_completion().expect("the Reply");
            assert_eq!((c.id, c.outcome), (id, CallOutcome::Reply), "v{vers}");
            cli.release(id);
        }
        assert_eq!(cli.stats().transport_errors, if vers == 1 { 2 } else { 1 });
        assert_eq!(cli.link(), LinkState::Ready);
        assert_eq!(cli.shutdown(10_000), 0);
    }
}

// ---------------------------------------------------------------------------
// The backward direction (RFC 8167) from a scripted responder
// ---------------------------------------------------------------------------

/// A backward Call in version `vers` with `xid`, asking for `credits`:
/// the chunk-free RDMA_MSG / RDMA2_MSG (RESPONSE clear) and the RPC Call.
fn backward_call_msg(vers: u32, xid: u32, credits: u32, chunks: ChunksOut<'_>) -> Vec<u8> {
    let h = HeaderOut {
        xid,
        vers,
        credits,
        flags: 0,
        body: BodyOut::Msg { inv_handle: 0, chunks },
    };
    message(&h, &backward_call(xid, b"cb"))
}

/// A backward Call whose XID equals a forward Call's in flight is told
/// apart by its direction (v1 `msg_type`, v2 the RESPONSE flag; RFC 8167
/// s5.1, draft -09 s3.2) before any XID lookup: it neither completes the
/// forward Call nor moves the forward credit limit with its credit field;
/// it is held, answered inline granting the backward credits, and the
/// forward Call still gets its own Reply.
#[test]
fn hostile_peer_requester_backward_call_with_a_forward_xid_is_not_a_reply() {
    for vers in [1, 2] {
        let (net, mut srv, mut cli) = connect_scripted_backward(4, 40 + vers as u64, vers, CREDITS, 2);
        let id = submit(&mut cli, &NULL).unwrap();
        pump(&net, &mut srv, &mut cli);
        let xid = last_xid(&srv);
        srv.send(&backward_call_msg(vers, xid, 100, EMPTY));
        pump(&net, &mut srv, &mut cli);
        assert!(
            cli.poll_completion().is_none(),
            "v{vers}: the forward Call is not completed"
        );
        let held: Vec<(u32, Vec<u8>)> = cli.backward_calls().map(|(x, m)| (x, m.to_vec())).collect();
        assert_eq!(held, vec![(xid, backward_call(xid, b"cb"))], "v{vers}");
        let reply = backward_reply(&held[0].1).unwrap();
        cli.reply_backward(xid, &reply).unwrap();
        assert_eq!(
            cli.reply_backward(xid, &reply),
            Err(SubmitError::UnknownXid),
            "answered once"
        );
        pump(&net, &mut srv, &mut cli);
        let h = srv.header(srv.received.len() - 1);
        assert_eq!(
            (h.xid, h.credits, h.is_response()),
            (xid, 2, vers == 2),
            "v{vers}: {h:?}"
        );
        assert_eq!(h.payload(), Some(&reply[..]), "v{vers}");
        // The forward Reply completes the forward Call.
        srv.send(&reply_msg(vers, xid, CREDITS));
        pump(&net, &mut srv, &mut cli);
        let c = cli.poll_completion().expect("completed");
        assert_eq!((c.id, c.outcome), (id, CallOutcome::Reply), "v{vers}");
        cli.release(id);
        let st = cli.stats();
        assert_eq!(
            (st.backward_calls, st.backward_replies, st.unmatched),
            (1, 1, 0),
            "v{vers}: {st:?}"
        );
        assert_eq!(cli.shutdown(10_000), 0);
    }
}

/// A backward Call carrying chunks is refused (RFC 8167 s5.1: backward
/// messages are inline) with RDMA_ERROR ERR_CHUNK / RDMA2_ERROR for its
/// XID, and never held; the link stays up.
#[test]
fn hostile_peer_requester_refuses_a_backward_call_with_chunks() {
    for vers in [1, 2] {
        let (net, mut srv, mut cli) = connect_scripted_backward(5, 50 + vers as u64, vers, CREDITS, 2);
        let seg = [header::Segment {
            handle: 7,
            length: 64,
            offset: 0x1000,
        }];
        let writes: [&[header::Segment]; 1] = [&seg];
        let chunks = ChunksOut {
            reads: &[],
            writes: &writes,
            reply: None,
        };
        let before = srv.received.len();
        srv.send(&backward_call_msg(vers, 0x5eed, 2, chunks));
        pump(&net, &mut srv, &mut cli);
        assert_eq!(cli.backward_held(), 0, "v{vers}");
        assert_eq!(cli.stats().backward_calls_refused, 1, "v{vers}");
        assert_eq!(srv.received.len(), before + 1, "v{vers}: answered");
        let h = srv.header(before);
        assert_eq!(h.xid, 0x5eed);
        match h.body {
            Body::ErrorV1(e) => assert_eq!((vers, e), (1, V1Error::Chunk)),
            Body::ErrorV2(e) => assert_eq!((vers, e), (2, header::V2Error::BadXdr)),
            other => panic!("v{vers}: {other:?}"),
        }
        assert_eq!(cli.link(), LinkState::Ready);
        assert_eq!(cli.shutdown(10_000), 0);
    }
}

/// More backward Calls than the backward credits (a server that ignores
/// the grant, RFC 8167 s4.1) are dropped and counted, never held beyond
/// them; those held are answered; a requester without a backchannel drops
/// every one.
#[test]
fn hostile_peer_requester_drops_backward_calls_beyond_its_credits() {
    {
        let (net, mut srv, mut cli) = connect_scripted_backward(6, 61, 1, CREDITS, 2);
        for k in 0..5 {
            srv.send(&backward_call_msg(1, 0xb000 + k, 8, EMPTY));
        }
        pump(&net, &mut srv, &mut cli);
        assert_eq!(cli.backward_held(), 2);
        let st = cli.stats();
        assert_eq!(
            (st.backward_calls, st.backward_overruns, st.wc_errors),
            (2, 3, 0),
            "{st:?}"
        );
        let held: Vec<(u32, Vec<u8>)> = cli.backward_calls().map(|(x, m)| (x, m.to_vec())).collect();
        for (x, m) in held {
            cli.reply_backward(x, &backward_reply(&m).unwrap()).unwrap();
        }
        assert_eq!(cli.backward_held(), 0);
        assert_eq!(cli.link(), LinkState::Ready);
        assert_eq!(cli.shutdown(10_000), 0);
    }
    let (net, mut srv, mut cli) = connect_scripted_backward(6, 62, 1, CREDITS, 0);
    srv.send(&backward_call_msg(1, 0xb100, 8, EMPTY));
    pump(&net, &mut srv, &mut cli);
    assert_eq!((cli.backward_held(), cli.stats().backward_unsupported), (0, 1));
    assert_eq!(cli.shutdown(10_000), 0);
}
