//! NFSv3 procedures against each backend, straight through `NfsService` (one
//! contiguous Call per request, as the TCP server hands them over): results
//! with their attributes, and the error cases of each procedure.

mod nfs_common;

use nfs_common::*;
use proto::nfs3::*;
use rpcrdma_apps::backend::{CreateHow, SetAttr, SetTime, Time};

/// A client as uid 1000 on `/export` (no root squash) of a fresh backend,
/// whose root was opened up (mode 0777) by root first; and the root handle.
fn setup(kind: Kind) -> (Store, Client<Direct>, Vec<u8>) {
    let s = store(kind, "b0");
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let sh = shared(&[&s], &[ex], MIB as u32);
    let mut c = Client::new(Direct::new(&sh));
    c.auth = Auth::root();
    let (root, flavors) = c.mnt("/export").unwrap();
    assert_eq!(flavors, vec![1], "AUTH_SYS only");
    let (st, _) = c.setattr(&root, &mode_attr(0o777), None);
    assert_eq!(st, NFS3_OK);
    c.auth = Auth::sys(1000, 1000);
    (s, c, root)
}

fn each(f: impl Fn(Kind)) {
    for k in KINDS {
        f(k);
    }
}

#[test]
fn mount_paths_and_root_attributes() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let a = c.getattr(&root).unwrap();
        assert_eq!(a.ftype, 2, "{k:?}: root is a directory");
        assert_eq!(a.mode, 0o777);
        let fsid = a.fsid;
        // Trailing slashes name the same export; other paths are not exports.
        assert_eq!(c.mnt("/export/").unwrap().0, root);
        assert_eq!(c.mnt("/exp"), Err(MNT3ERR_NOENT));
        assert_eq!(c.mnt("/export/sub"), Err(MNT3ERR_NOENT));
        // The export id is the fsid of every file.
        let (f, fa) = c.mkfile(&root, "f", 0o644).unwrap();
        assert_eq!(fa.fsid, fsid);
        assert_eq!(c.getattr(&f).unwrap().fsid, fsid);
    });
}

#[test]
fn create_write_read_remove() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (fh, a) = c.mkfile(&root, "data", 0o640).unwrap();
        assert_eq!(
            (a.ftype, a.mode, a.uid, a.gid, a.size),
            (1, 0o640, 1000, 1000, 0),
            "{k:?}"
        );
        assert_eq!(c.lookup(&root, b"data").unwrap().0, fh);
        let d = pattern(7, 10_001);
        let w = c.write(&fh, 3, &d, UNSTABLE).unwrap();
        assert_eq!(w.count, 10_001);
        assert!(w.committed <= FILE_SYNC);
        let (pre, post) = w.wcc;
        assert_eq!(pre.unwrap().size, 0);
        assert_eq!(post.unwrap().size, 10_004);
        // Whole file, with the hole of three zero bytes at the start.
        let (got, eof, fa) = c.read(&fh, 0, 20_000).unwrap();
        assert!(eof);
        assert_eq!(fa.size, 10_004);
        assert_eq!(&got[..3], &[0, 0, 0]);
        assert_eq!(&got[3..], &d[..]);
        // A middle piece is not eof; past the end is empty and eof.
        let (mid, eof, _) = c.read(&fh, 100, 1000).unwrap();
        assert!(!eof);
        assert_eq!(mid, &d[97..1097]);
        let (none, eof, _) = c.read(&fh, 1 << 20, 10).unwrap();
        assert!(none.is_empty() && eof);
        // Zero-count read.
        let (z, _, _) = c.read(&fh, 0, 0).unwrap();
        assert!(z.is_empty());
        assert_eq!(c.remove(&root, "data"), NFS3_OK);
        assert_eq!(c.lookup(&root, b"data").unwrap_err(), NFS3ERR_NOENT);
        assert_eq!(c.getattr(&fh).unwrap_err(), NFS3ERR_STALE, "{k:?}: removed file");
        assert_eq!(c.remove(&root, "data"), NFS3ERR_NOENT);
    });
}

