//! Durability of the NFS service: the stability each WRITE asks for reaches
//! the backend, COMMIT flushes, the write verifier is new in every instance
//! and process, and `sync_all` at a clean shutdown keeps UNSTABLE writes
//! (checked by reopening a `uring` backend).

mod nfs_common;

use std::fmt;
use std::sync::{Arc, Mutex};

use nfs_common::*;
use proto::nfs3::*;
use rpcrdma_apps::backend::{
    Attr, Backend, CreateHow, DirEntry, FileHandle, FsError, FsResult, FsStat, IoChannel, IoDesc, IoDone, IoOp,
    NodeKind, Owner, SetAttr, Stable,
};
use rpcrdma_apps::nfs::NfsShared;

/// What the spy saw.
#[derive(Default, Debug)]
struct Seen {
    ops: Vec<IoOp>,
    sync_all: u32,
}

/// A backend that records the data operations and `sync_all` calls reaching
/// another backend; optionally it reports every write as merely UNSTABLE
/// (a backend that cannot honour FILE_SYNC on the write itself), or fails
/// `sync_all`.
struct Spy {
    inner: Arc<dyn Backend>,
    seen: Arc<Mutex<Seen>>,
    downgrade: bool,
    fail_sync: bool,
}

impl fmt::Debug for Spy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Spy({:?})", self.inner)
    }
}

struct SpyChannel {
    inner: Box<dyn IoChannel>,
    seen: Arc<Mutex<Seen>>,
    downgrade: bool,
}

impl fmt::Debug for SpyChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpyChannel")
    }
}

impl IoChannel for SpyChannel {
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()> {
        self.seen.lock().unwrap().ops.push(io.op);
        let mut io = io;
        if self.downgrade {
            if let IoOp::Write(_) = io.op {
                io.op = IoOp::Write(Stable::Unstable);
            }
        }
        // SAFETY: the caller's contract for `io.buf` is passed on unchanged.
        unsafe { self.inner.submit(io) }
    }
    fn poll(&mut self, out: &mut [IoDone]) -> usize {
        let n = self.inner.poll(out);
        if self.downgrade {
            for d in &mut out[..n] {
                d.committed = Stable::Unstable;
            }
        }
        n
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
}

impl Backend for Spy {
    forward_backend_namespace!();
    fn commit(&self, fh: &FileHandle) -> FsResult<()> {
        self.inner.commit(fh)
    }
    fn sync_all(&self) -> FsResult<()> {
        self.seen.lock().unwrap().sync_all += 1;
        if self.fail_sync {
            return Err(FsError::Io);
        }
        self.inner.sync_all()
    }
    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
        Ok(Box::new(SpyChannel {
            inner: self.inner.open_channel(core)?,
            seen: self.seen.clone(),
            downgrade: self.downgrade,
        }))
    }
}

fn spy(kind: Kind, downgrade: bool, fail_sync: bool) -> (Store, Arc<Mutex<Seen>>) {
    let mut s = store(kind, "b0");
    let seen = Arc::new(Mutex::new(Seen::default()));
    s.backend = Arc::new(Spy {
        inner: s.backend.clone(),
        seen: seen.clone(),
        downgrade,
        fail_sync,
    });
    (s, seen)
}

fn open_client(s: &Store) -> (Arc<NfsShared>, Client<Direct>, Vec<u8>) {
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let sh = shared(&[s], &[ex], MIB as u32);
    let mut c = Client::new(Direct::new(&sh));
    c.auth = Auth::root();
    let root = c.mnt("/export").unwrap().0;
    (sh, c, root)
}

#[test]
fn each_write_asks_the_backend_for_its_stability() {
    for k in KINDS {
        let (s, seen) = spy(k, false, false);
        let (_sh, mut c, root) = open_client(&s);
        let (f, _) = c.mkfile(&root, "f", 0o644).unwrap();
        seen.lock().unwrap().ops.clear();
        for (how, want) in [
            (UNSTABLE, Stable::Unstable),
            (DATA_SYNC, Stable::DataSync),
            (FILE_SYNC, Stable::FileSync),
        ] {
            let w = c.write(&f, 0, &pattern(how, 5000), how).unwrap();
            assert!(w.committed >= how, "{k:?}");
            let ops = std::mem::take(&mut seen.lock().unwrap().ops);
            assert_eq!(ops, vec![IoOp::Write(want)], "{k:?}: stable_how {how}");
        }
        c.commit(&f).unwrap();
        assert_eq!(seen.lock().unwrap().ops, vec![IoOp::Flush], "COMMIT flushes");
        // Reads go through the channel too.
        seen.lock().unwrap().ops.clear();
        c.read(&f, 0, 10).unwrap();
        assert_eq!(seen.lock().unwrap().ops, vec![IoOp::Read]);
    }
}

