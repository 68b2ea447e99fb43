//! The backward direction (RFC 8167; draft -09 s3.2, s4.2.2) through both
//! engines, on sim and on shm, versions 1 and 2: a service that calls the
//! client ([`BackService`]) and a requester that answers
//! ([`Requester::backward_calls`], [`Requester::reply_backward`]), with
//! forward Calls running beside them. Every scenario ends with both engines
//! torn down and every pool buffer back.

mod engine_common;

use std::time::{Duration, Instant};

use dataplane::requester::{LinkState, Requester};
use dataplane::responder::{Responder, ResponderConfig};
use dataplane::shm::{ShmConfig, ShmFabric};
use dataplane::sim::{SimConfig, SimNetwork};
use dataplane::Fabric;
use engine_common::*;
use proto::negotiate::VersionRange;

const CREDITS: u32 = 4;

fn versions(v: u32) -> VersionRange {
    VersionRange::only(v).unwrap()
}

/// Pools with room for both engines' backward receives and Calls.
fn bc_pools() -> Pools {
    pools(1024, CREDITS + 16, 2)
}

fn server_cfg(p: &Pools, backward: u32) -> ResponderConfig {
    ResponderConfig {
        backward_credits: backward,
        ..responder_cfg(p, VersionRange::ALL, CREDITS, 2)
    }
}

/// The two ends of one connection, and how to move the network on.
struct Pair<'p, F: Fabric> {
    srv: Responder<'p, F, BackService>,
    cli: Requester<'p, F>,
    step: Box<dyn FnMut() + 'p>,
}

impl<F: Fabric> Pair<'_, F> {
    /// One turn of both engines and the network.
    fn turn(&mut self) {
        self.srv.poll();
        self.cli.poll();
        (self.step)();
    }

    /// Turn until `done` holds (or fail after many turns, with `what`).
    fn until(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) {
        let t0 = Instant::now();
        for _ in 0..400_000 {
            if done(self) {
                return;
            }
            self.turn();
            if t0.elapsed() > Duration::from_secs(20) {
                break;
            }
        }
        panic!(
            "{what}: not reached; server {:?} client {:?} link {:?}",
            self.srv.stats(),
            self.cli.stats(),
            self.cli.link()
        );
    }

    /// Connected, the version fixed by one forward NULL Call, and the
    /// backchannel reported open to the service.
    fn ready(&mut self) {
        self.until("link ready", |p| p.cli.link() == LinkState::Ready);
        let null = Expect {
            proc_: P_NULL,
            arg: vec![],
            big_n: 0,
            b: 0,
        };
        let id = submit(&mut self.cli, &null).unwrap();
        self.until("first reply", |p| p.cli.poll_completion().is_some());
        self.cli.release(id);
        self.until("backchannel open", |p| !p.srv.service().open.is_empty());
    }

    /// Answer every backward Call held, as a well-behaved client.
    fn answer_all(&mut self) -> usize {
        let calls: Vec<(u32, Vec<u8>)> = self.cli.backward_calls().map(|(x, m)| (x, m.to_vec())).collect();
        for (xid, m) in &calls {
            let reply = backward_reply(m).expect("a backward Call that decodes");
            self.cli.reply_backward(*xid, &reply).expect("reply sent");
        }
        calls.len()
    }

    /// Tear both engines down; every buffer comes back.
    fn teardown(mut self) {
        let step = std::cell::RefCell::new(&mut self.step);
        shutdown_both(&mut self.cli, &mut self.srv, || {
            for _ in 0..1000 {
                (step.borrow_mut())();
            }
        })
        .unwrap();
    }
}

fn sim_pair<'p>(
    p: &'p Pools,
    seed: u64,
    vers: u32,
    srv_back: u32,
    cli_back: u32,
) -> Pair<'p, dataplane::sim::SimFabric> {
    let net = SimNetwork::new(SimConfig::with_seed(seed));
    let srv = Responder::new(
        server_cfg(p, srv_back),
        net.endpoint(),
        BackService::default(),
        p.pool,
        &p.regions,
        0,
        Some("srv"),
    )
    .unwrap();
    let ccfg = dataplane::requester::RequesterConfig {
        backward_credits: cli_back,
        ..requester_cfg(p, versions(vers), CREDITS)
    };
    let mut cli = Requester::new(ccfg, net.endpoint(), p.pool, &p.regions, 1).unwrap();
    cli.connect("srv").unwrap();
    Pair {
        srv,
        cli,
        step: Box::new(move || {
            for _ in 0..2 {
                net.step();
            }
        }),
    }
}

