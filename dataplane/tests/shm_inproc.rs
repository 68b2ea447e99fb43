//! In-process tests of the shm fabric: two `ShmFabric` instances in one
//! process, polled from one thread (they share nothing but the socket and the
//! memfds, exactly as two processes would).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::shm::{ShmConfig, ShmFabric};
use dataplane::{
    Access, CmEvent, Completion, ConnId, CqId, Fabric, FabricError, LocalBuf, MrKeys, QpConfig, RecvWr, RegionAccess,
    RemoteBuf, SendOp, SendWr, SrqId, WcOpcode, WcStatus, WrId, NO_WINDOW,
};
use mempool::region::{Region, RegionConfig};

const DEADLINE: Duration = Duration::from_secs(10);

static NEXT: AtomicU32 = AtomicU32::new(0);

fn addr() -> String {
    format!(
        "@rpcrdma-shm-inproc-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

struct Side {
    f: ShmFabric,
    cq: CqId,
    region: Arc<Region>,
    keys: MrKeys,
    /// The whole region exposed (Read and Write) to the last connection
    /// made ([`connect_with`]): what [`Side::remote`] names.
    window: u32,
}

fn side_with(cfg: ShmConfig, region_id: u16) -> Side {
    let mut f = ShmFabric::new(cfg).unwrap();
    let region = Arc::new(Region::create(region_id, 2 << 20, &RegionConfig::default()).unwrap());
    let keys = f.register_region(&region, RegionAccess::Exposable).unwrap();
    let cq = f.create_cq(4096).unwrap();
    Side {
        f,
        cq,
        region,
        keys,
        window: NO_WINDOW,
    }
}

/// A side with region `region_id`. Even ids prefetch receive buffers (as the
/// engines configure it) and odd ids do not, so tests pairing 1 and 2 cover
/// both receive paths.
fn side(region_id: u16) -> Side {
    let cfg = if region_id.is_multiple_of(2) {
        ShmConfig::for_rpc_engine()
    } else {
        ShmConfig::default()
    };
    side_with(cfg, region_id)
}

impl Side {
    fn buf(&self, offset: u64, len: u32) -> LocalBuf {
        LocalBuf {
            region: self.region.id(),
            offset,
            len,
        }
    }
    fn expose_region(&mut self, conn: ConnId) {
        let whole = self.buf(0, self.region.len() as u32);
        self.window = self.f.expose(conn, whole, Access::ReadWrite).unwrap().handle;
    }
    fn remote(&self, offset: u64, len: u32) -> RemoteBuf {
        RemoteBuf {
            handle: self.window,
            length: len,
            offset: self.f.remote_addr(self.region.id(), offset).unwrap(),
        }
    }
    fn write(&self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.region.len());
        // SAFETY: in bounds of the region's mapping (checked above); the test
        // owns these bytes (no work request targets them concurrently).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.region.as_ptr().add(offset), bytes.len()) }
    }
    fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        assert!(offset + len <= self.region.len());
        let mut v = vec![0u8; len];
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(self.region.as_ptr().add(offset), v.as_mut_ptr(), len) }
        v
    }
    fn recv(&mut self, conn: ConnId, index: u64, offset: u64, len: u32) {
        let wr = RecvWr {
            wr_id: WrId::new(1, index),
            buf: self.buf(offset, len),
        };
        self.f.post_recv(conn, &wr).unwrap();
    }
    fn send(&mut self, conn: ConnId, index: u64, op: SendOp, local: LocalBuf, remote: RemoteBuf) {
        let wr = SendWr::new(WrId::new(2, index), op, local, remote);
        self.f.post_send(conn, &wr).unwrap();
    }
    /// Poll until `n` completions arrived (or the deadline: panics).
    fn wait(&mut self, n: usize) -> Vec<Completion> {
        let start = Instant::now();
        let mut got = Vec::new();
        let mut buf = [zero_wc(); 32];
        while got.len() < n {
            let k = self.f.poll_cq(self.cq, &mut buf);
            got.extend_from_slice(&buf[..k]);
            assert!(
                start.elapsed() < DEADLINE,
                "timed out with {} of {n} completions: {got:?}",
                got.len()
            );
        }
        got
    }
    /// Poll until no completion shows up for a while.
    fn drain(&mut self) -> Vec<Completion> {
        let mut got = Vec::new();
        let mut buf = [zero_wc(); 32];
        let mut quiet = 0;
        while quiet < 200 {
            let k = self.f.poll_cq(self.cq, &mut buf);
            if k == 0 {
                quiet += 1;
                std::thread::sleep(Duration::from_micros(50));
            } else {
                quiet = 0;
            }
            got.extend_from_slice(&buf[..k]);
        }
        got
    }
    fn cm(&mut self) -> CmEvent {
        let start = Instant::now();
        loop {
            if let Some(e) = self.f.poll_cm() {
                return e;
            }
            assert!(start.elapsed() < DEADLINE, "no CM event");
            std::thread::yield_now();
        }
    }
}

fn zero_wc() -> Completion {
    Completion {
        wr_id: WrId(0),
        status: WcStatus::General,
        opcode: WcOpcode::Recv,
        conn: ConnId(0),
        byte_len: 0,
        invalidated_rkey: None,
    }
}

fn qp(cq: CqId) -> QpConfig {
    QpConfig {
        cq,
        ..QpConfig::default()
    }
}

