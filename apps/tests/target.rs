//! `rpcrdma-target` as a whole, started in-process with `Target::start`: the
//! NFS and MOUNT services over TCP record marking, NFS over the shm fabric
//! through the transport engine, RPC errors for unknown programs, versions
//! and procedures, graceful shutdown, and durability plus the write verifier
//! across a restart.

mod nfs_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

use dataplane::requester::Requester;
use dataplane::shm::{ShmConfig, ShmFabric};
use nfs_common::*;
use proto::nfs3::UNSTABLE;
use proto::ulb::Nfs3Binding;
use reactor::config::Config;
use rpcrdma_apps::target::Target;

/// A free TCP port on the loopback (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A two-core target configuration on the shm fabric in `dir`, exporting
/// `/export` from `backend`.
fn target_config(dir: &Path, backend: serde_json::Value) -> (Config, u16, u16) {
    let (nfs, mnt) = (free_port(), free_port());
    let v = serde_json::json!({
        "cores": [{ "cpu": 0, "role": "admin" }, { "cpu": 1, "role": "io" }],
        "reactor": { "idle": { "policy": "spin_then_sleep", "idle_loops": 1000, "max_sleep_us": 100 } },
        "listeners": { "fabric": [{ "address": "127.0.0.1", "port": 20049, "versions": [1, 2] }],
                       "nfs_tcp_port": nfs, "mount_tcp_port": mnt },
        "fabric": { "provider": "shm", "socket_path": dir.join("fabric.sock").to_str().unwrap() },
        "pools": [
            { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 512,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "send", "usage": "send", "buffer_size_bytes": 8192, "count": 512,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "data", "usage": "data", "buffer_size_bytes": DATA_BUF_BYTES, "count": 24,
              "page_size": "4K", "per_core_cache": 2 }
        ],
        "credits": { "max_per_connection": 32 },
        "backends": [backend],
        "exports": [{ "path": "/export", "backend": "b0", "clients": ["127.0.0.0/8"],
                      "read_only": false, "root_squash": false }],
    });
    (Config::from_json_value(&v).expect("target configuration"), nfs, mnt)
}

/// A client acting as root (the exports here do not squash root).
fn root_client<T: Transport>(t: T) -> Client<T> {
    let mut c = Client::new(t);
    c.auth = Auth::root();
    c
}

/// NFS or MOUNT over one TCP connection, one record per message.
struct Tcp(TcpStream);

impl Tcp {
    fn connect(port: u16) -> Tcp {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        Tcp(s)
    }
}

impl Transport for Tcp {
    fn roundtrip(&mut self, call: &[u8]) -> Option<Vec<u8>> {
        let mark = (0x8000_0000u32 | call.len() as u32).to_be_bytes();
        self.0.write_all(&mark).unwrap();
        self.0.write_all(call).unwrap();
        let mut out = Vec::new();
        loop {
            let mut m = [0u8; 4];
            self.0.read_exact(&mut m).ok()?;
            let w = u32::from_be_bytes(m);
            let at = out.len();
            out.resize(at + (w & 0x7fff_ffff) as usize, 0);
            self.0.read_exact(&mut out[at..]).unwrap();
            if w & 0x8000_0000 != 0 {
                return Some(out);
            }
        }
    }
}

fn mem_backend() -> serde_json::Value {
    serde_json::json!({ "type": "mem", "name": "b0", "size_bytes": 64 << 20 })
}

#[test]
fn tcp_services_answer_mount_nfs_and_rpc_errors() {
    let dir = TempDir::new("target-tcp");
    let (cfg, nfs, mnt) = target_config(&dir.0, mem_backend());
    let t = Target::start(cfg).expect("target starts");
    let verf = t.shared().write_verifier();

    // MOUNT on its own port, NFS on the other, as a mount helper does.
    let mut m = root_client(Tcp::connect(mnt));
    let (root, flavors) = m.mnt("/export").expect("MNT over TCP");
    assert!(flavors.contains(&1), "AUTH_SYS offered: {flavors:?}");
    assert_eq!(m.mnt("/nope").unwrap_err(), 2, "MNT3ERR_NOENT for an unknown export");
    let mut c = root_client(Tcp::connect(nfs));
    assert_eq!(c.getattr(&root).expect("GETATTR").ftype, 2);
    io_scenario(&mut c, "/export", "tcp", verf);

    // RPC-level errors (RFC 5531 s9): unknown program, version, procedure.
    let r = c.call(100_099, 1, 0, |_| {});
    assert_eq!(r.stat, RpcStat::ProgUnavail);
    let r = c.call(NFS, 4, 0, |_| {});
    assert_eq!(r.stat, RpcStat::ProgMismatch(3, 3));
    let r = c.call(NFS, 3, 22, |_| {});
    assert_eq!(r.stat, RpcStat::ProcUnavail);
    let r = c.call(MOUNT, 3, 0, |_| {});
    assert_eq!(r.stat, RpcStat::Success, "NULL of MOUNT");

    let stats = t.shutdown().expect("clean shutdown");
    assert!(stats.tcp_calls >= 20, "calls over TCP counted: {}", stats.tcp_calls);
}

