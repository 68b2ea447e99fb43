//! The backend conformance suite: every `Backend` and `IoChannel` behaviour
//! the NFS layer relies on, run against each backend by
//! [`conformance_tests!`] (one `#[test]` per case).
#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::Arc;

use rpcrdma_apps::backend::{
    flush_sync, read_sync, write_sync, Attr, Backend, CreateHow, DirEntry, FileHandle, FileType, FsError, IoChannel,
    IoDesc, IoDone, IoOp, NodeKind, Owner, SetAttr, SetTime, Stable, Time,
};

/// A backend under test and whatever keeps its storage alive (a temporary
/// directory), dropped after the backend.
pub struct Fixture {
    pub backend: Arc<dyn Backend>,
    pub guard: Box<dyn std::any::Any>,
}

/// Generates one `#[test]` per conformance case; `$make` is an expression
/// of type `fn() -> Fixture`.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let f: $crate::backend_common::Fixture = ($make)();
                $crate::backend_common::$case(&*f.backend);
                drop(f);
            }
        )*
    };
    ($make:expr) => {
        $crate::conformance_tests!($make;
            root_and_dots, garbage_handles_are_bad, tampered_handles_never_resolve, names_are_checked,
            create_guarded_unchecked, exclusive_create_retransmission, mkdir_rmdir_and_links,
            remove_errors_and_stale, symlink_and_readlink, mknod_kinds, hard_links_count, rename_cases,
            rename_directories, readdir_in_pieces, readdir_survives_unrelated_changes, cookie_verifier_changes,
            setattr_truncate_extend, setattr_mode_owner_times, times_follow_posix, io_sizes_round_trip,
            io_unaligned_buffers, io_eof_and_holes, io_stability_and_flush, io_errors, queue_full_jukebox,
            channels_on_two_threads, fsstat_is_sane,
        );
    };
}

pub const OWNER: Owner = Owner { uid: 1000, gid: 1001 };

pub fn unset() -> SetAttr {
    SetAttr::default()
}

pub fn mode(m: u32) -> SetAttr {
    SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    }
}

pub fn create_file(b: &dyn Backend, dir: &FileHandle, name: &[u8]) -> (FileHandle, Attr) {
    b.create(dir, name, CreateHow::Guarded(mode(0o644)), OWNER)
        .unwrap_or_else(|e| panic!("create {:?}: {e}", String::from_utf8_lossy(name)))
}

pub fn mkdir(b: &dyn Backend, dir: &FileHandle, name: &[u8]) -> (FileHandle, Attr) {
    b.mkdir(dir, name, &mode(0o755), OWNER)
        .unwrap_or_else(|e| panic!("mkdir {:?}: {e}", String::from_utf8_lossy(name)))
}

/// A buffer whose data starts at a 4096-aligned address plus `skew`.
pub struct AlignedBuf {
    v: Vec<u8>,
    off: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize, skew: usize) -> Self {
        let v = vec![0u8; len + 8192 + skew];
        let addr = v.as_ptr() as usize;
        let off = (4096 - addr % 4096) % 4096 + skew;
        AlignedBuf { v, off, len }
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.v[self.off..self.off + self.len]
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// Deterministic bytes that differ with the offset and a seed.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn write_all(ch: &mut dyn IoChannel, fh: &FileHandle, offset: u64, data: &[u8]) {
    let (n, _) = write_sync(ch, fh, offset, data, Stable::Unstable).expect("write");
    assert_eq!(n as usize, data.len(), "short write");
}

pub fn read_exact(ch: &mut dyn IoChannel, fh: &FileHandle, offset: u64, len: usize) -> (Vec<u8>, bool) {
    let mut buf = vec![0xeeu8; len];
    let (n, eof) = read_sync(ch, fh, offset, &mut buf).expect("read");
    buf.truncate(n as usize);
    (buf, eof)
}

/// Every name (and cookie) of a full listing, read `per_call` entries at a time.
pub fn list(b: &dyn Backend, dir: &FileHandle, per_call: usize) -> Vec<(Vec<u8>, u64, u64)> {
    let mut out = Vec::new();
    let mut cookie = 0;
    for _ in 0..100_000 {
        let mut taken = 0;
        let end = b
            .readdir(dir, cookie, &mut |e: DirEntry<'_>| {
                if taken == per_call {
                    return false;
                }
                taken += 1;
                assert_ne!(e.cookie, 0, "cookie 0 is reserved for the start");
                out.push((e.name.to_vec(), e.cookie, e.fileid));
                true
            })
            .expect("readdir");
        if let Some(last) = out.last() {
            cookie = last.1;
        }
        if end {
            return out;
        }
        assert!(taken > 0, "readdir made no progress");
    }
    panic!("readdir never ended");
}

fn names(l: &[(Vec<u8>, u64, u64)]) -> Vec<Vec<u8>> {
    l.iter().map(|e| e.0.clone()).collect()
}

// ---------------------------------------------------------------- cases

pub fn root_and_dots(b: &dyn Backend) {
    let root = b.root();
    assert!(root.as_bytes().len() <= 32, "handle longer than 32 bytes");
    let a = b.getattr(&root).unwrap();
    assert_eq!(a.ftype, FileType::Directory);
    assert!(a.nlink >= 2);
    let (dot, dattr) = b.lookup(&root, b".").unwrap();
    assert_eq!(dot, root);
    assert_eq!(dattr.fileid, a.fileid);
    let (up, uattr) = b.lookup(&root, b"..").unwrap();
    assert_eq!(up, root, "'..' of the root must stay in the export");
    assert_eq!(uattr.fileid, a.fileid);
    let (sub, sattr) = mkdir(b, &root, b"sub");
    assert!(sub.as_bytes().len() <= 32);
    let (up, _) = b.lookup(&sub, b"..").unwrap();
    assert_eq!(up, root);
    let (again, aattr) = b.lookup(&root, b"sub").unwrap();
    assert_eq!(again, sub, "lookup returns the same handle as mkdir");
    assert_eq!(aattr.fileid, sattr.fileid);
    assert_eq!(b.lookup(&root, b"missing").unwrap_err(), FsError::NoEnt);
    assert_eq!(b.kind(), b.kind());
}

