//! Nobody waits for somebody else's fsync (issue 21 item 5), and namespace
//! changes on a `sync` export are flushed before their replies (item 2).
//!
//! What each test proves, and what it does not:
//! - `nfs_safety_commit_is_deferred_and_another_clients_read_is_answered_meanwhile`:
//!   over the shm engine, a COMMIT on a `uring` backend whose flush
//!   completion a test double holds back is deferred (counted in
//!   `deferred_commits`), and the core answers another client's READ while
//!   that flush is outstanding; the COMMIT is answered once the flush
//!   completes. Before, the core spun in `flush_sync` until the flush
//!   completed (here: until the double let it go after 3 s), and the READ
//!   waited behind it.
//! - `nfs_safety_file_sync_write_whose_write_was_not_stable_is_flushed_deferred`:
//!   a FILE_SYNC WRITE whose write the double reports only UNSTABLE gets a
//!   deferred flush (`deferred_flushes`) and replies FILE_SYNC with the
//!   written count after it.
//! - `nfs_safety_slow_namespace_fsync_runs_off_the_core`: on a backend
//!   whose metadata calls block (as `uring`'s), a CREATE whose directory
//!   fsync the double holds back runs on the helper pool (`offloaded`), and
//!   the core answers another client's READ meanwhile. Before, the CREATE
//!   and its fsync ran on the core.
//! - `nfs4_slow_read_on_uring_is_deferred_and_other_clients_are_answered_meanwhile`:
//!   over the shm engine, an NFSv4.1 COMPOUND (SEQUENCE, PUTFH, READ) on a
//!   `uring` backend whose read completion a test double holds back is
//!   suspended at its READ (`deferred_reads`), and the core answers another
//!   client's NFSv3 READ and NFSv4.1 READ meanwhile; the held COMPOUND is
//!   answered with the right data once the read completes, and its session
//!   slot is free again after it. Before, the COMPOUND's READ spun on the
//!   core in `read_sync` until its completion came (here: until the double
//!   let it go after 3 s), and the other READs waited behind it.
//! - `nfs_safety_first_open_of_a_file_runs_off_the_core`: the first READ
//!   of a file on a core, whose open the double makes slow, opens it on the
//!   helper pool (`offloaded_opens`), and the core answers another client's
//!   READ meanwhile. Before, the channel opened the file on the core.
//! - `nfs_safety_mnt_lookups_run_off_the_core`: MOUNT's MNT of a
//!   subdirectory, whose lookup the double makes slow, runs on the pool,
//!   and the core answers a READ meanwhile.
//! - `nfs_safety_sync_export_flushes_every_namespace_change`: on a `sync`
//!   export (the default) every namespace procedure and SETATTR asks the
//!   backend to flush the directories and inodes it changed before
//!   replying, and on an `async` export none does. It checks the calls, not
//!   that the data reached a disk: the crash test does that.

mod nfs4_common;
mod nfs_common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::requester::{CallId, CallOutcome, Requester};
use dataplane::responder::Responder;
use dataplane::shm::{ShmConfig, ShmFabric};
use nfs_common::*;
use proto::nfs3::{FILE_SYNC, UNSTABLE};
use proto::ulb::{Nfs3Binding, UpperLayerBinding};
use rpcrdma_apps::backend::{
    Attr, Backend, CreateHow, DirEntry, FileHandle, FsResult, FsStat, IoChannel, IoDesc, IoDone, IoOp, NodeKind,
    OpenedFile, Owner, SetAttr, Stable,
};
use rpcrdma_apps::nfs::{NfsService, NfsShared};

const READ: u32 = 6;
const WRITE: u32 = 7;
const COMMIT: u32 = 21;
const CREDITS: u32 = 4;

fn export_shared(b: Arc<dyn Backend>, sync: bool) -> Arc<NfsShared> {
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let mut cfg = config(&["b0"], &[ex], DATA_BUF_BYTES as u32);
    cfg.exports[0].r#async = !sync;
    NfsShared::new(&cfg, vec![("b0".into(), b)]).unwrap()
}

fn root_direct(sh: &Arc<NfsShared>) -> Client<Direct> {
    let mut c = Client::new(Direct::new(sh));
    c.auth = Auth::root();
    c
}

fn nfs_call(xid: u32, proc_: u32, args: impl FnOnce(&mut Enc)) -> Vec<u8> {
    let mut e = call_header(xid, NFS, 3, proc_, &Auth::root());
    args(&mut e);
    e.b
}

// ---------------------------------------------------------------------------
// A channel that holds flush completions back
// ---------------------------------------------------------------------------

/// Wraps a backend; its channels hold the completion of every flush until
/// `release` is set or 3 s have passed, and may report writes as only
/// UNSTABLE (`weak_writes`).
#[derive(Debug)]
struct HoldFlush {
    inner: Arc<dyn Backend>,
    release: Arc<AtomicBool>,
    weak_writes: bool,
    syncs: Arc<AtomicU64>,
    /// Say metadata calls block (as `uring` does), and make `sync_meta`
    /// wait for `release` too (a slow directory fsync).
    slow_meta: bool,
    /// Hold the completion of reads at this offset as well (a slow read).
    slow_read_at: Option<u64>,
    /// Say metadata calls block, and make opening a file for a channel's
    /// I/O wait for `release` too (a slow `open_by_handle_at`), where it
    /// happens: on the pool ([`Backend::open_for_io`]) or in the channel.
    slow_open: bool,
}

#[derive(Debug)]
struct HoldChannel {
    inner: Box<dyn IoChannel>,
    slow_open: bool,
    release: Arc<AtomicBool>,
    weak_writes: bool,
    flushes: HashSet<u64>,
    held: Vec<(Instant, IoDone)>,
    slow_read_at: Option<u64>,
}

const HOLD_AT_MOST: Duration = Duration::from_secs(3);

