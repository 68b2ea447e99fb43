//! Issue 20 item 1: nothing of the target's memory is open to a client, and a
//! client's chunk buffers are open only to its own connection while its Call
//! is in flight (RFC 8166 s8.1). Run on `sim` and `shm`; `tests/verbs/run.sh`
//! runs the same checks over rxe (`examples/verbs_exposure.rs`).
//!
//! - A raw peer connected to a [`Responder`] RDMA-Writes and RDMA-Reads the
//!   responder's region with the region's real key: remote access error, and
//!   the bytes on both sides are untouched. On shm the peer also maps none of
//!   the responder's regions.
//! - Two [`Requester`]s connected to a raw target: the target uses client A's
//!   chunk segment (its real handle and address) on client B's connection
//!   while A's Call is in flight (remote access error), uses it on A's own
//!   connection while in flight (works: that is what it is for), answers the
//!   Call, and uses it on A's connection again (remote access error).

mod engine_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::requester::{CallOutcome, LinkState, Requester};
use dataplane::responder::Responder;
use dataplane::shm::{ShmConfig, ShmFabric};
use dataplane::sim::{SimConfig, SimFabric, SimNetwork};
use dataplane::{
    CmEvent, Completion, ConnId, CqId, Fabric, LocalBuf, QpConfig, RecvWr, RegionAccess, RemoteBuf, SendOp, SendWr,
    WcStatus, WrId,
};
use engine_common::*;
use mempool::region::{Region, RegionConfig};
use proto::header::{self, Body, Limits};
use proto::negotiate::VersionRange;

const DEADLINE: Duration = Duration::from_secs(20);
const LEN: u32 = 256;

/// A fabric under test: how to make endpoints, where the server listens,
/// how to move the network along.
trait Bed {
    type F: Fabric;
    fn endpoint(&self) -> Self::F;
    fn addr(&self) -> String;
    fn pump(&self);
    /// The real key of region `region` registered at `f`.
    fn region_key(f: &Self::F, region: u16) -> u32;
}

struct SimBed(SimNetwork);

impl Bed for SimBed {
    type F = SimFabric;
    fn endpoint(&self) -> SimFabric {
        self.0.endpoint()
    }
    fn addr(&self) -> String {
        "srv".into()
    }
    fn pump(&self) {
        for _ in 0..8 {
            self.0.step();
        }
    }
    fn region_key(f: &SimFabric, region: u16) -> u32 {
        f.region_keys(region).expect("registered").rkey
    }
}

struct ShmBed(String);

impl ShmBed {
    fn new(test: &str) -> ShmBed {
        ShmBed(format!("@rpcrdma-hostile-memory-{test}-{}", std::process::id()))
    }
}

impl Bed for ShmBed {
    type F = ShmFabric;
    fn endpoint(&self) -> ShmFabric {
        ShmFabric::new(ShmConfig {
            cm_sweep_period: Duration::ZERO,
            ..ShmConfig::for_rpc_engine()
        })
        .expect("shm fabric")
    }
    fn addr(&self) -> String {
        self.0.clone()
    }
    fn pump(&self) {
        std::thread::yield_now();
    }
    fn region_key(f: &ShmFabric, region: u16) -> u32 {
        f.region_key(region).expect("registered")
    }
}

/// A raw endpoint: one region of its own, one CQ, what it has seen.
struct Raw<F: Fabric> {
    f: F,
    cq: CqId,
    region: Arc<Region>,
    wcs: Vec<Completion>,
}

