//! Quota limits hold for the caller (issue 21 item 6): on `uring`, a WRITE
//! runs under the caller's credentials without `CAP_SYS_RESOURCE` (as the
//! Linux server's `nfsd_setuser` drops it), so the kernel charges the file's
//! owner and refuses what is over the owner's hard limit; the Call is
//! answered NFS3ERR_DQUOT (RFC 1813 s2.6) or NFS4ERR_DQUOT (RFC 8881
//! s15.1.4.2), while root (not squashed) and other users still write.
//!
//! The file system: a 64 MiB ext4 image with the `quota` feature on a loop
//! device, mounted `usrquota`, user 1000 limited to [`LIMIT_KIB`]. That
//! needs root, loop devices and a kernel with ext4 quota (`CONFIG_QFMT_V2`),
//! which a build host may lack: the tests are ignored by default and
//! `tests/quota/run.sh` runs them in the VM guest (`--ignored`).

mod nfs4_common;
mod nfs_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use nfs4_common::*;
use nfs_common::*;
use proto::nfs3::*;
use proto::nfs4::{Stateid, NFS4ERR_DQUOT, UNCHECKED4, UNSTABLE4};

const USER: u32 = 1000;
const OTHER: u32 = 2000;
/// User 1000's hard block limit.
const LIMIT_KIB: u64 = 1024;
const CHUNK: usize = 64 << 10;