#[test]
fn read_goes_into_the_data_buffer_as_a_ddp_item() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (fh, _) = c.mkfile(&root, "f", 0o644).unwrap();
        let d = pattern(1, 300_000);
        c.write(&fh, 0, &d, FILE_SYNC).unwrap();
        // With a data buffer (the engine's, sized by the hint).
        let (got, _, _) = c.read(&fh, 1000, 200_000).unwrap();
        assert_eq!(got, &d[1000..201_000]);
        assert_eq!(c.t.last_hint, 200_000);
        assert!(c.t.last_has_data);
        assert_eq!(c.t.last_items.len(), 1, "one DDP item");
        assert_eq!(c.t.last_items[0].1, 200_000);
        // The hint never exceeds the READ limit.
        let _ = c.read(&fh, 0, u32::MAX).unwrap();
        assert_eq!(c.t.last_hint, MIB);
        // Without a data buffer the data is inline in the head, bounded by it.
        c.t.data = DataBuf::Never;
        let (got, eof, _) = c.read(&fh, 10, 3000).unwrap();
        assert_eq!(got, &d[10..3010]);
        assert!(!eof);
        assert!(c.t.last_items.is_empty() && !c.t.last_has_data);
        let (got, _, _) = c.read(&fh, 0, 100_000).unwrap();
        assert!(!got.is_empty() && got.len() < 8192, "short read bounded by the head");
        assert_eq!(got, &d[..got.len()]);
        // The TCP server's way: a data buffer always.
        c.t.data = DataBuf::Always(64 * 1024);
        let (got, _, _) = c.read(&fh, 0, 100_000).unwrap();
        assert_eq!(got, &d[..64 * 1024], "short read bounded by the data buffer");
    });
}

/// A READ reply's attributes are the file's as the read left them: equal to
/// a GETATTR right after, once a WRITE, a size change and a mode change came
/// before the READ. The `mem` backend keeps no access time, so its READ
/// reuses the attributes it checked before reading (no second lookup); the
/// `uring` backend's file system may keep one, so its READ asks again.
#[test]
fn read_attributes_are_those_after_the_read() {
    each(|k| {
        let (s, mut c, root) = setup(k);
        assert_eq!(s.backend.reads_keep_attributes(), k == Kind::Mem, "{k:?}");
        let (fh, _) = c.mkfile(&root, "f", 0o644).unwrap();
        c.write(&fh, 0, &pattern(3, 5000), FILE_SYNC).unwrap();
        let (st, _) = c.setattr(&fh, &mode_attr(0o600), None);
        assert_eq!(st, NFS3_OK);
        c.write(&fh, 9000, b"tail", FILE_SYNC).unwrap();
        for (off, n) in [(0, 100), (4000, 8192), (20_000, 10)] {
            let (_, _, fa) = c.read(&fh, off, n).unwrap();
            let after = c.getattr(&fh).unwrap();
            if k == Kind::Mem {
                assert_eq!(fa, after, "{k:?} read at {off}");
            } else {
                // The host file system may move the access time on read;
                // everything else agrees.
                assert_eq!(
                    (fa.size, fa.mode, fa.mtime),
                    (after.size, after.mode, after.mtime),
                    "{k:?}"
                );
            }
            assert_eq!((fa.size, fa.mode), (9004, 0o600), "{k:?}");
        }
    });
}

#[test]
fn write_stability_and_commit_verifier() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (fh, _) = c.mkfile(&root, "f", 0o644).unwrap();
        let verf = c.t.svc.shared().write_verifier();
        for how in [UNSTABLE, DATA_SYNC, FILE_SYNC] {
            let w = c.write(&fh, 0, b"abc", how).unwrap();
            assert!(w.committed >= how, "{k:?}: asked {how}, got {}", w.committed);
            assert_eq!(w.verf, verf);
        }
        assert_eq!(c.commit(&fh).unwrap(), verf);
        assert_eq!(c.commit(&root).unwrap_err(), NFS3ERR_ISDIR);
        // count must match the data length.
        let r = c.nfs(NFSPROC3_WRITE, |e| {
            e.opaque(&fh).u64(0).u32(5).u32(0).opaque(b"abc");
        });
        assert_eq!(r.stat, RpcStat::GarbageArgs);
        // Writing a directory.
        assert_eq!(c.write(&root, 0, b"x", UNSTABLE).unwrap_err(), NFS3ERR_ISDIR);
    });
}