impl<F: Fabric> Raw<F> {
    fn new(f: F, id: u16, access: RegionAccess) -> Raw<F> {
        let mut f = f;
        let cfg = RegionConfig {
            lock: false,
            ..RegionConfig::default()
        };
        let region = Arc::new(Region::create(id, 2 << 20, &cfg).expect("region"));
        f.register_region(&region, access).expect("register");
        let cq = f.create_cq(256).expect("cq");
        Raw {
            f,
            cq,
            region,
            wcs: Vec::new(),
        }
    }
    fn qp(&self) -> QpConfig {
        QpConfig {
            cq: self.cq,
            recv_depth: 16,
            send_depth: 16,
            ..QpConfig::default()
        }
    }
    fn buf(&self, offset: u64, len: u32) -> LocalBuf {
        LocalBuf {
            region: self.region.id(),
            offset,
            len,
        }
    }
    fn fill(&self, offset: u64, byte: u8, len: u32) {
        // SAFETY: inside the region's mapping; no work request covers it now.
        unsafe { std::ptr::write_bytes(self.region.as_ptr().add(offset as usize), byte, len as usize) }
    }
    fn bytes(&self, offset: u64, len: u32) -> Vec<u8> {
        // SAFETY: as in `fill`.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().add(offset as usize), len as usize) }.to_vec()
    }
    fn poll(&mut self) {
        let mut out = [Completion::EMPTY; 16];
        let n = self.f.poll_cq(self.cq, &mut out);
        self.wcs.extend_from_slice(&out[..n]);
    }
    fn take(&mut self, id: WrId) -> Option<Completion> {
        let i = self.wcs.iter().position(|c| c.wr_id == id)?;
        Some(self.wcs.remove(i))
    }
    fn post_recvs(&mut self, conn: ConnId, n: u64) {
        for k in 0..n {
            let wr = RecvWr {
                wr_id: WrId::new(1, k),
                buf: self.buf(k * 4096, 4096),
            };
            self.f.post_recv(conn, &wr).expect("post_recv");
        }
    }
}

fn wait_until(bed: &impl Bed, what: &str, mut step: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !step() {
        assert!(t0.elapsed() < DEADLINE, "timed out waiting for {what}");
        bed.pump();
    }
}

/// One RDMA `op` of `LEN` bytes by `raw` on `conn` against `remote`; its
/// completion status.
fn rdma<B: Bed>(
    bed: &B,
    raw: &mut Raw<B::F>,
    conn: ConnId,
    op: SendOp,
    remote: RemoteBuf,
    also: &mut dyn FnMut(),
) -> WcStatus {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = WrId::new(9, NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let wr = SendWr::new(id, op, raw.buf(1 << 20, LEN), remote);
    raw.f.post_send(conn, &wr).expect("post_send");
    let mut got = None;
    wait_until(bed, "the RDMA completion", || {
        also();
        raw.poll();
        got = raw.take(id);
        got.is_some()
    });
    got.expect("completion").status
}

/// A raw peer presents the responder's real region key for `op`.
fn responder_region_is_closed<B: Bed>(bed: &B, test: usize, op: SendOp) {
    let p = pools_for(test);
    let v1 = VersionRange::only(1).unwrap();
    let addr = bed.addr();
    let mut srv = Responder::new(
        responder_cfg(p, v1, 4, 2),
        bed.endpoint(),
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some(&addr),
    )
    .expect("responder");
    let target = p.regions[0].id();
    let key = B::region_key(srv.fabric(), target);
    let mut raw = Raw::new(bed.endpoint(), 200, RegionAccess::Local);
    let qp = raw.qp();
    let conn = raw.f.connect(&addr, &qp, &[]).expect("connect");
    raw.post_recvs(conn, 4);
    wait_until(bed, "the connection", || {
        srv.poll();
        matches!(raw.f.poll_cm(), Some(CmEvent::Established { .. }))
    });
    // What the responder's region holds where the peer aims, before.
    // SAFETY: inside the pool region's mapping; read only to compare.
    let theirs = || unsafe { std::slice::from_raw_parts(p.regions[0].as_ptr(), LEN as usize) }.to_vec();
    let before = theirs();
    raw.fill(1 << 20, 0xa5, LEN);
    let remote = RemoteBuf {
        handle: key,
        length: LEN,
        offset: 0,
    };
    let status = rdma(bed, &mut raw, conn, op, remote, &mut || {
        srv.poll();
    });
    assert_eq!(status, WcStatus::RemoteAccess, "{op:?} with the responder's region key");
    assert_eq!(theirs(), before, "the responder's bytes are untouched");
    assert_eq!(raw.bytes(1 << 20, LEN), vec![0xa5; LEN as usize], "nothing was read");
}

/// Pools for test `k` (each test has its own, so parallel tests do not share
/// buffers).
fn pools_for(k: usize) -> &'static Pools {
    static P: std::sync::OnceLock<Vec<Pools>> = std::sync::OnceLock::new();
    &P.get_or_init(|| (0..9).map(|_| pools(4096, 4, 3)).collect())[k]
}