/// Connect `b` to a listener on `a`; returns (a's conn, b's conn). Private data
/// travels both ways.
fn connect_with(a: &mut Side, b: &mut Side, qa: QpConfig, qb: QpConfig) -> (ConnId, ConnId) {
    let at = addr();
    let l = a.f.listen(&at).unwrap();
    let cb = b.f.connect(&at, &qb, b"requester-pd").unwrap();
    let start = Instant::now();
    let ca = loop {
        match a.f.poll_cm() {
            Some(CmEvent::ConnectRequest {
                listener,
                req,
                private_data,
            }) => {
                assert_eq!(listener, l);
                assert_eq!(private_data.as_bytes(), b"requester-pd");
                break a.f.accept(req, &qa, b"responder-pd").unwrap();
            }
            Some(e) => panic!("unexpected {e:?}"),
            None => {}
        }
        assert!(b.f.poll_cm().is_none());
        assert!(start.elapsed() < DEADLINE);
    };
    match b.cm() {
        CmEvent::Established { conn, private_data } => {
            assert_eq!(conn, cb);
            assert_eq!(private_data.as_bytes(), b"responder-pd");
        }
        e => panic!("unexpected {e:?}"),
    }
    match a.cm() {
        CmEvent::Established { conn, .. } => assert_eq!(conn, ca),
        e => panic!("unexpected {e:?}"),
    }
    a.expose_region(ca);
    b.expose_region(cb);
    (ca, cb)
}

fn connect(a: &mut Side, b: &mut Side) -> (ConnId, ConnId) {
    let (qa, qb) = (qp(a.cq), qp(b.cq));
    connect_with(a, b, qa, qb)
}

fn expect_disconnected(s: &mut Side, conn: ConnId) {
    match s.cm() {
        CmEvent::Disconnected { conn: c } => assert_eq!(c, conn),
        e => panic!("expected Disconnected, got {e:?}"),
    }
}

#[test]
fn send_recv_carries_bytes_and_private_data() {
    let (mut a, mut b) = (side(1), side(2));
    let (ca, cb) = connect(&mut a, &mut b);
    a.recv(ca, 7, 4096, 256);
    b.write(0, b"hello over shared memory");
    b.send(cb, 1, SendOp::Send, b.buf(0, 24), RemoteBuf::default());
    let sc = b.wait(1);
    assert_eq!(
        (sc[0].status, sc[0].opcode, sc[0].byte_len),
        (WcStatus::Success, WcOpcode::Send, 24)
    );
    assert_eq!(sc[0].wr_id, WrId::new(2, 1));
    let rc = a.wait(1);
    assert_eq!(rc[0].wr_id, WrId::new(1, 7));
    assert_eq!(
        (rc[0].status, rc[0].opcode, rc[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 24)
    );
    assert_eq!(rc[0].conn, ca);
    assert_eq!(rc[0].invalidated_rkey, None);
    assert_eq!(a.read(4096, 24), b"hello over shared memory");
}

#[test]
fn gather_write_read_and_send_with_invalidate() {
    let (mut a, mut b) = (side(1), side(2));
    let (ca, cb) = connect(&mut a, &mut b);
    // Send gathering three buffers.
    a.recv(ca, 0, 0, 64);
    b.write(100, b"abc");
    b.write(200, b"defg");
    b.write(300, b"h");
    // A window of a's for b to invalidate.
    let inv = a.f.expose(ca, a.buf(1 << 20, 64), Access::Write).unwrap().handle;
    let mut wr = SendWr::new(
        WrId::new(2, 0),
        SendOp::SendWithInv { rkey: inv },
        b.buf(100, 3),
        RemoteBuf::default(),
    );
    wr.sge[1] = b.buf(200, 4);
    wr.sge[2] = b.buf(300, 1);
    wr.num_sge = 3;
    b.f.post_send(cb, &wr).unwrap();
    assert_eq!(b.wait(1)[0].byte_len, 8);
    let rc = a.wait(1);
    assert_eq!((rc[0].byte_len, rc[0].invalidated_rkey), (8, Some(inv)));
    assert_eq!(a.read(0, 8), b"abcdefgh");

    // RDMA Write into a, RDMA Read from a.
    let pattern: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
    b.write(65536, &pattern);
    let dst = a.remote(131072, 65536);
    b.send(cb, 1, SendOp::RdmaWrite, b.buf(65536, 65536), dst);
    let wc = b.wait(1);
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].byte_len),
        (WcStatus::Success, WcOpcode::RdmaWrite, 65536)
    );
    assert_eq!(a.read(131072, 65536), pattern);

    a.write(300_000, b"read me from the other side");
    let src = a.remote(300_000, 27);
    b.send(cb, 2, SendOp::RdmaRead, b.buf(400_000, 27), src);
    let wc = b.wait(1);
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 27)
    );
    assert_eq!(b.read(400_000, 27), b"read me from the other side");
    // One-sided: a saw no completion for the Write or the Read.
    assert!(a.drain().is_empty());
}