/// Every method given handles of every length that are not ours answers
/// `BadHandle`.
pub fn garbage_handles_are_bad(b: &dyn Backend) {
    let root = b.root();
    let (file, _) = create_file(b, &root, b"f");
    let real = file.as_bytes().to_vec();
    let mut ch = b.open_channel(0).unwrap();
    for len in 0..=64usize {
        let mut candidates: Vec<Vec<u8>> = vec![vec![0u8; len], vec![0xa5u8; len], vec![0xffu8; len]];
        // A real handle cut short or with bytes appended.
        if len < real.len() {
            candidates.push(real[..len].to_vec());
        } else if len > real.len() {
            let mut v = real.clone();
            v.resize(len, 0x5a);
            candidates.push(v);
        }
        for bytes in candidates {
            let Some(fh) = FileHandle::new(&bytes) else {
                assert!(len == 0 || len > 64, "FileHandle::new refused a legal length {len}");
                continue;
            };
            let bad = |r: Result<(), FsError>, what: &str| {
                assert_eq!(
                    r,
                    Err(FsError::BadHandle),
                    "{what} with garbage handle of {len} bytes {bytes:02x?}"
                );
            };
            bad(b.getattr(&fh).map(drop), "getattr");
            bad(b.setattr(&fh, &mode(0o600)).map(drop), "setattr");
            bad(b.lookup(&fh, b"x").map(drop), "lookup");
            bad(b.readlink(&fh, &mut [0u8; 64]).map(drop), "readlink");
            bad(
                b.create(&fh, b"x", CreateHow::Unchecked(unset()), OWNER).map(drop),
                "create",
            );
            bad(b.mkdir(&fh, b"x", &unset(), OWNER).map(drop), "mkdir");
            bad(b.symlink(&fh, b"x", b"t", &unset(), OWNER).map(drop), "symlink");
            bad(b.mknod(&fh, b"x", NodeKind::Fifo, &unset(), OWNER).map(drop), "mknod");
            bad(b.remove(&fh, b"f"), "remove");
            bad(b.rmdir(&fh, b"x"), "rmdir");
            bad(b.rename(&fh, b"f", &root, b"g"), "rename from");
            bad(b.rename(&root, b"f", &fh, b"g"), "rename to");
            bad(b.link(&fh, &root, b"l"), "link file");
            bad(b.link(&file, &fh, b"l"), "link dir");
            bad(b.readdir(&fh, 0, &mut |_| true).map(drop), "readdir");
            bad(b.cookie_verifier(&fh).map(drop), "cookie_verifier");
            bad(b.commit(&fh), "commit");
            let mut buf = [0u8; 16];
            bad(read_sync(&mut *ch, &fh, 0, &mut buf).map(drop), "read");
            bad(write_sync(&mut *ch, &fh, 0, &buf, Stable::FileSync).map(drop), "write");
            bad(flush_sync(&mut *ch, &fh), "flush");
        }
    }
    // Nothing happened to the namespace.
    assert!(b.lookup(&root, b"f").is_ok());
    assert_eq!(b.lookup(&root, b"g").unwrap_err(), FsError::NoEnt);
}

/// A real handle with any one byte changed never names another file.
pub fn tampered_handles_never_resolve(b: &dyn Backend) {
    let root = b.root();
    let (file, fattr) = create_file(b, &root, b"target");
    let (other, _) = create_file(b, &root, b"other");
    let real = file.as_bytes().to_vec();
    for i in 0..real.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut v = real.clone();
            v[i] ^= flip;
            let fh = FileHandle::new(&v).unwrap();
            if fh == other {
                continue;
            }
            match b.getattr(&fh) {
                Err(FsError::BadHandle) | Err(FsError::Stale) => {}
                Ok(a) => panic!("tampered handle (byte {i} ^ {flip:#x}) resolved to fileid {}", a.fileid),
                Err(e) => panic!("tampered handle gave {e:?}"),
            }
        }
    }
    assert_eq!(b.getattr(&file).unwrap().fileid, fattr.fileid);
}

pub fn names_are_checked(b: &dyn Backend) {
    let root = b.root();
    let long = vec![b'a'; 256];
    let max = vec![b'b'; 255];
    assert_eq!(
        b.create(&root, &long, CreateHow::Guarded(unset()), OWNER).unwrap_err(),
        FsError::NameTooLong
    );
    assert_eq!(b.lookup(&root, &long).unwrap_err(), FsError::NameTooLong);
    create_file(b, &root, &max);
    assert!(b.lookup(&root, &max).is_ok());
    for bad in [&b""[..], b"a/b", b"/", b"a\0b"] {
        assert_eq!(
            b.create(&root, bad, CreateHow::Guarded(unset()), OWNER).unwrap_err(),
            FsError::Inval,
            "name {bad:?}"
        );
        assert_eq!(b.mkdir(&root, bad, &unset(), OWNER).unwrap_err(), FsError::Inval);
        assert!(b.lookup(&root, bad).is_err());
    }
    // `..` components cannot walk out: "sub/../x" is refused as a name.
    mkdir(b, &root, b"sub");
    assert_eq!(b.lookup(&root, b"sub/..").unwrap_err(), FsError::Inval);
    for dots in [&b"."[..], b".."] {
        assert_eq!(
            b.create(&root, dots, CreateHow::Guarded(unset()), OWNER).unwrap_err(),
            FsError::Exist
        );
        assert_eq!(b.mkdir(&root, dots, &unset(), OWNER).unwrap_err(), FsError::Exist);
        assert_eq!(b.remove(&root, dots).unwrap_err(), FsError::Inval);
    }
}

