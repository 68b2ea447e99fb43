//! sim provider: thousands of seeded runs of a small random workload (Sends,
//! Writes, Reads with one or two SGEs, signaled and not, per-QP receive queues or
//! an SRQ), each checked by `sim_common::workload`.

mod sim_common;

use dataplane::sim::{check_seeds, SimConfig, SimFaults};
use sim_common::{region, workload};

#[test]
fn random_workloads_without_faults_deliver_everything() {
    let regions = (region(1), region(2));
    let mut runs = 0u64;
    let mut sends = 0u64;
    check_seeds(0..1500, |seed| {
        let out = workload::run(seed, SimConfig::with_seed(seed), &regions)?;
        runs += 1;
        sends += out.stats.sends + out.stats.writes + out.stats.reads;
        Ok(())
    });
    // The workload is not empty: on average a run carries several operations
    // (checked over the default set; SIM_SEED may select a single run).
    if runs >= 100 {
        assert!(sends > runs * 4, "{sends} operations in {runs} runs");
    }
}

#[test]
fn random_workloads_with_faults_return_every_buffer() {
    let regions = (region(1), region(2));
    let faults = SimFaults {
        flush_error: 0.002,
        wr_error: 0.01,
        rnr: 0.05,
        lost_connection: 0.002,
        slow_peer: 0.2,
        slow_peer_ns: 50_000,
        recv_starvation: 0.05,
        recv_starvation_ns: 100_000,
    };
    let mut injected = 0u64;
    let mut runs = 0u64;
    check_seeds(0..1000, |seed| {
        let cfg = SimConfig {
            faults,
            ..SimConfig::with_seed(seed)
        };
        let out = workload::run(seed, cfg, &regions)?;
        let f = out.stats.faults;
        injected += f.flush_errors + f.wr_errors + f.rnr + f.lost_connections + f.starved_recvs;
        runs += 1;
        Ok(())
    });
    if runs >= 100 {
        assert!(injected > runs / 10, "only {injected} faults injected in {runs} runs");
    }
}
