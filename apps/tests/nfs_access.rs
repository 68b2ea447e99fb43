//! Exports and access control: client networks, read-only exports, root
//! squashing, AUTH_NONE, and file handles (garbage, stale, another export's).

mod nfs_common;

use nfs_common::*;
use proto::nfs3::*;
use rpcrdma_apps::backend::{CreateHow, SetAttr};
use rpcrdma_apps::nfs::export::fnv1a64;

/// Two exports of one backend: `/open` (127.0.0.0/8, no squash) and
/// `/lan` (only 10.0.0.0/8).
fn two_exports(kind: Kind) -> (Store, std::sync::Arc<rpcrdma_apps::nfs::NfsShared>) {
    let s = store(kind, "b0");
    let mut open = Ex::new("/open", "b0");
    open.root_squash = false;
    let mut lan = Ex::new("/lan", "b0");
    lan.clients = vec!["10.0.0.0/8"];
    let sh = shared(&[&s], &[open, lan], MIB as u32);
    (s, sh)
}

#[test]
fn clients_outside_the_networks_get_acces() {
    for k in KINDS {
        let (_s, sh) = two_exports(k);
        let mut c = Client::new(Direct::new(&sh));
        c.auth = Auth::root();
        assert_eq!(c.mnt("/lan"), Err(MNT3ERR_ACCES), "{k:?}");
        let open = c.mnt("/open").unwrap().0;
        // A handle of /lan, made from /open's (same backend, /lan's export id).
        let mut lan = open.clone();
        lan[1..9].copy_from_slice(&fnv1a64(b"/lan").to_be_bytes());
        assert_eq!(c.getattr(&lan).unwrap_err(), NFS3ERR_ACCES);
        assert_eq!(c.lookup(&lan, b"x").unwrap_err(), NFS3ERR_ACCES);
        assert_eq!(c.readdir(&lan, 0, 0, 4096).unwrap_err(), NFS3ERR_ACCES);
        assert_eq!(c.fsinfo(&lan).unwrap_err(), NFS3ERR_ACCES);
        // The same client from inside the network.
        c.t.peer = Some("10.9.8.7".parse().unwrap());
        assert!(c.mnt("/lan").is_ok());
        assert!(c.getattr(&lan).is_ok());
        assert_eq!(c.mnt("/open"), Err(MNT3ERR_ACCES));
        assert_eq!(c.getattr(&open).unwrap_err(), NFS3ERR_ACCES);
        // An IPv4-mapped IPv6 address counts as its IPv4 address.
        c.t.peer = Some("::ffff:10.1.1.1".parse().unwrap());
        assert!(c.getattr(&lan).is_ok());
        // No address at all: refused unless the export allows everyone.
        c.t.peer = None;
        assert_eq!(c.mnt("/lan"), Err(MNT3ERR_ACCES));
        assert_eq!(c.getattr(&lan).unwrap_err(), NFS3ERR_ACCES);
    }
}

#[test]
fn unknown_peer_allowed_only_by_a_catch_all_network() {
    let s = store(Kind::Mem, "b0");
    let mut all = Ex::new("/all", "b0");
    all.clients = vec!["192.0.2.0/24", "::/0"];
    let sh = shared(&[&s], &[all], MIB as u32);
    let mut c = Client::new(Direct::new(&sh));
    c.t.peer = None;
    let root = c.mnt("/all").unwrap().0;
    assert!(c.getattr(&root).is_ok());
}