#[test]
fn rnr_then_success() {
    let cfg = ShmConfig {
        rnr_timer: Duration::from_millis(2),
        ..ShmConfig::default()
    };
    let (mut a, mut b) = (side(1), side_with(cfg, 2));
    let (ca, cb) = connect(&mut a, &mut b);
    b.write(0, b"late");
    b.send(cb, 1, SendOp::Send, b.buf(0, 4), RemoteBuf::default());
    // A later Write waits behind the Send (posting order).
    b.write(64, b"WW");
    let dst = a.remote(8192, 2);
    b.send(cb, 2, SendOp::RdmaWrite, b.buf(64, 2), dst);
    let mut wc = [zero_wc(); 4];
    for _ in 0..3 {
        assert_eq!(b.f.poll_cq(b.cq, &mut wc), 0, "Send must wait for a receive");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(a.read(8192, 2), [0, 0], "the Write is not executed before the Send");
    a.recv(ca, 3, 1024, 16);
    let got = b.wait(2);
    assert_eq!((got[0].wr_id, got[0].status), (WrId::new(2, 1), WcStatus::Success));
    assert_eq!((got[1].wr_id, got[1].status), (WrId::new(2, 2), WcStatus::Success));
    let rc = a.wait(1);
    assert_eq!(rc[0].byte_len, 4);
    assert_eq!(a.read(1024, 4), b"late");
    assert_eq!(a.read(8192, 2), b"WW");
}

#[test]
fn rnr_retry_exceeded_fails_both_sides() {
    let cfg = ShmConfig {
        rnr_timer: Duration::from_millis(1),
        ..ShmConfig::default()
    };
    let (mut a, mut b) = (side(1), side_with(cfg, 2));
    let qa = qp(a.cq);
    let qb = QpConfig {
        rnr_retry: 2,
        ..qp(b.cq)
    };
    let (ca, cb) = connect_with(&mut a, &mut b, qa, qb);
    b.recv(cb, 9, 0, 64);
    let t0 = Instant::now();
    b.send(cb, 1, SendOp::Send, b.buf(4096, 8), RemoteBuf::default());
    b.send(cb, 2, SendOp::RdmaWrite, b.buf(4096, 8), a.remote(0, 8));
    let got = b.wait(3);
    assert!(t0.elapsed() >= Duration::from_millis(2), "two RNR periods pass first");
    assert_eq!(
        (got[0].wr_id, got[0].status),
        (WrId::new(2, 1), WcStatus::RnrRetryExceeded)
    );
    assert_eq!((got[1].wr_id, got[1].status), (WrId::new(2, 2), WcStatus::Flushed));
    assert_eq!(
        (got[2].wr_id, got[2].status, got[2].opcode),
        (WrId::new(1, 9), WcStatus::Flushed, WcOpcode::Recv)
    );
    // New work on a failed connection (not yet reaped) is flushed.
    b.send(cb, 3, SendOp::Send, b.buf(0, 8), RemoteBuf::default());
    assert_eq!(b.wait(1)[0].status, WcStatus::Flushed);
    expect_disconnected(&mut b, cb);
    expect_disconnected(&mut a, ca);
    // Once the terminal event is consumed and everything flushed, the id is stale.
    let wr = SendWr::new(WrId(0), SendOp::Send, b.buf(0, 8), RemoteBuf::default());
    assert!(matches!(b.f.post_send(cb, &wr), Err(FabricError::NotConnected(c)) if c == cb));
}

#[test]
fn rnr_retry_zero_fails_at_once() {
    let (mut a, mut b) = (side(1), side(2));
    let qa = qp(a.cq);
    let qb = QpConfig {
        rnr_retry: 0,
        ..qp(b.cq)
    };
    let (_ca, cb) = connect_with(&mut a, &mut b, qa, qb);
    b.send(cb, 1, SendOp::Send, b.buf(0, 8), RemoteBuf::default());
    let mut wc = [zero_wc(); 4];
    assert_eq!(b.f.poll_cq(b.cq, &mut wc), 1);
    assert_eq!(wc[0].status, WcStatus::RnrRetryExceeded);
}

fn remote_access_case(bad: impl Fn(&Side) -> RemoteBuf, op: SendOp) {
    let (mut a, mut b) = (side(1), side(2));
    let (ca, cb) = connect(&mut a, &mut b);
    for i in 0..3 {
        a.recv(ca, i, i * 256, 256);
        b.recv(cb, 10 + i, i * 256, 256);
    }
    let remote = bad(&a);
    b.send(cb, 1, op, b.buf(8192, 64), remote);
    b.send(cb, 2, SendOp::Send, b.buf(8192, 8), RemoteBuf::default());
    let got = b.wait(5);
    // Send-queue completions in posting order; the receive flushes may
    // interleave with them (as on hardware, SQ and RQ flush independently).
    let sends: Vec<_> = got
        .iter()
        .filter(|c| c.opcode != WcOpcode::Recv)
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        sends,
        [
            (WrId::new(2, 1), WcStatus::RemoteAccess),
            (WrId::new(2, 2), WcStatus::Flushed)
        ]
    );
    let recvs: HashSet<u64> = got
        .iter()
        .filter(|c| c.opcode == WcOpcode::Recv)
        .inspect(|c| assert_eq!(c.status, WcStatus::Flushed))
        .map(|c| c.wr_id.index())
        .collect();
    assert_eq!(recvs, HashSet::from([10, 11, 12]));
    expect_disconnected(&mut b, cb);
    // The peer goes to error too, with its receives flushed.
    expect_disconnected(&mut a, ca);
    let got = a.wait(3);
    assert!(got.iter().all(|c| c.status == WcStatus::Flushed && c.conn == ca));
    assert!(a.drain().is_empty());
    assert!(b.drain().is_empty());
    // Both sides reaped the connection once the event and flushes were consumed.
    assert_eq!(a.f.conn_count(), 0);
    assert_eq!(b.f.conn_count(), 0);
}