/// Wait until `release` is set or [`HOLD_AT_MOST`] has passed.
fn hold(release: &AtomicBool) {
    let t0 = Instant::now();
    while !release.load(Ordering::Acquire) && t0.elapsed() < HOLD_AT_MOST {
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl IoChannel for HoldChannel {
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()> {
        if self.slow_open && self.inner.needs_open(&io.fh) {
            // The channel opens the file here, on the core: slowly.
            hold(&self.release);
        }
        if io.op.is_flush() || (io.op == IoOp::Read && Some(io.offset) == self.slow_read_at) {
            self.flushes.insert(io.tag);
        }
        // SAFETY: the caller's guarantee, passed on unchanged.
        unsafe { self.inner.submit(io) }
    }
    fn poll(&mut self, out: &mut [IoDone]) -> usize {
        let mut tmp = [IoDone::default(); 16];
        let n = self.inner.poll(&mut tmp[..out.len().min(16)]);
        for d in &tmp[..n] {
            self.held.push((Instant::now(), *d));
        }
        let release = self.release.load(Ordering::Acquire);
        let mut k = 0;
        let mut i = 0;
        while i < self.held.len() && k < out.len() {
            let (t, mut d) = self.held[i];
            let flush = self.flushes.contains(&d.tag);
            if flush && !release && t.elapsed() < HOLD_AT_MOST {
                i += 1;
                continue;
            }
            self.held.remove(i);
            if flush {
                self.flushes.remove(&d.tag);
            } else if self.weak_writes && d.committed != Stable::Unstable && d.result.is_ok() {
                d.committed = Stable::Unstable;
            }
            out[k] = d;
            k += 1;
        }
        k
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.held.len()
    }
    fn completes_later(&self) -> bool {
        true
    }
    fn needs_open(&mut self, fh: &FileHandle) -> bool {
        self.inner.needs_open(fh)
    }
    fn adopt(&mut self, fh: &FileHandle, file: OpenedFile) {
        self.inner.adopt(fh, file)
    }
}

impl Backend for HoldFlush {
    forward_backend_namespace!();
    fn commit(&self, fh: &FileHandle) -> FsResult<()> {
        self.inner.commit(fh)
    }
    fn sync_all(&self) -> FsResult<()> {
        self.inner.sync_all()
    }
    fn metadata_blocks(&self) -> bool {
        self.slow_meta || self.slow_open
    }
    fn open_for_io(&self, fh: &FileHandle) -> FsResult<Option<OpenedFile>> {
        if self.slow_open {
            hold(&self.release);
        }
        self.inner.open_for_io(fh)
    }
    fn sync_meta(&self, fh: &FileHandle) -> FsResult<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        while self.slow_meta && !self.release.load(Ordering::Acquire) && t0.elapsed() < HOLD_AT_MOST {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.inner.sync_meta(fh)
    }
    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
        Ok(Box::new(HoldChannel {
            inner: self.inner.open_channel(core)?,
            slow_open: self.slow_open,
            release: self.release.clone(),
            weak_writes: self.weak_writes,
            flushes: HashSet::new(),
            held: Vec::new(),
            slow_read_at: self.slow_read_at,
        }))
    }
}

fn hold_store(weak_writes: bool) -> (Store, Arc<HoldFlush>) {
    hold_store_with(weak_writes, false)
}

fn hold_store_with(weak_writes: bool, slow_meta: bool) -> (Store, Arc<HoldFlush>) {
    hold_store_full(weak_writes, slow_meta, false)
}

fn hold_store_full(weak_writes: bool, slow_meta: bool, slow_open: bool) -> (Store, Arc<HoldFlush>) {
    let s = store(Kind::Uring, "b0");
    let h = Arc::new(HoldFlush {
        inner: s.backend.clone(),
        release: Arc::new(AtomicBool::new(false)),
        weak_writes,
        syncs: Arc::new(AtomicU64::new(0)),
        slow_meta,
        slow_read_at: None,
        slow_open,
    });
    (s, h)
}

// ---------------------------------------------------------------------------
// The engine side: one responder, two requesters over shm
// ---------------------------------------------------------------------------

fn requester(p: &Pools, addr: &str, core: usize) -> Requester<'static, ShmFabric> {
    let fab = ShmFabric::new(ShmConfig::default()).unwrap();
    let mut cli = Requester::new(requester_cfg(p, versions(1), CREDITS), fab, p.pool, &p.regions, core).unwrap();
    cli.connect(addr).unwrap();
    cli
}

fn submit(cli: &mut Requester<'static, ShmFabric>, call: &[u8], proc_: u32) -> dataplane::requester::CallId {
    let binding = Nfs3Binding::new(MIB as u32);
    let mut cb = cli.call_buf().expect("call buffer");
    cb.bytes_mut()[..call.len()].copy_from_slice(call);
    let mut items = [proto::ulb::DdpItem::default(); 2];
    let k = binding.call_items(call, &mut items).unwrap_or(0);
    let needs = proto::plan::ReplyNeeds::from_ulb(&binding, 3, proc_);
    cli.submit(cb, call.len(), &items[..k], &needs)
        .map_err(|(e, _)| e)
        .expect("submit")
}

/// The `nfsstat3` of a completed Call's reply (its reduced form: the
/// status is before any data item).
fn reply_status(cli: &mut Requester<'static, ShmFabric>, id: dataplane::requester::CallId) -> u32 {
    let v = cli.reply(id).expect("reply view");
    let st = Reply::parse(v.reduced).dec().u32();
    cli.release(id);
    st
}

struct Rig {
    srv: Responder<'static, ShmFabric, NfsService>,
    a: Requester<'static, ShmFabric>,
    b: Requester<'static, ShmFabric>,
}

impl Rig {
    fn new(sh: &Arc<NfsShared>, tag: &str) -> Rig {
        let p = pools3(CREDITS);
        let addr = format!("@rpcrdma-nfs-defer-{tag}-{}", std::process::id());
        // As the target sets it: each connection draws at most its credits
        // from the SRQ.
        let fab = ShmFabric::new(ShmConfig {
            srq_window: CREDITS,
            ..ShmConfig::for_rpc_engine()
        })
        .unwrap();
        let svc = NfsService::new(sh.clone(), 0).unwrap();
        let cfg = dataplane::responder::ResponderConfig {
            max_conns: 2,
            ..responder_cfg(&p, CREDITS)
        };
        let srv = Responder::new(cfg, fab, svc, p.pool, &p.regions, 0, Some(&addr)).unwrap();
        let a = requester(&p, &addr, 1);
        let b = requester(&p, &addr, 2);
        let mut r = Rig { srv, a, b };
        let t0 = Instant::now();
        while r.a.link() != dataplane::requester::LinkState::Ready
            || r.b.link() != dataplane::requester::LinkState::Ready
        {
            r.turn();
            assert!(t0.elapsed() < Duration::from_secs(30), "connect");
        }
        r
    }

    fn turn(&mut self) {
        self.srv.poll();
        self.a.poll();
        self.b.poll();
    }

