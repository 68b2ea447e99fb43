//! RPC-level dispatch of the NFS gateway: programs, versions, procedures, RPC
//! version, credentials, undecodable arguments and hostile input.

mod nfs_common;

use nfs_common::*;
use proto::nfs3::*;

fn client() -> (Store, Client<Direct>, Vec<u8>) {
    let s = store(Kind::Mem, "b0");
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let sh = shared(&[&s], &[ex], MIB as u32);
    let mut c = Client::new(Direct::new(&sh));
    let root = c.mnt("/export").unwrap().0;
    (s, c, root)
}

#[test]
fn null_for_every_program_without_auth() {
    let (_s, mut c, _) = client();
    for prog in [NFS, MOUNT] {
        for auth in [
            Auth::None,
            Auth::root(),
            Auth::Raw {
                flavor: 3,
                body: vec![1, 2, 3, 4],
            },
        ] {
            c.auth = auth.clone();
            let r = c.call(prog, 3, 0, |_| {});
            assert_eq!(r.stat, RpcStat::Success, "prog {prog} {auth:?}");
            assert!(r.body.is_empty());
        }
    }
    let st = c.t.svc.stats();
    assert_eq!((st.nfs[0], st.mount[0]), (3, 3));
}

#[test]
fn programs_versions_procedures() {
    let (_s, mut c, _) = client();
    assert_eq!(c.call(100_000, 2, 0, |_| {}).stat, RpcStat::ProgUnavail, "portmapper");
    assert_eq!(c.call(100_227, 3, 0, |_| {}).stat, RpcStat::ProgUnavail, "NFS_ACL");
    // NFS versions 3 and 4 (issue 22) are served.
    for v in [2, 5] {
        assert_eq!(c.call(NFS, v, 0, |_| {}).stat, RpcStat::ProgMismatch(3, 4));
    }
    // MOUNT v1 and v2 (showmount asks v1): what they share with v3, not MNT.
    for v in [0, 4] {
        assert_eq!(c.call(MOUNT, v, 0, |_| {}).stat, RpcStat::ProgMismatch(1, 3));
    }
    assert_eq!(c.call(NFS, 4, 0, |_| {}).stat, RpcStat::Success);
    assert_eq!(c.call(NFS, 4, 2, |_| {}).stat, RpcStat::ProcUnavail);
    for v in [1, 2] {
        assert_eq!(c.call(MOUNT, v, 0, |_| {}).stat, RpcStat::Success);
        assert_eq!(c.call(MOUNT, v, 1, |_| {}).stat, RpcStat::ProcUnavail, "v{v} MNT");
        assert_eq!(c.call(MOUNT, v, 5, |_| {}).stat, RpcStat::Success, "v{v} EXPORT");
    }
    assert_eq!(c.call(NFS, 3, 22, |_| {}).stat, RpcStat::ProcUnavail);
    assert_eq!(c.call(NFS, 3, u32::MAX, |_| {}).stat, RpcStat::ProcUnavail);
    assert_eq!(c.call(MOUNT, 3, 6, |_| {}).stat, RpcStat::ProcUnavail);
    assert!(c.t.svc.stats().rpc_errors >= 8);
}

#[test]
fn rpc_version_and_message_type() {
    let (_s, mut c, _) = client();
    let mut m = call_header(77, NFS, 3, 0, &Auth::None);
    m.b[8..12].copy_from_slice(&3u32.to_be_bytes());
    assert_eq!(c.raw(&m.b).unwrap().stat, RpcStat::RpcMismatch(2, 2));
    // A reply (mtype 1) is not answered; nor is a message too short for a header.
    let mut m = call_header(78, NFS, 3, 0, &Auth::None);
    m.b[4..8].copy_from_slice(&1u32.to_be_bytes());
    assert!(c.raw(&m.b).is_none());
    assert!(c.raw(&m.b[..3]).is_none());
    let m = call_header(79, NFS, 3, 0, &Auth::None);
    assert!(c.raw(&m.b[..20]).is_none(), "no proc word");
    assert!(c.t.svc.stats().dropped >= 2);
}

#[test]
fn credentials() {
    let (_s, mut c, root) = client();
    // Flavors other than AUTH_SYS and AUTH_NONE (AUTH_DH, RPCSEC_GSS, junk).
    for flavor in [2, 3, 6, 0x7fff] {
        c.auth = Auth::Raw {
            flavor,
            body: vec![0; 8],
        };
        let r = c.nfs(NFSPROC3_GETATTR, |e| {
            e.opaque(&root);
        });
        assert_eq!(r.stat, RpcStat::AuthError(1), "flavor {flavor}: AUTH_BADCRED");
    }
    // RPCSEC_GSS is refused even on NULL (a GSS context cannot be set up here).
    c.auth = Auth::Raw {
        flavor: 6,
        body: vec![0; 20],
    };
    assert_eq!(c.call(NFS, 3, 0, |_| {}).stat, RpcStat::AuthError(1));
    // An AUTH_SYS body that does not decode.
    c.auth = Auth::Raw {
        flavor: 1,
        body: vec![0, 0, 0, 1, 0, 0, 1, 0],
    };
    let r = c.nfs(NFSPROC3_GETATTR, |e| {
        e.opaque(&root);
    });
    assert_eq!(r.stat, RpcStat::AuthError(1));
    // A credential body over 400 bytes.
    let mut m = call_header(5, NFS, 3, 1, &Auth::None);
    m.b.truncate(24);
    m.u32(1).opaque(&[0u8; 404]).u32(0).u32(0).opaque(&root);
    assert_eq!(c.raw(&m.b).unwrap().stat, RpcStat::AuthError(1));
    // A verifier body over 400 bytes: AUTH_BADVERF.
    let mut m = call_header(6, NFS, 3, 1, &Auth::None);
    m.b.truncate(32);
    m.u32(0).opaque(&[0u8; 404]).opaque(&root);
    assert_eq!(c.raw(&m.b).unwrap().stat, RpcStat::AuthError(3));
    assert!(c.t.svc.stats().auth_errors >= 6);
}