pub fn create_guarded_unchecked(b: &dyn Backend) {
    let root = b.root();
    let (fh, a) = b.create(&root, b"g", CreateHow::Guarded(mode(0o640)), OWNER).unwrap();
    assert_eq!(a.ftype, FileType::Regular);
    assert_eq!(a.mode & 0o7777, 0o640);
    assert_eq!((a.uid, a.gid), (OWNER.uid, OWNER.gid));
    assert_eq!(a.size, 0);
    assert_eq!(a.nlink, 1);
    assert_eq!(
        b.create(&root, b"g", CreateHow::Guarded(unset()), OWNER).unwrap_err(),
        FsError::Exist
    );
    let mut ch = b.open_channel(0).unwrap();
    write_all(&mut *ch, &fh, 0, b"hello world");
    // Unchecked on an existing file: same file; a size in the attributes truncates.
    let (fh2, a2) = b.create(&root, b"g", CreateHow::Unchecked(unset()), OWNER).unwrap();
    assert_eq!(fh2, fh);
    assert_eq!(a2.size, 11);
    let set = SetAttr {
        size: Some(0),
        ..unset()
    };
    let (fh3, a3) = b.create(&root, b"g", CreateHow::Unchecked(set), OWNER).unwrap();
    assert_eq!(fh3, fh);
    assert_eq!(a3.size, 0);
    // Unchecked creates when missing.
    let (_, a4) = b.create(&root, b"u", CreateHow::Unchecked(mode(0o600)), OWNER).unwrap();
    assert_eq!(a4.mode & 0o7777, 0o600);
    // Unchecked over a directory is refused.
    mkdir(b, &root, b"d");
    assert!(b.create(&root, b"d", CreateHow::Unchecked(unset()), OWNER).is_err());
    // Creating inside a file.
    assert_eq!(
        b.create(&fh, b"x", CreateHow::Guarded(unset()), OWNER).unwrap_err(),
        FsError::NotDir
    );
    assert_eq!(b.mkdir(&fh, b"x", &unset(), OWNER).unwrap_err(), FsError::NotDir);
    assert_eq!(b.lookup(&fh, b"x").unwrap_err(), FsError::NotDir);
    assert_eq!(b.readdir(&fh, 0, &mut |_| true).unwrap_err(), FsError::NotDir);
}

pub fn exclusive_create_retransmission(b: &dyn Backend) {
    let root = b.root();
    let v1 = *b"verf-one";
    let v2 = *b"verf-two";
    let (fh, a) = b.create(&root, b"x", CreateHow::Exclusive(v1), OWNER).unwrap();
    assert_eq!(a.ftype, FileType::Regular);
    assert_eq!((a.uid, a.gid), (OWNER.uid, OWNER.gid));
    // The retransmission gets the same file.
    let (again, a2) = b.create(&root, b"x", CreateHow::Exclusive(v1), OWNER).unwrap();
    assert_eq!(again, fh);
    assert_eq!(a2.fileid, a.fileid);
    // Another client's create does not.
    assert_eq!(
        b.create(&root, b"x", CreateHow::Exclusive(v2), OWNER).unwrap_err(),
        FsError::Exist
    );
    // An ordinary file of that name is not an exclusive create's result.
    create_file(b, &root, b"plain");
    assert_eq!(
        b.create(&root, b"plain", CreateHow::Exclusive(v1), OWNER).unwrap_err(),
        FsError::Exist
    );
    // The client then sets the attributes; the file stays usable.
    let a3 = b
        .setattr(
            &fh,
            &SetAttr {
                mode: Some(0o640),
                mtime: SetTime::ServerTime,
                atime: SetTime::ServerTime,
                ..unset()
            },
        )
        .unwrap();
    assert_eq!(a3.mode & 0o7777, 0o640);
}

pub fn mkdir_rmdir_and_links(b: &dyn Backend) {
    let root = b.root();
    let before = b.getattr(&root).unwrap().nlink;
    let (d, da) = b.mkdir(&root, b"d", &mode(0o750), OWNER).unwrap();
    assert_eq!(da.ftype, FileType::Directory);
    assert_eq!(da.mode & 0o7777, 0o750);
    assert_eq!(da.nlink, 2);
    assert_eq!((da.uid, da.gid), (OWNER.uid, OWNER.gid));
    assert_eq!(
        b.getattr(&root).unwrap().nlink,
        before + 1,
        "a subdirectory's '..' links the parent"
    );
    assert_eq!(b.mkdir(&root, b"d", &unset(), OWNER).unwrap_err(), FsError::Exist);
    mkdir(b, &d, b"e");
    assert_eq!(b.getattr(&d).unwrap().nlink, 3);
    let (f, _) = create_file(b, &d, b"f");
    assert_eq!(b.rmdir(&root, b"d").unwrap_err(), FsError::NotEmpty);
    assert_eq!(b.rmdir(&d, b"f").unwrap_err(), FsError::NotDir);
    assert_eq!(b.remove(&d, b"e").unwrap_err(), FsError::IsDir);
    assert_eq!(b.rmdir(&d, b"nope").unwrap_err(), FsError::NoEnt);
    assert_eq!(b.rmdir(&d, b".").unwrap_err(), FsError::Inval);
    b.rmdir(&d, b"e").unwrap();
    assert_eq!(b.getattr(&d).unwrap().nlink, 2);
    b.remove(&d, b"f").unwrap();
    assert_eq!(b.getattr(&f).unwrap_err(), FsError::Stale);
    b.rmdir(&root, b"d").unwrap();
    assert_eq!(b.getattr(&root).unwrap().nlink, before);
    assert_eq!(b.getattr(&d).unwrap_err(), FsError::Stale);
    assert_eq!(b.lookup(&d, b"x").unwrap_err(), FsError::Stale);
    assert_eq!(
        b.create(&d, b"x", CreateHow::Guarded(unset()), OWNER).unwrap_err(),
        FsError::Stale
    );
    assert_eq!(b.lookup(&root, b"d").unwrap_err(), FsError::NoEnt);
}

pub fn remove_errors_and_stale(b: &dyn Backend) {
    let root = b.root();
    let (f, _) = create_file(b, &root, b"f");
    assert_eq!(b.remove(&root, b"nope").unwrap_err(), FsError::NoEnt);
    assert_eq!(b.remove(&f, b"x").unwrap_err(), FsError::NotDir);
    b.remove(&root, b"f").unwrap();
    assert_eq!(b.remove(&root, b"f").unwrap_err(), FsError::NoEnt);
    assert_eq!(b.getattr(&f).unwrap_err(), FsError::Stale);
    assert_eq!(b.setattr(&f, &mode(0o600)).unwrap_err(), FsError::Stale);
    assert_eq!(b.commit(&f).unwrap_err(), FsError::Stale);
    assert_eq!(b.link(&f, &root, b"again").unwrap_err(), FsError::Stale);
    // A new file of the same name is another file.
    let (g, _) = create_file(b, &root, b"f");
    assert_ne!(g, f);
    assert_eq!(b.getattr(&f).unwrap_err(), FsError::Stale);
}

