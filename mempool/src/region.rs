//! Memory regions: shared, populated, locked mappings backed by hugepages
//! when the machine has them reserved, by normal pages otherwise.
//!
//! A [`Region`] is a `MAP_SHARED` mapping of a file descriptor, so another
//! process can map the same memory after receiving the descriptor (the
//! shared-memory fabric passes it over a Unix socket with `SCM_RIGHTS` and
//! calls [`Region::map_from_fd`]).
//!
//! Backing, in order of preference:
//!
//! 1. A hugetlb file: `memfd_create(MFD_HUGETLB | MFD_HUGE_2MB/1GB)`, or a
//!    file created and immediately unlinked in a hugetlbfs mount when
//!    [`RegionConfig::hugetlbfs_dir`] is set. Mapped with `MAP_POPULATE`.
//! 2. When that fails (typically `ENOMEM` because `vm.nr_hugepages` is 0)
//!    and [`RegionConfig::allow_fallback`] is true (the default): a
//!    normal-page memfd, `madvise(MADV_HUGEPAGE)`, populated by
//!    `MADV_POPULATE_WRITE` or by touching every page. The region then
//!    carries one warning ([`Region::warning`]) naming the setting to
//!    change. Nothing panics.
//!
//! Every region is `mlock`ed; failure to lock is a warning, not an error.
//! memfd-backed regions are sealed against shrinking and growing
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) so that a peer holding the
//! descriptor cannot truncate the file under us (which would turn our
//! accesses into `SIGBUS`).
//!
//! All functions here are start-up paths (they make system calls and may
//! allocate); call them from any thread before the data plane starts.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::ptr::NonNull;

use crate::error::MempoolError;

/// Size of a 2 MiB hugepage.
pub const HUGEPAGE_2M: usize = 2 << 20;
/// Size of a 1 GiB hugepage.
pub const HUGEPAGE_1G: usize = 1 << 30;
/// Size of a normal page on the supported targets.
pub const NORMAL_PAGE: usize = 4096;

const _: () = assert!(HUGEPAGE_2M.is_power_of_two() && HUGEPAGE_1G.is_power_of_two());
const _: () = assert!(HUGEPAGE_2M % NORMAL_PAGE == 0 && HUGEPAGE_1G % HUGEPAGE_2M == 0);

/// hugetlbfs `statfs.f_type` (linux/magic.h).
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// Where the THP policy for shared memory lives; quoted in warnings.
const SHMEM_THP_PATH: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// Hugepage size to ask the kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HugePageSize {
    /// 2 MiB pages (`vm.nr_hugepages`).
    Size2M,
    /// 1 GiB pages (reserved at boot or via
    /// `/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages`).
    Size1G,
}

impl HugePageSize {
    /// Page size in bytes.
    pub const fn bytes(self) -> usize {
        match self {
            HugePageSize::Size2M => HUGEPAGE_2M,
            HugePageSize::Size1G => HUGEPAGE_1G,
        }
    }

    fn memfd_flag(self) -> libc::c_uint {
        match self {
            HugePageSize::Size2M => libc::MFD_HUGE_2MB,
            HugePageSize::Size1G => libc::MFD_HUGE_1GB,
        }
    }

    fn sysfs_knob(self) -> &'static str {
        match self {
            HugePageSize::Size2M => "vm.nr_hugepages (or scripts/hugepages.sh)",
            HugePageSize::Size1G => {
                "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages \
                 (or hugepagesz=1G hugepages=N on the kernel command line)"
            }
        }
    }
}

/// How regions are created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionConfig {
    /// Hugepage size to use (default 2 MiB).
    pub page_size: HugePageSize,
    /// Create regions as (unlinked) files in this hugetlbfs mount instead of
    /// `memfd_create(MFD_HUGETLB)`. Default `None`.
    pub hugetlbfs_dir: Option<PathBuf>,
    /// Fall back to normal pages when hugepages cannot be mapped (default
    /// `true`). When `false`, [`MempoolError::HugepagesUnavailable`].
    pub allow_fallback: bool,
    /// `mlock` regions (default `true`). Failure is a warning.
    pub lock: bool,
}