/// One valid call of every procedure with arguments (NFS 1..=21, MOUNT 1 and 3).
fn valid_calls(root: &[u8]) -> Vec<(u32, u32, Enc)> {
    let mut v = vec![];
    let mut add = |prog: u32, p: u32, f: &dyn Fn(&mut Enc)| {
        let mut e = Enc::default();
        f(&mut e);
        v.push((prog, p, e));
    };
    let s = mode_attr(0o644);
    add(NFS, 1, &|e| {
        e.opaque(root);
    });
    add(NFS, 2, &|e| {
        e.opaque(root).sattr(&s).u32(0);
    });
    add(NFS, 3, &|e| {
        e.dirop(root, b"name");
    });
    add(NFS, 4, &|e| {
        e.opaque(root).u32(0x3f);
    });
    add(NFS, 5, &|e| {
        e.opaque(root);
    });
    add(NFS, 6, &|e| {
        e.opaque(root).u64(0).u32(100);
    });
    add(NFS, 7, &|e| {
        e.opaque(root).u64(0).u32(5).u32(2).opaque(b"hello");
    });
    add(NFS, 8, &|e| {
        e.dirop(root, b"new").u32(0).sattr(&s);
    });
    add(NFS, 9, &|e| {
        e.dirop(root, b"dir").sattr(&s);
    });
    add(NFS, 10, &|e| {
        e.dirop(root, b"lnk").sattr(&s).opaque(b"target");
    });
    add(NFS, 11, &|e| {
        e.dirop(root, b"nod").u32(4).sattr(&s).u32(1).u32(2);
    });
    add(NFS, 12, &|e| {
        e.dirop(root, b"x");
    });
    add(NFS, 13, &|e| {
        e.dirop(root, b"x");
    });
    add(NFS, 14, &|e| {
        e.dirop(root, b"x").dirop(root, b"y");
    });
    add(NFS, 15, &|e| {
        e.opaque(root).dirop(root, b"y");
    });
    add(NFS, 16, &|e| {
        e.opaque(root).u64(0).u64(0).u32(4096);
    });
    add(NFS, 17, &|e| {
        e.opaque(root).u64(0).u64(0).u32(4096).u32(4096);
    });
    for p in 18..=20 {
        add(NFS, p, &|e| {
            e.opaque(root);
        });
    }
    add(NFS, 21, &|e| {
        e.opaque(root).u64(0).u32(0);
    });
    add(MOUNT, 1, &|e| {
        e.opaque(b"/export");
    });
    add(MOUNT, 3, &|e| {
        e.opaque(b"/export");
    });
    v
}

#[test]
fn every_truncation_of_the_arguments_is_garbage_args() {
    let (_s, mut c, root) = client();
    c.auth = Auth::root();
    for (prog, p, args) in valid_calls(&root) {
        // The full arguments are not garbage.
        let r = c.call(prog, 3, p, |e| {
            e.b.extend_from_slice(&args.b);
        });
        assert_eq!(r.stat, RpcStat::Success, "prog {prog} proc {p} full");
        // Every shorter prefix is (a WRITE's data and its count must agree,
        // so even a cut inside the data is garbage).
        for cut in 0..args.b.len() {
            let r = c.call(prog, 3, p, |e| {
                e.b.extend_from_slice(&args.b[..cut]);
            });
            assert_eq!(r.stat, RpcStat::GarbageArgs, "prog {prog} proc {p} cut at {cut}");
        }
    }
    assert!(c.t.svc.stats().garbage_args > 100);
}

