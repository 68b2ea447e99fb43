//! Issue 21 item 5: the target's own blocking threads stay off the io
//! cores' CPUs.
//!
//! - `nfs_safety_helper_threads_stay_off_the_core_cpu`: the NFS helper pool
//!   (which runs `uring`'s metadata procedures and their fsyncs) started
//!   from a thread pinned to the io core's CPU, as a core starts it on its
//!   first offloaded Call, runs on the CPUs of the process's allowed set
//!   without the cores' (here, with two CPUs, the admin core's). Before, the
//!   helpers inherited the core's pinning and their blocking work pre-empted
//!   the reactor on its own CPU.
//! - `nfs_safety_nfs4_record_writer_stays_off_the_core_cpu`: the same for
//!   the NFSv4 client-record writer (a file write, fsync and rename), started
//!   by the first client that needs its record written.
//!
//! Both are skipped (with a message) on a host whose process may use fewer
//! than two CPUs. This file holds only these tests: they look for threads
//! by name in the whole process.

mod cpu_list;
mod nfs_common;

use std::sync::Arc;

use nfs_common::*;
use rpcrdma_apps::backend::{mem::MemBackend, Backend};
use rpcrdma_apps::config::{CoreConfig, CoreRole};
use rpcrdma_apps::cpus::{thread_cpus, CoreCpus, OffCores};
use rpcrdma_apps::nfs::NfsShared;
use rpcrdma_apps::nfs4::grace::Records;

/// The allowed CPUs of each of this process's threads whose name starts
/// with `prefix`.
fn threads_named(prefix: &str) -> Vec<(String, Vec<usize>)> {
    let mut found = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        if let Some(l) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
            found.push((comm.trim().to_string(), cpu_list::parse_cpu_list(l)));
        }
    }
    found
}

/// The admin core's and the io core's CPUs: the first and the last the
/// process may use; `None` when it may use fewer than two.
fn admin_and_io_cpus() -> Option<(usize, usize)> {
    let allowed = thread_cpus().unwrap();
    if allowed.len() < 2 {
        eprintln!("skipped: needs at least two CPUs (allowed: {allowed:?})");
        return None;
    }
    Some((allowed[0], *allowed.last().unwrap()))
}

/// Run `f` on a thread pinned to `cpu`, as a core thread pins itself.
fn on_cpu<T: Send + 'static>(cpu: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        rpcrdma_apps::cpus::set_thread_cpus(&[cpu]).unwrap();
        assert_eq!(thread_cpus().unwrap(), vec![cpu]);
        f()
    })
    .join()
    .unwrap()
}