pub fn symlink_and_readlink(b: &dyn Backend) {
    let root = b.root();
    let (s, a) = b.symlink(&root, b"s", b"../some/where", &unset(), OWNER).unwrap();
    assert_eq!(a.ftype, FileType::Symlink);
    assert_eq!(a.size, 13);
    assert_eq!((a.uid, a.gid), (OWNER.uid, OWNER.gid));
    let mut out = [0u8; 64];
    let n = b.readlink(&s, &mut out).unwrap();
    assert_eq!(&out[..n], b"../some/where");
    assert_eq!(b.readlink(&s, &mut [0u8; 4]).unwrap_err(), FsError::TooSmall);
    let (f, _) = create_file(b, &root, b"f");
    assert_eq!(b.readlink(&f, &mut out).unwrap_err(), FsError::Inval);
    assert_eq!(b.readlink(&root, &mut out).unwrap_err(), FsError::Inval);
    assert_eq!(
        b.symlink(&root, b"s", b"x", &unset(), OWNER).unwrap_err(),
        FsError::Exist
    );
    // Lookups never follow links: a link to "/" stays a link.
    b.symlink(&root, b"esc", b"/", &unset(), OWNER).unwrap();
    let (esc, ea) = b.lookup(&root, b"esc").unwrap();
    assert_eq!(ea.ftype, FileType::Symlink);
    assert_eq!(b.lookup(&esc, b"etc").unwrap_err(), FsError::NotDir);
    // The longest target Linux takes (PATH_MAX less the NUL).
    let long = vec![b'x'; 4095];
    let (l, la) = b.symlink(&root, b"long", &long, &unset(), OWNER).unwrap();
    assert_eq!(la.size, 4095);
    let mut big = vec![0u8; 4096];
    assert_eq!(b.readlink(&l, &mut big).unwrap(), 4095);
    assert_eq!(big[..4095], long[..]);
}

pub fn mknod_kinds(b: &dyn Backend) {
    let root = b.root();
    let cases = [
        (&b"c"[..], NodeKind::Char { major: 1, minor: 3 }, FileType::Char, (1, 3)),
        (
            b"b",
            NodeKind::Block { major: 7, minor: 200 },
            FileType::Block,
            (7, 200),
        ),
        (b"p", NodeKind::Fifo, FileType::Fifo, (0, 0)),
        (b"s", NodeKind::Socket, FileType::Socket, (0, 0)),
    ];
    for (name, kind, ftype, rdev) in cases {
        let (fh, a) = b.mknod(&root, name, kind, &mode(0o640), OWNER).unwrap();
        assert_eq!(a.ftype, ftype, "{name:?}");
        assert_eq!(a.mode & 0o7777, 0o640);
        assert_eq!((a.uid, a.gid), (OWNER.uid, OWNER.gid));
        if matches!(ftype, FileType::Char | FileType::Block) {
            assert_eq!(a.rdev, rdev);
        }
        let (l, la) = b.lookup(&root, name).unwrap();
        assert_eq!(l, fh);
        assert_eq!(la.ftype, ftype);
        assert_eq!(b.mknod(&root, name, kind, &unset(), OWNER).unwrap_err(), FsError::Exist);
        // Data I/O on a device node is refused (and must not open the device).
        let mut ch = b.open_channel(0).unwrap();
        assert_eq!(
            read_sync(&mut *ch, &fh, 0, &mut [0u8; 8]).unwrap_err(),
            FsError::Inval,
            "{name:?}"
        );
        b.remove(&root, name).unwrap();
        assert_eq!(b.getattr(&fh).unwrap_err(), FsError::Stale);
    }
}

pub fn hard_links_count(b: &dyn Backend) {
    let root = b.root();
    let (f, fa) = create_file(b, &root, b"f");
    let (d, _) = mkdir(b, &root, b"d");
    let mut ch = b.open_channel(0).unwrap();
    write_all(&mut *ch, &f, 0, b"linked data");
    b.link(&f, &d, b"g").unwrap();
    let (g, ga) = b.lookup(&d, b"g").unwrap();
    assert_eq!(ga.fileid, fa.fileid);
    assert_eq!(ga.nlink, 2);
    assert_eq!(b.getattr(&f).unwrap().nlink, 2);
    assert_eq!(g, f, "one file, one handle");
    assert_eq!(b.link(&f, &d, b"g").unwrap_err(), FsError::Exist);
    assert_eq!(b.link(&d, &root, b"dl").unwrap_err(), FsError::IsDir);
    assert_eq!(b.link(&f, &f, b"x").unwrap_err(), FsError::NotDir);
    b.remove(&root, b"f").unwrap();
    let a = b.getattr(&g).unwrap();
    assert_eq!(a.nlink, 1);
    assert_eq!(read_exact(&mut *ch, &g, 0, 64).0, b"linked data");
    b.remove(&d, b"g").unwrap();
    assert_eq!(b.getattr(&g).unwrap_err(), FsError::Stale);
}

pub fn rename_cases(b: &dyn Backend) {
    let root = b.root();
    let (a, aa) = create_file(b, &root, b"a");
    let (c, _) = create_file(b, &root, b"c");
    let mut ch = b.open_channel(0).unwrap();
    write_all(&mut *ch, &a, 0, b"from a");
    write_all(&mut *ch, &c, 0, b"from c, longer");
    b.rename(&root, b"a", &root, b"b").unwrap();
    assert_eq!(b.lookup(&root, b"a").unwrap_err(), FsError::NoEnt);
    let (bh, ba) = b.lookup(&root, b"b").unwrap();
    assert_eq!(ba.fileid, aa.fileid);
    assert_eq!(bh, a, "rename keeps the handle");
    // Over an existing file: the target is replaced and its handle goes stale.
    b.rename(&root, b"b", &root, b"c").unwrap();
    assert_eq!(b.lookup(&root, b"b").unwrap_err(), FsError::NoEnt);
    let (ch_, ca) = b.lookup(&root, b"c").unwrap();
    assert_eq!(ca.fileid, aa.fileid);
    assert_eq!(ch_, a);
    assert_eq!(read_exact(&mut *ch, &a, 0, 64).0, b"from a");
    assert_eq!(b.getattr(&c).unwrap_err(), FsError::Stale);
    // Missing source, bad names.
    assert_eq!(b.rename(&root, b"zz", &root, b"y").unwrap_err(), FsError::NoEnt);
    assert_eq!(b.rename(&root, b"c", &root, b"..").unwrap_err(), FsError::Inval);
    assert_eq!(b.rename(&root, b"c", &root, b"a/b").unwrap_err(), FsError::Inval);
    // File over directory and directory over file.
    mkdir(b, &root, b"dir");
    assert_eq!(b.rename(&root, b"c", &root, b"dir").unwrap_err(), FsError::IsDir);
    assert_eq!(b.rename(&root, b"dir", &root, b"c").unwrap_err(), FsError::NotDir);
    // Two links of one file: nothing happens.
    b.link(&a, &root, b"c2").unwrap();
    b.rename(&root, b"c", &root, b"c2").unwrap();
    assert!(b.lookup(&root, b"c").is_ok());
    assert!(b.lookup(&root, b"c2").is_ok());
    assert_eq!(b.getattr(&a).unwrap().nlink, 2);
    // Renaming onto itself.
    b.rename(&root, b"c", &root, b"c").unwrap();
    assert!(b.lookup(&root, b"c").is_ok());
    // Rename into a file.
    assert_eq!(b.rename(&root, b"c", &a, b"x").unwrap_err(), FsError::NotDir);
}

