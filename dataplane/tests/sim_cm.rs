//! sim provider: connection management (accept, reject, unreachable, private
//! data, disconnect, endpoint loss).

mod sim_common;

use dataplane::sim::{ConnState, SimNetwork, LISTEN_BACKLOG};
use dataplane::{CmEvent, Fabric, FabricError, PrivateData, RecvWr, SendOp, SendWr, WcStatus};
use sim_common::*;

fn next_request(net: &SimNetwork, h: &mut Host) -> CmEvent {
    loop {
        if let Some(ev) = h.fab.poll_cm() {
            return ev;
        }
        assert!(net.step(), "idle without a CM event");
    }
}

#[test]
fn accept_carries_private_data_both_ways() {
    let net = SimNetwork::with_seed(1);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let l = s.fab.listen("nfs").unwrap();
    let cc = c.fab.connect("nfs", &c.qp(), b"hello, server").unwrap();
    assert_eq!(c.fab.conn_state(cc), Some(ConnState::Connecting));
    let (listener, req, pd) = match next_request(&net, &mut s) {
        CmEvent::ConnectRequest {
            listener,
            req,
            private_data,
        } => (listener, req, private_data),
        other => panic!("{other:?}"),
    };
    assert_eq!(listener, l);
    assert_eq!(pd.as_bytes(), b"hello, server");
    let sc = s.fab.accept(req, &s.qp(), b"welcome").unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(
        c.cm_events(),
        vec![CmEvent::Established {
            conn: cc,
            private_data: PrivateData::new(b"welcome")
        }]
    );
    assert_eq!(
        s.cm_events(),
        vec![CmEvent::Established {
            conn: sc,
            private_data: PrivateData::EMPTY
        }]
    );
    assert_eq!(
        (c.fab.conn_state(cc), s.fab.conn_state(sc)),
        (Some(ConnState::Ready), Some(ConnState::Ready))
    );
    // A request id is answered once.
    assert!(matches!(
        s.fab.accept(req, &s.qp(), b""),
        Err(FabricError::UnknownId { .. })
    ));
    assert!(matches!(s.fab.reject(req, b""), Err(FabricError::UnknownId { .. })));
}

#[test]
fn reject_carries_private_data_and_flushes_early_receives() {
    let net = SimNetwork::with_seed(2);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    s.fab.listen("nfs").unwrap();
    let cc = c.fab.connect("nfs", &c.qp(), b"v2 please").unwrap();
    c.fab
        .post_recv(
            cc,
            &RecvWr {
                wr_id: wr(2, 0),
                buf: c.buf(0, 64),
            },
        )
        .unwrap();
    let req = match next_request(&net, &mut s) {
        CmEvent::ConnectRequest { req, .. } => req,
        other => panic!("{other:?}"),
    };
    s.fab.reject(req, b"v1 only").unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(
        c.cm_events(),
        vec![CmEvent::Rejected {
            conn: cc,
            private_data: PrivateData::new(b"v1 only")
        }]
    );
    let cw = c.drain();
    assert_eq!((cw.len(), cw[0].wr_id, cw[0].status), (1, wr(2, 0), WcStatus::Flushed));
    assert_eq!(c.fab.conn_state(cc), Some(ConnState::Error));
    assert!(s.cm_events().is_empty());
}

#[test]
fn unknown_names_are_unreachable_and_names_are_unique() {
    let net = SimNetwork::with_seed(3);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    s.fab.listen("a").unwrap();
    assert!(s.fab.listen("a").is_err(), "a name is listened on once");
    assert!(c.fab.listen("a").is_err(), "even from another endpoint");
    assert!(matches!(c.fab.listen(""), Err(FabricError::BadAddress(_))));
    let cc = c.fab.connect("b", &c.qp(), b"").unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(c.cm_events(), vec![CmEvent::Unreachable { conn: cc }]);
    assert!(s.cm_events().is_empty());
    assert!(matches!(
        c.fab.connect("", &c.qp(), b""),
        Err(FabricError::BadAddress(_))
    ));
}

#[test]
fn disconnect_flushes_both_sides_and_reports_once() {
    let net = SimNetwork::with_seed(4);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, sc) = connect(&net, &mut c, &mut s);
    for i in 0..3 {
        c.fab
            .post_recv(
                cc,
                &RecvWr {
                    wr_id: wr(2, i),
                    buf: c.buf(i * 64, 64),
                },
            )
            .unwrap();
        s.fab
            .post_recv(
                sc,
                &RecvWr {
                    wr_id: wr(2, i),
                    buf: s.buf(i * 64, 64),
                },
            )
            .unwrap();
    }
    c.fab.disconnect(cc).unwrap();
    // The local side's flushes and event are there at once.
    let cw = c.drain();
    assert_eq!(cw.len(), 3);
    assert!(cw.iter().all(|w| w.status == WcStatus::Flushed));
    assert_eq!(c.cm_events(), vec![CmEvent::Disconnected { conn: cc }]);
    net.run_until_idle(1000).unwrap();
    let sw = s.drain();
    assert_eq!(sw.len(), 3);
    assert!(sw.iter().all(|w| w.status == WcStatus::Flushed && w.conn == sc));
    assert_eq!(s.cm_events(), vec![CmEvent::Disconnected { conn: sc }]);
    // Disconnecting again is harmless and reports nothing new.
    c.fab.disconnect(cc).unwrap();
    s.fab.disconnect(sc).unwrap();
    net.run_until_idle(1000).unwrap();
    assert!(c.cm_events().is_empty() && s.cm_events().is_empty());
    assert!(matches!(
        c.fab.disconnect(dataplane::ConnId(42)),
        Err(FabricError::UnknownId { .. })
    ));
}

