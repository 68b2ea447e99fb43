//! sim provider: data movement, RNR, access checks, invalidation, ordering.

mod sim_common;

use dataplane::sim::{ConnState, SimConfig, SimError, SimNetwork};
use dataplane::{
    CmEvent, Completion, Fabric, FabricError, LocalBuf, QpConfig, RecvWr, RegionAccess, SendOp, SendWr, WcOpcode,
    WcStatus,
};
use sim_common::*;

const SEND: u8 = 1;
const RECV: u8 = 2;

fn recv(h: &mut Host, conn: dataplane::ConnId, index: u64, offset: u64, len: u32) {
    let r = RecvWr {
        wr_id: wr(RECV, index),
        buf: h.buf(offset, len),
    };
    h.fab.post_recv(conn, &r).expect("post_recv");
}

fn find(wcs: &[Completion], tag: u8, index: u64) -> Completion {
    *wcs.iter()
        .find(|w| w.wr_id == wr(tag, index))
        .unwrap_or_else(|| panic!("no completion for tag {tag} index {index} in {wcs:?}"))
}

#[test]
fn send_gathers_sges_into_the_next_receive_with_byte_len() {
    let net = SimNetwork::with_seed(1);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, sc) = connect(&net, &mut c, &mut s);

    let head = pattern(1, 40);
    let body = pattern(2, 60);
    write(&c.region, 0, &head);
    write(&c.region, 4096, &body);
    recv(&mut s, sc, 0, 1000, 512);
    recv(&mut s, sc, 1, 2000, 512);
    let mut w = SendWr::new(wr(SEND, 7), SendOp::Send, c.buf(0, 40), Default::default());
    w.sge[1] = c.buf(4096, 60);
    w.num_sge = 2;
    c.fab.post_send(cc, &w).unwrap();
    net.run_until_idle(1000).unwrap();

    let got = s.drain();
    assert_eq!(got.len(), 1, "{got:?}");
    let r = got[0];
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.conn, r.byte_len),
        (wr(RECV, 0), WcStatus::Success, WcOpcode::Recv, sc, 100)
    );
    assert_eq!(r.invalidated_rkey, None);
    let mut want = head.clone();
    want.extend_from_slice(&body);
    assert_eq!(read(&s.region, 1000, 100), want);
    assert_eq!(s.fab.posted_recvs(sc), 1, "the second receive is still posted");

    let sent = c.drain();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0].wr_id, sent[0].status, sent[0].opcode, sent[0].conn),
        (wr(SEND, 7), WcStatus::Success, WcOpcode::Send, cc)
    );
    assert_eq!(net.stats().sends, 1);
}

#[test]
fn send_larger_than_the_receive_is_local_length_and_kills_the_connection() {
    let net = SimNetwork::with_seed(2);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, sc) = connect(&net, &mut c, &mut s);
    recv(&mut s, sc, 0, 0, 64);
    recv(&mut s, sc, 1, 64, 64);
    recv(&mut c, cc, 5, 0, 64);
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 0), SendOp::Send, c.buf(0, 65), Default::default()),
        )
        .unwrap();
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 1), SendOp::Send, c.buf(0, 10), Default::default()),
        )
        .unwrap();
    net.run_until_idle(1000).unwrap();

    let sw = s.drain();
    assert_eq!(find(&sw, RECV, 0).status, WcStatus::LocalLength);
    assert_eq!(find(&sw, RECV, 1).status, WcStatus::Flushed);
    assert_eq!(sw.len(), 2);
    let cw = c.drain();
    assert_eq!(find(&cw, SEND, 0).status, WcStatus::RemoteInvalidRequest);
    assert_eq!(find(&cw, SEND, 1).status, WcStatus::Flushed);
    assert_eq!(find(&cw, RECV, 5).status, WcStatus::Flushed);
    assert_eq!(cw.len(), 3);
    assert_eq!(c.cm_events(), vec![CmEvent::Disconnected { conn: cc }]);
    assert_eq!(s.cm_events(), vec![CmEvent::Disconnected { conn: sc }]);
    assert_eq!(c.fab.conn_state(cc), Some(ConnState::Error));
}