/// Two requesters A and B connected to a raw target; A's Call in flight
/// carries a chunk the target reaches with `op` (a Read chunk for
/// `RdmaRead`, a Write chunk for `RdmaWrite`).
fn chunk_buffers_are_private<B: Bed>(bed: &B, test: usize, op: SendOp) {
    let p = pools_for(test);
    let v1 = VersionRange::only(1).unwrap();
    let addr = bed.addr();
    let mut t = Raw::new(bed.endpoint(), 201, RegionAccess::Local);
    t.f.listen(&addr).expect("listen");
    let mut a = Requester::new(requester_cfg(p, v1, 4), bed.endpoint(), p.pool, &p.regions, 1).expect("A");
    let mut b = Requester::new(requester_cfg(p, v1, 4), bed.endpoint(), p.pool, &p.regions, 2).expect("B");
    a.connect(&addr).expect("A connects");
    let mut conns: Vec<ConnId> = Vec::new();
    let mut established = 0;
    let mut accept = |t: &mut Raw<B::F>, conns: &mut Vec<ConnId>| {
        while let Some(ev) = t.f.poll_cm() {
            match ev {
                CmEvent::ConnectRequest { req, .. } => {
                    let qp = t.qp();
                    let c = t.f.accept(req, &qp, &[]).expect("accept");
                    t.post_recvs(c, 8);
                    conns.push(c);
                }
                CmEvent::Established { .. } => established += 1,
                _ => {}
            }
        }
        established
    };
    wait_until(bed, "A ready", || {
        accept(&mut t, &mut conns);
        a.poll();
        a.link() == LinkState::Ready
    });
    b.connect(&addr).expect("B connects");
    wait_until(bed, "B ready", || {
        let n = accept(&mut t, &mut conns);
        a.poll();
        b.poll();
        b.link() == LinkState::Ready && n == 2
    });
    let (ca, cb) = (conns[0], conns[1]);
    // A's Call: WRITE (a Read chunk the target pulls) or a short ECHO (a
    // Write chunk the target fills).
    let e = match op {
        SendOp::RdmaRead => Expect {
            proc_: P_WRITE,
            arg: vec![0x3c; 8192],
            big_n: 0,
            b: 0,
        },
        _ => Expect {
            proc_: P_ECHO,
            arg: vec![0x3c; 16],
            big_n: 0,
            b: 0,
        },
    };
    let id = submit(&mut a, &e).expect("submit");
    let mut call = None;
    wait_until(bed, "A's Call at the target", || {
        a.poll();
        b.poll();
        t.poll();
        if let Some(i) = t
            .wcs
            .iter()
            .position(|w| w.conn == ca && w.opcode == dataplane::WcOpcode::Recv)
        {
            call = Some(t.wcs.remove(i));
        }
        call.is_some()
    });
    let call = call.expect("call");
    assert_eq!(call.status, WcStatus::Success);
    let msg = t.bytes(call.wr_id.index() * 4096, call.byte_len);
    let h = header::decode(&msg, &Limits::DEFAULT).expect("A's header");
    let chunks = match h.body {
        Body::Msg { chunks, .. } | Body::NoMsg { chunks, .. } => chunks,
        other => panic!("not a Call: {other:?}"),
    };
    let seg = match op {
        SendOp::RdmaRead => chunks.reads.segments().next().expect("a Read chunk").target,
        _ => chunks
            .writes
            .iter()
            .next()
            .expect("a Write chunk")
            .iter()
            .next()
            .expect("a segment"),
    };
    let remote = RemoteBuf {
        handle: seg.handle,
        length: LEN,
        offset: seg.offset,
    };
    // Outside its connection: A's handle on B's connection.
    assert_eq!(
        rdma(bed, &mut t, cb, op, remote, &mut || {
            a.poll();
            b.poll();
        }),
        WcStatus::RemoteAccess,
        "{op:?} of A's chunk through B's connection"
    );
    // On A's connection, while the Call is in flight: allowed.
    assert_eq!(
        rdma(bed, &mut t, ca, op, remote, &mut || {
            a.poll();
            b.poll();
        }),
        WcStatus::Success,
        "{op:?} of A's chunk on A's connection while its Call is in flight"
    );
    // Answer the Call (RDMA_ERROR / ERR_CHUNK): it ends, and its chunks
    // with it.
    let err: Vec<u8> = [h.xid, 1, 4, 4, 2].iter().flat_map(|w: &u32| w.to_be_bytes()).collect();
    let at = 1u64 << 20;
    // SAFETY: inside t's region; no work request covers it now.
    unsafe { std::ptr::copy_nonoverlapping(err.as_ptr(), t.region.as_ptr().add(at as usize), err.len()) };
    let wr = SendWr::new(
        WrId::new(8, 0),
        SendOp::Send,
        t.buf(at, err.len() as u32),
        RemoteBuf::default(),
    );
    t.f.post_send(ca, &wr).expect("reply");
    let mut done = None;
    wait_until(bed, "A's Call answered", || {
        a.poll();
        b.poll();
        t.poll();
        done = a.poll_completion();
        done.is_some()
    });
    let done = done.expect("completion");
    assert_eq!(done.id, id);
    assert!(
        matches!(done.outcome, CallOutcome::TransportErrorV1(_)),
        "{:?}",
        done.outcome
    );
    // After its Call: A's own connection, A's handle: closed.
    assert_eq!(
        rdma(bed, &mut t, ca, op, remote, &mut || {
            a.poll();
            b.poll();
        }),
        WcStatus::RemoteAccess,
        "{op:?} of A's chunk after its Call ended"
    );
    a.release(id);
}

