//! End to end over the shm fabric: `null` against an in-process responder
//! serving NULL of NFSv3 (library and binary), and `raw` with its loopback
//! echo side (binary). Timing figures are not asserted (no performance claims
//! from tests); counts, errors, versions and output files are.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dataplane::responder::{Responder, ResponderConfig};
use dataplane::service::{CallView, ReplyBuilder, Service, ServiceError};
use dataplane::shm::{ShmConfig, ShmFabric};
use mempool::pool::{Mempool, PoolPlan};
use mempool::region::RegionConfig;
use perf::engine::ShmMaker;
use perf::run::{self, Auth, FabricKind, Mode, RunConfig};
use perf::stats::RunResult;
use proto::header::Limits;
use proto::negotiate::VersionRange;
use proto::nfs3::{NFS_PROGRAM, NFS_V3};
use proto::rpc::{encode_reply_header, AcceptedReply, CallHeader, OpaqueAuth, ReplyHeader};
use proto::xdr::Writer;

/// Answers NULL of NFSv3; other procedures PROC_UNAVAIL, other programs
/// PROG_UNAVAIL.
#[derive(Default)]
struct NullNfs {
    calls: u64,
}

impl Service for NullNfs {
    fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
        let (h, _) = CallHeader::decode(call.head()).map_err(|_| ServiceError::Reject)?;
        self.calls += 1;
        let data = if h.prog != NFS_PROGRAM {
            AcceptedReply::ProgUnavail
        } else if h.vers != NFS_V3 {
            AcceptedReply::ProgMismatch { low: 3, high: 3 }
        } else if h.proc_ != 0 {
            AcceptedReply::ProcUnavail
        } else {
            AcceptedReply::Success
        };
        let mut w = Writer::new(reply.head_mut());
        encode_reply_header(&mut w, &ReplyHeader::accepted(h.xid, OpaqueAuth::NONE, data))
            .map_err(|_| ServiceError::Reject)?;
        let n = w.len();
        reply.set_head_len(n);
        Ok(())
    }
}

