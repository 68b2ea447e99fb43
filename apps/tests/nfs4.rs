//! NFSv4.1 through the NFS service: minor versions, sessions and the slot
//! reply cache, the pseudo-root namespace, opens and share reservations,
//! data and directory operations; in process (`Direct`) on `mem` and
//! `uring`, and through the responder engine on the sim fabric (WRITE data
//! in a Read chunk, READ data in a Write chunk, RPC-over-RDMA v1 and v2).

mod nfs4_common;
mod nfs_common;

use std::sync::Arc;

use nfs4_common::*;
use nfs_common::*;
use proto::nfs4::*;
use rpcrdma_apps::nfs::export::fnv1a64;
use rpcrdma_apps::nfs::NfsShared;

/// A service over `kinds`' first store with exports `/a/x` and `/b`, and
/// `credits` per connection.
fn setup(kind: Kind, credits: u32) -> (Store, Arc<NfsShared>) {
    let s = store(kind, "b0");
    let mut x = Ex::new("/a/x", "b0");
    x.root_squash = false;
    let mut b = Ex::new("/b", "b0");
    b.root_squash = false;
    let mut cfg = config(&["b0"], &[x, b], MIB as u32);
    cfg.credits.max_per_connection = credits;
    let sh = NfsShared::new(&cfg, vec![("b0".into(), s.backend.clone())]).unwrap();
    (s, sh)
}

fn skip_bitmap(d: &mut Dec<'_>) {
    let n = d.u32();
    for _ in 0..n {
        d.u32();
    }
}

fn client(sh: &Arc<NfsShared>, owner: &str) -> V4<Direct> {
    let mut c = V4::new(Direct::new(sh), owner);
    c.setup(8);
    c
}

#[test]
fn nfs4_minor_version_0_and_other_versions() {
    let (_s, sh) = setup(Kind::Mem, 16);
    let mut c = V4::new(Direct::new(&sh), "c");
    // Minor version 0 (and 3): MINOR_VERS_MISMATCH, the tag echoed, no results.
    for m in [0, 3] {
        c.minor = m;
        let mut call = c.encode(&[putrootfh()]);
        // Give it a tag.
        let at = call.len() - putrootfh().len() - 12;
        call[at..at + 4].copy_from_slice(&0u32.to_be_bytes());
        let r = c.send(&call, None);
        assert_eq!((r.status, r.numres), (NFS4ERR_MINOR_VERS_MISMATCH, 0), "minor {m}");
    }
    c.minor = 1;
    // NULL of version 4; version 5 is PROG_MISMATCH (3, 4).
    let mut cl = Client::new(Direct::new(&sh));
    assert_eq!(cl.call(NFS, 4, 0, |_| {}).stat, RpcStat::Success);
    assert_eq!(cl.call(NFS, 5, 0, |_| {}).stat, RpcStat::ProgMismatch(3, 4));
    assert_eq!(cl.call(NFS, 2, 0, |_| {}).stat, RpcStat::ProgMismatch(3, 4));
    assert_eq!(cl.call(NFS, 4, 2, |_| {}).stat, RpcStat::ProcUnavail);
    // A COMPOUND whose header does not decode: GARBAGE_ARGS.
    assert_eq!(
        cl.call(NFS, 4, 1, |e| {
            e.u32(4);
        })
        .stat,
        RpcStat::GarbageArgs
    );
    // v3 is still served.
    let (root, _) = cl.mnt("/b").unwrap();
    assert_eq!(cl.getattr(&root).unwrap().ftype, 2);
}