#[test]
fn read_only_exports_refuse_every_change() {
    for k in KINDS {
        let s = store(k, "b0");
        let mut rw = Ex::new("/rw", "b0");
        rw.root_squash = false;
        let mut ro = Ex::new("/ro", "b0");
        ro.read_only = true;
        ro.root_squash = false;
        let sh = shared(&[&s], &[rw, ro], MIB as u32);
        let mut c = Client::new(Direct::new(&sh));
        c.auth = Auth::root();
        let rw = c.mnt("/rw").unwrap().0;
        let (f, _) = c.mkfile(&rw, "f", 0o666).unwrap();
        c.write(&f, 0, b"content", FILE_SYNC).unwrap();
        c.mkdir(&rw, "d", 0o777).unwrap();
        let ro = c.mnt("/ro").unwrap().0;
        let (rf, _) = c.lookup(&ro, b"f").unwrap();
        let (rd, _) = c.lookup(&ro, b"d").unwrap();
        assert_eq!(c.read(&rf, 0, 100).unwrap().0, b"content", "{k:?}");
        assert_eq!(c.write(&rf, 0, b"x", UNSTABLE).unwrap_err(), NFS3ERR_ROFS);
        assert_eq!(c.setattr(&rf, &mode_attr(0o600), None).0, NFS3ERR_ROFS);
        assert_eq!(c.mkfile(&ro, "g", 0o644), Err(NFS3ERR_ROFS));
        assert_eq!(c.mkdir(&ro, "e", 0o755), Err(NFS3ERR_ROFS));
        assert_eq!(c.symlink(&ro, "l", b"f"), Err(NFS3ERR_ROFS));
        assert_eq!(c.mknod(&ro, "p", 7, (0, 0)), Err(NFS3ERR_ROFS));
        assert_eq!(c.remove(&ro, "f"), NFS3ERR_ROFS);
        assert_eq!(c.rmdir(&ro, "d"), NFS3ERR_ROFS);
        assert_eq!(c.rename(&ro, "f", &rd, "f"), NFS3ERR_ROFS);
        assert_eq!(c.link(&rf, &rd, "l"), NFS3ERR_ROFS);
        // ACCESS tells the truth: no MODIFY, EXTEND or DELETE.
        assert_eq!(c.access(&rf, 0x3f).unwrap(), 0x01);
        assert_eq!(c.access(&rd, 0x3f).unwrap(), 0x03);
        // The same file through the read-write export still changes.
        assert!(c.write(&f, 0, b"C", FILE_SYNC).is_ok());
        assert_eq!(c.read(&rf, 0, 1).unwrap().0, b"C");
    }
}

#[test]
fn root_squash_and_anonymous_ids() {
    for k in KINDS {
        let s = store(k, "b0");
        let mut open = Ex::new("/open", "b0");
        open.root_squash = false;
        let squash = Ex::new("/squash", "b0");
        let sh = shared(&[&s], &[open, squash], MIB as u32);
        let mut c = Client::new(Direct::new(&sh));
        c.auth = Auth::root();
        let open = c.mnt("/open").unwrap().0;
        c.setattr(&open, &mode_attr(0o777), None);
        let (_, a) = c.mkfile(&open, "by-root", 0o600).unwrap();
        assert_eq!((a.uid, a.gid), (0, 0), "{k:?}");
        let squash = c.mnt("/squash").unwrap().0;
        let (_, a) = c.mkfile(&squash, "by-squashed-root", 0o600).unwrap();
        assert_eq!((a.uid, a.gid), (ANON, ANON));
        // Squashed root cannot read root's private file, nor chown.
        let (f, _) = c.lookup(&squash, b"by-root").unwrap();
        assert_eq!(c.read(&f, 0, 10).unwrap_err(), NFS3ERR_ACCES);
        let chown = SetAttr {
            uid: Some(5),
            ..SetAttr::default()
        };
        assert_eq!(c.setattr(&f, &chown, None).0, NFS3ERR_PERM);
        // Nor create devices.
        assert_eq!(c.mknod(&squash, "chr", 4, (1, 1)), Err(NFS3ERR_PERM));
        // Other users are not squashed.
        c.auth = Auth::sys(1234, 99);
        let (_, a) = c.mkfile(&squash, "by-user", 0o600).unwrap();
        assert_eq!((a.uid, a.gid), (1234, 99));
    }
}

