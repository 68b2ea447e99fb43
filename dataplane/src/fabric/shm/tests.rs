//! Tests of the shm fabric object: connection ids, and a peer that breaks the
//! CM protocol or the delivery ring.

use super::*;
use crate::fabric::{LocalBuf, RemoteBuf, SendOp, WcOpcode, WcStatus, WrId};
use mempool::region::{Region, RegionConfig};

#[test]
fn slab_ids_carry_generations() {
    let mut s: Slab<u8> = Slab::with_capacity(2);
    let a = s.insert(1).unwrap();
    let b = s.insert(2).unwrap();
    assert!(s.insert(3).is_none(), "bounded");
    assert_eq!(s.index(a), Some((a & 0xffff) as usize));
    s.remove(s.index(a).unwrap());
    assert_eq!(s.index(a), None, "stale id after removal");
    let c = s.insert(4).unwrap();
    assert_eq!(c & 0xffff, a & 0xffff, "slot reused");
    assert_ne!(c, a, "with a new generation");
    assert_eq!(s.index(b), Some((b & 0xffff) as usize));
}

struct End {
    f: ShmFabric,
    cq: CqId,
    region: Arc<Region>,
}

/// An endpoint with region `id`. Odd ids prefetch receive buffers (as
/// the engines configure it) and even ids do not, so tests pairing 1 and
/// 2 cover both receive paths.
fn end(id: u16) -> End {
    let cfg = if id.is_multiple_of(2) {
        ShmConfig::default()
    } else {
        ShmConfig::for_rpc_engine()
    };
    let mut f = ShmFabric::new(cfg).unwrap();
    let region = Arc::new(Region::create(id, 1 << 20, &RegionConfig::default()).unwrap());
    f.register_region(&region, crate::fabric::RegionAccess::Exposable)
        .unwrap();
    let cq = f.create_cq(64).unwrap();
    End { f, cq, region }
}

fn wait_cm(f: &mut ShmFabric) -> CmEvent {
    let start = Instant::now();
    loop {
        if let Some(e) = f.poll_cm() {
            return e;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "no CM event");
    }
}

fn connected(tag: &str) -> (End, ConnId, End, ConnId) {
    let (mut a, mut b) = (end(1), end(2));
    let addr = format!("@rpcrdma-shm-unit-{tag}-{}", std::process::id());
    a.f.listen(&addr).unwrap();
    let qb = QpConfig {
        cq: b.cq,
        ..QpConfig::default()
    };
    let cb = b.f.connect(&addr, &qb, b"").unwrap();
    let CmEvent::ConnectRequest { req, .. } = wait_cm(&mut a.f) else {
        panic!("no request")
    };
    let qa = QpConfig {
        cq: a.cq,
        ..QpConfig::default()
    };
    let ca = a.f.accept(req, &qa, b"").unwrap();
    assert!(matches!(wait_cm(&mut b.f), CmEvent::Established { .. }));
    assert!(matches!(wait_cm(&mut a.f), CmEvent::Established { .. }));
    (a, ca, b, cb)
}

#[test]
fn garbage_on_the_cm_socket_is_dropped() {
    let mut a = end(1);
    let addr = format!("@rpcrdma-shm-unit-garbage-{}", std::process::id());
    a.f.listen(&addr).unwrap();
    let ua = UnixAddr::parse(&addr).unwrap();
    // Random bytes; a well-formed REQ without its descriptors; a REQ whose
    // descriptors do not match its region count.
    let hello = Hello {
        private_data: PrivateData::EMPTY,
        ring_cap: 4,
        file_len: 8192,
        regions: vec![RegionInfo {
            id: 1,
            rkey: 1,
            len: 4096,
        }],
    };
    let mut buf = [0u8; MAX_MSG_LEN];
    let n = wire::encode(&Msg::Req(hello), &mut buf);
    let file = mapping::SharedFile::create("garbage", 8192).unwrap();
    let cases: [(&[u8], Vec<BorrowedFd<'_>>); 3] = [
        (b"not a request at all", vec![]),
        (&buf[..n], vec![]),
        (&buf[..n], vec![file.fd()]),
    ];
    let mut socks = Vec::new();
    for (bytes, fds) in &cases {
        let s = sock::connect(&ua).unwrap();
        sock::send_msg(s.as_fd(), bytes, fds).unwrap();
        socks.push(s);
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        assert_eq!(a.f.poll_cm(), None, "nothing valid arrived");
    }
    assert!(a.f.incoming.is_empty(), "all dropped");
    // A REQ that decodes but whose ring file is bogus surfaces as a request
    // (its private data is for the consumer to judge) and accept refuses it.
    let hello = Hello {
        private_data: PrivateData::new(b"pd"),
        ring_cap: 4,
        file_len: 1 << 40,
        regions: vec![],
    };
    let n = wire::encode(&Msg::Req(hello), &mut buf);
    let s = sock::connect(&ua).unwrap();
    sock::send_msg(s.as_fd(), &buf[..n], &[file.fd()]).unwrap();
    let CmEvent::ConnectRequest { req, .. } = wait_cm(&mut a.f) else {
        panic!("expected a request")
    };
    let qa = QpConfig {
        cq: a.cq,
        ..QpConfig::default()
    };
    assert!(
        a.f.accept(req, &qa, b"").is_err(),
        "header of a zeroed file does not match"
    );
    assert!(a.f.accept(req, &qa, b"").is_err(), "request consumed");
    assert_eq!(a.f.conn_count(), 0);
}

#[test]
fn corrupt_delivery_moves_the_receiver_to_error() {
    let (mut a, ca, mut b, cb) = connected("corrupt");
    for i in 0..2 {
        let wr = RecvWr {
            wr_id: WrId::new(1, i),
            buf: LocalBuf {
                region: a.region.id(),
                offset: i * 64,
                len: 64,
            },
        };
        a.f.post_recv(ca, &wr).unwrap();
    }
    // b pushes a delivery naming a descriptor sequence a never posted.
    let bi = b.f.conns.index(cb.0).unwrap();
    assert!(b.f.conns.get_mut(bi).unwrap().inject_delivery([77, 1]));
    let mut wc = [Completion {
        wr_id: WrId(0),
        status: WcStatus::General,
        opcode: WcOpcode::Send,
        conn: ca,
        byte_len: 0,
        invalidated_rkey: None,
    }; 8];
    let n = a.f.poll_cq(a.cq, &mut wc);
    assert_eq!(n, 2);
    assert!(wc[..2]
        .iter()
        .all(|c| c.status == WcStatus::Flushed && c.opcode == WcOpcode::Recv));
    assert_eq!(wait_cm(&mut a.f), CmEvent::Disconnected { conn: ca });
    // b learns through the closed flag / socket.
    assert_eq!(wait_cm(&mut b.f), CmEvent::Disconnected { conn: cb });
    // Nothing was outstanding on b: the connection is reaped as soon as
    // its terminal event is consumed, and the id goes stale.
    let wr = SendWr::new(
        WrId(5),
        SendOp::Send,
        LocalBuf {
            region: b.region.id(),
            offset: 0,
            len: 8,
        },
        RemoteBuf::default(),
    );
    assert!(matches!(b.f.post_send(cb, &wr), Err(FabricError::NotConnected(c)) if c == cb));
    assert_eq!(b.f.conn_count(), 0);
    assert_eq!(a.f.poll_cq(a.cq, &mut wc), 0);
    assert_eq!(a.f.conn_count(), 0);
}