#[test]
fn nfs4_session_rules_and_slot_replay() {
    let (_s, sh) = setup(Kind::Mem, 4);
    let mut c = client(&sh, "replay");
    // Slots: no more than the credits a connection holds.
    assert_eq!(c.slots, 4, "asked 8, credits 4");
    // Operations outside a session.
    let r = c.compound(&[putrootfh()]);
    assert_eq!((r.status, r.numres), (NFS4ERR_OP_NOT_IN_SESSION, 1));
    let (owner, verf) = (c.owner.clone(), c.verifier);
    let eid = op(|e| {
        e.u32(OP_EXCHANGE_ID)
            .fixed(&verf)
            .opaque(&owner)
            .u32(0)
            .u32(SP4_NONE)
            .u32(0);
    });
    let r = c.compound(&[eid.clone(), putrootfh()]);
    assert_eq!(r.status, NFS4ERR_NOT_ONLY_OP);
    // SEQUENCE not first.
    let s = c.sequence(1, false);
    let r = c.compound(&[putrootfh(), s]);
    assert_eq!(r.status, NFS4ERR_OP_NOT_IN_SESSION);
    c.seq[1] -= 1;
    let s = c.sequence(0, true);
    let s2 = c.sequence(1, true);
    let r = c.compound(&[s, s2]);
    assert_eq!((r.status, r.numres), (NFS4ERR_SEQUENCE_POS, 2));
    c.seq[1] -= 1;

    // A non-idempotent COMPOUND retried on its slot gets the first reply:
    // the directory is made once and the retry sees NFS4_OK, not EXIST.
    let b = c.walk("/b").unwrap();
    let mkdir = op(|e| {
        e.u32(OP_CREATE).u32(NF4DIR).opaque(b"once");
        mode_attrs(e, Some(0o755));
    });
    let mut ops = vec![c.sequence(2, true), putfh(&b), mkdir.clone(), getfh()];
    let call = c.encode(&ops);
    let first = c.t.rt(&call, None).unwrap();
    let again = c.t.rt(&call, None).unwrap();
    assert_eq!(first, again, "the retry is answered from the slot");
    assert_eq!(parse(Reply::parse(&again)).status, NFS4_OK);
    assert_eq!(c.t.svc.nfs4_stats().replays, 1);
    // The same operations as a new request on that slot: EXIST.
    ops[0] = c.sequence(2, true);
    let r = c.compound(&ops);
    assert_eq!(r.status, NFS4ERR_EXIST);
    // A sequence id ahead: SEQ_MISORDERED; a retry of an uncached
    // request: RETRY_UNCACHED_REP; a slot past the table: BADSLOT.
    c.seq[2] += 1;
    let s = c.sequence(2, true);
    assert_eq!(c.compound(&[s]).status, NFS4ERR_SEQ_MISORDERED);
    c.seq[2] -= 2;
    let s = c.sequence(3, false);
    let call = c.encode(&[s, putrootfh()]);
    assert_eq!(c.send(&call, None).status, NFS4_OK);
    assert_eq!(c.send(&call, None).status, NFS4ERR_RETRY_UNCACHED_REP);
    c.seq.push(0);
    let s = c.sequence(4, false);
    assert_eq!(c.compound(&[s]).status, NFS4ERR_BADSLOT);
    // Too many operations for the session's ca_maxoperations (16).
    let mut many = vec![c.sequence(0, false)];
    many.extend((0..16).map(|_| putrootfh()));
    let r = c.compound(&many);
    assert_eq!((r.status, r.numres), (NFS4ERR_TOO_MANY_OPS, 17));

    // BIND_CONN_TO_SESSION: FORE_OR_BOTH binds the backchannel too
    // (issue 23; apps/tests/backchannel.rs tests it further).
    let sid = c.sid;
    let r = c.compound(&[op(|e| {
        e.u32(OP_BIND_CONN_TO_SESSION)
            .fixed(&sid)
            .u32(CDFC4_FORE_OR_BOTH)
            .bool(false);
    })]);
    let mut d = r.dec();
    assert_eq!(res(&mut d, OP_BIND_CONN_TO_SESSION), NFS4_OK);
    assert_eq!(d.fixed(16), sid.to_vec());
    assert_eq!(d.u32(), CDFS4_BOTH);

    // DESTROY_CLIENTID while a session exists: CLIENTID_BUSY; after
    // DESTROY_SESSION the session is gone and the client can go.
    let id = c.clientid;
    let dc = op(|e| {
        e.u32(OP_DESTROY_CLIENTID).u64(id);
    });
    assert_eq!(c.compound(std::slice::from_ref(&dc)).status, NFS4ERR_CLIENTID_BUSY);
    let r = c.compound(&[op(|e| {
        e.u32(OP_DESTROY_SESSION).fixed(&sid);
    })]);
    assert_eq!(r.status, NFS4_OK);
    let s = c.sequence(0, false);
    assert_eq!(c.compound(&[s]).status, NFS4ERR_BADSESSION);
    assert_eq!(c.compound(std::slice::from_ref(&dc)).status, NFS4_OK);
    assert_eq!(c.compound(&[dc]).status, NFS4ERR_STALE_CLIENTID);
}

