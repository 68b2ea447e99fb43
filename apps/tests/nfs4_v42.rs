//! NFSv4.2 operations through the NFS service on `mem` and `uring`:
//! ALLOCATE, DEALLOCATE, SEEK and a synchronous intra-server COPY.

mod nfs4_common;
mod nfs_common;

use nfs4_common::*;
use nfs_common::*;
use proto::nfs4::*;
use rpcrdma_apps::nfs::NfsShared;

fn sid_op(opnum: u32, s: &Stateid, f: impl FnOnce(&mut Enc)) -> Vec<u8> {
    op(|e| {
        e.u32(opnum);
        stateid(e, s);
        f(e);
    })
}

fn size<T: V4Transport>(c: &mut V4<T>, fh: &[u8]) -> u64 {
    let r = c.seq(&[putfh(fh), getattr(&[FATTR4_SIZE])]);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_GETATTR);
    attr(&attrs(&mut d), FATTR4_SIZE).unwrap()
}

/// SEEK: the status, and sr_eof and sr_offset when NFS4_OK.
fn seek<T: V4Transport>(c: &mut V4<T>, fh: &[u8], s: &Stateid, off: u64, what: u32) -> Result<(bool, u64), u32> {
    let r = c.seq(&[
        putfh(fh),
        sid_op(OP_SEEK, s, |e| {
            e.u64(off).u32(what);
        }),
    ]);
    if r.status != NFS4_OK {
        return Err(r.status);
    }
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_SEEK);
    Ok((d.bool(), d.u64()))
}

#[allow(clippy::too_many_arguments)]
fn copy<T: V4Transport>(
    c: &mut V4<T>,
    src: &[u8],
    ss: &Stateid,
    dst: &[u8],
    ds: &Stateid,
    src_off: u64,
    dst_off: u64,
    count: u64,
    servers: u32,
) -> Result<u64, u32> {
    let save = op(|e| {
        e.u32(OP_SAVEFH);
    });
    let cp = op(|e| {
        e.u32(OP_COPY);
        stateid(e, ss);
        stateid(e, ds);
        e.u64(src_off)
            .u64(dst_off)
            .u64(count)
            .bool(false)
            .bool(true)
            .u32(servers);
        for _ in 0..servers {
            e.u32(NL4_NAME).opaque(b"elsewhere");
        }
    });
    let r = c.seq(&[putfh(src), save, putfh(dst), cp]);
    if r.status != NFS4_OK {
        return Err(r.status);
    }
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_SAVEFH);
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_COPY);
    assert_eq!(d.u32(), 0, "no callback id: synchronous");
    let n = d.u64();
    assert_eq!(d.u32(), FILE_SYNC4);
    d.fixed(8);
    assert_eq!((d.bool(), d.bool()), (true, true), "copy_requirements4");
    d.end();
    Ok(n)
}

