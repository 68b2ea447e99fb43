//! Live statistics (issue 24 part 3): the target started in-process serves
//! its counters on the local socket its configuration names; after perf
//! sends a known number of Calls over the shm fabric, the JSON document
//! counts exactly those Calls per procedure, with latency samples, no
//! errors, the connections gone, and the pools listed. The socket answers
//! nothing but its one read request and is private to its owner.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use perf::engine::{OpKind, ShmMaker};
use perf::run::{self, Auth, Mode};
use rpcrdma_apps::server::{stats, Target};
use serde_json::Value;

mod target_common;
use target_common::*;

fn proc_of<'a>(doc: &'a Value, name: &str) -> Option<&'a Value> {
    doc["total"]["procs"].as_array()?.iter().find(|p| p["name"] == name)
}

fn calls_of(doc: &Value, name: &str) -> u64 {
    proc_of(doc, name).and_then(|p| p["calls"].as_u64()).unwrap_or(0)
}

/// Query until `done` holds (the core publishes shortly after it goes
/// idle) or 5 s pass; the last document either way.
fn query_until(path: &std::path::Path, done: impl Fn(&Value) -> bool) -> Value {
    let t0 = Instant::now();
    loop {
        let doc = stats::query(path).expect("stats socket answers");
        if done(&doc) || t0.elapsed() > Duration::from_secs(5) {
            return doc;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn live_statistics_count_what_was_sent() {
    let dir = tmpdir("stats");
    let (cfg, mount_port) = target_config(&dir);
    let path = stats::socket_path(&cfg);
    assert_eq!(path, dir.join("stats.sock"));
    let t = Target::start(cfg).expect("target starts");
    assert_eq!(t.stats_socket(), Some(path.as_path()));
    let mode = std::fs::metadata(&path).expect("socket exists").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "owner only");

    let before = stats::query(&path).expect("stats before any Call");
    assert_eq!(calls_of(&before, "NULL"), 0);
    assert!(before["pools"].as_array().is_some_and(|p| p.len() == 3), "{before}");

    let sock = dir.join("fabric.sock");
    const NULLS: u64 = 500;
    const WRITES: u64 = 300;
    let mut c = run_cfg(&sock, mount_port, Mode::Rpc(run::NULL_DEFAULT), 1, 0);
    c.nfs = None;
    c.auth = Auth::None;
    c.count = Some(NULLS);
    c.warmup = Duration::ZERO;
    let out = run::run_with(&ShmMaker::default(), &c).expect("null");
    assert_eq!((out.result.ops, out.result.errors), (NULLS, 0), "{:?}", out.result);
    // WRITEs of 4 KiB without the read-back: exactly WRITES of them (the
    // set-up sends LOOKUP and CREATE, no WRITE: no fill before writes).
    let mut c = run_cfg(&sock, mount_port, Mode::Rpc(OpKind::Write), 2, 4096);
    c.verify = false;
    c.count = Some(WRITES);
    c.warmup = Duration::ZERO;
    let out = run::run_with(&ShmMaker::default(), &c).expect("write");
    assert_eq!((out.result.ops, out.result.errors), (WRITES, 0), "{:?}", out.result);

    let doc = query_until(&path, |d| {
        calls_of(d, "NULL") == NULLS && calls_of(d, "WRITE") == WRITES && d["total"]["live"]["connections"] == 0
    });
    assert_eq!(calls_of(&doc, "NULL"), NULLS, "{doc:#}");
    assert_eq!(calls_of(&doc, "WRITE"), WRITES, "{doc:#}");
    let w = proc_of(&doc, "WRITE").unwrap();
    assert_eq!(w["errors"], 0);
    assert!(w["bytes_in"].as_u64().unwrap() >= WRITES * 4096, "{w}");
    // LOOKUP of a missing file is an NFS error; CREATE follows.
    assert!(
        calls_of(&doc, "LOOKUP") >= 1 && calls_of(&doc, "CREATE") <= 1,
        "{doc:#}"
    );
    let null = proc_of(&doc, "NULL").unwrap();
    assert_eq!(null["errors"], 0);
    let samples = null["latency_us"]["samples"].as_u64().unwrap();
    assert!(samples >= NULLS / stats::LAT_SAMPLE_EVERY as u64 - 1, "{null}");
    assert!(null["latency_us"]["p50"].as_f64().unwrap() > 0.0, "{null}");
    // The engine saw every Call (and the set-up ones), answered them all.
    let e = &doc["total"]["engine"];
    let nfs_calls: u64 = doc["total"]["procs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(e["calls"].as_u64().unwrap(), nfs_calls, "{doc:#}");
    assert_eq!(e["replies"], e["calls"], "{doc:#}");
    assert_eq!(e["call_errors"], 0);
    assert_eq!(e["conns_accepted"], e["conns_closed"]);
    assert!(e["conns_accepted"].as_u64().unwrap() >= 4, "{doc:#}");
    let live = &doc["total"]["live"];
    assert_eq!(
        (live["connections"].as_u64(), live["in_flight"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(doc["cores"].as_array().unwrap().len(), 1);
    let data = doc["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "data")
        .unwrap();
    assert!(data["high_water"].as_u64().unwrap() > 0, "{data}");
    // The table shows the procedures.
    let table = stats::render_table(&doc, None);
    assert!(
        table.contains("WRITE") && table.contains("NULL") && table.contains("p99 us"),
        "{table}"
    );

    // Nothing but the one read request: anything else gets an error and
    // changes nothing.
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(b"reset\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.contains("error"), "{text}");
    let again = stats::query(&path).unwrap();
    assert_eq!(calls_of(&again, "NULL"), NULLS);

    t.shutdown().expect("clean shutdown");
    assert!(!path.exists(), "socket removed at shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