impl Default for RegionConfig {
    fn default() -> Self {
        RegionConfig {
            page_size: HugePageSize::Size2M,
            hugetlbfs_dir: None,
            allow_fallback: true,
            lock: true,
        }
    }
}

/// What a region's memory is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegionBacking {
    /// hugetlbfs pages of `page_size` bytes.
    HugeTlb {
        /// Hugepage size in bytes.
        page_size: usize,
    },
    /// Normal pages (the fallback). `thp_advised` tells whether
    /// `madvise(MADV_HUGEPAGE)` was accepted; whether the kernel actually uses
    /// transparent hugepages for shared memory depends on
    /// `/sys/kernel/mm/transparent_hugepage/shmem_enabled`.
    NormalPages {
        /// `madvise(MADV_HUGEPAGE)` succeeded.
        thp_advised: bool,
    },
}

/// Something that did not go as configured but did not stop the region from
/// being created. [`Region::warning`] renders them as one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionWarning {
    /// Hugepages could not be mapped; the region uses normal pages.
    HugepageFallback {
        /// Hugepage size that was asked for.
        page_size: HugePageSize,
        /// The error from the hugetlb attempt.
        error: String,
        /// Contents of `shmem_enabled` when THP for shmem is off, else `None`.
        shmem_thp_off: Option<String>,
    },
    /// `mlock` failed; pages may be swapped out.
    MlockFailed {
        /// The OS error.
        error: String,
    },
}

impl fmt::Display for RegionWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionWarning::HugepageFallback {
                page_size,
                error,
                shmem_thp_off,
            } => {
                write!(
                    f,
                    "no {} MiB hugepages could be mapped ({error}); using normal 4 KiB pages \
                     with MADV_HUGEPAGE",
                    page_size.bytes() >> 20
                )?;
                if let Some(mode) = shmem_thp_off {
                    write!(
                        f,
                        " (ineffective: {SHMEM_THP_PATH} is \"{mode}\", set it to \"advise\")"
                    )?;
                }
                write!(
                    f,
                    "; expect more TLB misses. Reserve hugepages with {}",
                    page_size.sysfs_knob()
                )
            }
            RegionWarning::MlockFailed { error } => write!(
                f,
                "mlock failed ({error}); pages may be swapped out. Raise RLIMIT_MEMLOCK \
                 (ulimit -l) or grant CAP_IPC_LOCK"
            ),
        }
    }
}

/// One mapped region. Unmapped (and its descriptor closed) on drop.
///
/// The region owns the mapping; the bytes in it are handed out by the pool
/// (see [`crate::pool`]) under the rule "only the holder of a buffer handle
/// touches its bytes". The region itself never reads or writes them after
/// creation.
pub struct Region {
    id: u16,
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
    backing: RegionBacking,
    imported: bool,
    sealed: bool,
    locked: bool,
    warnings: Vec<RegionWarning>,
}

// SAFETY: `Region` owns a process-wide shared mapping; the raw pointer is not
// tied to any thread. Moving the owner to another thread is fine.
unsafe impl Send for Region {}
// SAFETY: `&Region` only gives out the base pointer, length and metadata; it
// never dereferences the pointer, so sharing it creates no data race.
// Access to the bytes is governed by the pool's holder rule.
unsafe impl Sync for Region {}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("id", &self.id)
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("fd", &self.fd.as_raw_fd())
            .field("backing", &self.backing)
            .field("imported", &self.imported)
            .field("sealed", &self.sealed)
            .field("locked", &self.locked)
            .finish()
    }
}