pub fn rename_directories(b: &dyn Backend) {
    let root = b.root();
    let n0 = b.getattr(&root).unwrap().nlink;
    let (x, _) = mkdir(b, &root, b"x");
    let (y, _) = mkdir(b, &root, b"y");
    let (sub, _) = mkdir(b, &x, b"sub");
    create_file(b, &sub, b"inside");
    assert_eq!(b.getattr(&root).unwrap().nlink, n0 + 2);
    // Across directories: '..' follows, link counts move.
    b.rename(&x, b"sub", &y, b"moved").unwrap();
    let (m, _) = b.lookup(&y, b"moved").unwrap();
    assert_eq!(m, sub);
    assert_eq!(b.lookup(&sub, b"..").unwrap().0, y);
    assert_eq!(b.getattr(&x).unwrap().nlink, 2);
    assert_eq!(b.getattr(&y).unwrap().nlink, 3);
    assert!(b.lookup(&sub, b"inside").is_ok());
    // Into itself or below itself.
    assert_eq!(b.rename(&root, b"y", &sub, b"loop").unwrap_err(), FsError::Inval);
    assert_eq!(b.rename(&root, b"y", &y, b"loop").unwrap_err(), FsError::Inval);
    // Over a non-empty directory, then over an empty one.
    assert_eq!(b.rename(&root, b"x", &y, b"moved").unwrap_err(), FsError::NotEmpty);
    let (e, _) = mkdir(b, &root, b"empty");
    b.rename(&root, b"x", &root, b"empty").unwrap();
    assert_eq!(b.lookup(&root, b"empty").unwrap().0, x);
    assert_eq!(b.getattr(&e).unwrap_err(), FsError::Stale);
    assert_eq!(b.getattr(&root).unwrap().nlink, n0 + 2);
}

pub fn readdir_in_pieces(b: &dyn Backend) {
    let root = b.root();
    let (d, da) = mkdir(b, &root, b"d");
    let mut want = HashSet::new();
    for i in 0..50 {
        let name = format!("file-{i:03}").into_bytes();
        create_file(b, &d, &name);
        want.insert(name);
    }
    mkdir(b, &d, b"subdir");
    want.insert(b"subdir".to_vec());
    for per_call in [1usize, 7, 1000] {
        let l = list(b, &d, per_call);
        assert_eq!(l[0].0, b".", "'.' first");
        assert_eq!(l[1].0, b"..", "'..' second");
        assert_eq!(l[0].2, da.fileid);
        assert_eq!(l[1].2, b.getattr(&root).unwrap().fileid);
        let got: Vec<_> = names(&l[2..]);
        let set: HashSet<_> = got.iter().cloned().collect();
        assert_eq!(set.len(), got.len(), "duplicates with {per_call} per call");
        assert_eq!(set, want, "entries with {per_call} per call");
        let cookies: HashSet<u64> = l.iter().map(|e| e.1).collect();
        assert_eq!(cookies.len(), l.len(), "cookies are distinct");
    }
    // Handles and attributes given with entries are right.
    b.readdir(&d, 0, &mut |e: DirEntry<'_>| {
        if e.name != b"." && e.name != b".." {
            let (fh, a) = b.lookup(&d, e.name).unwrap();
            if let Some(h) = e.handle {
                assert_eq!(h, fh);
            }
            if let Some(ea) = e.attr {
                assert_eq!(ea.fileid, a.fileid);
                assert_eq!(ea.ftype, a.ftype);
            }
            assert_eq!(e.fileid, a.fileid);
        }
        true
    })
    .unwrap();
    // Resuming from the last cookie gives nothing more.
    let l = list(b, &d, 1000);
    let mut more = 0;
    assert!(b
        .readdir(&d, l.last().unwrap().1, &mut |_| {
            more += 1;
            true
        })
        .unwrap());
    assert_eq!(more, 0);
    // A sink that refuses the first entry: not at the end.
    assert!(!b.readdir(&d, 0, &mut |_| false).unwrap());
    // An empty directory lists '.' and '..' only.
    let (e, _) = mkdir(b, &root, b"e");
    assert_eq!(names(&list(b, &e, 10)), vec![b".".to_vec(), b"..".to_vec()]);
}

/// A listing interrupted by creates and removes of other entries neither
/// repeats nor loses the entries that were there all along.
pub fn readdir_survives_unrelated_changes(b: &dyn Backend) {
    let root = b.root();
    let (d, _) = mkdir(b, &root, b"d");
    for i in 0..40 {
        create_file(b, &d, format!("n{i}").as_bytes());
    }
    let mut seen = Vec::new();
    let mut cookie = 0;
    let mut end = false;
    let mut round = 0;
    while !end {
        let mut taken = 0;
        end = b
            .readdir(&d, cookie, &mut |e: DirEntry<'_>| {
                if taken == 5 {
                    return false;
                }
                taken += 1;
                seen.push(e.name.to_vec());
                cookie = e.cookie;
                true
            })
            .unwrap();
        // Between calls: remove an entry already seen, add new ones.
        if let Some(name) = seen.iter().rev().find(|n| n.starts_with(b"n")).cloned() {
            if b.lookup(&d, &name).is_ok() {
                b.remove(&d, &name).unwrap();
            }
        }
        create_file(b, &d, format!("new{round}").as_bytes());
        round += 1;
        assert!(round < 1000);
    }
    let seen_set: HashSet<_> = seen.iter().cloned().collect();
    let dups: Vec<_> = seen
        .iter()
        .filter(|n| n.starts_with(b"n"))
        .filter(|n| seen.iter().filter(|m| m == n).count() > 1)
        .collect();
    assert!(dups.is_empty(), "entries listed twice: {dups:?}");
    for i in 0..40 {
        let name = format!("n{i}").into_bytes();
        assert!(seen_set.contains(&name), "n{i} was never listed");
    }
}