#[test]
fn create_modes() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (a, _) = c.mkfile(&root, "a", 0o600).unwrap();
        c.write(&a, 0, b"hello", FILE_SYNC).unwrap();
        // UNCHECKED on an existing file: fine, same file; size 0 truncates.
        let s0 = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        let (a2, at) = c.create(&root, b"a", CreateHow::Unchecked(s0)).unwrap();
        assert_eq!(a2, a);
        assert_eq!(at.size, 0, "{k:?}");
        assert_eq!(
            c.create(&root, b"a", CreateHow::Guarded(SetAttr::default())),
            Err(NFS3ERR_EXIST)
        );
        // EXCLUSIVE: a retransmission with the same verifier is the same file.
        let (x, _) = c.create(&root, b"x", CreateHow::Exclusive(*b"verf0001")).unwrap();
        let (x2, _) = c.create(&root, b"x", CreateHow::Exclusive(*b"verf0001")).unwrap();
        assert_eq!(x, x2);
        assert_eq!(
            c.create(&root, b"x", CreateHow::Exclusive(*b"verf0002")),
            Err(NFS3ERR_EXIST)
        );
        // Names.
        assert_eq!(c.mkfile(&root, ".", 0o644), Err(NFS3ERR_EXIST));
        assert_eq!(c.mkfile(&root, "..", 0o644), Err(NFS3ERR_EXIST));
        assert_eq!(c.mkfile(&root, "a/b", 0o644), Err(NFS3ERR_INVAL));
        assert_eq!(c.mkfile(&root, "", 0o644), Err(NFS3ERR_INVAL));
        assert_eq!(c.mkfile(&root, &"n".repeat(256), 0o644), Err(NFS3ERR_NAMETOOLONG));
        assert!(c.mkfile(&root, &"n".repeat(255), 0o644).is_ok());
        // In a file, not a directory.
        assert_eq!(c.mkfile(&a, "y", 0o644), Err(NFS3ERR_NOTDIR));
        // A name over the decode bound is garbage, not a crash.
        let r = c.nfs(NFSPROC3_CREATE, |e| {
            e.opaque(&root).u32(5000);
        });
        assert_eq!(r.stat, RpcStat::GarbageArgs);
    });
}

#[test]
fn directories() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (d, da) = c.mkdir(&root, "d", 0o755).unwrap();
        assert_eq!((da.ftype, da.mode), (2, 0o755));
        let (f, _) = c.mkfile(&d, "f", 0o644).unwrap();
        assert_eq!(c.rmdir(&root, "d"), NFS3ERR_NOTEMPTY, "{k:?}");
        assert_eq!(c.lookup(&d, b".").unwrap().0, d);
        assert_eq!(c.lookup(&d, b"..").unwrap().0, root);
        assert_eq!(c.lookup(&root, b"..").unwrap().0, root, "the root is its own parent");
        assert_eq!(c.lookup(&f, b"x").unwrap_err(), NFS3ERR_NOTDIR);
        assert_eq!(c.rmdir(&d, "f"), NFS3ERR_NOTDIR);
        assert_eq!(c.rmdir(&root, "."), NFS3ERR_INVAL);
        assert_eq!(c.remove(&root, ".."), NFS3ERR_INVAL);
        assert_eq!(c.mkdir(&root, "d", 0o755), Err(NFS3ERR_EXIST));
        assert_eq!(c.remove(&d, "f"), NFS3_OK);
        assert_eq!(c.rmdir(&root, "d"), NFS3_OK);
        assert_eq!(c.getattr(&d).unwrap_err(), NFS3ERR_STALE);
    });
}

#[test]
fn symlinks_and_readlink_ddp_item() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let target = b"../some/where/else";
        let (l, la) = c.symlink(&root, "l", target).unwrap();
        assert_eq!(la.ftype, 5);
        assert_eq!(c.readlink(&l).unwrap(), target);
        // The path was marked as a DDP-eligible item of the head (RFC 8267).
        assert_eq!(c.t.last_items.len(), 1);
        assert_eq!(c.t.last_items[0].1 as usize, target.len());
        let (f, _) = c.mkfile(&root, "f", 0o644).unwrap();
        assert_eq!(c.readlink(&f).unwrap_err(), NFS3ERR_INVAL);
        assert_eq!(c.symlink(&root, "e", b""), Err(NFS3ERR_INVAL));
        // A 4096-byte target is fine; longer is garbage (over NFS3_MAXPATHLEN).
        let long = vec![b'p'; 4000];
        let (ll, _) = c.symlink(&root, "long", &long).unwrap();
        assert_eq!(c.readlink(&ll).unwrap(), long);
        let r = c.nfs(NFSPROC3_SYMLINK, |e| {
            e.dirop(&root, b"x").sattr(&SetAttr::default()).opaque(&[b'q'; 4097]);
        });
        assert_eq!(r.stat, RpcStat::GarbageArgs);
    });
}

