//! The devices: what a configured path is (an `ngXnY` passthrough char
//! device, a block device or partition, an image file), how it is probed and
//! opened, its capacity and LBA size, the node's attributes, and the
//! synchronous control-path commands (Identify, Flush).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use super::align::AlignedBuf;
use super::cmd::{
    parse_identify_ns, NsGeometry, NvmeCmd, BLKFLSBUF, BLKGETSIZE64, NVME_ADMIN_IDENTIFY, NVME_IOCTL_ADMIN_CMD,
    NVME_IOCTL_ID, NVME_IOCTL_IO_CMD, NVME_OP_FLUSH,
};
use crate::backend::{FsError, FsResult, Time};

/// How a device's data is moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoMode {
    /// NVMe commands through `IORING_OP_URING_CMD` on `/dev/ngXnY`.
    Passthrough,
    /// O_DIRECT when aligned, the page cache when not.
    Direct,
    /// The page cache only (the file system refused O_DIRECT).
    Buffered,
}

/// A configured device as opened (for diagnostics and the VM check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// File name in the export.
    pub name: String,
    /// The configured path.
    pub path: PathBuf,
    pub mode: IoMode,
    /// NVMe namespace id (passthrough only, else 0).
    pub nsid: u32,
    pub size_bytes: u64,
    /// Alignment (offset, length, memory) for zero-copy I/O.
    pub lba_bytes: u32,
    /// Largest transfer of one passthrough command.
    pub max_xfer_bytes: u32,
    /// The passthrough queue can be polled (IORING_SETUP_IOPOLL).
    pub iopoll: bool,
}

#[derive(Debug)]
pub(super) enum DevIo {
    Passthrough { ng: File, nsid: u32 },
    Fd { direct: Option<File>, buffered: File },
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Meta {
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) atime: Time,
    pub(super) ctime: Time,
}

#[derive(Debug)]
pub(super) struct Dev {
    pub(super) name: Vec<u8>,
    pub(super) path: PathBuf,
    pub(super) hash: u64,
    pub(super) fileid: u64,
    pub(super) io: DevIo,
    pub(super) size_bytes: u64,
    pub(super) used_bytes: u64,
    pub(super) lba_bytes: u32,
    pub(super) max_xfer_bytes: u32,
    pub(super) iopoll: bool,
    pub(super) meta: Mutex<Meta>,
    /// Last data write (ns since the epoch); written by every core's channel.
    pub(super) mtime_ns: AtomicU64,
}

impl Dev {
    /// Free space of the device now, for FSSTAT: the LBAs a thin-provisioned
    /// namespace has not allocated (Identify Namespace `NSZE - NUSE`, asked
    /// again each time; what the probe saw when the admin command is not
    /// permitted); for an image file, its unallocated blocks (holes), at
    /// most what its file system has available; for a block device, nothing
    /// (all its blocks belong to it and nothing says which are in use).
    /// Control path: one ioctl, or `fstat` and `fstatvfs`.
    pub(super) fn free_bytes(&self) -> u64 {
        match &self.io {
            DevIo::Passthrough { ng, nsid } => match identify_ns(ng, *nsid) {
                Ok(g) => (g.blocks - g.used_blocks.min(g.blocks)) * u64::from(g.lba_bytes),
                Err(_) => self.size_bytes - self.used_bytes.min(self.size_bytes),
            },
            DevIo::Fd { buffered, .. } => {
                let Ok(md) = buffered.metadata() else { return 0 };
                if !md.file_type().is_file() {
                    return 0;
                }
                let holes = self.size_bytes.saturating_sub(md.blocks() * 512);
                let mut vfs = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
                // SAFETY: fstatvfs writes one `statvfs` to the pointer, which
                // points at a zeroed one alive for the call.
                let r = unsafe { libc::fstatvfs(buffered.as_raw_fd(), vfs.as_mut_ptr()) };
                if r != 0 {
                    return 0;
                }
                // SAFETY: fstatvfs succeeded and filled it (it was zeroed before).
                let vfs = unsafe { vfs.assume_init() };
                holes.min(vfs.f_bavail.saturating_mul(vfs.f_frsize))
            }
        }
    }