impl Region {
    /// Creates region `id` of at least `len` bytes (rounded up to the
    /// hugepage size), populated and locked, following `cfg` (see module
    /// docs for the fallback). Start-up only; any thread.
    pub fn create(id: u16, len: usize, cfg: &RegionConfig) -> Result<Region, MempoolError> {
        let huge = cfg.page_size.bytes();
        let len = round_up(len, huge).ok_or(MempoolError::InvalidRegionLength {
            len,
            reason: "zero or too large",
        })?;

        let mut warnings = Vec::new();
        let (fd, ptr, backing, sealed) = match create_hugetlb(id, len, cfg) {
            Ok((fd, ptr, sealed)) => (fd, ptr, RegionBacking::HugeTlb { page_size: huge }, sealed),
            Err(e) if cfg.allow_fallback => {
                let (fd, ptr, thp_advised, sealed) = create_normal(id, len)?;
                warnings.push(RegionWarning::HugepageFallback {
                    page_size: cfg.page_size,
                    error: e.to_string(),
                    shmem_thp_off: shmem_thp_off(),
                });
                (fd, ptr, RegionBacking::NormalPages { thp_advised }, sealed)
            }
            Err(source) => {
                return Err(MempoolError::HugepagesUnavailable {
                    page_size: huge,
                    source,
                })
            }
        };

        let mut region = Region {
            id,
            ptr,
            len,
            fd,
            backing,
            imported: false,
            sealed,
            locked: false,
            warnings,
        };
        if cfg.lock {
            region.lock();
        }
        Ok(region)
    }

    /// Maps a region exported by another process: `fd` as received over a
    /// Unix socket, `len` bytes, local id `id`. `len` comes from the peer,
    /// so it is checked against the file's real size (never trusted). The
    /// mapping is populated and locked (lock failure is a warning).
    /// Start-up only; any thread.
    pub fn map_from_fd(fd: OwnedFd, len: usize, id: u16) -> Result<Region, MempoolError> {
        // SAFETY: all-zero is a valid `stat`; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(MempoolError::last_os("fstat", "checking an imported region"));
        }
        // SAFETY: all-zero is a valid `statfs`; fstatfs fills it.
        let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid fd, valid out-pointer.
        if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut sfs) } != 0 {
            return Err(MempoolError::last_os("fstatfs", "checking an imported region"));
        }
        #[allow(clippy::unnecessary_cast)] // f_type's type differs by target
        let hugetlb = (sfs.f_type as u64) & 0xffff_ffff == HUGETLBFS_MAGIC;
        let page = if hugetlb {
            usize::try_from(sfs.f_bsize).unwrap_or(0)
        } else {
            NORMAL_PAGE
        };
        let file_len = usize::try_from(st.st_size).unwrap_or(0);
        let map_len = match round_up(len, page.max(1)) {
            Some(l) if page != 0 && l <= file_len => l,
            _ => {
                return Err(MempoolError::InvalidRegionLength {
                    len,
                    reason: "zero or larger than the descriptor's file",
                })
            }
        };
        // SAFETY: fcntl(F_GET_SEALS) on a valid fd; no memory passed.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        let sealed = seals >= 0 && (seals & libc::F_SEAL_SHRINK) != 0;

        let populate = if hugetlb { libc::MAP_POPULATE } else { 0 };
        let ptr = mmap_shared(&fd, map_len, populate).map_err(|source| MempoolError::Syscall {
            call: "mmap",
            what: "mapping an imported region",
            source,
        })?;
        let backing = if hugetlb {
            RegionBacking::HugeTlb { page_size: page }
        } else {
            let thp_advised = advise_and_populate(ptr, map_len);
            RegionBacking::NormalPages { thp_advised }
        };
        let mut region = Region {
            id,
            ptr,
            len: map_len,
            fd,
            backing,
            imported: true,
            sealed,
            locked: false,
            warnings: Vec::new(),
        };
        region.lock();
        Ok(region)
    }

    fn lock(&mut self) {
        // SAFETY: [ptr, ptr + len) is our live mapping.
        if unsafe { libc::mlock(self.ptr.as_ptr().cast(), self.len) } == 0 {
            self.locked = true;
        } else {
            self.warnings.push(RegionWarning::MlockFailed {
                error: io::Error::last_os_error().to_string(),
            });
        }
    }

    /// Region id (index into the pool's region table and the registration
    /// table). Any thread.
    #[inline]
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Base address of the mapping. Any thread; dereferencing it is subject
    /// to the pool's holder rule.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping in bytes (a multiple of the page size).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: regions are never empty (creation rejects zero).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The descriptor backing the region, to pass to another process.
    #[inline]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What the memory is made of.
    #[inline]
    pub fn backing(&self) -> RegionBacking {
        self.backing
    }

    /// True for regions made by [`Region::map_from_fd`].
    #[inline]
    pub fn is_imported(&self) -> bool {
        self.imported
    }

    /// True when the file is sealed against shrinking, so no process holding
    /// the descriptor can make our accesses fault.
    #[inline]
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// True when `mlock` succeeded.
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// Structured warnings (empty when everything went as configured).
    pub fn warnings(&self) -> &[RegionWarning] {
        &self.warnings
    }

    /// All warnings of this region as one line, or `None`. Meant to be
    /// logged once by the application at start-up.
    pub fn warning(&self) -> Option<String> {
        if self.warnings.is_empty() {
            return None;
        }
        let parts: Vec<String> = self.warnings.iter().map(|w| w.to_string()).collect();
        Some(format!(
            "mempool region {} ({} bytes): {}",
            self.id,
            self.len,
            parts.join("; ")
        ))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: we own the mapping [ptr, ptr + len) and nothing borrowed
        // from it can outlive `self` (pool handles borrow the pool, which
        // owns the regions). The fd is closed by OwnedFd's drop afterwards.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Reads `HugePages_Total` / `HugePages_Free` / `Hugepagesize` from
/// `/proc/meminfo`: `(total, free, size_bytes)`. `None` when unreadable.
pub fn hugepage_counts() -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let mut total = None;
    let mut free = None;
    let mut size_kb = None;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let key = it.next();
        let val = it.next().and_then(|v| v.parse::<u64>().ok());
        match key {
            Some("HugePages_Total:") => total = val,
            Some("HugePages_Free:") => free = val,
            Some("Hugepagesize:") => size_kb = val,
            _ => {}
        }
    }
    Some((total?, free?, size_kb?.checked_mul(1024)?))
}