#[test]
fn mknod_types_and_privilege() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (_, a) = c.mknod(&root, "fifo", 7, (0, 0)).unwrap();
        assert_eq!(a.ftype, 7);
        let (_, a) = c.mknod(&root, "sock", 6, (0, 0)).unwrap();
        assert_eq!(a.ftype, 6);
        assert_eq!(c.mknod(&root, "chr", 4, (1, 3)), Err(NFS3ERR_PERM), "non-root device");
        assert_eq!(c.mknod(&root, "reg", 1, (0, 0)), Err(NFS3ERR_BADTYPE));
        assert_eq!(c.mknod(&root, "dir", 2, (0, 0)), Err(NFS3ERR_BADTYPE));
        let r = c.nfs(NFSPROC3_MKNOD, |e| {
            e.dirop(&root, b"bad").u32(99);
        });
        assert_eq!(r.stat, RpcStat::GarbageArgs);
        c.auth = Auth::root();
        let (_, a) = c.mknod(&root, "chr", 4, (1, 3)).unwrap();
        assert_eq!((a.ftype, a.rdev), (4, (1, 3)), "{k:?}");
        let (_, a) = c.mknod(&root, "blk", 3, (8, 1)).unwrap();
        assert_eq!((a.ftype, a.rdev), (3, (8, 1)));
    });
}

#[test]
fn link_and_rename() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (f, _) = c.mkfile(&root, "f", 0o644).unwrap();
        let (d, _) = c.mkdir(&root, "d", 0o755).unwrap();
        assert_eq!(c.link(&f, &d, "g"), NFS3_OK);
        assert_eq!(c.getattr(&f).unwrap().nlink, 2, "{k:?}");
        assert_eq!(c.lookup(&d, b"g").unwrap().0, f);
        assert_eq!(c.link(&f, &d, "g"), NFS3ERR_EXIST);
        assert_eq!(c.link(&d, &root, "dl"), NFS3ERR_INVAL, "no directory hard links");
        assert_eq!(c.rename(&root, "f", &d, "h"), NFS3_OK);
        assert_eq!(c.lookup(&root, b"f").unwrap_err(), NFS3ERR_NOENT);
        assert_eq!(c.lookup(&d, b"h").unwrap().0, f);
        // Over an existing file: it is replaced.
        let (o, _) = c.mkfile(&root, "other", 0o644).unwrap();
        assert_eq!(c.rename(&root, "other", &d, "g"), NFS3_OK);
        assert_eq!(c.lookup(&d, b"g").unwrap().0, o);
        assert_eq!(c.getattr(&f).unwrap().nlink, 1);
        assert_eq!(c.rename(&root, "nope", &d, "x"), NFS3ERR_NOENT);
        assert_eq!(c.rename(&root, ".", &d, "x"), NFS3ERR_INVAL);
    });
}

#[test]
fn cross_export_rename_and_link_are_xdev() {
    each(|k| {
        let s0 = store(k, "b0");
        let s1 = store(k, "b1");
        let mut a = Ex::new("/a", "b0");
        a.root_squash = false;
        let mut b = Ex::new("/b", "b1");
        b.root_squash = false;
        let sh = shared(&[&s0, &s1], &[a, b], MIB as u32);
        let mut c = Client::new(Direct::new(&sh));
        c.auth = Auth::root();
        let ra = c.mnt("/a").unwrap().0;
        let rb = c.mnt("/b").unwrap().0;
        let (f, fa) = c.mkfile(&ra, "f", 0o644).unwrap();
        assert_ne!(fa.fsid, c.getattr(&rb).unwrap().fsid, "an fsid per export");
        assert_eq!(c.rename(&ra, "f", &rb, "f"), NFS3ERR_XDEV);
        assert_eq!(c.link(&f, &rb, "f"), NFS3ERR_XDEV);
        assert_eq!(c.lookup(&rb, b"f").unwrap_err(), NFS3ERR_NOENT);
    });
}