    /// Turns until A's Call `ca` (sent first, held by the test double) and
    /// B's Call `cb` are both answered; B's answer lets `release` go. Each
    /// reply is checked by its closure. Returns when A and when B were
    /// answered, counted from `t0`.
    fn race(
        &mut self,
        t0: Instant,
        (ca, check_a): (CallId, impl FnOnce(&mut Requester<'static, ShmFabric>, CallId)),
        (cb, check_b): (CallId, impl FnOnce(&mut Requester<'static, ShmFabric>, CallId)),
        release: &AtomicBool,
    ) -> (Duration, Duration) {
        let (mut check_a, mut check_b) = (Some(check_a), Some(check_b));
        let (mut a_at, mut b_at) = (None, None);
        while a_at.is_none() || b_at.is_none() {
            self.turn();
            if let Some(d) = self.b.poll_completion() {
                assert_eq!((d.id, d.outcome), (cb, CallOutcome::Reply));
                check_b.take().expect("B answered once")(&mut self.b, cb);
                b_at = Some(t0.elapsed());
                // Only now is A's held work let go.
                release.store(true, Ordering::Release);
            }
            if let Some(d) = self.a.poll_completion() {
                assert_eq!((d.id, d.outcome), (ca, CallOutcome::Reply));
                check_a.take().expect("A answered once")(&mut self.a, ca);
                a_at = Some(t0.elapsed());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no replies: A {a_at:?} B {b_at:?} {:?} {:?}",
                self.srv.service().stats(),
                self.srv.stats()
            );
        }
        (a_at.unwrap(), b_at.unwrap())
    }

    /// Turns the rig so that a Call just sent reaches the service.
    fn settle(&mut self) {
        for _ in 0..50 {
            self.turn();
        }
    }
}

fn file_with_data(sh: &Arc<NfsShared>) -> Vec<u8> {
    let mut d = root_direct(sh);
    let (root, _) = d.mnt("/export").expect("MNT");
    let (fh, _) = d.mkfile(&root, "data", 0o644).expect("CREATE");
    d.write(&fh, 0, &pattern(7, 64 * 1024), UNSTABLE).expect("WRITE");
    fh
}

#[test]
fn nfs_safety_commit_is_deferred_and_another_clients_read_is_answered_meanwhile() {
    let (_s, h) = hold_store(false);
    let release = h.release.clone();
    let sh = export_shared(h, true);
    let fh = file_with_data(&sh);
    let mut r = Rig::new(&sh, "commit");

    let commit = nfs_call(0x100, COMMIT, |e| {
        e.opaque(&fh).u64(0).u32(0);
    });
    let read = nfs_call(0x200, READ, |e| {
        e.opaque(&fh).u64(4096).u32(4096);
    });
    let t0 = Instant::now();
    let ca = submit(&mut r.a, &commit, COMMIT);
    r.settle();
    let cb = submit(&mut r.b, &read, READ);
    let (commit_at, read_at) = r.race(
        t0,
        (ca, |c, ca| {
            assert_eq!(reply_status(c, ca), 0, "COMMIT");
        }),
        (cb, |c, cb| {
            assert_eq!(reply_status(c, cb), 0, "READ");
        }),
        &release,
    );
    assert!(
        read_at < commit_at && read_at < Duration::from_secs(1),
        "the READ was answered while the COMMIT's flush was outstanding: READ at {read_at:?}, COMMIT at {commit_at:?}"
    );
    let st = r.srv.service().stats();
    assert_eq!(st.deferred_commits, 1, "the COMMIT was deferred: {st:?}");
    assert_eq!(st.nfs[COMMIT as usize], 1);
}

#[test]
fn nfs_safety_file_sync_write_whose_write_was_not_stable_is_flushed_deferred() {
    let (_s, h) = hold_store(true);
    h.release.store(true, Ordering::Release);
    let sh = export_shared(h, true);
    let fh = file_with_data(&sh);
    let mut r = Rig::new(&sh, "flush");
    let data = pattern(9, 8192);
    let write = nfs_call(0x300, WRITE, |e| {
        e.opaque(&fh).u64(0).u32(8192).u32(FILE_SYNC).opaque(&data);
    });
    let id = submit(&mut r.a, &write, WRITE);
    let t0 = Instant::now();
    let reduced = loop {
        r.turn();
        if let Some(d) = r.a.poll_completion() {
            assert_eq!((d.id, d.outcome), (id, CallOutcome::Reply));
            let v = r.a.reply(id).expect("reply");
            let out = v.reduced.to_vec();
            r.a.release(id);
            break out;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no reply");
    };
    let rep = Reply::parse(&reduced);
    let mut dec = rep.dec();
    assert_eq!(dec.u32(), 0, "WRITE status");
    let _ = dec.wcc();
    assert_eq!(dec.u32(), 8192, "count");
    assert_eq!(dec.u32(), FILE_SYNC, "committed");
    let st = r.srv.service().stats();
    assert_eq!((st.deferred_writes, st.deferred_flushes), (1, 1), "{st:?}");
    let mut d = root_direct(&sh);
    assert_eq!(d.read(&fh, 0, 8192).expect("READ").0, data);
}

#[test]
fn nfs_safety_sync_export_flushes_every_namespace_change() {
    for sync in [true, false] {
        let (_s, h) = hold_store(false);
        let syncs = h.syncs.clone();
        let sh = export_shared(h, sync);
        let mut c = root_direct(&sh);
        let (root, _) = c.mnt("/export").expect("MNT");
        let mut count = |what: &str, want: u64, f: &mut dyn FnMut(&mut Client<Direct>)| {
            let before = syncs.load(Ordering::Relaxed);
            f(&mut c);
            let got = syncs.load(Ordering::Relaxed) - before;
            let want = if sync { want } else { 0 };
            assert_eq!(got, want, "sync={sync} {what}: backend flushes before the reply");
        };
        let mut fh = Vec::new();
        let mut dir = Vec::new();
        count("CREATE", 2, &mut |c| {
            fh = c.mkfile(&root, "a", 0o644).expect("CREATE").0
        });
        count("MKDIR", 2, &mut |c| dir = c.mkdir(&root, "d", 0o755).expect("MKDIR").0);
        count("SYMLINK", 2, &mut |c| {
            c.symlink(&dir, "l", b"../a").expect("SYMLINK");
        });
        count("MKNOD", 2, &mut |c| {
            c.mknod(&dir, "p", 7, (0, 0)).expect("MKNOD");
        });
        count("SETATTR", 1, &mut |c| {
            assert_eq!(c.setattr(&fh, &mode_attr(0o600), None).0, 0, "SETATTR");
        });
        count("LINK", 2, &mut |c| assert_eq!(c.link(&fh, &dir, "h"), 0));
        count("RENAME in one directory", 1, &mut |c| {
            assert_eq!(c.rename(&root, "a", &root, "b"), 0)
        });
        count("RENAME across", 2, &mut |c| {
            assert_eq!(c.rename(&dir, "h", &root, "h2"), 0)
        });
        count("REMOVE", 1, &mut |c| assert_eq!(c.remove(&root, "h2"), 0));
        count("REMOVE two", 2, &mut |c| {
            for n in ["l", "p"] {
                assert_eq!(c.remove(&dir, n), 0);
            }
        });
        count("RMDIR", 1, &mut |c| assert_eq!(c.rmdir(&root, "d"), 0));
        // Failures flush nothing.
        count("failed REMOVE", 0, &mut |c| assert_eq!(c.remove(&root, "nothing"), 2));
    }
}

#[test]
fn nfs_safety_slow_namespace_fsync_runs_off_the_core() {
    let (_s, h) = hold_store_with(false, true);
    let release = h.release.clone();
    let sh = export_shared(h, true);
    // Set-up through a service without a defer token: it flushes inline,
    // so let the flushes go until the engine part starts.
    release.store(true, Ordering::Release);
    let fh = file_with_data(&sh);
    let mut d = root_direct(&sh);
    let (root, _) = d.mnt("/export").expect("MNT");
    release.store(false, Ordering::Release);
    let mut r = Rig::new(&sh, "meta");

    let create = nfs_call(0x400, 8, |e| {
        e.dirop(&root, b"new").u32(0).sattr(&mode_attr(0o644));
    });
    let read = nfs_call(0x500, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    let t0 = Instant::now();
    let ca = submit(&mut r.a, &create, 8);
    r.settle();
    let cb = submit(&mut r.b, &read, READ);
    let (create_at, read_at) = r.race(
        t0,
        (ca, |c, ca| {
            assert_eq!(reply_status(c, ca), 0, "CREATE");
        }),
        (cb, |c, cb| {
            assert_eq!(reply_status(c, cb), 0, "READ");
        }),
        &release,
    );
    assert!(
        read_at < create_at && read_at < Duration::from_secs(1),
        "the READ was answered while the CREATE's directory fsync was outstanding: READ at {read_at:?}, CREATE at {create_at:?}"
    );
    let st = r.srv.service().stats();
    assert_eq!(st.offloaded, 1, "the CREATE ran on the helper pool: {st:?}");
    assert_eq!(st.nfs[8], 1);
    assert!(d.lookup(&root, b"new").is_ok());
}

/// The first READ of a file on a core opens it (`open_by_handle_at` on
/// `uring`): on the helper pool, with the READ deferred meanwhile, so the
/// core answers another client's READ of a file it has open while that open
/// is slow (issue 21 item 5). Before, the channel opened the file on the
/// core, and the other READ waited behind it (here 3 s).
#[test]
fn nfs_safety_first_open_of_a_file_runs_off_the_core() {
    let (_s, h) = hold_store_full(false, false, true);
    let release = h.release.clone();
    let sh = export_shared(h, true);
    release.store(true, Ordering::Release);
    let fh = file_with_data(&sh);
    let mut d = root_direct(&sh);
    let (root, _) = d.mnt("/export").expect("MNT");
    let (other, _) = d.mkfile(&root, "other", 0o644).expect("CREATE");
    d.write(&other, 0, &pattern(8, 4096), UNSTABLE).expect("WRITE");
    let mut r = Rig::new(&sh, "open");
    // B's file is open on the core already: its first READ, let through.
    let warm = nfs_call(0x600, READ, |e| {
        e.opaque(&other).u64(0).u32(4096);
    });
    let cw = submit(&mut r.b, &warm, READ);
    let t0 = Instant::now();
    loop {
        r.turn();
        if let Some(d) = r.b.poll_completion() {
            assert_eq!((d.id, d.outcome), (cw, CallOutcome::Reply));
            assert_eq!(reply_status(&mut r.b, cw), 0, "first READ of B's file");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no reply");
    }
    release.store(false, Ordering::Release);

    let read_a = nfs_call(0x700, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    let read_b = nfs_call(0x701, READ, |e| {
        e.opaque(&other).u64(0).u32(4096);
    });
    let t0 = Instant::now();
    let ca = submit(&mut r.a, &read_a, READ);
    r.settle();
    let cb = submit(&mut r.b, &read_b, READ);
    let (a_at, b_at) = r.race(
        t0,
        (ca, |c, ca| {
            assert_eq!(reply_status(c, ca), 0, "A's READ");
        }),
        (cb, |c, cb| {
            assert_eq!(reply_status(c, cb), 0, "B's READ");
        }),
        &release,
    );
    assert!(
        b_at < a_at && b_at < Duration::from_secs(1),
        "B's READ was answered while A's file was being opened: B at {b_at:?}, A at {a_at:?}"
    );
    let st = r.srv.service().stats();
    assert_eq!(
        st.offloaded_opens, 2,
        "both first READs opened their file on the pool: {st:?}"
    );
}

/// A backend whose lookups wait for `release` (or 3 s) and whose metadata
/// calls block (as `uring`'s).
#[derive(Debug)]
struct SlowLookup {
    inner: Arc<dyn Backend>,
    release: Arc<AtomicBool>,
}

impl Backend for SlowLookup {
    forward_backend_plain!();
    fn getattr(&self, fh: &FileHandle) -> FsResult<Attr> {
        self.inner.getattr(fh)
    }
    fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        hold(&self.release);
        self.inner.lookup(dir, name)
    }
    fn metadata_blocks(&self) -> bool {
        true
    }
    forward_backend_io!();
}

/// MOUNT's MNT of a directory below an export looks its path up in the
/// backend: on the helper pool, so the core answers another client's READ
/// while that lookup is slow (issue 21 item 5). Before, MNT ran on the core
/// and the READ waited behind it (here 3 s).
#[test]
fn nfs_safety_mnt_lookups_run_off_the_core() {
    let s = store(Kind::Uring, "b0");
    let release = Arc::new(AtomicBool::new(true));
    let b = Arc::new(SlowLookup {
        inner: s.backend.clone(),
        release: release.clone(),
    });
    let sh = export_shared(b, true);
    let fh = file_with_data(&sh);
    let mut d = root_direct(&sh);
    let (root, _) = d.mnt("/export").expect("MNT");
    d.mkdir(&root, "sub", 0o755).expect("MKDIR");
    let mut r = Rig::new(&sh, "mnt");
    let read = nfs_call(0x800, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    // B's file open on the core first.
    let cw = submit(&mut r.b, &read, READ);
    let t0 = Instant::now();
    loop {
        r.turn();
        if let Some(d) = r.b.poll_completion() {
            assert_eq!((d.id, d.outcome), (cw, CallOutcome::Reply));
            assert_eq!(reply_status(&mut r.b, cw), 0, "first READ");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no reply");
    }
    release.store(false, Ordering::Release);
    let mut e = call_header(0x801, MOUNT, 3, 1, &Auth::root());
    e.opaque(b"/export/sub");
    let mnt = e.b;
    let read = nfs_call(0x802, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    let t0 = Instant::now();
    let ca = submit(&mut r.a, &mnt, 1);
    r.settle();
    let cb = submit(&mut r.b, &read, READ);
    let (a_at, b_at) = r.race(
        t0,
        (ca, |c, ca| {
            assert_eq!(reply_status(c, ca), 0, "MNT3_OK");
        }),
        (cb, |c, cb| {
            assert_eq!(reply_status(c, cb), 0, "READ");
        }),
        &release,
    );
    assert!(
        b_at < a_at && b_at < Duration::from_secs(1),
        "the READ was answered while the MNT's lookup was slow: READ at {b_at:?}, MNT at {a_at:?}"
    );
    assert_eq!(r.srv.service().stats().offloaded, 1, "the MNT ran on the pool");
}

/// MNT over the TCP mount port (what `mount.nfs` sends even for an RDMA
/// mount) runs on that connection's own thread of the TCP server, not on a
/// reactor core: while its path lookup is slow, the core answers a READ at
/// once, and nothing is offloaded from the core (the MNT never reaches it).
#[test]
fn nfs_safety_mnt_over_tcp_runs_on_its_tcp_thread_not_a_core() {
    let s = store(Kind::Uring, "b0");
    let release = Arc::new(AtomicBool::new(true));
    let b = Arc::new(SlowLookup {
        inner: s.backend.clone(),
        release: release.clone(),
    });
    let sh = export_shared(b, true);
    let fh = file_with_data(&sh);
    let mut d = root_direct(&sh);
    let (root, _) = d.mnt("/export").expect("MNT");
    d.mkdir(&root, "sub", 0o755).expect("MKDIR");
    let cfg = config(&["b0"], &[Ex::new("/export", "b0")], DATA_BUF_BYTES as u32);
    let opts = rpcrdma_apps::server::tcp::TcpOptions::new(&cfg.listeners.tcp, 2 * MIB, MIB, 0);
    let mut tcp = rpcrdma_apps::server::tcp::TcpServer::start("127.0.0.1:0".parse().unwrap(), sh.clone(), opts)
        .expect("TCP server");
    let port = tcp.local_addr().port();
    let mut r = Rig::new(&sh, "mnt-tcp");
    release.store(false, Ordering::Release);
    let t0 = Instant::now();
    let mnt = std::thread::spawn(move || {
        let mut c = Client::new(Tcp::connect(port));
        c.auth = Auth::root();
        let res = c.mnt("/export/sub");
        (res, t0.elapsed())
    });
    // Let the MNT reach its slow lookup.
    std::thread::sleep(Duration::from_millis(200));
    let read = nfs_call(0x900, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    let cb = submit(&mut r.b, &read, READ);
    let b_at = loop {
        r.turn();
        if let Some(d) = r.b.poll_completion() {
            assert_eq!((d.id, d.outcome), (cb, CallOutcome::Reply));
            assert_eq!(reply_status(&mut r.b, cb), 0, "READ");
            break t0.elapsed();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no READ reply");
    };
    let mnt_done_before_read = mnt.is_finished();
    release.store(true, Ordering::Release);
    let (res, a_at) = mnt.join().unwrap();
    assert!(res.is_ok(), "MNT over TCP: {res:?}");
    assert!(
        !mnt_done_before_read && b_at < Duration::from_secs(1) && b_at < a_at,
        "the core answered the READ while the TCP MNT's lookup was slow: READ at {b_at:?}, MNT at {a_at:?}"
    );
    assert_eq!(r.srv.service().stats().offloaded, 0, "the MNT never reached the core");
    tcp.finish(Duration::from_secs(1));
}

/// `mem`: a big WRITE to one file does not park READs of another file on
/// another thread (core) while its data is copied. A 64 MiB write is
/// copied (tens to hundreds of milliseconds) while a reader thread reads
/// another file over and over: some of its READs start and finish inside
/// the write. Before, the write held the backend's one lock for the whole
/// copy, and no READ could finish inside it. (The allocation of the write's
/// blocks still takes the namespace lock, briefly.)
#[test]
fn nfs_safety_mem_big_write_does_not_park_readers_of_another_file() {
    use rpcrdma_apps::backend::mem::MemBackend;
    use rpcrdma_apps::backend::{read_sync, write_sync, CreateHow};
    const BIG: usize = 64 << 20;
    let b: Arc<dyn Backend> = Arc::new(MemBackend::new("m", (BIG + (16 << 20)) as u64).unwrap());
    let root = b.root();
    let owner = Owner::default();
    let (f, _) = b
        .create(&root, b"big", CreateHow::Unchecked(SetAttr::default()), owner)
        .unwrap();
    let (g, _) = b
        .create(&root, b"small", CreateHow::Unchecked(SetAttr::default()), owner)
        .unwrap();
    let mut ch = b.open_channel(0).unwrap();
    write_sync(&mut *ch, &g, 0, &pattern(3, 4096), Stable::FileSync).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let reader = {
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut ch = b.open_channel(1).unwrap();
            let mut buf = vec![0u8; 4096];
            let mut spans = Vec::new();
            while !stop.load(Ordering::Acquire) {
                let s = t0.elapsed();
                read_sync(&mut *ch, &g, 0, &mut buf).unwrap();
                spans.push((s, t0.elapsed()));
            }
            spans
        })
    };
    let big = vec![0x5au8; BIG];
    std::thread::sleep(Duration::from_millis(50));
    let w0 = t0.elapsed();
    let (n, _) = write_sync(&mut *ch, &f, 0, &big, Stable::Unstable).unwrap();
    let w1 = t0.elapsed();
    stop.store(true, Ordering::Release);
    let spans = reader.join().unwrap();
    assert_eq!(n as usize, BIG);
    let inside = spans.iter().filter(|(s, e)| *s >= w0 && *e <= w1).count();
    assert!(
        inside > 0,
        "no READ of the other file finished during the {:?} write ({} READs in all)",
        w1 - w0,
        spans.len()
    );
}

/// Submit an NFSv4 COMPOUND; `read_max`: a Write chunk for a READ ending it.
fn submit4(
    cli: &mut Requester<'static, ShmFabric>,
    call: &[u8],
    read_max: Option<u32>,
) -> dataplane::requester::CallId {
    let mut cb = cli.call_buf().expect("call buffer");
    cb.bytes_mut()[..call.len()].copy_from_slice(call);
    let mut items = [proto::ulb::DdpItem::default(); 2];
    let k = proto::nfs4::ulb::call_items(call, &mut items);
    let wc: Vec<u32> = read_max.into_iter().collect();
    let needs = proto::plan::ReplyNeeds::new(&wc, 1024).unwrap();
    cli.submit(cb, call.len(), &items[..k], &needs)
        .map_err(|(e, _)| e)
        .expect("submit")
}

/// A v4 READ reply's COMPOUND status, and the data its Write chunk got.
fn reply4(cli: &mut Requester<'static, ShmFabric>, id: dataplane::requester::CallId) -> (u32, Vec<u8>) {
    let v = cli.reply(id).expect("reply view");
    let st = Reply::parse(v.reduced).dec().u32();
    let data = v.write_chunk(0).map(|d| d.to_vec()).unwrap_or_default();
    cli.release(id);
    (st, data)
}

#[test]
fn nfs4_slow_read_on_uring_is_deferred_and_other_clients_are_answered_meanwhile() {
    use nfs4_common::*;
    use proto::nfs4::{Stateid, NFS4_OK};
    const SLOW: u64 = 8192;
    let s = store(Kind::Uring, "b0");
    let h = Arc::new(HoldFlush {
        inner: s.backend.clone(),
        release: Arc::new(AtomicBool::new(false)),
        weak_writes: false,
        syncs: Arc::new(AtomicU64::new(0)),
        slow_meta: false,
        slow_read_at: Some(SLOW),
        slow_open: false,
    });
    let release = h.release.clone();
    let sh = export_shared(h, true);
    let fh = file_with_data(&sh);
    let want = pattern(7, 64 * 1024);
    // Two v4.1 clients with their sessions, set up directly.
    let mut a4 = V4::new(Direct::new(&sh), "slow-reader");
    a4.setup(4);
    let mut b4 = V4::new(Direct::new(&sh), "other-reader");
    b4.setup(4);
    let mut r = Rig::new(&sh, "v4read");

    let anon = Stateid::ANONYMOUS;
    let ops = [a4.sequence(0, false), putfh(&fh), read(&anon, SLOW, 4096)];
    let slow = a4.encode(&ops);
    let ops = [b4.sequence(0, false), putfh(&fh), read(&anon, 0, 4096)];
    let fast4 = b4.encode(&ops);
    let fast3 = nfs_call(0x600, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    let t0 = Instant::now();
    let ca = submit4(&mut r.a, &slow, Some(4096));
    // The slow COMPOUND reaches the service first.
    for _ in 0..50 {
        r.turn();
    }
    let c3 = submit(&mut r.b, &fast3, READ);
    let mut c4 = None;
    let (mut fast3_at, mut fast4_at, mut slow_at) = (None, None, None);
    while fast3_at.is_none() || fast4_at.is_none() || slow_at.is_none() {
        r.turn();
        if let Some(d) = r.b.poll_completion() {
            assert_eq!(d.outcome, CallOutcome::Reply);
            // Call ids are reused once released: the v3 READ is answered
            // before the v4 one is sent.
            if fast3_at.is_none() {
                assert_eq!(d.id, c3);
                assert_eq!(reply_status(&mut r.b, c3), 0, "v3 READ");
                fast3_at = Some(t0.elapsed());
                c4 = Some(submit4(&mut r.b, &fast4, Some(4096)));
            } else {
                assert_eq!(Some(d.id), c4);
                let (st, data) = reply4(&mut r.b, d.id);
                assert_eq!(st, NFS4_OK, "v4 READ of the other client");
                assert_eq!(data, want[..4096]);
                fast4_at = Some(t0.elapsed());
                // Only now is the slow read let go.
                release.store(true, Ordering::Release);
            }
        }
        if let Some(d) = r.a.poll_completion() {
            assert_eq!((d.id, d.outcome), (ca, CallOutcome::Reply));
            let (st, data) = reply4(&mut r.a, ca);
            assert_eq!(st, NFS4_OK, "the slow v4 READ");
            assert_eq!(data, want[SLOW as usize..SLOW as usize + 4096]);
            slow_at = Some(t0.elapsed());
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no replies: v3 {fast3_at:?} v4 {fast4_at:?} slow {slow_at:?} {:?}",
            r.srv.service().stats()
        );
    }
    let (f3, f4, sl) = (fast3_at.unwrap(), fast4_at.unwrap(), slow_at.unwrap());
    assert!(
        f3 < sl && f4 < sl && f4 < Duration::from_secs(1),
        "the other client's READs were answered while the slow READ was outstanding: \
         v3 at {f3:?}, v4 at {f4:?}, slow v4 at {sl:?}"
    );
    let st = r.srv.service().stats();
    assert!(st.deferred_reads >= 2, "the v4 READs were deferred: {st:?}");
    let v4 = r.srv.service().nfs4_stats();
    assert_eq!(v4.compounds, 2, "each COMPOUND counted once: {v4:?}");
    assert_eq!(v4.ops[proto::nfs4::OP_READ as usize], 2, "{v4:?}");
    // The slot the suspended COMPOUND held is free: the next sequence id on
    // it is served.
    let res = a4.seq(&[putfh(&fh)]);
    assert_eq!(res.status, NFS4_OK);
}

/// The whole reduced reply of a finished Call.
fn reply_bytes(cli: &mut Requester<'static, ShmFabric>, id: dataplane::requester::CallId) -> Vec<u8> {
    let v = cli.reply(id).expect("reply view");
    let out = v.reduced.to_vec();
    cli.release(id);
    out
}

fn one_call4(r: &mut Rig, call: &[u8]) -> Vec<u8> {
    let id = submit4(&mut r.a, call, None);
    let t0 = Instant::now();
    loop {
        r.turn();
        if let Some(d) = r.a.poll_completion() {
            assert_eq!((d.id, d.outcome), (id, CallOutcome::Reply));
            return reply_bytes(&mut r.a, id);
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no reply");
    }
}

/// NFSv4.1 WRITE (FILE_SYNC4, whose write the double reports only
/// UNSTABLE) followed by GETATTR, and COMMIT, over the shm engine on
/// `uring`: the WRITE suspends its COMPOUND twice (the write, then the
/// flush), and the COMPOUND resumes after each: GETATTR, after the WRITE,
/// is answered with the size the write made; the COMMIT is deferred too.
/// The slot's reply is cached once complete: a retry of the WRITE
/// COMPOUND gets the same reply without writing again.
#[test]
fn nfs4_write_and_commit_on_uring_are_deferred_and_the_compound_resumes() {
    use nfs4_common::*;
    use proto::nfs4::*;
    let (_s, h) = hold_store(true);
    h.release.store(true, Ordering::Release);
    let sh = export_shared(h, true);
    let fh = file_with_data(&sh);
    let mut a4 = V4::new(Direct::new(&sh), "writer");
    a4.setup(4);
    let mut r = Rig::new(&sh, "v4write");
    let data = pattern(11, 8192);
    let at = 64 * 1024;
    let ops = [
        a4.sequence(0, true),
        putfh(&fh),
        write(&Stateid::ANONYMOUS, at, FILE_SYNC4, &data),
        getattr(&[FATTR4_SIZE]),
    ];
    let call = a4.encode(&ops);
    let first = one_call4(&mut r, &call);
    let rp = parse(Reply::parse(&first));
    assert_eq!(rp.status, NFS4_OK);
    let mut d = rp.dec();
    assert_eq!(res(&mut d, OP_SEQUENCE), NFS4_OK);
    seq_res(&mut d);
    assert_eq!(res(&mut d, OP_PUTFH), NFS4_OK);
    assert_eq!(res(&mut d, OP_WRITE), NFS4_OK);
    assert_eq!(d.u32(), 8192, "count");
    assert_eq!(d.u32(), FILE_SYNC4, "committed after the deferred flush");
    assert_eq!(d.fixed(8), sh.write_verifier());
    assert_eq!(res(&mut d, OP_GETATTR), NFS4_OK, "the operation after the WRITE ran");
    assert_eq!(attr(&attrs(&mut d), FATTR4_SIZE), Some(at + 8192));
    let st = r.srv.service().stats();
    assert_eq!((st.deferred_writes, st.deferred_flushes), (1, 1), "{st:?}");
    // A retry of the same COMPOUND: the cached reply, nothing written.
    let again = one_call4(&mut r, &call);
    assert_eq!(again[4..], first[4..], "the slot's cached reply");
    assert_eq!(r.srv.service().stats().deferred_writes, 1);
    assert_eq!(r.srv.service().nfs4_stats().replays, 1);
    // COMMIT, deferred.
    let ops = [
        a4.sequence(0, false),
        putfh(&fh),
        op(|e| {
            e.u32(OP_COMMIT).u64(0).u32(0);
        }),
    ];
    let call = a4.encode(&ops);
    let rp = parse(Reply::parse(&one_call4(&mut r, &call)));
    assert_eq!(rp.status, NFS4_OK);
    assert_eq!(r.srv.service().stats().deferred_commits, 1);
    let mut d = root_direct(&sh);
    assert_eq!(d.read(&fh, at, 8192).expect("READ").0, data);
}

/// NFSv4.1 on a `sync` export: CREATE, OPEN that creates, SETATTR, LINK,
/// RENAME and REMOVE each ask the backend to flush the directories and
/// inodes they changed before replying, as NFSv3's do; on an `async`
/// export none does. (Before, no v4 operation flushed anything.)
#[test]
fn nfs4_sync_export_flushes_every_namespace_change() {
    use nfs4_common::*;
    use proto::nfs4::*;
    for sync in [true, false] {
        let (_s, h) = hold_store(false);
        h.release.store(true, Ordering::Release);
        let syncs = h.syncs.clone();
        let sh = export_shared(h, sync);
        let mut c = V4::new(Direct::new(&sh), "syncer");
        c.setup(4);
        let root = c.walk("/export").unwrap();
        let count = |what: &str, want: u64, ops: Vec<Vec<u8>>, c: &mut V4<Direct>| {
            let before = syncs.load(Ordering::Relaxed);
            let r = c.seq(&ops);
            assert_eq!(r.status, NFS4_OK, "{what}");
            let got = syncs.load(Ordering::Relaxed) - before;
            let want = if sync { want } else { 0 };
            assert_eq!(got, want, "sync={sync} {what}: backend flushes before the reply");
        };
        let mkdir = op(|e| {
            e.u32(OP_CREATE).u32(NF4DIR).opaque(b"d");
            mode_attrs(e, Some(0o755));
        });
        count("CREATE", 2, vec![putfh(&root), mkdir], &mut c);
        let o = open("f", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8])));
        count("OPEN create", 2, vec![putfh(&root), o], &mut c);
        let f = c.walk("/export/f").unwrap();
        let d = c.walk("/export/d").unwrap();
        let sa = op(|e| {
            e.u32(OP_SETATTR);
            stateid(e, &Stateid::ANONYMOUS);
            e.u32(2).u32(0).u32(1 << (FATTR4_MODE - 32));
            e.u32(4).u32(0o600);
        });
        count("SETATTR", 1, vec![putfh(&f), sa], &mut c);
        let save = op(|e| {
            e.u32(OP_SAVEFH);
        });
        let link = op(|e| {
            e.u32(OP_LINK).opaque(b"h");
        });
        count("LINK", 2, vec![putfh(&f), save.clone(), putfh(&d), link], &mut c);
        let ren = op(|e| {
            e.u32(OP_RENAME).opaque(b"h").opaque(b"h2");
        });
        count("RENAME in one directory", 1, vec![putfh(&d), save.clone(), ren], &mut c);
        let ren = op(|e| {
            e.u32(OP_RENAME).opaque(b"h2").opaque(b"h3");
        });
        count("RENAME across", 2, vec![putfh(&d), save, putfh(&root), ren], &mut c);
        let rm = op(|e| {
            e.u32(OP_REMOVE).opaque(b"h3");
        });
        count("REMOVE", 1, vec![putfh(&root), rm], &mut c);
    }
}

/// NFSv4.1 on a backend whose metadata calls block (as `uring`'s): a
/// COMPOUND with CREATE, whose directory fsync the double holds back, runs
/// on the helper pool (`offloaded`), and the core answers another client's
/// READ meanwhile; the COMPOUND's reply (CREATE's and GETFH's results)
/// comes once the fsync is let go. Before, the CREATE and its fsync ran on
/// the core.
#[test]
fn nfs4_slow_namespace_fsync_runs_off_the_core() {
    use nfs4_common::*;
    use proto::nfs4::*;
    let (_s, h) = hold_store_with(false, true);
    let release = h.release.clone();
    let sh = export_shared(h, true);
    release.store(true, Ordering::Release);
    let fh = file_with_data(&sh);
    let mut a4 = V4::new(Direct::new(&sh), "creator");
    a4.setup(4);
    let root = a4.walk("/export").unwrap();
    release.store(false, Ordering::Release);
    let mut r = Rig::new(&sh, "v4meta");
    let mkdir = op(|e| {
        e.u32(OP_CREATE).u32(NF4DIR).opaque(b"slow");
        mode_attrs(e, Some(0o755));
    });
    let ops = [a4.sequence(0, false), putfh(&root), mkdir, getfh()];
    let create = a4.encode(&ops);
    let read = nfs_call(0x700, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    let t0 = Instant::now();
    let ca = submit4(&mut r.a, &create, None);
    r.settle();
    let cb = submit(&mut r.b, &read, READ);
    let (create_at, read_at) = r.race(
        t0,
        (ca, |c, ca| {
            let rp = parse(Reply::parse(&reply_bytes(c, ca)));
            assert_eq!(rp.status, NFS4_OK, "CREATE");
            let mut dd = rp.dec();
            assert_eq!(res(&mut dd, OP_SEQUENCE), NFS4_OK);
            seq_res(&mut dd);
            assert_eq!(res(&mut dd, OP_PUTFH), NFS4_OK);
            assert_eq!(res(&mut dd, OP_CREATE), NFS4_OK);
            dd.bool();
            dd.u64();
            dd.u64();
            let n = dd.u32();
            for _ in 0..n {
                dd.u32();
            }
            assert_eq!(res(&mut dd, OP_GETFH), NFS4_OK);
            assert!(!dd.opaque().is_empty());
        }),
        (cb, |c, cb| {
            assert_eq!(reply_status(c, cb), 0, "READ");
        }),
        &release,
    );
    assert!(
        read_at < create_at && read_at < Duration::from_secs(1),
        "the READ was answered while the CREATE's fsync was outstanding: READ at {read_at:?}, CREATE at {create_at:?}"
    );
    let st = r.srv.service().stats();
    assert_eq!(st.offloaded, 1, "the COMPOUND ran on the helper pool: {st:?}");
    assert!(a4.walk("/export/slow").is_ok());
}

/// NFSv4.2's ALLOCATE is a system call on the backend (`fallocate`), not
/// I/O through the core's channel: on `uring` its COMPOUND runs whole on
/// the helper pool, as the namespace changes' do (issue 21 item 5, issue
/// 22). Before, `offload::wanted_v4` sent only namespace changes there and
/// the `fallocate` ran on the core.
#[test]
fn nfs4_2_allocate_on_uring_runs_off_the_core() {
    use nfs4_common::*;
    use proto::nfs4::*;
    let (_s, h) = hold_store_with(false, true);
    h.release.store(true, Ordering::Release);
    let sh = export_shared(h, true);
    let mut a4 = V4::new(Direct::new(&sh), "allocator");
    a4.minor = 2;
    a4.setup(4);
    let dir = a4.walk("/export").unwrap();
    let (os, fh) = a4
        .open(&dir, open("grown", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
        .unwrap();
    let mut r = Rig::new(&sh, "v42alloc");
    let alloc = op(|e| {
        e.u32(OP_ALLOCATE);
        stateid(e, &os);
        e.u64(0).u64(1 << 20);
    });
    let ops = [a4.sequence(0, false), putfh(&fh), alloc];
    let call = a4.encode(&ops);
    let id = submit4(&mut r.a, &call, None);
    let t0 = Instant::now();
    loop {
        r.turn();
        if let Some(d) = r.a.poll_completion() {
            assert_eq!((d.id, d.outcome), (id, CallOutcome::Reply));
            let rp = parse(Reply::parse(&reply_bytes(&mut r.a, id)));
            assert_eq!(rp.status, NFS4_OK, "ALLOCATE");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no reply");
    }
    let st = r.srv.service().stats();
    assert_eq!(st.offloaded, 1, "the ALLOCATE COMPOUND ran on the helper pool: {st:?}");
    let r = a4.seq(&[putfh(&fh), getattr(&[FATTR4_SIZE])]);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_GETATTR);
    assert_eq!(attr(&attrs(&mut d), FATTR4_SIZE), Some(1 << 20), "the file grew");
}

/// NFSv4.1 over the shm engine on `uring`: a COMPOUND whose READ is not
/// its last operation (SEQUENCE, PUTFH, READ, GETATTR), whose read
/// completion a test double holds back, suspends at the READ as a final
/// READ does (`deferred_reads`), and the core answers another client's
/// READ meanwhile; the COMPOUND is answered once the read completes, with
/// the data the READ read (into the head, a DDP item, so in the Write
/// chunk) and the GETATTR after it. Before, a READ that did not end its
/// COMPOUND read synchronously on the core (`read_sync` until the double
/// let it go after 3 s), and the other client's READ waited behind it.
#[test]
fn nfs4_non_final_read_on_uring_is_deferred_and_other_clients_are_answered_meanwhile() {
    use nfs4_common::*;
    use proto::nfs4::*;
    const SLOW: u64 = 8192;
    let s = store(Kind::Uring, "b0");
    let h = Arc::new(HoldFlush {
        inner: s.backend.clone(),
        release: Arc::new(AtomicBool::new(false)),
        weak_writes: false,
        syncs: Arc::new(AtomicU64::new(0)),
        slow_meta: false,
        slow_read_at: Some(SLOW),
        slow_open: false,
    });
    let release = h.release.clone();
    let sh = export_shared(h, true);
    let fh = file_with_data(&sh);
    let want = pattern(7, 64 * 1024);
    let mut a4 = V4::new(Direct::new(&sh), "mid-reader");
    a4.setup(4);
    let mut r = Rig::new(&sh, "v4midread");
    let ops = [
        a4.sequence(0, false),
        putfh(&fh),
        read(&Stateid::ANONYMOUS, SLOW, 4096),
        getattr(&[FATTR4_SIZE]),
    ];
    let slow = a4.encode(&ops);
    let fast = nfs_call(0x800, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    let t0 = Instant::now();
    let ca = submit4(&mut r.a, &slow, Some(4096));
    r.settle();
    let cb = submit(&mut r.b, &fast, READ);
    let (slow_at, fast_at) = r.race(
        t0,
        (ca, |c, ca| {
            let (st, data) = reply4(c, ca);
            assert_eq!(st, NFS4_OK, "the COMPOUND with the slow READ");
            assert_eq!(data, want[SLOW as usize..SLOW as usize + 4096], "the READ's data");
        }),
        (cb, |c, cb| {
            assert_eq!(reply_status(c, cb), 0, "the other client's READ");
        }),
        &release,
    );
    assert!(
        fast_at < slow_at && fast_at < Duration::from_secs(1),
        "the other client's READ was answered while the non-final READ was outstanding: \
         READ at {fast_at:?}, the COMPOUND at {slow_at:?}"
    );
    let st = r.srv.service().stats();
    assert!(st.deferred_reads >= 2, "the non-final READ was deferred: {st:?}");
    let v4 = r.srv.service().nfs4_stats();
    assert_eq!(v4.compounds, 1, "{v4:?}");
    assert_eq!(
        (v4.ops[OP_READ as usize], v4.ops[OP_GETATTR as usize]),
        (1, 1),
        "the READ ran once and the GETATTR after it ran: {v4:?}"
    );
    // The slot the suspended COMPOUND held is free again.
    assert_eq!(a4.seq(&[putfh(&fh)]).status, NFS4_OK);
}

/// NFSv4.1 over the shm engine on a backend whose metadata calls block (as
/// `uring`'s): a COMPOUND that mixes a namespace change with data I/O
/// (SEQUENCE, PUTFH, CREATE of a directory whose fsync the double holds
/// back, PUTFH, WRITE, READ) runs its CREATE on the helper pool, suspended
/// meanwhile (`offloaded`), and the core answers another client's READ
/// while the fsync is outstanding; then the COMPOUND goes on with its WRITE
/// and READ through the core's channel, deferred, and is answered with the
/// data it wrote. Before, such a COMPOUND was not offloaded (it does data
/// I/O), so its CREATE and the fsync ran on the core and the other READ
/// waited behind them.
#[test]
fn nfs4_mixed_namespace_and_data_compound_runs_its_metadata_off_the_core() {
    use nfs4_common::*;
    use proto::nfs4::*;
    let (_s, h) = hold_store_with(false, true);
    let release = h.release.clone();
    let sh = export_shared(h, true);
    release.store(true, Ordering::Release);
    let fh = file_with_data(&sh);
    let mut a4 = V4::new(Direct::new(&sh), "mixer");
    a4.setup(4);
    let root = a4.walk("/export").unwrap();
    release.store(false, Ordering::Release);
    let mut r = Rig::new(&sh, "v4mixed");
    let mkdir = op(|e| {
        e.u32(OP_CREATE).u32(NF4DIR).opaque(b"mixed");
        mode_attrs(e, Some(0o755));
    });
    let data = pattern(13, 4096);
    let at = 128 * 1024;
    let anon = Stateid::ANONYMOUS;
    let ops = [
        a4.sequence(0, false),
        putfh(&root),
        mkdir,
        putfh(&fh),
        write(&anon, at, UNSTABLE4, &data),
        read(&anon, at, 4096),
    ];
    let mixed = a4.encode(&ops);
    let fast = nfs_call(0x900, READ, |e| {
        e.opaque(&fh).u64(0).u32(4096);
    });
    let t0 = Instant::now();
    let ca = submit4(&mut r.a, &mixed, Some(4096));
    r.settle();
    let cb = submit(&mut r.b, &fast, READ);
    let (mixed_at, fast_at) = r.race(
        t0,
        (ca, |c, ca| {
            let (st, got) = reply4(c, ca);
            assert_eq!(st, NFS4_OK, "the mixed COMPOUND");
            assert_eq!(got, data, "the READ after the WRITE reads what it wrote");
        }),
        (cb, |c, cb| {
            assert_eq!(reply_status(c, cb), 0, "the other client's READ");
        }),
        &release,
    );
    assert!(
        fast_at < mixed_at && fast_at < Duration::from_secs(1),
        "the other client's READ was answered while the CREATE's fsync was outstanding: \
         READ at {fast_at:?}, the COMPOUND at {mixed_at:?}"
    );
    let st = r.srv.service().stats();
    assert_eq!(st.offloaded, 1, "the CREATE ran on the helper pool: {st:?}");
    assert_eq!(
        st.deferred_writes, 1,
        "the WRITE went through the core's channel: {st:?}"
    );
    let v4 = r.srv.service().nfs4_stats();
    assert_eq!(v4.compounds, 1, "{v4:?}");
    assert_eq!(
        (
            v4.ops[OP_CREATE as usize],
            v4.ops[OP_WRITE as usize],
            v4.ops[OP_READ as usize]
        ),
        (1, 1, 1),
        "{v4:?}"
    );
    assert!(a4.walk("/export/mixed").is_ok(), "the directory was made");
    assert_eq!(a4.seq(&[putfh(&fh)]).status, NFS4_OK, "the slot is free again");
}
