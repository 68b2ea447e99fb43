//! The client's identity is the one the file system sees (issue 21 item 6):
//! through the NFS service, as a non-root AUTH_SYS caller, on `uring` (the
//! kernel checks with the caller's credentials: the tests run as root, so
//! without that every change would be root's) and on `mem` (the same rules
//! in user space): set-id bits cleared by a non-owner's write and by chown,
//! S_ISGID dropped from a chmod by an owner outside the file's group, POSIX
//! ACLs (uring), hard links as `protected_hardlinks`, moving a directory one
//! may not write, and root squashing.

mod nfs4_common;
mod nfs_common;

use nfs4_common::{open, V4};
use nfs_common::*;
use proto::nfs3::*;
use proto::nfs4::{FILE_SYNC4, NFS4ERR_ACCESS, UNCHECKED4};
use rpcrdma_apps::backend::SetAttr;
use rpcrdma_apps::nfs::xdr::{ACCESS3_MODIFY, ACCESS3_READ};

const USER: u32 = 1000;
const OTHER: u32 = 2000;

/// A backend of `kind` behind an export without root squashing, its root
/// open to all (mode 0777); the client acts as root.
fn setup(kind: Kind) -> (Store, Client<Direct>, Vec<u8>) {
    let s = store(kind, "b0");
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let sh = shared(&[&s], &[ex], MIB as u32);
    let mut c = Client::new(Direct::new(&sh));
    c.auth = Auth::root();
    let (root, _) = c.mnt("/export").unwrap();
    assert_eq!(c.setattr(&root, &mode_attr(0o777), None).0, NFS3_OK);
    (s, c, root)
}

fn mode(c: &mut Client<Direct>, fh: &[u8]) -> u32 {
    c.getattr(fh).unwrap().mode & 0o7777
}

fn chown(uid: Option<u32>, gid: Option<u32>) -> SetAttr {
    SetAttr {
        uid,
        gid,
        ..SetAttr::default()
    }
}

/// A write by a caller without CAP_FSETID (not root) clears S_ISUID, and
/// S_ISGID where group execute is set or the writer is not in the file's
/// group, as the kernel's file_remove_privs.
fn write_clears_setid(kind: Kind) {
    let (_s, mut c, root) = setup(kind);
    let (f, _) = c.mkfile(&root, "setid", 0o6777).unwrap();
    let (g, _) = c.mkfile(&root, "plain-sgid", 0o2666).unwrap();
    assert_eq!(c.setattr(&g, &chown(None, Some(4242)), None).0, NFS3_OK);
    assert_eq!(c.setattr(&g, &mode_attr(0o2666), None).0, NFS3_OK);
    assert_eq!(mode(&mut c, &f), 0o6777, "{kind:?}");
    c.auth = Auth::sys(USER, USER);
    c.write(&f, 0, b"data", FILE_SYNC).unwrap();
    c.auth = Auth::Sys {
        uid: USER,
        gid: USER,
        gids: vec![4242],
    };
    c.write(&g, 0, b"data", FILE_SYNC).unwrap();
    c.auth = Auth::root();
    assert_eq!(
        mode(&mut c, &f),
        0o0777,
        "{kind:?}: a non-owner's write clears both set-id bits"
    );
    assert_eq!(
        mode(&mut c, &g),
        0o2666,
        "{kind:?}: S_ISGID without group execute stays for a writer in the group"
    );
    c.auth = Auth::sys(USER, USER);
    c.write(&g, 0, b"data", FILE_SYNC).unwrap();
    c.auth = Auth::root();
    assert_eq!(mode(&mut c, &g), 0o0666, "{kind:?}: and goes for one outside it");
    // Root's own write keeps them (CAP_FSETID).
    assert_eq!(c.setattr(&f, &mode_attr(0o6777), None).0, NFS3_OK);
    c.write(&f, 0, b"root", FILE_SYNC).unwrap();
    assert_eq!(mode(&mut c, &f), 0o6777, "{kind:?}");
}

#[test]
fn nfs_safety_uring_non_owner_write_clears_setid_bits() {
    write_clears_setid(Kind::Uring);
}

#[test]
fn nfs_safety_mem_non_owner_write_clears_setid_bits() {
    write_clears_setid(Kind::Mem);
}