#[test]
fn setattr_rules_and_guard() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (f, _) = c.mkfile(&root, "f", 0o644).unwrap();
        c.write(&f, 0, &[1; 5000], FILE_SYNC).unwrap();
        // Truncate, chmod by the owner.
        let set = SetAttr {
            size: Some(100),
            mode: Some(0o600),
            ..SetAttr::default()
        };
        let (st, (pre, post)) = c.setattr(&f, &set, None);
        assert_eq!(st, NFS3_OK, "{k:?}");
        assert_eq!(pre.unwrap().size, 5000);
        assert_eq!((post.unwrap().size, post.unwrap().mode), (100, 0o600));
        // The guard: a stale ctime is NOT_SYNC, the current one passes.
        let a = c.getattr(&f).unwrap();
        let (st, _) = c.setattr(&f, &mode_attr(0o640), Some((a.ctime.0.wrapping_sub(5), 0)));
        assert_eq!(st, NFS3ERR_NOT_SYNC);
        assert_eq!(c.getattr(&f).unwrap().mode, 0o600, "nothing changed");
        let (st, _) = c.setattr(&f, &mode_attr(0o640), Some(a.ctime));
        assert_eq!(st, NFS3_OK);
        // Client times by the owner.
        let t = SetAttr {
            mtime: SetTime::Client(Time {
                secs: 1_000_000,
                nsecs: 5,
            }),
            ..SetAttr::default()
        };
        assert_eq!(c.setattr(&f, &t, None).0, NFS3_OK);
        assert_eq!(c.getattr(&f).unwrap().mtime, (1_000_000, 5));
        // Not the owner: chmod and client times are PERM, truncation ACCES.
        c.auth = Auth::sys(2000, 2000);
        assert_eq!(c.setattr(&f, &mode_attr(0o777), None).0, NFS3ERR_PERM);
        assert_eq!(c.setattr(&f, &t, None).0, NFS3ERR_PERM);
        let trunc = SetAttr {
            size: Some(0),
            ..SetAttr::default()
        };
        assert_eq!(c.setattr(&f, &trunc, None).0, NFS3ERR_ACCES);
        // chown: only root.
        c.auth = Auth::sys(1000, 1000);
        let chown = SetAttr {
            uid: Some(2000),
            ..SetAttr::default()
        };
        assert_eq!(c.setattr(&f, &chown, None).0, NFS3ERR_PERM);
        // chgrp to a group the owner is in.
        c.auth = Auth::Sys {
            uid: 1000,
            gid: 1000,
            gids: vec![3000],
        };
        let chgrp = SetAttr {
            gid: Some(3000),
            ..SetAttr::default()
        };
        assert_eq!(c.setattr(&f, &chgrp, None).0, NFS3_OK);
        c.auth = Auth::root();
        assert_eq!(c.setattr(&f, &chown, None).0, NFS3_OK);
        assert_eq!(c.getattr(&f).unwrap().uid, 2000);
    });
}