/// `Some(mode)` when transparent hugepages for shared memory are off.
fn shmem_thp_off() -> Option<String> {
    let text = std::fs::read_to_string(SHMEM_THP_PATH).ok()?;
    // The active mode is the bracketed word, e.g. "always [never] advise".
    let mode = text
        .split_whitespace()
        .find(|w| w.starts_with('['))
        .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string())?;
    matches!(mode.as_str(), "never" | "deny").then_some(mode)
}

/// `x` rounded up to a multiple of `to` (a power of two); `None` for zero
/// or overflow.
fn round_up(x: usize, to: usize) -> Option<usize> {
    if x == 0 {
        return None;
    }
    x.checked_add(to - 1).map(|v| v & !(to - 1))
}

fn memfd(id: u16, flags: libc::c_uint) -> io::Result<OwnedFd> {
    let name = CString::new(format!("rpcrdma-mempool-{id}")).map_err(io::Error::other)?;
    // SAFETY: `name` is a valid NUL-terminated string.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn hugetlbfs_file(dir: &std::path::Path, id: u16) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(format!("rpcrdma-mempool-{}-{id}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    // The descriptor keeps the file alive; the name is not needed (other
    // processes get the descriptor), and unlinking means no leftover file
    // pins hugepages after a crash.
    std::fs::remove_file(&path)?;
    Ok(OwnedFd::from(file))
}

fn truncate(fd: &OwnedFd, len: usize) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: valid fd; no memory passed.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Seals a memfd against size changes; false if the kernel refused.
fn seal(fd: &OwnedFd) -> bool {
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl(F_ADD_SEALS) on a valid fd; no memory passed.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) == 0 }
}