/// Wait (up to 5 s) for threads named `prefix`: a thread sets its own
/// affinity as it starts.
fn settled_threads(prefix: &str, n: usize, io: usize) -> Vec<(String, Vec<usize>)> {
    let t0 = std::time::Instant::now();
    loop {
        let found = threads_named(prefix);
        let done = found.len() >= n && found.iter().all(|(_, c)| !c.contains(&io));
        if done || t0.elapsed() > std::time::Duration::from_secs(5) {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn assert_off_the_io_cpu(found: &[(String, Vec<usize>)], n: usize, admin: usize, io: usize) {
    assert!(found.len() >= n, "threads found: {found:?}");
    let allowed = thread_cpus().unwrap();
    for (name, cpus) in found {
        assert!(
            !cpus.is_empty() && !cpus.contains(&io),
            "{name} may run on the io core's CPU {io}: {cpus:?}"
        );
        // The allowed CPUs without the cores' (admin and io), or with two
        // CPUs the admin core's.
        let want: Vec<usize> = match allowed.len() {
            2 => vec![admin],
            _ => allowed.iter().copied().filter(|&c| c != admin && c != io).collect(),
        };
        assert_eq!(cpus, &want, "{name}");
    }
}

#[test]
fn nfs_safety_helper_threads_stay_off_the_core_cpu() {
    let Some((admin, io)) = admin_and_io_cpus() else {
        return;
    };
    // Built on this (unpinned) thread, as the target builds it at start-up.
    let sh = shared_with_cores(admin, io);
    let sh2 = sh.clone();
    // Started on the io core's CPU, as a core starts it.
    assert!(on_cpu(io, move || sh2.start_helpers()));
    let found = settled_threads("nfs-helper-", rpcrdma_apps::nfs::HELPER_THREADS, io);
    assert_off_the_io_cpu(&found, rpcrdma_apps::nfs::HELPER_THREADS, admin, io);
    drop(sh);
}

#[test]
fn nfs_safety_nfs4_record_writer_stays_off_the_core_cpu() {
    let Some((admin, io)) = admin_and_io_cpus() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("nfs-safety-helpers-{}", std::process::id()));
    let cores = CoreCpus {
        reactor: vec![admin, io],
        io: vec![io],
    };
    let rec = Arc::new(
        Records::open(&dir, &[("b0", true)])
            .unwrap()
            .with_off_cores(OffCores::new(cores)),
    );
    let rec2 = rec.clone();
    // The first client's record write, from the io core's CPU.
    assert!(!on_cpu(io, move || rec2.ensure(0, b"client-a")));
    // Generous: an fsync on a loaded host's disk can take seconds.
    assert!(rec.wait_durable(60_000));
    let found = settled_threads("nfs4-records", 1, io);
    assert_off_the_io_cpu(&found, 1, admin, io);
    let _ = std::fs::remove_dir_all(&dir);
}

fn shared_with_cores(admin: usize, io: usize) -> Arc<NfsShared> {
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let mut cfg = config(&["b0"], &[ex], DATA_BUF_BYTES as u32);
    cfg.cores = vec![
        CoreConfig {
            cpu: admin as u32,
            role: CoreRole::Admin,
        },
        CoreConfig {
            cpu: io as u32,
            role: CoreRole::Io,
        },
    ];
    let b: Arc<dyn Backend> = Arc::new(MemBackend::new("b0", 1 << 24).unwrap());
    NfsShared::new(&cfg, vec![("b0".into(), b)]).unwrap()
}

/// The TCP listener's thread and its connection threads (NFS over TCP, run
/// on those threads), and the statistics socket's thread, started from an
/// unpinned thread as the target starts them: off the io core's CPU. Before,
/// they could run anywhere the process may, the io core's CPU included.
#[test]
fn nfs_safety_tcp_and_stats_threads_stay_off_the_core_cpu() {
    let Some((admin, io)) = admin_and_io_cpus() else {
        return;
    };
    let sh = shared_with_cores(admin, io);
    let cfg = config(&["b0"], &[Ex::new("/export", "b0")], DATA_BUF_BYTES as u32);
    let opts = rpcrdma_apps::server::tcp::TcpOptions::new(&cfg.listeners.tcp, 1 << 21, 1 << 20, 0);
    let tcp = rpcrdma_apps::server::tcp::TcpServer::start("127.0.0.1:0".parse().unwrap(), sh.clone(), opts).unwrap();
    let conn = std::net::TcpStream::connect(tcp.local_addr()).unwrap();
    let path = std::env::temp_dir().join(format!("nfs-safety-helpers-{}.sock", std::process::id()));
    let sources = rpcrdma_apps::server::stats::Sources {
        cores: Default::default(),
        pool: None,
        tcp: Vec::new(),
        epoch: std::time::Instant::now(),
        nfs: Some(sh.clone()),
        reactor: None,
    };
    let mut stats = rpcrdma_apps::server::stats::StatsServer::start(&path, sources).unwrap();
    // The connection's thread starts once the listener accepts: wait for it
    // (under load that takes a while) before the placement is looked at.
    let t0 = std::time::Instant::now();
    while threads_named("tcp-conn-").is_empty() && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let found = settled_threads("tcp-", 2, io);
    assert!(found.iter().any(|(n, _)| n.starts_with("tcp-conn-")), "{found:?}");
    assert_off_the_io_cpu(&found, 2, admin, io);
    let found = settled_threads("stats", 1, io);
    assert_off_the_io_cpu(&found, 1, admin, io);
    stats.stop();
    drop(conn);
}
