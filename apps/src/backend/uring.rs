//! The `uring` backend: a directory tree of a local file system, metadata
//! through `*at` system calls, data through one io_uring per core.
//!
//! # Handles
//!
//! A file handle wraps the kernel's own export handle of the inode
//! (`name_to_handle_at`, the handle knfsd gives out), so handles survive a
//! restart of the target, stay valid across renames, and go stale when the
//! inode is freed (the file system's generation number). Opening one takes
//! `open_by_handle_at`, which needs `CAP_DAC_READ_SEARCH` (the target runs as
//! root, as it must give files to the clients' uids anyway). An inode whose
//! last link is gone but that some descriptor keeps alive is reported
//! `Stale` as well (its link count is checked on every open).
//!
//! `open_by_handle_at` opens any inode of the file system, not only those
//! below the exported directory, so the kernel handle is sealed with a
//! keyed MAC (SipHash-2-4, 64 bits) under a random 128-bit key kept in the
//! `trusted.rpcrdma.fhkey` extended attribute of the exported directory
//! (readable by root only; NFSv3 has no access to extended attributes).
//! The key lives with the data, so it persists across restarts; a handle
//! that was not made by this export fails the MAC and is `BadHandle`.
//! Layout: `[tag, kernel handle type, n, n bytes of kernel handle, MAC 8]`,
//! at most 31 bytes (kernel handles longer than 20 bytes are refused at
//! start-up for the root, `NotSupp`, and per file with `ServerFault`).
//!
//! # Namespace
//!
//! Every operation works relative to a descriptor of the directory its
//! handle names (`openat`, `mkdirat`, `renameat`, `linkat`, `fstatat`, ...),
//! never through a path string, and never follows a symbolic link. Names are
//! single components (no `/`, no NUL); `..` of the exported directory is the
//! directory itself. A mount point inside the exported tree is not crossed
//! (`Acces`). New objects belong to the caller's [`Owner`] (`fchownat`).
//! Operations run with the target's privileges: permission checks against
//! the caller are the NFS layer's.
//!
//! Exclusive creates store the client's verifier in the
//! `trusted.rpcrdma.verf` extended attribute of the new file; a
//! retransmission finds it and gets the same file.
//!
//! READDIR cookies are the file system's directory offsets (`d_off` of
//! `getdents64`, which ext4, xfs and tmpfs keep stable for an entry's
//! lifetime); the cookie verifier is derived from the directory's change and
//! modification times.
//!
//! # Data
//!
//! A [`UringChannel`] owns one io_uring and a bounded cache of open
//! descriptors per handle. Reads and writes go straight between the file and
//! the caller's buffer (`IORING_OP_READ`/`WRITE`). When the backend is opened
//! with `o_direct` and offset, length and buffer address are all
//! 4096-aligned, the I/O uses a second descriptor opened `O_DIRECT`
//! (bypassing the page cache); file systems that refuse `O_DIRECT` at open
//! or at I/O time fall back to buffered I/O. `Write(DataSync)` and
//! `Write(FileSync)` carry `RWF_DSYNC`/`RWF_SYNC` and so are durable when
//! they complete; `Flush` is `IORING_OP_FSYNC`. Submissions are queued and
//! handed to the kernel in one `io_uring_enter` by the next `poll`.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use io_uring::{opcode, types, IoUring};

use super::creds::{self, Acting};
use super::personality::Personalities;

mod iowq;
mod sync;

pub use iowq::{follow_move, CoreCpus};

use super::{
    Attr, Backend, CreateHow, DirChange, DirChanged, DirEntry, DirPre, FileHandle, FileType, FsError, FsResult, FsStat,
    IoChannel, IoDesc, IoDone, IoOp, NodeKind, OpenedFile, Owner, SetAttr, SetTime, Stable, Time, NAME_MAX_BYTES,
    PATH_MAX_BYTES,
};

/// Alignment of offset, length and buffer for `O_DIRECT` I/O.
pub const URING_DIRECT_ALIGN: u64 = 4096;
/// Descriptors a channel keeps open (files with I/O in flight may exceed it).
pub const URING_FD_CACHE_ENTRIES: usize = 256;
/// Largest file offset a write may reach.
pub const URING_MAX_FILE_BYTES: u64 = i64::MAX as u64;

const HANDLE_TAG: u8 = 0x55;
const KERNEL_HANDLE_MAX: usize = 20;
const MAC_BYTES: usize = 8;
/// The kernel's `MAX_HANDLE_SZ`.
const MAX_HANDLE_SZ: usize = 128;
const KEY_XATTR: &[u8] = b"trusted.rpcrdma.fhkey\0";
const VERF_XATTR: &[u8] = b"trusted.rpcrdma.verf\0";
const GETDENTS_BUF_BYTES: usize = 32 * 1024;
/// Unlinked files remembered for the channels' descriptor caches; a channel
/// that falls further behind re-checks its whole cache.
const UNLINKED_LOG_ENTRIES: usize = 1024;
/// How often, and how long apart, a helper thread asks again when
/// `open_by_handle_at` finds an inode being freed (ENOMEM): 20 ms in all,
/// several times the longest eviction of a large file seen here.
const ENOMEM_RETRIES: u32 = 20;
const ENOMEM_RETRY_WAIT: std::time::Duration = std::time::Duration::from_millis(1);
/// READDIR cookies after `.` and `..` (file system offsets are below 2^63).
const COOKIE_DOT: u64 = 1 << 63 | 1;
const COOKIE_DOTDOT: u64 = 1 << 63 | 2;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct KernelHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

impl KernelHandle {
    fn empty() -> Self {
        KernelHandle {
            handle_bytes: MAX_HANDLE_SZ as u32,
            handle_type: 0,
            f_handle: [0; MAX_HANDLE_SZ],
        }
    }
}

// ------------------------------------------------------------ SipHash-2-4

fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// SipHash-2-4 of `msg` under the 128-bit key `k`.
fn siphash24(k: &[u8; 16], msg: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(k[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(k[8..].try_into().expect("8 bytes"));
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut words = msg.chunks_exact(8);
    for w in &mut words {
        let m = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        v[3] ^= m;
        sip_round(&mut v);
        sip_round(&mut v);
        v[0] ^= m;
    }
    let mut last = (msg.len() as u64 & 0xff) << 56;
    for (i, &b) in words.remainder().iter().enumerate() {
        last |= u64::from(b) << (8 * i);
    }
    v[3] ^= last;
    sip_round(&mut v);
    sip_round(&mut v);
    v[0] ^= last;
    v[2] ^= 0xff;
    for _ in 0..4 {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

// ------------------------------------------------------------ syscalls

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn cvt(r: libc::c_int) -> FsResult<libc::c_int> {
    if r < 0 {
        Err(FsError::from_errno(errno()))
    } else {
        Ok(r)
    }
}

/// Take ownership of a descriptor a system call returned.
fn owned(fd: libc::c_int) -> FsResult<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was just returned by a successful open-like call and is
    // owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: RawFd) -> FsResult<libc::stat> {
    // SAFETY: `stat` is plain data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable `struct stat`.
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

fn fstatat(dir: RawFd, name: &CString) -> FsResult<libc::stat> {
    // SAFETY: `stat` is plain data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated and `st` is writable.
    cvt(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

fn openat(dir: RawFd, name: &CString, flags: libc::c_int, mode: u32) -> FsResult<OwnedFd> {
    // SAFETY: `name` is NUL-terminated.
    owned(unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })
}

fn ftype_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFBLK => FileType::Block,
        libc::S_IFCHR => FileType::Char,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFIFO => FileType::Fifo,
        _ => FileType::Regular,
    }
}

fn time_of(secs: i64, nsecs: i64) -> Time {
    Time {
        secs: secs as u32,
        nsecs: nsecs as u32,
    }
}

fn attr_of(st: &libc::stat) -> Attr {
    let ftype = ftype_of(st.st_mode);
    let rdev = match ftype {
        FileType::Block | FileType::Char => (libc::major(st.st_rdev), libc::minor(st.st_rdev)),
        _ => (0, 0),
    };
    Attr {
        ftype,
        mode: st.st_mode & 0o7777,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        used: st.st_blocks as u64 * 512,
        rdev,
        fileid: st.st_ino,
        atime: time_of(st.st_atime, st.st_atime_nsec),
        mtime: time_of(st.st_mtime, st.st_mtime_nsec),
        ctime: time_of(st.st_ctime, st.st_ctime_nsec),
    }
}

fn timespec_of(t: SetTime) -> libc::timespec {
    match t {
        SetTime::DontChange => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        SetTime::ServerTime => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        SetTime::Client(t) => libc::timespec {
            tv_sec: libc::time_t::from(t.secs),
            tv_nsec: libc::c_long::from(t.nsecs.min(999_999_999)),
        },
    }
}

/// A name that may be looked up: not empty, short enough, no `/` or NUL.
fn c_name(name: &[u8]) -> FsResult<CString> {
    if name.is_empty() || name.contains(&b'/') {
        return Err(FsError::Inval);
    }
    if name.len() > NAME_MAX_BYTES {
        return Err(FsError::NameTooLong);
    }
    CString::new(name).map_err(|_| FsError::Inval)
}

/// A name that may be created: not `.` or `..`.
fn c_new_name(name: &[u8]) -> FsResult<CString> {
    let c = c_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Exist);
    }
    Ok(c)
}

/// A name that may be removed or renamed.
fn c_old_name(name: &[u8]) -> FsResult<CString> {
    let c = c_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Inval);
    }
    Ok(c)
}

fn empty_path() -> *const libc::c_char {
    c"".as_ptr()
}