#[test]
fn nfs4_create_session_retry_and_client_reboot() {
    let (_s, sh) = setup(Kind::Mem, 16);
    let mut c = client(&sh, "reboot");
    let old = c.clientid;
    // The same client id again with the same verifier: confirmed.
    let (owner, verf) = (c.owner.clone(), c.verifier);
    let r = c.compound(&[op(|e| {
        e.u32(OP_EXCHANGE_ID)
            .fixed(&verf)
            .opaque(&owner)
            .u32(0)
            .u32(SP4_NONE)
            .u32(0);
    })]);
    let mut d = r.dec();
    res(&mut d, OP_EXCHANGE_ID);
    assert_eq!(d.u64(), old);
    d.u32();
    assert_ne!(d.u32() & EXCHGID4_FLAG_CONFIRMED_R, 0);
    // A rebooted client (new verifier) gets a new id; once its session is
    // made, the old record and its opens are gone.
    let b = c.walk("/b").unwrap();
    c.open(&b, open("held", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
        .unwrap();
    assert_eq!(sh.v4().opens(), 1);
    let mut c2 = V4::new(Direct::new(&sh), "reboot");
    c2.verifier = *b"rebooted";
    c2.setup(4);
    assert_ne!(c2.clientid, old);
    assert_eq!(sh.v4().opens(), 0);
    assert_eq!(sh.v4().clients(), 1);
}

#[test]
fn nfs4_pseudo_root_and_export_boundaries() {
    let (_s, sh) = setup(Kind::Mem, 16);
    let mut c = client(&sh, "ns");
    let want = [
        FATTR4_TYPE,
        FATTR4_FSID,
        FATTR4_FILEID,
        FATTR4_MODE,
        FATTR4_MOUNTED_ON_FILEID,
        FATTR4_OWNER,
        FATTR4_SUPPORTED_ATTRS,
        FATTR4_LEASE_TIME,
        FATTR4_SUPPATTR_EXCLCREAT,
        FATTR4_CHANGE,
        FATTR4_TIME_MODIFY,
        FATTR4_SPACE_USED,
        FATTR4_MAXREAD,
    ];
    let get = |c: &mut V4<Direct>, path: &str| {
        let fh = c.walk(path).unwrap();
        let r = c.seq(&[putfh(&fh), getattr(&want)]);
        assert_eq!(r.status, NFS4_OK, "{path}");
        let mut d = r.dec();
        res(&mut d, OP_PUTFH);
        res(&mut d, OP_GETATTR);
        attrs(&mut d)
    };
    let root = get(&mut c, "/");
    assert_eq!(attr(&root, FATTR4_TYPE), Some(u64::from(NF4DIR)));
    assert_eq!(attr(&root, FATTR4_FSID), Some(0), "pseudo fs");
    assert_eq!(attr(&root, FATTR4_LEASE_TIME), Some(90));
    let a = get(&mut c, "/a");
    assert_eq!(attr(&a, FATTR4_FILEID), Some(fnv1a64(b"/a")));
    let x = get(&mut c, "/a/x");
    let ex_id = sh.exports()[0].id;
    assert_eq!(attr(&x, FATTR4_FSID), Some(ex_id), "fsid changes at the export");
    assert_eq!(attr(&x, FATTR4_MOUNTED_ON_FILEID), Some(fnv1a64(b"/a/x")));
    assert_eq!(attr(&x, FATTR4_OWNER), Some(0));
    assert_eq!(attr(&x, FATTR4_MAXREAD), Some(MIB as u64));
    assert_ne!(attr(&x, FATTR4_FILEID), attr(&x, FATTR4_MOUNTED_ON_FILEID));
    assert_eq!(c.walk("/nope"), Err(NFS4ERR_NOENT));
    assert_eq!(c.walk("/a/nope"), Err(NFS4ERR_NOENT));
    // LOOKUPP from the export root leads back to /a, then /.
    let xfh = c.walk("/a/x").unwrap();
    let afh = c.walk("/a").unwrap();
    let r = c.seq(&[
        putfh(&xfh),
        op(|e| {
            e.u32(OP_LOOKUPP);
        }),
        getfh(),
    ]);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_LOOKUPP);
    res(&mut d, OP_GETFH);
    assert_eq!(d.opaque(), afh);
    // READDIR of the root lists the first components of the exports.
    let rootfh = c.walk("/").unwrap();
    let r = c.seq(&[
        putfh(&rootfh),
        op(|e| {
            e.u32(OP_READDIR)
                .u64(0)
                .fixed(&[0; 8])
                .u32(4096)
                .u32(8192)
                .u32(1)
                .u32(1 << FATTR4_TYPE);
        }),
    ]);
    assert_eq!(r.status, NFS4_OK);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_READDIR);
    d.fixed(8);
    let mut names = vec![];
    while d.bool() {
        d.u64();
        names.push(String::from_utf8(d.opaque()).unwrap());
        let at = attrs(&mut d);
        assert_eq!(attr(&at, FATTR4_TYPE), Some(u64::from(NF4DIR)));
    }
    assert!(d.bool(), "eof");
    assert_eq!(names, ["a", "b"]);
    // A malformed handle, a stale one, no handle.
    let r = c.seq(&[putfh(&[1, 2, 3])]);
    assert_eq!(r.status, NFS4ERR_BADHANDLE);
    let r = c.seq(&[putfh(&[0x50, 0, 0, 0, 0, 0, 0, 0, 9])]);
    assert_eq!(r.status, NFS4ERR_STALE);
    assert_eq!(c.seq(&[getfh()]).status, NFS4ERR_NOFILEHANDLE);
    // SECINFO_NO_NAME: AUTH_SYS, and the handle is consumed.
    let r = c.seq(&[
        putfh(&xfh),
        op(|e| {
            e.u32(OP_SECINFO_NO_NAME).u32(0);
        }),
        getfh(),
    ]);
    assert_eq!(r.status, NFS4ERR_NOFILEHANDLE);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    assert_eq!(res(&mut d, OP_SECINFO_NO_NAME), NFS4_OK);
    assert_eq!((d.u32(), d.u32()), (1, 1));
    // A name over 255 bytes.
    let long = "n".repeat(256);
    assert_eq!(c.seq(&[putfh(&xfh), lookup(&long)]).status, NFS4ERR_NAMETOOLONG);
}