#[test]
fn auth_none_only_where_allowed() {
    for k in KINDS {
        let s = store(k, "b0");
        let mut anon = Ex::new("/anon", "b0");
        anon.allow_auth_none = true;
        anon.root_squash = false;
        let strict = Ex::new("/strict", "b0");
        let sh = shared(&[&s], &[anon, strict], MIB as u32);
        let mut c = Client::new(Direct::new(&sh));
        c.auth = Auth::sys(1000, 1000);
        let strict_root = c.mnt("/strict").unwrap().0;
        let (root, flavors) = c.mnt("/anon").unwrap();
        assert_eq!(flavors, vec![1, 0], "AUTH_SYS, then AUTH_NONE");
        c.auth = Auth::None;
        // MNT and NFS calls on the strict export: AUTH_TOOWEAK.
        let r = c.call(MOUNT, 3, 1, |e| {
            e.opaque(b"/strict");
        });
        assert_eq!(r.stat, RpcStat::AuthError(5), "{k:?}");
        let r = c.nfs(NFSPROC3_GETATTR, |e| {
            e.opaque(&strict_root);
        });
        assert_eq!(r.stat, RpcStat::AuthError(5));
        // On the other export AUTH_NONE is the anonymous user.
        assert!(c.getattr(&root).is_ok());
        assert_eq!(
            c.mkfile(&root, "f", 0o644),
            Err(NFS3ERR_ACCES),
            "root dir is 0755 root's"
        );
        c.auth = Auth::root();
        c.mkdir(&root, "pub", 0o777).unwrap();
        let (p, _) = c.lookup(&root, b"pub").unwrap();
        c.auth = Auth::None;
        let (_, a) = c.mkfile(&p, "f", 0o644).unwrap();
        assert_eq!((a.uid, a.gid), (ANON, ANON));
    }
}

#[test]
fn handles_garbage_stale_and_foreign() {
    for k in KINDS {
        let (_s, sh) = two_exports(k);
        let mut c = Client::new(Direct::new(&sh));
        c.auth = Auth::root();
        let root = c.mnt("/open").unwrap().0;
        assert!(root.len() <= 41, "9-byte prefix and at most 32 backend bytes");
        let (f, _) = c.mkfile(&root, "f", 0o644).unwrap();
        // Empty, prefix only, wrong version byte: BADHANDLE.
        assert_eq!(c.getattr(&[]).unwrap_err(), NFS3ERR_BADHANDLE, "{k:?}");
        assert_eq!(c.getattr(&root[..9]).unwrap_err(), NFS3ERR_BADHANDLE);
        let mut v = root.clone();
        v[0] ^= 0xff;
        assert_eq!(c.getattr(&v).unwrap_err(), NFS3ERR_BADHANDLE);
        // An export id nobody has: STALE.
        let mut v = root.clone();
        v[1..9].copy_from_slice(&fnv1a64(b"/gone").to_be_bytes());
        assert_eq!(c.getattr(&v).unwrap_err(), NFS3ERR_STALE);
        // A mangled backend part: the backend's BADHANDLE or STALE.
        for i in 9..f.len() {
            let mut v = f.clone();
            v[i] ^= 0x5a;
            let e = c.getattr(&v).unwrap_err();
            assert!(e == NFS3ERR_BADHANDLE || e == NFS3ERR_STALE, "byte {i}: {e}");
        }
        let mut v = f.clone();
        v.truncate(f.len() - 1);
        assert!(matches!(c.getattr(&v), Err(NFS3ERR_BADHANDLE | NFS3ERR_STALE)));
        // Every procedure answers a garbage handle with its failure arm.
        let junk = [1u8, 2, 3];
        assert_eq!(c.read(&junk, 0, 1).unwrap_err(), NFS3ERR_BADHANDLE);
        assert_eq!(c.write(&junk, 0, b"x", 0).unwrap_err(), NFS3ERR_BADHANDLE);
        assert_eq!(c.commit(&junk).unwrap_err(), NFS3ERR_BADHANDLE);
        assert_eq!(c.readlink(&junk).unwrap_err(), NFS3ERR_BADHANDLE);
        assert_eq!(
            c.create(&junk, b"n", CreateHow::Guarded(SetAttr::default())),
            Err(NFS3ERR_BADHANDLE)
        );
        assert_eq!(c.rename(&junk, "a", &root, "b"), NFS3ERR_BADHANDLE);
        assert_eq!(c.link(&f, &junk, "b"), NFS3ERR_BADHANDLE);
        assert_eq!(c.readdirplus(&junk, 0, 0, 100, 1000).unwrap_err(), NFS3ERR_BADHANDLE);
        assert_eq!(c.fsstat(&junk).unwrap_err(), NFS3ERR_BADHANDLE);
        assert_eq!(c.pathconf(&junk).unwrap_err(), NFS3ERR_BADHANDLE);
        assert_eq!(c.access(&junk, 1).unwrap_err(), NFS3ERR_BADHANDLE);
    }
}