fn sim(seed: u64) -> SimBed {
    SimBed(SimNetwork::new(SimConfig::with_seed(seed)))
}

#[test]
fn hostile_peer_sim_write_to_the_responders_region_is_a_remote_access_error() {
    responder_region_is_closed(&sim(1), 0, SendOp::RdmaWrite);
}

#[test]
fn hostile_peer_sim_read_of_the_responders_region_is_a_remote_access_error() {
    responder_region_is_closed(&sim(2), 1, SendOp::RdmaRead);
}

#[test]
fn hostile_peer_shm_write_to_the_responders_region_is_a_remote_access_error() {
    responder_region_is_closed(&ShmBed::new("w"), 2, SendOp::RdmaWrite);
}

#[test]
fn hostile_peer_shm_read_of_the_responders_region_is_a_remote_access_error() {
    responder_region_is_closed(&ShmBed::new("r"), 3, SendOp::RdmaRead);
}

#[test]
fn hostile_peer_sim_chunk_buffers_are_closed_to_other_connections_and_after_the_call() {
    chunk_buffers_are_private(&sim(3), 4, SendOp::RdmaWrite);
    chunk_buffers_are_private(&sim(4), 5, SendOp::RdmaRead);
}

#[test]
fn hostile_peer_shm_chunk_buffers_are_closed_to_other_connections_and_after_the_call() {
    chunk_buffers_are_private(&ShmBed::new("cw"), 6, SendOp::RdmaWrite);
    chunk_buffers_are_private(&ShmBed::new("cr"), 7, SendOp::RdmaRead);
}