#[test]
fn readdir_paging_cookies_and_plus() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (d, _) = c.mkdir(&root, "d", 0o755).unwrap();
        let mut want: Vec<String> = (0..150).map(|i| format!("file-{i:03}")).collect();
        for n in &want {
            c.mkfile(&d, n, 0o644).unwrap();
        }
        want.push(".".into());
        want.push("..".into());
        want.sort();
        for count in [300u32, 1024, 8192] {
            let mut got = c.list_all(&d, count);
            got.sort();
            assert_eq!(got, want, "{k:?}: count {count}");
        }
        // Each reply stays within count.
        let r = c.nfs(NFSPROC3_READDIR, |e| {
            e.opaque(&d).u64(0).u64(0).u32(600);
        });
        assert!(r.body.len() <= 600, "{} bytes", r.body.len());
        // Too small for a single entry.
        assert_eq!(c.readdir(&d, 0, 0, 40).unwrap_err(), NFS3ERR_TOOSMALL);
        // A listing resumes from its cookie even after the directory changed
        // (its verifier moved): entries listed before are not repeated, and
        // the new entry shows up; a cookie never issued is BAD_COOKIE (mem).
        let l = c.readdir(&d, 0, 0, 600).unwrap();
        assert!(!l.eof);
        let last = l.entries.last().unwrap().2;
        assert!(c.readdir(&d, last, l.verf, 600).is_ok());
        c.mkfile(&d, "zz-added-during-listing", 0o644).unwrap();
        let mut seen: Vec<Vec<u8>> = l.entries.iter().map(|e| e.1.clone()).collect();
        let mut cookie = last;
        loop {
            let r = c
                .readdir(&d, cookie, l.verf ^ 1, 600)
                .expect("resumed with an old verifier");
            for e in &r.entries {
                assert!(
                    !seen.contains(&e.1),
                    "{k:?}: {:?} listed twice",
                    String::from_utf8_lossy(&e.1)
                );
                seen.push(e.1.clone());
                cookie = e.2;
            }
            if r.eof {
                break;
            }
        }
        assert_eq!(seen.len(), want.len() + 1, "{k:?}: every entry once, plus the new one");
        assert!(seen.iter().any(|n| n == b"zz-added-during-listing"));
        c.remove(&d, "zz-added-during-listing");
        if k == Kind::Mem {
            // mem's cookies are positions: one past the end was never issued.
            // (ext4's are hash positions: any value is a place to resume.)
            assert_eq!(
                c.readdir(&d, 0x7fff_0000_dead, l.verf, 600).unwrap_err(),
                NFS3ERR_BAD_COOKIE
            );
        }
        // READDIRPLUS: attributes and usable handles, within maxcount.
        let p = c.readdirplus(&d, 0, 0, 8192, 4000).unwrap();
        assert!(!p.entries.is_empty() && !p.eof);
        for (id, name, _, a, h) in &p.entries {
            let a = a.expect("attributes");
            assert_eq!(a.fileid, *id);
            let h = h.as_ref().expect("handle");
            assert_eq!(c.getattr(h).unwrap().fileid, *id, "{}", String::from_utf8_lossy(name));
        }
        let r = c.nfs(NFSPROC3_READDIRPLUS, |e| {
            e.opaque(&d).u64(0).u64(0).u32(8192).u32(4000);
        });
        assert!(r.body.len() <= 4000);
        // dircount bounds the directory part: fewer entries.
        let small = c.readdirplus(&d, 0, 0, 200, 8000).unwrap();
        assert!(small.entries.len() < p.entries.len() && !small.entries.is_empty());
        // Not a directory; not readable.
        let (f, _) = c.lookup(&d, b"file-000").unwrap();
        assert_eq!(c.readdir(&f, 0, 0, 4096).unwrap_err(), NFS3ERR_NOTDIR);
        c.auth = Auth::root();
        let (st, _) = c.setattr(&d, &mode_attr(0o700), None);
        assert_eq!(st, NFS3_OK);
        c.auth = Auth::sys(2000, 2000);
        assert_eq!(c.readdir(&d, 0, 0, 4096).unwrap_err(), NFS3ERR_ACCES);
    });
}

#[test]
fn fsstat_fsinfo_pathconf() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let st = c.fsstat(&root).unwrap();
        assert!(st[0] > 0 && st[1] <= st[0] && st[2] <= st[1], "{k:?}: {st:?}");
        let (v, maxfile, props) = c.fsinfo(&root).unwrap();
        assert_eq!(v[0], MIB as u32, "rtmax");
        assert_eq!(v[3], MIB as u32, "wtmax");
        assert!(v[2] > 0 && v[5] > 0 && v[6] >= 512 && v[6] <= 8192, "{v:?}");
        assert!(maxfile > 1 << 32);
        assert_eq!(props & 0x1b, 0x1b, "link, symlink, homogeneous, cansettime");
        let (linkmax, name_max, flags) = c.pathconf(&root).unwrap();
        assert!(linkmax > 1);
        assert_eq!(name_max, 255);
        assert_eq!(flags, [true, true, false, true]);
    });
}

#[test]
fn io_limit_follows_the_data_pool() {
    each(|k| {
        let s = store(k, "b0");
        for (pool, want) in [
            (64 * 1024u32, 64 * 1024u32),
            (4 * MIB as u32, MIB as u32),
            (10_000, 8192),
        ] {
            let sh = shared(&[&s], &[Ex::new("/e", "b0")], pool);
            assert_eq!(sh.max_io_bytes(), want);
            let mut c = Client::new(Direct::new(&sh));
            let root = c.mnt("/e").unwrap().0;
            let (v, _, _) = c.fsinfo(&root).unwrap();
            assert_eq!((v[0], v[3]), (want, want), "{k:?}");
        }
    });
}