fn data_ops<T: V4Transport>(c: &mut V4<T>, sh: &NfsShared, tag: &str) {
    let b = c.walk("/b").unwrap();
    let name = format!("f-{tag}");
    let (s, fh) = c
        .open(&b, open(&name, 3, 0, b"owner-1", Some((GUARDED4, 0o640, [0; 8]))))
        .unwrap();
    // GUARDED again: EXIST.
    assert_eq!(
        c.open(&b, open(&name, 3, 0, b"owner-1", Some((GUARDED4, 0o640, [0; 8])))),
        Err(NFS4ERR_EXIST)
    );
    let data = pattern(7, 256 * 1024);
    let (n, committed, verf) = c.write(&fh, &s, 0, UNSTABLE4, &data).unwrap();
    // A backend may commit more than asked (mem is always stable).
    assert_eq!(n, data.len() as u32);
    assert!(committed <= FILE_SYNC4);
    assert_eq!(verf, sh.write_verifier());
    let (n, committed, _) = c.write(&fh, &s, data.len() as u64, FILE_SYNC4, b"tail").unwrap();
    assert_eq!((n, committed), (4, FILE_SYNC4));
    let r = c.seq(&[
        putfh(&fh),
        op(|e| {
            e.u32(OP_COMMIT).u64(0).u32(0);
        }),
    ]);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    assert_eq!(res(&mut d, OP_COMMIT), NFS4_OK);
    assert_eq!(d.fixed(8), sh.write_verifier());
    let (eof, got) = c.read(&fh, &s, 0, data.len() as u32).unwrap();
    assert!(!eof);
    assert_eq!(got, data);
    let (eof, got) = c.read(&fh, &s, data.len() as u64, 100).unwrap();
    assert!(eof);
    assert_eq!(got, b"tail");
    // A READ that does not end the COMPOUND: its data in the head.
    let r = c.seq(&[putfh(&fh), read(&s, 10, 20), getattr(&[FATTR4_SIZE])]);
    assert_eq!(r.status, NFS4_OK);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_READ);
    assert!(!d.bool());
    assert_eq!(d.opaque(), data[10..30].to_vec());
    res(&mut d, OP_GETATTR);
    assert_eq!(attr(&attrs(&mut d), FATTR4_SIZE), Some(data.len() as u64 + 4));
    // CLOSE; the stateid is then unknown.
    let r = c.seq(&[putfh(&fh), close(&s)]);
    assert_eq!(r.status, NFS4_OK);
    assert_eq!(c.read(&fh, &s, 0, 4), Err(NFS4ERR_BAD_STATEID));
    // The anonymous stateid reads (mode bits checked).
    let (_, got) = c.read(&fh, &Stateid::ANONYMOUS, 0, 4).unwrap();
    assert_eq!(got, data[..4].to_vec());
    // A read-only open cannot write.
    let (s, _) = c.open(&b, open(&name, 1, 0, b"owner-1", None)).unwrap();
    assert_eq!(c.write(&fh, &s, 0, UNSTABLE4, b"x"), Err(NFS4ERR_OPENMODE));
    let r = c.seq(&[putfh(&fh), close(&s)]);
    assert_eq!(r.status, NFS4_OK);
    // EXCLUSIVE4_1 twice with one verifier: the same file.
    let ex = format!("x-{tag}");
    let (s1, f1) = c
        .open(&b, open(&ex, 3, 0, b"o2", Some((EXCLUSIVE4_1, 0o600, *b"excl-vf1"))))
        .unwrap();
    let (s2, f2) = c
        .open(&b, open(&ex, 3, 0, b"o2", Some((EXCLUSIVE4_1, 0o600, *b"excl-vf1"))))
        .unwrap();
    assert_eq!(f1, f2);
    assert_eq!(s1.other, s2.other);
    assert_eq!(s2.seqid, s1.seqid + 1, "the owner's open upgraded");
    assert_eq!(
        c.open(&b, open(&ex, 3, 0, b"o2", Some((EXCLUSIVE4_1, 0o600, *b"other-vf")))),
        Err(NFS4ERR_EXIST)
    );
}

