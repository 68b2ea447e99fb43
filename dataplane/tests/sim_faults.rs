//! sim provider: each injected fault has its documented effect.

mod sim_common;

use dataplane::sim::{FaultKind, SimConfig, SimFaults, SimNetwork, TraceEvent};
use dataplane::{CmEvent, Fabric, QpConfig, RecvWr, SendOp, SendWr, WcStatus};
use sim_common::*;

fn pair(seed: u64, cfg: SimConfig, rnr_retry: u8) -> (SimNetwork, Host, Host, dataplane::ConnId, dataplane::ConnId) {
    let net = SimNetwork::new(SimConfig { seed, ..cfg });
    let mut c = Host::new(&net, region(1));
    let mut s = Host::new(&net, region(2));
    let cq = QpConfig { rnr_retry, ..c.qp() };
    let sq = QpConfig { rnr_retry, ..s.qp() };
    let (cc, sc) = connect_with(&net, &mut c, &mut s, "srv", cq, sq);
    (net, c, s, cc, sc)
}

fn send(h: &mut Host, conn: dataplane::ConnId, i: u64) {
    h.fab
        .post_send(
            conn,
            &SendWr::new(wr(1, i), SendOp::Send, h.buf(0, 16), Default::default()),
        )
        .unwrap();
}

fn recv(h: &mut Host, conn: dataplane::ConnId, i: u64) {
    h.fab
        .post_recv(
            conn,
            &RecvWr {
                wr_id: wr(2, i),
                buf: h.buf(i * 64, 64),
            },
        )
        .unwrap();
}

fn faults_in(net: &SimNetwork) -> Vec<FaultKind> {
    net.take_trace()
        .into_iter()
        .filter_map(|e| match e {
            TraceEvent::Fault { kind, .. } => Some(kind),
            _ => None,
        })
        .collect()
}

#[test]
fn flush_error_puts_a_queue_pair_in_error_and_the_peer_follows() {
    let (net, mut c, mut s, cc, sc) = pair(
        1,
        SimConfig {
            trace: true,
            ..SimConfig::default()
        },
        7,
    );
    for i in 0..3 {
        recv(&mut c, cc, i);
        recv(&mut s, sc, i);
    }
    net.set_faults(SimFaults {
        flush_error: 1.0,
        ..SimFaults::NONE
    });
    send(&mut c, cc, 0);
    assert!(net.step());
    net.set_faults(SimFaults::NONE);
    net.run_until_idle(1000).unwrap();
    assert_eq!(net.stats().faults.flush_errors, 1, "one QP failed; the peer follows");
    assert_eq!(faults_in(&net), vec![FaultKind::FlushError]);
    let cw = c.drain();
    let sw = s.drain();
    assert_eq!(cw.len(), 4, "3 receives and the send: {cw:?}");
    assert_eq!(sw.len(), 3);
    assert!(sw.iter().all(|w| w.status == WcStatus::Flushed));
    assert!(cw
        .iter()
        .all(|w| w.status == WcStatus::Flushed || w.status.is_success()));
    assert_eq!(c.cm_events(), vec![CmEvent::Disconnected { conn: cc }]);
    assert_eq!(s.cm_events(), vec![CmEvent::Disconnected { conn: sc }]);
}

#[test]
fn wr_error_fails_a_work_request_with_remote_access_or_retry_exceeded() {
    let mut seen = Vec::new();
    for seed in 0..16 {
        let (net, mut c, mut s, cc, sc) = pair(seed, SimConfig::default(), 7);
        recv(&mut s, sc, 0);
        net.set_faults(SimFaults {
            wr_error: 1.0,
            ..SimFaults::NONE
        });
        c.fab
            .post_send(
                cc,
                &SendWr::new(wr(1, 0), SendOp::RdmaWrite, c.buf(0, 8), s.segment(0, 8)),
            )
            .unwrap();
        send(&mut c, cc, 1);
        net.run_until_idle(1000).unwrap();
        let cw = c.drain();
        assert_eq!(cw.len(), 2);
        assert!(
            matches!(cw[0].status, WcStatus::RemoteAccess | WcStatus::RetryExceeded),
            "{cw:?}"
        );
        assert_eq!(cw[1].status, WcStatus::Flushed);
        assert_eq!(s.drain()[0].status, WcStatus::Flushed);
        assert_eq!(s.cm_events(), vec![CmEvent::Disconnected { conn: sc }]);
        assert_eq!(net.stats().faults.wr_errors, 1);
        seen.push(cw[0].status);
    }
    assert!(
        seen.contains(&WcStatus::RemoteAccess) && seen.contains(&WcStatus::RetryExceeded),
        "{seen:?}"
    );
}