#[test]
fn bad_rkey_write_is_remote_access() {
    remote_access_case(
        |a| RemoteBuf {
            handle: a.keys.rkey ^ 0x0001_0000,
            length: 64,
            offset: 0,
        },
        SendOp::RdmaWrite,
    );
}

#[test]
fn out_of_range_write_is_remote_access() {
    remote_access_case(|a| a.remote(a.region.len() as u64 - 32, 64), SendOp::RdmaWrite);
}

#[test]
fn bad_rkey_and_overflowing_read_are_remote_access() {
    remote_access_case(
        |a| RemoteBuf {
            handle: a.keys.rkey.wrapping_add(1),
            length: 64,
            offset: 0,
        },
        SendOp::RdmaRead,
    );
    remote_access_case(
        |a| RemoteBuf {
            handle: a.keys.rkey,
            length: 64,
            offset: u64::MAX - 10,
        },
        SendOp::RdmaRead,
    );
}

#[test]
fn local_protection_on_bad_sge() {
    let (mut a, mut b) = (side(1), side(2));
    let (_ca, cb) = connect(&mut a, &mut b);
    let outside = LocalBuf {
        region: b.region.id(),
        offset: b.region.len() as u64 - 4,
        len: 8,
    };
    b.send(cb, 1, SendOp::RdmaWrite, outside, a.remote(0, 8));
    assert_eq!(b.wait(1)[0].status, WcStatus::LocalProtection);
    expect_disconnected(&mut b, cb);
    // Unregistered region in a receive is refused at post time.
    let r = b.f.post_recv(
        cb,
        &RecvWr {
            wr_id: WrId(1),
            buf: LocalBuf {
                region: 99,
                offset: 0,
                len: 8,
            },
        },
    );
    assert!(matches!(r, Err(FabricError::NotRegistered { region: 99 })));
}

#[test]
fn send_larger_than_receive_buffer_is_local_length_at_receiver() {
    let (mut a, mut b) = (side(1), side(2));
    let (ca, cb) = connect(&mut a, &mut b);
    a.recv(ca, 1, 0, 16);
    a.recv(ca, 2, 16, 16);
    b.send(cb, 1, SendOp::Send, b.buf(0, 17), RemoteBuf::default());
    assert_eq!(b.wait(1)[0].status, WcStatus::RemoteInvalidRequest);
    let got = a.wait(2);
    assert_eq!((got[0].wr_id.index(), got[0].status), (1, WcStatus::LocalLength));
    assert_eq!((got[1].wr_id.index(), got[1].status), (2, WcStatus::Flushed));
    expect_disconnected(&mut a, ca);
    expect_disconnected(&mut b, cb);
}

#[test]
fn every_posted_buffer_comes_back_exactly_once() {
    let (mut a, mut b) = (side(1), side(2));
    let (ca, cb) = connect(&mut a, &mut b);
    const N: u64 = 64;
    for i in 0..N {
        a.recv(ca, i, i * 128, 128);
        b.recv(cb, i, i * 128, 128);
    }
    // 40 messages a->b, 25 b->a, some unsignaled, then a disconnects.
    let mut signaled_a = 0;
    for i in 0..40 {
        let mut wr = SendWr::new(WrId::new(2, i), SendOp::Send, a.buf(65536, 32), RemoteBuf::default());
        wr.signaled = i % 3 != 0;
        signaled_a += wr.signaled as usize;
        a.f.post_send(ca, &wr).unwrap();
    }
    for i in 0..25 {
        b.send(cb, i, SendOp::Send, b.buf(65536, 32), RemoteBuf::default());
    }
    a.f.disconnect(ca).unwrap();
    a.f.disconnect(ca).unwrap(); // idempotent
    let ga = a.drain();
    let gb = b.drain();
    let count = |g: &[Completion], op: WcOpcode| g.iter().filter(|c| c.opcode == op).count();
    assert_eq!(count(&ga, WcOpcode::Send), signaled_a);
    assert_eq!(count(&gb, WcOpcode::Send), 25);
    let recv_ids = |g: &[Completion]| -> Vec<u64> {
        let mut v: Vec<u64> = g
            .iter()
            .filter(|c| c.opcode == WcOpcode::Recv)
            .map(|c| c.wr_id.index())
            .collect();
        v.sort();
        v
    };
    let all: Vec<u64> = (0..N).collect();
    assert_eq!(recv_ids(&ga), all, "each of a's receives completes exactly once");
    assert_eq!(recv_ids(&gb), all, "each of b's receives completes exactly once");
    let ok = |g: &[Completion]| {
        g.iter()
            .filter(|c| c.opcode == WcOpcode::Recv && c.status.is_success())
            .count()
    };
    assert_eq!(ok(&ga), 25, "b's Sends landed before the disconnect");
    assert_eq!(ok(&gb), 40, "a's Sends landed before the disconnect");
    expect_disconnected(&mut a, ca);
    expect_disconnected(&mut b, cb);
    assert!(a.drain().is_empty() && b.drain().is_empty());
    assert_eq!((a.f.conn_count(), b.f.conn_count()), (0, 0));
    assert!(matches!(
        a.f.post_send(
            ca,
            &SendWr::new(WrId(0), SendOp::Send, a.buf(0, 1), RemoteBuf::default())
        ),
        Err(FabricError::NotConnected(_))
    ));
}