#[test]
fn nfs4_open_write_read_commit_close_each_backend() {
    for k in KINDS {
        let (_s, sh) = setup(k, 16);
        let mut c = client(&sh, "data");
        data_ops(&mut c, &sh, "direct");
        // The READ that ended its COMPOUND went into the data buffer as a
        // DDP item.
        let b = c.walk("/b").unwrap();
        let (s, fh) = c
            .open(&b, open("ddp", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
            .unwrap();
        c.write(&fh, &s, 0, FILE_SYNC4, &[5; 1000]).unwrap();
        c.read(&fh, &s, 0, 1000).unwrap();
        assert!(c.t.last_has_data, "{k:?}");
        assert_eq!(c.t.last_items.len(), 1);
        assert_eq!(c.t.last_items[0].1, 1000);
    }
}

#[test]
fn nfs4_share_reservations_between_clients() {
    let (_s, sh) = setup(Kind::Mem, 16);
    let mut a = client(&sh, "client-a");
    let mut b = client(&sh, "client-b");
    let dir = a.walk("/b").unwrap();
    // A opens for read and write, denying write.
    let (sa, _) = a
        .open(&dir, open("shared", 3, 2, b"a", Some((UNCHECKED4, 0o666, [0; 8]))))
        .unwrap();
    // B may read, not write.
    let (sb, _) = b.open(&dir, open("shared", 1, 0, b"b", None)).unwrap();
    assert_eq!(
        b.open(&dir, open("shared", 2, 0, b"b2", None)),
        Err(NFS4ERR_SHARE_DENIED)
    );
    // B denying read conflicts with A's access.
    assert_eq!(
        b.open(&dir, open("shared", 1, 1, b"b3", None)),
        Err(NFS4ERR_SHARE_DENIED)
    );
    // OPEN_DOWNGRADE: A drops its deny; B may then open for write.
    let fh = a.walk("/b/shared").unwrap();
    let r = a.seq(&[
        putfh(&fh),
        op(|e| {
            e.u32(OP_OPEN_DOWNGRADE);
            stateid(e, &sa);
            e.u32(0).u32(3).u32(0);
        }),
    ]);
    assert_eq!(r.status, NFS4_OK);
    b.open(&dir, open("shared", 2, 0, b"b2", None)).unwrap();
    // TEST_STATEID: A's is good for A, not for B.
    let t = op(|e| {
        e.u32(OP_TEST_STATEID).u32(2);
        stateid(e, &sa);
        stateid(e, &sb);
    });
    let r = a.seq(std::slice::from_ref(&t));
    let mut d = r.dec();
    res(&mut d, OP_TEST_STATEID);
    assert_eq!(d.u32(), 2);
    assert_eq!(d.u32(), NFS4ERR_OLD_STATEID, "downgraded since");
    assert_eq!(d.u32(), NFS4ERR_BAD_STATEID, "another client's");
}

#[test]
fn nfs4_directory_operations_and_attributes() {
    let (_s, sh) = setup(Kind::Mem, 16);
    let mut c = client(&sh, "dirs");
    let b = c.walk("/b").unwrap();
    let mk = |ty: u32, name: &str, extra: &dyn Fn(&mut Enc)| {
        let name = name.to_string();
        op(move |e| {
            e.u32(OP_CREATE).u32(ty);
            extra(e);
            e.opaque(name.as_bytes());
            mode_attrs(e, Some(0o750));
        })
    };
    let r = c.seq(&[
        putfh(&b),
        mk(NF4DIR, "d", &|_| {}),
        getattr(&[FATTR4_TYPE, FATTR4_MODE]),
    ]);
    assert_eq!(r.status, NFS4_OK);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    assert_eq!(res(&mut d, OP_CREATE), NFS4_OK);
    let (_atomic, before, after) = (d.bool(), d.u64(), d.u64());
    assert_ne!(before, after, "change_info of the directory");
    skip_bitmap(&mut d);
    res(&mut d, OP_GETATTR);
    let a = attrs(&mut d);
    assert_eq!((attr(&a, FATTR4_TYPE), attr(&a, FATTR4_MODE)), (Some(2), Some(0o750)));
    // A symlink and READLINK (its text a DDP item).
    let r = c.seq(&[
        putfh(&b),
        mk(NF4LNK, "ln", &|e| {
            e.opaque(b"d/target");
        }),
        op(|e| {
            e.u32(OP_READLINK);
        }),
    ]);
    assert_eq!(r.status, NFS4_OK);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_CREATE);
    d.bool();
    d.u64();
    d.u64();
    skip_bitmap(&mut d);
    res(&mut d, OP_READLINK);
    assert_eq!(d.opaque(), b"d/target");
    assert_eq!(c.t.last_items.len(), 1);
    // A FIFO; a regular file through CREATE is BADTYPE.
    assert_eq!(c.seq(&[putfh(&b), mk(NF4FIFO, "p", &|_| {})]).status, NFS4_OK);
    assert_eq!(c.seq(&[putfh(&b), mk(NF4REG, "r", &|_| {})]).status, NFS4ERR_BADTYPE);
    // RENAME d -> e (SAVEFH source, current target), LINK, REMOVE.
    let ren = op(|e| {
        e.u32(OP_RENAME).opaque(b"d").opaque(b"e");
    });
    let save = op(|e| {
        e.u32(OP_SAVEFH);
    });
    assert_eq!(c.seq(&[putfh(&b), save.clone(), ren]).status, NFS4_OK);
    assert_eq!(c.walk("/b/d"), Err(NFS4ERR_NOENT));
    let e = c.walk("/b/e").unwrap();
    let (s, f) = c
        .open(&b, open("file", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
        .unwrap();
    let link = op(|x| {
        x.u32(OP_LINK).opaque(b"hard");
    });
    assert_eq!(c.seq(&[putfh(&f), save, putfh(&e), link]).status, NFS4_OK);
    let h = c.walk("/b/e/hard").unwrap();
    assert_eq!(h, f);
    let rm = |n: &str| {
        let n = n.to_string();
        op(move |e| {
            e.u32(OP_REMOVE).opaque(n.as_bytes());
        })
    };
    assert_eq!(c.seq(&[putfh(&b), rm("e")]).status, NFS4ERR_NOTEMPTY);
    assert_eq!(c.seq(&[putfh(&e), rm("hard")]).status, NFS4_OK);
    assert_eq!(c.seq(&[putfh(&b), rm("e")]).status, NFS4_OK);
    assert_eq!(c.seq(&[putfh(&b), rm("..")]).status, NFS4ERR_INVAL);
    // SETATTR: size through the open stateid, mode, owner; attrsset back.
    let sa = op(|e| {
        e.u32(OP_SETATTR);
        stateid(e, &s);
        e.u32(2)
            .u32(1 << FATTR4_SIZE)
            .u32((1 << (FATTR4_MODE - 32)) | (1 << (FATTR4_OWNER - 32)));
        e.u32(8 + 4 + 8).u64(12).u32(0o600).opaque(b"1234");
    });
    let r = c.seq(&[putfh(&f), sa, getattr(&[FATTR4_SIZE, FATTR4_MODE, FATTR4_OWNER])]);
    assert_eq!(r.status, NFS4_OK);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_SETATTR);
    assert_eq!((d.u32(), d.u32()), (2, 1 << FATTR4_SIZE));
    d.u32();
    res(&mut d, OP_GETATTR);
    let a = attrs(&mut d);
    assert_eq!(
        (attr(&a, FATTR4_SIZE), attr(&a, FATTR4_MODE), attr(&a, FATTR4_OWNER)),
        (Some(12), Some(0o600), Some(1234))
    );
    // A read-only attribute: INVAL, with an empty attrsset.
    let bad = op(|e| {
        e.u32(OP_SETATTR);
        stateid(e, &Stateid::ANONYMOUS);
        e.u32(1).u32(1 << FATTR4_TYPE).u32(4).u32(1);
    });
    let r = c.seq(&[putfh(&f), bad]);
    assert_eq!(r.status, NFS4ERR_INVAL);
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    res(&mut d, OP_SETATTR);
    assert_eq!(d.u32(), 0);
    d.end();
    // VERIFY / NVERIFY of the size.
    let v = |opn: u32, size: u64| {
        op(move |e| {
            e.u32(opn).u32(1).u32(1 << FATTR4_SIZE).u32(8).u64(size);
        })
    };
    assert_eq!(c.seq(&[putfh(&f), v(OP_VERIFY, 12)]).status, NFS4_OK);
    assert_eq!(c.seq(&[putfh(&f), v(OP_VERIFY, 13)]).status, NFS4ERR_NOT_SAME);
    assert_eq!(c.seq(&[putfh(&f), v(OP_NVERIFY, 12)]).status, NFS4ERR_SAME);
    // OPENATTR, DELEGPURGE: NOTSUPP.
    assert_eq!(
        c.seq(&[
            putfh(&f),
            op(|e| {
                e.u32(OP_OPENATTR).bool(false);
            })
        ])
        .status,
        NFS4ERR_NOTSUPP
    );
    assert_eq!(
        c.seq(&[
            putfh(&f),
            op(|e| {
                e.u32(OP_DELEGPURGE).u64(0);
            })
        ])
        .status,
        NFS4ERR_NOTSUPP
    );
    // An unknown operation: OP_ILLEGAL in the result.
    let r = c.seq(&[op(|e| {
        e.u32(9999);
    })]);
    assert_eq!(r.status, NFS4ERR_OP_ILLEGAL);
    let mut d = r.dec();
    assert_eq!(res(&mut d, OP_ILLEGAL), NFS4ERR_OP_ILLEGAL);
}

/// Through the responder engine on the sim fabric: WRITE data travels in
/// a Read chunk and READ data in a Write chunk, on both RPC-over-RDMA
/// versions; every buffer comes back.
#[test]
fn nfs4_over_the_sim_engine_both_versions() {
    for v in [1, 2] {
        let (_s, sh) = setup(Kind::Mem, 4);
        let p = pools(4);
        let e = sim_engine(&p, &sh, 40 + u64::from(v), v, 4);
        let mut c = V4::new(e, "engine");
        c.setup(8);
        assert_eq!(c.slots, 4);
        data_ops(&mut c, &sh, "sim");
        let carried = c.t.carried;
        assert!(carried.read_chunk_calls >= 1, "v{v}: {carried:?}");
        assert!(carried.write_chunk_replies >= 2, "v{v}: {carried:?}");
        let st = c.t.srv.as_ref().unwrap().stats();
        assert!(st.rdma_reads > 0 && st.rdma_writes > 0, "{st:?}");
        let mut e = c.t;
        assert_eq!(e.cli.shutdown(100_000), 0);
        let net = e.net.take().unwrap();
        let _ = net.run_until_idle(1_000_000);
        let mut srv = e.srv.take().unwrap();
        let held = srv.shutdown(100_000);
        let _ = net.run_until_idle(1_000_000);
        srv.poll();
        assert_eq!(held, Default::default(), "responder buffers held");
        drop(srv);
        drop(e);
        for class in [p.recv, p.send, p.data] {
            assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "class {class:?} leaked");
        }
    }
}

/// Through the responder engine on the shm fabric in one process, each
/// backend: WRITE data in a Read chunk, READ data in a Write chunk,
/// RPC-over-RDMA version 2; every buffer comes back.
#[test]
fn nfs4_over_shm_one_process_each_backend() {
    use dataplane::requester::Requester;
    use dataplane::shm::{ShmConfig, ShmFabric};
    use std::time::{Duration, Instant};
    for k in KINDS {
        let (_s, sh) = setup(k, 4);
        let p = pools(4);
        let addr = format!("@rpcrdma-nfs4-shm-{}-{k:?}", std::process::id());
        let srv = responder(&p, &sh, ShmFabric::new(ShmConfig::default()).unwrap(), 4, &addr);
        let fab = ShmFabric::new(ShmConfig::default()).unwrap();
        let mut cli = Requester::new(requester_cfg(&p, versions(2), 4), fab, p.pool, &p.regions, 1).unwrap();
        cli.connect(&addr).unwrap();
        let mut e = Engine {
            cli,
            srv: Some(srv),
            net: None,
            binding: proto::ulb::Nfs3Binding::new(MIB as u32),
            carried: Carried::default(),
        };
        e.connect();
        let mut c = V4::new(e, "shm");
        c.setup(8);
        data_ops(&mut c, &sh, "shm");
        assert!(c.t.carried.write_chunk_replies >= 2, "{k:?}: {:?}", c.t.carried);
        let st = c.t.srv.as_ref().unwrap().stats();
        // The READ data reached the Write chunk (RDMA-Written, or placed
        // directly where the provider maps the requester's memory).
        assert!(st.rdma_writes + st.writes_placed >= 2, "{k:?}: {st:?}");
        let mut e = c.t;
        assert_eq!(e.cli.shutdown(100_000), 0);
        let mut srv = e.srv.take().unwrap();
        drop(e);
        let t0 = Instant::now();
        while srv.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
            srv.poll();
        }
        assert_eq!(srv.shutdown(100_000), Default::default());
        drop(srv);
        for class in [p.recv, p.send, p.data] {
            assert_eq!(p.pool.stats(class).unwrap().in_use, 0, "class {class:?} leaked");
        }
    }
}

