//! End to end of `read`, `write` and `mixed` with `--verify` over the shm
//! fabric against a small in-process NFSv3 service (one file in one
//! directory, in memory) and a MOUNT server over TCP written here. The real
//! target (rpcrdma-target) is exercised by e2e_target.rs; this test pins down
//! perf's own side: MOUNT, LOOKUP/CREATE, the fill, DDP through Read and
//! Write chunks and without them, and that a corrupted READ is caught.

use std::collections::HashMap;
use std::io::Write as _;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dataplane::responder::{Responder, ResponderConfig};
use dataplane::service::{CallView, ReplyBuilder, Service, ServiceError};
use dataplane::shm::{ShmConfig, ShmFabric};
use mempool::pool::{Mempool, PoolPlan};
use mempool::region::RegionConfig;
use perf::engine::{OpKind, ShmMaker};
use perf::run::{self, Auth, FabricKind, Mode, NfsOptions, RunConfig};
use perf::tcp::{read_record, MountTarget};
use proto::header::Limits;
use proto::negotiate::VersionRange;
use proto::nfs3::{self, Read3Args, Write3Args, NFS3ERR_NOENT, NFS3_OK};
use proto::rpc::{encode_reply_header, CallHeader, OpaqueAuth, RecordMark, ReplyHeader, AUTH_SYS};
use proto::xdr::{Reader, Writer};

const ROOT: [u8; 8] = [1; 8];
const FILE: [u8; 8] = [2; 8];
const MAX_IO: u32 = 64 * 1024;

/// One directory holding files by name; the file handle of every file is
/// `FILE` (the tests use one file).
#[derive(Default)]
struct MockNfs {
    files: HashMap<Vec<u8>, Vec<u8>>,
    /// Flip a bit in every READ reply's data.
    corrupt: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
}

fn fattr(w: &mut Writer<'_>, ftype: u32, size: u64) -> Result<(), proto::EncodeError> {
    for v in [ftype, 0o644, 1, 0, 0] {
        w.put_u32(v)?;
    }
    w.put_u64(size)?;
    w.put_u64(size)?;
    for _ in 0..2 + 2 + 2 + 6 {
        w.put_u32(0)?;
    }
    Ok(())
}

fn drop_on<T, E>(r: Result<T, E>) -> Result<T, ServiceError> {
    r.map_err(|_| ServiceError::Reject)
}

impl MockNfs {
    fn file(&mut self) -> Option<&mut Vec<u8>> {
        self.files.values_mut().next()
    }
}

impl Service for MockNfs {
    fn reply_data_hint(&mut self, call: &CallView<'_>) -> usize {
        match CallHeader::decode(call.head()) {
            Ok((h, at)) if h.proc_ == nfs3::NFSPROC3_READ => {
                Read3Args::decode(&mut Reader::new(&call.head()[at..])).map_or(0, |a| a.count.min(MAX_IO) as usize)
            }
            _ => 0,
        }
    }

    fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
        let mut msg = vec![0u8; call.len()];
        call.copy_to(&mut msg);
        let (h, at) = drop_on(CallHeader::decode(&msg))?;
        if h.prog != nfs3::NFS_PROGRAM || h.proc_ != 0 && h.cred.flavor != AUTH_SYS {
            return Err(ServiceError::Reject);
        }
        let mut r = Reader::new(&msg[at..]);
        let mut data: Option<Vec<u8>> = None;
        let head_len = {
            let mut w = Writer::new(reply.head_mut());
            drop_on(encode_reply_header(
                &mut w,
                &ReplyHeader::success(h.xid, OpaqueAuth::NONE),
            ))?;
            match h.proc_ {
                nfs3::NFSPROC3_NULL => {}
                nfs3::NFSPROC3_LOOKUP | nfs3::NFSPROC3_CREATE => {
                    let dir = drop_on(nfs3::nfs_fh3(&mut r, "dir"))?.to_vec();
                    let name = drop_on(nfs3::filename3(&mut r, "name"))?.to_vec();
                    if dir != ROOT {
                        return Err(ServiceError::Reject);
                    }
                    if h.proc_ == nfs3::NFSPROC3_CREATE {
                        self.files.entry(name.clone()).or_default();
                    }
                    match self.files.get(&name) {
                        Some(f) if h.proc_ == nfs3::NFSPROC3_LOOKUP => {
                            drop_on(w.put_u32(NFS3_OK))?;
                            drop_on(w.put_opaque_var(&FILE))?;
                            drop_on(w.put_u32(1))?;
                            drop_on(fattr(&mut w, 1, f.len() as u64))?;
                            drop_on(w.put_u32(0))?;
                        }
                        Some(_) => {
                            // CREATE: handle follows, no attributes, empty wcc.
                            drop_on(w.put_u32(NFS3_OK))?;
                            drop_on(w.put_u32(1))?;
                            drop_on(w.put_opaque_var(&FILE))?;
                            for _ in 0..3 {
                                drop_on(w.put_u32(0))?;
                            }
                        }
                        None => {
                            drop_on(w.put_u32(NFS3ERR_NOENT))?;
                            drop_on(w.put_u32(0))?;
                        }
                    }
                }
                nfs3::NFSPROC3_WRITE => {
                    let a = drop_on(Write3Args::decode(&mut r, MAX_IO))?;
                    let off = a.offset as usize;
                    let d = a.data.data.to_vec();
                    let f = self.file().ok_or(ServiceError::Reject)?;
                    if f.len() < off + d.len() {
                        f.resize(off + d.len(), 0);
                    }
                    f[off..off + d.len()].copy_from_slice(&d);
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    for v in [NFS3_OK, 0, 0, a.count, nfs3::FILE_SYNC, 7, 7] {
                        drop_on(w.put_u32(v))?;
                    }
                }
                nfs3::NFSPROC3_READ => {
                    let a = drop_on(Read3Args::decode(&mut r))?;
                    let corrupt = self.corrupt.load(Ordering::Relaxed);
                    let f = self.file().ok_or(ServiceError::Reject)?;
                    let start = (a.offset as usize).min(f.len());
                    let end = (start + a.count.min(MAX_IO) as usize).min(f.len());
                    let mut d = f[start..end].to_vec();
                    if corrupt && !d.is_empty() {
                        d[0] ^= 1;
                    }
                    for v in [NFS3_OK, 0, d.len() as u32, u32::from(end == f.len()), d.len() as u32] {
                        drop_on(w.put_u32(v))?;
                    }
                    data = Some(d);
                    self.reads.fetch_add(1, Ordering::Relaxed);
                }
                _ => return Err(ServiceError::Reject),
            }
            w.len()
        };
        reply.set_head_len(head_len);
        if let Some(d) = data {
            let buf = reply.data_mut().ok_or(ServiceError::Reject)?;
            buf.get_mut(..d.len()).ok_or(ServiceError::Reject)?.copy_from_slice(&d);
            reply.set_data(d.len(), true);
        }
        Ok(())
    }
}

/// MOUNT v3 over TCP: MNT of "/export" returns `ROOT`, anything else NOENT;
/// UMNT succeeds.
fn mount_server(stop: Arc<AtomicBool>) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut s, _)) = l.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            s.set_nonblocking(false).unwrap();
            let Ok(call) = read_record(&mut s) else { continue };
            let (h, at) = CallHeader::decode(&call).unwrap();
            let mut out = vec![0u8; 256];
            let mut w = Writer::new(&mut out);
            encode_reply_header(&mut w, &ReplyHeader::success(h.xid, OpaqueAuth::NONE)).unwrap();
            if h.proc_ == nfs3::MOUNTPROC3_MNT {
                let path = Reader::new(&call[at..]).string(1024, "dirpath").unwrap().to_vec();
                if path == b"/export" {
                    w.put_u32(nfs3::MNT3_OK).unwrap();
                    w.put_opaque_var(&ROOT).unwrap();
                    w.put_u32(1).unwrap();
                    w.put_u32(AUTH_SYS).unwrap();
                } else {
                    w.put_u32(nfs3::MNT3ERR_NOENT).unwrap();
                }
            }
            let n = w.len();
            let _ = s.write_all(&RecordMark::new(true, n as u32).unwrap().to_bytes());
            let _ = s.write_all(&out[..n]);
        }
    });
    (port, h)
}

