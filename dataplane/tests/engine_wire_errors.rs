//! The responder against a raw, misbehaving peer on the sim fabric: what goes on
//! the wire for malformed headers, unknown versions, MSGP and DONE, and what
//! happens on a credit overrun (RFC 8166 s3.3.1, s4.5, s4.6; draft s5.3.3, s7).

mod engine_common;

use std::sync::OnceLock;

use dataplane::responder::{Responder, ResponderConfig};
use dataplane::sim::{SimConfig, SimFabric, SimNetwork};
use dataplane::{
    Access, CmEvent, Completion, ConnId, CqId, Fabric, LocalBuf, QpConfig, RecvWr, RegionAccess, SendOp, SendWr,
    WcOpcode, WrId,
};
use engine_common::*;
use mempool::pool::PoolCache;
use proto::header::{self, Body, Limits, V1Error, V2Error};
use proto::negotiate::VersionRange;

const CREDITS: u32 = 4;

fn pools_for(test: usize) -> &'static Pools {
    static P: [OnceLock<Pools>; 22] = [const { OnceLock::new() }; 22];
    // Two connection slots: the SRQ holds receives for both, so one greedy peer
    // can take the other's share — the case the overrun check exists for.
    // Test 9 receives 4 KiB messages (version 2's default inline size).
    let inline = if test == 9 { 4096 } else { 1024 };
    P[test].get_or_init(|| pools(inline, CREDITS, 2))
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A raw peer: one connection, receives posted, sends whatever bytes it is given.
struct Raw<'p> {
    fab: SimFabric,
    cq: CqId,
    conn: ConnId,
    cache: PoolCache<'p>,
    send_cache: PoolCache<'p>,
    data_cache: PoolCache<'p>,
    p: &'static Pools,
    received: Vec<Vec<u8>>,
    /// For each received message: the rkey a Send with Invalidate invalidated.
    invalidated: Vec<Option<u32>>,
    disconnected: bool,
    established: bool,
    rkeys: Vec<u32>,
}

impl<'p> Raw<'p> {
    fn buf(&mut self) -> (LocalBuf, &'static mut [u8]) {
        let b = self.cache.get().expect("buffer").into_raw();
        let off = self.p.pool.offset(b).unwrap() as u64;
        // SAFETY: this test is the only holder of `b`; it is never returned.
        let bytes = unsafe { self.p.pool.bytes_mut(b) }.unwrap();
        (
            LocalBuf {
                region: b.region,
                offset: off,
                len: bytes.len() as u32,
            },
            bytes,
        )
    }
    fn send(&mut self, msg: &[u8]) {
        // Sends come from the send class so the receive pool is not drained.
        let b = self.send_cache.get().expect("send buffer").into_raw();
        let off = self.p.pool.offset(b).unwrap() as u64;
        // SAFETY: this test is the only holder of `b`; it is never returned.
        let bytes = unsafe { self.p.pool.bytes_mut(b) }.unwrap();
        let mut lb = LocalBuf {
            region: b.region,
            offset: off,
            len: 0,
        };
        bytes[..msg.len()].copy_from_slice(msg);
        lb.len = msg.len() as u32;
        let wr = SendWr::new(WrId::new(9, 0), SendOp::Send, lb, Default::default());
        self.fab.post_send(self.conn, &wr).expect("post");
    }
    /// A long call (RDMA_NOMSG + Position-Zero Read chunk) of SUM over `n` bytes,
    /// exposed from a data buffer: it stays outstanding at the responder while
    /// the RDMA Read runs.
    fn send_long_call(&mut self, xid: u32, n: usize) -> u32 {
        self.send_long_call_in(xid, n, 1)
    }

    /// [`Raw::send_long_call`] with its Position-Zero Read chunk cut into
    /// `segments` segments of (nearly) equal length, one Read list entry
    /// each (RFC 8166 s3.4.5: segments of one chunk share a position).
    fn send_long_call_in(&mut self, xid: u32, n: usize, segments: u32) -> u32 {
        self.send_long_call_as(xid, xid, n, segments)
    }

    /// A version 2 Long Call (RDMA2_NOMSG, the RPC message of SUM over `n`
    /// bytes in one Position-Zero Read chunk) whose `rdma_inv_handle` is
    /// the Read chunk's own handle (draft -09 s3.3), which it returns.
    fn send_long_call_v2(&mut self, xid: u32, n: usize) -> u32 {
        let b = self.data_cache.get().expect("data buffer").into_raw();
        let off = self.p.pool.offset(b).unwrap() as u64;
        // SAFETY: this test is the only holder of `b`; it is never returned.
        let bytes = unsafe { self.p.pool.bytes_mut(b) }.unwrap();
        let len = encode_call(bytes, P_SUM, &pattern(xid, n), 0, 0).unwrap() as u32;
        bytes[..4].copy_from_slice(&xid.to_be_bytes());
        let addr = self.fab.remote_addr(b.region, off).unwrap();
        let rkey = self.rkeys[b.region as usize];
        let hdr = words(&[
            xid,
            2,
            4,
            1,
            0,
            rkey,
            1,
            0,
            rkey,
            len,
            (addr >> 32) as u32,
            addr as u32,
            0,
            0,
            0,
        ]);
        self.send(&hdr);
        rkey
    }

    /// [`Raw::send_long_call_in`] whose RPC message (pulled by RDMA Read)
    /// carries `rpc_xid`, which a well-behaved peer makes equal to the
    /// transport header's `xid` (RFC 8166 s4.1).
    fn send_long_call_as(&mut self, xid: u32, rpc_xid: u32, n: usize, segments: u32) -> u32 {
        let b = self.data_cache.get().expect("data buffer").into_raw();
        let off = self.p.pool.offset(b).unwrap() as u64;
        // SAFETY: this test is the only holder of `b`; it is never returned.
        let bytes = unsafe { self.p.pool.bytes_mut(b) }.unwrap();
        let len = encode_call(bytes, P_SUM, &pattern(xid, n), 0, 0).unwrap();
        bytes[..4].copy_from_slice(&rpc_xid.to_be_bytes());
        let addr = self.fab.remote_addr(b.region, off).unwrap();
        let rkey = self.rkeys[b.region as usize];
        // RDMA_NOMSG, then the Read list: one entry per segment, all at
        // position zero; empty Write list and Reply chunk.
        let mut hdr = words(&[xid, 1, 1, 1]);
        let step = (len as u32).div_ceil(segments);
        let mut at = 0u32;
        while at < len as u32 {
            let seg = step.min(len as u32 - at);
            let a = addr + u64::from(at);
            hdr.extend(words(&[1, 0, rkey, seg, (a >> 32) as u32, a as u32]));
            at += seg;
        }
        hdr.extend(words(&[0, 0, 0]));
        self.send(&hdr);
        rkey
    }