/// An ext4 file system with user quota enforced, mounted on a loop device;
/// unmounted and removed on drop.
struct QuotaFs {
    /// Removed after the unmount (fields drop after `drop`).
    _dir: TempDir,
    dev: String,
    mnt: PathBuf,
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl QuotaFs {
    fn new(tag: &str) -> QuotaFs {
        // SAFETY: no arguments.
        assert_eq!(unsafe { libc::geteuid() }, 0, "the quota tests need root");
        let dir = TempDir::new(tag);
        let img = dir.0.join("fs.img");
        let mnt = dir.0.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
        // The quota format is a module on distribution kernels; built in or
        // missing otherwise (the mount below says which).
        let _ = Command::new("modprobe").arg("quota_v2").status();
        let img_s = img.to_str().unwrap();
        run(
            "mkfs.ext4",
            &["-q", "-F", "-O", "quota", "-E", "quotatype=usrquota", img_s],
        );
        let dev = run("losetup", &["--find", "--show", img_s]);
        let q = QuotaFs { _dir: dir, dev, mnt };
        run("mount", &["-o", "usrquota", &q.dev, q.mnt.to_str().unwrap()]);
        q.set_block_limit(USER, LIMIT_KIB);
        q
    }

    /// `uid`'s hard (and soft) block limit in KiB (`Q_SETQUOTA`).
    fn set_block_limit(&self, uid: u32, kib: u64) {
        // SAFETY: `dqblk` is plain integers; all zero is a valid value.
        let mut q: libc::dqblk = unsafe { std::mem::zeroed() };
        q.dqb_bhardlimit = kib;
        q.dqb_bsoftlimit = kib;
        q.dqb_valid = libc::QIF_BLIMITS;
        let dev = std::ffi::CString::new(self.dev.as_str()).unwrap();
        // SAFETY: `dev` is NUL-terminated; `q` is a `struct if_dqblk`.
        let r = unsafe {
            libc::quotactl(
                libc::QCMD(libc::Q_SETQUOTA, libc::USRQUOTA),
                dev.as_ptr(),
                uid as i32,
                (&mut q as *mut libc::dqblk).cast(),
            )
        };
        assert_eq!(r, 0, "Q_SETQUOTA: {}", std::io::Error::last_os_error());
    }

    /// Bytes charged to `uid` (`Q_GETQUOTA`).
    fn used_bytes(&self, uid: u32) -> u64 {
        // SAFETY: `dqblk` is plain integers; all zero is a valid value.
        let mut q: libc::dqblk = unsafe { std::mem::zeroed() };
        let dev = std::ffi::CString::new(self.dev.as_str()).unwrap();
        // SAFETY: as in set_block_limit.
        let r = unsafe {
            libc::quotactl(
                libc::QCMD(libc::Q_GETQUOTA, libc::USRQUOTA),
                dev.as_ptr(),
                uid as i32,
                (&mut q as *mut libc::dqblk).cast(),
            )
        };
        assert_eq!(r, 0, "Q_GETQUOTA: {}", std::io::Error::last_os_error());
        q.dqb_curspace
    }

    fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for QuotaFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// A `uring` backend on `q` behind `/export` (root not squashed), its root
/// open to all.
fn service(q: &QuotaFs) -> std::sync::Arc<rpcrdma_apps::nfs::NfsShared> {
    let s = Store {
        kind: Kind::Uring,
        backend: open_uring("b0", q.path()),
        dir: None,
    };
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let sh = shared(&[&s], &[ex], MIB as u32);
    let mut c = Client::new(Direct::new(&sh));
    c.auth = Auth::root();
    let (root, _) = c.mnt("/export").unwrap();
    assert_eq!(c.setattr(&root, &mode_attr(0o777), None).0, NFS3_OK);
    sh
}

/// WRITE `CHUNK`s from `off` until the first error or `max` bytes:
/// (bytes written, the error).
fn v3_fill(c: &mut Client<Direct>, fh: &[u8], mut off: u64, max: u64) -> (u64, Option<u32>) {
    let data = vec![0x5a; CHUNK];
    let start = off;
    while off - start < max {
        match c.write(fh, off, &data, UNSTABLE) {
            Ok(w) => {
                assert!(w.count > 0, "a WRITE that wrote nothing");
                off += u64::from(w.count);
            }
            Err(st) => return (off - start, Some(st)),
        }
    }
    (off - start, None)
}

#[test]
#[ignore = "needs root, loop devices and ext4 user quota (CONFIG_QFMT_V2): tests/quota/run.sh runs it in the VM"]
fn nfs_safety_quota_v3_write_over_the_owners_limit_is_dquot_and_others_still_write() {
    let q = QuotaFs::new("quota3");
    let sh = service(&q);
    let mut c = Client::new(Direct::new(&sh));
    c.auth = Auth::sys(USER, USER);
    let (root, _) = c.mnt("/export").unwrap();
    let (f, a) = c.mkfile(&root, "user", 0o644).unwrap();
    assert_eq!(a.uid, USER, "created as the caller");
    let (n, err) = v3_fill(&mut c, &f, 0, 8 * LIMIT_KIB * 1024);
    assert_eq!(
        err,
        Some(NFS3ERR_DQUOT),
        "user {USER} wrote {n} bytes past a {LIMIT_KIB} KiB limit"
    );
    assert!(
        (LIMIT_KIB * 1024 / 2..=LIMIT_KIB * 1024).contains(&n),
        "{n} bytes before the limit"
    );
    let used = q.used_bytes(USER);
    assert!(used <= LIMIT_KIB * 1024, "{used} bytes charged to {USER}");
    // Another user has no limit.
    c.auth = Auth::sys(OTHER, OTHER);
    let (g, _) = c.mkfile(&root, "other", 0o644).unwrap();
    assert_eq!(
        v3_fill(&mut c, &g, 0, 4 * LIMIT_KIB * 1024),
        (4 * LIMIT_KIB * 1024, None)
    );
    // Root (not squashed) writes on past user 1000's limit, into its file:
    // the kernel lets CAP_SYS_RESOURCE through, as for the Linux server.
    c.auth = Auth::root();
    assert_eq!(v3_fill(&mut c, &f, n, 4 * CHUNK as u64), (4 * CHUNK as u64, None));
    assert!(
        q.used_bytes(USER) > LIMIT_KIB * 1024,
        "root's write is charged to the owner"
    );
    // And user 1000 is still refused.
    c.auth = Auth::sys(USER, USER);
    let (_, err) = v3_fill(&mut c, &f, n + 4 * CHUNK as u64, CHUNK as u64);
    assert_eq!(err, Some(NFS3ERR_DQUOT));
}

#[test]
#[ignore = "needs root, loop devices and ext4 user quota (CONFIG_QFMT_V2): tests/quota/run.sh runs it in the VM"]
fn nfs_safety_quota_v4_write_over_the_owners_limit_is_dquot_and_others_still_write() {
    let q = QuotaFs::new("quota4");
    let sh = service(&q);
    let client = |uid: u32, owner: &str| {
        let mut v = V4::new(Direct::new(&sh), owner);
        v.auth = if uid == 0 { Auth::root() } else { Auth::sys(uid, uid) };
        v.setup(8);
        v
    };
    let data = vec![0x5a; CHUNK];
    // WRITEs from `off` until the first error or `max` bytes.
    let fill = |v: &mut V4<Direct>, fh: &[u8], s: &Stateid, mut off: u64, max: u64| {
        let start = off;
        while off - start < max {
            match v.write(fh, s, off, UNSTABLE4, &data) {
                Ok((count, _, _)) => {
                    assert!(count > 0, "a WRITE that wrote nothing");
                    off += u64::from(count);
                }
                Err(st) => return (off - start, Some(st)),
            }
        }
        (off - start, None)
    };
    let mut u = client(USER, "user");
    let dir = u.walk("/export").unwrap();
    let (s, f) = u
        .open(&dir, open("user", 3, 0, b"u", Some((UNCHECKED4, 0o644, [0; 8]))))
        .unwrap();
    let (n, err) = fill(&mut u, &f, &s, 0, 8 * LIMIT_KIB * 1024);
    assert_eq!(
        err,
        Some(NFS4ERR_DQUOT),
        "user {USER} wrote {n} bytes past a {LIMIT_KIB} KiB limit"
    );
    assert!((LIMIT_KIB * 1024 / 2..=LIMIT_KIB * 1024).contains(&n), "{n} bytes");
    let mut o = client(OTHER, "other");
    let dir_o = o.walk("/export").unwrap();
    let (so, g) = o
        .open(&dir_o, open("other", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
        .unwrap();
    assert_eq!(
        fill(&mut o, &g, &so, 0, 4 * LIMIT_KIB * 1024),
        (4 * LIMIT_KIB * 1024, None)
    );
    let mut r = client(0, "root");
    let dir_r = r.walk("/export").unwrap();
    let (sr, fr) = r.open(&dir_r, open("user", 3, 0, b"r", None)).unwrap();
    assert_eq!(fr, f);
    assert_eq!(fill(&mut r, &f, &sr, n, 4 * CHUNK as u64), (4 * CHUNK as u64, None));
    let (_, err) = fill(&mut u, &f, &s, n + 4 * CHUNK as u64, CHUNK as u64);
    assert_eq!(err, Some(NFS4ERR_DQUOT));
}

/// `EDQUOT` from the file system is the client's DQUOT, not NFS3ERR_IO
/// (runs anywhere; the two tests above check it end to end).
#[test]
fn nfs_safety_quota_edquot_is_answered_dquot() {
    let e = rpcrdma_apps::backend::FsError::from_errno(libc::EDQUOT);
    assert_eq!(e.nfsstat3(), NFS3ERR_DQUOT);
    assert_eq!(e.nfsstat3(), NFS4ERR_DQUOT, "the same number in NFSv4");
}