    pub(super) fn mode(&self) -> IoMode {
        match &self.io {
            DevIo::Passthrough { .. } => IoMode::Passthrough,
            DevIo::Fd { direct: Some(_), .. } => IoMode::Direct,
            DevIo::Fd { direct: None, .. } => IoMode::Buffered,
        }
    }
}

/// What probing a path found (everything of a [`Dev`] but its identity).
pub(super) struct Probed {
    pub(super) io: DevIo,
    pub(super) size_bytes: u64,
    pub(super) used_bytes: u64,
    pub(super) lba_bytes: u32,
    pub(super) max_xfer_bytes: u32,
    pub(super) iopoll: bool,
    pub(super) meta: Meta,
    pub(super) mtime_ns: u64,
}

pub(super) fn meta_from(md: &std::fs::Metadata) -> (Meta, u64) {
    let m = Meta {
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        atime: time_from_ns(ns_from_stat(md.atime(), md.atime_nsec())),
        ctime: time_from_ns(ns_from_stat(md.ctime(), md.ctime_nsec())),
    };
    (m, ns_from_stat(md.mtime(), md.mtime_nsec()))
}

/// `/dev/ngXnY` -> `nvmeXnY` (the block device of the same namespace on a
/// system without NVMe multipath).
pub(super) fn ng_block_name(canonical: &Path) -> Option<String> {
    let n = canonical.file_name()?.to_str()?;
    n.strip_prefix("ng").map(|rest| format!("nvme{rest}"))
}

pub(super) fn identify_ns(ng: &File, nsid: u32) -> Result<NsGeometry, FsError> {
    let buf = AlignedBuf::new(4096, 4096);
    let mut cmd = NvmeCmd {
        opcode: NVME_ADMIN_IDENTIFY,
        nsid,
        addr: buf.as_ptr() as u64,
        data_len: 4096,
        cdw10: 0, // CNS 0: Identify Namespace
        ..Default::default()
    };
    // SAFETY: NVME_IOCTL_ADMIN_CMD reads and writes one `nvme_passthru_cmd`
    // (`cmd`, same layout) and writes at most `data_len` bytes to `addr`,
    // which is `buf`, alive until after the call.
    let r = unsafe { libc::ioctl(ng.as_raw_fd(), NVME_IOCTL_ADMIN_CMD as _, &mut cmd as *mut NvmeCmd) };
    if r < 0 {
        return Err(last_os_error());
    }
    if r > 0 {
        tracing::warn!(status = r, "nvme: Identify Namespace failed");
        return Err(FsError::Io);
    }
    parse_identify_ns(buf.as_slice()).ok_or(FsError::Io)
}

/// Synchronous NVMe Flush through the I/O ioctl (control path).
pub(super) fn nvme_flush_sync(ng: &File, nsid: u32) -> FsResult<()> {
    let mut cmd = NvmeCmd {
        opcode: NVME_OP_FLUSH,
        nsid,
        ..Default::default()
    };
    // SAFETY: NVME_IOCTL_IO_CMD reads and writes one `nvme_passthru_cmd`; a
    // Flush transfers no data.
    let r = unsafe { libc::ioctl(ng.as_raw_fd(), NVME_IOCTL_IO_CMD as _, &mut cmd as *mut NvmeCmd) };
    match r {
        0 => Ok(()),
        r if r < 0 => Err(last_os_error()),
        _ => Err(FsError::Io),
    }
}

pub(super) fn probe(path: &Path, passthrough: bool) -> FsResult<Probed> {
    let md = std::fs::metadata(path).map_err(|e| FsError::from_io(&e))?;
    let ft = md.file_type();
    if ft.is_char_device() {
        let canon = std::fs::canonicalize(path).map_err(|e| FsError::from_io(&e))?;
        let blk = ng_block_name(&canon);
        if !passthrough {
            let blk = blk.ok_or(FsError::Nxio)?;
            let bpath = canon.with_file_name(&blk);
            return probe_block(&bpath, &std::fs::metadata(&bpath).map_err(|e| FsError::from_io(&e))?);
        }
        probe_passthrough(path, &md, blk.as_deref())
    } else if ft.is_block_device() {
        probe_block(path, &md)
    } else if ft.is_file() {
        probe_image(path, &md)
    } else if ft.is_dir() {
        Err(FsError::IsDir)
    } else {
        Err(FsError::Inval)
    }
}