/// A COMPOUND over 16 KiB with two WRITEs whose data travel in two Read
/// chunks (SEQUENCE, PUTFH, WRITE, WRITE, GETATTR) is served: each WRITE
/// takes its own chunk, and the operations after each are decoded from
/// the inline bytes that follow it. Before, the Call was answered
/// GARBAGE_ARGS.
#[test]
fn nfs4_compound_over_16k_with_two_read_chunks() {
    for v in [1, 2] {
        let (_s, sh) = setup(Kind::Mem, 4);
        let p = pools(4);
        let e = sim_engine(&p, &sh, 50 + u64::from(v), v, 4);
        let mut c = V4::new(e, "two-chunks");
        c.setup(8);
        let b = c.walk("/b").unwrap();
        let (s, fh) = c
            .open(&b, open("two", 3, 0, b"owner-2", Some((UNCHECKED4, 0o644, [0; 8]))))
            .unwrap();
        let (one, two) = (pattern(3, 12 * 1024), pattern(4, 12 * 1024));
        let before = c.t.carried.read_chunk_calls;
        let r = c.seq(&[
            putfh(&fh),
            write(&s, 0, FILE_SYNC4, &one),
            write(&s, one.len() as u64, FILE_SYNC4, &two),
            getattr(&[FATTR4_SIZE]),
        ]);
        assert_eq!(r.reply.stat, RpcStat::Success, "v{v}: not GARBAGE_ARGS");
        assert_eq!(r.status, NFS4_OK, "v{v}");
        let mut d = r.dec();
        res(&mut d, OP_PUTFH);
        for w in [&one, &two] {
            assert_eq!(res(&mut d, OP_WRITE), NFS4_OK);
            assert_eq!(d.u32(), w.len() as u32);
            let _committed = d.u32();
            let _verf = d.fixed(8);
        }
        assert_eq!(res(&mut d, OP_GETATTR), NFS4_OK);
        assert_eq!(attr(&attrs(&mut d), FATTR4_SIZE), Some(24 * 1024));
        assert_eq!(
            c.t.carried.read_chunk_calls,
            before + 1,
            "v{v}: the WRITEs went in Read chunks"
        );
        let st = c.t.srv.as_ref().unwrap().stats();
        assert!(st.rdma_reads >= 2, "v{v}: two Read chunks pulled: {st:?}");
        let (_, got) = c.read(&fh, &s, 0, 24 * 1024).unwrap();
        assert_eq!(got[..one.len()], one[..], "v{v}");
        assert_eq!(got[one.len()..], two[..], "v{v}");
    }
}