#[test]
fn access_answers_from_the_mode_bits() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (f, _) = c.mkfile(&root, "f", 0o640).unwrap();
        let (d, _) = c.mkdir(&root, "d", 0o750).unwrap();
        let all = 0x3f;
        // owner: read, modify, extend (no execute bit)
        assert_eq!(c.access(&f, all).unwrap(), 0x01 | 0x04 | 0x08, "{k:?}");
        assert_eq!(c.access(&d, all).unwrap(), 0x1f);
        // a member of the group through a supplementary gid: read (and lookup)
        c.auth = Auth::Sys {
            uid: 2000,
            gid: 2000,
            gids: vec![1000],
        };
        assert_eq!(c.access(&f, all).unwrap(), 0x01);
        assert_eq!(c.access(&d, all).unwrap(), 0x01 | 0x02);
        // only what was asked
        assert_eq!(c.access(&f, 0x04).unwrap(), 0);
        // others: nothing
        c.auth = Auth::sys(3000, 3000);
        assert_eq!(c.access(&f, all).unwrap(), 0);
        // root: everything but executing a file without x bits
        c.auth = Auth::root();
        assert_eq!(c.access(&f, all).unwrap(), 0x0d);
    });
}

#[test]
fn permissions_are_enforced() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        let (d, _) = c.mkdir(&root, "private", 0o755).unwrap();
        let (f, _) = c.mkfile(&d, "f", 0o644).unwrap();
        let (secret, _) = c.mkfile(&d, "secret", 0o600).unwrap();
        c.write(&secret, 0, b"secret", FILE_SYNC).unwrap();
        // The owner writes a file it created read-only (owner override).
        let (ro, _) = c.mkfile(&d, "ro", 0o444).unwrap();
        assert!(c.write(&ro, 0, b"x", UNSTABLE).is_ok(), "{k:?}");
        c.auth = Auth::sys(2000, 2000);
        assert_eq!(c.write(&f, 0, b"x", UNSTABLE).unwrap_err(), NFS3ERR_ACCES);
        assert_eq!(c.read(&secret, 0, 10).unwrap_err(), NFS3ERR_ACCES);
        assert_eq!(c.mkfile(&d, "new", 0o644), Err(NFS3ERR_ACCES));
        assert_eq!(c.mkdir(&d, "new", 0o755), Err(NFS3ERR_ACCES));
        assert_eq!(c.remove(&d, "f"), NFS3ERR_ACCES);
        assert_eq!(c.rename(&d, "f", &root, "stolen"), NFS3ERR_ACCES);
        assert_eq!(c.link(&f, &d, "l"), NFS3ERR_ACCES);
        assert!(c.read(&f, 0, 10).is_ok());
        // Search permission for LOOKUP.
        c.auth = Auth::sys(1000, 1000);
        let (st, _) = c.setattr(&d, &mode_attr(0o700), None);
        assert_eq!(st, NFS3_OK);
        c.auth = Auth::sys(2000, 2000);
        assert_eq!(c.lookup(&d, b"f").unwrap_err(), NFS3ERR_ACCES);
        // New objects may not be given away by non-root callers.
        let give = SetAttr {
            uid: Some(1),
            mode: Some(0o644),
            ..SetAttr::default()
        };
        assert_eq!(c.create(&root, b"g", CreateHow::Unchecked(give)), Err(NFS3ERR_PERM));
        // Sticky directory: others' files stay.
        c.auth = Auth::root();
        let (t, _) = c.mkdir(&root, "tmp", 0o1777).unwrap();
        c.auth = Auth::sys(1000, 1000);
        c.mkfile(&t, "mine", 0o644).unwrap();
        c.auth = Auth::sys(2000, 2000);
        // EPERM, as the kernel's sticky rule (may_delete).
        assert_eq!(c.remove(&t, "mine"), NFS3ERR_PERM);
        c.mkfile(&t, "yours", 0o644).unwrap();
        assert_eq!(c.remove(&t, "yours"), NFS3_OK);
    });
}

#[test]
fn setgid_directories_pass_their_group_on() {
    each(|k| {
        let (_s, mut c, root) = setup(k);
        c.auth = Auth::root();
        let (d, _) = c.mkdir(&root, "shared", 0o2777).unwrap();
        let (st, _) = c.setattr(
            &d,
            &SetAttr {
                gid: Some(4242),
                ..SetAttr::default()
            },
            None,
        );
        assert_eq!(st, NFS3_OK);
        c.auth = Auth::sys(1000, 1000);
        let (_, a) = c.mkfile(&d, "f", 0o644).unwrap();
        assert_eq!((a.uid, a.gid), (1000, 4242), "{k:?}");
    });
}
