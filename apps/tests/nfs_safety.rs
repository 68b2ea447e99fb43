//! NFS that answers once and keeps what it acknowledged: the duplicate
//! request cache (a retransmitted REMOVE, RENAME, MKDIR or RMDIR gets the
//! first reply again, on the Direct transport, over the shm engine after a
//! reconnect and over TCP on a new connection), the write verifier after a
//! write-back error, and directories made in set-group-ID directories.

mod nfs_common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::fabric::Fabric;
use dataplane::requester::Requester;
use dataplane::responder::Responder;
use dataplane::shm::{ShmConfig, ShmFabric};
use nfs_common::*;
use proto::nfs3::{FILE_SYNC, UNSTABLE};
use proto::ulb::Nfs3Binding;
use rpcrdma_apps::backend::{
    Attr, Backend, CreateHow, DirEntry, FileHandle, FsError, FsResult, FsStat, IoChannel, IoDesc, IoDone, IoOp,
    NodeKind, Owner, SetAttr, Stable,
};
use rpcrdma_apps::config::Config;
use rpcrdma_apps::nfs::drc::DRC_ENTRIES;
use rpcrdma_apps::nfs::NfsService;
use rpcrdma_apps::server::Target;

const REMOVE: u32 = 12;
const RMDIR: u32 = 13;
const RENAME: u32 = 14;
const MKDIR: u32 = 9;
const NOENT: u32 = 2;
const EXIST: u32 = 17;

fn export_shared(s: &Store) -> std::sync::Arc<rpcrdma_apps::nfs::NfsShared> {
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    shared(&[s], &[ex], DATA_BUF_BYTES as u32)
}

fn root_direct(sh: &std::sync::Arc<rpcrdma_apps::nfs::NfsShared>) -> Client<Direct> {
    let mut c = Client::new(Direct::new(sh));
    c.auth = Auth::root();
    c
}

/// An encoded NFSv3 Call as root with the given XID.
fn nfs_call(xid: u32, proc_: u32, args: impl FnOnce(&mut Enc)) -> Vec<u8> {
    let mut e = call_header(xid, NFS, 3, proc_, &Auth::root());
    args(&mut e);
    e.b
}

fn remove_call(xid: u32, dir: &[u8], name: &str) -> Vec<u8> {
    nfs_call(xid, REMOVE, |e| {
        e.dirop(dir, name.as_bytes());
    })
}

fn rmdir_call(xid: u32, dir: &[u8], name: &str) -> Vec<u8> {
    nfs_call(xid, RMDIR, |e| {
        e.dirop(dir, name.as_bytes());
    })
}

fn rename_call(xid: u32, dir: &[u8], from: &str, to: &str) -> Vec<u8> {
    nfs_call(xid, RENAME, |e| {
        e.dirop(dir, from.as_bytes()).dirop(dir, to.as_bytes());
    })
}

fn mkdir_call(xid: u32, dir: &[u8], name: &str) -> Vec<u8> {
    nfs_call(xid, MKDIR, |e| {
        e.dirop(dir, name.as_bytes()).sattr(&mode_attr(0o755));
    })
}

/// The `nfsstat3` of a reply (the first word of the results).
fn status(reply: &[u8]) -> u32 {
    Reply::parse(reply).dec().u32()
}

/// Root handle, and in it a file `f`, a file `r1` and a directory `d`.
fn populate<T: Transport>(c: &mut Client<T>, tag: &str) -> Vec<u8> {
    let (root, _) = c.mnt("/export").expect("MNT");
    c.mkfile(&root, &format!("f{tag}"), 0o644).expect("CREATE f");
    c.mkfile(&root, &format!("r1{tag}"), 0o644).expect("CREATE r1");
    c.mkdir(&root, &format!("d{tag}"), 0o755).expect("MKDIR d");
    root
}