/// On shm a peer of a responder maps none of the responder's regions, only
/// the connection's ring file (a hostile client process cannot store into
/// the target's buffers whatever it does with its own mappings); the
/// responder maps the client's exposable regions.
#[test]
fn hostile_peer_shm_client_maps_nothing_of_the_responders() {
    let bed = ShmBed::new("maps");
    let p = pools_for(8);
    let v1 = VersionRange::only(1).unwrap();
    let addr = bed.addr();
    let mut srv = Responder::new(
        responder_cfg(p, v1, 4, 2),
        bed.endpoint(),
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some(&addr),
    )
    .expect("responder");
    let mut raw = Raw::new(bed.endpoint(), 202, RegionAccess::Exposable);
    let qp = raw.qp();
    let conn = raw.f.connect(&addr, &qp, &[]).expect("connect");
    wait_until(&bed, "the connection", || {
        srv.poll();
        matches!(raw.f.poll_cm(), Some(CmEvent::Established { .. }))
    });
    assert_eq!(raw.f.peer_regions_mapped(conn), Some(0));
}

/// `n` connections from `q` to `t` (listening at the bed's address), each
/// with 4 receives posted on both sides: (t's ends, q's ends).
fn connect_n<B: Bed>(bed: &B, t: &mut Raw<B::F>, q: &mut Raw<B::F>, n: usize) -> (Vec<ConnId>, Vec<ConnId>) {
    let addr = bed.addr();
    let mut tc: Vec<ConnId> = Vec::new();
    let mut qc: Vec<ConnId> = Vec::new();
    for _ in 0..n {
        let qp = q.qp();
        let c = q.f.connect(&addr, &qp, &[]).expect("connect");
        q.post_recvs(c, 4);
        qc.push(c);
        let (mut up_t, mut up_q) = (false, false);
        wait_until(bed, "the connection", || {
            while let Some(ev) = t.f.poll_cm() {
                match ev {
                    CmEvent::ConnectRequest { req, .. } => {
                        let qp = t.qp();
                        let a = t.f.accept(req, &qp, &[]).expect("accept");
                        t.post_recvs(a, 4);
                        tc.push(a);
                    }
                    CmEvent::Established { .. } => up_t = true,
                    _ => {}
                }
            }
            up_q |= matches!(q.f.poll_cm(), Some(CmEvent::Established { .. }));
            up_t && up_q
        });
    }
    (tc, qc)
}

/// One requester fabric with two connections to one target (as verbs has:
/// one protection domain for every connection of a process): a window
/// exposed to connection A is closed to connection B, for Writes and Reads.
fn window_is_open_to_its_connection_only<B: Bed>(bed: &B) {
    let addr = bed.addr();
    let mut t = Raw::new(bed.endpoint(), 210, RegionAccess::Local);
    t.f.listen(&addr).expect("listen");
    let mut q = Raw::new(bed.endpoint(), 211, RegionAccess::Exposable);
    let (tc, qc) = connect_n(bed, &mut t, &mut q, 3);
    let chunk = q.buf(64 << 10, LEN);
    q.fill(64 << 10, 0x77, LEN);
    for (k, op) in [SendOp::RdmaRead, SendOp::RdmaWrite].into_iter().enumerate() {
        let access = if op == SendOp::RdmaRead {
            dataplane::Access::Read
        } else {
            dataplane::Access::Write
        };
        let seg = q.f.expose(qc[0], chunk, access).expect("expose");
        let remote = RemoteBuf { length: LEN, ..seg };
        t.fill(1 << 20, 0x99, LEN);
        let st = rdma(bed, &mut t, tc[1 + k], op, remote, &mut || q.poll());
        assert_eq!(
            st,
            WcStatus::RemoteAccess,
            "{op:?} with connection A's window on another connection"
        );
        assert_eq!(
            q.bytes(64 << 10, LEN),
            vec![0x77; LEN as usize],
            "A's chunk is untouched"
        );
        assert_eq!(t.bytes(1 << 20, LEN), vec![0x99; LEN as usize], "nothing was read");
        let st = rdma(bed, &mut t, tc[0], SendOp::RdmaRead, remote, &mut || q.poll());
        let want = if op == SendOp::RdmaRead {
            WcStatus::Success
        } else {
            // A Write window does not open the buffer to Reads.
            WcStatus::RemoteAccess
        };
        assert_eq!(st, want, "a Read through A's {access:?} window on A's connection");
        if want == WcStatus::RemoteAccess {
            // That error ended A's connection: the last check.
            assert_eq!(k, 1);
            return;
        }
        q.f.hide(qc[0], seg.handle);
    }
    unreachable!("the Write round ends the test");
}