/// Change the mode of what an `O_PATH` descriptor names (not a symlink).
fn chmod_fd(fd: RawFd, mode: u32) -> FsResult<()> {
    // SAFETY: the empty path is NUL-terminated; fchmodat2 takes no pointers
    // besides it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_fchmodat2,
            fd,
            empty_path(),
            (mode & 0o7777) as libc::c_uint,
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = errno();
    if e != libc::ENOSYS {
        return Err(FsError::from_errno(e));
    }
    // Before Linux 6.6: through the descriptor's /proc link.
    let path = CString::new(format!("/proc/self/fd/{fd}")).map_err(|_| FsError::ServerFault)?;
    // SAFETY: `path` is NUL-terminated.
    cvt(unsafe { libc::chmod(path.as_ptr(), (mode & 0o7777) as libc::mode_t) }).map(drop)
}

/// Apply owner, mode and times (not the size) to what an `O_PATH`
/// descriptor names. The owner goes first: a change of owner clears the
/// set-id bits, which an explicit mode then restores.
fn apply_meta(fd: RawFd, ftype: FileType, uid: Option<u32>, gid: Option<u32>, set: &SetAttr) -> FsResult<()> {
    if uid.is_some() || gid.is_some() {
        // SAFETY: the empty path is NUL-terminated; -1 leaves an id unchanged.
        cvt(unsafe {
            libc::fchownat(
                fd,
                empty_path(),
                uid.unwrap_or(u32::MAX),
                gid.unwrap_or(u32::MAX),
                libc::AT_EMPTY_PATH,
            )
        })?;
    }
    if let Some(mode) = set.mode {
        if ftype != FileType::Symlink {
            chmod_fd(fd, mode)?;
        }
    }
    if set.atime != SetTime::DontChange || set.mtime != SetTime::DontChange {
        let ts = [timespec_of(set.atime), timespec_of(set.mtime)];
        // SAFETY: `ts` holds two timespecs; the path is NUL-terminated.
        cvt(unsafe { libc::utimensat(fd, empty_path(), ts.as_ptr(), libc::AT_EMPTY_PATH) })?;
    }
    Ok(())
}

fn random_key() -> FsResult<[u8; 16]> {
    let mut key = [0u8; 16];
    let mut got = 0;
    while got < key.len() {
        // SAFETY: the destination is the unfilled tail of `key`.
        let r = unsafe { libc::getrandom(key[got..].as_mut_ptr().cast(), key.len() - got, 0) };
        if r < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(FsError::from_errno(e));
        }
        got += r as usize;
    }
    Ok(key)
}

/// The handle key of the export in `dir` (an `O_RDONLY` directory
/// descriptor): read, or made and stored on first use.
fn export_key(dir: RawFd) -> FsResult<[u8; 16]> {
    for _ in 0..2 {
        let mut key = [0u8; 16];
        // SAFETY: the name is NUL-terminated; `key` is writable for 16 bytes.
        let r = unsafe { libc::fgetxattr(dir, KEY_XATTR.as_ptr().cast(), key.as_mut_ptr().cast(), key.len()) };
        if r == 16 {
            return Ok(key);
        }
        if r >= 0 {
            // Someone else's attribute of another size: do not overwrite it.
            return Err(FsError::ServerFault);
        }
        let e = errno();
        if e != libc::ENODATA {
            return Err(FsError::from_errno(e));
        }
        let key = random_key()?;
        // SAFETY: as above; the value is 16 readable bytes.
        let r = unsafe {
            libc::fsetxattr(
                dir,
                KEY_XATTR.as_ptr().cast(),
                key.as_ptr().cast(),
                key.len(),
                libc::XATTR_CREATE,
            )
        };
        if r == 0 {
            return Ok(key);
        }
        let e = errno();
        if e != libc::EEXIST {
            return Err(FsError::from_errno(e));
        }
        // Another process stored one first: read it.
    }
    Err(FsError::ServerFault)
}

// ------------------------------------------------------------ shared state

struct Shared {
    /// The exported directory, `O_RDONLY`: the mount descriptor for
    /// `open_by_handle_at`, and what `syncfs` flushes.
    root_fd: OwnedFd,
    root_fh: FileHandle,
    root_ino: (u64, u64),
    mount_id: libc::c_int,
    key: [u8; 16],
    /// Bumped whenever a regular file may have lost its last link through
    /// this backend, so channels re-check the descriptors they cache.
    unlink_epoch: AtomicU64,
    /// The last [`UNLINKED_LOG_ENTRIES`] such files with their epochs
    /// (`None`: unknown, re-check everything).
    unlinked: Mutex<VecDeque<(u64, Option<FileHandle>)>>,
    /// Serialises exclusive creates (the create and storing its verifier).
    exclusive: Mutex<()>,
}

impl Shared {
    fn mac(&self, b: &[u8]) -> [u8; MAC_BYTES] {
        siphash24(&self.key, b).to_le_bytes()
    }

    fn seal(&self, kh: &KernelHandle) -> FsResult<FileHandle> {
        let n = kh.handle_bytes as usize;
        let htype = u8::try_from(kh.handle_type).map_err(|_| FsError::ServerFault)?;
        if n == 0 || n > KERNEL_HANDLE_MAX {
            return Err(FsError::ServerFault);
        }
        let mut b = [0u8; 3 + KERNEL_HANDLE_MAX + MAC_BYTES];
        b[0] = HANDLE_TAG;
        b[1] = htype;
        b[2] = n as u8;
        b[3..3 + n].copy_from_slice(&kh.f_handle[..n]);
        let mac = self.mac(&b[..3 + n]);
        b[3 + n..3 + n + MAC_BYTES].copy_from_slice(&mac);
        FileHandle::new(&b[..3 + n + MAC_BYTES]).ok_or(FsError::ServerFault)
    }

    /// The kernel handle inside `fh`, if `fh` is one of this export's.
    fn unseal(&self, fh: &FileHandle) -> FsResult<KernelHandle> {
        let b = fh.as_bytes();
        if b.len() < 3 + MAC_BYTES || b[0] != HANDLE_TAG {
            return Err(FsError::BadHandle);
        }
        let n = b[2] as usize;
        if n == 0 || n > KERNEL_HANDLE_MAX || b.len() != 3 + n + MAC_BYTES {
            return Err(FsError::BadHandle);
        }
        let mac = self.mac(&b[..3 + n]);
        // Not constant-time: an attacker learns nothing useful from timing a
        // 64-bit MAC over the network at the rate NFS allows.
        if mac[..] != b[3 + n..] {
            return Err(FsError::BadHandle);
        }
        let mut kh = KernelHandle::empty();
        kh.handle_bytes = n as u32;
        kh.handle_type = i32::from(b[1]);
        kh.f_handle[..n].copy_from_slice(&b[3..3 + n]);
        Ok(kh)
    }

    /// Open what `fh` names with `flags`, and its attributes. `Stale` when
    /// the inode is gone or has no link left.
    fn open_fh(&self, fh: &FileHandle, flags: libc::c_int) -> FsResult<(OwnedFd, libc::stat)> {
        let mut kh = self.unseal(fh)?;
        let mut waits = 0;
        let fd = loop {
            // SAFETY: `kh` is a `struct file_handle` with `handle_bytes`
            // bytes of handle after its header.
            // As the gateway, also while acting as a caller: resolving a
            // handle is not the caller's business (nor is it to the Linux
            // server).
            let fd = creds::as_process(|| unsafe {
                libc::open_by_handle_at(
                    self.root_fd.as_raw_fd(),
                    (&mut kh as *mut KernelHandle).cast(),
                    flags | libc::O_CLOEXEC,
                )
            });
            if fd >= 0 {
                break fd;
            }
            return Err(match errno() {
                libc::ESTALE | libc::ENOENT => FsError::Stale,
                // The kernel answers ENOMEM, not ESTALE, for a handle whose
                // inode is being freed at that moment (6.x: `iget_locked`
                // gives up on an inode in eviction and the file system
                // reports that as ENOMEM): the last link went and the last
                // descriptor was let go just before. A file this backend
                // removed is stale.
                libc::ENOMEM if self.recently_unlinked(fh) => FsError::Stale,
                // A file removed before this backend started (its last
                // descriptor went with the previous instance's rings, which
                // the kernel tears down after the process let go) is not in
                // the log. Freeing an inode takes a few milliseconds at
                // most, after which the handle resolves or is ESTALE; a
                // helper thread (where metadata runs) asks again for that
                // long rather than make the client wait its retry interval
                // (5 s for NFSv3 JUKEBOX). A core never waits.
                libc::ENOMEM if waits < ENOMEM_RETRIES && !reactor::on_core_thread() => {
                    waits += 1;
                    std::thread::sleep(ENOMEM_RETRY_WAIT);
                    continue;
                }
                // Still short of memory, or on a core: a real shortage the
                // client should retry (NFS3ERR_JUKEBOX), never `Io`, which
                // would fail the application's call.
                libc::ENOMEM => FsError::Jukebox,
                e => FsError::from_errno(e),
            });
        };
        let fd = owned(fd)?;
        let st = fstat(fd.as_raw_fd())?;
        if st.st_nlink == 0 {
            return Err(FsError::Stale);
        }
        Ok((fd, st))
    }

    /// Open a regular file for a channel's I/O: read-write, or read-only
    /// when it cannot be written (read-only file system, immutable, a
    /// running executable). Returns the descriptor and whether it is
    /// read-only.
    fn open_for_io(&self, fh: &FileHandle) -> FsResult<(OwnedFd, bool)> {
        let (_, st) = self.open_path(fh)?;
        match ftype_of(st.st_mode) {
            FileType::Regular => {}
            FileType::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        }
        match self.open_fh(fh, libc::O_RDWR) {
            Ok((fd, _)) => Ok((fd, false)),
            Err(FsError::Rofs | FsError::Perm | FsError::Acces | FsError::Io) => {
                Ok((self.open_fh(fh, libc::O_RDONLY)?.0, true))
            }
            Err(e) => Err(e),
        }
    }