#[test]
fn injected_rnr_is_retried_and_can_exhaust_rnr_retry() {
    // Retried forever (rnr_retry 7): every Send gets through.
    for seed in 0..8 {
        let (net, mut c, mut s, cc, sc) = pair(seed, SimConfig::default(), 7);
        net.set_faults(SimFaults {
            rnr: 0.5,
            ..SimFaults::NONE
        });
        for i in 0..10 {
            recv(&mut s, sc, i);
            send(&mut c, cc, i);
        }
        net.run_until_idle(100_000).unwrap();
        assert!(c.drain().iter().all(|w| w.status.is_success()));
        assert_eq!(s.drain().len(), 10);
        let st = net.stats();
        assert!(st.faults.rnr > 0 && st.rnr_naks == st.faults.rnr, "{st:?}");
    }
    // Always RNR, rnr_retry 2: the first attempt and two retries, then failure,
    // although a receive is posted.
    let (net, mut c, mut s, cc, sc) = pair(1, SimConfig::default(), 2);
    net.set_faults(SimFaults {
        rnr: 1.0,
        ..SimFaults::NONE
    });
    recv(&mut s, sc, 0);
    send(&mut c, cc, 0);
    net.run_until_idle(1000).unwrap();
    assert_eq!(c.drain()[0].status, WcStatus::RnrRetryExceeded);
    assert_eq!(net.stats().faults.rnr, 3);
    assert_eq!(
        s.drain()[0].status,
        WcStatus::Flushed,
        "the posted receive comes back flushed"
    );
}

#[test]
fn lost_connection_fails_the_oldest_request_on_each_side() {
    let (net, mut c, mut s, cc, sc) = pair(2, SimConfig::default(), 7);
    // No receives: the Sends sit in RNR retries, outstanding on both sides.
    for i in 0..3 {
        send(&mut c, cc, i);
        send(&mut s, sc, i);
    }
    net.run_for(30_000);
    net.set_faults(SimFaults {
        lost_connection: 1.0,
        ..SimFaults::NONE
    });
    net.run_until_idle(1000).unwrap();
    assert_eq!(net.stats().faults.lost_connections, 1);
    for (h, conn) in [(&mut c, cc), (&mut s, sc)] {
        let w = h.drain();
        let st: Vec<_> = w.iter().map(|w| (w.wr_id.index(), w.status)).collect();
        assert_eq!(
            st,
            vec![
                (0, WcStatus::RetryExceeded),
                (1, WcStatus::Flushed),
                (2, WcStatus::Flushed)
            ]
        );
        assert_eq!(h.cm_events(), vec![CmEvent::Disconnected { conn }]);
    }
}

#[test]
fn slow_peers_add_delay_to_their_deliveries() {
    let time_to_deliver = |slow: Option<u64>, faults: SimFaults| {
        let net = SimNetwork::new(SimConfig {
            faults,
            ..SimConfig::with_seed(5)
        });
        let mut c = Host::new(&net, region(1));
        let mut s = Host::new(&net, region(2));
        let (cc, sc) = connect(&net, &mut c, &mut s);
        if let Some(ns) = slow {
            assert!(net.set_slow(s.fab.endpoint_id(), ns));
        }
        recv(&mut s, sc, 0);
        let t0 = net.now_ns();
        send(&mut c, cc, 0);
        while s.drain().is_empty() {
            assert!(net.step());
        }
        (net.now_ns() - t0, net.stats())
    };
    let (fast, _) = time_to_deliver(None, SimFaults::NONE);
    let (slow, _) = time_to_deliver(Some(1_000_000), SimFaults::NONE);
    assert!(fast <= SimConfig::default().max_latency_ns, "{fast}");
    assert!(slow >= 1_000_000, "{slow}");
    let (t, st) = time_to_deliver(
        None,
        SimFaults {
            slow_peer: 1.0,
            slow_peer_ns: 10_000_000,
            ..SimFaults::NONE
        },
    );
    assert_eq!(st.faults.slow_peers, 2, "both endpoints were made slow");
    assert!(t > fast, "{t} vs {fast}");
}

#[test]
fn receive_starvation_delays_receives_into_rnr() {
    // Starved receives become usable later: the Send waits in RNR and then
    // succeeds.
    let mut stalled = 0;
    for seed in 0..8 {
        let (net, mut c, mut s, cc, sc) = pair(seed, SimConfig::default(), 7);
        net.set_faults(SimFaults {
            recv_starvation: 1.0,
            recv_starvation_ns: 200_000,
            ..SimFaults::NONE
        });
        recv(&mut s, sc, 0);
        send(&mut c, cc, 0);
        net.run_until_idle(10_000).unwrap();
        assert!(c.drain()[0].status.is_success());
        assert!(s.drain()[0].status.is_success());
        assert_eq!(net.stats().faults.starved_recvs, 1);
        if net.stats().rnr_naks > 0 {
            stalled += 1;
        }
    }
    assert!(stalled >= 6, "{stalled} of 8 runs stalled");
    // With a finite rnr_retry, a long starvation ends the connection.
    for seed in 0..8 {
        let (net, mut c, mut s, cc, sc) = pair(seed, SimConfig::default(), 1);
        net.set_faults(SimFaults {
            recv_starvation: 1.0,
            recv_starvation_ns: 100_000_000,
            ..SimFaults::NONE
        });
        recv(&mut s, sc, 0);
        send(&mut c, cc, 0);
        net.run_until_idle(10_000).unwrap();
        assert_eq!(c.drain()[0].status, WcStatus::RnrRetryExceeded, "seed {seed}");
        assert_eq!(s.drain()[0].status, WcStatus::Flushed);
    }
}

#[test]
#[should_panic(expected = "is not a probability")]
fn probabilities_are_checked() {
    let _ = SimNetwork::new(SimConfig {
        faults: SimFaults {
            rnr: 1.5,
            ..SimFaults::NONE
        },
        ..SimConfig::default()
    });
}
