//! The `nvme` backend on image files (no NVMe device on the build host; the
//! passthrough path is exercised in a VM by `tests/nvme/run.sh`).

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rpcrdma_apps::backend::nvme::{IoMode, NvmeBackend};
use rpcrdma_apps::backend::{
    flush_sync, read_sync, write_sync, Backend, CreateHow, FileHandle, FileType, FsError, IoChannel, IoDesc, IoDone,
    IoOp, NodeKind, Owner, SetAttr, SetTime, Stable, Time,
};

const A_BYTES: u64 = 4 << 20;
const B_BYTES: u64 = (3 << 20) + 1234;

/// A fresh directory with two sparse images: `a.img` (4 MiB) and `b.img`
/// (3 MiB + 1234 bytes, not a multiple of any block size).
fn images(test: &str) -> (PathBuf, Vec<PathBuf>) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("backend_nvme").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.img");
    let b = dir.join("b.img");
    File::create(&a).unwrap().set_len(A_BYTES).unwrap();
    File::create(&b).unwrap().set_len(B_BYTES).unwrap();
    (dir, vec![a, b])
}

fn open(devs: &[PathBuf]) -> NvmeBackend {
    NvmeBackend::open("nv0", devs, 8, true).unwrap()
}

fn lookup(be: &NvmeBackend, name: &str) -> FileHandle {
    be.lookup(&be.root(), name.as_bytes()).unwrap().0
}

/// Heap memory aligned to 4096, so tests choose aligned and misaligned
/// addresses on purpose.
struct ABuf {
    ptr: *mut u8,
    layout: Layout,
}

impl ABuf {
    fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        ABuf { ptr, layout }
    }
    fn slice(&mut self, at: usize, len: usize) -> &mut [u8] {
        assert!(at + len <= self.layout.size());
        // SAFETY: within the allocation, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), len) }
    }
}

impl Drop for ABuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { alloc::dealloc(self.ptr, self.layout) }
    }
}

fn pattern(seed: u64, pos: u64) -> u8 {
    let x = (pos ^ seed.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

fn fill(buf: &mut [u8], seed: u64, offset: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seed, offset + i as u64);
    }
}

fn file_bytes(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut v = vec![0u8; len];
    let n = File::open(path).unwrap().read_at(&mut v, offset).unwrap();
    v.truncate(n);
    v
}

#[test]
fn readdir_lists_the_devices() {
    let (_d, devs) = images("readdir");
    let be = open(&devs);
    let mut seen: Vec<(Vec<u8>, u64, u64)> = Vec::new();
    let end = be
        .readdir(&be.root(), 0, &mut |e| {
            assert!(e.handle.is_some() && e.attr.is_some());
            seen.push((e.name.to_vec(), e.cookie, e.fileid));
            true
        })
        .unwrap();
    assert!(end);
    let names: Vec<&[u8]> = seen.iter().map(|s| s.0.as_slice()).collect();
    assert_eq!(names, [&b"."[..], b"..", b"a.img", b"b.img"]);
    let cookies: Vec<u64> = seen.iter().map(|s| s.1).collect();
    assert_eq!(cookies, [1, 2, 3, 4]);
    assert_ne!(seen[2].2, seen[3].2, "file ids are unique");
    // Resume after "a.img".
    let mut rest = Vec::new();
    assert!(be
        .readdir(&be.root(), 3, &mut |e| {
            rest.push(e.name.to_vec());
            true
        })
        .unwrap());
    assert_eq!(rest, [b"b.img".to_vec()]);
    // A sink that stops: not at the end.
    let mut one = 0;
    assert!(!be
        .readdir(&be.root(), 0, &mut |_| {
            one += 1;
            false
        })
        .unwrap());
    assert_eq!(one, 1);
    // At the end, past it.
    assert!(be.readdir(&be.root(), 4, &mut |_| panic!("no entries")).unwrap());
    assert_eq!(be.readdir(&be.root(), 5, &mut |_| true), Err(FsError::BadCookie));
    let a = lookup(&be, "a.img");
    assert_eq!(be.readdir(&a, 0, &mut |_| true), Err(FsError::NotDir));
    assert_eq!(
        be.cookie_verifier(&be.root()).unwrap(),
        open(&devs).cookie_verifier(&be.root()).unwrap()
    );
}