#[test]
fn a_backend_short_of_the_asked_stability_is_flushed_before_the_reply() {
    for k in KINDS {
        let (s, seen) = spy(k, true, false);
        let (_sh, mut c, root) = open_client(&s);
        let (f, _) = c.mkfile(&root, "f", 0o644).unwrap();
        seen.lock().unwrap().ops.clear();
        let w = c.write(&f, 0, b"must be durable", FILE_SYNC).unwrap();
        assert_eq!(w.committed, FILE_SYNC, "{k:?}");
        assert_eq!(
            std::mem::take(&mut seen.lock().unwrap().ops),
            vec![IoOp::Write(Stable::FileSync), IoOp::Flush]
        );
        // UNSTABLE needs no flush.
        let w = c.write(&f, 0, b"later", UNSTABLE).unwrap();
        assert_eq!(w.committed, UNSTABLE);
        assert_eq!(seen.lock().unwrap().ops, vec![IoOp::Write(Stable::Unstable)]);
    }
}

#[test]
fn write_verifier_is_new_per_instance_and_process() {
    let s = store(Kind::Mem, "b0");
    let (a, mut ca, ra) = open_client(&s);
    let (b, mut cb, rb) = open_client(&s);
    assert_ne!(a.write_verifier(), b.write_verifier());
    let (f, _) = ca.mkfile(&ra, "f", 0o644).unwrap();
    assert_eq!(ca.write(&f, 0, b"x", UNSTABLE).unwrap().verf, a.write_verifier());
    let (g, _) = cb.lookup(&rb, b"f").unwrap();
    assert_eq!(cb.write(&g, 0, b"y", UNSTABLE).unwrap().verf, b.write_verifier());
    assert_eq!(cb.commit(&g).unwrap(), b.write_verifier());
    // Another process: run this binary's helper and compare.
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", "print_verifier_child", "--ignored", "--nocapture"])
        .env("RPCRDMA_NFS_PRINT_VERF", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("verifier="))
        .expect("child verifier");
    let child = u64::from_str_radix(line.trim(), 16).unwrap().to_be_bytes();
    assert_ne!(child, a.write_verifier());
    assert_ne!(child, b.write_verifier());
}

#[test]
#[ignore = "run by write_verifier_is_new_per_instance_and_process"]
fn print_verifier_child() {
    if std::env::var("RPCRDMA_NFS_PRINT_VERF").is_err() {
        return;
    }
    let s = store(Kind::Mem, "b0");
    let (sh, _, _) = open_client(&s);
    println!("verifier={:016x}", u64::from_be_bytes(sh.write_verifier()));
}

#[test]
fn sync_all_reaches_every_backend_and_reports_failures() {
    let (s0, seen0) = spy(Kind::Mem, false, true);
    let (s1, seen1) = spy(Kind::Mem, false, false);
    let sh = shared(&[&s0, &s1], &[Ex::new("/a", "b0"), Ex::new("/b", "b1")], MIB as u32);
    assert_eq!(sh.sync_all(), Err(FsError::Io));
    assert_eq!(seen0.lock().unwrap().sync_all, 1);
    assert_eq!(
        seen1.lock().unwrap().sync_all,
        1,
        "the second backend is synced despite the first failing"
    );
}

#[test]
fn unstable_writes_survive_a_clean_restart() {
    let dir = TempDir::new("restart");
    let data = pattern(9, 300_000);
    let (fh, verf1) = {
        let s = Store {
            kind: Kind::Uring,
            backend: open_uring("b0", &dir.0),
            dir: None,
        };
        let (sh, mut c, root) = open_client(&s);
        let (f, _) = c.mkfile(&root, "kept", 0o644).unwrap();
        let w = c.write(&f, 0, &data, UNSTABLE).unwrap();
        assert_eq!(w.count as usize, data.len());
        // A clean shutdown: everything flushed, then all of it dropped.
        sh.sync_all().unwrap();
        (f, sh.write_verifier())
    };
    let s = Store {
        kind: Kind::Uring,
        backend: open_uring("b0", &dir.0),
        dir: None,
    };
    let (sh, mut c, root) = open_client(&s);
    assert_ne!(sh.write_verifier(), verf1, "a restart changes the verifier");
    // The handle from before the restart still names the file (stable
    // export id, persistent backend handle).
    let (again, _) = c.lookup(&root, b"kept").unwrap();
    assert_eq!(again, fh);
    let (got, eof, _) = c.read(&fh, 0, 400_000).unwrap();
    assert!(eof);
    assert!(got == data, "data after restart");
}