#[test]
fn bad_discriminants_and_lengths_are_garbage_args() {
    let (_s, mut c, root) = client();
    let cases: Vec<(u32, Enc)> = vec![
        // a 65-byte handle
        (1, {
            let mut e = Enc::default();
            e.opaque(&[1; 65]);
            e
        }),
        // stable_how 3
        (7, {
            let mut e = Enc::default();
            e.opaque(&root).u64(0).u32(1).u32(3).opaque(b"x");
            e
        }),
        // WRITE claiming 4 GiB of data
        (7, {
            let mut e = Enc::default();
            e.opaque(&root).u64(0).u32(u32::MAX).u32(0).u32(u32::MAX);
            e
        }),
        // createmode3 3
        (8, {
            let mut e = Enc::default();
            e.dirop(&root, b"n").u32(3);
            e
        }),
        // a bool of 2 in sattr3
        (2, {
            let mut e = Enc::default();
            e.opaque(&root).u32(2);
            e
        }),
        // time_how 7
        (9, {
            let mut e = Enc::default();
            e.dirop(&root, b"d").u32(0).u32(0).u32(0).u32(0).u32(7);
            e
        }),
    ];
    for (p, args) in cases {
        let r = c.nfs(p, |e| {
            e.b.extend_from_slice(&args.b);
        });
        assert_eq!(r.stat, RpcStat::GarbageArgs, "proc {p}");
    }
    // MOUNT dirpath over MNTPATHLEN.
    let r = c.call(MOUNT, 3, 1, |e| {
        e.opaque(&[b'/'; 1025]);
    });
    assert_eq!(r.stat, RpcStat::GarbageArgs);
}

#[test]
fn huge_counts_are_bounded() {
    let (_s, mut c, root) = client();
    c.auth = Auth::root();
    let (f, _) = c.mkfile(&root, "f", 0o644).unwrap();
    c.write(&f, 0, &pattern(3, 70_000), FILE_SYNC).unwrap();
    // READ of 4 GiB: the hint and the read stop at the READ limit.
    let (d, eof, _) = c.read(&f, 0, u32::MAX).unwrap();
    assert_eq!(c.t.last_hint, MIB);
    assert_eq!(d.len(), 70_000);
    assert!(eof);
    // READ at the largest offset.
    let (d, eof, _) = c.read(&f, u64::MAX, 10).unwrap();
    assert!(d.is_empty() && eof);
    // READDIR with 4 GiB counts stays within the head buffer.
    for i in 0..200 {
        c.mkfile(&root, &format!("entry-with-a-longish-name-{i}"), 0o644)
            .unwrap();
    }
    let l = c.readdir(&root, 0, 0, u32::MAX).unwrap();
    assert!(!l.eof && !l.entries.is_empty());
    let r = c.nfs(NFSPROC3_READDIRPLUS, |e| {
        e.opaque(&root).u64(0).u64(0).u32(u32::MAX).u32(u32::MAX);
    });
    assert!(r.body.len() <= 8192);
    // An unknown cookie.
    assert!(c.readdir(&root, u64::MAX, l.verf, 4096).is_err());
}

#[test]
fn small_head_buffers() {
    let (_s, mut c, root) = client();
    // Results that do not fit the head: SYSTEM_ERR, never a partial reply.
    c.t.head_bytes = 100;
    let r = c.nfs(NFSPROC3_GETATTR, |e| {
        e.opaque(&root);
    });
    assert_eq!(r.stat, RpcStat::SystemErr);
    // A READDIR bounded by a small head still lists everything, in pieces.
    c.t.head_bytes = 400;
    c.auth = Auth::root();
    for i in 0..30 {
        c.mkfile(&root, &format!("f{i}"), 0o644).unwrap();
    }
    assert_eq!(c.list_all(&root, 100_000).len(), 32);
    // Too small even for the header: dropped.
    c.t.head_bytes = 16;
    assert!(c.t.roundtrip(&call_header(9, NFS, 3, 0, &Auth::None).b).is_none());
}

/// Tiny deterministic generator.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
}

#[test]
fn hostile_calls_never_panic_and_replies_decode() {
    let (_s, mut c, root) = client();
    let base = valid_calls(&root);
    let mut g = Lcg(0x5eed);
    let mut answered = 0;
    for i in 0..20_000u32 {
        let (prog, p, args) = &base[(g.next() as usize) % base.len()];
        let auth = match g.next() % 3 {
            0 => Auth::None,
            1 => Auth::root(),
            _ => Auth::sys(g.next() % 3000, 7),
        };
        let mut m = call_header(i, *prog, 3, *p, &auth);
        let mut a = args.b.clone();
        // Mutate: flip words, change lengths, truncate or extend.
        for _ in 0..(g.next() % 4) {
            if a.is_empty() {
                break;
            }
            let at = (g.next() as usize % a.len()) & !3;
            let v = match g.next() % 4 {
                0 => u32::MAX,
                1 => g.next() % 300,
                2 => 0,
                _ => g.next(),
            };
            if at + 4 <= a.len() {
                a[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
        }
        if g.next().is_multiple_of(5) {
            let n = g.next() as usize % (a.len() + 1);
            a.truncate(n);
        }
        if g.next().is_multiple_of(7) {
            a.extend((0..g.next() % 64).map(|_| g.next() as u8));
        }
        m.b.extend_from_slice(&a);
        if let Some(r) = c.raw(&m.b) {
            answered += 1;
            if r.stat == RpcStat::Success {
                assert!(!r.body.is_empty() || (*prog == MOUNT && (*p == 3 || *p == 4)));
            }
        }
    }
    assert_eq!(answered, 20_000, "every well-headed call is answered");
}
