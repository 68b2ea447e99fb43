//! perf's checks against the real target (in-process, shm fabric, RAM
//! backend): `read --verify-only` finds a block that lost its data where
//! `--verify` (which rewrites the file first) does not, and `write --verify`
//! stops at once, with its counts, when the target goes away.

use std::time::{Duration, Instant};

use perf::engine::{OpKind, ShmMaker};
use perf::run::{self, Mode};
use rpcrdma_apps::backend::{write_sync, Stable};
use rpcrdma_apps::server::Target;

mod target_common;
use target_common::*;

#[test]
fn nfs_safety_perf_verify_only_detects_a_zeroed_block() {
    let dir = tmpdir("verify-only");
    let (cfg, mount_port) = target_config(&dir);
    let t = Target::start(cfg).expect("target starts");
    let sock = dir.join("fabric.sock");
    let mut c = run_cfg(&sock, mount_port, Mode::Rpc(OpKind::Read), 1, 4096);
    c.conns = 1;
    c.duration = Duration::from_millis(300);
    let nfs = c.nfs.as_mut().unwrap();
    nfs.file_size = MIB as u64;
    // --verify: the file is written with the pattern, then read and checked.
    let out = run::run_with(&ShmMaker::default(), &c).expect("read --verify");
    assert_eq!(out.result.errors, 0, "{:?}", out.result);

    // What a crash might do: one block of the file loses its data.
    let (_, b) = &t.shared().backends()[0];
    let (fh, _) = b.lookup(&b.root(), b"perf-4096.dat").expect("the file perf made");
    let mut ch = b.open_channel(0).expect("channel");
    let zeros = vec![0u8; 4096];
    write_sync(&mut *ch, &fh, 37 * 4096, &zeros, Stable::FileSync).expect("zero a block");
    drop(ch);

    // --verify-only reads what is there: the block is found.
    let mut only = c.clone();
    only.verify = false;
    only.verify_only = true;
    only.nfs.as_mut().unwrap().create = false;
    let out = run::run_with(&ShmMaker::default(), &only).expect("read --verify-only");
    assert!(
        out.result.errors > 0,
        "--verify-only misses the zeroed block: {:?}",
        out.result
    );
    // It wrote nothing: the block is still zero.
    let mut ch = b.open_channel(0).expect("channel");
    let mut got = vec![1u8; 4096];
    rpcrdma_apps::backend::read_sync(&mut *ch, &fh, 37 * 4096, &mut got).expect("read the block");
    assert_eq!(got, zeros, "--verify-only wrote to the file");
    drop(ch);

    // Plain --verify rewrites the file first and so passes.
    let out = run::run_with(&ShmMaker::default(), &c).expect("read --verify");
    assert_eq!(out.result.errors, 0, "{:?}", out.result);

    // --verify-only is for reads only.
    let mut w = only.clone();
    w.mode = Mode::Rpc(OpKind::Write);
    assert!(w.validate().is_err());
    t.shutdown().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nfs_safety_perf_write_verify_stops_when_the_target_dies() {
    let dir = tmpdir("target-dies");
    let (cfg, mount_port) = target_config(&dir);
    let t = Target::start(cfg).expect("target starts");
    let sock = dir.join("fabric.sock");
    let mut c = run_cfg(&sock, mount_port, Mode::Rpc(OpKind::Write), 1, 4096);
    c.duration = Duration::from_secs(60);
    c.timeout = Duration::from_secs(5);
    let run = std::thread::spawn(move || run::run_with(&ShmMaker::default(), &c));
    std::thread::sleep(Duration::from_millis(1500));
    t.shutdown().expect("target stops");
    let t0 = Instant::now();
    let out = run.join().unwrap().expect("the run reports its counts");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "perf ran on for {:?} after the target went away",
        t0.elapsed()
    );
    assert!(out.target_lost, "{:?}", out.result);
    assert!(out.result.ops > 0 && out.result.errors > 0, "{:?}", out.result);
    assert_eq!(out.verified_blocks, None, "no read-back from a target that is gone");
    let _ = std::fs::remove_dir_all(&dir);
}
