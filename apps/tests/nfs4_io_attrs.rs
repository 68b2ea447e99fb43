//! What an NFSv4.1 READ or WRITE COMPOUND costs the core in backend calls
//! (issue 22, the kernel client's fio figure): the attributes READ, WRITE,
//! COMMIT and GETATTR need come from the core's channel when it has the
//! file open, as NFSv3's do, not from `Backend::getattr` (on `uring` an
//! `open_by_handle_at`, an `fstat` and a `close` on the core, for every
//! 4 KiB op of a kernel client; a metadata call that may wait for the disk).
//!
//! - `nfs4_read_write_compounds_take_attributes_from_the_cores_open_file`:
//!   on `uring` behind a double that counts `Backend::getattr`, the kernel
//!   client's shapes (SEQUENCE, PUTFH, READ; SEQUENCE, PUTFH, WRITE,
//!   GETATTR; SEQUENCE, PUTFH, COMMIT), once the file is open on the core,
//!   call it no more than NFSv3's READ and WRITE do (never), and still
//!   answer the right data, size and change attribute. Before, each READ
//!   called it once, each WRITE + GETATTR twice, each COMMIT once.

mod nfs4_common;
mod nfs_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nfs4_common::*;
use nfs_common::*;
use proto::nfs4::*;
use rpcrdma_apps::backend::{
    Attr, Backend, CreateHow, DirEntry, FileHandle, FsResult, FsStat, IoChannel, NodeKind, Owner, SetAttr,
};
use rpcrdma_apps::nfs::NfsShared;

/// Wraps a backend and counts `getattr`.
#[derive(Debug)]
struct CountGetattr {
    inner: Arc<dyn Backend>,
    getattrs: Arc<AtomicU64>,
}

impl Backend for CountGetattr {
    forward_backend_plain!();
    fn getattr(&self, fh: &FileHandle) -> FsResult<Attr> {
        self.getattrs.fetch_add(1, Ordering::Relaxed);
        self.inner.getattr(fh)
    }
    fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        self.inner.lookup(dir, name)
    }
    fn metadata_blocks(&self) -> bool {
        self.inner.metadata_blocks()
    }
    fn consistent_change(&self) -> bool {
        self.inner.consistent_change()
    }
    forward_backend_io!();
}

#[test]
fn nfs4_read_write_compounds_take_attributes_from_the_cores_open_file() {
    let s = store(Kind::Uring, "b0");
    let getattrs = Arc::new(AtomicU64::new(0));
    let b: Arc<dyn Backend> = Arc::new(CountGetattr {
        inner: s.backend.clone(),
        getattrs: getattrs.clone(),
    });
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let cfg = config(&["b0"], &[ex], MIB as u32);
    let sh = NfsShared::new(&cfg, vec![("b0".into(), b)]).unwrap();
    let mut c = V4::new(Direct::new(&sh), "fio");
    c.setup(8);
    let dir = c.walk("/export").unwrap();
    let (sid, fh) = c
        .open(&dir, open("fio.dat", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
        .unwrap();
    let data = pattern(1, 4096);
    c.write(&fh, &sid, 0, FILE_SYNC4, &data).unwrap();
    // The first READ opens the file on the core's channel.
    assert_eq!(c.read(&fh, &sid, 0, 4096).unwrap().1, data);

    // NFSv3 on the same core, for reference: READ and WRITE of an open file.
    let before = getattrs.load(Ordering::Relaxed);
    let mut v3 = Client::new(Direct::new(&sh));
    v3.auth = Auth::root();
    let root = v3.mnt("/export").unwrap().0;
    let v3fh = v3.lookup(&root, b"fio.dat").unwrap().0;
    // Its service's channel opens the file at its first READ.
    assert_eq!(v3.read(&v3fh, 0, 4096).unwrap().0, data);
    let v3_before = getattrs.load(Ordering::Relaxed);
    v3.write(&v3fh, 0, &data, proto::nfs3::FILE_SYNC).unwrap();
    assert_eq!(v3.read(&v3fh, 0, 4096).unwrap().0, data);
    let v3_calls = getattrs.load(Ordering::Relaxed) - v3_before;
    assert!(before <= v3_before);

    // The kernel client's 4 KiB shapes, ten times each.
    let n0 = getattrs.load(Ordering::Relaxed);
    let (mut change, mut size) = (0, 4096);
    for i in 0..10u64 {
        let off = (i % 4) * 4096;
        let d = pattern(i as u32 + 2, 4096);
        let r = c.seq(&[
            putfh(&fh),
            write(&sid, off, FILE_SYNC4, &d),
            getattr(&[FATTR4_CHANGE, FATTR4_SIZE]),
        ]);
        assert_eq!(r.status, NFS4_OK, "WRITE + GETATTR {i}");
        let mut dd = r.dec();
        res(&mut dd, OP_PUTFH);
        assert_eq!(res(&mut dd, OP_WRITE), NFS4_OK);
        assert_eq!(dd.u32(), 4096, "written");
        assert_eq!(dd.u32(), FILE_SYNC4, "committed");
        dd.fixed(8);
        assert_eq!(res(&mut dd, OP_GETATTR), NFS4_OK);
        let a = attrs(&mut dd);
        size = size.max(off + 4096);
        assert_eq!(attr(&a, FATTR4_SIZE), Some(size), "size after WRITE {i}");
        let ch = attr(&a, FATTR4_CHANGE).expect("change");
        assert_ne!(ch, change, "the change attribute moved with WRITE {i}");
        change = ch;
        assert_eq!(c.read(&fh, &sid, off, 4096).unwrap().1, d, "READ {i}");
        let r = c.seq(&[
            putfh(&fh),
            op(|e| {
                e.u32(OP_COMMIT).u64(0).u32(0);
            }),
        ]);
        assert_eq!(r.status, NFS4_OK, "COMMIT {i}");
    }
    let v4_calls = getattrs.load(Ordering::Relaxed) - n0;
    assert_eq!(
        (v4_calls, v3_calls),
        (0, 0),
        "Backend::getattr calls of 10 x (WRITE + GETATTR, READ, COMMIT) on a file the core has open (NFSv4.1, NFSv3's READ, WRITE, READ)"
    );
}
