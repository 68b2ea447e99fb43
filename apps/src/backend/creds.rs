//! Who a Call acts as, for the backends (issue 21 item 6): the caller's
//! credentials after an export's squashing rules, and running file system
//! work under them.
//!
//! The NFS layer names the caller of the Call it is running with
//! [`Scope`] and [`set_current`]; a Call runs start to finish on one thread,
//! so the caller is a thread-local value and the [`Backend`](super::Backend)
//! trait keeps its signatures. Backends read it with [`current`]:
//! - `mem` applies the kernel's rules in user space (set-id clearing, the
//!   S_ISGID rule of chmod, hard link rules as `protected_hardlinks`);
//! - `uring` runs each namespace and attribute system call under the
//!   caller's file system identity ([`as_caller`]: `setfsuid`, `setfsgid`,
//!   `setgroups` on the calling thread, and without `CAP_SYS_RESOURCE`, as
//!   the Linux server drops it), and its data I/O under an io_uring
//!   personality of the same credentials (`backend::personality`).
//!
//! Thread-local credentials need the raw system calls: glibc's `setgroups`
//! (and `setuid`, `setgid`) change every thread of the process.
//!
//! A work item that moves to another thread (a helper pool) carries
//! [`current`] with it and enters it there with [`Scope`] and
//! [`set_current`].

use std::cell::Cell;

/// Most supplementary groups an AUTH_SYS credential carries (RFC 5531
/// appendix A, `gids<16>`).
pub const MAX_SUPP_GROUPS: usize = 16;

/// A caller's identity: user, primary group and supplementary groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    groups: [u32; MAX_SUPP_GROUPS],
    ngroups: u8,
}

impl Creds {
    /// Credentials with supplementary `groups` (sorted, without repeats; at
    /// most [`MAX_SUPP_GROUPS`] are kept), so equal sets compare equal.
    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> Self {
        let mut g = [0u32; MAX_SUPP_GROUPS];
        let mut n = 0usize;
        for &x in groups.iter().take(MAX_SUPP_GROUPS) {
            if !g[..n].contains(&x) {
                g[n] = x;
                n += 1;
            }
        }
        g[..n].sort_unstable();
        Creds {
            uid,
            gid,
            groups: g,
            ngroups: n as u8,
        }
    }

    /// The supplementary groups.
    pub fn groups(&self) -> &[u32] {
        &self.groups[..usize::from(self.ngroups).min(MAX_SUPP_GROUPS)]
    }

    /// Root keeps every capability (no squashing applied to it).
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether `gid` is the primary or a supplementary group (the kernel's
    /// `in_group_p`).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups().contains(&gid)
    }

    /// Whether the mode bits of an object (`mode`, owned by `uid`:`gid`)
    /// grant every bit of `want` (`MAY_READ` 4, `MAY_WRITE` 2, `MAY_EXEC` 1)
    /// to a non-root caller: the owner's triple, else the group's when the
    /// caller is in the group, else the others'.
    pub fn may_mode(&self, mode: u32, uid: u32, gid: u32, want: u32) -> bool {
        let triple = if self.uid == uid {
            mode >> 6
        } else if self.in_group(gid) {
            mode >> 3
        } else {
            mode
        } & 7;
        triple & want == want
    }

    /// The kernel's `may_linkat` with `protected_hardlinks` on, for a
    /// non-root caller: a hard link to a file the caller does not own needs
    /// a regular file, not set-user-ID, not set-group-ID with group execute,
    /// that the caller may read and write.
    pub fn may_hardlink(&self, regular: bool, mode: u32, uid: u32, gid: u32) -> bool {
        self.uid == uid
            || (regular
                && mode & S_ISUID == 0
                && mode & (S_ISGID | S_IXGRP) != (S_ISGID | S_IXGRP)
                && self.may_mode(mode, uid, gid, 4 | 2))
    }
}

/// The set-user-ID bit.
pub const S_ISUID: u32 = 0o4000;
/// The set-group-ID bit.
pub const S_ISGID: u32 = 0o2000;
/// Group execute.
pub const S_IXGRP: u32 = 0o010;

/// `mode` without the set-id bits a write, a truncation or a change of owner
/// removes (the kernel's `should_remove_suid` and `setattr_should_drop_sgid`):
/// S_ISUID; S_ISGID when group execute is set, or when the one who acts is
/// neither in the file's group nor root (`in_group_or_root` false).
pub fn kill_setid(mode: u32, in_group_or_root: bool) -> u32 {
    let mut m = mode & !S_ISUID;
    if m & S_ISGID != 0 && (m & S_IXGRP != 0 || !in_group_or_root) {
        m &= !S_ISGID;
    }
    m
}