#[test]
fn lookup_and_getattr_sizes() {
    let (_d, devs) = images("getattr");
    let be = open(&devs);
    assert_eq!(be.kind(), "nvme");
    let root = be.getattr(&be.root()).unwrap();
    assert_eq!(root.ftype, FileType::Directory);
    let (ha, aa) = be.lookup(&be.root(), b"a.img").unwrap();
    let (hb, ab) = be.lookup(&be.root(), b"b.img").unwrap();
    assert_eq!((aa.ftype, aa.size), (FileType::Regular, A_BYTES));
    assert_eq!((ab.ftype, ab.size), (FileType::Regular, B_BYTES));
    assert_eq!(be.getattr(&ha).unwrap().size, A_BYTES);
    assert_eq!(be.getattr(&hb).unwrap().fileid, ab.fileid);
    assert!(ha.as_bytes().len() <= 32);
    assert_eq!(be.lookup(&be.root(), b".").unwrap().0, be.root());
    assert_eq!(be.lookup(&be.root(), b"..").unwrap().0, be.root());
    assert_eq!(be.lookup(&be.root(), b"c.img").map(|x| x.0), Err(FsError::NoEnt));
    assert_eq!(be.lookup(&ha, b"x").map(|x| x.0), Err(FsError::NotDir));
    assert_eq!(
        be.lookup(&be.root(), &[b'x'; 256]).map(|x| x.0),
        Err(FsError::NameTooLong)
    );
    // Owner and mode start as the image file's.
    let md = std::fs::metadata(&devs[0]).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((aa.mode, aa.uid, aa.gid), (md.mode() & 0o7777, md.uid(), md.gid()));
    let st = be.fsstat().unwrap();
    assert_eq!(st.total_bytes, A_BYTES + B_BYTES);
    assert_eq!(st.max_file_size, A_BYTES);
    assert_eq!(st.total_files, 3);
    // Image files use O_DIRECT exactly when their file system allows it.
    let direct_ok = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&devs[0])
        .is_ok();
    let info = be.devices();
    assert_eq!(info.len(), 2);
    assert_eq!(info[0].name, "a.img");
    assert_eq!(info[0].size_bytes, A_BYTES);
    assert_eq!(info[0].mode, if direct_ok { IoMode::Direct } else { IoMode::Buffered });
}

