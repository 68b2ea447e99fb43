//! sim provider: one seed, one history; different connections are reordered,
//! one send queue never is.

mod sim_common;

use std::collections::BTreeSet;

use dataplane::sim::{SimConfig, SimFaults, SimNetwork, TraceEvent};
use dataplane::{Fabric, RecvWr, SendOp, SendWr, WcOpcode};
use sim_common::*;

fn faulty(seed: u64) -> SimConfig {
    SimConfig {
        faults: SimFaults {
            flush_error: 0.005,
            wr_error: 0.02,
            rnr: 0.1,
            lost_connection: 0.005,
            slow_peer: 0.3,
            slow_peer_ns: 20_000,
            recv_starvation: 0.1,
            recv_starvation_ns: 50_000,
        },
        trace: true,
        ..SimConfig::with_seed(seed)
    }
}

#[test]
fn the_same_seed_gives_the_same_history() {
    let regions = (region(1), region(2));
    let mut hashes = BTreeSet::new();
    for seed in 0..40 {
        let a = workload::run(seed, faulty(seed), &regions).unwrap();
        let b = workload::run(seed, faulty(seed), &regions).unwrap();
        assert_eq!(a, b, "seed {seed}: two runs differ");
        hashes.insert(a.hash);
    }
    assert!(
        hashes.len() >= 38,
        "different seeds give different histories: {} distinct of 40",
        hashes.len()
    );
}

#[test]
fn the_network_seed_alone_changes_the_history() {
    // Same workload plan, different network seeds: timing and interleaving differ.
    let regions = (region(1), region(2));
    let plan_seed = 3;
    let hashes: BTreeSet<u64> = (0..8)
        .map(|net_seed| {
            workload::run(plan_seed, SimConfig::with_seed(net_seed), &regions)
                .unwrap()
                .hash
        })
        .collect();
    assert!(hashes.len() > 1);
}

/// Two connections from one client, each sending `n` numbered messages, plus a
/// Write and a Read interleaved. Returns the server's arrival order as
/// (connection index, message number) and the trace.
fn two_queue_run(
    seed: u64,
    n: u64,
    rc: &std::sync::Arc<mempool::region::Region>,
    rs: &std::sync::Arc<mempool::region::Region>,
) -> (Vec<(usize, u64)>, Vec<TraceEvent>) {
    let net = SimNetwork::new(SimConfig {
        trace: true,
        ..SimConfig::with_seed(seed)
    });
    let mut c = Host::new(&net, rc.clone());
    let mut s = Host::new(&net, rs.clone());
    let (cq, sq) = (c.qp(), s.qp());
    let (c0, s0) = connect_with(&net, &mut c, &mut s, "a", cq, sq);
    let (c1, s1) = connect_with(&net, &mut c, &mut s, "b", cq, sq);
    let _ = net.take_trace();
    for (k, (cc, sc)) in [(c0, s0), (c1, s1)].into_iter().enumerate() {
        // Windows are per connection: this one's.
        s.expose_region(sc);
        for i in 0..n {
            let slot = (k as u64 * n + i) * 64;
            s.fab
                .post_recv(
                    sc,
                    &RecvWr {
                        wr_id: wr(2, slot),
                        buf: s.buf(slot, 64),
                    },
                )
                .unwrap();
            write(&c.region, slot, &[k as u8, i as u8]);
            let op = match i % 3 {
                0 | 1 => SendOp::Send,
                _ => SendOp::RdmaWrite,
            };
            let remote = if op == SendOp::RdmaWrite {
                s.segment(32_768 + slot, 2)
            } else {
                Default::default()
            };
            c.fab
                .post_send(cc, &SendWr::new(wr(1, k as u64 * 1000 + i), op, c.buf(slot, 2), remote))
                .unwrap();
            if i % 4 == 3 {
                let r = SendWr::new(
                    wr(1, k as u64 * 1000 + 500 + i),
                    SendOp::RdmaRead,
                    c.buf(16_384 + slot, 8),
                    s.segment(slot, 8),
                );
                c.fab.post_send(cc, &r).unwrap();
            }
        }
    }
    net.run_until_idle(100_000).unwrap();
    let order = s
        .drain()
        .iter()
        .filter(|w| w.opcode == WcOpcode::Recv)
        .map(|w| {
            let b = read(&s.region, w.wr_id.index(), 2);
            (b[0] as usize, u64::from(b[1]))
        })
        .collect();
    (order, net.take_trace())
}

#[test]
fn connections_are_reordered_but_one_send_queue_never_is() {
    let (rc, rs) = (region(1), region(2));
    let n = 8;
    let mut patterns = BTreeSet::new();
    let mut interleaved = 0;
    for seed in 0..64 {
        let (order, trace) = two_queue_run(seed, n, &rc, &rs);
        // Within one connection: messages in posting order.
        for k in 0..2 {
            let nums: Vec<u64> = order.iter().filter(|(c, _)| *c == k).map(|&(_, i)| i).collect();
            let want: Vec<u64> = (0..n).filter(|i| i % 3 != 2).collect();
            assert_eq!(nums, want, "seed {seed}: connection {k} delivered out of order");
        }
        // Within one send queue: execution and completion in posting order,
        // for Sends, Writes and Reads alike.
        for k in 0..2u64 {
            let executed: Vec<u64> = trace
                .iter()
                .filter_map(|e| match e {
                    TraceEvent::Executed { endpoint: 0, wr_id, .. } if wr_id.index() / 1000 == k => Some(wr_id.index()),
                    _ => None,
                })
                .collect();
            let completed: Vec<u64> = trace
                .iter()
                .filter_map(|e| match e {
                    TraceEvent::Completion { endpoint: 0, wc, .. } if wc.wr_id.index() / 1000 == k => {
                        Some(wc.wr_id.index())
                    }
                    _ => None,
                })
                .collect();
            let mut posted: Vec<u64> = Vec::new();
            for i in 0..n {
                posted.push(k * 1000 + i);
                if i % 4 == 3 {
                    posted.push(k * 1000 + 500 + i);
                }
            }
            assert_eq!(executed, posted, "seed {seed}: send queue {k} executed out of order");
            assert_eq!(completed, posted, "seed {seed}: send queue {k} completed out of order");
        }
        let conns: Vec<usize> = order.iter().map(|&(c, _)| c).collect();
        if conns.windows(2).filter(|w| w[0] != w[1]).count() > 1 {
            interleaved += 1;
        }
        patterns.insert(conns);
    }
    assert!(
        patterns.len() > 10,
        "only {} distinct cross-connection orders in 64 seeds",
        patterns.len()
    );
    assert!(interleaved > 0);
}