    fn poll(&mut self) {
        let mut wcs = [Completion::EMPTY; 16];
        let n = self.fab.poll_cq(self.cq, &mut wcs);
        for wc in &wcs[..n] {
            if wc.opcode == WcOpcode::Recv && wc.status.is_success() {
                let b = mempool::pool::BufRef::from_u64(wc.wr_id.index()).unwrap();
                // SAFETY: the receive completed; the test holds the buffer.
                let bytes = unsafe { self.p.pool.bytes(b) }.unwrap();
                self.received.push(bytes[..wc.byte_len as usize].to_vec());
                self.invalidated.push(wc.invalidated_rkey);
            }
        }
        while let Some(ev) = self.fab.poll_cm() {
            match ev {
                CmEvent::Disconnected { .. } => self.disconnected = true,
                CmEvent::Established { .. } => self.established = true,
                _ => {}
            }
        }
    }
}

fn setup(
    test: usize,
    seed: u64,
    versions: VersionRange,
) -> (SimNetwork, Responder<'static, SimFabric, TestService>, Raw<'static>) {
    let p = pools_for(test);
    let net = SimNetwork::new(SimConfig::with_seed(seed));
    let srv = responder_on(&net, p, responder_cfg(p, versions, CREDITS, 2));
    let raw = raw_peer(&net, p, 16, 1);
    (net, srv, raw)
}

/// A responder configured by `cfg` listening at "srv" on `net`.
fn responder_on(
    net: &SimNetwork,
    p: &'static Pools,
    cfg: ResponderConfig,
) -> Responder<'static, SimFabric, TestService> {
    Responder::new(
        cfg,
        net.endpoint(),
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some("srv"),
    )
    .unwrap()
}

/// A raw peer connected (or connecting) to "srv" on `net` with `receives`
/// receive buffers posted (none: every Send to it stalls in RNR retries),
/// taking buffers through the pool's per-core caches of `core` (1 or 2).
fn raw_peer(net: &SimNetwork, p: &'static Pools, receives: usize, core: usize) -> Raw<'static> {
    raw_peer_with(net, p, receives, core, &[])
}

/// [`raw_peer`] whose connect request carries `private_data` (RFC 8797).
fn raw_peer_with(
    net: &SimNetwork,
    p: &'static Pools,
    receives: usize,
    core: usize,
    private_data: &[u8],
) -> Raw<'static> {
    let mut fab = net.endpoint();
    for r in &p.regions {
        fab.register_region(r, RegionAccess::Exposable).unwrap();
    }
    let cq = fab.create_cq(64).unwrap();
    let conn = fab
        .connect(
            "srv",
            &QpConfig {
                cq,
                recv_depth: 32,
                ..QpConfig::default()
            },
            private_data,
        )
        .unwrap();
    // The raw peer offers each region whole (Read and Write) to this one
    // connection, as a careless requester might.
    let mut rkeys = vec![0; p.regions.len()];
    for r in &p.regions {
        let whole = LocalBuf {
            region: r.id(),
            offset: 0,
            len: r.len() as u32,
        };
        rkeys[r.id() as usize] = fab.expose(conn, whole, Access::ReadWrite).unwrap().handle;
    }
    let mut raw = Raw {
        fab,
        cq,
        conn,
        cache: p.pool.cache(p.recv, core).unwrap(),
        send_cache: p.pool.cache(p.send, core).unwrap(),
        data_cache: p.pool.cache(p.data, core).unwrap(),
        p,
        received: vec![],
        invalidated: vec![],
        disconnected: false,
        established: false,
        rkeys,
    };
    for _ in 0..receives {
        let (lb, _) = raw.buf();
        // Post with the buffer's handle as wr_id so the completion finds it.
        let handle = buf_ref_of(p, lb);
        raw.fab
            .post_recv(
                conn,
                &RecvWr {
                    wr_id: WrId::new(1, handle.to_u64()),
                    buf: lb,
                },
            )
            .unwrap();
    }
    raw
}

/// Recover the pool handle of a buffer from its (region, offset).
fn buf_ref_of(p: &Pools, lb: LocalBuf) -> mempool::pool::BufRef {
    let info = p.pool.class_info(p.recv).unwrap();
    for index in 0..info.count {
        let b = mempool::pool::BufRef {
            region: lb.region,
            class: p.recv.get(),
            index,
        };
        if p.pool.offset(b) == Some(lb.offset as usize) {
            return b;
        }
    }
    panic!("not a recv buffer");
}

fn pump<S: dataplane::service::Service>(
    net: &SimNetwork,
    srv: &mut Responder<'static, SimFabric, S>,
    raw: &mut Raw<'static>,
    rounds: usize,
) {
    // Connection setup first: the responder polls CM only every few turns.
    for _ in 0..10_000 {
        if raw.established {
            break;
        }
        srv.poll();
        raw.poll();
        net.step();
    }
    assert!(raw.established, "raw peer never connected");
    for _ in 0..rounds {
        srv.poll();
        raw.poll();
        if net.run_until_idle(10_000).is_err() {
            break;
        }
    }
}

const XID: u32 = 0xabcd_0001;

/// A v1 NULL call (RPC header only), inline.
fn v1_null(xid: u32, credits: u32) -> Vec<u8> {
    let mut m = words(&[xid, 1, credits, 0, 0, 0, 0]);
    m.extend(words(&[xid, 0, 2, PROG, VERS, P_NULL, 0, 0, 0, 0]));
    m
}