pub fn cookie_verifier_changes(b: &dyn Backend) {
    let root = b.root();
    let (d, _) = mkdir(b, &root, b"d");
    let v0 = b.cookie_verifier(&d).unwrap();
    assert_eq!(b.cookie_verifier(&d).unwrap(), v0, "stable without changes");
    create_file(b, &d, b"a");
    let v1 = b.cookie_verifier(&d).unwrap();
    assert_ne!(v1, v0, "create changes the verifier");
    b.rename(&d, b"a", &d, b"b").unwrap();
    let v2 = b.cookie_verifier(&d).unwrap();
    assert_ne!(v2, v1, "rename changes the verifier");
    b.remove(&d, b"b").unwrap();
    let v3 = b.cookie_verifier(&d).unwrap();
    assert_ne!(v3, v2, "remove changes the verifier");
    let (f, _) = create_file(b, &root, b"f");
    assert_eq!(b.cookie_verifier(&f).unwrap_err(), FsError::NotDir);
}

pub fn setattr_truncate_extend(b: &dyn Backend) {
    let root = b.root();
    let (f, _) = create_file(b, &root, b"f");
    let mut ch = b.open_channel(0).unwrap();
    let data = pattern(10_000, 1);
    write_all(&mut *ch, &f, 0, &data);
    assert_eq!(b.getattr(&f).unwrap().size, 10_000);
    let a = b
        .setattr(
            &f,
            &SetAttr {
                size: Some(5_000),
                ..unset()
            },
        )
        .unwrap();
    assert_eq!(a.size, 5_000);
    let a = b
        .setattr(
            &f,
            &SetAttr {
                size: Some(20_000),
                ..unset()
            },
        )
        .unwrap();
    assert_eq!(a.size, 20_000);
    let (got, eof) = read_exact(&mut *ch, &f, 0, 20_000);
    assert!(eof);
    assert_eq!(got.len(), 20_000);
    assert_eq!(&got[..5_000], &data[..5_000]);
    assert!(got[5_000..].iter().all(|&x| x == 0), "extension reads zeros");
    // Truncate to zero, then write past a hole.
    b.setattr(
        &f,
        &SetAttr {
            size: Some(0),
            ..unset()
        },
    )
    .unwrap();
    write_all(&mut *ch, &f, 100, b"xyz");
    let (got, _) = read_exact(&mut *ch, &f, 0, 200);
    assert_eq!(got.len(), 103);
    assert!(got[..100].iter().all(|&x| x == 0));
    assert_eq!(&got[100..], b"xyz");
    let (d, _) = mkdir(b, &root, b"d");
    assert_eq!(
        b.setattr(
            &d,
            &SetAttr {
                size: Some(0),
                ..unset()
            }
        )
        .unwrap_err(),
        FsError::IsDir
    );
}

pub fn setattr_mode_owner_times(b: &dyn Backend) {
    let root = b.root();
    let (f, _) = create_file(b, &root, b"f");
    let a = b.setattr(&f, &mode(0o4711)).unwrap();
    assert_eq!(a.mode & 0o7777, 0o4711);
    let a = b
        .setattr(
            &f,
            &SetAttr {
                uid: Some(4242),
                gid: Some(4343),
                ..unset()
            },
        )
        .unwrap();
    assert_eq!((a.uid, a.gid), (4242, 4343));
    let t1 = Time {
        secs: 1_000_000,
        nsecs: 5_000,
    };
    let t2 = Time {
        secs: 2_000_000,
        nsecs: 0,
    };
    let a = b
        .setattr(
            &f,
            &SetAttr {
                atime: SetTime::Client(t1),
                mtime: SetTime::Client(t2),
                ..unset()
            },
        )
        .unwrap();
    assert_eq!(a.atime, t1);
    assert_eq!(a.mtime, t2);
    assert!(a.ctime > t2, "ctime is the server's clock");
    let a = b
        .setattr(
            &f,
            &SetAttr {
                mtime: SetTime::ServerTime,
                ..unset()
            },
        )
        .unwrap();
    assert!(a.mtime > t2);
    assert_eq!(b.getattr(&f).unwrap(), a);
    // A directory's mode and owner.
    let (d, _) = mkdir(b, &root, b"d");
    let a = b
        .setattr(
            &d,
            &SetAttr {
                mode: Some(0o700),
                uid: Some(7),
                ..unset()
            },
        )
        .unwrap();
    assert_eq!(a.mode & 0o7777, 0o700);
    assert_eq!(a.uid, 7);
}

pub fn times_follow_posix(b: &dyn Backend) {
    let root = b.root();
    let old = Time { secs: 1_000, nsecs: 0 };
    let set_old = SetAttr {
        atime: SetTime::Client(old),
        mtime: SetTime::Client(old),
        ..unset()
    };
    let (d, _) = mkdir(b, &root, b"d");
    let (f, _) = create_file(b, &d, b"f");
    // Write: mtime and ctime of the file move.
    b.setattr(&f, &set_old).unwrap();
    let c0 = b.getattr(&f).unwrap().ctime;
    let mut ch = b.open_channel(0).unwrap();
    write_all(&mut *ch, &f, 0, b"data");
    let a = b.getattr(&f).unwrap();
    assert!(a.mtime > old, "write updates mtime");
    assert!(a.ctime >= c0, "write updates ctime");
    // Truncate moves mtime.
    b.setattr(&f, &set_old).unwrap();
    let a = b
        .setattr(
            &f,
            &SetAttr {
                size: Some(1),
                ..unset()
            },
        )
        .unwrap();
    assert!(a.mtime > old, "truncate updates mtime");
    // Entry changes move the directory's mtime; link moves the file's ctime.
    for step in 0..5 {
        b.setattr(&d, &set_old).unwrap();
        b.setattr(&f, &set_old).unwrap();
        match step {
            0 => drop(create_file(b, &d, b"g")),
            1 => b.rename(&d, b"g", &d, b"h").unwrap(),
            2 => b.remove(&d, b"h").unwrap(),
            3 => b.link(&f, &d, b"f2").unwrap(),
            _ => drop(mkdir(b, &d, b"sub")),
        }
        let da = b.getattr(&d).unwrap();
        assert!(da.mtime > old, "step {step} updates the directory's mtime");
        assert!(da.ctime > old, "step {step} updates the directory's ctime");
        if step == 3 {
            let fa = b.getattr(&f).unwrap();
            assert_eq!(fa.mtime, old, "link does not change the file's mtime");
            assert!(fa.ctime > old, "link changes the file's ctime");
        }
    }
}

