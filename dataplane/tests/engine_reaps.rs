//! A responder turn whose only work was a reply's completions says so
//! (`Responder::reaps_last_turn`; issue 24 item 1), so that a core can
//! leave its spin alone for the completion of a Send already on the wire
//! (the target does with `RPCRDMA_REAPS_IDLE=1`; measured slower under
//! Soft-RoCE, so not by default: docs/BENCHMARKS.md). Over the
//! deterministic sim fabric: NULL Calls one at a time; the turn that
//! delivers a Call reports more work than reaps, the turn that takes the
//! reply's Send completion reports only reaps, and every reply is reaped
//! once.

mod engine_common;

use dataplane::responder::Responder;
use dataplane::sim::{SimConfig, SimNetwork};
use engine_common::*;
use proto::negotiate::VersionRange;

const CREDITS: u32 = 8;

#[test]
fn a_turn_that_only_reaps_replies_reports_its_work_as_reaps() {
    let p: &'static Pools = Box::leak(Box::new(pools(1024, CREDITS, 1)));
    let net = SimNetwork::new(SimConfig::with_seed(5));
    let mut srv = Responder::new(
        responder_cfg(p, VersionRange::ALL, CREDITS, 1),
        net.endpoint(),
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some("srv"),
    )
    .unwrap();
    let mut cli = sim_requester(p, &net, CREDITS);
    sim_until_ready(&mut cli, &mut srv, &net);
    let null = Expect {
        proc_: P_NULL,
        arg: vec![],
        big_n: 0,
        b: 0,
    };
    let rounds = 20;
    let (mut reaps, mut reap_only_turns, mut call_turns) = (0usize, 0usize, 0usize);
    // Round 0 warms up (what the connection's set-up left in flight is
    // reaped there); rounds 1..=20 are counted.
    for round in 0..=rounds {
        if round == 1 {
            (reaps, reap_only_turns, call_turns) = (0, 0, 0);
        }
        let calls_before = srv.stats().calls;
        submit(&mut cli, &null).unwrap();
        cli.poll();
        let mut done = false;
        let mut t = 0;
        // Until the reply came back and the server let go of the request.
        while !done || srv.in_flight() > 0 {
            let calls = srv.stats().calls;
            let work = srv.poll();
            let r = srv.reaps_last_turn();
            assert!(r <= work, "round {round}: {r} reaps in a turn of {work}");
            if srv.stats().calls > calls {
                // The turn that took the Call did more than reap.
                assert!(
                    work > r,
                    "round {round}: the Call's turn reported {work} work, {r} reaps"
                );
                call_turns += 1;
            } else if r > 0 && r == work {
                reap_only_turns += 1;
            }
            reaps += r;
            cli.poll();
            while let Some(c) = cli.poll_completion() {
                outcome_ok(c.outcome).unwrap();
                cli.release(c.id);
                done = true;
            }
            net.step();
            t += 1;
            assert!(t < 100_000, "round {round} stuck");
        }
        assert_eq!(srv.stats().calls, calls_before + 1);
    }
    assert_eq!(call_turns, rounds, "one turn per Call took it");
    // One Send per NULL reply, each reaped once, in a turn of its own (the
    // next Call is submitted only after the reply came back).
    assert_eq!(reaps, rounds, "reaps over {rounds} NULL replies");
    assert_eq!(reap_only_turns, rounds, "turns whose only work was a reap");
    let _ = srv.shutdown(100_000);
}