#[test]
fn shm_engine_carries_nfs_io_to_the_target() {
    let dir = TempDir::new("target-shm");
    let (cfg, _, _) = target_config(&dir.0, mem_backend());
    let addr = dir.0.join("fabric.sock").to_str().unwrap().to_string();
    let t = Target::start(cfg).expect("target starts");
    let verf = t.shared().write_verifier();
    let p = pools(16);
    for v in [1u32, 2] {
        let fab = ShmFabric::new(ShmConfig::default()).unwrap();
        let mut cli = Requester::new(requester_cfg(&p, versions(v), 16), fab, p.pool, &p.regions, 1).unwrap();
        cli.connect(&addr).unwrap();
        let mut e = Engine {
            cli,
            srv: None,
            net: None,
            binding: Nfs3Binding::new(MIB as u32),
            carried: Carried::default(),
        };
        e.connect();
        assert_eq!(e.cli.version(), v, "negotiated version");
        let mut c = root_client(e);
        io_scenario(&mut c, "/export", &format!("shm-v{v}"), verf);
        let carried = c.t.carried;
        assert!(
            carried.read_chunk_calls >= 1,
            "the 1 MiB WRITE went in a Read chunk (v{v})"
        );
        assert!(
            carried.write_chunk_replies >= 1,
            "the 1 MiB READ came back in a Write chunk (v{v})"
        );
        c.t.cli.shutdown(10_000);
    }
    let stats = t.shutdown().expect("clean shutdown");
    let calls: u64 = stats.engines.iter().map(|(_, s)| s.calls).sum();
    let replies: u64 = stats.engines.iter().map(|(_, s)| s.replies).sum();
    assert!(calls >= 60, "engine calls: {calls}");
    assert_eq!(calls, replies, "every Call answered with an RPC reply");
    for (core, s) in &stats.engines {
        assert_eq!((s.unaccounted(0), s.unanswered()), (0, 0), "core {core}: {s:?}");
    }
}

#[test]
fn restart_keeps_unstable_writes_and_changes_the_verifier() {
    let dir = TempDir::new("target-restart");
    let data_dir = dir.0.join("data");
    let backend = serde_json::json!({ "type": "uring", "name": "b0", "path": data_dir.to_str().unwrap() });
    let (cfg, nfs, mnt) = target_config(&dir.0, backend);
    let payload = pattern(7, 300_000);

    let t = Target::start(cfg.clone()).expect("first start");
    let (root, _) = root_client(Tcp::connect(mnt)).mnt("/export").expect("MNT");
    let mut c = root_client(Tcp::connect(nfs));
    let (fh, _) = c.mkfile(&root, "kept", 0o644).expect("CREATE");
    let w = c.write(&fh, 0, &payload, UNSTABLE).expect("UNSTABLE WRITE");
    assert_eq!(w.count as usize, payload.len());
    let verf1 = w.verf;
    drop(c);
    // A clean shutdown syncs every backend: the UNSTABLE write is not lost.
    t.shutdown().expect("clean shutdown");

    let t = Target::start(cfg).expect("second start");
    let (root2, _) = root_client(Tcp::connect(mnt)).mnt("/export").expect("MNT again");
    assert_eq!(root2, root, "the export's root handle is stable across a restart");
    let mut c = root_client(Tcp::connect(nfs));
    let (fh2, a) = c.lookup(&root2, b"kept").expect("LOOKUP after restart");
    assert_eq!(fh2, fh, "file handles are stable across a restart");
    assert_eq!(a.size, payload.len() as u64);
    let (got, eof, _) = c.read(&fh2, 0, payload.len() as u32).expect("READ after restart");
    assert!(
        eof && got == payload,
        "data written UNSTABLE survived the clean restart"
    );
    let verf2 = c.commit(&fh2).expect("COMMIT");
    assert_ne!(verf1, verf2, "the write verifier changes when the target restarts");
    assert_eq!(verf2, t.shared().write_verifier());
    t.shutdown().expect("clean shutdown");
}

#[test]
fn sim_fabric_and_missing_io_core_are_refused() {
    let dir = TempDir::new("target-bad");
    let (cfg, _, _) = target_config(&dir.0, mem_backend());
    let mut v = serde_json::to_value(&cfg).unwrap();
    v["fabric"] = serde_json::json!({ "provider": "sim" });
    let sim = Config::from_json_value(&v).unwrap();
    let e = Target::start(sim).expect_err("sim is refused");
    assert!(e.to_string().contains("sim"), "{e}");
    v["fabric"] = serde_json::to_value(&cfg.fabric).unwrap();
    v["cores"] = serde_json::json!([{ "cpu": 0, "role": "admin" }]);
    if let Ok(c) = Config::from_json_value(&v) {
        let e = Target::start(c).expect_err("no io core");
        assert!(e.to_string().contains("io"), "{e}");
    }
}
