//! The NFS service behind the responder engine on the shm fabric: in one
//! process (one thread polling both ends) and between two processes (this
//! test binary re-executes itself as the client), RPC-over-RDMA versions 1
//! and 2, each backend, the same I/O scenario as on the sim fabric.

mod nfs_common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dataplane::requester::Requester;
use dataplane::shm::{ShmConfig, ShmFabric};
use nfs_common::*;
use proto::ulb::Nfs3Binding;

const CREDITS: u32 = 4;
const ENV_ADDR: &str = "RPCRDMA_NFS_SHM_ADDR";
const ENV_VERS: &str = "RPCRDMA_NFS_SHM_VERS";
const ENV_VERF: &str = "RPCRDMA_NFS_SHM_VERF";
const ENV_TAG: &str = "RPCRDMA_NFS_SHM_TAG";

fn client(p: &Pools, addr: &str, v: u32) -> Engine<ShmFabric> {
    let fab = ShmFabric::new(ShmConfig::default()).unwrap();
    let mut cli = Requester::new(requester_cfg(p, versions(v), CREDITS), fab, p.pool, &p.regions, 1).unwrap();
    cli.connect(addr).unwrap();
    Engine {
        cli,
        srv: None,
        net: None,
        binding: Nfs3Binding::new(MIB as u32),
        carried: Carried::default(),
    }
}

fn export_shared(s: &Store) -> std::sync::Arc<rpcrdma_apps::nfs::NfsShared> {
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    shared(&[s], &[ex], DATA_BUF_BYTES as u32)
}

#[test]
fn one_process_v1_and_v2_each_backend() {
    for k in KINDS {
        let s = store(k, "b0");
        let sh = export_shared(&s);
        let p = pools(CREDITS);
        let addr = format!("@rpcrdma-nfs-shm-1p-{}-{k:?}", std::process::id());
        let fab = ShmFabric::new(ShmConfig::default()).unwrap();
        let srv = responder(&p, &sh, fab, CREDITS, &addr);
        let mut srv = Some(srv);
        for v in [1, 2] {
            let mut e = client(&p, &addr, v);
            e.srv = srv.take();
            e.connect();
            assert_eq!(e.cli.version(), v);
            let mut c = Client::new(e);
            c.auth = Auth::root();
            io_scenario(&mut c, "/export", &format!("v{v}"), sh.write_verifier());
            assert!(
                c.t.carried.read_chunk_calls >= 2 && c.t.carried.write_chunk_replies >= 2,
                "{k:?} v{v}"
            );
            let mut e = c.t;
            assert_eq!(e.cli.shutdown(100_000), 0);
            srv = e.srv.take();
            drop(e);
            // The responder serves one connection (`max_conns: 1`): the next
            // client is refused until it has seen this one go, so wait for
            // that before connecting again (on a loaded machine its
            // disconnect can come after the next connect request).
            let s = srv.as_mut().expect("responder");
            let t0 = Instant::now();
            while s.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
                s.poll();
            }
            assert_eq!(
                s.connections(),
                0,
                "{k:?} v{v}: the responder kept the closed connection"
            );
        }
        let mut srv = srv.unwrap();
        assert_eq!(srv.shutdown(100_000), Default::default());
        assert_eq!(srv.service().stats().rpc_errors, 0);
        drop(srv);
        for class in [p.recv, p.send, p.data] {
            assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "class {class:?} leaked");
        }
    }
}

/// The client process (run by `two_processes_v1_and_v2_each_backend`).
#[test]
#[ignore = "run as the child of two_processes_v1_and_v2_each_backend"]
fn client_child() {
    let (Ok(addr), Ok(v), Ok(verf), Ok(tag)) = (
        std::env::var(ENV_ADDR),
        std::env::var(ENV_VERS),
        std::env::var(ENV_VERF),
        std::env::var(ENV_TAG),
    ) else {
        return;
    };
    let v: u32 = v.parse().unwrap();
    let verf: [u8; 8] = u64::from_str_radix(&verf, 16).unwrap().to_be_bytes();
    let p = pools(CREDITS);
    let mut e = client(&p, &addr, v);
    e.connect();
    assert_eq!(e.cli.version(), v);
    let mut c = Client::new(e);
    c.auth = Auth::root();
    io_scenario(&mut c, "/export", &tag, verf);
    assert!(c.t.carried.read_chunk_calls >= 2 && c.t.carried.write_chunk_replies >= 2);
    assert_eq!(c.t.cli.shutdown(100_000), 0);
    drop(c);
    for class in [p.recv, p.send, p.data] {
        assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "child class {class:?} leaked");
    }
    println!("client_child {tag}: ok");
}

#[test]
fn two_processes_v1_and_v2_each_backend() {
    let exe = std::env::current_exe().unwrap();
    for k in KINDS {
        let s = store(k, "b0");
        let sh = export_shared(&s);
        let p = pools(CREDITS);
        let addr = format!("@rpcrdma-nfs-shm-2p-{}-{k:?}", std::process::id());
        let fab = ShmFabric::new(ShmConfig::default()).unwrap();
        let mut srv = responder(&p, &sh, fab, CREDITS, &addr);
        let verf = format!("{:016x}", u64::from_be_bytes(sh.write_verifier()));
        for v in [1u32, 2] {
            let tag = format!("{k:?}-v{v}");
            let mut child = Command::new(&exe)
                .args(["--exact", "client_child", "--ignored", "--nocapture"])
                .env(ENV_ADDR, &addr)
                .env(ENV_VERS, v.to_string())
                .env(ENV_VERF, &verf)
                .env(ENV_TAG, &tag)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let t0 = Instant::now();
            let status = loop {
                srv.poll();
                if let Some(st) = child.try_wait().unwrap() {
                    break st;
                }
                assert!(t0.elapsed() < Duration::from_secs(120), "child {tag} hung");
            };
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
            assert!(
                status.success() && text.contains(&format!("client_child {tag}: ok")),
                "child {tag} failed (responder {:?}):\n{text}",
                srv.stats()
            );
        }
        let t0 = Instant::now();
        while srv.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
            srv.poll();
        }
        let nfs = srv.service().stats();
        assert_eq!(nfs.nfs[7], 4, "two WRITEs per child");
        assert_eq!(nfs.rpc_errors, 0);
        assert_eq!(srv.shutdown(100_000), Default::default());
    }
}
