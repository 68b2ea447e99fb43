//! perf's checks against the real target (in-process, shm fabric, RAM
//! backend): `read --verify-only` finds a block that lost its data where
//! `--verify` (which rewrites the file first) does not, and `write --verify`
//! stops at once, with its counts, when the target goes away.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use perf::engine::{OpKind, ShmMaker};
use perf::run::{self, Auth, FabricKind, Mode, NfsOptions, RunConfig};
use perf::tcp::MountTarget;
use rpcrdma_apps::backend::{write_sync, Stable};
use rpcrdma_apps::config::Config;
use rpcrdma_apps::server::Target;

const MIB: usize = 1 << 20;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn cpus() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// A two-core target on the shm fabric with its socket in `dir`; returns the
/// configuration and the MOUNT port.
fn target_config(dir: &Path) -> (Config, u16) {
    let (nfs, mnt) = (free_port(), free_port());
    let c = cpus();
    let (admin, io) = (c[0], *c.get(1).unwrap_or(&c[0]));
    let v = serde_json::json!({
        "cores": [{ "cpu": admin, "role": "admin" }, { "cpu": io, "role": "io" }],
        "reactor": { "idle": { "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100 } },
        "listeners": { "fabric": [{ "address": "127.0.0.1", "port": 20049, "versions": [1, 2] }],
                       "nfs_tcp_port": nfs, "mount_tcp_port": mnt },
        "fabric": { "provider": "shm", "socket_path": dir.join("fabric.sock").to_str().unwrap() },
        "pools": [
            { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 512,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "send", "usage": "send", "buffer_size_bytes": 8192, "count": 512,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "data", "usage": "data", "buffer_size_bytes": MIB + 64 * 1024, "count": 48,
              "page_size": "4K", "per_core_cache": 2 }
        ],
        "credits": { "max_per_connection": 16 },
        "backends": [{ "name": "b0", "type": "mem", "size_bytes": 64 * MIB }],
        "exports": [{ "path": "/export", "backend": "b0", "clients": ["127.0.0.0/8"],
                      "read_only": false, "root_squash": false }],
    });
    (Config::from_json_value(&v).expect("target configuration"), mnt)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rpcrdma-perf-target-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_cfg(sock: &Path, mount_port: u16, mode: Mode, version: u32, size: u32) -> RunConfig {
    RunConfig {
        mode,
        fabric: FabricKind::Shm,
        target: sock.to_str().unwrap().into(),
        version,
        size,
        qd: 4,
        conns: 2,
        // The target's io core spins on the other CPU.
        cores: vec![cpus()[0]],
        // Long enough that a loaded machine (busy pollers of other tests or
        // VMs on the same two CPUs) still completes Calls inside the window.
        duration: Duration::from_millis(1000),
        count: None,
        warmup: Duration::from_millis(100),
        rate: None,
        ddp: true,
        verify: true,
        verify_only: false,
        auth: Auth::Sys { uid: 0, gid: 0 },
        seed: 5,
        nfs: Some(NfsOptions {
            mount: MountTarget::new([127, 0, 0, 1].into(), Some(mount_port)),
            export: "/export".into(),
            file: format!("perf-{size}.dat"),
            create: true,
            file_size: 8 * MIB as u64,
            seq: false,
            stable: proto::nfs3::UNSTABLE,
            salt: 77,
            unmount: true,
        }),
        progress: false,
        timeout: Duration::from_secs(10),
        idle_sleep_us: 0,
    }
}

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
