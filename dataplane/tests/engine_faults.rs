//! The transport engine under injected faults (sim): flush errors, work-request
//! errors, RNR, lost connections, slow peers, receive starvation. Whatever
//! happens, every Call ends (with its correct Reply or with ConnectionLost), no
//! reply is corrupted, and tearing the connection down in whatever state it is
//! returns every buffer to the pool. Failures print the seed.

mod engine_common;

use std::sync::OnceLock;

use dataplane::requester::{CallId, CallOutcome, LinkState, Requester};
use dataplane::responder::Responder;
use dataplane::sim::{self, SimConfig, SimFaults, SimNetwork};
use engine_common::*;
use proto::negotiate::VersionRange;

const CREDITS: u32 = 8;
const MAX_CONNS: u32 = 2;

fn pools_for(test: usize) -> &'static Pools {
    static P: [OnceLock<Pools>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    P[test].get_or_init(|| pools(1024, CREDITS, MAX_CONNS))
}

fn work(seed: u64, k: usize) -> Expect {
    let salt = seed as u32 ^ k as u32;
    let e = |proc_, arg, big_n, b| Expect { proc_, arg, big_n, b };
    match (seed as usize + k) % 5 {
        0 => e(P_ECHO, pattern(salt, 3000 + k * 7), 0, 0),
        1 => e(P_BIG, vec![], 2000 + k as u32, 0),
        2 => e(P_SUM, pattern(salt, 2500), 0, 0),
        3 => e(P_TWO, vec![], 1500, 700 + k as u32),
        _ => e(P_ECHO, pattern(salt, 100), 0, 0),
    }
}

#[derive(Default, Debug)]
struct Tally {
    replies: u64,
    lost: u64,
}

fn run(test: usize, seed: u64, faults: SimFaults, vers: VersionRange) -> Result<Tally, String> {
    let p = pools_for(test);
    let net = SimNetwork::new(SimConfig {
        faults,
        ..SimConfig::with_seed(seed)
    });
    let mut srv = Responder::new(
        responder_cfg(p, VersionRange::ALL, CREDITS, MAX_CONNS),
        net.endpoint(),
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some("srv"),
    )
    .map_err(|e| e.to_string())?;
    let mut cli = Requester::new(requester_cfg(p, vers, CREDITS), net.endpoint(), p.pool, &p.regions, 1)
        .map_err(|e| e.to_string())?;
    cli.connect("srv").map_err(|e| e.to_string())?;
    let mut tally = Tally::default();
    let mut inflight: Vec<(CallId, Expect)> = Vec::new();
    let mut k = 0usize;
    for _ in 0..3000 {
        srv.poll();
        cli.poll();
        while k < 40 && cli.can_submit() {
            let e = work(seed, k);
            let id = submit(&mut cli, &e)?;
            inflight.push((id, e));
            k += 1;
        }
        while let Some(c) = cli.poll_completion() {
            let pos = inflight
                .iter()
                .position(|(id, _)| *id == c.id)
                .ok_or("unknown completion")?;
            let (id, e) = inflight.swap_remove(pos);
            match c.outcome {
                CallOutcome::Reply => {
                    check_reply(&cli, id, &e)?;
                    tally.replies += 1;
                }
                CallOutcome::ConnectionLost => tally.lost += 1,
                other => return Err(format!("unexpected outcome {other:?}")),
            }
            cli.release(id);
        }
        if cli.link() == LinkState::Failed || (k == 40 && inflight.is_empty()) {
            break;
        }
        for _ in 0..3 {
            net.step();
        }
    }
    // Tear down wherever we are.
    let left = cli.shutdown(10_000);
    let _ = net.run_until_idle(1_000_000);
    let held = srv.shutdown(10_000);
    let _ = net.run_until_idle(1_000_000);
    srv.poll();
    if left != 0 || held != Default::default() {
        return Err(format!("held after teardown: requester {left}, responder {held:?}"));
    }
    drop(cli);
    drop(srv);
    for class in [p.recv, p.send, p.data] {
        let st = p.pool.stats(class).ok_or("stats")?;
        if st.in_use != 0 {
            return Err(format!("class {class:?}: {} buffers leaked", st.in_use));
        }
    }
    Ok(tally)
}

#[test]
fn lost_connections_and_qp_errors_return_every_buffer() {
    let faults = SimFaults {
        flush_error: 0.002,
        wr_error: 0.003,
        lost_connection: 0.002,
        ..SimFaults::default()
    };
    let mut total = Tally::default();
    sim::check_seeds(0..400, |seed| {
        let t = run(
            0,
            seed,
            faults,
            if seed % 2 == 0 {
                VersionRange::ALL
            } else {
                VersionRange::only(1).unwrap()
            },
        )?;
        total.replies += t.replies;
        total.lost += t.lost;
        Ok(())
    });
    // The faults really bit, and work still got done.
    assert!(total.lost > 0 && total.replies > 0, "{total:?}");
}

#[test]
fn rnr_slow_peers_and_receive_starvation_only_slow_things_down() {
    let faults = SimFaults {
        rnr: 0.05,
        slow_peer: 0.5,
        slow_peer_ns: 50_000,
        recv_starvation: 0.2,
        recv_starvation_ns: 20_000,
        ..SimFaults::default()
    };
    sim::check_seeds(0..200, |seed| {
        let t = run(1, seed, faults, VersionRange::ALL)?;
        // No connection-level fault was injected: every call must get its reply.
        if t.lost != 0 || t.replies != 40 {
            return Err(format!("{t:?}"));
        }
        Ok(())
    });
}