const SIZES: [usize; 10] = [1, 2, 511, 512, 4095, 4096, 4097, 65_536, 300_001, 1 << 20];

/// Writes and reads of 1 byte to 1 MiB at aligned and unaligned offsets,
/// from 4096-aligned buffers (the O_DIRECT path where the backend has one).
pub fn io_sizes_round_trip(b: &dyn Backend) {
    let root = b.root();
    let mut ch = b.open_channel(0).unwrap();
    for (i, &len) in SIZES.iter().enumerate() {
        for offset in [0u64, 4096, 1 << 20, 3, 4097] {
            let name = format!("s{len}-{offset}");
            let (f, _) = create_file(b, &root, name.as_bytes());
            let data = pattern(len, (i as u64) << 8 | offset);
            let mut wbuf = AlignedBuf::new(len, 0);
            wbuf.as_mut_slice().copy_from_slice(&data);
            let (n, _) = write_sync(&mut *ch, &f, offset, wbuf.as_slice(), Stable::Unstable).unwrap();
            assert_eq!(n as usize, len);
            assert_eq!(b.getattr(&f).unwrap().size, offset + len as u64);
            let mut rbuf = AlignedBuf::new(len, 0);
            let (n, eof) = read_sync(&mut *ch, &f, offset, rbuf.as_mut_slice()).unwrap();
            assert_eq!(n as usize, len, "{name}");
            assert!(eof, "{name}: a read to the end of the file reports eof");
            assert!(rbuf.as_slice() == &data[..], "{name}: data differs");
            if offset > 0 {
                let (head, _) = read_exact(&mut *ch, &f, 0, offset.min(8192) as usize);
                assert!(head.iter().all(|&x| x == 0), "{name}: hole before the data");
            }
            b.remove(&root, name.as_bytes()).unwrap();
        }
    }
}

/// The same through buffers at odd addresses (no O_DIRECT possible).
pub fn io_unaligned_buffers(b: &dyn Backend) {
    let root = b.root();
    let (f, _) = create_file(b, &root, b"u");
    let mut ch = b.open_channel(0).unwrap();
    let mut expect = vec![0u8; 0];
    for (i, &len) in SIZES.iter().enumerate() {
        for skew in [1usize, 7, 512] {
            for offset in [0u64, 8192] {
                let data = pattern(len, i as u64 * 31 + skew as u64);
                let mut wbuf = AlignedBuf::new(len, skew);
                wbuf.as_mut_slice().copy_from_slice(&data);
                write_sync(&mut *ch, &f, offset, wbuf.as_slice(), Stable::FileSync).unwrap();
                let end = offset as usize + len;
                if expect.len() < end {
                    expect.resize(end, 0);
                }
                expect[offset as usize..end].copy_from_slice(&data);
                let mut rbuf = AlignedBuf::new(len, skew);
                let (n, _) = read_sync(&mut *ch, &f, offset, rbuf.as_mut_slice()).unwrap();
                assert_eq!(n as usize, len);
                assert!(rbuf.as_slice() == &data[..], "len {len} skew {skew} offset {offset}");
            }
        }
    }
    let (all, eof) = read_exact(&mut *ch, &f, 0, expect.len() + 10);
    assert!(eof);
    assert!(all == expect, "whole file differs");
}

pub fn io_eof_and_holes(b: &dyn Backend) {
    let root = b.root();
    let (f, _) = create_file(b, &root, b"f");
    let mut ch = b.open_channel(0).unwrap();
    // Empty file.
    let (got, eof) = read_exact(&mut *ch, &f, 0, 100);
    assert!(got.is_empty() && eof);
    write_all(&mut *ch, &f, 0, &pattern(1000, 9));
    // Inside: no eof.
    let (got, eof) = read_exact(&mut *ch, &f, 0, 500);
    assert_eq!(got.len(), 500);
    assert!(!eof, "a read ending before the end of file is not eof");
    // Crossing the end: short and eof.
    let (got, eof) = read_exact(&mut *ch, &f, 900, 500);
    assert_eq!(got, pattern(1000, 9)[900..]);
    assert!(eof);
    // Exactly at the end, and past it.
    for off in [1000u64, 1001, 1 << 40] {
        let (got, eof) = read_exact(&mut *ch, &f, off, 10);
        assert!(got.is_empty(), "read at {off}");
        assert!(eof, "read at {off}");
    }
    // Zero-length read and write.
    let (n, _) = read_sync(&mut *ch, &f, 0, &mut []).unwrap();
    assert_eq!(n, 0);
    let (n, _) = write_sync(&mut *ch, &f, 0, &[], Stable::Unstable).unwrap();
    assert_eq!(n, 0);
    assert_eq!(b.getattr(&f).unwrap().size, 1000);
    // A sparse file: the hole reads zeros.
    let (s, _) = create_file(b, &root, b"sparse");
    write_all(&mut *ch, &s, 10 << 20, b"end");
    let a = b.getattr(&s).unwrap();
    assert_eq!(a.size, (10 << 20) + 3);
    let mut buf = AlignedBuf::new(1 << 20, 0);
    buf.as_mut_slice().fill(0xcc);
    let (n, eof) = read_sync(&mut *ch, &s, 4 << 20, buf.as_mut_slice()).unwrap();
    assert_eq!(n, 1 << 20);
    assert!(!eof);
    assert!(buf.as_slice().iter().all(|&x| x == 0), "holes read as zeros");
    assert!(a.used < a.size, "a hole uses no space ({} used of {})", a.used, a.size);
}