fn mmap_shared(fd: &OwnedFd, len: usize, extra_flags: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping chosen by the kernel (addr = NULL) of a
    // descriptor we own; it aliases no Rust object.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | extra_flags,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))
}

fn create_hugetlb(id: u16, len: usize, cfg: &RegionConfig) -> io::Result<(OwnedFd, NonNull<u8>, bool)> {
    let (fd, can_seal) = match &cfg.hugetlbfs_dir {
        Some(dir) => (hugetlbfs_file(dir, id)?, false),
        None => (
            memfd(
                id,
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | libc::MFD_HUGETLB | cfg.page_size.memfd_flag(),
            )?,
            true,
        ),
    };
    truncate(&fd, len)?;
    // hugetlb reserves the pages at mmap time, so a machine without enough
    // free hugepages fails here with ENOMEM rather than faulting later.
    let ptr = mmap_shared(&fd, len, libc::MAP_POPULATE)?;
    let sealed = can_seal && seal(&fd);
    Ok((fd, ptr, sealed))
}

fn create_normal(id: u16, len: usize) -> Result<(OwnedFd, NonNull<u8>, bool, bool), MempoolError> {
    let fd = memfd(id, libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING).map_err(|source| MempoolError::Syscall {
        call: "memfd_create",
        what: "creating a normal-page region",
        source,
    })?;
    truncate(&fd, len).map_err(|source| MempoolError::Syscall {
        call: "ftruncate",
        what: "sizing a normal-page region",
        source,
    })?;
    let sealed = seal(&fd);
    let ptr = mmap_shared(&fd, len, 0).map_err(|source| MempoolError::Syscall {
        call: "mmap",
        what: "mapping a normal-page region",
        source,
    })?;
    let thp_advised = advise_and_populate(ptr, len);
    Ok((fd, ptr, thp_advised, sealed))
}

/// `madvise(MADV_HUGEPAGE)` then fault every page in. Returns whether the
/// advice was accepted.
fn advise_and_populate(ptr: NonNull<u8>, len: usize) -> bool {
    // SAFETY: [ptr, ptr + len) is a live mapping we own; advice does not
    // change its contents.
    let advised = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) } == 0;
    // SAFETY: as above; MADV_POPULATE_WRITE (Linux 5.14+) only faults the
    // pages in, preserving contents.
    let populated = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_POPULATE_WRITE) } == 0;
    if !populated {
        let mut off = 0;
        while off < len {
            // SAFETY: off < len, inside our mapping; nothing else references
            // these bytes yet (the region is not handed out). Writing the
            // byte's current value (zero in a new memfd) faults the page in
            // without changing contents.
            unsafe {
                let p = ptr.as_ptr().add(off);
                p.write_volatile(p.read_volatile());
            }
            off += NORMAL_PAGE;
        }
    }
    advised
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_up_behaves() {
        assert_eq!(round_up(0, 4096), None);
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(4097, 4096), Some(8192));
        assert_eq!(round_up(usize::MAX, 4096), None);
    }

    #[test]
    fn warning_text_names_the_setting() {
        let w = RegionWarning::HugepageFallback {
            page_size: HugePageSize::Size2M,
            error: "Cannot allocate memory".into(),
            shmem_thp_off: Some("never".into()),
        };
        let s = w.to_string();
        assert!(s.contains("vm.nr_hugepages"), "{s}");
        assert!(s.contains("scripts/hugepages.sh"), "{s}");
        assert!(s.contains("shmem_enabled"), "{s}");
        let w1g = RegionWarning::HugepageFallback {
            page_size: HugePageSize::Size1G,
            error: "x".into(),
            shmem_thp_off: None,
        };
        assert!(w1g.to_string().contains("hugepages-1048576kB"));
        assert!(!w1g.to_string().contains("shmem_enabled"));
    }
}