thread_local! {
    /// The caller of the Call this thread is running, if any.
    static CURRENT: Cell<Option<Creds>> = const { Cell::new(None) };
    /// The file system identity this thread has switched to, if any.
    static APPLIED: Cell<Option<Creds>> = const { Cell::new(None) };
}

/// The caller of the Call this thread runs; `None` outside a Call (start-up,
/// tests calling a backend directly): the process acts as itself.
pub fn current() -> Option<Creds> {
    CURRENT.with(Cell::get)
}

/// Name the caller of the Call this thread runs, until the enclosing
/// [`Scope`] ends.
pub fn set_current(c: Option<Creds>) {
    CURRENT.with(|x| x.set(c));
}

/// Restores the caller that was current when it was made, when dropped: one
/// per Call, so no caller outlives its Call.
#[derive(Debug)]
pub struct Scope {
    prev: Option<Creds>,
}

impl Scope {
    pub fn enter() -> Scope {
        Scope { prev: current() }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        set_current(self.prev);
    }
}

/// Whether this process can take other identities (its effective user is
/// root). Otherwise it acts as itself and the kernel checks that.
fn privileged() -> bool {
    // SAFETY: no arguments, no side effects.
    unsafe { libc::geteuid() == 0 }
}

/// `CAP_SYS_RESOURCE`: quota limits do not hold for whoever has it.
const CAP_SYS_RESOURCE: u32 = 24;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn capget() -> Option<[CapData; 2]> {
    let mut h = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut d = [CapData::default(); 2];
    // SAFETY: a v3 header and two data words, both writable.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut CapHeader, d.as_mut_ptr()) };
    (r == 0).then_some(d)
}

fn capset(d: &[CapData; 2]) -> bool {
    let mut h = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: a v3 header and two data words; pid 0 is the calling thread.
    unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut CapHeader, d.as_ptr()) == 0 }
}

fn set_groups(g: &[u32]) -> bool {
    // SAFETY: `g` holds `g.len()` gids. The raw system call changes this
    // thread only.
    unsafe { libc::syscall(libc::SYS_setgroups, g.len(), g.as_ptr()) == 0 }
}

/// Set this thread's fsuid (or fsgid) and check that it took: the system
/// call returns the previous value whatever happens.
fn set_fs_id(nr: libc::c_long, id: u32) -> bool {
    // SAFETY: plain system calls with integer arguments, this thread only.
    unsafe {
        libc::syscall(nr, id);
        libc::syscall(nr, u32::MAX) as u32 == id
    }
}

/// The thread's own identity, captured before its first switch.
#[derive(Clone, Copy)]
struct Own {
    caps: [CapData; 2],
    groups: [u32; OWN_GROUPS_MAX],
    ngroups: usize,
}

/// Supplementary groups of the process kept for restoring.
const OWN_GROUPS_MAX: usize = 64;

thread_local! {
    static OWN: Cell<Option<Own>> = const { Cell::new(None) };
}

/// The thread's own identity (captured on first use, before any switch).
fn own() -> Option<Own> {
    if let Some(o) = OWN.with(Cell::get) {
        return Some(o);
    }
    debug_assert!(APPLIED.with(Cell::get).is_none());
    let caps = capget()?;
    let mut groups = [0u32; OWN_GROUPS_MAX];
    // SAFETY: `groups` has room for OWN_GROUPS_MAX gids.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, groups.len(), groups.as_mut_ptr()) };
    let ngroups = usize::try_from(n).ok()?;
    let o = Own { caps, groups, ngroups };
    OWN.with(|x| x.set(Some(o)));
    Some(o)
}

/// From the thread's own identity to `c`'s. False (and still the own
/// identity) when it could not.
fn switch_to(c: &Creds) -> bool {
    let Some(o) = own() else {
        return false;
    };
    let ok = set_groups(c.groups()) && set_fs_id(libc::SYS_setfsgid, c.gid) && set_fs_id(libc::SYS_setfsuid, c.uid);
    // setfsuid to a non-zero user dropped the file system capabilities;
    // CAP_SYS_RESOURCE goes too (the Linux server's CAP_NFSD_SET), so
    // quota limits hold.
    let ok = ok && {
        let mut now = capget().unwrap_or(o.caps);
        now[0].effective &= !(1 << CAP_SYS_RESOURCE);
        capset(&now)
    };
    if !ok {
        back_to_own();
    }
    ok
}

/// Back to the thread's own identity.
fn back_to_own() {
    let Some(o) = OWN.with(Cell::get) else {
        return;
    };
    // SAFETY: no arguments.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // fsuid back to root raises the file system capabilities again.
    let ok = set_fs_id(libc::SYS_setfsuid, euid)
        && set_fs_id(libc::SYS_setfsgid, egid)
        && set_groups(&o.groups[..o.ngroups])
        && capset(&o.caps);
    // A thread that cannot get its own identity back would run later work
    // with a client's: stop rather than do that.
    assert!(ok, "could not restore the thread's file system identity");
}