#[test]
fn rnr_retries_until_a_receive_is_posted() {
    let net = SimNetwork::with_seed(3);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, sc) = connect(&net, &mut c, &mut s);
    write(&c.region, 0, b"late receiver");
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 0), SendOp::Send, c.buf(0, 13), Default::default()),
        )
        .unwrap();
    // rnr_retry = 7 (default): retries forever, so the network never idles.
    assert!(matches!(net.run_until_idle(50), Err(SimError::NotIdle { .. })));
    let naks = net.stats().rnr_naks;
    assert!(naks >= 10, "{naks}");
    assert!(c.drain().is_empty() && s.drain().is_empty());
    assert_eq!(c.fab.outstanding_sends(cc), 1);

    recv(&mut s, sc, 0, 512, 64);
    net.run_until_idle(1000).unwrap();
    let r = find(&s.drain(), RECV, 0);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 13));
    assert_eq!(read(&s.region, 512, 13), b"late receiver");
    assert_eq!(find(&c.drain(), SEND, 0).status, WcStatus::Success);
    assert_eq!(c.fab.conn_state(cc), Some(ConnState::Ready));
}

#[test]
fn rnr_retry_exceeded_fails_the_send_and_the_connection() {
    let net = SimNetwork::with_seed(4);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let cqp = QpConfig { rnr_retry: 3, ..c.qp() };
    let sqp = s.qp();
    let (cc, sc) = connect_with(&net, &mut c, &mut s, "srv", cqp, sqp);
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 0), SendOp::Send, c.buf(0, 8), Default::default()),
        )
        .unwrap();
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 1), SendOp::RdmaWrite, c.buf(0, 8), s.segment(0, 8)),
        )
        .unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(net.stats().rnr_naks, 4, "first attempt plus three retries");
    let cw = c.drain();
    assert_eq!(cw.len(), 2);
    assert_eq!((cw[0].wr_id, cw[0].status), (wr(SEND, 0), WcStatus::RnrRetryExceeded));
    assert_eq!((cw[1].wr_id, cw[1].status), (wr(SEND, 1), WcStatus::Flushed));
    assert_eq!(c.cm_events(), vec![CmEvent::Disconnected { conn: cc }]);
    assert_eq!(s.cm_events(), vec![CmEvent::Disconnected { conn: sc }]);
    // Posting to a failed connection completes at once, flushed.
    recv(&mut s, sc, 9, 0, 8);
    let sw = s.drain();
    assert_eq!(
        (sw.len(), sw[0].wr_id, sw[0].status),
        (1, wr(RECV, 9), WcStatus::Flushed)
    );
}

#[test]
fn rdma_write_and_read_move_data_with_region_relative_addresses() {
    let net = SimNetwork::with_seed(5);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, _sc) = connect(&net, &mut c, &mut s);
    let a = pattern(10, 300);
    let b = pattern(11, 200);
    write(&c.region, 100, &a[..100]);
    write(&c.region, 8000, &a[100..]);
    write(&s.region, 30_000, &b);

    let mut w = SendWr::new(wr(SEND, 0), SendOp::RdmaWrite, c.buf(100, 100), s.segment(20_000, 300));
    w.sge[1] = c.buf(8000, 200);
    w.num_sge = 2;
    c.fab.post_send(cc, &w).unwrap();
    // Read 200 bytes into two local pieces.
    let mut r = SendWr::new(wr(SEND, 1), SendOp::RdmaRead, c.buf(40_000, 50), s.segment(30_000, 200));
    r.sge[1] = c.buf(50_000, 150);
    r.num_sge = 2;
    c.fab.post_send(cc, &r).unwrap();
    net.run_until_idle(1000).unwrap();

    assert_eq!(read(&s.region, 20_000, 300), a);
    assert_eq!(read(&c.region, 40_000, 50), &b[..50]);
    assert_eq!(read(&c.region, 50_000, 150), &b[50..]);
    let cw = c.drain();
    assert_eq!(cw.len(), 2);
    assert_eq!(
        (cw[0].wr_id, cw[0].status, cw[0].opcode, cw[0].byte_len),
        (wr(SEND, 0), WcStatus::Success, WcOpcode::RdmaWrite, 300)
    );
    assert_eq!(
        (cw[1].wr_id, cw[1].status, cw[1].opcode, cw[1].byte_len),
        (wr(SEND, 1), WcStatus::Success, WcOpcode::RdmaRead, 200)
    );
    assert!(
        s.drain().is_empty(),
        "RDMA Write and Read complete nothing at the target"
    );
    assert_eq!((net.stats().writes, net.stats().reads), (1, 1));
}