#[test]
fn sends_are_ordered_after_writes_and_complete_in_posting_order() {
    let (mut a, mut b) = (side(1), side(2));
    let (ca, cb) = connect(&mut a, &mut b);
    const ROUNDS: u64 = 200;
    for i in 0..ROUNDS {
        a.recv(ca, i % 64, (i % 64) * 64, 64);
        // 3 Writes of a round number then a Send announcing it.
        for k in 0..3u64 {
            let v = (i * 3 + k).to_le_bytes();
            b.write((k * 8) as usize + 1_000_000, &v);
            b.send(
                cb,
                i * 4 + k,
                SendOp::RdmaWrite,
                b.buf(1_000_000 + k * 8, 8),
                a.remote(500_000 + k * 8, 8),
            );
        }
        b.write(1_000_100, &i.to_le_bytes());
        b.send(cb, i * 4 + 3, SendOp::Send, b.buf(1_000_100, 8), RemoteBuf::default());
        let rc = a.wait(1);
        assert_eq!(rc[0].status, WcStatus::Success);
        let slot = rc[0].wr_id.index() * 64;
        assert_eq!(a.read(slot as usize, 8), i.to_le_bytes());
        for k in 0..3u64 {
            assert_eq!(
                a.read(500_000 + (k * 8) as usize, 8),
                (i * 3 + k).to_le_bytes(),
                "Write landed before the Send"
            );
        }
    }
    let got = b.wait(ROUNDS as usize * 4);
    for (n, c) in got.iter().enumerate() {
        assert_eq!(c.wr_id.index(), n as u64, "completions in posting order");
        assert_eq!(c.status, WcStatus::Success);
    }
}

#[test]
fn ring_wraps_around_under_load() {
    let (mut a, mut b) = (side(1), side(2));
    let qa = QpConfig {
        recv_depth: 4,
        ..qp(a.cq)
    };
    let qb = QpConfig {
        send_depth: 16,
        ..qp(b.cq)
    };
    let (ca, cb) = connect_with(&mut a, &mut b, qa, qb);
    for i in 0..4 {
        a.recv(ca, i, i * 64, 64);
    }
    // Recv queue of 4: a fifth post is refused.
    assert!(matches!(
        a.f.post_recv(
            ca,
            &RecvWr {
                wr_id: WrId(9),
                buf: a.buf(0, 64)
            }
        ),
        Err(FabricError::QueueFull { .. })
    ));
    const N: u64 = 20_000;
    let (mut sent, mut recvd, mut sends_done) = (0u64, 0u64, 0u64);
    let mut wc = [zero_wc(); 16];
    let start = Instant::now();
    while recvd < N {
        while sent < N && sent - sends_done < 16 {
            b.write(8192 + (sent % 16) as usize * 8, &sent.to_le_bytes());
            b.send(
                cb,
                sent,
                SendOp::Send,
                b.buf(8192 + (sent % 16) * 8, 8),
                RemoteBuf::default(),
            );
            sent += 1;
        }
        let k = a.f.poll_cq(a.cq, &mut wc);
        for c in &wc[..k] {
            assert_eq!(c.status, WcStatus::Success);
            let off = c.wr_id.index() * 64;
            assert_eq!(a.read(off as usize, 8), recvd.to_le_bytes(), "in order, no loss");
            recvd += 1;
            a.recv(ca, c.wr_id.index(), off, 64);
        }
        let k = b.f.poll_cq(b.cq, &mut wc);
        for c in &wc[..k] {
            assert_eq!((c.status, c.wr_id.index()), (WcStatus::Success, sends_done));
            sends_done += 1;
        }
        assert!(start.elapsed() < DEADLINE);
    }
    assert_eq!(b.wait((N - sends_done) as usize).len() as u64, N - sends_done);
}