/// The four non-idempotent Calls of the retransmit tests, on what
/// [`populate`] made, with XIDs from `xid`.
fn four_calls(root: &[u8], tag: &str, xid: u32) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("REMOVE", remove_call(xid, root, &format!("f{tag}"))),
        (
            "RENAME",
            rename_call(xid + 1, root, &format!("r1{tag}"), &format!("r2{tag}")),
        ),
        ("MKDIR", mkdir_call(xid + 2, root, &format!("m{tag}"))),
        ("RMDIR", rmdir_call(xid + 3, root, &format!("d{tag}"))),
    ]
}

#[test]
fn nfs_safety_direct_retransmit_gets_the_first_reply() {
    for k in KINDS {
        let s = store(k, "b0");
        let sh = export_shared(&s);
        let mut c = root_direct(&sh);
        let root = populate(&mut c, "");
        for (what, call) in four_calls(&root, "", 5000) {
            let first = c.t.roundtrip(&call).expect("answered");
            assert_eq!(status(&first), 0, "{k:?} {what}");
            // The same Call again (same XID, same bytes), as a client resends
            // it when the reply was lost.
            let again = c.t.roundtrip(&call).expect("answered");
            assert_eq!(status(&again), 0, "{k:?} {what} retransmit runs once");
            assert_eq!(again, first, "{k:?} {what}: the very reply the first Call got");
        }
        // The procedures really ran once: r2 and m exist, f, r1 and d do not.
        assert!(c.lookup(&root, b"r2").is_ok() && c.lookup(&root, b"m").is_ok());
        for gone in [&b"f"[..], b"r1", b"d"] {
            assert_eq!(c.lookup(&root, gone).unwrap_err(), NOENT);
        }
        let (st, _, _) = c.t.svc.reply_cache_stats();
        assert_eq!(
            (st.hits, st.inserts),
            (4, 4 + 3),
            "{k:?}: populate's CREATEs and MKDIR are kept too"
        );
    }
}

#[test]
fn nfs_safety_direct_other_xid_or_client_is_not_served_from_the_cache() {
    let s = store(Kind::Mem, "b0");
    let sh = export_shared(&s);
    let mut c = root_direct(&sh);
    let (root, _) = c.mnt("/export").expect("MNT");
    let call = mkdir_call(7000, &root, "x");
    let first = c.t.roundtrip(&call).unwrap();
    assert_eq!(status(&first), 0);
    assert_eq!(
        c.t.roundtrip(&call).unwrap(),
        first,
        "a retransmit is served from the cache"
    );
    // Another XID with the same arguments is a new Call: it runs, and fails.
    assert_eq!(status(&c.t.roundtrip(&mkdir_call(7001, &root, "x")).unwrap()), EXIST);
    // The same XID and bytes from another client address is another Call too.
    c.t.peer = Some("127.0.0.2".parse().unwrap());
    assert_eq!(status(&c.t.roundtrip(&call).unwrap()), EXIST);
    // The same XID from the same client with other arguments: not the cached reply.
    c.t.peer = Some("127.0.0.1".parse().unwrap());
    assert_eq!(status(&c.t.roundtrip(&mkdir_call(7000, &root, "y")).unwrap()), 0);
    assert!(c.lookup(&root, b"y").is_ok());
}

#[test]
fn nfs_safety_direct_full_cache_evicts_and_stays_bounded() {
    let s = store(Kind::Mem, "b0");
    let sh = export_shared(&s);
    let mut c = root_direct(&sh);
    let (root, _) = c.mnt("/export").expect("MNT");
    let n = DRC_ENTRIES + 100;
    let calls: Vec<Vec<u8>> = (0..n)
        .map(|i| mkdir_call(10_000 + i as u32, &root, &format!("e{i}")))
        .collect();
    for call in &calls {
        assert_eq!(status(&c.t.roundtrip(call).unwrap()), 0);
    }
    let (st, used, cap) = c.t.svc.reply_cache_stats();
    assert_eq!(cap, DRC_ENTRIES);
    assert!(used <= cap, "{used} entries in a cache of {cap}");
    assert!(st.evictions >= 100, "{st:?}");
    // The newest is still kept; the oldest was evicted, so resending it runs
    // MKDIR again (as without a cache).
    assert_eq!(status(&c.t.roundtrip(&calls[n - 1]).unwrap()), 0, "newest kept");
    assert_eq!(status(&c.t.roundtrip(&calls[0]).unwrap()), EXIST, "oldest evicted");
    let (_, used, _) = c.t.svc.reply_cache_stats();
    assert!(used <= DRC_ENTRIES);
}