pub fn io_stability_and_flush(b: &dyn Backend) {
    let root = b.root();
    let (f, _) = create_file(b, &root, b"f");
    let mut ch = b.open_channel(0).unwrap();
    for stable in [Stable::Unstable, Stable::DataSync, Stable::FileSync] {
        let mut buf = AlignedBuf::new(8192, 0);
        buf.as_mut_slice().copy_from_slice(&pattern(8192, stable as u64));
        let (n, committed) = write_sync(&mut *ch, &f, 0, buf.as_slice(), stable).unwrap();
        assert_eq!(n, 8192);
        assert!(committed >= stable, "asked {stable:?}, got {committed:?}");
        // Unaligned too.
        let (n, committed) = write_sync(&mut *ch, &f, 3, &pattern(100, 3), stable).unwrap();
        assert_eq!(n, 100);
        assert!(committed >= stable, "asked {stable:?}, got {committed:?}");
    }
    flush_sync(&mut *ch, &f).unwrap();
    b.commit(&f).unwrap();
    b.sync_all().unwrap();
}

pub fn io_errors(b: &dyn Backend) {
    let root = b.root();
    let mut ch = b.open_channel(0).unwrap();
    let (d, _) = mkdir(b, &root, b"d");
    assert_eq!(read_sync(&mut *ch, &d, 0, &mut [0u8; 8]).unwrap_err(), FsError::IsDir);
    assert_eq!(
        write_sync(&mut *ch, &d, 0, b"x", Stable::Unstable).unwrap_err(),
        FsError::IsDir
    );
    let (s, _) = b.symlink(&root, b"s", b"target", &unset(), OWNER).unwrap();
    assert_eq!(read_sync(&mut *ch, &s, 0, &mut [0u8; 8]).unwrap_err(), FsError::Inval);
    let (f, _) = create_file(b, &root, b"f");
    write_all(&mut *ch, &f, 0, b"abc");
    // Removed while the channel may cache it: stale.
    b.remove(&root, b"f").unwrap();
    assert_eq!(read_sync(&mut *ch, &f, 0, &mut [0u8; 8]).unwrap_err(), FsError::Stale);
    assert_eq!(
        write_sync(&mut *ch, &f, 0, b"x", Stable::FileSync).unwrap_err(),
        FsError::Stale
    );
    assert_eq!(flush_sync(&mut *ch, &f).unwrap_err(), FsError::Stale);
    // Past the largest file size.
    let (g, _) = create_file(b, &root, b"g");
    assert_eq!(
        write_sync(&mut *ch, &g, u64::MAX - 1, b"xy", Stable::Unstable).unwrap_err(),
        FsError::FBig
    );
    assert_eq!(ch.in_flight(), 0);
}

/// Submitting without polling fills the channel: `Jukebox`, then every
/// submitted I/O completes exactly once and the channel takes more.
pub fn queue_full_jukebox(b: &dyn Backend) {
    let root = b.root();
    let (f, _) = create_file(b, &root, b"f");
    let mut ch = b.open_channel(0).unwrap();
    write_all(&mut *ch, &f, 0, &pattern(4096, 5));
    const LIMIT: usize = 65_536;
    let mut bufs: Vec<[u8; 64]> = vec![[0u8; 64]; LIMIT];
    let mut submitted = 0usize;
    let full = loop {
        assert!(submitted < LIMIT, "no Jukebox after {LIMIT} submissions");
        let io = IoDesc {
            fh: f,
            op: IoOp::Read,
            offset: (submitted % 64) as u64 * 64,
            buf: bufs[submitted].as_mut_ptr(),
            len: 64,
            tag: 1000 + submitted as u64,
        };
        // SAFETY: each I/O has its own element of `bufs`, which outlives the
        // channel's use of it (everything is reaped below before `bufs` is
        // touched or dropped).
        match unsafe { ch.submit(io) } {
            Ok(()) => submitted += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(full, FsError::Jukebox);
    assert!(submitted > 0);
    assert_eq!(ch.in_flight(), submitted);
    let mut seen = HashSet::new();
    let mut out = [IoDone::default(); 16];
    let mut spins = 0u64;
    while seen.len() < submitted {
        let n = ch.poll(&mut out);
        for d in &out[..n] {
            assert!(seen.insert(d.tag), "tag {} completed twice", d.tag);
            assert_eq!(d.result, Ok(64));
        }
        spins += 1;
        assert!(spins < 100_000_000, "completions never came");
    }
    assert_eq!(ch.in_flight(), 0);
    assert_eq!(ch.poll(&mut out), 0);
    for (i, buf) in bufs.iter().enumerate().take(submitted) {
        let off = (i % 64) * 64;
        assert_eq!(&buf[..], &pattern(4096, 5)[off..off + 64], "read {i}");
    }
    // Room again.
    assert_eq!(read_exact(&mut *ch, &f, 0, 10).0, pattern(4096, 5)[..10]);
}

/// Two cores' channels writing and reading at once.
pub fn channels_on_two_threads(b: &dyn Backend) {
    let root = b.root();
    let files: Vec<FileHandle> = (0..2)
        .map(|i| create_file(b, &root, format!("t{i}").as_bytes()).0)
        .collect();
    std::thread::scope(|s| {
        for (core, f) in files.iter().enumerate() {
            s.spawn(move || {
                let mut ch = b.open_channel(core).unwrap();
                for round in 0..50u64 {
                    let data = pattern(5000 + round as usize, core as u64 * 1000 + round);
                    let off = round * 3000;
                    write_all(&mut *ch, f, off, &data);
                    let (got, _) = read_exact(&mut *ch, f, off, data.len());
                    assert!(got == data, "core {core} round {round}");
                }
            });
        }
        // Meanwhile the namespace changes on this thread.
        for i in 0..50 {
            create_file(b, &root, format!("m{i}").as_bytes());
            b.remove(&root, format!("m{i}").as_bytes()).unwrap();
        }
    });
    for f in &files {
        assert_eq!(b.getattr(f).unwrap().size, 49 * 3000 + 5049);
    }
}

pub fn fsstat_is_sane(b: &dyn Backend) {
    let s = b.fsstat().unwrap();
    assert!(s.total_bytes > 0);
    assert!(s.free_bytes <= s.total_bytes);
    assert!(s.avail_bytes <= s.free_bytes);
    assert!(s.free_files <= s.total_files);
    assert!(s.max_file_size >= 1 << 40);
    assert!(s.block_size.is_power_of_two());
}