pub(super) fn probe_passthrough(path: &Path, md: &std::fs::Metadata, blk: Option<&str>) -> FsResult<Probed> {
    let ng = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| FsError::from_io(&e))?;
    // SAFETY: NVME_IOCTL_ID takes no argument; it returns the namespace id.
    let r = unsafe { libc::ioctl(ng.as_raw_fd(), NVME_IOCTL_ID as _) };
    if r <= 0 {
        // Not an NVMe namespace char device.
        return Err(FsError::Nxio);
    }
    let nsid = r as u32;
    let sys = blk.map(|b| format!("/sys/block/{b}"));
    let geo = match identify_ns(&ng, nsid) {
        Ok(g) => g,
        Err(e) => {
            tracing::debug!(?e, "nvme: Identify Namespace refused, geometry from sysfs");
            let s = sys.as_deref().ok_or(e)?;
            let lba = read_sysfs_u64(&format!("{s}/queue/logical_block_size")).ok_or(e)?;
            let sectors = read_sysfs_u64(&format!("{s}/size")).ok_or(e)?;
            if !lba.is_power_of_two() || !(512..=65536).contains(&lba) {
                return Err(FsError::Io);
            }
            NsGeometry {
                blocks: sectors * 512 / lba,
                used_blocks: sectors * 512 / lba,
                lba_bytes: lba as u32,
                meta_bytes: 0,
            }
        }
    };
    if geo.meta_bytes != 0 {
        tracing::warn!(path = %path.display(), meta = geo.meta_bytes, "nvme: namespaces with metadata are not supported");
        return Err(FsError::NotSupp);
    }
    let lba = geo.lba_bytes as u64;
    // One command may carry max_hw_sectors and, as each page of a user buffer
    // may be its own segment, (max_segments - 1) pages; 64 KiB when unknown.
    let mut max_xfer: u64 = 64 << 10;
    let mut iopoll = false;
    if let Some(s) = sys.as_deref() {
        if let Some(kb) = read_sysfs_u64(&format!("{s}/queue/max_hw_sectors_kb")) {
            max_xfer = kb * 1024;
            if let Some(segs) = read_sysfs_u64(&format!("{s}/queue/max_segments")) {
                max_xfer = max_xfer.min(segs.saturating_sub(1).max(1) * 4096);
            }
        }
        iopoll = read_sysfs_u64(&format!("{s}/queue/io_poll")) == Some(1) && passthrough_polling_is_safe(path);
    }
    // Round down to whole LBAs, within the 16-bit NLB field.
    let max_xfer = (max_xfer / lba * lba).clamp(lba, 65536 * lba).min(1 << 30);
    let (meta, mtime_ns) = meta_from(md);
    Ok(Probed {
        io: DevIo::Passthrough { ng, nsid },
        size_bytes: geo.blocks * lba,
        used_bytes: geo.used_blocks.min(geo.blocks) * lba,
        lba_bytes: geo.lba_bytes,
        max_xfer_bytes: max_xfer as u32,
        iopoll,
        meta,
        mtime_ns,
    })
}

pub(super) fn probe_block(path: &Path, md: &std::fs::Metadata) -> FsResult<Probed> {
    if !md.file_type().is_block_device() {
        return Err(FsError::Nxio);
    }
    // O_EXCL on a block device: refuse it when mounted or claimed.
    let buffered = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .map_err(|e| FsError::from_io(&e))?;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer.
    if unsafe { libc::ioctl(buffered.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) } < 0 {
        return Err(last_os_error());
    }
    let mut lba: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int to the pointer.
    if unsafe { libc::ioctl(buffered.as_raw_fd(), libc::BLKSSZGET as _, &mut lba as *mut libc::c_int) } < 0 {
        return Err(last_os_error());
    }
    if lba < 512 || !(lba as u32).is_power_of_two() {
        return Err(FsError::Io);
    }
    // Drop pages cached before this open (e.g. while the namespace was
    // written through passthrough), so unaligned buffered I/O sees the media.
    // Needs CAP_SYS_ADMIN; without it the cache is left as is.
    // SAFETY: BLKFLSBUF takes no argument.
    let _ = unsafe { libc::ioctl(buffered.as_raw_fd(), BLKFLSBUF as _) };
    let direct = open_direct(path);
    let (meta, mtime_ns) = meta_from(md);
    Ok(Probed {
        io: DevIo::Fd { direct, buffered },
        size_bytes: size,
        used_bytes: size,
        lba_bytes: lba as u32,
        max_xfer_bytes: u32::MAX,
        iopoll: false,
        meta,
        mtime_ns,
    })
}