#[test]
fn hostile_peer_sim_a_window_is_closed_to_the_processes_other_connections() {
    window_is_open_to_its_connection_only(&sim(5));
}

#[test]
fn hostile_peer_shm_a_window_is_closed_to_the_processes_other_connections() {
    window_is_open_to_its_connection_only(&ShmBed::new("win"));
}

/// Mappings of the file behind `region` in this process (/proc/self/maps
/// lines naming its inode on its device).
fn mappings_of(region: &Region) -> usize {
    use std::os::fd::AsRawFd;
    // SAFETY: all-zero is a valid `stat`; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and out-pointer.
    assert_eq!(unsafe { libc::fstat(region.fd().as_raw_fd(), &mut st) }, 0);
    let dev = format!("{:02x}:{:02x}", libc::major(st.st_dev), libc::minor(st.st_dev));
    let ino = st.st_ino.to_string();
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    maps.lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 5 && f[3] == dev && f[4] == ino
        })
        .count()
}

/// Issue 24 part 5: a target maps a client process's region once however
/// many connections the client opens (4 here, as from one perf with 4
/// connections), not once per connection; the mapping goes with the last
/// connection's fabric. Each connection still reaches only its own windows
/// (`hostile_peer_shm_a_window_is_closed_to_the_processes_other_connections`
/// runs over the same shared mapping).
#[test]
fn shm_a_peers_region_is_mapped_once_per_process_however_many_connections() {
    let bed = ShmBed::new("once");
    let mut t = Raw::new(bed.endpoint(), 212, RegionAccess::Local);
    t.f.listen(&bed.addr()).expect("listen");
    let mut q = Raw::new(bed.endpoint(), 213, RegionAccess::Exposable);
    assert_eq!(mappings_of(&q.region), 1, "the client's own mapping");
    let (tc, qc) = connect_n(&bed, &mut t, &mut q, 4);
    for &c in &tc {
        assert_eq!(t.f.peer_regions_mapped(c), Some(1));
    }
    assert_eq!(
        mappings_of(&q.region),
        2,
        "the client's own mapping and one of the target's for its 4 connections"
    );
    // Still usable through a window on each connection.
    q.fill(0, 0x5a, LEN);
    for (k, (&tcon, &qcon)) in tc.iter().zip(&qc).enumerate() {
        let seg =
            q.f.expose(qcon, q.buf(0, LEN), dataplane::Access::Read)
                .expect("expose");
        t.fill(1 << 20, 0, LEN);
        let st = rdma(
            &bed,
            &mut t,
            tcon,
            SendOp::RdmaRead,
            RemoteBuf { length: LEN, ..seg },
            &mut || q.poll(),
        );
        assert_eq!(st, WcStatus::Success, "connection {k}");
        assert_eq!(t.bytes(1 << 20, LEN), vec![0x5a; LEN as usize], "connection {k}");
        q.f.hide(qcon, seg.handle);
    }
    drop(t);
    assert_eq!(
        mappings_of(&q.region),
        1,
        "the target's mapping went with its connections"
    );
}