#[test]
fn giving_up_while_connecting_tears_down_the_accepted_side() {
    let net = SimNetwork::with_seed(5);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    s.fab.listen("srv").unwrap();
    let cc = c.fab.connect("srv", &c.qp(), b"").unwrap();
    let req = match next_request(&net, &mut s) {
        CmEvent::ConnectRequest { req, .. } => req,
        other => panic!("{other:?}"),
    };
    c.fab.disconnect(cc).unwrap();
    assert_eq!(c.cm_events(), vec![CmEvent::Disconnected { conn: cc }]);
    let sc = s.fab.accept(req, &s.qp(), b"").unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(
        s.cm_events(),
        vec![CmEvent::Disconnected { conn: sc }],
        "no Established for a dead peer"
    );
    assert!(c.cm_events().is_empty());
}

#[test]
fn the_passive_side_may_send_before_its_established_event() {
    for seed in 0..16 {
        let net = SimNetwork::with_seed(seed);
        let mut c = Host::new(&net, region(1));
        let mut s = Host::new(&net, region(2));
        s.fab.listen("srv").unwrap();
        let cc = c.fab.connect("srv", &c.qp(), b"").unwrap();
        c.fab
            .post_recv(
                cc,
                &RecvWr {
                    wr_id: wr(2, 0),
                    buf: c.buf(0, 64),
                },
            )
            .unwrap();
        let req = match next_request(&net, &mut s) {
            CmEvent::ConnectRequest { req, .. } => req,
            other => panic!("{other:?}"),
        };
        let sc = s.fab.accept(req, &s.qp(), b"").unwrap();
        write(&s.region, 0, b"early");
        s.fab
            .post_send(
                sc,
                &SendWr::new(wr(1, 0), SendOp::Send, s.buf(0, 5), Default::default()),
            )
            .unwrap();
        net.run_until_idle(1000).unwrap();
        let cw = c.drain();
        assert_eq!(
            (cw.len(), cw[0].status, cw[0].byte_len),
            (1, WcStatus::Success, 5),
            "seed {seed}"
        );
        assert_eq!(read(&c.region, 0, 5), b"early");
        assert!(matches!(c.cm_events()[..], [CmEvent::Established { .. }]));
        assert!(matches!(s.cm_events()[..], [CmEvent::Established { .. }]));
    }
}

#[test]
fn dropping_an_endpoint_disconnects_its_peers_and_its_names() {
    let net = SimNetwork::with_seed(6);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let (cc, _sc) = connect(&net, &mut c, &mut s);
    c.fab
        .post_recv(
            cc,
            &RecvWr {
                wr_id: wr(2, 0),
                buf: c.buf(0, 64),
            },
        )
        .unwrap();
    drop(s);
    net.run_until_idle(1000).unwrap();
    assert_eq!(c.cm_events(), vec![CmEvent::Disconnected { conn: cc }]);
    assert_eq!(c.drain()[0].status, WcStatus::Flushed);
    let again = c.fab.connect("server", &c.qp(), b"").unwrap();
    net.run_until_idle(1000).unwrap();
    assert_eq!(c.cm_events(), vec![CmEvent::Unreachable { conn: again }]);
}

#[test]
fn a_full_backlog_rejects_new_requests() {
    let net = SimNetwork::with_seed(7);
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    s.fab.listen("srv").unwrap();
    let conns: Vec<_> = (0..LISTEN_BACKLOG + 2)
        .map(|_| c.fab.connect("srv", &c.qp(), b"").unwrap())
        .collect();
    net.run_until_idle(100_000).unwrap();
    let reqs = s
        .cm_events()
        .iter()
        .filter(|e| matches!(e, CmEvent::ConnectRequest { .. }))
        .count();
    assert_eq!(reqs, LISTEN_BACKLOG);
    let rejected: Vec<_> = c
        .cm_events()
        .into_iter()
        .filter_map(|e| match e {
            CmEvent::Rejected { conn, .. } => Some(conn),
            _ => None,
        })
        .collect();
    assert_eq!(rejected.len(), 2);
    assert!(rejected.iter().all(|r| conns.contains(r)));
}