/// A responder thread listening at a fresh abstract shm address.
struct Server {
    addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Server {
    fn start(name: &str) -> Server {
        let addr = format!("@rpcrdma-perf-test-{name}-{}", std::process::id());
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let thread = {
            let (addr, stop, ready) = (addr.clone(), Arc::clone(&stop), Arc::clone(&ready));
            std::thread::spawn(move || {
                const CREDITS: u32 = 16;
                const CONNS: u32 = 8;
                let mut plan = PoolPlan::new(1);
                let recv = plan.add_class("recv", 4096, 8).unwrap();
                let send = plan.add_class("send", 4096, 8).unwrap();
                let data = plan.add_class("data", 64 * 1024, 4).unwrap();
                let srq = (CREDITS * CONNS) as u64;
                plan.reserve("recv", recv, 2 * srq)
                    .reserve("send", send, 2 * srq)
                    .reserve("data", data, 2 * srq);
                let pool = Mempool::new(
                    &plan,
                    &RegionConfig {
                        lock: false,
                        ..RegionConfig::default()
                    },
                )
                .unwrap();
                let cfg = ResponderConfig {
                    versions: VersionRange::ALL,
                    credits: CREDITS,
                    max_conns: CONNS,
                    send_depth: 64,
                    max_rdma_reads: 4,
                    limits: Limits::DEFAULT,
                    max_read_bytes: 64 * 1024,
                    recv_class: recv,
                    send_class: send,
                    data_class: data,
                    remote_invalidation: false,
                    backward_credits: 0,
                };
                // Each QP holds at most `srq_window` of the SRQ's receives: one
                // connection's worth, so every connection gets some.
                let fab = ShmFabric::new(ShmConfig {
                    srq_window: CREDITS,
                    ..ShmConfig::default()
                })
                .unwrap();
                let mut srv = Responder::new(cfg, fab, NullNfs::default(), &pool, pool.regions(), 0, Some(&addr))
                    .expect("responder");
                ready.store(true, Ordering::Release);
                while !stop.load(Ordering::Relaxed) {
                    if srv.poll() == 0 {
                        // Other tests share the CPUs: do not spin them away.
                        std::thread::yield_now();
                    }
                }
                srv.shutdown(100_000);
                srv.service().calls
            })
        };
        while !ready.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Server {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// Stop and return how many Calls the service saw.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The CPUs this process may run on (tests pin client threads there).
fn cpus() -> Vec<usize> {
    let ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert!(!ids.is_empty());
    ids
}

fn null_cfg(addr: &str, version: u32, conns: u32, qd: u32) -> RunConfig {
    let c = cpus();
    RunConfig {
        mode: Mode::Rpc(run::NULL_DEFAULT),
        fabric: FabricKind::Shm,
        target: addr.into(),
        version,
        size: 0,
        qd,
        conns,
        cores: c[..c.len().min(2)].to_vec(),
        duration: Duration::from_millis(400),
        count: None,
        warmup: Duration::from_millis(100),
        rate: None,
        ddp: true,
        verify: false,
        verify_only: false,
        auth: Auth::None,
        seed: 1,
        nfs: None,
        progress: false,
        timeout: Duration::from_secs(10),
        // The workers sleep when they have nothing to do instead of spinning
        // on the CPUs that this binary's other tests (run in parallel) and
        // their servers need: spinning ones once starved a server of every
        // connection attempt for 10 s.
        idle_sleep_us: 50,
        idle_yield: false,
        idle_wait: false,
        target_pid: None,
        nfs41: false,
    }
}

#[test]
fn null_closed_loop_v1_and_v2() {
    let srv = Server::start("null");
    let mut total = 0;
    for version in [1, 2] {
        // 1 s, not null_cfg's 0.4 s: a host at load 16 once completed no
        // Call inside 0.4 s.
        let cfg = RunConfig {
            duration: Duration::from_millis(1000),
            ..null_cfg(&srv.addr, version, 3, 4)
        };
        let out = run::run_with(&ShmMaker::default(), &cfg).unwrap();
        let r = &out.result;
        assert_eq!((r.op.as_str(), r.fabric.as_str(), r.version), ("null", "shm", version));
        assert_eq!((r.queue_depth, r.connections, r.size_bytes), (4, 3, 0));
        assert_eq!(r.errors, 0, "{r:?}");
        assert!(r.ops > 0, "{r:?}");
        assert_eq!(out.hist.len(), r.ops);
        assert!(r.latency_us.min > 0.0 && r.latency_us.min <= r.latency_us.p50);
        assert!(r.latency_us.p50 <= r.latency_us.p99 && r.latency_us.p99 <= r.latency_us.max);
        assert!(r.iops > 0.0 && r.mb_per_s == 0.0);
        let per_interval: u64 = out.intervals.iter().map(|h| h.hist.len()).sum();
        assert_eq!(per_interval, r.ops);
        total += r.ops;
    }
    // The server saw at least every measured Call (plus warm-up and drain).
    assert!(srv.stop() >= total);
}

#[test]
fn null_count_mode_and_open_loop() {
    let srv = Server::start("count");
    let cfg = RunConfig {
        count: Some(500),
        ..null_cfg(&srv.addr, 2, 2, 2)
    };
    let out = run::run_with(&ShmMaker::default(), &cfg).unwrap();
    assert_eq!((out.result.ops, out.result.errors), (500, 0));
    assert!(out.result.duration_s > 0.0);
    // Open loop: 2 connections at 250 Calls/s each for 0.4 s intend 200
    // measured Calls (those still in flight at the end are not counted); the
    // schedule, not the server's speed, sets the number: never more than it
    // intends (a closed loop at this depth does thousands). The lower bound
    // is loose because on a loaded machine (tests run in parallel, pinned to
    // the same CPUs) Calls of the window may still be in flight at its end.
    let cfg = RunConfig {
        rate: Some(250.0),
        ..null_cfg(&srv.addr, 1, 2, 8)
    };
    let out = run::run_with(&ShmMaker::default(), &cfg).unwrap();
    assert_eq!(out.result.errors, 0);
    assert!((20..=202).contains(&out.result.ops), "{:?}", out.result);
    srv.stop();
}

#[test]
fn null_of_an_unknown_program_counts_errors() {
    let srv = Server::start("prog");
    let cfg = RunConfig {
        mode: Mode::Rpc(perf::engine::OpKind::Null {
            prog: 0x2000_0123,
            vers: 1,
        }),
        // Long enough for a loaded host to answer at least one Call.
        duration: Duration::from_millis(1000),
        ..null_cfg(&srv.addr, 1, 1, 1)
    };
    let out = run::run_with(&ShmMaker::default(), &cfg).unwrap();
    assert_eq!(out.result.ops, 0);
    assert!(out.result.errors > 0);
    srv.stop();
}

#[test]
fn null_to_nobody_fails_to_connect() {
    let cfg = RunConfig {
        timeout: Duration::from_secs(2),
        ..null_cfg("@rpcrdma-perf-test-nobody-listens", 1, 1, 1)
    };
    let e = run::run_with(&ShmMaker::default(), &cfg).unwrap_err();
    assert!(e.to_string().contains("connection"), "{e}");
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rpcrdma-perf-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn perf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_perf"))
}

fn cores_arg() -> String {
    cpus()[0].to_string()
}

#[test]
fn binary_null_writes_json_hdr_log_and_plot() {
    let srv = Server::start("bin");
    let (json, log, svg) = (tmp("null.json"), tmp("null.hlog"), tmp("null.svg"));
    let out = perf()
        .args([
            "null", "--fabric", "shm", "--target", &srv.addr, "--vers", "2", "--qd", "2",
        ])
        .args([
            "--duration",
            "1.3",
            "--warmup",
            "0.1",
            "--cores",
            &cores_arg(),
            "--progress",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--hdr-log")
        .arg(&log)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The progress line was printed at least once (every second, on stderr).
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("iops="),
        "no progress line"
    );
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("null: fabric=shm rpcrdma=v2") && stdout.contains("lat (usec)"),
        "{stdout}"
    );
    let r = RunResult::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!((r.op.as_str(), r.version, r.queue_depth, r.errors), ("null", 2, 2, 0));
    assert!(r.ops > 0);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("#[BaseTime:"), "{log}");
    assert!(log.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count() >= 1);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(svg.matches("<polyline").count(), 1);
    srv.stop();
}

/// `perf raw` over shm with `args` (a count run, no warm-up), on the first
/// CPU with the echo side on the second when there is one, results to `json`.
fn raw_count(args: &[&str], json: &std::path::Path) -> std::process::Output {
    let c = cpus();
    let mut cmd = perf();
    cmd.args(["raw", "--fabric", "shm", "--warmup", "0", "--no-progress"])
        .args(args)
        .args(["--cores", &c[0].to_string()])
        .arg("--json")
        .arg(json);
    if c.len() > 1 {
        cmd.args(["--echo-core", &c[1].to_string()]);
    }
    cmd.output().unwrap()
}

#[test]
fn binary_raw_loopback_and_compare() {
    let c = cpus();
    let raw = tmp("raw.json");
    let mut cmd = perf();
    cmd.args([
        "raw",
        "--fabric",
        "shm",
        "--duration",
        "0.5",
        "--warmup",
        "0.1",
        "--no-progress",
    ])
    .args(["--cores", &c[0].to_string()])
    .arg("--json")
    .arg(&raw);
    if c.len() > 1 {
        cmd.args(["--echo-core", &c[1].to_string()]);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = RunResult::from_json(&std::fs::read_to_string(&raw).unwrap()).unwrap();
    assert_eq!(
        (r.op.as_str(), r.fabric.as_str(), r.version, r.size_bytes),
        ("raw", "shm", 0, 64)
    );
    assert!(r.ops > 0 && r.errors == 0, "{r:?}");

    // compare: the raw file against itself with a larger message size.
    let big = tmp("raw4k.json");
    let out = raw_count(&["--size", "4k", "--count", "2000"], &big);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r4 = RunResult::from_json(&std::fs::read_to_string(&big).unwrap()).unwrap();
    assert_eq!((r4.ops, r4.size_bytes), (2000, 4096));
    let svg = tmp("cmp.svg");
    let out = perf()
        .arg("compare")
        .arg(&raw)
        .arg(&big)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    let size_line = table.lines().find(|l| l.starts_with("size_bytes")).unwrap();
    assert!(size_line.contains("64") && size_line.contains("4096"), "{table}");
    let ops_line = table.lines().find(|l| l.starts_with("ops")).unwrap();
    assert!(ops_line.contains("2000 (x"), "{table}");
    assert_eq!(std::fs::read_to_string(&svg).unwrap().matches("<polyline").count(), 2);
    // A malformed result file is refused.
    let bad = tmp("bad.json");
    std::fs::write(&bad, "{\"op\": \"raw\"}").unwrap();
    let out = perf().arg("compare").arg(&raw).arg(&bad).output().unwrap();
    assert!(!out.status.success());
}

/// `raw --touch`: both sides read what they receive; the run completes its
/// count with no errors at a message size that spans several cache lines.
#[test]
fn binary_raw_touch() {
    let json = tmp("raw-touch.json");
    let out = raw_count(&["--touch", "--size", "200", "--count", "3000"], &json);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = RunResult::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!((r.op.as_str(), r.ops, r.errors, r.size_bytes), ("raw", 3000, 0, 200));
}