type Regions = (
    std::sync::Arc<mempool::region::Region>,
    std::sync::Arc<mempool::region::Region>,
);

/// Run a scenario where the client's work request made by `make_bad(client,
/// server)` fails with a remote access error; every buffer posted on either
/// side must come back exactly once, and both sides see Disconnected once.
fn remote_access_failure(seed: u64, regions: &Regions, make_bad: impl Fn(&Host, &Host) -> SendWr) {
    let net = SimNetwork::with_seed(seed);
    let mut c = Host::new(&net, regions.0.clone());
    let mut s = Host::new(&net, regions.1.clone());
    let (cc, sc) = connect(&net, &mut c, &mut s);
    for i in 0..4 {
        recv(&mut s, sc, i, i * 100, 100);
        recv(&mut c, cc, 10 + i, i * 100, 100);
    }
    // One good Write first, then the bad one, then more work that must flush.
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 0), SendOp::RdmaWrite, c.buf(0, 16), s.segment(4096, 16)),
        )
        .unwrap();
    c.fab.post_send(cc, &make_bad(&c, &s)).unwrap();
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 2), SendOp::Send, c.buf(0, 16), Default::default()),
        )
        .unwrap();
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 3), SendOp::RdmaRead, c.buf(0, 16), s.segment(0, 16)),
        )
        .unwrap();
    s.fab
        .post_send(
            sc,
            &SendWr::new(wr(SEND, 20), SendOp::Send, s.buf(0, 16), Default::default()),
        )
        .unwrap();
    net.run_until_idle(10_000).unwrap();

    let cw = c.drain();
    let sw = s.drain();
    for i in 0..4 {
        assert_eq!(
            cw.iter().filter(|w| w.wr_id == wr(SEND, i)).count(),
            1,
            "client send {i}: {cw:?}"
        );
        assert_eq!(
            cw.iter().filter(|w| w.wr_id == wr(RECV, 10 + i)).count(),
            1,
            "client recv {i}: {cw:?}"
        );
        assert_eq!(
            sw.iter().filter(|w| w.wr_id == wr(RECV, i)).count(),
            1,
            "server recv {i}: {sw:?}"
        );
    }
    assert_eq!(sw.iter().filter(|w| w.wr_id == wr(SEND, 20)).count(), 1);
    assert_eq!((cw.len(), sw.len()), (8, 5));
    let sends: Vec<_> = cw.iter().filter(|w| w.opcode != WcOpcode::Recv).collect();
    assert_eq!(
        sends.iter().map(|w| w.wr_id.index()).collect::<Vec<_>>(),
        vec![0, 1, 2, 3],
        "posting order"
    );
    assert_eq!(sends[0].status, WcStatus::Success);
    assert_eq!(sends[1].status, WcStatus::RemoteAccess);
    assert_eq!(
        (sends[2].status, sends[3].status),
        (WcStatus::Flushed, WcStatus::Flushed)
    );
    // The server's Send either reached the client before the failure (one
    // client receive succeeded and the send completed or was flushed before its
    // ACK) or it was flushed and no client receive succeeded.
    let delivered = cw
        .iter()
        .filter(|w| w.opcode == WcOpcode::Recv && w.status.is_success())
        .count();
    let server_send = sw.iter().find(|w| w.wr_id == wr(SEND, 20)).unwrap();
    assert!(delivered <= 1);
    if delivered == 0 {
        assert_eq!(server_send.status, WcStatus::Flushed);
    }
    assert!(
        sw.iter()
            .all(|w| w.opcode != WcOpcode::Recv || w.status == WcStatus::Flushed),
        "{sw:?}"
    );
    assert_eq!(c.cm_events(), vec![CmEvent::Disconnected { conn: cc }]);
    assert_eq!(s.cm_events(), vec![CmEvent::Disconnected { conn: sc }]);
    assert_eq!(
        (c.fab.conn_state(cc), s.fab.conn_state(sc)),
        (Some(ConnState::Error), Some(ConnState::Error))
    );
}

#[test]
fn bad_rkey_is_remote_access_and_everything_flushes_on_both_sides() {
    let regions = (region(1), region(2));
    for seed in 0..8 {
        remote_access_failure(seed, &regions, |c, s| {
            let mut g = s.segment(0, 16);
            g.handle ^= 1; // right region id, wrong key byte
            SendWr::new(wr(SEND, 1), SendOp::RdmaWrite, c.buf(0, 16), g)
        });
        remote_access_failure(seed, &regions, |c, s| {
            // The client's own rkey means nothing at the server.
            let mut g = s.segment(0, 16);
            g.handle = c.keys.rkey;
            SendWr::new(wr(SEND, 1), SendOp::RdmaRead, c.buf(0, 16), g)
        });
    }
}