fn shm_pair<'p>(p: &'p Pools, tag: &str, vers: u32, srv_back: u32, cli_back: u32) -> Pair<'p, ShmFabric> {
    let addr = format!("@rpcrdma-bc-{tag}-v{vers}-{}", std::process::id());
    let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
    let srv = Responder::new(
        server_cfg(p, srv_back),
        fab,
        BackService::default(),
        p.pool,
        &p.regions,
        0,
        Some(&addr),
    )
    .unwrap();
    let ccfg = dataplane::requester::RequesterConfig {
        backward_credits: cli_back,
        ..requester_cfg(p, versions(vers), CREDITS)
    };
    let fab = ShmFabric::new(ShmConfig::for_rpc_engine()).unwrap();
    let mut cli = Requester::new(ccfg, fab, p.pool, &p.regions, 1).unwrap();
    cli.connect(&addr).unwrap();
    Pair {
        srv,
        cli,
        step: Box::new(|| {}),
    }
}

/// `n` backward Calls, each with its own XID and argument.
fn calls(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|k| backward_call(0xcb00_0000 + k as u32, &pattern(k as u32, 8 + k % 50)))
        .collect()
}

/// Backward Calls answered, with forward Calls running beside them: every
/// Reply reaches `handle_backward_reply` intact and once, matched to its
/// Call; the channel's credits settle at the smaller of the two sides'.
fn answered<F: Fabric>(mut p: Pair<'_, F>, vers: u32) {
    p.ready();
    let want = calls(24);
    p.srv.service().queue.extend(want.iter().cloned());
    let echo = Expect {
        proc_: P_ECHO,
        arg: pattern(7, 100),
        big_n: 0,
        b: 0,
    };
    let mut forward = 0;
    p.until("every backward Reply", |p| {
        p.answer_all();
        if p.cli.can_submit() && forward < 40 {
            submit(&mut p.cli, &echo).unwrap();
            forward += 1;
        }
        while let Some(c) = p.cli.poll_completion() {
            outcome_ok(c.outcome).unwrap();
            check_reply(&p.cli, c.id, &echo).unwrap();
            p.cli.release(c.id);
        }
        p.srv.service().replies.len() == want.len()
    });
    let s = p.srv.service();
    let got: Vec<Vec<u8>> = s.replies.iter().map(|(_, m)| m.clone()).collect();
    let expect: Vec<Vec<u8>> = want.iter().map(|c| backward_reply(c).unwrap()).collect();
    assert_eq!(got, expect, "v{vers}: every Reply intact, in order");
    let (_, chan) = s.open[0];
    assert_eq!(
        chan.credits, 2,
        "v{vers}: the smaller of 4 asked and 2 granted (RFC 8167 s4.1)"
    );
    let hdr = if vers == 1 { 28 } else { 36 };
    assert_eq!(chan.max_reply_bytes, 1024 - hdr, "v{vers}");
    let st = p.srv.stats();
    assert_eq!((st.backward_calls, st.backward_replies), (24, 24), "v{vers}: {st:?}");
    assert_eq!(
        (
            st.backward_replies_dropped,
            st.backward_replies_refused,
            st.backward_calls_refused
        ),
        (0, 0, 0)
    );
    let ct = p.cli.stats();
    assert_eq!(
        (ct.backward_calls, ct.backward_replies, ct.backward_overruns),
        (24, 24, 0)
    );
    assert_eq!(ct.unmatched, 0, "a backward Call never taken for a forward Reply");
    p.teardown();
}

#[test]
fn backchannel_sim_calls_are_answered_v1_and_v2() {
    for vers in [1, 2] {
        let p = bc_pools();
        answered(sim_pair(&p, 11 + vers as u64, vers, 4, 2), vers);
        pool_idle(&p).unwrap();
    }
}

#[test]
fn backchannel_shm_calls_are_answered_v1_and_v2() {
    for vers in [1, 2] {
        let p = bc_pools();
        answered(shm_pair(&p, "answered", vers, 4, 2), vers);
        pool_idle(&p).unwrap();
    }
}

/// A flood of backward Calls against a client with two backward receives
/// that answers slowly: the server keeps at most two in flight (the
/// client's grant, RFC 8167 s4.1), so the client never holds more than
/// two, nothing is dropped or overrun, and every Call is answered.
fn flood<F: Fabric>(mut p: Pair<'_, F>, vers: u32) {
    p.ready();
    let want = calls(64);
    p.srv.service().queue.extend(want.iter().cloned());
    let mut turn = 0u64;
    let mut most_held = 0;
    p.until("the flood answered", |p| {
        turn += 1;
        most_held = most_held.max(p.cli.backward_held());
        // One answer every seventh turn.
        if turn.is_multiple_of(7) {
            let first = p.cli.backward_calls().next().map(|(x, m)| (x, m.to_vec()));
            if let Some((xid, m)) = first {
                p.cli.reply_backward(xid, &backward_reply(&m).unwrap()).unwrap();
            }
        }
        p.srv.service().replies.len() == want.len()
    });
    assert!(most_held <= 2, "v{vers}: the client held {most_held} backward Calls");
    assert_eq!(most_held, 2, "v{vers}: the grant of two was used");
    let ct = p.cli.stats();
    assert_eq!(
        (ct.backward_overruns, ct.wc_errors, ct.backward_calls),
        (0, 0, 64),
        "{ct:?}"
    );
    assert_eq!(p.cli.link(), LinkState::Ready);
    let st = p.srv.stats();
    assert_eq!(
        (st.backward_replies, st.backward_replies_dropped, st.conns_closed),
        (64, 0, 0)
    );
    let got: Vec<Vec<u8>> = p.srv.service().replies.iter().map(|(_, m)| m.clone()).collect();
    assert_eq!(got, want.iter().map(|c| backward_reply(c).unwrap()).collect::<Vec<_>>());
    p.teardown();
}