#[test]
fn mount_list_and_exports() {
    let (_s, sh) = two_exports(Kind::Mem);
    let mut c = Client::new(Direct::new(&sh));
    assert_eq!(
        c.exports(),
        vec![
            ("/open".to_string(), vec!["127.0.0.0/8".to_string()]),
            ("/lan".to_string(), vec!["10.0.0.0/8".to_string()]),
        ]
    );
    assert!(c.dump().is_empty());
    c.mnt("/open").unwrap();
    c.mnt("/open").unwrap();
    assert_eq!(
        c.dump(),
        vec![("127.0.0.1".to_string(), "/open".to_string())],
        "no duplicates"
    );
    c.t.peer = Some("10.0.0.5".parse().unwrap());
    c.mnt("/lan").unwrap();
    c.t.peer = Some("127.0.0.2".parse().unwrap());
    c.mnt("/open/").unwrap();
    assert_eq!(c.dump().len(), 3);
    c.umnt("/open");
    assert_eq!(c.dump().len(), 2);
    c.t.peer = Some("10.0.0.5".parse().unwrap());
    c.umntall();
    assert_eq!(c.dump(), vec![("127.0.0.1".to_string(), "/open".to_string())]);
    // Without an address the machine name is recorded.
    let s = store(Kind::Mem, "b1");
    let mut any = Ex::new("/any", "b0");
    any.clients = vec!["0.0.0.0/0"];
    let sh2 = shared(&[&s], &[any], MIB as u32);
    let mut c2 = Client::new(Direct::new(&sh2));
    c2.t.peer = None;
    c2.mnt("/any").unwrap();
    assert_eq!(c2.dump(), vec![("testhost".to_string(), "/any".to_string())]);
}

#[test]
fn mount_list_is_bounded() {
    let (_s, sh) = two_exports(Kind::Mem);
    let mut c = Client::new(Direct::new(&sh));
    for i in 0..300u32 {
        c.t.peer = Some(std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x7f00_0000 + i + 1)));
        c.mnt("/open").unwrap();
    }
    let list = sh.mounts();
    assert_eq!(list.len(), rpcrdma_apps::nfs::MAX_MOUNT_ENTRIES);
    assert_eq!(list.last().unwrap().host, "127.0.1.44", "the newest is kept");
    // DUMP lists what fits the head buffer, and stays valid XDR.
    let d = c.dump();
    assert!(!d.is_empty() && d.len() <= 256);
}

#[test]
fn shared_setup_refuses_bad_exports() {
    let s = store(Kind::Mem, "b0");
    let list = || vec![("b0".to_string(), s.backend.clone())];
    let base = config(&["b0"], &[Ex::new("/x", "b0")], MIB as u32);
    assert!(rpcrdma_apps::nfs::NfsShared::new(&base, list()).is_ok());
    // A backend the list does not have.
    let mut cfg = base.clone();
    cfg.exports[0].backend = "nope".into();
    assert!(rpcrdma_apps::nfs::NfsShared::new(&cfg, list())
        .unwrap_err()
        .contains("nope"));
    // A network that does not parse (the configuration was changed after validation).
    let mut cfg = base.clone();
    cfg.exports[0].clients = vec!["not-a-network".into()];
    assert!(rpcrdma_apps::nfs::NfsShared::new(&cfg, list()).is_err());
    // Two paths that are the same export once trailing slashes go.
    let mut cfg = base.clone();
    let mut dup = cfg.exports[0].clone();
    dup.path = "/x/".into();
    cfg.exports.push(dup);
    assert!(rpcrdma_apps::nfs::NfsShared::new(&cfg, list()).is_err());
    // No data pool: the 1 MiB default.
    let mut cfg = base;
    cfg.pools.retain(|p| p.usage != rpcrdma_apps::config::PoolUsage::Data);
    assert_eq!(
        rpcrdma_apps::nfs::NfsShared::new(&cfg, list()).unwrap().max_io_bytes(),
        MIB as u32
    );
}