#[test]
fn malformed_headers_get_the_specs_errors() {
    let (net, mut srv, mut raw) = setup(0, 7, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    type Check = Box<dyn Fn(&header::Header) -> bool>;
    let cases: Vec<(Vec<u8>, Check)> = vec![
        // unknown version 7 → ERR_VERS 1..2, v1 layout under version word 7
        (words(&[XID, 7, 1, 0, 0, 0, 0]), Box::new(|_| true)),
        // bad optional-data discriminant in the Read list → ERR_CHUNK
        (
            words(&[XID + 1, 1, 1, 0, 5, 0, 0]),
            Box::new(|h| h.body == Body::ErrorV1(V1Error::Chunk)),
        ),
        // unaligned Read position → ERR_CHUNK
        (
            words(&[XID + 2, 1, 1, 0, 1, 6, 1, 4, 0, 0, 0, 0, 0, XID + 2, 0]),
            Box::new(|h| h.body == Body::ErrorV1(V1Error::Chunk)),
        ),
        // RDMA_MSGP → ERR_CHUNK (RFC 8166 s4.6)
        (
            words(&[XID + 3, 1, 1, 2, 4, 1024, 0, 0, 0, XID + 3, 0]),
            Box::new(|h| h.body == Body::ErrorV1(V1Error::Chunk)),
        ),
    ];
    let n = cases.len();
    for (m, _) in &cases {
        raw.send(m);
        pump(&net, &mut srv, &mut raw, 3);
    }
    assert_eq!(raw.received.len(), n, "one answer per bad message");
    // ERR_VERS in the v1 layout under the offending version word.
    assert_eq!(header::peek_err_vers_v1_layout(&raw.received[0]), Some((1, 2)));
    assert_eq!(header::peek_prefix(&raw.received[0]).unwrap().vers, 7);
    for (k, (_, check)) in cases.iter().enumerate().skip(1) {
        let h = header::decode(&raw.received[k], &Limits::DEFAULT).unwrap();
        assert_eq!(h.xid, XID + k as u32, "the error copies the XID");
        assert!(check(&h), "case {k}: {:?}", h.body);
        assert!(h.credits >= 1, "never a zero grant");
    }
    // RDMA_DONE is ignored silently.
    raw.send(&words(&[XID + 9, 1, 1, 3]));
    pump(&net, &mut srv, &mut raw, 3);
    assert_eq!(raw.received.len(), n);
    // The connection still works.
    raw.send(&v1_null(XID + 10, 1));
    pump(&net, &mut srv, &mut raw, 3);
    let h = header::decode(raw.received.last().unwrap(), &Limits::DEFAULT).unwrap();
    assert_eq!(h.header_type(), header::HeaderType::RdmaMsg);
    assert_eq!(srv.stats().error_replies, 4);
}

#[test]
fn v2_errors_use_rdma2_codes() {
    let (net, mut srv, mut raw) = setup(1, 8, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    // Unknown v2 header type → RDMA2_ERR_INVAL_HTYPE.
    raw.send(&words(&[XID, 2, 1, 9, 0]));
    pump(&net, &mut srv, &mut raw, 3);
    // Too many Write chunks → RDMA2_ERR_WRITE_CHUNKS with the limit.
    let mut m = words(&[XID + 1, 2, 1, 0, 0, 0, 0]);
    for _ in 0..9 {
        m.extend(words(&[1, 0]));
    }
    m.extend(words(&[0, 0, XID + 1, 0]));
    raw.send(&m);
    pump(&net, &mut srv, &mut raw, 3);
    assert_eq!(raw.received.len(), 2);
    let h0 = header::decode(&raw.received[0], &Limits::DEFAULT).unwrap();
    assert_eq!(h0.body, Body::ErrorV2(V2Error::InvalHtype));
    assert!(h0.is_response(), "RDMA2_ERROR carries RESPONSE (draft s3.2)");
    let h1 = header::decode(&raw.received[1], &Limits::DEFAULT).unwrap();
    assert_eq!(h1.body, Body::ErrorV2(V2Error::WriteChunks { max_chunks: 8 }));
    // A v1 message on this v2 connection: ERR_VERS in v1 with the fixed version.
    raw.send(&v1_null(XID + 2, 1));
    pump(&net, &mut srv, &mut raw, 3);
    let h2 = header::decode(&raw.received[2], &Limits::DEFAULT).unwrap();
    assert_eq!(h2.body, Body::ErrorV1(V1Error::Vers { low: 2, high: 2 }));
}

#[test]
fn credit_overrun_closes_the_connection_and_returns_buffers() {
    let (net, mut srv, mut raw) = setup(2, 9, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    // Send far more calls than credits without waiting for replies, while the
    // responder is not polled, so they are all outstanding at once.
    for k in 0..(CREDITS * 2) {
        raw.send_long_call(XID + k, 1500);
    }
    // The SRQ (2 x 4 receives) let 8 calls in; the 5th outstanding one on this
    // connection is an overrun (RFC 8166 s3.3.1): the connection is closed.
    expect_overrun(&net, &mut srv, &mut raw, CREDITS as u64);
}

/// Deliver everything sent before the responder runs, then run it: an
/// overrun closes the connection (RFC 8166 s3.3.1) after at most
/// `max_replies` replies, and every buffer comes back.
fn expect_overrun(
    net: &SimNetwork,
    srv: &mut Responder<'static, SimFabric, TestService>,
    raw: &mut Raw<'static>,
    max_replies: u64,
) {
    let _ = net.run_until_idle(100_000);
    pump(net, srv, raw, 10);
    let s = srv.stats();
    assert!(s.credit_overruns >= 1, "{s:?}");
    assert!(raw.disconnected, "the peer sees the connection go");
    assert!(s.replies <= max_replies, "never more calls served than granted: {s:?}");
    assert_eq!(srv.shutdown(1000), Default::default());
}

/// The overrun made by a chunk-free Call, once the first Call has fixed the
/// connection's version, while Calls with Read chunks hold every credit
/// (their RDMA Reads in flight): the responder's one-pass path for
/// chunk-free Calls counts credits as the state machine does.
#[test]
fn chunk_free_credit_overrun_closes_the_connection_and_returns_buffers() {
    let (net, mut srv, mut raw) = setup(5, 11, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    // Chunk-free Calls, each answered as it is received (so never an
    // overrun), which also leave their request slots holding reply buffers.
    let warm = CREDITS * 2;
    for k in 0..warm {
        raw.send(&v1_null(XID + k, CREDITS));
    }
    pump(&net, &mut srv, &mut raw, 5);
    assert_eq!(raw.received.len(), warm as usize, "every chunk-free Call is answered");
    assert_eq!(srv.stats().credit_overruns, 0);
    for k in 0..CREDITS {
        raw.send_long_call(XID + warm + k, 1500);
    }
    for k in 0..CREDITS {
        raw.send(&v1_null(XID + warm + CREDITS + k, CREDITS));
    }
    expect_overrun(&net, &mut srv, &mut raw, (warm + CREDITS) as u64);
}

/// Send With Invalidate in version 2 (draft -09 s3.3): the responder
/// invalidates the Call's `rdma_inv_handle` only when it names one of the
/// Call's own chunk segments. A handle the Call did not advertise (here the
/// peer's whole registered region, named on a chunk-free Call) gets a plain
/// Send: a peer cannot make the responder invalidate memory it did not offer
/// for that Call. Before, the responder invalidated whatever it was told.
#[test]
fn hostile_peer_v2_inv_handle_is_invalidated_only_when_the_call_advertised_it() {
    let (net, mut srv, mut raw) = setup(3, 10, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    let handle = raw.rkeys[0];
    // A v2 NULL Call naming a handle it does not advertise: plain Send.
    let mut m = words(&[XID, 2, 4, 0, 0, handle, 0, 0, 0]);
    m.extend(words(&[XID, 0, 2, PROG, VERS, P_NULL, 0, 0, 0, 0]));
    raw.send(&m);
    pump(&net, &mut srv, &mut raw, 3);
    // The same without an inv_handle: a plain Send.
    let mut m = words(&[XID + 1, 2, 4, 0, 0, 0, 0, 0, 0]);
    m.extend(words(&[XID + 1, 0, 2, PROG, VERS, P_NULL, 0, 0, 0, 0]));
    raw.send(&m);
    pump(&net, &mut srv, &mut raw, 3);
    // A v2 Long Call whose inv_handle is its own Read chunk's handle: Send
    // With Invalidate of it.
    let own = raw.send_long_call_v2(XID + 2, 1500);
    pump(&net, &mut srv, &mut raw, 5);
    assert_eq!(raw.received.len(), 3, "{:?}", srv.stats());
    let h = header::decode(&raw.received[0], &Limits::DEFAULT).unwrap();
    assert_eq!((h.header_type(), h.is_response()), (header::HeaderType::Rdma2Msg, true));
    let h = header::decode(&raw.received[2], &Limits::DEFAULT).unwrap();
    assert_eq!((h.xid, h.header_type()), (XID + 2, header::HeaderType::Rdma2Msg));
    assert_eq!(raw.invalidated, vec![None, None, Some(own)]);
    assert_eq!(srv.stats().sends_with_invalidate, 1);
    assert!(!raw.disconnected);
}

/// Version 1 remote invalidation (RFC 8797 s3.2, s5.1): a responder whose
/// configuration allows it, connected to a requester that set the R flag in
/// its CM private data, answers a Call with chunks by RDMA Send with
/// Invalidate of a handle that Call advertised (here its Read chunk's), and a
/// chunk-free Call by a plain Send. Where either side did not set R, every
/// Reply is a plain Send. (The target turns it on by default:
/// `$.rdma.remote_invalidation`; the Linux client sets R.)
#[test]
fn v1_remote_invalidation_only_when_both_peers_set_r() {
    use proto::private_data::PrivateData as Rfc8797;
    let pd_r = Rfc8797::new(true, 4096, 4096).to_bytes().unwrap();
    let pd_no_r = Rfc8797::new(false, 4096, 4096).to_bytes().unwrap();
    // (pools, responder allows it, the peer's private data, Send With
    // Invalidate expected)
    let cases: [(usize, bool, &[u8], bool); 4] = [
        (18, true, &pd_r, true),
        (19, true, &pd_no_r, false),
        (20, false, &pd_r, false),
        (21, true, &[], false),
    ];
    for (test, allow, pd, expect_inv) in cases {
        let p = pools_for(test);
        let net = SimNetwork::new(SimConfig::with_seed(30 + test as u64));
        let cfg = ResponderConfig {
            remote_invalidation: allow,
            ..responder_cfg(p, VersionRange::ALL, CREDITS, 2)
        };
        let mut srv = responder_on(&net, p, cfg);
        let mut raw = raw_peer_with(&net, p, 16, 1, pd);
        pump(&net, &mut srv, &mut raw, 5);
        raw.send(&v1_null(XID, CREDITS));
        pump(&net, &mut srv, &mut raw, 5);
        let own = raw.send_long_call(XID + 1, 1500);
        pump(&net, &mut srv, &mut raw, 5);
        let case = format!("pools {test}, responder allows {allow}, peer private data {pd:?}");
        assert_eq!(raw.received.len(), 2, "{case}: {:?}", srv.stats());
        let h = header::decode(&raw.received[1], &Limits::DEFAULT).unwrap();
        assert_eq!(
            (h.xid, h.header_type()),
            (XID + 1, header::HeaderType::RdmaMsg),
            "{case}"
        );
        let want = if expect_inv { Some(own) } else { None };
        assert_eq!(raw.invalidated, vec![None, want], "{case}");
        assert_eq!(srv.stats().sends_with_invalidate, u64::from(expect_inv), "{case}");
        assert!(!raw.disconnected, "{case}");
    }
}

/// A Call whose chunks cannot be planned is answered with ERR_CHUNK and its
/// credit comes back: more such Calls than credits, one at a time, never
/// overrun the connection (RFC 8166 s3.3.1 counts answered Calls only).
#[test]
fn calls_answered_with_plan_errors_return_their_credit() {
    let (net, mut srv, mut raw) = setup(4, 10, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    let rounds = CREDITS * 2 + 1;
    for k in 0..rounds {
        let xid = XID + k;
        // RDMA_MSG with a Position-Zero Read chunk: decodes, but planning
        // refuses it (s3.5.3: Position Zero only with RDMA_NOMSG).
        let mut m = words(&[xid, 1, CREDITS, 0, 1, 0, 1, 64, 0, 0, 0, 0, 0]);
        m.extend(words(&[xid, 0, 2, PROG, VERS, P_NULL, 0, 0, 0, 0]));
        raw.send(&m);
        pump(&net, &mut srv, &mut raw, 3);
        let h = header::decode(raw.received.last().unwrap(), &Limits::DEFAULT).unwrap();
        assert_eq!((h.xid, h.body), (xid, Body::ErrorV1(V1Error::Chunk)), "call {k}");
    }
    raw.send(&v1_null(XID + rounds, CREDITS));
    pump(&net, &mut srv, &mut raw, 3);
    let h = header::decode(raw.received.last().unwrap(), &Limits::DEFAULT).unwrap();
    assert_eq!(
        h.header_type(),
        header::HeaderType::RdmaMsg,
        "the connection still serves"
    );
    let s = srv.stats();
    assert_eq!((s.credit_overruns, s.error_replies), (0, rounds as u64), "{s:?}");
    assert!(!raw.disconnected);
    assert_eq!(srv.shutdown(1000), Default::default());
}

/// A Call whose Read chunk has more segments than the connection has RDMA
/// Read slots posts its Reads in turns; the Reads of the first turn that
/// complete while the rest wait for slots count toward the Call, so it is
/// answered (before the fix they were not counted and the Call waited
/// forever, unanswered, holding its credit and its data buffer).
#[test]
fn every_call_answered_when_its_read_chunk_outnumbers_the_read_slots() {
    let (net, mut srv, mut raw) = setup(6, 12, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    // `responder_cfg` allows 4 RDMA Reads at once; these chunks have 6 and 9.
    raw.send_long_call_in(XID, 1500, 6);
    raw.send_long_call_in(XID + 1, 3000, 9);
    pump(&net, &mut srv, &mut raw, 20);
    assert_eq!(raw.received.len(), 2, "both Calls answered: {:?}", srv.stats());
    for (k, m) in raw.received.iter().enumerate() {
        let h = header::decode(m, &Limits::DEFAULT).unwrap();
        assert_eq!((h.xid, h.header_type()), (XID + k as u32, header::HeaderType::RdmaMsg));
        // SUM's reply: the RPC header, then the length and checksum summed.
        let reply = h.payload().unwrap();
        let n = [1500usize, 3000][k];
        let sum = pattern(XID + k as u32, n);
        let tail = &reply[reply.len() - 8..];
        assert_eq!(tail[..4], (n as u32).to_be_bytes(), "call {k}: length");
        assert_eq!(
            tail[4..],
            checksum(&sum).to_be_bytes(),
            "call {k}: checksum of the pulled data"
        );
    }
    let s = srv.stats();
    assert_eq!((s.calls, s.replies, s.rdma_reads), (2, 2, 15), "{s:?}");
    assert_eq!(srv.shutdown(1000), Default::default());
}

/// A Call whose RPC message the service cannot parse (here: a truncated RPC
/// header) is answered with the transport's error for its XID, ERR_CHUNK in
/// version 1 and RDMA2_ERR_SYSTEM in version 2, and its credit comes back:
/// more such Calls than credits, one at a time, never overrun the
/// connection, which goes on serving. Before, the engine sent nothing and
/// the requester lost the credit until its RPC timed out.
#[test]
fn hostile_peer_call_the_service_cannot_parse_is_answered_and_returns_its_credit() {
    for (test, v) in [(7usize, 1u32), (7, 2)] {
        let (net, mut srv, mut raw) = setup(test, 13 + u64::from(v), VersionRange::ALL);
        pump(&net, &mut srv, &mut raw, 5);
        let rounds = CREDITS * 2 + 1;
        for k in 0..rounds {
            let xid = XID + k;
            // RDMA_MSG (RDMA2_MSG: the inv_handle word and no RESPONSE),
            // three empty lists, then only the XID and CALL of an RPC header.
            let mut m = if v == 1 {
                words(&[xid, 1, CREDITS, 0, 0, 0, 0])
            } else {
                words(&[xid, 2, CREDITS, 0, 0, 0, 0, 0, 0])
            };
            m.extend(words(&[xid, 0, 2]));
            raw.send(&m);
            pump(&net, &mut srv, &mut raw, 3);
            assert_eq!(
                raw.received.len(),
                k as usize + 1,
                "v{v} call {k} answered: {:?}",
                srv.stats()
            );
            let h = header::decode(raw.received.last().unwrap(), &Limits::DEFAULT).unwrap();
            let want = if v == 1 {
                Body::ErrorV1(V1Error::Chunk)
            } else {
                Body::ErrorV2(V2Error::System)
            };
            assert_eq!((h.xid, h.body), (xid, want), "v{v} call {k}");
        }
        let mut m = v1_null(XID + rounds, CREDITS);
        if v == 2 {
            m = words(&[XID + rounds, 2, CREDITS, 0, 0, 0, 0, 0, 0]);
            m.extend(words(&[XID + rounds, 0, 2, PROG, VERS, P_NULL, 0, 0, 0, 0]));
        }
        raw.send(&m);
        pump(&net, &mut srv, &mut raw, 3);
        let h = header::decode(raw.received.last().unwrap(), &Limits::DEFAULT).unwrap();
        assert_eq!(h.xid, XID + rounds);
        assert!(
            matches!(h.body, Body::Msg { .. }),
            "v{v}: the connection still serves: {:?}",
            h.body
        );
        let s = srv.stats();
        assert_eq!(s.credit_overruns, 0, "{s:?}");
        assert_eq!(
            (s.service_rejected, s.call_errors),
            (rounds as u64, rounds as u64),
            "{s:?}"
        );
        assert_eq!((s.unaccounted(0), s.unanswered()), (0, 0), "{s:?}");
        assert!(!raw.disconnected);
        assert_eq!(srv.shutdown(1000), Default::default());
    }
}

/// A Long Call (RDMA_NOMSG, the RPC message in a Position-Zero Read chunk)
/// whose RPC message carries another XID than its transport header is
/// refused with ERR_CHUNK under the header's XID before the service sees it
/// (RFC 8166 s4.1: rdma_xid is the XID of the RPC message; s4.5), its credit
/// comes back and the connection goes on serving. Before, the service ran
/// the Call and the Reply went out under a XID the requester never sent.
#[test]
fn hostile_peer_long_call_whose_rpc_xid_differs_is_refused() {
    let (net, mut srv, mut raw) = setup(8, 15, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    for k in 0..CREDITS * 2 {
        raw.send_long_call_as(XID + k, XID + 1000 + k, 1500, 1);
        pump(&net, &mut srv, &mut raw, 5);
        assert_eq!(raw.received.len(), k as usize + 1, "call {k} answered");
        let h = header::decode(raw.received.last().unwrap(), &Limits::DEFAULT).unwrap();
        assert_eq!((h.xid, h.body), (XID + k, Body::ErrorV1(V1Error::Chunk)), "call {k}");
    }
    // The same Call with matching XIDs is served.
    raw.send_long_call_as(XID + 99, XID + 99, 1500, 1);
    pump(&net, &mut srv, &mut raw, 5);
    let h = header::decode(raw.received.last().unwrap(), &Limits::DEFAULT).unwrap();
    assert_eq!((h.xid, h.header_type()), (XID + 99, header::HeaderType::RdmaMsg));
    let s = srv.stats();
    assert_eq!(
        (s.call_errors, s.replies, s.credit_overruns),
        (u64::from(CREDITS) * 2, 1, 0),
        "{s:?}"
    );
    assert_eq!((s.unaccounted(0), s.unanswered()), (0, 0), "{s:?}");
    assert!(!raw.disconnected);
    assert_eq!(srv.shutdown(1000), Default::default());
}

/// A version 2 connection's inline threshold toward the peer is the
/// peer's Receive Buffer Size: the default 4096 bytes when it advertised
/// none (draft -09 s4.2.1), and what it sends in RDMA2_CONNPROP (s7.1)
/// when it does. A reply of about 3 KiB to a Call without a Reply chunk
/// goes inline by default, and is refused (RDMA2_ERR_REPLY_RESOURCE) once
/// the peer has said it receives at most 2 KiB; 1.5 KiB still goes inline.
/// Before, the responder used version 1's 1024 bytes whatever the peer
/// said, refusing the 3 KiB reply that draft -09 allows.
#[test]
fn hostile_peer_v2_inline_threshold_follows_the_peers_rbsiz() {
    use proto::header::{BodyOut, HeaderOut, Property, RDMA2_PROPID_RBSIZ, RPCRDMA2_F_RESPONSE};
    let (net, mut srv, mut raw) = setup(9, 16, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    let v2_big = |xid: u32, n: u32| {
        let mut m = words(&[xid, 2, CREDITS, 0, 0, 0, 0, 0, 0]);
        m.extend(words(&[xid, 0, 2, PROG, VERS, P_BIG, 0, 0, 0, 0, n]));
        m
    };
    raw.send(&v2_big(XID, 3000));
    pump(&net, &mut srv, &mut raw, 3);
    let h = header::decode(&raw.received[0], &Limits::DEFAULT).unwrap();
    assert_eq!(
        (h.xid, h.header_type()),
        (XID, header::HeaderType::Rdma2Msg),
        "3 KiB inline under the default RBSIZ: {:?}",
        h.body
    );
    // The peer advertises a 2 KiB Receive Buffer Size.
    let rbsiz = 2048u32.to_be_bytes();
    let props = [Property {
        id: RDMA2_PROPID_RBSIZ,
        data: &rbsiz,
    }];
    let mut m = vec![0u8; 64];
    let n = header::encode(
        &HeaderOut {
            xid: XID + 1,
            vers: 2,
            credits: CREDITS,
            flags: 0,
            body: BodyOut::ConnProp(&props),
        },
        &mut m,
    )
    .unwrap();
    raw.send(&m[..n]);
    pump(&net, &mut srv, &mut raw, 3);
    let h = header::decode(&raw.received[1], &Limits::DEFAULT).unwrap();
    assert!(matches!(h.body, Body::ConnProp(_)), "{:?}", h.body);
    assert_ne!(h.flags & RPCRDMA2_F_RESPONSE, 0);
    raw.send(&v2_big(XID + 2, 3000));
    pump(&net, &mut srv, &mut raw, 3);
    let h = header::decode(&raw.received[2], &Limits::DEFAULT).unwrap();
    assert!(
        matches!(h.body, Body::ErrorV2(V2Error::ReplyResource { .. })),
        "over the advertised 2 KiB without a Reply chunk: {:?}",
        h.body
    );
    raw.send(&v2_big(XID + 3, 1500));
    pump(&net, &mut srv, &mut raw, 3);
    let h = header::decode(&raw.received[3], &Limits::DEFAULT).unwrap();
    assert_eq!((h.xid, h.header_type()), (XID + 3, header::HeaderType::Rdma2Msg));
    assert!(!raw.disconnected);
}

/// A reply's grant promises receives (RFC 8166 s3.3.1): the shared receive
/// queue is refilled before a reply is posted, not at the end of the poll
/// that received the Call, so no reply ever grants more than the receives
/// already waiting. Chunk-free Calls (answered within the poll that
/// received them), Long Calls and error answers all count. Before, every
/// reply posted within a poll went out while the queue was one or more
/// receives short.
#[test]
fn hostile_peer_reply_grants_only_receives_already_posted() {
    let (net, mut srv, mut raw) = setup(10, 17, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    for k in 0..CREDITS * 2 {
        raw.send(&v1_null(XID + k, CREDITS));
        pump(&net, &mut srv, &mut raw, 3);
    }
    for k in 0..CREDITS {
        raw.send_long_call(XID + 100 + k, 1500);
        pump(&net, &mut srv, &mut raw, 5);
    }
    // RDMA_MSGP: answered with ERR_CHUNK, which grants too.
    raw.send(&words(&[XID + 200, 1, 1, 2, 4, 1024, 0, 0, 0, XID + 200, 0]));
    pump(&net, &mut srv, &mut raw, 3);
    let s = srv.stats();
    assert_eq!(raw.received.len() as u32, CREDITS * 3 + 1, "{s:?}");
    assert_eq!(s.grants_ahead_of_receives, 0, "{s:?}");
    assert_eq!(srv.shutdown(1000), Default::default());
}

/// Whether every data buffer's debug guard (the bytes after its end, see
/// `mempool::pool::GUARD_BYTES`) still holds the guard pattern.
fn data_guards_intact(p: &Pools) -> bool {
    let info = p.pool.class_info(p.data).unwrap();
    (0..info.count).all(|index| {
        let (ptr, len) = p
            .regions
            .iter()
            .find_map(|r| {
                p.pool.buf_ptr(mempool::pool::BufRef {
                    region: r.id(),
                    class: p.data.get(),
                    index,
                })
            })
            .expect("a data buffer");
        // SAFETY: the guard bytes follow each buffer inside its stride
        // (mempool's layout); the responder is shut down and this test holds
        // no data buffer that a Read could be writing.
        let guard = unsafe { core::slice::from_raw_parts(ptr.as_ptr().add(len), mempool::pool::GUARD_BYTES) };
        guard.iter().all(|&g| g == mempool::pool::GUARD_PATTERN)
    })
}

/// Issue 20 item 2 at the engine level: a Call with two Read chunks of 1
/// and D-1 bytes (D = the data buffer size, which is also the configured
/// Read limit) passes a check of the segment lengths' sum, but the second
/// chunk is placed after the first and its 3 bytes of XDR padding
/// (RFC 8166 s3.4.5.2): its RDMA Read would end 3 bytes past the Call's
/// data buffer, in the next one. The responder refuses the Call with
/// ERR_CHUNK before any RDMA Read, the connection goes on serving, and
/// every data buffer's debug guard is intact (a release build has no guard;
/// the other checks stand alone). Before the fix the Reads ran and
/// overwrote the guard (the debug canary).
#[test]
fn hostile_peer_read_chunks_placed_past_the_data_buffer_are_refused_before_any_read() {
    let (net, mut srv, mut raw) = setup(17, 23, VersionRange::ALL);
    pump(&net, &mut srv, &mut raw, 5);
    let d = raw.p.pool.class_info(raw.p.data).unwrap().buf_size as u32;
    assert_eq!(
        u64::from(d),
        responder_cfg(raw.p, VersionRange::ALL, CREDITS, 2).max_read_bytes
    );
    // The chunks' source: one of the raw peer's data buffers (exposed whole).
    let b = raw.data_cache.get().expect("data buffer").into_raw();
    let off = raw.p.pool.offset(b).unwrap() as u64;
    let addr = raw.fab.remote_addr(b.region, off).unwrap();
    let rkey = raw.rkeys[b.region as usize];
    // RDMA_MSG: a NULL Call's RPC header inline (40 bytes); Read chunk of 1
    // byte at position 40 and of D-1 bytes at 44 (after the 1 and its 3 pad).
    let mut m = words(&[XID, 1, CREDITS]);
    m.extend(words(&[0, 1, 40, rkey, 1, (addr >> 32) as u32, addr as u32]));
    m.extend(words(&[1, 44, rkey, d - 1, (addr >> 32) as u32, addr as u32]));
    m.extend(words(&[0, 0, 0]));
    m.extend(words(&[XID, 0, 2, PROG, VERS, P_NULL, 0, 0, 0, 0]));
    raw.send(&m);
    pump(&net, &mut srv, &mut raw, 10);
    assert_eq!(raw.received.len(), 1, "the Call is answered: {:?}", srv.stats());
    let h = header::decode(&raw.received[0], &Limits::DEFAULT).unwrap();
    assert_eq!((h.xid, h.body), (XID, Body::ErrorV1(V1Error::Chunk)));
    assert_eq!(
        srv.stats().rdma_reads,
        0,
        "refused before any RDMA Read: {:?}",
        srv.stats()
    );
    // The connection still serves.
    raw.send(&v1_null(XID + 1, CREDITS));
    pump(&net, &mut srv, &mut raw, 3);
    let h = header::decode(raw.received.last().unwrap(), &Limits::DEFAULT).unwrap();
    assert_eq!((h.xid, h.header_type()), (XID + 1, header::HeaderType::RdmaMsg));
    assert!(!raw.disconnected);
    assert_eq!(srv.shutdown(1000), Default::default());
    assert!(data_guards_intact(raw.p), "a data buffer's guard was overwritten");
}

/// Connect both raw peers, then run `rounds` turns of the responder and
/// both peers.
fn pump_two(
    net: &SimNetwork,
    srv: &mut Responder<'static, SimFabric, TestService>,
    a: &mut Raw<'static>,
    b: &mut Raw<'static>,
    rounds: usize,
) {
    for _ in 0..10_000 {
        if a.established && b.established {
            break;
        }
        srv.poll();
        a.poll();
        b.poll();
        net.step();
    }
    assert!(a.established && b.established, "raw peers never connected");
    for _ in 0..rounds {
        srv.poll();
        a.poll();
        b.poll();
        if net.run_until_idle(10_000).is_err() {
            break;
        }
    }
}

/// A hostile peer and a well-behaved one on a responder whose connections
/// have a share of `credits + send_depth` request slots each; the hostile
/// one posts no receives, so every answer to it stalls in RNR retries and
/// holds its request slot. Returns the responder's statistics once the
/// well-behaved peer's `rounds` rounds of `CREDITS` NULL Calls are each
/// answered (asserted), and that the hostile peer was disconnected.
fn hostile_beside_a_good_peer(
    test: usize,
    seed: u64,
    send_depth: u32,
    hostile: impl Fn(&mut Raw<'static>, u32),
    sends: u32,
) -> (dataplane::responder::ResponderStats, bool) {
    let p = pools_for(test);
    let net = SimNetwork::new(SimConfig::with_seed(seed));
    let cfg = ResponderConfig {
        send_depth,
        ..responder_cfg(p, VersionRange::ALL, CREDITS, 2)
    };
    let mut srv = responder_on(&net, p, cfg);
    let mut bad = raw_peer(&net, p, 0, 1);
    let mut good = raw_peer(&net, p, 32, 2);
    pump_two(&net, &mut srv, &mut bad, &mut good, 5);
    for k in 0..sends {
        hostile(&mut bad, XID + k);
        pump_two(&net, &mut srv, &mut bad, &mut good, 2);
    }
    let mut sent = 0;
    for round in 0..4 {
        for k in 0..CREDITS {
            good.send(&v1_null(XID + 1000 + round * CREDITS + k, CREDITS));
            sent += 1;
        }
        pump_two(&net, &mut srv, &mut bad, &mut good, 5);
        assert_eq!(
            good.received.len(),
            sent,
            "round {round}: every Call of the good peer answered"
        );
    }
    for m in &good.received {
        let h = header::decode(m, &Limits::DEFAULT).expect("a reply");
        assert!(matches!(h.body, Body::Msg { .. }), "an RPC reply, not an error: {h:?}");
    }
    let s = srv.stats();
    assert!(bad.received.is_empty(), "the hostile peer posts no receives");
    let bad_closed = bad.disconnected;
    assert_eq!(srv.shutdown(1000), Default::default(), "every buffer back");
    (s, bad_closed)
}

/// Messages that are not Calls (version errors, headers that do not decode,
/// RDMA_MSGP) from a peer that posts no receives: each answer stalls in RNR
/// retries holding a request slot. They are charged to that connection,
/// which is closed once it holds more than its share (credits + send-queue
/// depth); the other connection's Calls are all answered. Before, these
/// messages bypassed credit accounting and took request slots sized for
/// credits alone: the 9th one exhausted them (a debug build's
/// `debug_assert!` fired; a release build dropped other connections' Calls).
#[test]
fn hostile_peer_messages_that_are_not_calls_are_charged_to_their_connection() {
    let junk = |raw: &mut Raw<'static>, xid: u32| match xid % 3 {
        // An unknown version: ERR_VERS (RFC 8166 s4.5).
        0 => raw.send(&words(&[xid, 7, CREDITS, 0, 0, 0, 0])),
        // An unknown procedure: ERR_CHUNK.
        1 => raw.send(&words(&[xid, 1, CREDITS, 9, 0, 0, 0])),
        // RDMA_MSGP: ERR_CHUNK (s4.6).
        _ => raw.send(&words(&[xid, 1, CREDITS, 2, 4, 1024, 0, 0, 0, xid, 0])),
    };
    let (s, closed) = hostile_beside_a_good_peer(11, 21, 8, junk, 4 * CREDITS);
    assert!(s.share_overruns >= 1, "{s:?}");
    assert!(closed, "the hostile connection is closed");
    assert_eq!(
        s.calls,
        4 * CREDITS as u64,
        "only the good peer's Calls count as Calls: {s:?}"
    );
}

/// A slow-to-complete peer (it posts no receives) sends Calls within its
/// credits, one at a time: each is answered, which returns its credit, but
/// the answer's Send never completes and its request slot stays taken. It
/// cannot take more slots than its share (credits + send-queue depth): the
/// other connection's Calls are all answered. Before, request slots were
/// sized for credits alone, so such a peer took every slot (the 9th Call hit
/// the `debug_assert!` on exhausted slots).
#[test]
fn hostile_peer_slow_to_complete_cannot_borrow_slots_beyond_its_share() {
    let call = |raw: &mut Raw<'static>, xid: u32| raw.send(&v1_null(xid, CREDITS));
    let (s, closed) = hostile_beside_a_good_peer(12, 22, 8, call, 4 * CREDITS);
    assert!(closed, "the slow peer is closed once it holds its whole share: {s:?}");
    assert!(s.share_overruns + s.credit_overruns >= 1, "{s:?}");
}

// ---------------------------------------------------------------------------
// The backward direction (RFC 8167) against a raw client
// ---------------------------------------------------------------------------

/// A responder with a backchannel of `backward` credits whose service
/// makes backward Calls ([`BackService`]), a raw v1 client connected to it
/// and the connection's version fixed by one NULL Call: the backchannel is
/// open.
fn setup_backward(
    test: usize,
    seed: u64,
    backward: u32,
) -> (SimNetwork, Responder<'static, SimFabric, BackService>, Raw<'static>) {
    let p = pools_for(test);
    let net = SimNetwork::new(SimConfig::with_seed(seed));
    let cfg = ResponderConfig {
        backward_credits: backward,
        ..responder_cfg(p, VersionRange::ALL, CREDITS, 2)
    };
    let mut srv = Responder::new(
        cfg,
        net.endpoint(),
        BackService::default(),
        p.pool,
        &p.regions,
        0,
        Some("srv"),
    )
    .unwrap();
    let mut raw = raw_peer(&net, p, 16, 1);
    pump(&net, &mut srv, &mut raw, 1);
    raw.send(&v1_null(XID, CREDITS));
    pump(&net, &mut srv, &mut raw, 5);
    assert_eq!(raw.received.len(), 1, "the NULL answered");
    for _ in 0..2 * dataplane::responder::CM_POLL_INTERVAL {
        if !srv.service().open.is_empty() {
            break;
        }
        pump(&net, &mut srv, &mut raw, 1);
    }
    assert_eq!(srv.service().open.len(), 1, "the backchannel is open");
    (net, srv, raw)
}

/// A v1 RDMA_MSG granting `credits` that carries `rpc` (no chunks).
fn v1_msg(xid: u32, credits: u32, rpc: &[u8]) -> Vec<u8> {
    let mut m = words(&[xid, 1, credits, 0, 0, 0, 0]);
    m.extend_from_slice(rpc);
    m
}

/// The backward Call the raw client received last: its XID, the credits
/// it asks for, and its RPC message; the transport header is the
/// chunk-free RDMA_MSG (RFC 8167 s5.1).
fn last_backward_call(raw: &Raw<'_>) -> (u32, u32, Vec<u8>) {
    let m = raw.received.last().expect("a message");
    let h = header::decode(m, &Limits::DEFAULT).expect("a header");
    match h.body {
        Body::Msg { chunks, payload, .. } => {
            assert!(chunks.is_empty(), "backward Calls carry no chunks");
            assert_eq!(proto::rpc::peek_msg(payload).unwrap(), (h.xid, proto::rpc::CALL));
            (h.xid, h.credits, payload.to_vec())
        }
        other => panic!("not an RDMA_MSG: {other:?}"),
    }
}

/// A Reply whose XID names no backward Call in flight (never sent, or
/// answered already: a duplicate) is dropped and counted; it never reaches
/// the service, and the connection and its forward Calls go on. The true
/// Reply is handed over once.
#[test]
fn hostile_peer_backward_reply_with_an_unknown_or_answered_xid_is_dropped() {
    let (net, mut srv, mut raw) = setup_backward(13, 131, 4);
    let call = backward_call(0xcb01, b"recall");
    srv.service().queue.push_back(call.clone());
    pump(&net, &mut srv, &mut raw, 5);
    let (xid, asked, msg) = last_backward_call(&raw);
    assert_eq!(
        (xid, asked, msg),
        (0xcb01, 4, call.clone()),
        "the Call asks for the backward credits"
    );
    let reply = backward_reply(&call).unwrap();
    let mut stranger = reply.clone();
    stranger[..4].copy_from_slice(&0xdead_0001u32.to_be_bytes());
    raw.send(&v1_msg(0xdead_0001, 2, &stranger));
    raw.send(&v1_msg(xid, 2, &reply));
    raw.send(&v1_msg(xid, 2, &reply));
    pump(&net, &mut srv, &mut raw, 5);
    let s = srv.stats();
    assert_eq!(
        (s.backward_replies, s.backward_replies_dropped, s.conns_closed),
        (1, 2, 0),
        "{s:?}"
    );
    assert_eq!(srv.service().replies.len(), 1);
    assert_eq!(srv.service().replies[0].1, reply);
    // The forward direction is untouched.
    let before = raw.received.len();
    raw.send(&v1_null(XID + 1, CREDITS));
    pump(&net, &mut srv, &mut raw, 5);
    assert_eq!(raw.received.len(), before + 1);
    assert_eq!(srv.in_flight(), 0);
}

/// A backward Reply carrying chunks is refused (RFC 8167 s5.2: backward
/// messages are inline): not handed to the service, counted, its Call's
/// credit back so the next backward Call goes.
#[test]
fn hostile_peer_backward_reply_with_chunks_is_refused() {
    let (net, mut srv, mut raw) = setup_backward(14, 141, 4);
    let call = backward_call(0xcb02, b"x");
    srv.service().queue.push_back(call.clone());
    pump(&net, &mut srv, &mut raw, 5);
    let (xid, _, _) = last_backward_call(&raw);
    // An RDMA_MSG with one Write chunk of one segment, then the Reply.
    let mut m = words(&[xid, 1, 2, 0, 0, 1, 1, 0x77, 64, 0, 0x1000, 0, 0]);
    m.extend(backward_reply(&call).unwrap());
    raw.send(&m);
    pump(&net, &mut srv, &mut raw, 5);
    let s = srv.stats();
    assert_eq!((s.backward_replies_refused, s.backward_replies), (1, 0), "{s:?}");
    assert!(srv.service().replies.is_empty());
    let next = backward_call(0xcb03, b"y");
    srv.service().queue.push_back(next.clone());
    pump(&net, &mut srv, &mut raw, 5);
    assert_eq!(last_backward_call(&raw).2, next, "the credit came back");
}

/// A client cannot make the server hold more than its backward credits:
/// a grant far beyond them lets 4 Calls out, not more (RFC 8167 s4.1: the
/// smaller of request and grant), the request slots they hold stay within
/// them, and a flood of unsolicited Replies holds nothing (each is dropped
/// in the turn it arrives) and closes nothing.
#[test]
fn hostile_peer_backward_grant_and_reply_flood_hold_no_more_than_the_credits() {
    let (net, mut srv, mut raw) = setup_backward(15, 151, 4);
    let first = backward_call(0xc000, b"0");
    srv.service().queue.push_back(first.clone());
    pump(&net, &mut srv, &mut raw, 5);
    raw.send(&v1_msg(0xc000, 1000, &backward_reply(&first).unwrap()));
    pump(&net, &mut srv, &mut raw, 5);
    assert_eq!(srv.service().open[0].1.credits, 4, "clamped to the request");
    let before = raw.received.len();
    srv.service()
        .queue
        .extend((1..=10).map(|k| backward_call(0xc000 + k, b"n")));
    pump(&net, &mut srv, &mut raw, 10);
    assert_eq!(raw.received.len() - before, 4, "four Calls in flight, not more");
    assert!(srv.in_flight() <= 4, "{:?}", srv.live_by_state());
    for round in 0..10u32 {
        for k in 0..4u32 {
            let x = 0xf000_0000 + round * 4 + k;
            raw.send(&v1_msg(x, 1000, &backward_reply(&backward_call(x, b"z")).unwrap()));
        }
        pump(&net, &mut srv, &mut raw, 3);
        assert!(srv.in_flight() <= 4, "{:?}", srv.live_by_state());
    }
    let s = srv.stats();
    assert_eq!(
        (s.backward_replies_dropped, s.conns_closed, s.backward_replies),
        (40, 0, 1),
        "{s:?}"
    );
    assert_eq!(srv.service().replies.len(), 1);
}

/// Any bytes behind a v1 RDMA_MSG whose RPC word says REPLY, on a
/// connection with its backchannel open, never panic the responder: they
/// are dropped and counted, and the connection still answers.
#[test]
fn hostile_peer_backward_reply_garbage_never_panics() {
    let (net, mut srv, mut raw) = setup_backward(16, 132, 4);
    let mut seed = 0x1234_5678u64;
    for k in 0..48u32 {
        let mut rpc = vec![0u8; (k as usize * 7) % 90];
        for b in rpc.iter_mut() {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            *b = (seed >> 56) as u8;
        }
        if rpc.len() >= 8 {
            rpc[..4].copy_from_slice(&(0xa000 + k).to_be_bytes());
            rpc[4..8].copy_from_slice(&1u32.to_be_bytes());
        }
        raw.send(&v1_msg(0xa000 + k, seed as u32, &rpc));
        if (k + 1).is_multiple_of(4) {
            pump(&net, &mut srv, &mut raw, 3);
        }
    }
    pump(&net, &mut srv, &mut raw, 5);
    assert_eq!(srv.stats().backward_replies, 0);
    assert!(srv.service().replies.is_empty());
    let before = raw.received.len();
    raw.send(&v1_null(XID + 2, CREDITS));
    pump(&net, &mut srv, &mut raw, 5);
    assert!(raw.received.len() > before, "still answering: {:?}", srv.stats());
}