#[test]
fn namespace_changes_are_refused() {
    let (_d, devs) = images("refused");
    let be = open(&devs);
    let root = be.root();
    let a = lookup(&be, "a.img");
    let o = Owner::default();
    let none = SetAttr::default();
    let err = |r: Result<(FileHandle, rpcrdma_apps::backend::Attr), FsError>| r.map(|x| x.0).unwrap_err();

    assert_eq!(
        err(be.create(&root, b"new", CreateHow::Unchecked(none), o)),
        FsError::NotSupp
    );
    assert_eq!(
        err(be.create(&root, b"new", CreateHow::Exclusive([1; 8]), o)),
        FsError::NotSupp
    );
    assert_eq!(
        err(be.create(&root, b"a.img", CreateHow::Guarded(none), o)),
        FsError::Exist
    );
    assert_eq!(
        err(be.create(&root, b"a.img", CreateHow::Exclusive([1; 8]), o)),
        FsError::Exist
    );
    assert_eq!(
        err(be.create(&root, b".", CreateHow::Unchecked(none), o)),
        FsError::Exist
    );
    // UNCHECKED on an existing name opens it; a truncation leaves the
    // capacity (as O_TRUNC on a block device).
    assert_eq!(be.create(&root, b"a.img", CreateHow::Unchecked(none), o).unwrap().0, a);
    let trunc = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    let (fh, at) = be.create(&root, b"a.img", CreateHow::Unchecked(trunc), o).unwrap();
    assert_eq!((fh, at.size), (a, A_BYTES));
    assert_eq!(err(be.create(&a, b"x", CreateHow::Unchecked(none), o)), FsError::NotDir);

    assert_eq!(err(be.mkdir(&root, b"d", &none, o)), FsError::NotSupp);
    assert_eq!(err(be.mkdir(&root, b"a.img", &none, o)), FsError::Exist);
    assert_eq!(err(be.symlink(&root, b"l", b"a.img", &none, o)), FsError::NotSupp);
    assert_eq!(err(be.symlink(&root, b"b.img", b"a.img", &none, o)), FsError::Exist);
    assert_eq!(err(be.mknod(&root, b"p", NodeKind::Fifo, &none, o)), FsError::NotSupp);
    assert_eq!(err(be.mknod(&root, b"..", NodeKind::Socket, &none, o)), FsError::Exist);
    assert_eq!(be.link(&a, &root, b"hard"), Err(FsError::NotSupp));
    assert_eq!(be.link(&a, &root, b"b.img"), Err(FsError::Exist));
    assert_eq!(be.link(&root, &root, b"x"), Err(FsError::IsDir));

    assert_eq!(be.remove(&root, b"a.img"), Err(FsError::Acces));
    assert_eq!(be.remove(&root, b"zz"), Err(FsError::NoEnt));
    assert_eq!(be.remove(&root, b"."), Err(FsError::Inval));
    assert_eq!(be.rmdir(&root, b"a.img"), Err(FsError::NotDir));
    assert_eq!(be.rmdir(&root, b".."), Err(FsError::Inval));
    assert_eq!(be.rmdir(&root, b"zz"), Err(FsError::NoEnt));
    assert_eq!(be.rename(&root, b"a.img", &root, b"c.img"), Err(FsError::Acces));
    assert_eq!(be.rename(&root, b"a.img", &root, b"b.img"), Err(FsError::Acces));
    assert_eq!(be.rename(&root, b"a.img", &root, b"a.img"), Ok(()));
    assert_eq!(be.rename(&root, b"zz", &root, b"c.img"), Err(FsError::NoEnt));
    assert_eq!(be.rename(&a, b"x", &root, b"y"), Err(FsError::NotDir));
    assert_eq!(be.readlink(&a, &mut [0u8; 16]), Err(FsError::Inval));

    // Size: the capacity; less is accepted and changes nothing.
    let set = |size| SetAttr {
        size: Some(size),
        ..Default::default()
    };
    assert_eq!(be.setattr(&a, &set(A_BYTES + 1)), Err(FsError::FBig));
    assert_eq!(be.setattr(&a, &set(A_BYTES - 1)).unwrap().size, A_BYTES);
    assert_eq!(be.setattr(&a, &set(0)).unwrap().size, A_BYTES);
    assert_eq!(be.setattr(&a, &set(A_BYTES)).unwrap().size, A_BYTES);
    assert_eq!(be.setattr(&root, &set(0)), Err(FsError::IsDir));
    // Mode, owner, times: in memory, gone after a reopen.
    let t = Time { secs: 1000, nsecs: 5 };
    let chmod = SetAttr {
        mode: Some(0o600),
        uid: Some(42),
        gid: Some(43),
        mtime: SetTime::Client(t),
        ..Default::default()
    };
    let at = be.setattr(&a, &chmod).unwrap();
    assert_eq!((at.mode, at.uid, at.gid, at.mtime), (0o600, 42, 43, t));
    assert_eq!(be.getattr(&a).unwrap().mode, 0o600);
    drop(be);
    let be = open(&devs);
    let again = be.getattr(&lookup(&be, "a.img")).unwrap();
    assert_ne!((again.mode, again.uid), (0o600, 42));
    // The directory still lists exactly the two devices.
    let mut n = 0;
    be.readdir(&be.root(), 2, &mut |_| {
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, 2);
}

#[test]
fn garbage_handles_are_refused() {
    let (_d, devs) = images("garbage");
    let be = open(&devs);
    let a = lookup(&be, "a.img");
    let mut ch = be.open_channel(0).unwrap();
    let mut buf = [0u8; 16];
    let mut bad = vec![
        FileHandle::new(&[0u8; 16]).unwrap(),
        FileHandle::new(&[0xffu8; 64]).unwrap(),
        FileHandle::new(b"x").unwrap(),
        FileHandle::new(&a.as_bytes()[..15]).unwrap(),
    ];
    // Right length, wrong magic; right magic, unknown kind.
    let mut m = a.as_bytes().to_vec();
    m[0] ^= 0x40;
    bad.push(FileHandle::new(&m).unwrap());
    let mut k = a.as_bytes().to_vec();
    k[3] = 9;
    bad.push(FileHandle::new(&k).unwrap());
    for fh in &bad {
        assert_eq!(be.getattr(fh), Err(FsError::BadHandle), "{fh:?}");
        assert_eq!(be.lookup(fh, b"a.img").map(|x| x.0), Err(FsError::BadHandle));
        assert_eq!(be.commit(fh), Err(FsError::BadHandle));
        assert_eq!(read_sync(ch.as_mut(), fh, 0, &mut buf), Err(FsError::BadHandle));
        assert_eq!(ch.in_flight(), 0);
    }
    // Well formed, but no such device (path hash changed): stale.
    let mut s = a.as_bytes().to_vec();
    s[12] ^= 1;
    let stale = FileHandle::new(&s).unwrap();
    assert_eq!(be.getattr(&stale), Err(FsError::Stale));
    assert_eq!(
        write_sync(ch.as_mut(), &stale, 0, b"x", Stable::Unstable),
        Err(FsError::Stale)
    );
    // Another backend's root.
    let other = NvmeBackend::open("other", &devs[..1], 8, true).unwrap();
    assert_eq!(be.getattr(&other.root()), Err(FsError::Stale));
    // The root is not a file.
    assert_eq!(read_sync(ch.as_mut(), &be.root(), 0, &mut buf), Err(FsError::IsDir));
}

/// Write then read back every (offset, length) pair, aligned and not, through
/// one channel; check against the image file itself.
#[test]
fn channel_reads_and_writes_aligned_and_unaligned() {
    let (_d, devs) = images("rw");
    let be = open(&devs);
    let fh = lookup(&be, "a.img");
    let mut ch = be.open_channel(0).unwrap();
    let mut mem = ABuf::new((1 << 20) + 8192);
    let cases: &[(u64, usize, usize)] = &[
        // (file offset, length, buffer misalignment)
        (0, 4096, 0),
        (4096, 1 << 20, 0),
        (8192, 1, 0),
        (12_345, 1, 1),
        (4095, 2, 0),
        (65_536 + 100, 5000, 3),
        (2 << 20, 1 << 20, 0),
        ((5 << 19) + 7, 1 << 20, 1),
        (512, 512, 0),
        (A_BYTES - 4096, 4096, 0),
        (A_BYTES - 100, 100, 0),
        (100_000, 65_536, 0),
        (100_000, 131_072, 0),
    ];
    for (i, &(off, len, mis)) in cases.iter().enumerate() {
        let seed = i as u64 + 1;
        let w = mem.slice(mis, len);
        fill(w, seed, off);
        let expect = w.to_vec();
        let (n, committed) = write_sync(ch.as_mut(), &fh, off, w, Stable::Unstable).unwrap();
        assert_eq!((n as usize, committed), (len, Stable::Unstable), "case {i}");
        // Read back into a differently aligned buffer.
        let rmis = (mis + 1) % 2;
        let r = mem.slice(rmis, len);
        r.fill(0);
        let (n, eof) = read_sync(ch.as_mut(), &fh, off, r).unwrap();
        assert_eq!(n as usize, len, "case {i}");
        assert_eq!(eof, off + len as u64 == A_BYTES, "case {i}");
        assert!(r == expect.as_slice(), "case {i}: data read back differs");
        assert!(
            file_bytes(&devs[0], off, len) == expect,
            "case {i}: data in the image differs"
        );
    }
    flush_sync(ch.as_mut(), &fh).unwrap();
    assert_eq!(ch.in_flight(), 0);
}

#[test]
fn reads_past_the_end_and_writes_beyond_it() {
    let (_d, devs) = images("eof");
    let be = open(&devs);
    let fh = lookup(&be, "b.img");
    let mut ch = be.open_channel(3).unwrap();
    let mut data = vec![0u8; 5000];
    fill(&mut data, 9, B_BYTES - 5000);
    write_sync(ch.as_mut(), &fh, B_BYTES - 5000, &data, Stable::FileSync).unwrap();
    // Short read at the tail (the image's size is not block aligned).
    let mut buf = vec![0u8; 8192];
    let (n, eof) = read_sync(ch.as_mut(), &fh, B_BYTES - 1000, &mut buf).unwrap();
    assert_eq!((n, eof), (1000, true));
    assert_eq!(&buf[..1000], &data[4000..]);
    // Aligned offset whose clipped length is not.
    let mut mem = ABuf::new(8192);
    let off = B_BYTES / 4096 * 4096;
    let (n, eof) = read_sync(ch.as_mut(), &fh, off, mem.slice(0, 8192)).unwrap();
    assert_eq!((n as u64, eof), (B_BYTES - off, true));
    assert_eq!(read_sync(ch.as_mut(), &fh, B_BYTES, &mut buf).unwrap(), (0, true));
    assert_eq!(read_sync(ch.as_mut(), &fh, u64::MAX, &mut buf).unwrap(), (0, true));
    assert_eq!(read_sync(ch.as_mut(), &fh, 0, &mut []).unwrap(), (0, false));
    assert_eq!(
        write_sync(ch.as_mut(), &fh, B_BYTES - 10, &[1u8; 11], Stable::Unstable),
        Err(FsError::FBig)
    );
    assert_eq!(
        write_sync(ch.as_mut(), &fh, u64::MAX - 2, &[1u8; 11], Stable::Unstable),
        Err(FsError::FBig)
    );
    assert_eq!(
        write_sync(ch.as_mut(), &fh, B_BYTES, &[], Stable::Unstable).unwrap().0,
        0
    );
    assert_eq!(ch.in_flight(), 0);
    assert_eq!(be.getattr(&fh).unwrap().size, B_BYTES);
}

#[test]
fn stable_writes_report_what_they_got() {
    let (_d, devs) = images("stable");
    let be = open(&devs);
    let fh = lookup(&be, "a.img");
    let mut ch = be.open_channel(0).unwrap();
    let mut mem = ABuf::new(8192);
    for (stable, mis) in [
        (Stable::FileSync, 0),
        (Stable::FileSync, 1),
        (Stable::DataSync, 0),
        (Stable::DataSync, 5),
        (Stable::Unstable, 0),
    ] {
        let (_, c) = write_sync(ch.as_mut(), &fh, 4096, mem.slice(mis, 4096), stable).unwrap();
        assert_eq!(c, stable);
    }
    be.commit(&fh).unwrap();
    be.commit(&be.root()).unwrap();
    be.sync_all().unwrap();
    let before = be.getattr(&fh).unwrap().mtime;
    std::thread::sleep(std::time::Duration::from_millis(20));
    write_sync(ch.as_mut(), &fh, 0, b"tick", Stable::Unstable).unwrap();
    assert!(be.getattr(&fh).unwrap().mtime > before, "a write moves mtime");
}

#[test]
fn many_in_flight_and_queue_full() {
    let (_d, devs) = images("queue");
    let be = open(&devs); // queue depth 8
    let fa = lookup(&be, "a.img");
    let fb = lookup(&be, "b.img");
    let mut ch = be.open_channel(1).unwrap();
    let mut bufs: Vec<ABuf> = (0..8).map(|_| ABuf::new(70_000)).collect();
    let mut expect = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate() {
        let fh = if i % 2 == 0 { fa } else { fb };
        let off = i as u64 * 200_000 + (i as u64 % 3) * 7;
        let len = 4096 * (i + 1) + (i % 2) * 13;
        let s = b.slice(0, len);
        fill(s, 100 + i as u64, off);
        expect.push((fh, off, s.to_vec()));
        let io = IoDesc {
            fh,
            op: IoOp::Write([Stable::DataSync, Stable::Unstable, Stable::Unstable][i % 3]),
            offset: off,
            buf: s.as_mut_ptr(),
            len: len as u32,
            tag: 1000 + i as u64,
        };
        // SAFETY: each buffer stays alive and untouched until every completion is reaped below.
        unsafe { ch.submit(io).unwrap() };
    }
    assert_eq!(ch.in_flight(), 8);
    let extra = IoDesc {
        fh: fa,
        op: IoOp::Read,
        offset: 0,
        buf: std::ptr::null_mut(),
        len: 0,
        tag: 1,
    };
    // SAFETY: refused before anything is queued.
    assert_eq!(unsafe { ch.submit(extra) }, Err(FsError::Jukebox));
    let mut tags = Vec::new();
    let mut out = [IoDone::default(); 3];
    while tags.len() < 8 {
        let n = ch.poll(&mut out);
        for d in &out[..n] {
            let i = (d.tag - 1000) as usize;
            assert_eq!(d.result, Ok(expect[i].2.len() as u32));
            let want = [Stable::DataSync, Stable::Unstable, Stable::Unstable][i % 3];
            assert_eq!(d.committed, want);
            tags.push(d.tag);
        }
    }
    tags.sort_unstable();
    assert_eq!(tags, (1000..1008).collect::<Vec<_>>());
    assert_eq!(ch.in_flight(), 0);
    assert_eq!(ch.poll(&mut out), 0);
    for (fh, off, data) in &expect {
        let mut r = vec![0u8; data.len()];
        read_sync(ch.as_mut(), fh, *off, &mut r).unwrap();
        assert!(&r == data);
    }
}

#[test]
fn data_and_handles_survive_a_reopen() {
    let (_d, devs) = images("reopen");
    let be = open(&devs);
    let fa = lookup(&be, "a.img");
    let fb = lookup(&be, "b.img");
    let root = be.root();
    let ids = (be.getattr(&fa).unwrap().fileid, be.getattr(&fb).unwrap().fileid);
    let mut ch = be.open_channel(0).unwrap();
    let mut mem = ABuf::new(1 << 20);
    let w = mem.slice(0, 1 << 20);
    fill(w, 77, 1 << 20);
    let expect = w.to_vec();
    write_sync(ch.as_mut(), &fa, 1 << 20, w, Stable::Unstable).unwrap();
    write_sync(ch.as_mut(), &fb, 333, b"hello, nvme", Stable::Unstable).unwrap();
    flush_sync(ch.as_mut(), &fa).unwrap();
    be.commit(&fb).unwrap();
    drop(ch);
    drop(be);

    let be = open(&devs);
    assert_eq!(be.root(), root);
    assert_eq!(lookup(&be, "a.img"), fa);
    assert_eq!(lookup(&be, "b.img"), fb);
    assert_eq!((be.getattr(&fa).unwrap().fileid, be.getattr(&fb).unwrap().fileid), ids);
    let mut ch = be.open_channel(0).unwrap();
    let r = mem.slice(0, 1 << 20);
    r.fill(0);
    read_sync(ch.as_mut(), &fa, 1 << 20, r).unwrap();
    assert!(r == expect.as_slice());
    let mut s = [0u8; 11];
    read_sync(ch.as_mut(), &fb, 333, &mut s).unwrap();
    assert_eq!(&s, b"hello, nvme");
    drop(ch);
    drop(be);

    // The same devices listed in the other order: the old handles still name them.
    let rev: Vec<PathBuf> = devs.iter().rev().cloned().collect();
    let be = open(&rev);
    assert_eq!(be.getattr(&fa).unwrap().size, A_BYTES);
    assert_eq!(be.getattr(&fb).unwrap().size, B_BYTES);
    let mut ch = be.open_channel(0).unwrap();
    let mut s = [0u8; 11];
    read_sync(ch.as_mut(), &fb, 333, &mut s).unwrap();
    assert_eq!(&s, b"hello, nvme");
}

#[test]
fn open_refuses_bad_configurations() {
    let (dir, devs) = images("open");
    let other = dir.join("sub");
    std::fs::create_dir_all(&other).unwrap();
    let dup = other.join("a.img");
    File::create(&dup).unwrap().set_len(4096).unwrap();
    let e = |r: Result<NvmeBackend, FsError>| r.unwrap_err();
    assert_eq!(
        e(NvmeBackend::open("x", &[devs[0].clone(), dup], 8, true)),
        FsError::Exist
    );
    assert_eq!(
        e(NvmeBackend::open("x", &[dir.join("missing.img")], 8, true)),
        FsError::NoEnt
    );
    assert_eq!(
        e(NvmeBackend::open("x", std::slice::from_ref(&other), 8, true)),
        FsError::IsDir
    );
    assert_eq!(e(NvmeBackend::open("x", &devs, 3, true)), FsError::Inval);
    assert_eq!(e(NvmeBackend::open("x", &devs, 0, true)), FsError::Inval);
    // An empty device list is an empty directory.
    let be = NvmeBackend::open("x", &[], 8, false).unwrap();
    assert!(be.readdir(&be.root(), 2, &mut |_| panic!("empty")).unwrap());
    assert!(be.open_channel(0).unwrap().in_flight() == 0);
}

#[test]
fn channel_drop_with_io_in_flight_is_safe() {
    let (_d, devs) = images("drop");
    let be = open(&devs);
    let fa = lookup(&be, "a.img");
    let mut ch: Box<dyn IoChannel> = be.open_channel(0).unwrap();
    let mut mem = ABuf::new(1 << 20);
    let io = IoDesc {
        fh: fa,
        op: IoOp::Write(Stable::Unstable),
        offset: 0,
        buf: mem.slice(0, 1 << 20).as_mut_ptr(),
        len: 1 << 20,
        tag: 5,
    };
    // SAFETY: `mem` outlives the channel, whose drop waits for the kernel.
    unsafe { ch.submit(io).unwrap() };
    drop(ch);
    drop(mem);
}