#[test]
fn srq_is_shared_by_two_connections() {
    let cfg = ShmConfig {
        srq_window: 2,
        ..ShmConfig::default()
    };
    let mut a = side_with(cfg, 1);
    let srq: SrqId = a.f.create_srq(8).unwrap();
    let (mut b, mut c) = (side(2), side(3));
    let qa = QpConfig {
        srq: Some(srq),
        ..qp(a.cq)
    };
    let (qb, qc) = (qp(b.cq), qp(c.cq));
    let (ab, ba) = connect_with(&mut a, &mut b, qa, qb);
    let (ac, ca) = connect_with(&mut a, &mut c, qa, qc);
    // post_recv on an SRQ connection is refused.
    assert!(a
        .f
        .post_recv(
            ab,
            &RecvWr {
                wr_id: WrId(0),
                buf: a.buf(0, 64)
            }
        )
        .is_err());
    for i in 0..8 {
        a.f.post_srq_recv(
            srq,
            &RecvWr {
                wr_id: WrId::new(1, i),
                buf: a.buf(i * 64, 64),
            },
        )
        .unwrap();
    }
    assert!(matches!(
        a.f.post_srq_recv(
            srq,
            &RecvWr {
                wr_id: WrId(99),
                buf: a.buf(0, 64)
            }
        ),
        Err(FabricError::QueueFull { .. })
    ));
    // Each connection holds a window of 2: two Sends each succeed at once,
    // a third waits until a's poll loop refills the window.
    for i in 0..3 {
        b.write(0, &[b'b', i as u8]);
        b.send(ba, i, SendOp::Send, b.buf(0, 2), RemoteBuf::default());
        c.write(0, &[b'c', i as u8]);
        c.send(ca, i, SendOp::Send, c.buf(0, 2), RemoteBuf::default());
    }
    let mut wc = [zero_wc(); 8];
    assert_eq!(b.f.poll_cq(b.cq, &mut wc), 2);
    assert_eq!(c.f.poll_cq(c.cq, &mut wc), 2);
    let got = a.wait(4);
    let mut seen = HashSet::new();
    for w in &got {
        let who = a.read(w.wr_id.index() as usize * 64, 2);
        let expect = if w.conn == ab { b'b' } else { b'c' };
        assert!(w.conn == ab || w.conn == ac);
        assert_eq!(who[0], expect);
        seen.insert(w.wr_id.index());
    }
    assert_eq!(seen.len(), 4);
    // a's poll refilled both windows from the SRQ: the waiting Sends complete.
    assert_eq!(b.wait(1)[0].wr_id.index(), 2);
    assert_eq!(c.wait(1)[0].wr_id.index(), 2);
    assert_eq!(a.wait(2).len(), 2);
    // When one connection fails, its held SRQ receives go back to the SRQ
    // (not flushed) and serve the other connection.
    c.f.disconnect(ca).unwrap();
    expect_disconnected(&mut c, ca);
    let _ = a.drain();
    expect_disconnected(&mut a, ac);
    for i in 3..5 {
        b.send(ba, i, SendOp::Send, b.buf(0, 2), RemoteBuf::default());
    }
    assert_eq!(b.wait(2).len(), 2);
    let got = a.wait(2);
    assert!(got.iter().all(|w| w.conn == ab && w.status.is_success()));
}

#[test]
fn reject_carries_private_data_and_unreachable_addresses_fail() {
    let (mut a, mut b) = (side(1), side(2));
    let at = addr();
    a.f.listen(&at).unwrap();
    let q = qp(b.cq);
    let cb = b.f.connect(&at, &q, b"let me in").unwrap();
    b.recv(cb, 5, 0, 64);
    let req = match a.cm() {
        CmEvent::ConnectRequest { req, .. } => req,
        e => panic!("{e:?}"),
    };
    a.f.reject(req, b"no: busy").unwrap();
    match b.cm() {
        CmEvent::Rejected { conn, private_data } => {
            assert_eq!(conn, cb);
            assert_eq!(private_data.as_bytes(), b"no: busy");
        }
        e => panic!("{e:?}"),
    }
    // The receive posted before the outcome comes back flushed.
    let got = b.wait(1);
    assert_eq!((got[0].wr_id.index(), got[0].status), (5, WcStatus::Flushed));
    assert_eq!(b.f.conn_count(), 0);

    let cu = b.f.connect("@rpcrdma-shm-nobody-listens-here", &q, b"").unwrap();
    assert_eq!(b.cm(), CmEvent::Unreachable { conn: cu });
    assert!(matches!(b.f.connect("", &q, b""), Err(FabricError::BadAddress(_))));
}