#[test]
fn out_of_range_access_is_remote_access() {
    let len = sim_common::REGION_LEN as u64;
    let regions = (region(1), region(2));
    for seed in 0..4 {
        // Past the end of the region.
        remote_access_failure(seed, &regions, |c, s| {
            let real = s.region.len() as u64;
            let g = dataplane::RemoteBuf {
                handle: s.keys.rkey,
                length: 64,
                offset: real - 8,
            };
            SendWr::new(wr(SEND, 1), SendOp::RdmaWrite, c.buf(0, 16), g)
        });
        // Offset that overflows u64 arithmetic.
        remote_access_failure(seed, &regions, |c, s| {
            let g = dataplane::RemoteBuf {
                handle: s.keys.rkey,
                length: 64,
                offset: u64::MAX - 4,
            };
            SendWr::new(wr(SEND, 1), SendOp::RdmaRead, c.buf(0, 16), g)
        });
        // Longer than the advertised segment, though inside the region.
        remote_access_failure(seed, &regions, |c, s| {
            SendWr::new(wr(SEND, 1), SendOp::RdmaWrite, c.buf(0, 32), s.segment(len / 2, 31))
        });
    }
}

#[test]
fn local_buffer_outside_a_registered_region_is_local_protection() {
    let net = SimNetwork::with_seed(6);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, sc) = connect(&net, &mut c, &mut s);
    recv(&mut s, sc, 0, 0, 64);
    // Region 9 is not registered at the client.
    let bad = SendWr::new(
        wr(SEND, 0),
        SendOp::Send,
        LocalBuf {
            region: 9,
            offset: 0,
            len: 8,
        },
        Default::default(),
    );
    c.fab.post_send(cc, &bad).unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(find(&c.drain(), SEND, 0).status, WcStatus::LocalProtection);
    assert_eq!(
        find(&s.drain(), RECV, 0).status,
        WcStatus::Flushed,
        "the peer goes down too"
    );
    assert_eq!(s.cm_events(), vec![CmEvent::Disconnected { conn: sc }]);

    // A receive buffer beyond its region fails at the receiver.
    let net = SimNetwork::with_seed(7);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, sc) = connect(&net, &mut c, &mut s);
    let end = s.region.len() as u64;
    s.fab
        .post_recv(
            sc,
            &RecvWr {
                wr_id: wr(RECV, 0),
                buf: s.buf(end - 10, 64),
            },
        )
        .unwrap();
    c.fab
        .post_send(
            cc,
            &SendWr::new(wr(SEND, 0), SendOp::Send, c.buf(0, 8), Default::default()),
        )
        .unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(find(&s.drain(), RECV, 0).status, WcStatus::LocalProtection);
    assert_eq!(find(&c.drain(), SEND, 0).status, WcStatus::RemoteInvalidRequest);
}

#[test]
fn send_with_invalidate_reports_and_revokes_the_rkey() {
    let net = SimNetwork::with_seed(8);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, sc) = connect(&net, &mut c, &mut s);
    let seg = c.segment(0, 64); // what the client advertised
    assert!(c.fab.rkey_valid(seg.handle));
    // Before invalidation the server can write there.
    s.fab
        .post_send(sc, &SendWr::new(wr(SEND, 0), SendOp::RdmaWrite, s.buf(0, 64), seg))
        .unwrap();
    recv(&mut c, cc, 0, 1024, 128);
    write(&s.region, 512, b"reply");
    let inv = SendWr::new(
        wr(SEND, 1),
        SendOp::SendWithInv { rkey: seg.handle },
        s.buf(512, 5),
        Default::default(),
    );
    s.fab.post_send(sc, &inv).unwrap();
    net.run_until_idle(1000).unwrap();
    let r = find(&c.drain(), RECV, 0);
    assert_eq!(
        (r.status, r.byte_len, r.invalidated_rkey),
        (WcStatus::Success, 5, Some(seg.handle))
    );
    assert_eq!(read(&c.region, 1024, 5), b"reply");
    assert!(!c.fab.rkey_valid(seg.handle));
    let sw = s.drain();
    assert!(sw.iter().all(|w| w.status.is_success()), "{sw:?}");

    // Any later remote access with the invalidated key fails.
    s.fab
        .post_send(
            sc,
            &SendWr::new(wr(SEND, 2), SendOp::RdmaRead, s.buf(0, 8), c.segment(4096, 8)),
        )
        .unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(find(&s.drain(), SEND, 2).status, WcStatus::RemoteAccess);
    assert_eq!(c.cm_events(), vec![CmEvent::Disconnected { conn: cc }]);
}

