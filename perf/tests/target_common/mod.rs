//! What the perf tests against the in-process target share: a free port,
//! the machine's CPUs, the target's configuration (shm fabric, RAM backend),
//! a scratch directory and perf's run configuration.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use perf::run::{Auth, FabricKind, Mode, NfsOptions, RunConfig};
use perf::tcp::MountTarget;
use rpcrdma_apps::config::Config;

pub const MIB: usize = 1 << 20;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn cpus() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// A two-core target on the shm fabric with its socket in `dir`; returns the
/// configuration and the MOUNT port.
pub fn target_config(dir: &Path) -> (Config, u16) {
    let (nfs, mnt) = (free_port(), free_port());
    let c = cpus();
    let (admin, io) = (c[0], *c.get(1).unwrap_or(&c[0]));
    let v = serde_json::json!({
        "cores": [{ "cpu": admin, "role": "admin" }, { "cpu": io, "role": "io" }],
        "reactor": { "idle": { "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100 } },
        "listeners": { "fabric": [{ "address": "127.0.0.1", "port": 20049, "versions": [1, 2] }],
                       "nfs_tcp_port": nfs, "mount_tcp_port": mnt,
                       "stats_socket": dir.join("stats.sock").to_str().unwrap() },
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

pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rpcrdma-perf-target-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn run_cfg(sock: &Path, mount_port: u16, mode: Mode, version: u32, size: u32) -> RunConfig {
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
            commit_every: 0,
            salt: 77,
            unmount: true,
        }),
        progress: false,
        timeout: Duration::from_secs(10),
        idle_sleep_us: 0,
        idle_yield: false,
        idle_wait: false,
        target_pid: None,
        nfs41: false,
    }
}