#[test]
fn backchannel_sim_flood_is_flow_controlled_by_backward_credits() {
    for vers in [1, 2] {
        let p = bc_pools();
        flood(sim_pair(&p, 21 + vers as u64, vers, 8, 2), vers);
        pool_idle(&p).unwrap();
    }
}

#[test]
fn backchannel_shm_flood_is_flow_controlled_by_backward_credits() {
    for vers in [1, 2] {
        let p = bc_pools();
        flood(shm_pair(&p, "flood", vers, 8, 2), vers);
        pool_idle(&p).unwrap();
    }
}

/// The connection is lost while backward Calls are in flight (the client
/// holds them, unanswered): the service hears `backward_channel(None)`
/// once, gets no Reply, and every buffer comes back.
fn lost<F: Fabric>(mut p: Pair<'_, F>, vers: u32) {
    p.ready();
    let conn = p.srv.service().open[0].0;
    // The first Reply grants the second credit (one Call at a time before).
    p.srv.service().queue.extend(calls(3));
    p.until("the first Call held", |p| p.cli.backward_held() == 1);
    p.answer_all();
    p.until("two more Calls held", |p| p.cli.backward_held() == 2);
    assert_eq!(p.srv.stats().backward_calls, 3);
    assert_eq!(p.srv.service().replies.len(), 1);
    // The client goes away without answering.
    assert_eq!(p.cli.shutdown(10_000), 0);
    assert_eq!(p.cli.stats().backward_lost, 2, "v{vers}");
    p.until("the server sees the loss", |p| p.srv.connections() == 0);
    let s = p.srv.service();
    assert!(s.open.is_empty() && s.replies.len() == 1, "v{vers}: {s:?}");
    let closes: Vec<_> = s.events.iter().filter(|(c, ch)| *c == conn && ch.is_none()).collect();
    assert_eq!(closes.len(), 1, "v{vers}: told once: {:?}", s.events);
    p.teardown();
}

#[test]
fn backchannel_sim_connection_lost_mid_call() {
    for vers in [1, 2] {
        let p = bc_pools();
        lost(sim_pair(&p, 31 + vers as u64, vers, 4, 2), vers);
        pool_idle(&p).unwrap();
    }
}

#[test]
fn backchannel_shm_connection_lost_mid_call() {
    for vers in [1, 2] {
        let p = bc_pools();
        lost(shm_pair(&p, "lost", vers, 4, 2), vers);
        pool_idle(&p).unwrap();
    }
}

/// A backward Call larger than the client's inline threshold is not sent
/// (RFC 8167 s5.1: backward messages are inline): the service is offered
/// a buffer of `max_call_bytes` and fails the Call itself; the next one
/// goes.
#[test]
fn backchannel_call_too_large_for_inline_is_not_sent() {
    let p = bc_pools();
    let mut pair = sim_pair(&p, 41, 1, 4, 2);
    pair.ready();
    let max = pair.srv.service().open[0].1.max_call_bytes as usize;
    assert_eq!(max, 1024 - 28, "the client's 1024-byte receives less the header");
    let big = backward_call(0xbb, &vec![7u8; max]);
    let small = backward_call(0xcc, b"ok");
    pair.srv.service().queue.extend([big.clone(), small.clone()]);
    pair.until("the small Call answered", |p| {
        p.answer_all();
        !p.srv.service().replies.is_empty()
    });
    let s = pair.srv.service();
    assert_eq!(s.too_big, vec![big]);
    assert_eq!(s.replies[0].1, backward_reply(&small).unwrap());
    assert_eq!(pair.cli.stats().backward_calls, 1);
    pair.teardown();
    pool_idle(&p).unwrap();
}

/// A v2 client without a backchannel says RDMA2_RVREQSUP_NONE in its
/// RDMA2_CONNPROP (draft -09 s4.2.2): the server never opens one; a v1
/// connection cannot say so and is reported open (the ULP decides).
#[test]
fn backchannel_v2_client_without_one_says_brs_none() {
    let p = bc_pools();
    let mut pair = sim_pair(&p, 51, 2, 4, 0);
    pair.until("link ready", |p| p.cli.link() == LinkState::Ready);
    for _ in 0..2000 {
        pair.turn();
    }
    let s = pair.srv.service();
    assert!(s.open.is_empty() && s.events.is_empty(), "{:?}", s.events);
    pair.teardown();
    pool_idle(&p).unwrap();
}