/// Why work could not run under the caller's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchFailed;

/// Run `f` under `c`'s file system identity on this thread (fsuid, fsgid,
/// supplementary groups; without the file system capabilities and
/// `CAP_SYS_RESOURCE` unless `c` is root), then take the thread's own back.
/// Root callers, and an unprivileged process (which cannot switch), run `f`
/// as the process is. Already under `c`: runs `f` directly.
pub fn with_creds<T>(c: &Creds, f: impl FnOnce() -> T) -> Result<T, SwitchFailed> {
    let _acting = Acting::take(c)?;
    Ok(f())
}

/// This thread holds a caller's file system identity until this is dropped
/// (then the one it had before). See [`with_creds`].
#[derive(Debug)]
#[must_use = "the identity ends when this is dropped"]
pub struct Acting {
    /// The identity in force before, when this one replaced it.
    prev: Option<Option<Creds>>,
}

impl Acting {
    /// Take `c`'s identity (nothing to do for root, an unprivileged process,
    /// or when `c`'s is already in force).
    pub fn take(c: &Creds) -> Result<Acting, SwitchFailed> {
        let prev = APPLIED.with(Cell::get);
        if c.is_root() || !privileged() || prev == Some(*c) {
            return Ok(Acting { prev: None });
        }
        if prev.is_some() {
            back_to_own();
            APPLIED.with(|a| a.set(None));
        }
        if !switch_to(c) {
            if let Some(p) = prev {
                assert!(switch_to(&p), "could not take the caller's identity again");
                APPLIED.with(|a| a.set(Some(p)));
            }
            return Err(SwitchFailed);
        }
        APPLIED.with(|a| a.set(Some(*c)));
        Ok(Acting { prev: Some(prev) })
    }

    /// The current caller's identity ([`current`]); outside a Call, the
    /// process's own. A failed switch is `Acces` (run nothing).
    pub fn caller() -> super::FsResult<Acting> {
        match current() {
            Some(c) => Acting::take(&c).map_err(|_| super::FsError::Acces),
            None => Ok(Acting { prev: None }),
        }
    }
}

impl Drop for Acting {
    fn drop(&mut self) {
        let Some(prev) = self.prev else {
            return;
        };
        back_to_own();
        APPLIED.with(|a| a.set(None));
        if let Some(p) = prev {
            assert!(switch_to(&p), "could not take the caller's identity again");
            APPLIED.with(|a| a.set(Some(p)));
        }
    }
}

/// Run `f` under the current caller's identity ([`current`]); outside a Call,
/// as the process is.
pub fn as_caller<T>(f: impl FnOnce() -> T) -> Result<T, SwitchFailed> {
    match current() {
        Some(c) => with_creds(&c, f),
        None => Ok(f()),
    }
}

/// Run `f` with the process's own identity, even inside [`as_caller`]:
/// for what needs the gateway's privileges (`open_by_handle_at` needs
/// `CAP_DAC_READ_SEARCH`, as the Linux server resolves a handle before it
/// checks the caller).
pub fn as_process<T>(f: impl FnOnce() -> T) -> T {
    match APPLIED.with(Cell::get) {
        None => f(),
        Some(c) => {
            back_to_own();
            APPLIED.with(|a| a.set(None));
            let r = f();
            assert!(switch_to(&c), "could not take the caller's identity again");
            APPLIED.with(|a| a.set(Some(c)));
            r
        }
    }
}

/// The effective identity of the current caller for permission rules kept
/// in user space: `None` when the work runs with the process's own rights
/// (no Call, or a root caller).
pub fn unprivileged_caller() -> Option<Creds> {
    current().filter(|c| !c.is_root())
}

/// Run the system calls of `f` as the current caller ([`as_caller`]); a
/// failed switch is `Acces` (the work did not run).
pub fn fs_as_caller<T>(f: impl FnOnce() -> super::FsResult<T>) -> super::FsResult<T> {
    as_caller(f).map_err(|_| super::FsError::Acces)?
}