    fn open_path(&self, fh: &FileHandle) -> FsResult<(OwnedFd, libc::stat)> {
        self.open_fh(fh, libc::O_PATH)
    }

    fn open_dir(&self, fh: &FileHandle) -> FsResult<(OwnedFd, libc::stat)> {
        self.open_fh(fh, libc::O_PATH | libc::O_DIRECTORY)
    }

    fn is_root(&self, st: &libc::stat) -> bool {
        (st.st_dev, st.st_ino) == self.root_ino
    }

    /// The handle of `name` in `dir` (not following a final symlink).
    fn handle_at(&self, dir: RawFd, name: &CString) -> FsResult<FileHandle> {
        let mut kh = KernelHandle::empty();
        let mut mount_id: libc::c_int = 0;
        // SAFETY: `name` is NUL-terminated, `kh` has room for
        // `handle_bytes` bytes, `mount_id` is writable.
        cvt(unsafe {
            libc::name_to_handle_at(
                dir,
                name.as_ptr(),
                (&mut kh as *mut KernelHandle).cast(),
                &mut mount_id,
                0,
            )
        })?;
        if mount_id != self.mount_id {
            // Another file system is mounted here: not part of the export.
            return Err(FsError::Acces);
        }
        self.seal(&kh)
    }

    /// Handle and attributes of `name` in the directory `dir` whose
    /// attributes are `dst`.
    fn lookup_at(&self, dir: &OwnedFd, dst: &libc::stat, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        let c = c_name(name)?;
        if name == b"." || (name == b".." && self.is_root(dst)) {
            return Ok((self.handle_empty(dir.as_raw_fd())?, attr_of(dst)));
        }
        let st = fstatat(dir.as_raw_fd(), &c)?;
        let fh = self.handle_at(dir.as_raw_fd(), &c)?;
        Ok((fh, attr_of(&st)))
    }

    /// The handle of what `fd` itself names.
    fn handle_empty(&self, fd: RawFd) -> FsResult<FileHandle> {
        let mut kh = KernelHandle::empty();
        let mut mount_id: libc::c_int = 0;
        // SAFETY: as in `handle_at`, with the empty path.
        cvt(unsafe {
            libc::name_to_handle_at(
                fd,
                empty_path(),
                (&mut kh as *mut KernelHandle).cast(),
                &mut mount_id,
                libc::AT_EMPTY_PATH,
            )
        })?;
        if mount_id != self.mount_id {
            return Err(FsError::Acces);
        }
        self.seal(&kh)
    }

    /// Whether `fh` is among the files the unlink log remembers (the last
    /// [`UNLINKED_LOG_ENTRIES`] removals and renames over a file). Takes the
    /// log's lock: only for error paths.
    fn recently_unlinked(&self, fh: &FileHandle) -> bool {
        let log = self.unlinked.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().any(|(_, f)| f.as_ref() == Some(fh))
    }

    /// Tell the channels that the regular file `fh` (`None`: some file) may
    /// have lost its last link.
    fn note_unlink(&self, fh: Option<FileHandle>) {
        let mut log = self.unlinked.lock().unwrap_or_else(|e| e.into_inner());
        // Epochs are assigned under the lock, so the log is in order.
        let epoch = self.unlink_epoch.load(Ordering::Relaxed) + 1;
        if log.len() == UNLINKED_LOG_ENTRIES {
            log.pop_front();
        }
        log.push_back((epoch, fh));
        self.unlink_epoch.store(epoch, Ordering::Release);
    }

    /// The handle of `name` in `dir` when it is a regular file (what a
    /// channel may have open), for [`Shared::note_unlink`].
    fn file_handle_at(&self, dir: RawFd, name: &CString) -> Option<Option<FileHandle>> {
        match fstatat(dir, name) {
            Ok(st) if ftype_of(st.st_mode) == FileType::Regular => Some(self.handle_at(dir, name).ok()),
            _ => None,
        }
    }

    /// After creating `name` in `dir`: give it to `owner` (or the ids in
    /// `set`), apply the rest of `set`, and return its handle and attributes.
    /// On failure the new object is removed again.
    fn finish_new(
        &self,
        dir: &OwnedFd,
        name: &CString,
        owner: Owner,
        set: &SetAttr,
        is_dir: bool,
    ) -> FsResult<(FileHandle, Attr)> {
        let r = (|| {
            let fd = openat(dir.as_raw_fd(), name, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
            let st = fstat(fd.as_raw_fd())?;
            let ftype = ftype_of(st.st_mode);
            let mut set = SetAttr { size: None, ..*set };
            // In a set-group-ID directory the kernel gave the new node the
            // directory's group (and a new directory the set-group-ID bit):
            // keep both rather than overwrite them with the caller's group
            // and mode, unless the client set a group explicitly.
            let parent = fstat(dir.as_raw_fd())?;
            let sgid = parent.st_mode & libc::S_ISGID != 0;
            let gid = if sgid { parent.st_gid } else { owner.gid };
            if sgid && is_dir {
                set.mode = set.mode.map(|m| m | libc::S_ISGID);
            }
            apply_meta(
                fd.as_raw_fd(),
                ftype,
                Some(set.uid.unwrap_or(owner.uid)),
                Some(set.gid.unwrap_or(gid)),
                &set,
            )?;
            let fh = self.handle_empty(fd.as_raw_fd())?;
            Ok((fh, attr_of(&fstat(fd.as_raw_fd())?)))
        })();
        if r.is_err() {
            let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
            // SAFETY: `name` is NUL-terminated. Best effort: the error of the
            // creation is what the caller gets.
            unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) };
        }
        r
    }
}

/// A directory tree exported from a local file system.
pub struct UringBackend {
    name: String,
    shared: Arc<Shared>,
    queue_depth: u32,
    o_direct: bool,
    iowq: iowq::IoWorkerPolicy,
}

impl fmt::Debug for UringBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringBackend")
            .field("name", &self.name)
            .field("queue_depth", &self.queue_depth)
            .field("o_direct", &self.o_direct)
            .field("iowq", &self.iowq)
            .field("root", &self.shared.root_fh)
            .finish()
    }
}

impl UringBackend {
    /// Export the directory `dir` (created if missing). `queue_depth` is
    /// each channel's io_uring size and limit of I/O in flight; `o_direct`
    /// allows `O_DIRECT` for aligned I/O. Needs `CAP_DAC_READ_SEARCH` and a
    /// file system with export handles and `trusted.*` extended attributes
    /// (ext4, xfs, btrfs, tmpfs). Call at start-up, on any thread.
    pub fn open(name: &str, dir: &Path, queue_depth: u32, o_direct: bool) -> FsResult<UringBackend> {
        if queue_depth == 0 || queue_depth > 32_768 {
            return Err(FsError::Inval);
        }
        std::fs::create_dir_all(dir).map_err(|e| FsError::from_io(&e))?;
        let c = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| FsError::Inval)?;
        let root_fd = openat(libc::AT_FDCWD, &c, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        let st = fstat(root_fd.as_raw_fd())?;
        let key = export_key(root_fd.as_raw_fd())?;
        let mut kh = KernelHandle::empty();
        let mut mount_id: libc::c_int = 0;
        // SAFETY: as in `Shared::handle_at`, with the empty path.
        let r = unsafe {
            libc::name_to_handle_at(
                root_fd.as_raw_fd(),
                empty_path(),
                (&mut kh as *mut KernelHandle).cast(),
                &mut mount_id,
                libc::AT_EMPTY_PATH,
            )
        };
        if r < 0 {
            return Err(match errno() {
                libc::EOPNOTSUPP | libc::EOVERFLOW => FsError::NotSupp,
                e => FsError::from_errno(e),
            });
        }
        if kh.handle_bytes as usize > KERNEL_HANDLE_MAX || u8::try_from(kh.handle_type).is_err() {
            return Err(FsError::NotSupp);
        }
        let mut shared = Shared {
            root_fd,
            root_fh: FileHandle::new(&[HANDLE_TAG]).ok_or(FsError::ServerFault)?,
            root_ino: (st.st_dev, st.st_ino),
            mount_id,
            key,
            unlink_epoch: AtomicU64::new(0),
            unlinked: Mutex::new(VecDeque::new()),
            exclusive: Mutex::new(()),
        };
        shared.root_fh = shared.seal(&kh)?;
        // The handle must open: checks CAP_DAC_READ_SEARCH now, not on the
        // first client request.
        shared.open_path(&shared.root_fh)?;
        Ok(UringBackend {
            name: name.to_owned(),
            shared: Arc::new(shared),
            queue_depth,
            o_direct,
            iowq: iowq::IoWorkerPolicy::new(true),
        })
    }

    /// Where the channels' io-wq workers go (see the `iowq` module): with
    /// `off_cores` (the default), on the CPUs of the process's allowed set
    /// (taken at [`UringBackend::open`]) that run none of `cores`, or failing
    /// that none of the io cores, and never on the CPU a channel's thread is
    /// pinned to; without it, where the kernel puts them (the submitting
    /// core's CPU, as a rule). Call before the channels are opened.
    pub fn with_io_workers(mut self, off_cores: bool, cores: CoreCpus) -> UringBackend {
        self.iowq.off_cores = off_cores;
        self.iowq.cores = cores;
        self
    }