#[test]
fn invalidating_an_unknown_rkey_is_remote_invalid_request() {
    let net = SimNetwork::with_seed(9);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, sc) = connect(&net, &mut c, &mut s);
    recv(&mut c, cc, 0, 0, 64);
    let bogus = c.keys.rkey ^ 0x80;
    s.fab
        .post_send(
            sc,
            &SendWr::new(
                wr(SEND, 0),
                SendOp::SendWithInv { rkey: bogus },
                s.buf(0, 4),
                Default::default(),
            ),
        )
        .unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(find(&c.drain(), RECV, 0).status, WcStatus::RemoteInvalidRequest);
    assert_eq!(find(&s.drain(), SEND, 0).status, WcStatus::RemoteInvalidRequest);
    assert!(c.fab.rkey_valid(c.window), "the real key is untouched");
    assert!(!c.fab.rkey_valid(c.keys.rkey), "a region key is never a window");
}

#[test]
fn a_send_after_a_write_on_one_qp_sees_the_written_data() {
    let (rc, rs) = (region(1), region(2));
    for seed in 0..32 {
        let net = SimNetwork::with_seed(seed);
        let mut c = Host::new(&net, rc.clone());
        let mut s = Host::new(&net, rs.clone());
        write(&s.region, 4096, &[0; 256]);
        let (cc, sc) = connect(&net, &mut c, &mut s);
        let data = pattern(seed, 256);
        write(&c.region, 0, &data);
        recv(&mut s, sc, 0, 8192, 64);
        c.fab
            .post_send(
                cc,
                &SendWr::new(wr(SEND, 0), SendOp::RdmaWrite, c.buf(0, 256), s.segment(4096, 256)),
            )
            .unwrap();
        c.fab
            .post_send(
                cc,
                &SendWr::new(wr(SEND, 1), SendOp::Send, c.buf(0, 4), Default::default()),
            )
            .unwrap();
        let mut seen = false;
        while net.step() {
            if !s.drain().is_empty() {
                assert_eq!(
                    read(&s.region, 4096, 256),
                    data,
                    "seed {seed}: Send delivered before the Write's data"
                );
                seen = true;
            }
        }
        assert!(seen);
    }
}