/// Whether the current caller may `want` (`MAY_READ` 4, `MAY_WRITE` 2,
/// `MAY_EXEC` 1) on what `fd` names (an `O_PATH` descriptor will do), as the
/// kernel decides with the caller's file system identity: mode bits, POSIX
/// ACLs, read-only mounts (`faccessat2` with `AT_EACCESS`, which checks the
/// fsuid, fsgid and groups rather than the real ids).
pub fn fd_may(fd: std::os::fd::RawFd, want: u32) -> super::FsResult<bool> {
    let mut mode = 0;
    for (bit, m) in [(4, libc::R_OK), (2, libc::W_OK), (1, libc::X_OK)] {
        if want & bit != 0 {
            mode |= m;
        }
    }
    fs_as_caller(|| {
        // SAFETY: the empty path is NUL-terminated; integer arguments only.
        let r = unsafe {
            libc::syscall(
                libc::SYS_faccessat2,
                fd,
                c"".as_ptr(),
                mode,
                libc::AT_EMPTY_PATH | libc::AT_EACCESS,
            )
        };
        if r == 0 {
            return Ok(true);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => Ok(false),
            e => Err(super::FsError::from_errno(e.unwrap_or(libc::EIO))),
        }
    })
}

/// Hard link what `fd` names as `name` in `dir`, as the current caller.
/// `linkat(AT_EMPTY_PATH)` needs `CAP_DAC_READ_SEARCH`, which a caller's
/// identity does not have: through the descriptor's `/proc` link instead, so
/// the kernel's link rules (`protected_hardlinks`) apply to the caller.
/// Without a caller (or a root one) as the process, with `AT_EMPTY_PATH`.
pub fn link_fd(fd: std::os::fd::RawFd, dir: std::os::fd::RawFd, name: &std::ffi::CStr) -> super::FsResult<()> {
    let cvt = |r: libc::c_int| {
        if r < 0 {
            Err(super::FsError::from_io(&std::io::Error::last_os_error()))
        } else {
            Ok(())
        }
    };
    if unprivileged_caller().is_none() || !privileged() {
        // SAFETY: both paths are NUL-terminated.
        return cvt(unsafe { libc::linkat(fd, c"".as_ptr(), dir, name.as_ptr(), libc::AT_EMPTY_PATH) });
    }
    let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).map_err(|_| super::FsError::ServerFault)?;
    fs_as_caller(|| {
        // SAFETY: both paths are NUL-terminated.
        cvt(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                path.as_ptr(),
                dir,
                name.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        })
    })
}

/// Whether the kernel checks as the caller here: the process can take a
/// caller's identity.
pub fn kernel_checks_callers() -> bool {
    privileged()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_rules() {
        assert_eq!(kill_setid(0o6755, true), 0o0755);
        assert_eq!(
            kill_setid(0o6745, true),
            0o2745,
            "S_ISGID without group execute stays for a member"
        );
        assert_eq!(kill_setid(0o6745, false), 0o0745, "but not for others");
        let c = Creds::new(10, 20, &[30]);
        assert!(c.may_mode(0o600, 10, 0, 6) && !c.may_mode(0o600, 11, 20, 4));
        assert!(c.may_mode(0o040, 11, 30, 4) && !c.may_mode(0o004, 11, 30, 4));
        assert!(c.may_hardlink(false, 0o000, 10, 0), "the owner links anything");
        assert!(c.may_hardlink(true, 0o666, 11, 0));
        assert!(!c.may_hardlink(true, 0o644, 11, 0), "no write permission");
        assert!(!c.may_hardlink(true, 0o4666, 11, 0), "set-user-ID");
        assert!(!c.may_hardlink(true, 0o2676, 11, 0), "set-group-ID and group execute");
        assert!(!c.may_hardlink(false, 0o666, 11, 0), "not a regular file");
    }

    #[test]
    fn equal_sets_compare_equal() {
        assert_eq!(Creds::new(1, 2, &[5, 3, 5]), Creds::new(1, 2, &[3, 5]));
        assert_ne!(Creds::new(1, 2, &[3]), Creds::new(1, 2, &[3, 4]));
        let c = Creds::new(1, 2, &[7]);
        assert!(c.in_group(2) && c.in_group(7) && !c.in_group(3));
    }

    #[test]
    fn switches_this_thread_only_and_comes_back() {
        if !privileged() {
            return;
        }
        let me = || {
            // SAFETY: reads this thread's fsuid (-1 changes nothing).
            unsafe { libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32 }
        };
        let c = Creds::new(4321, 4322, &[4323]);
        // A thread that exists before the switch (a new one would inherit
        // the creator's credentials).
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            wait.recv().unwrap();
            me()
        });
        let (inside, other) = with_creds(&c, || {
            go.send(()).unwrap();
            (me(), other.join().unwrap())
        })
        .unwrap();
        assert_eq!(inside, 4321);
        assert_eq!(other, 0, "another thread keeps its identity");
        assert_eq!(me(), 0);
        let nested = with_creds(&c, || as_process(me)).unwrap();
        assert_eq!(nested, 0);
        assert_eq!(me(), 0);
    }
}