    /// The name from the configuration.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// [`Backend::open_channel`] with the concrete type (for its statistics).
    /// Call once per core, on that core.
    pub fn open_uring_channel(&self, core: usize) -> FsResult<UringChannel> {
        let ring = IoUring::new(self.queue_depth).map_err(|e| FsError::from_io(&e))?;
        let io_worker_cpus = iowq::place(&ring, &self.iowq, self.queue_depth, core);
        let depth = self.queue_depth as usize;
        Ok(UringChannel {
            io_worker_cpus,
            shared: self.shared.clone(),
            ring,
            core,
            o_direct: self.o_direct,
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth as u32).rev().collect(),
            ready: VecDeque::new(),
            cache: HashMap::new(),
            tick: 0,
            epoch_seen: self.shared.unlink_epoch.load(Ordering::Acquire),
            unsubmitted: 0,
            stats: UringChannelStats::default(),
            personalities: Personalities::default(),
        })
    }

    fn create_exclusive(
        &self,
        dir: &OwnedFd,
        c: &CString,
        verf: [u8; 8],
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        let _guard = self.shared.exclusive.lock().map_err(|_| FsError::ServerFault)?;
        match openat(
            dir.as_raw_fd(),
            c,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW,
            0o600,
        ) {
            Ok(fd) => {
                // SAFETY: the name is NUL-terminated, the value 8 bytes.
                let r =
                    unsafe { libc::fsetxattr(fd.as_raw_fd(), VERF_XATTR.as_ptr().cast(), verf.as_ptr().cast(), 8, 0) };
                let r = cvt(r).and_then(|_| self.shared.finish_new(dir, c, owner, &SetAttr::default(), false));
                if r.is_err() {
                    // SAFETY: `c` is NUL-terminated.
                    unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
                }
                r
            }
            Err(FsError::Exist) => {
                let st = fstatat(dir.as_raw_fd(), c)?;
                if ftype_of(st.st_mode) != FileType::Regular {
                    return Err(FsError::Exist);
                }
                let fd = openat(
                    dir.as_raw_fd(),
                    c,
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
                    0,
                )?;
                let mut old = [0u8; 8];
                // SAFETY: the name is NUL-terminated; `old` is writable for 8 bytes.
                let r =
                    unsafe { libc::fgetxattr(fd.as_raw_fd(), VERF_XATTR.as_ptr().cast(), old.as_mut_ptr().cast(), 8) };
                if r == 8 && old == verf {
                    let st = fstat(fd.as_raw_fd())?;
                    return Ok((self.shared.handle_empty(fd.as_raw_fd())?, attr_of(&st)));
                }
                Err(FsError::Exist)
            }
            Err(e) => Err(e),
        }
    }
}

/// The namespace changes in a directory already open, shared by the plain
/// calls and [`Backend::change_checked`].
impl UringBackend {
    fn create_in(&self, d: &OwnedFd, name: &[u8], how: CreateHow, owner: Owner) -> FsResult<(FileHandle, Attr)> {
        // The system calls below run as the caller (issue 21 item 6).
        let _acting = Acting::caller()?;
        let c = c_new_name(name)?;
        let set = match how {
            CreateHow::Exclusive(v) => return self.create_exclusive(d, &c, v, owner),
            CreateHow::Unchecked(set) | CreateHow::Guarded(set) => set,
        };
        let mode = set.mode.unwrap_or(0o644);
        match openat(
            d.as_raw_fd(),
            &c,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW,
            mode & 0o777,
        ) {
            Ok(fd) => {
                if let Some(size) = set.size {
                    let size = i64::try_from(size).map_err(|_| FsError::FBig);
                    // SAFETY: plain system call on a descriptor we own.
                    let r = size.and_then(|s| cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), s) }));
                    if let Err(e) = r {
                        // SAFETY: `c` is NUL-terminated.
                        unsafe { libc::unlinkat(d.as_raw_fd(), c.as_ptr(), 0) };
                        return Err(e);
                    }
                }
                self.shared.finish_new(
                    d,
                    &c,
                    owner,
                    &SetAttr {
                        mode: Some(mode),
                        ..set
                    },
                    false,
                )
            }
            Err(FsError::Exist) if matches!(how, CreateHow::Unchecked(_)) => {
                let st = fstatat(d.as_raw_fd(), &c)?;
                if ftype_of(st.st_mode) != FileType::Regular {
                    return Err(FsError::Exist);
                }
                let fh = self.shared.handle_at(d.as_raw_fd(), &c)?;
                // An existing file keeps its mode and owner; size and times apply.
                let attr = self.setattr(
                    &fh,
                    &SetAttr {
                        mode: None,
                        uid: None,
                        gid: None,
                        ..set
                    },
                )?;
                Ok((fh, attr))
            }
            Err(e) => Err(e),
        }
    }

    fn mkdir_in(&self, d: &OwnedFd, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<(FileHandle, Attr)> {
        // The system calls below run as the caller (issue 21 item 6).
        let _acting = Acting::caller()?;
        let c = c_new_name(name)?;
        if set.size.is_some() {
            return Err(FsError::IsDir);
        }
        let mode = set.mode.unwrap_or(0o755);
        // SAFETY: `c` is NUL-terminated.
        cvt(unsafe { libc::mkdirat(d.as_raw_fd(), c.as_ptr(), (mode & 0o777) as libc::mode_t) })?;
        self.shared.finish_new(
            d,
            &c,
            owner,
            &SetAttr {
                mode: Some(mode),
                ..*set
            },
            true,
        )
    }

    fn symlink_in(
        &self,
        d: &OwnedFd,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        // The system calls below run as the caller (issue 21 item 6).
        let _acting = Acting::caller()?;
        let c = c_new_name(name)?;
        if target.is_empty() {
            return Err(FsError::Inval);
        }
        if target.len() >= PATH_MAX_BYTES {
            return Err(FsError::NameTooLong);
        }
        let t = CString::new(target).map_err(|_| FsError::Inval)?;
        // SAFETY: both strings are NUL-terminated.
        cvt(unsafe { libc::symlinkat(t.as_ptr(), d.as_raw_fd(), c.as_ptr()) })?;
        self.shared
            .finish_new(d, &c, owner, &SetAttr { mode: None, ..*set }, false)
    }

    fn mknod_in(
        &self,
        d: &OwnedFd,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        // The system calls below run as the caller (issue 21 item 6).
        let _acting = Acting::caller()?;
        let c = c_new_name(name)?;
        let (fmt, dev) = match kind {
            NodeKind::Char { major, minor } => (libc::S_IFCHR, libc::makedev(major, minor)),
            NodeKind::Block { major, minor } => (libc::S_IFBLK, libc::makedev(major, minor)),
            NodeKind::Socket => (libc::S_IFSOCK, 0),
            NodeKind::Fifo => (libc::S_IFIFO, 0),
        };
        let mode = set.mode.unwrap_or(0o644);
        // SAFETY: `c` is NUL-terminated.
        cvt(unsafe { libc::mknodat(d.as_raw_fd(), c.as_ptr(), fmt | (mode & 0o777), dev) })?;
        self.shared.finish_new(
            d,
            &c,
            owner,
            &SetAttr {
                mode: Some(mode),
                ..*set
            },
            false,
        )
    }

    fn remove_in(&self, d: &OwnedFd, name: &[u8]) -> FsResult<()> {
        // The system calls below run as the caller (issue 21 item 6).
        let _acting = Acting::caller()?;
        let c = c_old_name(name)?;
        let st = fstatat(d.as_raw_fd(), &c)?;
        if ftype_of(st.st_mode) == FileType::Directory {
            return Err(FsError::IsDir);
        }
        let victim = self.shared.file_handle_at(d.as_raw_fd(), &c);
        // SAFETY: `c` is NUL-terminated.
        let r = cvt(unsafe { libc::unlinkat(d.as_raw_fd(), c.as_ptr(), 0) });
        if let (Ok(_), Some(fh)) = (r, victim) {
            self.shared.note_unlink(fh);
        }
        r.map(drop)
    }

    fn rmdir_in(&self, d: &OwnedFd, name: &[u8]) -> FsResult<()> {
        // The system calls below run as the caller (issue 21 item 6).
        let _acting = Acting::caller()?;
        let c = c_name(name)?;
        match name {
            b"." => return Err(FsError::Inval),
            b".." => return Err(FsError::NotEmpty),
            _ => {}
        }
        // SAFETY: `c` is NUL-terminated.
        let r = unsafe { libc::unlinkat(d.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) };
        if r < 0 {
            return Err(match errno() {
                libc::EEXIST | libc::ENOTEMPTY => FsError::NotEmpty,
                e => FsError::from_errno(e),
            });
        }
        Ok(())
    }

    fn rename_in(&self, fd: &OwnedFd, from: &[u8], td: &OwnedFd, to: &[u8]) -> FsResult<()> {
        // The system calls below run as the caller (issue 21 item 6).
        let _acting = Acting::caller()?;
        let f = c_old_name(from)?;
        let t = c_old_name(to)?;
        // A regular file the rename replaces loses a link.
        let victim = self.shared.file_handle_at(td.as_raw_fd(), &t);
        // SAFETY: both names are NUL-terminated.
        let r = unsafe { libc::renameat(fd.as_raw_fd(), f.as_ptr(), td.as_raw_fd(), t.as_ptr()) };
        if r < 0 {
            return Err(match errno() {
                libc::EEXIST | libc::ENOTEMPTY => FsError::NotEmpty,
                e => FsError::from_errno(e),
            });
        }
        if let Some(fh) = victim {
            self.shared.note_unlink(fh);
        }
        Ok(())
    }
}