#[test]
fn path_listener_and_caps() {
    let (mut a, mut b) = (side(1), side(2));
    assert_eq!(a.f.name(), "shm");
    let caps = a.f.caps();
    assert!(caps.send_with_invalidate && caps.srq);
    assert_eq!(a.f.remote_addr(1, 4096).unwrap(), 4096);
    assert!(a.f.remote_addr(7, 0).is_err());
    assert!(
        a.f.register_region(&a.region.clone(), RegionAccess::Exposable).is_err(),
        "double registration"
    );
    let dir = std::env::temp_dir().join(format!(
        "rpcrdma-shm-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("listen.sock");
    let p = path.to_str().unwrap().to_string();
    a.f.listen(&p).unwrap();
    let q = qp(b.cq);
    b.f.connect(&p, &q, b"x").unwrap();
    assert!(matches!(a.cm(), CmEvent::ConnectRequest { .. }));
    drop(a);
    assert!(!path.exists(), "socket file removed with the fabric");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- RDMA Reads and Writes copied in slices (issue 21 item 5) ----

const MIB: u32 = 1 << 20;

/// `len` bytes of a pattern with no zero byte (`salt` varies it).
fn nonzero_pattern(salt: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(7).wrapping_add(salt) % 251) as u8 + 1)
        .collect()
}

/// The window `q` opened on its whole region to its last connection, as a
/// segment of `len` bytes at `offset`.
fn segment(q: &Side, window: u32, offset: u64, len: u32) -> RemoteBuf {
    RemoteBuf {
        handle: window,
        length: len,
        offset: q.f.remote_addr(q.region.id(), offset).unwrap(),
    }
}

/// Issue 21 item 5: on shm the target's core makes the copy of an RDMA Read
/// itself; done in one go, a client's 1 MiB Read chunk held up every other
/// client's small Call for the whole copy. Connection A's 1 MiB Read and
/// then a small Send on connection B: B's message is received while A's
/// copy is still under way (the end of A's destination not yet written),
/// and the Read completes only after a poll per slice.
#[test]
fn nfs_safety_a_large_rdma_read_does_not_hold_up_another_connections_message() {
    // r: the target (it reads the clients' memory); q: the clients.
    let (mut r, mut q) = (side(2), side(1));
    let (ra, _qa) = connect(&mut r, &mut q);
    let window_a = q.window;
    let (rb, qb) = connect(&mut r, &mut q);
    r.recv(rb, 0, 0, 256);
    let data = nonzero_pattern(3, MIB as usize);
    q.write(0, &data);
    r.send(
        ra,
        1,
        SendOp::RdmaRead,
        r.buf(MIB as u64, MIB),
        segment(&q, window_a, 0, MIB),
    );
    assert!(r.f.progressing(), "the Read is being copied: poll again soon");
    q.write(MIB as usize, b"a small Call on B");
    q.send(qb, 2, SendOp::Send, q.buf(MIB as u64, 17), RemoteBuf::default());
    // The target polls one completion at a time, as often as it takes.
    let mut one = [zero_wc()];
    let (mut polls, mut got) = (0u32, Vec::new());
    let start = Instant::now();
    while got.len() < 2 {
        polls += 1;
        if r.f.poll_cq(r.cq, &mut one) == 1 {
            // Whether the last byte of A's Read had landed by then.
            let tail = r.read(2 * MIB as usize - 1, 1)[0] == data[MIB as usize - 1];
            got.push((one[0], polls, tail));
        }
        assert!(start.elapsed() < DEADLINE, "timed out: {got:?}");
    }
    let (first, _, a_done_then) = got[0];
    assert_eq!(
        (first.opcode, first.conn, first.status),
        (WcOpcode::Recv, rb, WcStatus::Success),
        "B's message comes first, not after A's whole 1 MiB copy: {got:?}"
    );
    assert!(
        !a_done_then,
        "A's copy was still under way when B's message was received"
    );
    let (read, read_polls, _) = got[1];
    assert_eq!(
        (read.opcode, read.conn, read.status, read.byte_len),
        (WcOpcode::RdmaRead, ra, WcStatus::Success, MIB)
    );
    let slices = MIB / ShmConfig::default().copy_slice_bytes;
    assert!(read_polls >= slices - 1, "one slice a poll: {read_polls} polls");
    assert!(r.read(MIB as usize, MIB as usize) == data, "the Read's bytes");
    assert_eq!(r.read(0, 17), b"a small Call on B");
    assert!(!r.f.progressing(), "nothing left to copy");
}

/// Every slice of a Read is checked as the whole Read was: a window the
/// peer closes while its Read is under way fails the rest with
/// RemoteAccess, and nothing past the slices already made is copied.
#[test]
fn nfs_safety_a_window_closed_mid_copy_fails_the_rest_of_the_read() {
    let (mut r, mut q) = (side(2), side(1));
    let (ra, qa) = connect(&mut r, &mut q);
    let data = nonzero_pattern(5, MIB as usize);
    q.write(0, &data);
    r.send(ra, 1, SendOp::RdmaRead, r.buf(0, MIB), q.remote(0, MIB));
    q.f.hide(qa, q.window);
    let wc = r.wait(1);
    assert_eq!(
        (wc[0].opcode, wc[0].status),
        (WcOpcode::RdmaRead, WcStatus::RemoteAccess)
    );
    let slice = ShmConfig::default().copy_slice_bytes as usize;
    assert!(r.read(0, slice) == data[..slice], "the first slice was copied at post");
    assert!(
        r.read(slice, MIB as usize - slice).iter().all(|&b| b == 0),
        "nothing after the window closed"
    );
    expect_disconnected(&mut r, ra);
}

/// A connection torn down (by either side) while a Read is being copied:
/// the Read and the work queued behind it complete Flushed, every receive
/// comes back exactly once, and the connection is reaped.
#[test]
fn nfs_safety_a_connection_torn_down_mid_copy_returns_every_buffer() {
    for local_close in [true, false] {
        let (mut r, mut q) = (side(2), side(1));
        let (ra, qa) = connect(&mut r, &mut q);
        for i in 0..4 {
            r.recv(ra, i, i * 256, 256);
        }
        q.write(0, &nonzero_pattern(9, MIB as usize));
        r.send(ra, 10, SendOp::RdmaRead, r.buf(MIB as u64, MIB), q.remote(0, MIB));
        r.send(ra, 11, SendOp::RdmaWrite, r.buf(4096, 512), q.remote(MIB as u64, 512));
        r.send(ra, 12, SendOp::Send, r.buf(8192, 64), RemoteBuf::default());
        // One more slice, then the teardown.
        let mut one = [zero_wc()];
        assert_eq!(r.f.poll_cq(r.cq, &mut one), 0, "the Read is still being copied");
        if local_close {
            r.f.disconnect(ra).unwrap();
        } else {
            q.f.disconnect(qa).unwrap();
        }
        let got = r.drain();
        let sends: Vec<_> = got
            .iter()
            .filter(|c| c.opcode != WcOpcode::Recv)
            .map(|c| (c.wr_id.index(), c.opcode, c.status))
            .collect();
        assert_eq!(
            sends,
            [
                (10, WcOpcode::RdmaRead, WcStatus::Flushed),
                (11, WcOpcode::RdmaWrite, WcStatus::Flushed),
                (12, WcOpcode::Send, WcStatus::Flushed)
            ],
            "local_close {local_close}"
        );
        let mut recvs: Vec<_> = got
            .iter()
            .filter(|c| c.opcode == WcOpcode::Recv)
            .map(|c| (c.wr_id.index(), c.status))
            .collect();
        recvs.sort_by_key(|c| c.0);
        assert_eq!(recvs, (0..4).map(|i| (i, WcStatus::Flushed)).collect::<Vec<_>>());
        expect_disconnected(&mut r, ra);
        assert!(r.drain().is_empty());
        assert_eq!(r.f.conn_count(), 0, "reaped");
    }
}

/// Sliced RDMA Reads and Writes leave exactly the bytes a whole copy does,
/// for random lengths (around multiples of the slice, so the last slice is
/// whole, one byte, or one byte short), scatter/gather lists, offsets and
/// slice sizes; nothing outside the destination is touched; and the copy
/// takes one poll per slice after the first.
#[test]
fn sliced_copies_are_byte_identical_to_whole_copies() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use std::cell::RefCell;

    // (slice bytes, largest total length).
    const SLICES: [(u32, u32); 5] = [(1, 600), (100, 20_000), (4096, 300_000), (65_535, MIB), (COPY, MIB)];
    const COPY: u32 = dataplane::shm::COPY_SLICE_BYTES;
    let pairs: Vec<RefCell<(Side, ConnId, Side)>> = SLICES
        .iter()
        .map(|&(slice, _)| {
            let cfg = ShmConfig {
                copy_slice_bytes: slice,
                ..ShmConfig::for_rpc_engine()
            };
            let (mut r, mut q) = (side_with(cfg, 2), side(1));
            let (ra, _) = connect(&mut r, &mut q);
            RefCell::new((r, ra, q))
        })
        .collect();
    let case = (
        0..SLICES.len(),
        any::<bool>(),
        0u32..64,
        -1i64..=1,
        any::<bool>(),
        prop::collection::vec((0u32..=1000, 0u32..64), 1..=3),
        0u32..1 << 20,
        any::<u32>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 64,
        ..Config::default()
    });
    runner
        .run(&case, |(si, read, k, delta, near, pieces, remote_at, salt)| {
            let (slice, limit) = SLICES[si];
            let mut p = pairs[si].borrow_mut();
            let (r, ra, q) = &mut *p;
            // Near a multiple of the slice, or anywhere up to the limit.
            let total = if near {
                (i64::from(k % (limit / slice + 1)) * i64::from(slice) + delta).clamp(0, i64::from(limit)) as u32
            } else {
                (u64::from(salt) % (u64::from(limit) + 1)) as u32
            };
            // Split `total` over the list in proportion to the weights,
            // with gaps between the local pieces.
            let weight: u32 = pieces.iter().map(|w| w.0).sum::<u32>().max(1);
            let mut sges = Vec::new();
            let (mut at, mut left) = (4096u64, total);
            for (i, &(w, gap)) in pieces.iter().enumerate() {
                let n = if i + 1 == pieces.len() {
                    left
                } else {
                    ((u64::from(total) * u64::from(w) / u64::from(weight)) as u32).min(left)
                };
                at += u64::from(gap);
                sges.push(r.buf(at, n));
                at += u64::from(n);
                left -= n;
            }
            let remote_at = u64::from(remote_at) % (u64::from(2 * MIB - total) + 1);
            // Source bytes, destination filled with something else.
            let src = nonzero_pattern(salt, total as usize);
            let guard = vec![0u8; 2 * MIB as usize];
            q.write(0, &guard);
            r.write(0, &guard);
            let mut off = 0usize;
            for s in &sges {
                if !read {
                    r.write(s.offset as usize, &src[off..off + s.len as usize]);
                }
                off += s.len as usize;
            }
            if read {
                q.write(remote_at as usize, &src);
            }
            let mut wr = SendWr::new(
                WrId::new(3, u64::from(salt)),
                if read { SendOp::RdmaRead } else { SendOp::RdmaWrite },
                sges[0],
                q.remote(remote_at, total),
            );
            for (i, s) in sges.iter().enumerate() {
                wr.sge[i] = *s;
            }
            wr.num_sge = sges.len() as u8;
            r.f.post_send(*ra, &wr).unwrap();
            let mut one = [zero_wc()];
            // Polls until the completion, the one that returns it included.
            let mut polls = 1u32;
            while r.f.poll_cq(r.cq, &mut one) == 0 {
                polls += 1;
                prop_assert!(polls <= total / slice + 2, "more polls than slices");
            }
            prop_assert_eq!((one[0].status, one[0].byte_len), (WcStatus::Success, total));
            let need = total.div_ceil(slice);
            prop_assert!(
                polls + 1 >= need && polls <= need.max(1),
                "{} polls for {} slices",
                polls,
                need
            );
            // The post copied what was left of its turn's slice (at most one),
            // and each poll one slice.
            // The destination holds the source; nothing around it changed.
            let (mut local, mut around) = (Vec::new(), 0usize);
            for s in &sges {
                local.extend(r.read(s.offset as usize, s.len as usize));
            }
            let remote = q.read(remote_at as usize, total as usize);
            prop_assert!((if read { &local } else { &remote }) == &src, "destination bytes");
            if read {
                let r_all = r.read(0, 2 * MIB as usize);
                around += r_all.iter().filter(|&&b| b != 0).count();
                prop_assert_eq!(around, total as usize, "bytes written outside the list");
            } else {
                let q_all = q.read(0, 2 * MIB as usize);
                around += q_all.iter().filter(|&&b| b != 0).count();
                prop_assert_eq!(around, total as usize, "bytes written outside the segment");
            }
            Ok(())
        })
        .unwrap();
}