/// One COMPOUND that moves between two exports acts, on each, as that
/// export's rules make the caller (the core keeps the last export's checked
/// caller for the rest of the COMPOUND, `ops::real_of`). Root may make a
/// directory on `/a/x` (not squashed) but not in `/b`'s root-owned root
/// (root squashed to the anonymous user), whichever export came first.
#[test]
fn nfs4_one_compound_acts_as_each_exports_caller() {
    let s = store(Kind::Mem, "b0");
    let mut x = Ex::new("/a/x", "b0");
    x.root_squash = false;
    let b = Ex::new("/b", "b0");
    assert!(b.root_squash);
    let cfg = config(&["b0"], &[x, b], MIB as u32);
    let sh = NfsShared::new(&cfg, vec![("b0".into(), s.backend.clone())]).unwrap();
    let mut c = client(&sh, "two-exports");
    let (xfh, bfh) = (c.walk("/a/x").unwrap(), c.walk("/b").unwrap());
    let mkdir = |name: &'static str| {
        op(move |e| {
            e.u32(OP_CREATE).u32(NF4DIR).opaque(name.as_bytes());
            mode_attrs(e, Some(0o755));
        })
    };
    let owner = || getattr(&[FATTR4_OWNER]);
    let created_owner = |d: &mut Dec<'_>| {
        assert_eq!(res(d, OP_CREATE), NFS4_OK);
        let (_atomic, _before, _after) = (d.bool(), d.u64(), d.u64());
        skip_bitmap(d);
        assert_eq!(res(d, OP_GETATTR), NFS4_OK);
        attr(&attrs(d), FATTR4_OWNER)
    };
    // /a/x first: made as root; then /b refuses the same caller.
    let r = c.seq(&[putfh(&xfh), mkdir("r1"), owner(), putfh(&bfh), mkdir("r2")]);
    assert_eq!(
        (r.status, r.numres),
        (NFS4ERR_ACCESS, 6),
        "/b after /a/x (SEQUENCE and 5)"
    );
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    assert_eq!(created_owner(&mut d), Some(0), "r1 on /a/x");
    // /b first (its caller checked by GETATTR): /a/x then acts as root.
    let r = c.seq(&[putfh(&bfh), owner(), putfh(&xfh), mkdir("r3"), owner()]);
    assert_eq!(r.status, NFS4_OK, "/a/x after /b");
    let mut d = r.dec();
    res(&mut d, OP_PUTFH);
    assert_eq!(res(&mut d, OP_GETATTR), NFS4_OK);
    assert_eq!(attr(&attrs(&mut d), FATTR4_OWNER), Some(0), "/b's root");
    res(&mut d, OP_PUTFH);
    assert_eq!(created_owner(&mut d), Some(0), "r3 on /a/x");
}