// ---------------------------------------------------------------------------
// shm: the retransmit comes on a new connection from a new requester
// ---------------------------------------------------------------------------

const CREDITS: u32 = 4;

fn shm_client(p: &Pools, addr: &str, v: u32) -> Engine<ShmFabric> {
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

/// Polls the responder until it holds no connection (at most 10 s).
fn wait_until_no_connections<F: Fabric>(srv: &mut Responder<'static, F, NfsService>) {
    let t0 = Instant::now();
    while srv.connections() > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the responder still holds {} connection(s)",
            srv.connections()
        );
        srv.poll();
    }
}

#[test]
fn nfs_safety_shm_retransmit_after_reconnect_gets_the_first_reply() {
    let s = store(Kind::Mem, "b0");
    let sh = export_shared(&s);
    let p = pools(CREDITS);
    let addr = format!("@rpcrdma-nfs-safety-{}", std::process::id());
    let fab = ShmFabric::new(ShmConfig::default()).unwrap();
    let mut srv = Some(responder(&p, &sh, fab, CREDITS, &addr));
    // Set-up through another service of the same shared state.
    let mut d = root_direct(&sh);
    for v in [1u32, 2] {
        let tag = format!("v{v}");
        let root = populate(&mut d, &tag);
        for (what, call) in four_calls(&root, &tag, 1) {
            // Each connection's first Call: a new requester numbers its
            // Calls from the same start, so the resent Call carries the XID
            // the first one had, as a client's retransmit does.
            let mut replies = Vec::new();
            for _ in 0..2 {
                let mut e = shm_client(&p, &addr, v);
                e.srv = srv.take();
                e.connect();
                e.submit_call(&call);
                let pp = call_prog_proc(&call);
                let (_, reply) = e.next_reply(|_| pp);
                replies.push(reply);
                assert_eq!(e.cli.shutdown(100_000), 0);
                srv = e.srv.take();
                // The responder takes one connection (`max_conns: 1`): let it
                // see this one go before the next requester connects, or the
                // reconnect is refused while the old one is still held.
                wait_until_no_connections(srv.as_mut().unwrap());
            }
            assert_eq!(
                replies[0][..4],
                replies[1][..4],
                "v{v} {what}: same XID on both connections"
            );
            assert_eq!(status(&replies[0]), 0, "v{v} {what}");
            assert_eq!(
                status(&replies[1]),
                0,
                "v{v} {what}: the retransmit after a reconnect runs once"
            );
            assert_eq!(replies[0], replies[1], "v{v} {what}");
        }
    }
    let mut srv = srv.unwrap();
    wait_until_no_connections(&mut srv);
    assert_eq!(srv.shutdown(100_000), Default::default());
    assert_eq!(srv.service().reply_cache_stats().0.hits, 8);
}

// ---------------------------------------------------------------------------
// TCP: the retransmit comes on a new connection to the target
// ---------------------------------------------------------------------------

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A two-core target on the shm fabric in `dir` with TCP services, exporting
/// `/export` from a `mem` backend.
fn target_config(dir: &Path) -> (Config, u16, u16) {
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
        "backends": [{ "type": "mem", "name": "b0", "size_bytes": 64 << 20 }],
        "exports": [{ "path": "/export", "backend": "b0", "clients": ["127.0.0.0/8"],
                      "read_only": false, "root_squash": false }],
    });
    (Config::from_json_value(&v).expect("target configuration"), nfs, mnt)
}

