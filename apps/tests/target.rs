//! `rpcrdma-target` as a whole, started in-process with `Target::start`: the
//! NFS and MOUNT services over TCP record marking, NFS over the shm fabric
//! through the transport engine, RPC errors for unknown programs, versions
//! and procedures, graceful shutdown, and durability plus the write verifier
//! across a restart.

mod nfs4_common;
mod nfs_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

use dataplane::requester::Requester;
use dataplane::shm::{ShmConfig, ShmFabric};
use nfs_common::*;
use proto::nfs3::UNSTABLE;
use proto::ulb::Nfs3Binding;
use rpcrdma_apps::config::Config;
use rpcrdma_apps::server::Target;

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
    target_config_with(dir, backend, |_| {})
}

/// [`target_config`] with `edit` applied to the JSON first.
fn target_config_with(
    dir: &Path,
    backend: serde_json::Value,
    edit: impl FnOnce(&mut serde_json::Value),
) -> (Config, u16, u16) {
    let (nfs, mnt) = (free_port(), free_port());
    let mut v = serde_json::json!({
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
    edit(&mut v);
    (Config::from_json_value(&v).expect("target configuration"), nfs, mnt)
}

/// A client acting as root (the exports here do not squash root).
fn root_client<T: Transport>(t: T) -> Client<T> {
    let mut c = Client::new(t);
    c.auth = Auth::root();
    c
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
    let r = c.call(NFS, 5, 0, |_| {});
    assert_eq!(r.stat, RpcStat::ProgMismatch(3, 4));
    let r = c.call(NFS, 4, 0, |_| {});
    assert_eq!(r.stat, RpcStat::Success, "NULL of NFSv4");

    // NFSv4.1 on the same TCP listener (issue 22): a session, an OPEN that
    // creates, a WRITE and the READ back.
    let mut v4 = nfs4_common::V4::new(Tcp::connect(nfs), "tcp client");
    v4.setup(8);
    let dir = v4.walk("/export").expect("LOOKUP /export");
    let (sid, fh) = v4
        .open(
            &dir,
            nfs4_common::open(
                "v4-over-tcp",
                3,
                0,
                b"o",
                Some((proto::nfs4::UNCHECKED4, 0o644, [0; 8])),
            ),
        )
        .expect("OPEN");
    let data = pattern(3, 100_000);
    let (n, _, _) = v4.write(&fh, &sid, 0, proto::nfs4::FILE_SYNC4, &data).expect("WRITE");
    assert_eq!(n as usize, data.len());
    assert_eq!(v4.read(&fh, &sid, 0, 200_000).expect("READ"), (true, data));
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

/// The server closed `s`: a read sees the end of the stream or an error
/// (the hostile sockets below are never sent anything).
fn closed_by_server(s: &TcpStream) -> bool {
    let mut b = [0u8; 64];
    s.set_nonblocking(true).unwrap();
    let r = (&*s).read(&mut b);
    s.set_nonblocking(false).unwrap();
    match r {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Issue 20: 64 idle connections used to lock every new NFS-TCP and MOUNT
/// client out (accepted and reset, no RPC error), and a sender trickling one
/// byte every 100 ms held its slot for ever. Each port here gets 128
/// hostile connections, idle and slow alternately; a new client must still
/// get MNT, GETATTR and READ answered within a few seconds, before any timeout
/// could have freed a slot (room is made by closing the idlest connection),
/// and then every hostile connection is closed by the idle or the record
/// timeout.
#[test]
fn hostile_peer_tcp_idle_and_slow_connections_do_not_lock_out_a_new_client() {
    use std::time::{Duration, Instant};
    const HOSTILE_PER_PORT: usize = 128;
    const IDLE_MS: u64 = 10_000;
    const RECORD_MS: u64 = 8_000;
    let dir = TempDir::new("target-tcp-hostile");
    let (cfg, nfs, mnt) = target_config_with(&dir.0, mem_backend(), |v| {
        v["listeners"]["tcp"] = serde_json::json!({
            "max_conns": 64, "idle_timeout_ms": IDLE_MS, "record_timeout_ms": RECORD_MS,
            "write_timeout_ms": 5000, "shutdown_grace_ms": 1000
        });
    });
    let t = Target::start(cfg).expect("target starts");
    let payload = pattern(11, 4096);
    let fh = {
        let (root, _) = root_client(Tcp::connect(mnt)).mnt("/export").expect("MNT");
        let mut c = root_client(Tcp::connect(nfs));
        let (fh, _) = c.mkfile(&root, "f", 0o644).expect("CREATE");
        c.write(&fh, 0, &payload, UNSTABLE).expect("WRITE");
        fh
    };

    // Idle and slow connections, alternately, on both ports.
    let mut idle = Vec::new();
    let mut slow = Vec::new();
    for port in [mnt, nfs] {
        for i in 0..HOSTILE_PER_PORT {
            let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            if i % 2 == 0 {
                idle.push(s);
            } else {
                slow.push(s);
            }
        }
    }
    // One byte every 100 ms on each slow connection: the mark of a 256-byte
    // record, then its body (26 s in all, far longer than the record timeout).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeder = {
        let socks: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let record = [&0x8000_0100u32.to_be_bytes()[..], &[0u8; 256][..]].concat();
            for b in record.iter().cycle() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                for mut s in &socks {
                    let _ = s.write(std::slice::from_ref(b));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let before = t.tcp_counts();
    assert_eq!(
        before.idle_timeouts + before.record_timeouts,
        0,
        "no timeout yet: {before:?}"
    );

    let t0 = Instant::now();
    let (root, _) = root_client(Tcp::connect(mnt))
        .mnt("/export")
        .expect("MNT with 128 hostile connections held");
    let mut c = root_client(Tcp::connect(nfs));
    assert_eq!(c.getattr(&fh).expect("GETATTR").size, payload.len() as u64);
    let (got, _, _) = c.read(&fh, 0, payload.len() as u32).expect("READ");
    assert_eq!(got, payload);
    let served = t0.elapsed();
    drop(c);
    let _ = root;
    eprintln!(
        "new client served (MNT, GETATTR, READ) in {served:?} with {} hostile connections per port",
        HOSTILE_PER_PORT
    );
    let during = t.tcp_counts();
    // Room was made by evicting, not by a timeout: none had fired when the
    // new client had been served (judged by the counters, not the clock: a
    // loaded host once took 4.2 s to serve it, all by eviction).
    assert_eq!(
        during.idle_timeouts + during.record_timeouts,
        0,
        "the new client waited {served:?} for a timeout: room was not made by evicting: {during:?}"
    );
    assert!(
        served < Duration::from_millis(RECORD_MS),
        "the new client waited {served:?}"
    );
    assert!(
        during.conns_evicted >= 2 * (HOSTILE_PER_PORT as u64 + 1 - 64),
        "idlest connections evicted: {during:?}"
    );
    assert_eq!(during.conns_refused, 0, "{during:?}");

    // The hostile connections still open go on the idle or record timeout.
    let deadline = Instant::now() + Duration::from_millis(IDLE_MS + 10_000);
    let open = |v: &[TcpStream]| v.iter().filter(|s| !closed_by_server(s)).count();
    while (open(&idle) > 0 || open(&slow) > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let left = (open(&idle), open(&slow));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    feeder.join().unwrap();
    assert_eq!(left, (0, 0), "(idle, slow) hostile connections still open");
    let stats = t.shutdown().expect("clean shutdown");
    eprintln!("TCP counters: {:?}", stats.tcp);
    assert!(stats.tcp.idle_timeouts >= 1, "{:?}", stats.tcp);
    assert!(stats.tcp.record_timeouts >= 1, "{:?}", stats.tcp);
}

/// Issue 20: shutdown used to wait for every TCP connection thread, so a
/// client that stopped in the middle of a record held it for ever, with the
/// backends not yet synced. Now the backends are synced first and stalled
/// connections are closed after the grace: shutdown ends within the grace
/// plus a margin, and the data written UNSTABLE before is still there after
/// a restart.
#[test]
fn hostile_peer_tcp_stalled_client_does_not_hold_shutdown() {
    use std::time::{Duration, Instant};
    const GRACE_MS: u64 = 1500;
    let dir = TempDir::new("target-tcp-stalled");
    let data_dir = dir.0.join("data");
    let backend = serde_json::json!({ "type": "uring", "name": "b0", "path": data_dir.to_str().unwrap() });
    let (cfg, nfs, mnt) = target_config_with(&dir.0, backend, |v| {
        // Record and idle timeouts far beyond the test, so that only the
        // shutdown grace can end the stalled connection.
        v["listeners"]["tcp"] = serde_json::json!({
            "shutdown_grace_ms": GRACE_MS, "record_timeout_ms": 600_000, "idle_timeout_ms": 600_000
        });
    });
    let payload = pattern(13, 200_000);
    let t = Target::start(cfg.clone()).expect("first start");
    let (root, _) = root_client(Tcp::connect(mnt)).mnt("/export").expect("MNT");
    let mut c = root_client(Tcp::connect(nfs));
    let (fh, _) = c.mkfile(&root, "stalled", 0o644).expect("CREATE");
    let w = c.write(&fh, 0, &payload, UNSTABLE).expect("UNSTABLE WRITE");
    assert_eq!(w.count as usize, payload.len());

    // Half a record: a mark for 1000 bytes, then 500 of them, then nothing.
    let mut stalled = TcpStream::connect(("127.0.0.1", nfs)).unwrap();
    stalled.write_all(&(0x8000_0000u32 | 1000).to_be_bytes()).unwrap();
    stalled.write_all(&[0u8; 500]).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let t0 = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(t.shutdown());
    });
    let limit = Duration::from_millis(GRACE_MS + 10_000);
    let stats = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("shutdown still waiting for the stalled client after {limit:?}"))
        .expect("clean shutdown");
    let took = t0.elapsed();
    eprintln!("shutdown with a client stalled mid-record took {took:?} (grace {GRACE_MS} ms)");
    // Only the grace ended the stalled connection (the other timeouts are
    // ten minutes): the receive above would have timed out otherwise.
    assert!(
        took >= Duration::from_millis(GRACE_MS),
        "shutdown took {took:?}, less than the grace"
    );
    assert_eq!(stats.tcp.closed_at_shutdown, 1, "{:?}", stats.tcp);
    drop((c, stalled));

    let t = Target::start(cfg).expect("second start");
    let (root2, _) = root_client(Tcp::connect(mnt)).mnt("/export").expect("MNT again");
    let mut c = root_client(Tcp::connect(nfs));
    let (fh2, _) = c.lookup(&root2, b"stalled").expect("LOOKUP after restart");
    let (got, eof, _) = c.read(&fh2, 0, payload.len() as u32).expect("READ after restart");
    assert!(eof && got == payload, "data written UNSTABLE survived the shutdown");
    t.shutdown().expect("clean shutdown");
}

/// Issue 20: a client that sends Calls and stops reading their replies held
/// its connection thread (and shutdown) in `write_all` for ever. Pipelined
/// 1 MiB READs fill the socket buffers; the reply write gives up after the
/// write timeout and the connection is closed.
#[test]
fn hostile_peer_tcp_client_that_stops_reading_is_closed() {
    use std::time::{Duration, Instant};
    const WRITE_MS: u64 = 1000;
    let dir = TempDir::new("target-tcp-noread");
    let (cfg, nfs, mnt) = target_config_with(&dir.0, mem_backend(), |v| {
        v["listeners"]["tcp"] = serde_json::json!({ "write_timeout_ms": WRITE_MS });
    });
    let t = Target::start(cfg).expect("target starts");
    let (root, _) = root_client(Tcp::connect(mnt)).mnt("/export").expect("MNT");
    let mut c = root_client(Tcp::connect(nfs));
    let (fh, _) = c.mkfile(&root, "big", 0o644).expect("CREATE");
    let mib = 1 << 20;
    c.write(&fh, 0, &pattern(5, mib), UNSTABLE).expect("WRITE");
    drop(c);

    let mut s = TcpStream::connect(("127.0.0.1", nfs)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let auth = Auth::root();
    let t0 = Instant::now();
    // Far more reply bytes than loopback socket buffers hold; stop writing
    // once the server has stopped reading (its thread blocked in the reply).
    for xid in 1..=64u32 {
        let mut e = call_header(xid, NFS, 3, 6, &auth);
        e.opaque(&fh).u64(0).u32(mib as u32);
        let mark = (0x8000_0000u32 | e.b.len() as u32).to_be_bytes();
        if s.write_all(&mark).and_then(|_| s.write_all(&e.b)).is_err() {
            break;
        }
    }
    let deadline = Instant::now() + Duration::from_millis(WRITE_MS + 10_000);
    while t.tcp_counts().write_timeouts == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let counts = t.tcp_counts();
    eprintln!("non-reading client closed after {:?}: {counts:?}", t0.elapsed());
    assert_eq!(counts.write_timeouts, 1, "{counts:?}");
    let t1 = Instant::now();
    let stats = t.shutdown().expect("clean shutdown");
    assert_eq!(stats.tcp.closed_at_shutdown, 0, "{:?}", stats.tcp);
    assert!(
        t1.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        t1.elapsed()
    );
    drop(s);
}

#[test]
fn tcp_connection_is_accepted_when_it_arrives() {
    use std::time::{Duration, Instant};
    // issue 24 item 5: the accept loop slept 50 ms whenever nothing was
    // pending, so a new client (every mount) waited 25 ms on average for its
    // first reply. Now the loop blocks until the connection arrives.
    let dir = TempDir::new("target-tcp-accept");
    let (cfg, nfs, _mnt) = target_config(&dir.0, mem_backend());
    let t = Target::start(cfg).expect("target starts");
    // The median of 21 first replies is under 10 ms when the accept is
    // prompt. With a 50 ms sleep in the loop each first reply waits a
    // uniform 0-50 ms, and a median under 10 ms needs 11 of 21 to land in
    // the first fifth (p < 0.001). Up to three batches, so that a host
    // whose scheduler stalls the test for a moment does not fail it; the
    // regression fails all three (p < 0.003 of missing it).
    let mut batches = Vec::new();
    for _ in 0..3 {
        let mut firsts = Vec::new();
        for _ in 0..21 {
            // Let the accept loop go back to waiting.
            std::thread::sleep(Duration::from_millis(20));
            let at = Instant::now();
            let mut c = root_client(Tcp::connect(nfs));
            let r = c.call(NFS, 3, 0, |_| {});
            assert_eq!(r.stat, RpcStat::Success, "NULL");
            firsts.push(at.elapsed());
        }
        firsts.sort();
        let median = firsts[firsts.len() / 2];
        batches.push(firsts);
        if median < Duration::from_millis(10) {
            break;
        }
    }
    t.shutdown().expect("clean shutdown");
    let last = batches.last().unwrap();
    assert!(
        last[last.len() / 2] < Duration::from_millis(10),
        "first replies, by batch: {batches:?}"
    );
}

// Beside the binary's other tests this once failed about one run in three at
// `connect` ("Failed" after the client's 5 s time-out): the core's re-check
// after arming accepted the client's socket before its REQ arrived and then
// blocked for a whole wait (10 s here) with nothing watching that socket.
// The shm fabric now rings its own doorbell when it accepts a socket (unit
// test `spin_then_wait_accept_during_recheck_keeps_the_core_awake`).
#[test]
fn shm_engine_wakes_for_every_call_under_spin_then_wait() {
    // issue 24 item 1: the io core blocks in its epoll between Calls (spin
    // time 0, waits of up to 10 s); every Call's Send must ring the shm
    // doorbell when the core sleeps, or the reply comes a wait later.
    use std::time::{Duration, Instant};
    let dir = TempDir::new("target-shm-wait");
    let (cfg, _, _) = target_config_with(&dir.0, mem_backend(), |v| {
        v["reactor"]["idle"] = serde_json::json!({
            "policy": "spin_then_wait", "spin_us": 0, "max_spin_us": 0, "max_wait_ms": 10000, "fallback_sleep_us": 100
        });
    });
    let addr = dir.0.join("fabric.sock").to_str().unwrap().to_string();
    let t = Target::start(cfg).expect("target starts");
    let p = pools(16);
    let fab = ShmFabric::new(ShmConfig::default()).unwrap();
    let mut cli = Requester::new(requester_cfg(&p, versions(1), 16), fab, p.pool, &p.regions, 1).unwrap();
    cli.connect(&addr).unwrap();
    let mut e = Engine {
        cli,
        srv: None,
        net: None,
        binding: Nfs3Binding::new(MIB as u32),
        carried: Carried::default(),
    };
    e.connect();
    let mut c = root_client(e);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let rounds = 400;
    let t0 = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Gaps of 0 to 2 ms: the core is spinning, arming or blocked.
        let gap = Duration::from_micros(x % 2000);
        let until = Instant::now() + gap;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        let at = Instant::now();
        let r = c.call(NFS, 3, 0, |_| {});
        assert_eq!(r.stat, RpcStat::Success, "NULL {i}");
        slowest = slowest.max(at.elapsed());
    }
    let took = t0.elapsed();
    c.t.cli.shutdown(10_000);
    let stats = t.shutdown().expect("clean shutdown");
    let sleeps: u64 = stats.cores.iter().map(|s| s.sleeps).sum();
    assert!(
        sleeps >= rounds / 4,
        "the cores blocked only {sleeps} times in {rounds} Calls"
    );
    // A lost wake-up costs a whole wait (10 s).
    assert!(slowest < Duration::from_secs(2), "slowest NULL took {slowest:?}");
    assert!(took < Duration::from_secs(20), "{rounds} NULLs took {took:?}");
}