#[test]
fn srq_receives_serve_several_connections_and_survive_their_failure() {
    let net = SimNetwork::with_seed(10);
    let mut s = Host::new(&net, region(2));
    let srq = s.fab.create_srq(64).unwrap();
    s.fab.listen("srv").unwrap();
    let sqp = QpConfig {
        srq: Some(srq),
        ..s.qp()
    };
    let mut clients = [Host::new(&net, region(1)), Host::new(&net, region(3))];
    let mut cconns = Vec::new();
    for (k, c) in clients.iter_mut().enumerate() {
        cconns.push(c.fab.connect("srv", &c.qp(), &[k as u8]).unwrap());
    }
    // Connect requests may arrive in either order: the private data says whose.
    let mut sconns = [None, None];
    while sconns.iter().any(Option::is_none) {
        assert!(net.step());
        while let Some(ev) = s.fab.poll_cm() {
            if let CmEvent::ConnectRequest { req, private_data, .. } = ev {
                sconns[private_data.as_bytes()[0] as usize] = Some(s.fab.accept(req, &sqp, b"").unwrap());
            }
        }
    }
    let sconns = sconns.map(Option::unwrap);
    net.run_until_idle(10_000).unwrap();
    assert!(matches!(
        s.fab.post_recv(
            sconns[0],
            &RecvWr {
                wr_id: wr(RECV, 99),
                buf: s.buf(0, 8)
            }
        ),
        Err(FabricError::Unsupported(_))
    ));
    for i in 0..8 {
        s.fab
            .post_srq_recv(
                srq,
                &RecvWr {
                    wr_id: wr(RECV, i),
                    buf: s.buf(i * 256, 256),
                },
            )
            .unwrap();
    }
    for (k, c) in clients.iter_mut().enumerate() {
        write(&c.region, 0, &[k as u8 + 1; 32]);
        c.fab
            .post_send(
                cconns[k],
                &SendWr::new(wr(SEND, k as u64), SendOp::Send, c.buf(0, 32), Default::default()),
            )
            .unwrap();
    }
    net.run_until_idle(10_000).unwrap();
    let sw = s.drain();
    assert_eq!(sw.len(), 2);
    for w in &sw {
        assert!(w.status.is_success());
        let k = sconns
            .iter()
            .position(|&c| c == w.conn)
            .expect("completion names its connection");
        assert_eq!(read(&s.region, w.wr_id.index() * 256, 32), vec![k as u8 + 1; 32]);
    }
    assert_eq!(s.fab.srq_len(srq), 6);
    // One connection fails: its SRQ receives stay posted.
    clients[0].fab.disconnect(cconns[0]).unwrap();
    net.run_until_idle(10_000).unwrap();
    assert_eq!(s.fab.srq_len(srq), 6);
    assert!(s.drain().is_empty());
    let evs = s.cm_events();
    assert_eq!(
        evs.iter().filter(|e| matches!(e, CmEvent::Established { .. })).count(),
        2
    );
    assert_eq!(evs.last(), Some(&CmEvent::Disconnected { conn: sconns[0] }));
    assert_eq!(evs.len(), 3);
    // The other one still works.
    clients[1]
        .fab
        .post_send(
            cconns[1],
            &SendWr::new(wr(SEND, 5), SendOp::Send, clients[1].buf(0, 32), Default::default()),
        )
        .unwrap();
    net.run_until_idle(10_000).unwrap();
    assert_eq!(s.drain().len(), 1);
    assert_eq!(s.fab.srq_len(srq), 5);
}

#[test]
fn unsignaled_work_requests_hold_their_slots_until_a_signaled_completion() {
    let net = SimNetwork::with_seed(11);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let cqp = QpConfig {
        send_depth: 2,
        ..c.qp()
    };
    let sqp = s.qp();
    let (cc, _sc) = connect_with(&net, &mut c, &mut s, "srv", cqp, sqp);
    let mut w = SendWr::new(wr(SEND, 0), SendOp::RdmaWrite, c.buf(0, 8), s.segment(0, 8));
    w.signaled = false;
    c.fab.post_send(cc, &w).unwrap();
    c.fab.post_send(cc, &w).unwrap();
    assert!(matches!(c.fab.post_send(cc, &w), Err(FabricError::QueueFull { .. })));
    net.run_until_idle(1000).unwrap();
    assert!(c.drain().is_empty(), "unsignaled successes complete nothing");
    assert_eq!(c.fab.outstanding_sends(cc), 0);
    assert!(
        matches!(c.fab.post_send(cc, &w), Err(FabricError::QueueFull { .. })),
        "slots are not yet released"
    );

    // Another QP: one unsignaled and one signaled; the signaled completion frees both.
    let net = SimNetwork::with_seed(12);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let cqp = QpConfig {
        send_depth: 2,
        ..c.qp()
    };
    let sqp = s.qp();
    let (cc, _sc) = connect_with(&net, &mut c, &mut s, "srv", cqp, sqp);
    let mut u = SendWr::new(wr(SEND, 0), SendOp::RdmaWrite, c.buf(0, 8), s.segment(0, 8));
    u.signaled = false;
    let sig = SendWr::new(wr(SEND, 1), SendOp::RdmaWrite, c.buf(0, 8), s.segment(0, 8));
    c.fab.post_send(cc, &u).unwrap();
    c.fab.post_send(cc, &sig).unwrap();
    net.run_until_idle(1000).unwrap();
    let cw = c.drain();
    assert_eq!(cw.len(), 1);
    assert_eq!(cw[0].wr_id, wr(SEND, 1));
    c.fab.post_send(cc, &u).unwrap();
    c.fab.post_send(cc, &sig).unwrap();
}