struct Mock {
    addr: String,
    mount_port: u16,
    stop: Arc<AtomicBool>,
    corrupt: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Mock {
    fn start(name: &str) -> Mock {
        let addr = format!("@rpcrdma-perf-nfsmock-{name}-{}", std::process::id());
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let svc = MockNfs::default();
        let (corrupt, reads, writes) = (svc.corrupt.clone(), svc.reads.clone(), svc.writes.clone());
        let t = {
            let (addr, stop, ready) = (addr.clone(), stop.clone(), ready.clone());
            std::thread::spawn(move || {
                const CREDITS: u32 = 16;
                const CONNS: u32 = 8;
                let mut plan = PoolPlan::new(1);
                let recv = plan.add_class("recv", 4096, 8).unwrap();
                let send = plan.add_class("send", 4096, 8).unwrap();
                let data = plan.add_class("data", MAX_IO as usize + 4096, 4).unwrap();
                let srq = (CREDITS * CONNS) as u64;
                plan.reserve("recv", recv, 2 * srq)
                    .reserve("send", send, 2 * srq)
                    .reserve("data", data, 2 * srq);
                let cfg = RegionConfig {
                    lock: false,
                    ..RegionConfig::default()
                };
                let pool = Mempool::new(&plan, &cfg).unwrap();
                let rcfg = ResponderConfig {
                    versions: VersionRange::ALL,
                    credits: CREDITS,
                    max_conns: CONNS,
                    send_depth: 64,
                    max_rdma_reads: 4,
                    limits: Limits::DEFAULT,
                    max_read_bytes: MAX_IO as u64 + 4096,
                    recv_class: recv,
                    send_class: send,
                    data_class: data,
                    remote_invalidation: false,
                    backward_credits: 0,
                };
                let fab = ShmFabric::new(ShmConfig {
                    srq_window: CREDITS,
                    ..ShmConfig::default()
                })
                .unwrap();
                let mut srv = Responder::new(rcfg, fab, svc, &pool, pool.regions(), 0, Some(&addr)).unwrap();
                ready.store(true, Ordering::Release);
                while !stop.load(Ordering::Relaxed) {
                    if srv.poll() == 0 {
                        std::thread::yield_now();
                    }
                }
                srv.shutdown(100_000);
            })
        };
        while !ready.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (mount_port, m) = mount_server(stop.clone());
        Mock {
            addr,
            mount_port,
            stop,
            corrupt,
            reads,
            writes,
            threads: vec![t, m],
        }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn cpus() -> Vec<usize> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

fn cfg(m: &Mock, kind: OpKind, version: u32, size: u32) -> RunConfig {
    let c = cpus();
    RunConfig {
        mode: Mode::Rpc(kind),
        fabric: FabricKind::Shm,
        target: m.addr.clone(),
        version,
        size,
        qd: 4,
        conns: 2,
        cores: c[..c.len().min(2)].to_vec(),
        duration: Duration::from_millis(300),
        count: None,
        warmup: Duration::from_millis(50),
        rate: None,
        ddp: true,
        verify: true,
        verify_only: false,
        auth: Auth::Sys { uid: 0, gid: 0 },
        seed: 3,
        nfs: Some(NfsOptions {
            mount: MountTarget::new([127, 0, 0, 1].into(), Some(m.mount_port)),
            export: "/export".into(),
            file: "perf.dat".into(),
            create: true,
            file_size: 1 << 20,
            seq: false,
            stable: nfs3::UNSTABLE,
            commit_every: 0,
            salt: 11,
            unmount: true,
        }),
        progress: false,
        timeout: Duration::from_secs(10),
        idle_sleep_us: 5,
        idle_yield: false,
        idle_wait: false,
        target_pid: None,
        nfs41: false,
    }
}

#[test]
fn read_write_mixed_verify_with_and_without_ddp() {
    let m = Mock::start("rw");
    for (kind, version, size, ddp) in [
        (OpKind::Write, 1, 4096, true),
        (OpKind::Read, 1, 4096, true),
        (OpKind::Read, 2, 32 * 1024, true),
        (OpKind::Write, 2, 32 * 1024, false),
        (OpKind::Read, 1, 8192, false),
        (OpKind::Mixed { read_pct: 50 }, 2, 4096, true),
    ] {
        let (r0, w0) = (m.reads.load(Ordering::Relaxed), m.writes.load(Ordering::Relaxed));
        let c = RunConfig {
            ddp,
            ..cfg(&m, kind, version, size)
        };
        let out = run::run_with(&ShmMaker::default(), &c).unwrap();
        let r = &out.result;
        let what = format!("{kind:?} v{version} {size} ddp={ddp}: {r:?}");
        assert_eq!(r.errors, 0, "{what}");
        assert!(r.ops > 0, "{what}");
        assert_eq!(
            (r.op.as_str(), r.size_bytes, r.version),
            (kind.name(), size as u64, version),
            "{what}"
        );
        assert!(r.mb_per_s > 0.0, "{what}");
        // How the Calls travelled: WRITE data in a Read chunk with DDP, the
        // whole Call in a Position-Zero Read chunk without (above the inline
        // threshold); READ Calls are small.
        let t = &out.transport;
        assert_eq!(t.transport_errors + t.bad_replies + t.wc_errors, 0, "{what} {t:?}");
        match (kind, ddp) {
            (OpKind::Write, true) => assert!(t.chunked_calls > 0 && t.long_calls == 0, "{what} {t:?}"),
            (OpKind::Write, false) => assert!(t.long_calls > 0 && t.chunked_calls == 0, "{what} {t:?}"),
            (OpKind::Read, _) => assert!(t.short_calls > 0 && t.chunked_calls + t.long_calls == 0, "{what} {t:?}"),
            _ => {}
        }
        let (dr, dw) = (
            m.reads.load(Ordering::Relaxed) - r0,
            m.writes.load(Ordering::Relaxed) - w0,
        );
        match kind {
            // Writes are read back at the end (--verify).
            OpKind::Write => {
                assert!(dw >= r.ops, "{what}");
                assert_eq!(out.verified_blocks.map(|n| n > 0), Some(true), "{what}");
                assert!(dr >= out.verified_blocks.unwrap(), "{what}");
            }
            // --verify fills the file first (1 MiB in 64 KiB WRITEs).
            OpKind::Read => assert!(dr >= r.ops && dw >= 16, "{what}"),
            OpKind::Mixed { .. } => assert!(dr > 0 && dw > 16, "{what}"),
            OpKind::Null { .. } => unreachable!(),
        }
    }
}

#[test]
fn corrupted_reads_are_errors() {
    let m = Mock::start("bad");
    let c = cfg(&m, OpKind::Read, 1, 4096);
    // Fill happens first; then every READ comes back with one bit flipped.
    let out = run::run_with(
        &ShmMaker::default(),
        &RunConfig {
            verify: false,
            ..c.clone()
        },
    )
    .unwrap();
    assert_eq!(out.result.errors, 0);
    m.corrupt.store(true, Ordering::Relaxed);
    let out = run::run_with(
        &ShmMaker::default(),
        &RunConfig {
            verify: false,
            ..c.clone()
        },
    )
    .unwrap();
    assert_eq!(out.result.errors, 0, "without --verify the data is not looked at");
    let out = run::run_with(&ShmMaker::default(), &c).unwrap();
    assert_eq!(out.result.ops, 0);
    assert!(out.result.errors > 0);
}

#[test]
fn missing_file_export_and_create() {
    let m = Mock::start("noent");
    let mut c = cfg(&m, OpKind::Read, 1, 4096);
    c.nfs.as_mut().unwrap().create = false;
    c.nfs.as_mut().unwrap().file = "absent.dat".into();
    let e = run::run_with(&ShmMaker::default(), &c).unwrap_err();
    assert!(e.to_string().contains("--create"), "{e}");
    let mut c = cfg(&m, OpKind::Read, 1, 4096);
    c.nfs.as_mut().unwrap().export = "/nope".into();
    let e = run::run_with(&ShmMaker::default(), &c).unwrap_err();
    assert!(
        matches!(
            e,
            perf::PerfError::Mount {
                status: nfs3::MNT3ERR_NOENT,
                ..
            }
        ),
        "{e}"
    );
}

/// `--idle-wait` (issue 24): a worker that blocks for its completions when
/// idle completes every Call of its window, and did block; the replies
/// woke it (the fabric's doorbell made its descriptor ready), not the
/// `IDLE_WAIT_MAX` time limit, and the run's Calls outnumber what such
/// time limits could have paced.
#[test]
fn idle_wait_blocks_for_replies_and_runs_the_window_without_errors() {
    let (out, c) = idle_run("wait", true, false);
    let r = &out.result;
    assert!(out.idle_waits > 0, "the worker never blocked: {r:?}");
    assert!(
        out.idle_wakes * 2 >= out.idle_waits,
        "{} of {} blocks ended by a ready descriptor: replies did not wake the worker",
        out.idle_wakes,
        out.idle_waits
    );
    let paced_by_timeouts = c.duration.as_millis() as u64 / perf::engine::IDLE_WAIT_MAX.as_millis() as u64;
    assert!(
        r.ops > 4 * paced_by_timeouts,
        "{} ops in {:?}: replies did not wake the worker ({} waits)",
        r.ops,
        c.duration,
        out.idle_waits
    );
}

/// `--idle-yield` (issue 21 item 5's layout with B's client on the io
/// core's CPU): a worker that yields its CPU when idle still completes
/// every Call of its window, as one that spins or sleeps does.
#[test]
fn idle_yield_runs_the_window_without_errors() {
    idle_run("yield", false, true);
}

/// A qd-1 READ run against a mock of its own with the worker's idle mode
/// (`--idle-wait`, `--idle-yield`, no sleep); checks that every Call of
/// the window completed without error.
fn idle_run(name: &str, idle_wait: bool, idle_yield: bool) -> (run::RunOutput, RunConfig) {
    let m = Mock::start(name);
    let c = RunConfig {
        idle_wait,
        idle_yield,
        idle_sleep_us: 0,
        ..cfg(&m, OpKind::Read, 1, 4096)
    };
    let out = run::run_with(&ShmMaker::default(), &c).unwrap();
    let r = &out.result;
    assert_eq!(r.errors, 0, "{r:?}");
    assert!(r.ops > 0, "{r:?}");
    (out, c)
}