pub(super) fn probe_image(path: &Path, md: &std::fs::Metadata) -> FsResult<Probed> {
    let buffered = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| FsError::from_io(&e))?;
    let direct = open_direct(path);
    let (meta, mtime_ns) = meta_from(md);
    Ok(Probed {
        io: DevIo::Fd { direct, buffered },
        size_bytes: md.len(),
        used_bytes: md.blocks() * 512,
        // The file system's sector size is not known here; 4096 suits all.
        lba_bytes: 4096,
        max_xfer_bytes: u32::MAX,
        iopoll: false,
        meta,
        mtime_ns,
    })
}

pub(super) fn open_direct(path: &Path) -> Option<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

pub(super) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(super) fn time_from_ns(ns: u64) -> Time {
    Time {
        secs: (ns / 1_000_000_000) as u32,
        nsecs: (ns % 1_000_000_000) as u32,
    }
}

pub(super) fn ns_from_time(t: Time) -> u64 {
    t.secs as u64 * 1_000_000_000 + t.nsecs.min(999_999_999) as u64
}

pub(super) fn ns_from_stat(secs: i64, nsecs: i64) -> u64 {
    (secs.max(0) as u64) * 1_000_000_000 + nsecs.clamp(0, 999_999_999) as u64
}

/// The first kernel release whose passthrough polling polls the request
/// rather than the command's bio. Before it (6.1 here), the poll can reach a
/// bio that the command's completion has already freed: the test guest's
/// 6.1 kernel took a general protection fault in `bio_poll` under
/// `nvme_ns_chr_uring_cmd_iopoll` in `tests/nvme`. The rework landed in
/// 6.5; 6.6 is the first long-term release with it.
const PASSTHROUGH_IOPOLL_SAFE_FROM: (u32, u32) = (6, 6);

/// Whether a passthrough ring may poll (IORING_SETUP_IOPOLL) on the running
/// kernel; logs, once per device, why not. Start-up only.
fn passthrough_polling_is_safe(path: &Path) -> bool {
    let release = kernel_release();
    let safe = kernel_polls_passthrough_safely();
    if !safe {
        tracing::warn!(
            path = %path.display(),
            kernel = release.as_deref().unwrap_or("unknown"),
            "nvme: passthrough I/O completes by interrupt: this kernel's passthrough polling can touch freed memory (safe from 6.6)"
        );
    }
    safe
}

/// Whether the running kernel's passthrough polling is safe to use (see
/// `PASSTHROUGH_IOPOLL_SAFE_FROM`); without it, passthrough rings complete
/// by interrupt even on a device with poll queues. Any thread.
pub fn kernel_polls_passthrough_safely() -> bool {
    kernel_release()
        .as_deref()
        .and_then(release_version)
        .is_some_and(|v| v >= PASSTHROUGH_IOPOLL_SAFE_FROM)
}

/// `uname -r`.
fn kernel_release() -> Option<String> {
    // SAFETY: `uname` fills the zeroed struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    // SAFETY: the kernel NUL-terminates `release` within its length.
    let r = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    Some(r.to_string_lossy().into_owned())
}

/// `(major, minor)` of a kernel release string such as `6.1.0-50-amd64`.
pub(super) fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

pub(super) fn read_sysfs_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub(super) fn last_os_error() -> FsError {
    FsError::from_io(&std::io::Error::last_os_error())
}