#[test]
fn inline_sends_copy_at_post_time_and_others_at_execution() {
    for (max_inline, want_old) in [(64u32, true), (0, false)] {
        let net = SimNetwork::with_seed(13);
        let mut c = Host::new(&net, region(1));
        let mut s = Host::new(&net, region(2));
        let cqp = QpConfig { max_inline, ..c.qp() };
        let sqp = s.qp();
        let (cc, sc) = connect_with(&net, &mut c, &mut s, "srv", cqp, sqp);
        recv(&mut s, sc, 0, 0, 64);
        write(&c.region, 0, b"old bytes");
        c.fab
            .post_send(
                cc,
                &SendWr::new(wr(SEND, 0), SendOp::Send, c.buf(0, 9), Default::default()),
            )
            .unwrap();
        write(&c.region, 0, b"new bytes"); // reused before the completion
        net.run_until_idle(1000).unwrap();
        let got = read(&s.region, 0, 9);
        assert_eq!(
            got == b"old bytes",
            want_old,
            "max_inline {max_inline}: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
}

#[test]
fn posting_rules_before_establishment_and_bad_arguments() {
    let net = SimNetwork::with_seed(14);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    s.fab.listen("srv").unwrap();
    let cc = c.fab.connect("srv", &c.qp(), b"").unwrap();
    let w = SendWr::new(wr(SEND, 0), SendOp::Send, c.buf(0, 8), Default::default());
    assert!(matches!(c.fab.post_send(cc, &w), Err(FabricError::NotConnected(x)) if x == cc));
    // Receives may be posted before the connection is established.
    recv(&mut c, cc, 0, 0, 64);
    let mut many = w;
    many.num_sge = 5;
    assert!(c.fab.post_send(cc, &many).is_err());
    assert!(matches!(
        c.fab.post_send(dataplane::ConnId(77), &w),
        Err(FabricError::UnknownId { .. })
    ));
    assert!(matches!(
        c.fab.remote_addr(9, 0),
        Err(FabricError::NotRegistered { region: 9 })
    ));
    assert_eq!(c.fab.remote_addr(1, 4096).unwrap(), 4096);
    assert!(c.fab.remote_addr(1, u64::MAX).is_err());
    let bad_cq = QpConfig {
        cq: dataplane::CqId(5),
        ..c.qp()
    };
    assert!(matches!(
        c.fab.connect("srv", &bad_cq, b""),
        Err(FabricError::UnknownId { .. })
    ));
    assert!(c.fab.create_cq(0).is_err());
    // Registering the same region twice gives the same keys; another region
    // with the same id is refused.
    let again = c
        .fab
        .register_region(&c.region.clone(), RegionAccess::Exposable)
        .unwrap();
    assert_eq!(again, c.keys);
    assert!(c
        .fab
        .register_region(&fresh_region(1), RegionAccess::Exposable)
        .is_err());
    assert_eq!(c.fab.name(), "sim");
    assert!(c.fab.caps().send_with_invalidate && c.fab.caps().srq);
}

#[test]
fn a_reply_can_arrive_before_the_request_send_completes() {
    // The ACK of the client's Send travels separately from the server's reply,
    // so for some seeds the reply's receive completion comes first (hardware
    // does this too; engines must not assume otherwise).
    let mut reply_first = 0;
    let mut send_first = 0;
    let (rc, rs) = (region(1), region(2));
    for seed in 0..64 {
        let cfg = SimConfig {
            min_latency_ns: 100,
            max_latency_ns: 10_000,
            ..SimConfig::with_seed(seed)
        };
        let net = SimNetwork::new(cfg);
        let mut c = Host::new(&net, rc.clone());
        let mut s = Host::new(&net, rs.clone());
        let (cc, sc) = connect(&net, &mut c, &mut s);
        recv(&mut s, sc, 0, 0, 64);
        recv(&mut c, cc, 0, 0, 64);
        c.fab
            .post_send(
                cc,
                &SendWr::new(wr(SEND, 0), SendOp::Send, c.buf(0, 8), Default::default()),
            )
            .unwrap();
        let mut order = Vec::new();
        while net.step() {
            if s.drain().iter().any(|w| w.opcode == WcOpcode::Recv) {
                s.fab
                    .post_send(
                        sc,
                        &SendWr::new(wr(SEND, 1), SendOp::Send, s.buf(0, 8), Default::default()),
                    )
                    .unwrap();
            }
            order.extend(c.drain().into_iter().map(|w| w.opcode));
        }
        assert_eq!(order.len(), 2, "seed {seed}");
        if order[0] == WcOpcode::Recv {
            reply_first += 1;
        } else {
            send_first += 1;
        }
    }
    assert!(
        reply_first > 0 && send_first > 0,
        "reply first {reply_first}, send first {send_first}"
    );
}