/// An owner who is not in the file's group may chmod, but S_ISGID is
/// dropped (the kernel's setattr_copy), also for a new file that would take
/// it in a set-group-ID directory.
fn chmod_g_s_outside_the_group(kind: Kind) {
    let (_s, mut c, root) = setup(kind);
    c.auth = Auth::sys(USER, USER);
    let (f, _) = c.mkfile(&root, "mine", 0o755).unwrap();
    c.auth = Auth::root();
    assert_eq!(c.setattr(&f, &chown(None, Some(4242)), None).0, NFS3_OK);
    c.auth = Auth::sys(USER, USER);
    let (st, (_, post)) = c.setattr(&f, &mode_attr(0o2755), None);
    assert_eq!(st, NFS3_OK, "{kind:?}: the owner may chmod");
    assert_eq!(post.unwrap().mode & 0o7777, 0o755, "{kind:?}: S_ISGID dropped");
    // In the group (a supplementary one): kept.
    c.auth = Auth::Sys {
        uid: USER,
        gid: USER,
        gids: vec![4242],
    };
    let (st, (_, post)) = c.setattr(&f, &mode_attr(0o2755), None);
    assert_eq!(st, NFS3_OK);
    assert_eq!(post.unwrap().mode & 0o7777, 0o2755, "{kind:?}: a member keeps S_ISGID");
}

#[test]
fn nfs_safety_uring_chmod_g_s_by_an_owner_outside_the_group_drops_it() {
    chmod_g_s_outside_the_group(Kind::Uring);
}

#[test]
fn nfs_safety_mem_chmod_g_s_by_an_owner_outside_the_group_drops_it() {
    chmod_g_s_outside_the_group(Kind::Mem);
}

/// A change of owner clears the set-id bits of a non-directory (as the
/// Linux server: also for root).
#[test]
fn nfs_safety_mem_chown_clears_setid_bits() {
    for kind in KINDS {
        let (_s, mut c, root) = setup(kind);
        let (f, _) = c.mkfile(&root, "f", 0o6755).unwrap();
        assert_eq!(c.setattr(&f, &chown(Some(USER), None), None).0, NFS3_OK);
        assert_eq!(mode(&mut c, &f), 0o755, "{kind:?}");
        let (d, _) = c.mkdir(&root, "d", 0o2755).unwrap();
        assert_eq!(c.setattr(&d, &chown(Some(USER), None), None).0, NFS3_OK);
        assert_eq!(mode(&mut c, &d), 0o2755, "{kind:?}: a directory keeps S_ISGID");
    }
}

/// protected_hardlinks: a non-root caller may hard link only a file it owns,
/// or a plain regular file it may read and write.
fn hard_links(kind: Kind) {
    let (_s, mut c, root) = setup(kind);
    let (theirs, _) = c.mkfile(&root, "theirs", 0o644).unwrap();
    let (open, _) = c.mkfile(&root, "open", 0o666).unwrap();
    let (setuid, _) = c.mkfile(&root, "setuid", 0o4666).unwrap();
    c.auth = Auth::sys(USER, USER);
    let (mine, _) = c.mkfile(&root, "mine", 0o600).unwrap();
    assert_eq!(c.link(&theirs, &root, "l1"), NFS3ERR_PERM, "{kind:?}: not writable");
    assert_eq!(c.link(&setuid, &root, "l2"), NFS3ERR_PERM, "{kind:?}: set-user-ID");
    assert_eq!(c.link(&open, &root, "l3"), NFS3_OK, "{kind:?}");
    assert_eq!(c.link(&mine, &root, "l4"), NFS3_OK, "{kind:?}");
    c.auth = Auth::root();
    assert_eq!(c.link(&theirs, &root, "l5"), NFS3_OK, "{kind:?}: root may");
}

fn protected_hardlinks_on() -> bool {
    std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").is_ok_and(|s| s.trim() == "1")
}

#[test]
fn nfs_safety_uring_hard_links_follow_protected_hardlinks() {
    if !protected_hardlinks_on() {
        eprintln!("fs.protected_hardlinks is off on this host: the kernel allows these links");
        return;
    }
    hard_links(Kind::Uring);
}

#[test]
fn nfs_safety_mem_hard_links_follow_protected_hardlinks() {
    hard_links(Kind::Mem);
}

/// A directory moved to another parent has its `..` rewritten: the caller
/// needs write permission on it (the kernel's vfs_rename).
#[test]
fn nfs_safety_moving_a_directory_one_may_not_write_is_refused() {
    for kind in KINDS {
        let (_s, mut c, root) = setup(kind);
        let (a, _) = c.mkdir(&root, "a", 0o777).unwrap();
        let (b, _) = c.mkdir(&root, "b", 0o777).unwrap();
        c.mkdir(&a, "sub", 0o555).unwrap();
        c.auth = Auth::sys(USER, USER);
        assert_eq!(c.rename(&a, "sub", &b, "sub"), NFS3ERR_ACCES, "{kind:?}");
        // Within one directory `..` stays: allowed.
        assert_eq!(c.rename(&a, "sub", &a, "sub2"), NFS3_OK, "{kind:?}");
    }
}