#[test]
fn nfs4_2_allocate_deallocate_seek_copy_each_backend() {
    for k in KINDS {
        let s = store(k, "b0");
        let mut b = Ex::new("/b", "b0");
        b.root_squash = false;
        let cfg = config(&["b0"], &[b], MIB as u32);
        let sh = NfsShared::new(&cfg, vec![("b0".into(), s.backend.clone())]).unwrap();
        let mut c = V4::new(Direct::new(&sh), "v42");
        c.minor = 2;
        c.setup(8);
        let dir = c.walk("/b").unwrap();
        let (os, fh) = c
            .open(&dir, open("src", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
            .unwrap();
        let data = pattern(3, 64 * 1024);
        c.write(&fh, &os, 0, FILE_SYNC4, &data).unwrap();
        // ALLOCATE past the end extends the file.
        let alloc = |s: &Stateid, off: u64, len: u64| {
            sid_op(OP_ALLOCATE, s, |e| {
                e.u64(off).u64(len);
            })
        };
        assert_eq!(c.seq(&[putfh(&fh), alloc(&os, 0, MIB as u64)]).status, NFS4_OK, "{k:?}");
        assert_eq!(size(&mut c, &fh), MIB as u64);
        assert_eq!(c.seq(&[putfh(&fh), alloc(&os, 0, 0)]).status, NFS4ERR_INVAL);
        assert_eq!(c.seq(&[putfh(&fh), alloc(&os, u64::MAX, 2)]).status, NFS4ERR_INVAL);
        assert_eq!(c.seq(&[putfh(&dir), alloc(&os, 0, 1)]).status, NFS4ERR_ISDIR);
        // DEALLOCATE: zeros where data was, the size kept.
        let dealloc = sid_op(OP_DEALLOCATE, &os, |e| {
            e.u64(4096).u64(8192);
        });
        assert_eq!(c.seq(&[putfh(&fh), dealloc]).status, NFS4_OK);
        assert_eq!(size(&mut c, &fh), MIB as u64);
        let (_, got) = c.read(&fh, &os, 0, 16384).unwrap();
        assert_eq!(&got[..4096], &data[..4096]);
        assert!(
            got[4096..12288].iter().all(|&x| x == 0),
            "{k:?}: the hole reads as zeros"
        );
        assert_eq!(&got[12288..], &data[12288..16384]);
        // SEEK: data at 0; past the end NXIO; a hole somewhere at or
        // after the punched range (the end of the file at the latest).
        assert_eq!(seek(&mut c, &fh, &os, 0, NFS4_CONTENT_DATA), Ok((false, 0)));
        assert_eq!(seek(&mut c, &fh, &os, MIB as u64, NFS4_CONTENT_DATA), Err(NFS4ERR_NXIO));
        let (eof, hole) = seek(&mut c, &fh, &os, 0, NFS4_CONTENT_HOLE).unwrap();
        assert!(hole >= 4096 && hole <= MIB as u64, "{k:?}: hole at {hole}");
        assert_eq!(eof, hole == MIB as u64);
        // COPY 10000 bytes to another file, then the rest with count 0.
        let (ds, dfh) = c
            .open(&dir, open("dst", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
            .unwrap();
        assert_eq!(copy(&mut c, &fh, &os, &dfh, &ds, 0, 0, 10000, 0), Ok(10000));
        let (_, got) = c.read(&dfh, &ds, 0, 10000).unwrap();
        assert_eq!(got[..4096], data[..4096]);
        assert_eq!(
            copy(&mut c, &fh, &os, &dfh, &ds, 60000, 0, 0, 0),
            Ok(MIB as u64 - 60000)
        );
        assert_eq!(size(&mut c, &dfh), MIB as u64 - 60000);
        let (_, got) = c.read(&dfh, &ds, 0, 5536).unwrap();
        assert_eq!(got, data[60000..]);
        // A copy larger than one Call copies: a short copy, the rest asked
        // for again.
        let big = rpcrdma_apps::nfs4::v42::MAX_COPY_BYTES + MIB as u64;
        assert_eq!(c.seq(&[putfh(&dfh), alloc(&ds, 0, big)]).status, NFS4_OK);
        let (bs, bfh) = c
            .open(&dir, open("big", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
            .unwrap();
        let first = copy(&mut c, &dfh, &ds, &bfh, &bs, 0, 0, big, 0).unwrap();
        assert_eq!(first, rpcrdma_apps::nfs4::v42::MAX_COPY_BYTES);
        assert_eq!(
            copy(&mut c, &dfh, &ds, &bfh, &bs, first, first, big - first, 0),
            Ok(big - first)
        );
        assert_eq!(size(&mut c, &bfh), big);
        let (_, got) = c.read(&bfh, &bs, 0, 4096).unwrap();
        assert_eq!(got[..4096], data[60000..64096]);
        // Past the source's end, overlapping itself, another server.
        assert_eq!(
            copy(&mut c, &fh, &os, &dfh, &ds, MIB as u64 - 10, 0, 11, 0),
            Err(NFS4ERR_INVAL)
        );
        assert_eq!(copy(&mut c, &fh, &os, &fh, &os, 0, 100, 200, 0), Err(NFS4ERR_INVAL));
        assert_eq!(copy(&mut c, &fh, &os, &dfh, &ds, 0, 0, 1, 1), Err(NFS4ERR_NOTSUPP));
        // A read-only open cannot ALLOCATE or be a COPY's destination.
        let (ro, _) = c.open(&dir, open("dst", 1, 0, b"ro", None)).unwrap();
        assert_eq!(c.seq(&[putfh(&dfh), alloc(&ro, 0, 1)]).status, NFS4ERR_OPENMODE);
        assert_eq!(copy(&mut c, &fh, &os, &dfh, &ro, 0, 0, 1, 0), Err(NFS4ERR_OPENMODE));
        // An unknown data_content4.
        let bad = sid_op(OP_SEEK, &os, |e| {
            e.u64(0).u32(7);
        });
        assert_eq!(c.seq(&[putfh(&fh), bad]).status, NFS4ERR_UNION_NOTSUPP);
        // In a minor version 1 COMPOUND these operations do not exist.
        c.minor = 1;
        let r = c.seq(&[putfh(&fh), alloc(&os, 0, 1)]);
        assert_eq!(r.status, NFS4ERR_OP_ILLEGAL);
        let mut d = r.dec();
        res(&mut d, OP_PUTFH);
        assert_eq!(res(&mut d, OP_ILLEGAL), NFS4ERR_OP_ILLEGAL);
    }
}