#[test]
fn nfs_safety_tcp_retransmit_on_a_new_connection_gets_the_first_reply() {
    let dir = TempDir::new("safety-tcp");
    let (cfg, nfs, mnt) = target_config(&dir.0);
    let t = Target::start(cfg).expect("target starts");
    let (root, _) = {
        let mut m = Client::new(Tcp::connect(mnt));
        m.auth = Auth::root();
        m.mnt("/export").expect("MNT")
    };
    let mut c = Client::new(Tcp::connect(nfs));
    c.auth = Auth::root();
    c.mkfile(&root, "f", 0o644).expect("CREATE f");
    c.mkfile(&root, "r1", 0o644).expect("CREATE r1");
    c.mkdir(&root, "d", 0o755).expect("MKDIR d");
    drop(c);
    for (what, call) in four_calls(&root, "", 0x7700) {
        let first = Tcp::connect(nfs).roundtrip(&call).expect("answered");
        assert_eq!(status(&first), 0, "{what}");
        // The connection is gone; the client reconnects and resends.
        let again = Tcp::connect(nfs).roundtrip(&call).expect("answered");
        assert_eq!(
            status(&again),
            0,
            "{what}: the retransmit on a new connection runs once"
        );
        assert_eq!(again, first, "{what}");
    }
    t.shutdown().expect("clean shutdown");
}

// ---------------------------------------------------------------------------
// The write verifier after a write-back error
// ---------------------------------------------------------------------------

/// A backend whose flushes (and stable writes) fail with EIO while `fail` is
/// set, as a disk's write-back error shows through fsync. Test-only: the
/// switch is in the test's hands, no client can reach it.
#[derive(Debug)]
struct FailingSync {
    inner: Arc<dyn Backend>,
    fail: Arc<AtomicBool>,
}

#[derive(Debug)]
struct FailingChannel {
    inner: Box<dyn IoChannel>,
    fail: Arc<AtomicBool>,
}

impl FailingChannel {
    fn fails(&self, io: &IoDesc) -> bool {
        let syncs = matches!(io.op, IoOp::Flush | IoOp::Write(Stable::DataSync | Stable::FileSync));
        syncs && self.fail.load(Ordering::Relaxed)
    }
}

impl IoChannel for FailingChannel {
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()> {
        if self.fails(&io) {
            return Err(FsError::Io);
        }
        // SAFETY: the caller's guarantee, passed on unchanged.
        unsafe { self.inner.submit(io) }
    }
    fn poll(&mut self, out: &mut [IoDone]) -> usize {
        self.inner.poll(out)
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
    fn completes_later(&self) -> bool {
        self.inner.completes_later()
    }
    unsafe fn io_now(&mut self, io: &IoDesc) -> Option<IoDone> {
        if self.fails(io) {
            return Some(IoDone {
                tag: io.tag,
                result: Err(FsError::Io),
                ..IoDone::default()
            });
        }
        // SAFETY: the caller's guarantee, passed on unchanged.
        unsafe { self.inner.io_now(io) }
    }
}

impl Backend for FailingSync {
    forward_backend_namespace!();
    fn commit(&self, fh: &FileHandle) -> FsResult<()> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(FsError::Io);
        }
        self.inner.commit(fh)
    }
    fn sync_all(&self) -> FsResult<()> {
        self.inner.sync_all()
    }
    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
        Ok(Box::new(FailingChannel {
            inner: self.inner.open_channel(core)?,
            fail: self.fail.clone(),
        }))
    }
}