/// Removing another's file from a sticky directory is EPERM, as the kernel.
#[test]
fn nfs_safety_sticky_directory_keeps_others_files() {
    for kind in KINDS {
        let (_s, mut c, root) = setup(kind);
        let (t, _) = c.mkdir(&root, "tmp", 0o1777).unwrap();
        c.auth = Auth::sys(USER, USER);
        c.mkfile(&t, "mine", 0o666).unwrap();
        c.auth = Auth::sys(OTHER, OTHER);
        assert_eq!(c.remove(&t, "mine"), NFS3ERR_PERM, "{kind:?}");
        assert_eq!(c.rename(&t, "mine", &t, "stolen"), NFS3ERR_PERM, "{kind:?}");
        c.mkfile(&t, "theirs", 0o666).unwrap();
        assert_eq!(
            c.rename(&t, "theirs", &t, "mine"),
            NFS3ERR_PERM,
            "{kind:?}: not over another's"
        );
        assert_eq!(c.remove(&t, "theirs"), NFS3_OK, "{kind:?}");
    }
}

/// `system.posix_acl_access` value: version 2, then (tag, perm, id) entries
/// in tag order.
fn acl_xattr(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

fn set_acl(path: &std::path::Path, entries: &[(u16, u16, u32)]) -> bool {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let v = acl_xattr(entries);
    // SAFETY: both strings are NUL-terminated, `v` is readable for its length.
    unsafe {
        libc::setxattr(
            p.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            v.as_ptr().cast(),
            v.len(),
            0,
        ) == 0
    }
}

const USER_OBJ: u16 = 1;
const ACL_USER: u16 = 2;
const GROUP_OBJ: u16 = 4;
const MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
const NO_ID: u32 = u32::MAX;

/// POSIX ACLs on a `uring` tree hold: a named-user entry grants what the
/// mode bits do not, and takes away what the "other" bits would give.
#[test]
fn nfs_safety_uring_posix_acls_apply() {
    let (s, mut c, root) = setup(Kind::Uring);
    let dir = s.dir.as_ref().unwrap().0.clone();
    let (granted, _) = c.mkfile(&root, "granted", 0o600).unwrap();
    let (denied, _) = c.mkfile(&root, "denied", 0o666).unwrap();
    c.write(&granted, 0, b"secret", FILE_SYNC).unwrap();
    let grant = [
        (USER_OBJ, 6, NO_ID),
        (ACL_USER, 6, USER),
        (GROUP_OBJ, 0, NO_ID),
        (MASK, 6, NO_ID),
        (ACL_OTHER, 0, NO_ID),
    ];
    let deny = [
        (USER_OBJ, 6, NO_ID),
        (ACL_USER, 0, USER),
        (GROUP_OBJ, 6, NO_ID),
        (MASK, 6, NO_ID),
        (ACL_OTHER, 6, NO_ID),
    ];
    if !set_acl(&dir.join("granted"), &grant) || !set_acl(&dir.join("denied"), &deny) {
        eprintln!(
            "no POSIX ACLs on {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
        return;
    }
    c.auth = Auth::sys(USER, USER);
    let (data, _, _) = c.read(&granted, 0, 64).expect("the ACL grants reading");
    assert_eq!(data, b"secret");
    c.write(&granted, 0, b"SECRET", FILE_SYNC)
        .expect("the ACL grants writing");
    assert_eq!(
        c.access(&granted, ACCESS3_READ | ACCESS3_MODIFY),
        Ok(ACCESS3_READ | ACCESS3_MODIFY)
    );
    assert_eq!(
        c.write(&denied, 0, b"x", FILE_SYNC).map(|_| ()),
        Err(NFS3ERR_ACCES),
        "the ACL takes writing away"
    );
    assert_eq!(c.read(&denied, 0, 1).map(|_| ()), Err(NFS3ERR_ACCES));
    assert_eq!(c.access(&denied, ACCESS3_READ | ACCESS3_MODIFY), Ok(0));
    // Another user falls to the entries for others.
    c.auth = Auth::sys(OTHER, OTHER);
    assert_eq!(c.read(&granted, 0, 1).map(|_| ()), Err(NFS3ERR_ACCES));
    c.write(&denied, 0, b"y", FILE_SYNC).expect("others may write");
}

/// The kernel refuses a non-root caller what it would refuse them locally,
/// with the kernel's error: a directory they may not write, another's file.
#[test]
fn nfs_safety_uring_non_root_caller_gets_the_kernels_refusals() {
    let (_s, mut c, root) = setup(Kind::Uring);
    let (ro, _) = c.mkdir(&root, "ro", 0o755).unwrap();
    let (f, _) = c.mkfile(&root, "rootfile", 0o644).unwrap();
    c.auth = Auth::sys(USER, USER);
    assert_eq!(c.mkfile(&ro, "x", 0o644).map(|_| ()), Err(NFS3ERR_ACCES));
    assert_eq!(c.mkdir(&ro, "x", 0o755).map(|_| ()), Err(NFS3ERR_ACCES));
    assert_eq!(c.write(&f, 0, b"x", FILE_SYNC).map(|_| ()), Err(NFS3ERR_ACCES));
    assert_eq!(c.setattr(&f, &mode_attr(0o666), None).0, NFS3ERR_PERM);
    assert_eq!(c.setattr(&f, &chown(Some(USER), None), None).0, NFS3ERR_PERM);
    assert_eq!(c.remove(&root, "rootfile"), NFS3_OK, "the directory is writable");
    // What the caller creates is theirs, made by the kernel as them.
    let (mine, a) = c.mkfile(&root, "mine", 0o640).unwrap();
    assert_eq!((a.uid, a.gid), (USER, USER));
    // Giving one's file to a group one is in is allowed; to another, not.
    c.auth = Auth::Sys {
        uid: USER,
        gid: USER,
        gids: vec![77],
    };
    assert_eq!(c.setattr(&mine, &chown(None, Some(77)), None).0, NFS3_OK);
    assert_eq!(c.setattr(&mine, &chown(None, Some(78)), None).0, NFS3ERR_PERM);
}

/// NFSv4 acts as the caller as NFSv3 does: a non-owner's WRITE clears the
/// set-id bits (the kernel's file_remove_privs, for a writer without
/// CAP_FSETID), and what the caller OPEN-creates is made by the kernel as
/// them. Before, v4 COMPOUNDs named no caller, so `uring` ran them as the
/// gateway (root): the bits stayed, and quota limits did not hold
/// (`nfs_safety_quota_v4_*`).
#[test]
fn nfs_safety_uring_v4_acts_as_the_caller() {
    let (_s, mut c, root) = setup(Kind::Uring);
    let (f, _) = c.mkfile(&root, "setid", 0o6777).unwrap();
    c.mkdir(&root, "ro", 0o755).unwrap();
    let sh = c.t.svc.shared().clone();
    let mut v = V4::new(Direct::new(&sh), "user");
    v.auth = Auth::sys(USER, USER);
    v.setup(8);
    let dir = v.walk("/export").unwrap();
    let (st, fh) = v.open(&dir, open("setid", 2, 0, b"u", None)).unwrap();
    v.write(&fh, &st, 0, FILE_SYNC4, b"data").unwrap();
    assert_eq!(
        mode(&mut c, &f),
        0o0777,
        "a non-owner's v4 WRITE clears both set-id bits"
    );
    v.open(&dir, open("mine", 3, 0, b"u", Some((UNCHECKED4, 0o640, [0; 8]))))
        .unwrap();
    let (_, a) = c.lookup(&root, b"mine").unwrap();
    assert_eq!((a.uid, a.gid), (USER, USER));
    let ro = v.walk("/export/ro").unwrap();
    assert_eq!(
        v.open(&ro, open("x", 3, 0, b"u", Some((UNCHECKED4, 0o644, [0; 8]))))
            .map(|_| ()),
        Err(NFS4ERR_ACCESS)
    );
}

/// With root squashing, root acts as the anonymous user on the file system
/// too: refused where that user is, and the owner of what it creates.
#[test]
fn nfs_safety_uring_root_squash_acts_as_the_anonymous_user() {
    let s = store(Kind::Uring, "b0");
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = true;
    let sh = shared(&[&s], &[ex], MIB as u32);
    let mut c = Client::new(Direct::new(&sh));
    c.auth = Auth::root();
    let (root, _) = c.mnt("/export").unwrap();
    let dir = s.dir.as_ref().unwrap().0.clone();
    std::fs::create_dir(dir.join("open")).unwrap();
    std::fs::set_permissions(dir.join("open"), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(dir.join("rootfile"), b"x").unwrap();
    let (open, _) = c.lookup(&root, b"open").unwrap();
    let (_, a) = c.mkfile(&open, "f", 0o644).unwrap();
    assert_eq!((a.uid, a.gid), (65534, 65534));
    let (rf, _) = c.lookup(&root, b"rootfile").unwrap();
    assert_eq!(c.write(&rf, 0, b"y", FILE_SYNC).map(|_| ()), Err(NFS3ERR_ACCES));
    assert_eq!(c.mkfile(&root, "g", 0o644).map(|_| ()), Err(NFS3ERR_ACCES));
}