/// LINK of the open `file` (and its attributes) as `name` in `d`.
fn link_in(file: &(OwnedFd, libc::stat), d: &OwnedFd, name: &[u8]) -> FsResult<()> {
    let c = c_new_name(name)?;
    if ftype_of(file.1.st_mode) == FileType::Directory {
        return Err(FsError::IsDir);
    }
    // As the caller: the kernel's link rules (protected_hardlinks).
    creds::link_fd(file.0.as_raw_fd(), d.as_raw_fd(), &c)
}

impl Backend for UringBackend {
    fn kind(&self) -> &'static str {
        "uring"
    }

    fn root(&self) -> FileHandle {
        self.shared.root_fh
    }

    /// `open_by_handle_at`, `fstat`, `fsync`, ...: they may wait for the disk.
    fn metadata_blocks(&self) -> bool {
        true
    }

    /// The kernel moves the ctime on every write and attribute change the
    /// gateway makes; for a file only the gateway changes that is a
    /// consistent change attribute (its timer-tick granularity is the same
    /// with or without a write delegation: docs/BACKENDS.md).
    fn consistent_change(&self) -> bool {
        true
    }

    fn sync_meta(&self, fh: &FileHandle) -> FsResult<()> {
        sync::sync_meta(&self.shared, fh)
    }

    fn getattr(&self, fh: &FileHandle) -> FsResult<Attr> {
        let (_, st) = self.shared.open_path(fh)?;
        Ok(attr_of(&st))
    }

    /// The kernel checks every change as the caller (when the target runs
    /// as root and can take the caller's identity).
    fn enforces_permissions(&self) -> bool {
        creds::kernel_checks_callers()
    }

    fn may(&self, fh: &FileHandle, want: u32) -> FsResult<bool> {
        let (fd, _) = self.shared.open_path(fh)?;
        creds::fd_may(fd.as_raw_fd(), want)
    }

    fn setattr(&self, fh: &FileHandle, set: &SetAttr) -> FsResult<Attr> {
        // The system calls below run as the caller (issue 21 item 6).
        let _acting = Acting::caller()?;
        let (fd, st) = self.shared.open_path(fh)?;
        let ftype = ftype_of(st.st_mode);
        if let Some(size) = set.size {
            match ftype {
                FileType::Regular => {}
                FileType::Directory => return Err(FsError::IsDir),
                _ => return Err(FsError::Inval),
            }
            let size = i64::try_from(size).map_err(|_| FsError::FBig)?;
            let (w, _) = self.shared.open_fh(fh, libc::O_WRONLY | libc::O_NONBLOCK)?;
            // SAFETY: plain system call on a descriptor we own.
            cvt(unsafe { libc::ftruncate(w.as_raw_fd(), size) })?;
        }
        apply_meta(fd.as_raw_fd(), ftype, set.uid, set.gid, set)?;
        if set.size.is_none() && set.uid.is_none() && set.gid.is_none() && set.mode.is_none() {
            // Nothing but times (or nothing at all): the ctime still moves,
            // as for any SETATTR.
            if set.atime == SetTime::DontChange && set.mtime == SetTime::DontChange {
                // SAFETY: as in `apply_meta`; changing the owner to -1/-1 is
                // a no-op that updates the ctime.
                cvt(unsafe { libc::fchownat(fd.as_raw_fd(), empty_path(), u32::MAX, u32::MAX, libc::AT_EMPTY_PATH) })?;
            }
        }
        Ok(attr_of(&fstat(fd.as_raw_fd())?))
    }

    fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        let (d, st) = self.shared.open_dir(dir)?;
        if name == b"." {
            return Ok((*dir, attr_of(&st)));
        }
        self.shared.lookup_at(&d, &st, name)
    }

    fn readlink(&self, fh: &FileHandle, out: &mut [u8]) -> FsResult<usize> {
        let (fd, st) = self.shared.open_path(fh)?;
        if ftype_of(st.st_mode) != FileType::Symlink {
            return Err(FsError::Inval);
        }
        let mut buf = [0u8; PATH_MAX_BYTES + 1];
        // SAFETY: `buf` is writable for its length; the path is NUL-terminated.
        let n = unsafe { libc::readlinkat(fd.as_raw_fd(), empty_path(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(FsError::from_errno(errno()));
        }
        let n = n as usize;
        let dst = out.get_mut(..n).ok_or(FsError::TooSmall)?;
        dst.copy_from_slice(&buf[..n]);
        Ok(n)
    }

    fn create(&self, dir: &FileHandle, name: &[u8], how: CreateHow, owner: Owner) -> FsResult<(FileHandle, Attr)> {
        let (d, _) = self.shared.open_dir(dir)?;
        self.create_in(&d, name, how, owner)
    }

    fn mkdir(&self, dir: &FileHandle, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<(FileHandle, Attr)> {
        let (d, _) = self.shared.open_dir(dir)?;
        self.mkdir_in(&d, name, set, owner)
    }

    fn symlink(
        &self,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        let (d, _) = self.shared.open_dir(dir)?;
        self.symlink_in(&d, name, target, set, owner)
    }

    fn mknod(
        &self,
        dir: &FileHandle,
        name: &[u8],
        kind: NodeKind,
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        let (d, _) = self.shared.open_dir(dir)?;
        self.mknod_in(&d, name, kind, set, owner)
    }

    fn remove(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        let (d, _) = self.shared.open_dir(dir)?;
        self.remove_in(&d, name)
    }

    fn rmdir(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        let (d, _) = self.shared.open_dir(dir)?;
        self.rmdir_in(&d, name)
    }

    fn rename(&self, from_dir: &FileHandle, from: &[u8], to_dir: &FileHandle, to: &[u8]) -> FsResult<()> {
        let (fd, _) = self.shared.open_dir(from_dir)?;
        let (td, _) = self.shared.open_dir(to_dir)?;
        self.rename_in(&fd, from, &td, to)
    }

    fn link(&self, fh: &FileHandle, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        let file = self.shared.open_path(fh)?;
        let (d, _) = self.shared.open_dir(dir)?;
        link_in(&file, &d, name)
    }

    /// The directories' attributes are read with one `fstat` each on this
    /// (helper) thread just before the system call that changes them, as
    /// the caller already: another change that lands between that `fstat`
    /// and the call is not seen in the pre-operation attributes (the kernel
    /// locks the directory only inside the call, and offers no way to read
    /// its attributes under that lock). The check runs against a first
    /// read; the kernel checks the caller's rights again in the call
    /// (issue 21 item 8).
    fn change_checked(
        &self,
        dir: &FileHandle,
        change: DirChange<'_>,
        check: &mut dyn FnMut(&DirPre<'_>) -> Result<Owner, u32>,
    ) -> FsResult<DirChanged> {
        let (d, st) = self.shared.open_dir(dir)?;
        let to = match change {
            DirChange::Rename { to_dir, .. } => Some(self.shared.open_dir(to_dir)?),
            _ => None,
        };
        let lookup = |dh: &FileHandle, name: &[u8]| self.lookup(dh, name);
        let seen = DirPre {
            dir: attr_of(&st),
            to_dir: to.as_ref().map(|(_, t)| attr_of(t)),
            lookup: &lookup,
        };
        let owner = match check(&seen) {
            Ok(owner) => owner,
            Err(s) => {
                return Ok(DirChanged {
                    pre: seen.dir,
                    pre_to: seen.to_dir,
                    post: None,
                    res: Err(s),
                    refused: true,
                })
            }
        };
        let file = match change {
            DirChange::Link { file, .. } => Some(self.shared.open_path(file)),
            _ => None,
        };
        // Taken before the `fstat`s, so that nothing but the name's
        // conversion separates them from the change.
        let _acting = Acting::caller()?;
        let pre = attr_of(&fstat(d.as_raw_fd())?);
        let pre_to = match &to {
            Some((t, _)) => Some(attr_of(&fstat(t.as_raw_fd())?)),
            None => None,
        };
        let res = match change {
            DirChange::Create { name, how } => self.create_in(&d, name, how, owner).map(Some),
            DirChange::Mkdir { name, set } => self.mkdir_in(&d, name, set, owner).map(Some),
            DirChange::Symlink { name, target, set } => self.symlink_in(&d, name, target, set, owner).map(Some),
            DirChange::Mknod { name, kind, set } => self.mknod_in(&d, name, kind, set, owner).map(Some),
            DirChange::Remove { name } => self.remove_in(&d, name).map(|()| None),
            DirChange::Rmdir { name } => self.rmdir_in(&d, name).map(|()| None),
            DirChange::Rename { name, to: to_name, .. } => match &to {
                Some((t, _)) => self.rename_in(&d, name, t, to_name).map(|()| None),
                None => Err(FsError::ServerFault),
            },
            DirChange::Link { name, .. } => match file {
                Some(Ok(f)) => link_in(&f, &d, name).map(|()| None),
                Some(Err(e)) => Err(e),
                None => Err(FsError::ServerFault),
            },
        };
        Ok(DirChanged {
            pre,
            pre_to,
            post: None,
            res: res.map_err(|e| e.nfsstat3()),
            refused: false,
        })
    }

    fn readdir(&self, dir: &FileHandle, cookie: u64, sink: &mut dyn FnMut(DirEntry<'_>) -> bool) -> FsResult<bool> {
        let (d, dst) = self.shared.open_fh(dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let mut give = |name: &[u8], cookie: u64, ino: u64| -> bool {
            let (handle, attr) = match self.shared.lookup_at(&d, &dst, name) {
                Ok((h, a)) => (Some(h), Some(a)),
                // Gone since getdents, or a mount point: the bare entry.
                Err(_) => (None, None),
            };
            sink(DirEntry {
                fileid: attr.map_or(ino, |a| a.fileid),
                name,
                cookie,
                handle,
                attr,
            })
        };
        // `.` and `..` come first, with cookies outside the file system's
        // offsets (which are non-negative `loff_t`s); its own `.` and `..`
        // are skipped wherever they come in its order.
        let start = match cookie {
            0 => {
                if !give(b".", COOKIE_DOT, dst.st_ino) {
                    return Ok(false);
                }
                if !give(b"..", COOKIE_DOTDOT, 0) {
                    return Ok(false);
                }
                0
            }
            COOKIE_DOT => {
                if !give(b"..", COOKIE_DOTDOT, 0) {
                    return Ok(false);
                }
                0
            }
            COOKIE_DOTDOT => 0,
            c => i64::try_from(c).map_err(|_| FsError::BadCookie)?,
        };
        // SAFETY: plain system call on a descriptor we own.
        if unsafe { libc::lseek(d.as_raw_fd(), start, libc::SEEK_SET) } < 0 {
            return Err(FsError::BadCookie);
        }
        let mut buf = vec![0u8; GETDENTS_BUF_BYTES];
        loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::syscall(libc::SYS_getdents64, d.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
            if n < 0 {
                return Err(match errno() {
                    libc::EINVAL | libc::ENOENT => FsError::BadCookie,
                    e => FsError::from_errno(e),
                });
            }
            if n == 0 {
                return Ok(true);
            }
            let n = n as usize;
            let mut pos = 0usize;
            // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16,
            // d_type u8, then the NUL-terminated name.
            while pos + 19 < n {
                let rec = &buf[pos..n];
                let ino = u64::from_ne_bytes(rec[0..8].try_into().expect("8 bytes"));
                let off = i64::from_ne_bytes(rec[8..16].try_into().expect("8 bytes"));
                let reclen = u16::from_ne_bytes([rec[16], rec[17]]) as usize;
                if reclen < 20 || reclen > rec.len() {
                    return Err(FsError::Io);
                }
                let raw = &rec[19..reclen];
                let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
                pos += reclen;
                if name == b"." || name == b".." {
                    continue;
                }
                if off <= 0 {
                    // Not a position we could resume from.
                    return Err(FsError::Io);
                }
                if !give(name, off as u64, ino) {
                    return Ok(false);
                }
            }
        }
    }

    fn cookie_verifier(&self, dir: &FileHandle) -> FsResult<u64> {
        let (_, st) = self.shared.open_dir(dir)?;
        let m = (st.st_mtime as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(st.st_mtime_nsec as u64);
        let c = (st.st_ctime as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(st.st_ctime_nsec as u64);
        Ok(m ^ c.rotate_left(32))
    }

    fn fsstat(&self) -> FsResult<FsStat> {
        // SAFETY: `statvfs` is plain data; all-zero is a valid value.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `s` is writable.
        cvt(unsafe { libc::fstatvfs(self.shared.root_fd.as_raw_fd(), &mut s) })?;
        let frsize = s.f_frsize;
        Ok(FsStat {
            total_bytes: s.f_blocks.saturating_mul(frsize),
            free_bytes: s.f_bfree.saturating_mul(frsize),
            avail_bytes: s.f_bavail.saturating_mul(frsize),
            total_files: s.f_files,
            free_files: s.f_ffree,
            avail_files: s.f_favail,
            max_file_size: URING_MAX_FILE_BYTES,
            block_size: u32::try_from(s.f_bsize).unwrap_or(4096),
        })
    }

    fn commit(&self, fh: &FileHandle) -> FsResult<()> {
        let (_, st) = self.shared.open_path(fh)?;
        let flags = match ftype_of(st.st_mode) {
            FileType::Regular => libc::O_RDONLY,
            FileType::Directory => libc::O_RDONLY | libc::O_DIRECTORY,
            // Nothing of a device node, fifo or symlink is ours to flush
            // (opening a device could have side effects).
            _ => return Ok(()),
        };
        let (fd, _) = self.shared.open_fh(fh, flags | libc::O_NONBLOCK)?;
        // SAFETY: plain system call on a descriptor we own.
        cvt(unsafe { libc::fsync(fd.as_raw_fd()) }).map(drop)
    }

    fn sync_all(&self) -> FsResult<()> {
        // SAFETY: plain system call on a descriptor we own.
        cvt(unsafe { libc::syncfs(self.shared.root_fd.as_raw_fd()) }).map(drop)
    }

    /// `open_by_handle_at` (and the `O_DIRECT` descriptor when the backend
    /// uses one), on the helper thread that calls this (issue 21 item 5).
    fn open_for_io(&self, fh: &FileHandle) -> FsResult<Option<OpenedFile>> {
        let (fd, read_only) = self.shared.open_for_io(fh)?;
        let direct = if self.o_direct {
            let access = if read_only { libc::O_RDONLY } else { libc::O_RDWR };
            match self.shared.open_fh(fh, access | libc::O_DIRECT) {
                Ok((d, _)) => Direct::Open(d),
                Err(FsError::Inval) => Direct::Unsupported,
                Err(e) => return Err(e),
            }
        } else {
            Direct::Unknown
        };
        Ok(Some(OpenedFile(Box::new(Opened { fd, read_only, direct }))))
    }

    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
        Ok(Box::new(self.open_uring_channel(core)?))
    }

    fn allocate(&self, fh: &FileHandle, offset: u64, len: u64) -> FsResult<()> {
        let (fd, _) = self.open_regular(fh, libc::O_WRONLY)?;
        let (off, len) = (to_off(offset)?, to_off(len)?);
        // SAFETY: plain system call on a descriptor we own.
        cvt(unsafe { libc::fallocate(fd.as_raw_fd(), 0, off, len) }).map(drop)
    }

    fn deallocate(&self, fh: &FileHandle, offset: u64, len: u64) -> FsResult<()> {
        let (fd, _) = self.open_regular(fh, libc::O_WRONLY)?;
        let (off, len) = (to_off(offset)?, to_off(len)?);
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: plain system call on a descriptor we own.
        cvt(unsafe { libc::fallocate(fd.as_raw_fd(), mode, off, len) }).map(drop)
    }

    fn seek(&self, fh: &FileHandle, offset: u64, data: bool) -> FsResult<Option<u64>> {
        let (fd, st) = self.open_regular(fh, libc::O_RDONLY)?;
        if offset >= st.st_size as u64 {
            return Err(FsError::Nxio);
        }
        let whence = if data { libc::SEEK_DATA } else { libc::SEEK_HOLE };
        // SAFETY: plain system call on a descriptor we own.
        let r = unsafe { libc::lseek(fd.as_raw_fd(), to_off(offset)?, whence) };
        match r {
            r if r >= 0 => Ok(Some(r as u64)),
            _ if errno() == libc::ENXIO => Ok(None),
            _ => Err(FsError::from_errno(errno())),
        }
    }

    fn copy(&self, src: &FileHandle, src_off: u64, dst: &FileHandle, dst_off: u64, count: u64) -> FsResult<u64> {
        let (sfd, st) = self.open_regular(src, libc::O_RDONLY)?;
        let (dfd, _) = self.open_regular(dst, libc::O_WRONLY)?;
        let size = st.st_size as u64;
        let want = if count == 0 {
            size.saturating_sub(src_off)
        } else {
            count
        };
        let (mut si, mut di) = (to_off(src_off)?, to_off(dst_off)?);
        let mut done = 0u64;
        while done < want {
            let chunk = (want - done).min(1 << 30) as usize;
            // SAFETY: plain system call on descriptors we own; the offsets
            // are ours to update.
            let n = unsafe { libc::copy_file_range(sfd.as_raw_fd(), &mut si, dfd.as_raw_fd(), &mut di, chunk, 0) };
            if n < 0 {
                return Err(FsError::from_errno(errno()));
            }
            if n == 0 {
                break;
            }
            done += n as u64;
        }
        // SAFETY: plain system call on a descriptor we own.
        cvt(unsafe { libc::fsync(dfd.as_raw_fd()) })?;
        Ok(done)
    }
}

/// An offset or length as `off_t` (larger is EFBIG).
fn to_off(v: u64) -> FsResult<libc::off_t> {
    libc::off_t::try_from(v).map_err(|_| FsError::FBig)
}

impl UringBackend {
    /// `fh` opened with `flags`, when it is a regular file.
    fn open_regular(&self, fh: &FileHandle, flags: libc::c_int) -> FsResult<(OwnedFd, libc::stat)> {
        let (_, st) = self.shared.open_path(fh)?;
        match ftype_of(st.st_mode) {
            FileType::Regular => self.shared.open_fh(fh, flags | libc::O_NONBLOCK),
            FileType::Directory => Err(FsError::IsDir),
            _ => Err(FsError::Inval),
        }
    }
}

// ------------------------------------------------------------ channel

/// What a channel did, for tests and statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UringChannelStats {
    /// I/O submitted on an `O_DIRECT` descriptor.
    pub direct_ios: u64,
    /// I/O submitted on a buffered descriptor.
    pub buffered_ios: u64,
    /// `O_DIRECT` refused (at open or by the I/O): redone buffered.
    pub direct_fallbacks: u64,
    /// Descriptors opened (cache misses).
    pub fd_opens: u64,
    /// Reads and writes resubmitted to finish a short transfer.
    pub resubmits: u64,
}

#[derive(Debug)]
enum Direct {
    Unknown,
    Open(OwnedFd),
    Unsupported,
}

/// What [`UringBackend::open_for_io`] opened, for [`UringChannel::adopt`].
#[derive(Debug)]
struct Opened {
    fd: OwnedFd,
    read_only: bool,
    direct: Direct,
}

#[derive(Debug)]
struct CachedFd {
    fd: OwnedFd,
    /// `fd` (and the O_DIRECT one) is `O_RDONLY`: writes get `Rofs`.
    read_only: bool,
    direct: Direct,
    /// I/O in flight on this entry: it is not evicted while non-zero.
    users: u32,
    last_use: u64,
    /// The file lost its last link: new I/O gets `Stale`.
    stale: bool,
}

#[derive(Debug)]
struct Slot {
    tag: u64,
    fh: FileHandle,
    op: IoOp,
    offset: u64,
    buf: *mut u8,
    len: u32,
    /// Bytes already transferred (a short transfer is continued).
    done: u32,
    direct: bool,
    /// The io_uring personality a write runs with: its caller's (issue 21
    /// item 6). `None`: as the process.
    personality: Option<u16>,
}

/// One core's data path into a [`UringBackend`]: an io_uring and a cache of
/// open descriptors. Owned and polled by one core.
pub struct UringChannel {
    shared: Arc<Shared>,
    ring: IoUring,
    /// The io-wq affinity registered for this channel's thread, if any.
    io_worker_cpus: Option<Vec<usize>>,
    core: usize,
    o_direct: bool,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Completions decided without the kernel (errors found at submit).
    ready: VecDeque<IoDone>,
    cache: HashMap<FileHandle, CachedFd>,
    tick: u64,
    epoch_seen: u64,
    unsubmitted: usize,
    stats: UringChannelStats,
    personalities: Personalities,
}

impl fmt::Debug for UringChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringChannel")
            .field("core", &self.core)
            .field("depth", &self.slots.len())
            .field("in_flight", &self.in_flight())
            .field("cached_fds", &self.cache.len())
            .field("io_worker_cpus", &self.io_worker_cpus)
            .field("stats", &self.stats)
            .finish()
    }
}

fn aligned(v: u64) -> bool {
    v.is_multiple_of(URING_DIRECT_ALIGN)
}

impl UringChannel {
    /// Counters since the channel was opened. Runs on the channel's core.
    pub fn stats(&self) -> UringChannelStats {
        self.stats
    }

    /// The CPUs this channel's thread registered for its io-wq workers;
    /// `None` when the affinity was left unset (the option is off, no CPU
    /// is free of io cores, or the kernel refused it).
    pub fn io_worker_cpus(&self) -> Option<&[usize]> {
        self.io_worker_cpus.as_deref()
    }

    /// After a remove or rename through the backend: mark stale the cached
    /// descriptors of files that lost their last link (they keep the inode
    /// allocated and must take no more I/O) and close them when idle. Only
    /// the files the backend logged are checked, unless this channel fell
    /// behind the log.
    fn revalidate(&mut self) {
        let epoch = self.shared.unlink_epoch.load(Ordering::Acquire);
        if epoch == self.epoch_seen {
            return;
        }
        let check = |e: &mut CachedFd| {
            if fstat(e.fd.as_raw_fd()).map_or(true, |st| st.st_nlink == 0) {
                e.stale = true;
            }
        };
        {
            let log = self.shared.unlinked.lock().unwrap_or_else(|e| e.into_inner());
            let missed = log.front().is_none_or(|&(first, _)| first > self.epoch_seen + 1);
            let unknown = log.iter().any(|(e, fh)| *e > self.epoch_seen && fh.is_none());
            if missed || unknown {
                self.cache.values_mut().for_each(check);
            } else {
                for (_, fh) in log.iter().filter(|(e, _)| *e > self.epoch_seen) {
                    if let Some(e) = fh.as_ref().and_then(|fh| self.cache.get_mut(fh)) {
                        check(e);
                    }
                }
            }
            self.epoch_seen = log.back().map_or(epoch, |&(e, _)| e);
        }
        self.cache.retain(|_, e| !(e.stale && e.users == 0));
    }

    /// The cached entry of `fh`, opening it on a miss.
    fn entry(&mut self, fh: &FileHandle) -> FsResult<&mut CachedFd> {
        self.tick += 1;
        if !self.cache.contains_key(fh) {
            let (fd, read_only) = self.shared.open_for_io(fh)?;
            self.insert(fh, fd, read_only, Direct::Unknown);
        }
        let tick = self.tick;
        let e = self.cache.get_mut(fh).ok_or(FsError::ServerFault)?;
        if e.stale {
            return Err(FsError::Stale);
        }
        e.last_use = tick;
        Ok(e)
    }

    /// Cache a descriptor opened for `fh` (the least recently used idle
    /// entry makes room).
    fn insert(&mut self, fh: &FileHandle, fd: OwnedFd, read_only: bool, direct: Direct) {
        {
            self.stats.fd_opens += 1;
            if self.cache.len() >= URING_FD_CACHE_ENTRIES {
                let victim = self
                    .cache
                    .iter()
                    .filter(|(_, e)| e.users == 0)
                    .min_by_key(|(_, e)| e.last_use)
                    .map(|(k, _)| *k);
                if let Some(k) = victim {
                    self.cache.remove(&k);
                }
            }
            self.cache.insert(
                *fh,
                CachedFd {
                    fd,
                    read_only,
                    direct,
                    users: 0,
                    last_use: 0,
                    stale: false,
                },
            );
        }
    }

    /// The descriptor for the slot's next transfer (`O_DIRECT` when allowed
    /// and possible).
    fn fd_for(&mut self, fh: &FileHandle, want_direct: bool) -> FsResult<(RawFd, bool)> {
        let shared = self.shared.clone();
        let e = self.entry(fh)?;
        if !want_direct {
            return Ok((e.fd.as_raw_fd(), false));
        }
        let mut refused = false;
        if let Direct::Unknown = e.direct {
            let access = if e.read_only { libc::O_RDONLY } else { libc::O_RDWR };
            e.direct = match shared.open_fh(fh, access | libc::O_DIRECT) {
                Ok((fd, _)) => Direct::Open(fd),
                Err(FsError::Inval) => {
                    refused = true;
                    Direct::Unsupported
                }
                Err(err) => return Err(err),
            };
        }
        let r = match &e.direct {
            Direct::Open(fd) => (fd.as_raw_fd(), true),
            _ => (e.fd.as_raw_fd(), false),
        };
        if refused {
            self.stats.direct_fallbacks += 1;
        }
        Ok(r)
    }

    /// Queue the SQE of slot `i`'s next step.
    fn push(&mut self, i: u32) -> FsResult<()> {
        let (fh, op, offset, buf, len, done, want_direct, personality) = {
            let s = self.slots[i as usize].as_ref().ok_or(FsError::ServerFault)?;
            (s.fh, s.op, s.offset, s.buf, s.len, s.done, s.direct, s.personality)
        };
        let (fd, direct) = self.fd_for(&fh, want_direct)?;
        if let Some(s) = self.slots[i as usize].as_mut() {
            s.direct = direct;
        }
        if !op.is_flush() {
            if direct {
                self.stats.direct_ios += 1;
            } else {
                self.stats.buffered_ios += 1;
            }
        }
        let pos = offset + u64::from(done);
        let rest = len - done;
        // SAFETY (of the pointer arithmetic): `done <= len`, inside the
        // caller's buffer.
        let ptr = buf.wrapping_add(done as usize);
        let sqe = match op {
            IoOp::Read => opcode::Read::new(types::Fd(fd), ptr, rest).offset(pos).build(),
            IoOp::Write(stable) => {
                let flags = match stable {
                    Stable::Unstable => 0,
                    Stable::DataSync => libc::RWF_DSYNC,
                    Stable::FileSync => libc::RWF_SYNC,
                };
                opcode::Write::new(types::Fd(fd), ptr as *const u8, rest)
                    .offset(pos)
                    .rw_flags(flags)
                    .build()
            }
            IoOp::Flush => opcode::Fsync::new(types::Fd(fd)).build(),
            IoOp::FlushData => opcode::Fsync::new(types::Fd(fd))
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
        };
        let sqe = sqe.user_data(u64::from(i));
        let sqe = match personality {
            Some(p) => sqe.personality(p),
            None => sqe,
        };
        loop {
            // SAFETY: the SQE's buffer is the caller's, valid until its
            // completion is reaped (the submit contract); its descriptor is
            // held by the cache entry, which is not evicted while the entry
            // has users, and io_uring takes its own file reference at
            // submission anyway.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                self.unsubmitted += 1;
                return Ok(());
            }
            // The submission queue is full: hand it to the kernel.
            self.flush_sq();
        }
    }

    fn flush_sq(&mut self) {
        if self.unsubmitted == 0 {
            return;
        }
        // On EBUSY/EAGAIN/EINTR the kernel takes them on a later try.
        if let Ok(n) = self.ring.submit() {
            self.unsubmitted = self.unsubmitted.saturating_sub(n);
        }
    }

    fn release(&mut self, fh: &FileHandle) {
        if let Some(e) = self.cache.get_mut(fh) {
            e.users = e.users.saturating_sub(1);
            if e.stale && e.users == 0 {
                self.cache.remove(fh);
            }
        }
    }

    fn finish(&mut self, i: u32, result: FsResult<u32>, eof: bool) -> IoDone {
        let s = self.slots[i as usize].take();
        self.free.push(i);
        let Some(s) = s else {
            return IoDone {
                result: Err(FsError::ServerFault),
                ..IoDone::default()
            };
        };
        self.release(&s.fh);
        if let Some(p) = s.personality {
            self.personalities.release(p);
        }
        let committed = match (s.op, &result) {
            (IoOp::Write(stable), Ok(_)) => stable,
            (IoOp::Flush, Ok(_)) => Stable::FileSync,
            (IoOp::FlushData, Ok(_)) => Stable::DataSync,
            _ => Stable::Unstable,
        };
        IoDone {
            tag: s.tag,
            result,
            eof,
            committed,
        }
    }

    /// Handle one CQE; returns the completion when the I/O is finished.
    fn complete(&mut self, i: u32, res: i32) -> Option<IoDone> {
        let (op, fh, offset, len, done, direct) = {
            let s = self.slots.get(i as usize)?.as_ref()?;
            (s.op, s.fh, s.offset, s.len, s.done, s.direct)
        };
        if res < 0 {
            let e = -res;
            if e == libc::EINVAL && direct {
                // The file system refused this O_DIRECT transfer: redo it
                // buffered, and stop trying O_DIRECT on this file.
                self.stats.direct_fallbacks += 1;
                if let Some(c) = self.cache.get_mut(&fh) {
                    c.direct = Direct::Unsupported;
                }
                return self.resubmit(i, false);
            }
            if e == libc::EAGAIN || e == libc::EINTR {
                return self.resubmit(i, direct);
            }
            return Some(self.finish(i, Err(FsError::from_errno(e)), false));
        }
        let total = done + res as u32;
        match op {
            IoOp::Flush | IoOp::FlushData => Some(self.finish(i, Ok(0), false)),
            IoOp::Write(_) => {
                if res == 0 || total >= len {
                    return Some(self.finish(i, Ok(total), false));
                }
                self.stats.resubmits += 1;
                if let Some(s) = self.slots[i as usize].as_mut() {
                    s.done = total;
                }
                // The rest is no longer aligned: buffered.
                self.resubmit(i, false)
            }
            IoOp::Read => {
                // Where the file ends now decides eof, and whether a short
                // read is the end of the file or must go on.
                let size = self
                    .cache
                    .get(&fh)
                    .and_then(|c| fstat(c.fd.as_raw_fd()).ok())
                    .map_or(0, |st| st.st_size as u64);
                let end = offset + u64::from(total);
                if res == 0 || total >= len || end >= size {
                    return Some(self.finish(i, Ok(total), end >= size));
                }
                self.stats.resubmits += 1;
                if let Some(s) = self.slots[i as usize].as_mut() {
                    s.done = total;
                }
                self.resubmit(i, false)
            }
        }
    }

    fn resubmit(&mut self, i: u32, direct: bool) -> Option<IoDone> {
        if let Some(s) = self.slots[i as usize].as_mut() {
            s.direct = direct;
        }
        match self.push(i) {
            Ok(()) => None,
            Err(e) => {
                let done = self.slots[i as usize].as_ref().map_or(0, |s| s.done);
                let r = if done > 0 { Ok(done) } else { Err(e) };
                Some(self.finish(i, r, false))
            }
        }
    }

    fn fail_now(&mut self, tag: u64, e: FsError) {
        self.ready.push_back(IoDone {
            tag,
            result: Err(e),
            ..IoDone::default()
        });
    }
}

impl IoChannel for UringChannel {
    /// Runs on the channel's core. Errors found before the I/O reaches the
    /// kernel (bad or stale handle, a directory, an offset past the largest
    /// file) come back in the completion like any other; only a full
    /// channel (`Jukebox`) fails the submission. The SQE reaches the kernel
    /// at the next [`IoChannel::poll`].
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()> {
        if self.in_flight() >= self.slots.len() {
            return Err(FsError::Jukebox);
        }
        self.revalidate();
        if !io.op.is_flush() {
            if io.buf.is_null() && io.len != 0 {
                self.fail_now(io.tag, FsError::Inval);
                return Ok(());
            }
            if io.offset.saturating_add(u64::from(io.len)) > URING_MAX_FILE_BYTES {
                self.fail_now(io.tag, FsError::FBig);
                return Ok(());
            }
        }
        // The handle must name a regular file before anything is queued.
        match self.entry(&io.fh) {
            Err(e) => {
                self.fail_now(io.tag, e);
                return Ok(());
            }
            Ok(e) if e.read_only && matches!(io.op, IoOp::Write(_)) => {
                self.fail_now(io.tag, FsError::Rofs);
                return Ok(());
            }
            Ok(_) => {}
        }
        if io.len == 0 && !io.op.is_flush() {
            // Nothing to transfer; a read still reports eof.
            let eof = match io.op {
                IoOp::Read => self
                    .cache
                    .get(&io.fh)
                    .and_then(|c| fstat(c.fd.as_raw_fd()).ok())
                    .is_some_and(|st| io.offset >= st.st_size as u64),
                _ => false,
            };
            let committed = match io.op {
                IoOp::Write(s) => s,
                _ => Stable::Unstable,
            };
            self.ready.push_back(IoDone {
                tag: io.tag,
                result: Ok(0),
                eof,
                committed,
            });
            return Ok(());
        }
        // A write runs as its caller: the kernel clears set-id bits for a
        // writer without CAP_FSETID and charges quota without
        // CAP_SYS_RESOURCE, as for the Linux server's writes.
        let personality = match (io.op, creds::current()) {
            (IoOp::Write(_), Some(c)) => {
                let (ring, unsubmitted) = (&self.ring, &mut self.unsubmitted);
                let flush = || {
                    if let Ok(n) = ring.submit() {
                        *unsubmitted = unsubmitted.saturating_sub(n);
                    }
                };
                match self.personalities.acquire(ring, &c, flush) {
                    Ok(p) => p,
                    Err(FsError::Jukebox) => return Err(FsError::Jukebox),
                    Err(e) => {
                        self.fail_now(io.tag, e);
                        return Ok(());
                    }
                }
            }
            _ => None,
        };
        let Some(i) = self.free.pop() else {
            if let Some(p) = personality {
                self.personalities.release(p);
            }
            return Err(FsError::Jukebox);
        };
        let direct = self.o_direct
            && !io.op.is_flush()
            && aligned(io.offset)
            && aligned(u64::from(io.len))
            && aligned(io.buf as u64);
        self.slots[i as usize] = Some(Slot {
            tag: io.tag,
            fh: io.fh,
            op: io.op,
            offset: io.offset,
            buf: io.buf,
            len: io.len,
            done: 0,
            direct,
            personality,
        });
        if let Some(e) = self.cache.get_mut(&io.fh) {
            e.users += 1;
        }
        if let Err(e) = self.push(i) {
            let done = self.finish(i, Err(e), false);
            self.ready.push_back(done);
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut [IoDone]) -> usize {
        self.flush_sq();
        let mut n = 0;
        while n < out.len() {
            let Some(d) = self.ready.pop_front() else { break };
            out[n] = d;
            n += 1;
        }
        if n == out.len() {
            return n;
        }
        // Reap into a small local batch first: handling a CQE may push SQEs.
        let mut cqes = [(0u64, 0i32); 64];
        loop {
            let mut got = 0;
            for cqe in self.ring.completion() {
                cqes[got] = (cqe.user_data(), cqe.result());
                got += 1;
                if got == cqes.len() {
                    break;
                }
            }
            if got == 0 {
                break;
            }
            for &(ud, res) in &cqes[..got] {
                let Ok(i) = u32::try_from(ud) else { continue };
                if let Some(d) = self.complete(i, res) {
                    if n < out.len() {
                        out[n] = d;
                        n += 1;
                    } else {
                        self.ready.push_back(d);
                    }
                }
            }
            if n == out.len() {
                break;
            }
        }
        self.flush_sq();
        if self.free.len() == self.slots.len() {
            // Idle: let go of descriptors of files removed meanwhile.
            self.revalidate();
        }
        n
    }

    fn in_flight(&self) -> usize {
        self.ready.len() + self.slots.len() - self.free.len()
    }

    /// Device or kernel I/O: yes.
    fn completes_later(&self) -> bool {
        true
    }

    fn needs_open(&mut self, fh: &FileHandle) -> bool {
        !self.cache.contains_key(fh)
    }

    fn adopt(&mut self, fh: &FileHandle, file: OpenedFile) {
        if let Ok(o) = file.0.downcast::<Opened>() {
            if !self.cache.contains_key(fh) {
                let Opened { fd, read_only, direct } = *o;
                self.insert(fh, fd, read_only, direct);
            }
        }
    }

    /// An `fstat` of the cached descriptor: no handle to open, no lookup.
    fn getattr_cached(&mut self, fh: &FileHandle) -> Option<FsResult<Attr>> {
        sync::cached_attr(self, fh)
    }
}

impl Drop for UringChannel {
    /// Waits for the kernel to finish every I/O still in flight: it may
    /// still be writing into the callers' buffers.
    fn drop(&mut self) {
        loop {
            let busy = self.slots.len() - self.free.len();
            if busy == 0 {
                return;
            }
            if self.ring.submit_and_wait(1).is_err() {
                return;
            }
            let mut ids = Vec::new();
            for cqe in self.ring.completion() {
                ids.push((cqe.user_data(), cqe.result()));
            }
            for (ud, _) in ids {
                if let Ok(i) = u32::try_from(ud) {
                    if let Some(slot) = self.slots.get_mut(i as usize) {
                        if slot.take().is_some() {
                            self.free.push(i);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::siphash24;

    /// The reference vectors of the SipHash paper (key 00..0f, messages
    /// 00..(n-1)).
    #[test]
    fn siphash_reference_vectors() {
        let mut key = [0u8; 16];
        for (i, k) in key.iter_mut().enumerate() {
            *k = i as u8;
        }
        let msg: Vec<u8> = (0..64u8).collect();
        assert_eq!(siphash24(&key, &msg[..0]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(&key, &msg[..1]), 0x74f8_39c5_93dc_67fd);
        assert_eq!(siphash24(&key, &msg[..15]), 0xa129_ca61_49be_45e5);
        assert_ne!(siphash24(&key, &msg[..8]), siphash24(&key, &msg[..9]));
    }
}