#[test]
fn nfs_safety_write_verifier_changes_after_writeback_error() {
    for k in KINDS {
        let inner = store(k, "b0");
        let fail = Arc::new(AtomicBool::new(false));
        let s = Store {
            kind: k,
            backend: Arc::new(FailingSync {
                inner: inner.backend.clone(),
                fail: fail.clone(),
            }),
            dir: None,
        };
        let sh = export_shared(&s);
        let mut c = root_direct(&sh);
        let (root, _) = c.mnt("/export").expect("MNT");
        let (fh, _) = c.mkfile(&root, "data", 0o644).expect("CREATE");
        let v1 = c.write(&fh, 0, &pattern(1, 8192), UNSTABLE).expect("WRITE").verf;
        assert_eq!(c.commit(&fh).expect("COMMIT"), v1, "{k:?}");

        // An UNSTABLE WRITE, then a COMMIT whose flush fails: the data may
        // be lost, so the verifier must change and the client resend it.
        assert_eq!(c.write(&fh, 8192, &pattern(2, 8192), UNSTABLE).expect("WRITE").verf, v1);
        fail.store(true, Ordering::Relaxed);
        assert_eq!(c.commit(&fh).unwrap_err(), 5, "{k:?}: NFS3ERR_IO");
        fail.store(false, Ordering::Relaxed);
        let v2 = c.commit(&fh).expect("COMMIT after the error");
        assert_ne!(v2, v1, "{k:?}: COMMIT after a failed write-back carries a new verifier");
        assert_eq!(c.write(&fh, 0, &pattern(3, 100), UNSTABLE).expect("WRITE").verf, v2);
        assert_eq!(sh.write_verifier(), v2);

        // A FILE_SYNC WRITE whose flush fails does the same.
        fail.store(true, Ordering::Relaxed);
        assert_eq!(c.write(&fh, 0, &pattern(4, 100), FILE_SYNC).unwrap_err(), 5, "{k:?}");
        fail.store(false, Ordering::Relaxed);
        let v3 = c.commit(&fh).expect("COMMIT");
        assert!(
            v3 != v2 && v3 != v1,
            "{k:?}: a failed FILE_SYNC WRITE changes the verifier"
        );
        assert_eq!(sh.writeback_errors(), 2);
        drop(inner);
    }
}

// ---------------------------------------------------------------------------
// Set-group-ID directories
// ---------------------------------------------------------------------------

#[test]
fn nfs_safety_mkdir_in_setgid_dir_inherits() {
    for k in KINDS {
        let s = store(k, "b0");
        let sh = export_shared(&s);
        let mut c = root_direct(&sh);
        let (root, _) = c.mnt("/export").expect("MNT");
        let (sg, _) = c.mkdir(&root, "shared", 0o755).expect("MKDIR");
        let set = SetAttr {
            mode: Some(0o2775),
            gid: Some(4242),
            ..SetAttr::default()
        };
        assert_eq!(c.setattr(&sg, &set, None).0, 0, "{k:?}");
        assert_eq!(c.getattr(&sg).unwrap().mode & 0o7777, 0o2775, "{k:?}");
        // Root (group 0) makes a directory and a file inside: both take the
        // directory's group, and the directory keeps the set-group-ID bit, as
        // on a local file system.
        let (_, a) = c.mkdir(&sg, "sub", 0o750).expect("MKDIR inside");
        assert_eq!(a.gid, 4242, "{k:?}: the new directory takes the group");
        assert_eq!(a.mode & 0o7777, 0o2750, "{k:?}: the new directory is set-group-ID");
        let (_, f) = c.mkfile(&sg, "file", 0o640).expect("CREATE inside");
        assert_eq!(f.gid, 4242, "{k:?}: a new file takes the group");
        assert_eq!(f.mode & 0o7777, 0o640, "{k:?}");
        // Outside such a directory nothing changes.
        let (_, a) = c.mkdir(&root, "plain", 0o750).expect("MKDIR");
        assert_eq!((a.gid, a.mode & 0o7777), (0, 0o750), "{k:?}");
    }
}
