//! `nvme`: NVMe namespaces, partitions or image files exported as the files
//! of one flat, fixed directory, with data through io_uring: NVMe passthrough
//! (`IORING_OP_URING_CMD`) on `/dev/ngXnY` char devices, O_DIRECT on block
//! devices and image files.
//!
//! # Namespace
//!
//! The root directory holds one regular file per configured device, named
//! after the last component of the configured path (`/dev/ng0n1` is `ng0n1`,
//! `/srv/img/disk1.img` is `disk1.img`; two devices with the same last
//! component are refused at [`NvmeBackend::open`]). A file's size is the
//! device's capacity: the Identify Namespace `NSZE` times the LBA size for
//! `/dev/ngXnY` (from sysfs when the admin command is not permitted),
//! `BLKGETSIZE64` for block devices, the file size for image files (taken at
//! open). The namespace never changes, so operations that would change it
//! are answered like this:
//!
//! | operation | answer |
//! |---|---|
//! | LOOKUP of `.` or `..` in the root | the root |
//! | LOOKUP of a name that is not there | `NoEnt` |
//! | a file's handle where a directory is expected | `NotDir` |
//! | CREATE UNCHECKED of an existing name | the existing file, its `sattr3` applied as SETATTR (so a size change is refused as below) |
//! | CREATE GUARDED or EXCLUSIVE of an existing name (or `.`/`..`) | `Exist` |
//! | MKDIR, SYMLINK, MKNOD, LINK onto an existing name (or `.`/`..`) | `Exist` |
//! | CREATE, MKDIR, SYMLINK, MKNOD, LINK of a new name | `NotSupp` |
//! | REMOVE of a device file | `Acces` |
//! | RMDIR of a device file | `NotDir` |
//! | REMOVE or RMDIR of `.` or `..` | `Inval` |
//! | REMOVE or RMDIR of a name that is not there | `NoEnt` |
//! | RENAME of a device file onto its own name | success, nothing changes |
//! | RENAME of a device file to any other name | `Acces` |
//! | RENAME of a name that is not there | `NoEnt` |
//! | SETATTR size equal to the capacity | success |
//! | SETATTR size above the capacity | `FBig` |
//! | SETATTR size below the capacity | `Inval` |
//! | SETATTR size on the root | `IsDir` |
//! | READLINK of anything | `Inval` |
//! | a data write that would end past the capacity | `FBig` |
//!
//! Attributes: a file's mode bits, owner and group start as those of the
//! device node (or image file); the root is `0755` owned by 0:0. SETATTR of
//! mode, uid, gid, atime and mtime succeeds but is **kept in memory only**
//! (lost when the backend is reopened). `mtime` is the time of the last data
//! write through any channel of this backend (initially the node's `mtime`),
//! `ctime` the later of that and the last SETATTR.
//!
//! # Handles
//!
//! 16 bytes: `b"nv"`, a version byte, a kind byte (root or file), the
//! device's position in the list (u32, little endian) and a 64-bit FNV-1a
//! hash of the configured path (of the backend name for the root). They are
//! stable across restarts with the same configuration; when the list is
//! reordered the hash still finds the device. A handle of the wrong length,
//! magic or kind is `BadHandle`; a well-formed one naming no configured
//! device is `Stale`.
//!
//! # Data path
//!
//! Each core's [`NvmeChannel`] owns its io_uring rings. Completions are
//! reaped by polling the completion queue from [`IoChannel::poll`], which
//! never blocks.
//!
//! * `/dev/ngXnY` with passthrough on: NVMe Read (`0x02`) and Write (`0x01`)
//!   as `IORING_OP_URING_CMD` on a ring of 128-byte SQEs and 32-byte CQEs,
//!   at most `max_hw_sectors`/`max_segments` per command (larger requests
//!   are split). When the namespace's block queue has poll queues
//!   (`/sys/block/nvmeXnY/queue/io_poll` is 1, e.g. the `nvme` module loaded
//!   with `poll_queues=1`), the ring is `IORING_SETUP_IOPOLL` and each
//!   `poll()` with I/O outstanding polls the device once (non-blocking
//!   `io_uring_enter(GETEVENTS, min_complete = 0)`); otherwise the device
//!   interrupts and `poll()` only looks at the completion queue. A request
//!   whose offset, length and buffer address are LBA-aligned goes straight
//!   to or from the caller's buffer (zero copy: the NFS 4 KiB/1 MiB case).
//!   Otherwise it **copies** through an aligned bounce buffer: reads fetch
//!   the covering LBA span; writes read the partial first and last LBAs,
//!   merge, and write the span back (read-modify-write, serialised against
//!   other unaligned writes to the same LBAs on every core by a range lock).
//!   FILE_SYNC and DATA_SYNC writes set FUA (CDW12 bit 30). Flush is NVMe
//!   Flush (`0x00`).
//! * Block devices, partitions, image files, and `/dev/ngXnY` with
//!   passthrough off (which then uses the block device `/dev/nvmeXnY` next to
//!   it, keeping the file name `ngXnY`): aligned requests are O_DIRECT
//!   `IORING_OP_READ`/`WRITE` on the caller's buffer; unaligned ones go
//!   through a buffered descriptor of the same device (the kernel's page
//!   cache copies; direct and buffered I/O on one device are kept coherent by
//!   the kernel). FILE_SYNC writes carry `RWF_SYNC`, DATA_SYNC `RWF_DSYNC`.
//!   Flush is `IORING_OP_FSYNC`. Image files on a file system without
//!   O_DIRECT use the buffered descriptor for everything. Block devices are
//!   opened `O_EXCL`, so a mounted one is refused, and their page cache is
//!   dropped at open (`BLKFLSBUF`, as root) so that data written through
//!   passthrough earlier is seen. Passthrough bypasses the page cache: do not
//!   list one namespace twice (as `ngXnY` and `nvmeXnY`) in running backends.
//!
//! A write's `committed` is what was asked (FUA or `RWF_[D]SYNC` made it
//! durable before completion) or `Unstable`. Reads past the capacity are
//! short with `eof`.
//!
//! Not done: registered (fixed) buffers and files, metadata/PI formats
//! (namespaces with metadata are refused with `NotSupp`), multipath-aware
//! mapping of `ngXnY` to its block device (by name only).

// `u64::is_multiple_of` needs Rust 1.87; the workspace MSRV is 1.80.
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

use std::alloc::{self, Layout};
use std::collections::VecDeque;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::{
    Attr, Backend, CreateHow, DirEntry, FileHandle, FileType, FsError, FsResult, FsStat, IoChannel, IoDesc, IoDone,
    IoOp, NodeKind, Owner, SetAttr, SetTime, Stable, Time, NAME_MAX_BYTES,
};

// ---------------------------------------------------------------- NVMe ABI

/// `_IOC(dir, type, nr, size)` as in `<asm-generic/ioctl.h>` (x86, arm64).
const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}
const IOC_NONE: u32 = 0;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// Size of `struct nvme_passthru_cmd` / `struct nvme_uring_cmd` (72 bytes).
pub const NVME_CMD_BYTES: usize = 72;
/// `NVME_IOCTL_ID`: returns the namespace id of the descriptor.
pub const NVME_IOCTL_ID: u32 = ioc(IOC_NONE, b'N', 0x40, 0);
/// `NVME_IOCTL_ADMIN_CMD`: synchronous admin command.
pub const NVME_IOCTL_ADMIN_CMD: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x41, NVME_CMD_BYTES);
/// `NVME_IOCTL_IO_CMD`: synchronous I/O command.
pub const NVME_IOCTL_IO_CMD: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x43, NVME_CMD_BYTES);
/// `NVME_URING_CMD_IO`: the `cmd_op` of an I/O command through io_uring.
pub const NVME_URING_CMD_IO: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x80, NVME_CMD_BYTES);
/// `BLKGETSIZE64`: block device size in bytes.
const BLKGETSIZE64: u32 = ioc(IOC_READ, 0x12, 114, 8);
/// `BLKFLSBUF`: write back and drop a block device's page cache.
const BLKFLSBUF: u32 = ioc(IOC_NONE, 0x12, 97, 0);

/// NVM command set opcodes.
pub const NVME_OP_FLUSH: u8 = 0x00;
pub const NVME_OP_WRITE: u8 = 0x01;
pub const NVME_OP_READ: u8 = 0x02;
/// Admin Identify.
const NVME_ADMIN_IDENTIFY: u8 = 0x06;
/// Force Unit Access in CDW12 of Read/Write.
pub const NVME_RW_FUA: u32 = 1 << 30;

/// `struct nvme_passthru_cmd` (the ioctl form; its last word is `result`)
/// and `struct nvme_uring_cmd` (the io_uring form; the last word is
/// reserved), which share one layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeCmd {
    pub opcode: u8,
    pub flags: u8,
    pub rsvd1: u16,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub metadata: u64,
    pub addr: u64,
    pub metadata_len: u32,
    pub data_len: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
    pub timeout_ms: u32,
    /// `rsvd2` in `nvme_uring_cmd`, `result` in `nvme_passthru_cmd`.
    pub rsvd2: u32,
}

const _: () = assert!(std::mem::size_of::<NvmeCmd>() == NVME_CMD_BYTES);

impl NvmeCmd {
    /// A Read or Write of `blocks` (≥ 1) LBAs from `slba`, data at `addr`.
    pub fn rw(opcode: u8, nsid: u32, slba: u64, blocks: u32, addr: u64, data_len: u32, fua: bool) -> Self {
        NvmeCmd {
            opcode,
            nsid,
            addr,
            data_len,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            cdw12: (blocks - 1) & 0xffff | if fua { NVME_RW_FUA } else { 0 },
            ..Default::default()
        }
    }

    /// The 80-byte command area of a 128-byte SQE (`nvme_uring_cmd`, then zeros).
    pub fn encode(&self) -> [u8; 80] {
        let mut b = [0u8; 80];
        b[0] = self.opcode;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.rsvd1.to_le_bytes());
        let words32: [(usize, u32); 3] = [(4, self.nsid), (8, self.cdw2), (12, self.cdw3)];
        for (at, v) in words32 {
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        b[16..24].copy_from_slice(&self.metadata.to_le_bytes());
        b[24..32].copy_from_slice(&self.addr.to_le_bytes());
        let tail = [
            self.metadata_len,
            self.data_len,
            self.cdw10,
            self.cdw11,
            self.cdw12,
            self.cdw13,
            self.cdw14,
            self.cdw15,
            self.timeout_ms,
            self.rsvd2,
        ];
        for (i, v) in tail.iter().enumerate() {
            let at = 32 + 4 * i;
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// What Identify Namespace says about the layout of a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NsGeometry {
    /// `NSZE`: namespace size in LBAs.
    pub blocks: u64,
    /// Data bytes per LBA of the formatted LBA format.
    pub lba_bytes: u32,
    /// Metadata bytes per LBA (0: none).
    pub meta_bytes: u16,
}

/// Parse an Identify Namespace data structure (4096 bytes, NVMe base spec
/// "Identify Namespace data structure": NSZE at byte 0, FLBAS at 26, the LBA
/// formats from byte 128). `None` when it is short or the format is absurd.
pub fn parse_identify_ns(data: &[u8]) -> Option<NsGeometry> {
    if data.len() < 4096 {
        return None;
    }
    let blocks = u64::from_le_bytes(data[0..8].try_into().ok()?);
    let nlbaf = data[25] as usize + 1;
    let flbas = data[26];
    // Bits 3:0 are the low index bits; bits 6:5 the high ones (> 16 formats).
    let idx = (flbas & 0x0f) as usize | (((flbas >> 5) & 0x03) as usize) << 4;
    if idx >= nlbaf.max(1) || idx >= 64 {
        return None;
    }
    let at = 128 + 4 * idx;
    let meta_bytes = u16::from_le_bytes([data[at], data[at + 1]]);
    let lbads = data[at + 2];
    if !(9..=16).contains(&lbads) {
        return None;
    }
    Some(NsGeometry {
        blocks,
        lba_bytes: 1 << lbads,
        meta_bytes,
    })
}

// ---------------------------------------------------------------- helpers

/// A zeroed heap buffer with a chosen alignment (bounce and Identify buffers).
struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is plain owned memory; moving it between threads is fine.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn new(len: usize, align: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), align).expect("bounce layout");
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }
    fn capacity(&self) -> usize {
        self.layout.size()
    }
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid and initialised (zeroed) for `layout.size()` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.layout.size())
    }
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // Separator so that ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn time_from_ns(ns: u64) -> Time {
    Time {
        secs: (ns / 1_000_000_000) as u32,
        nsecs: (ns % 1_000_000_000) as u32,
    }
}

fn ns_from_time(t: Time) -> u64 {
    t.secs as u64 * 1_000_000_000 + t.nsecs.min(999_999_999) as u64
}

fn ns_from_stat(secs: i64, nsecs: i64) -> u64 {
    (secs.max(0) as u64) * 1_000_000_000 + nsecs.clamp(0, 999_999_999) as u64
}

fn read_sysfs_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn last_os_error() -> FsError {
    FsError::from_io(&std::io::Error::last_os_error())
}

fn round_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// The LBA span of an unaligned request and the partial edge LBAs a write
/// must read first. Returns `(span_start, span_end, edges)`; each edge is the
/// device offset of one LBA, relative placement in the span being
/// `edge - span_start`.
fn rmw_plan(offset: u64, len: u64, lba: u64) -> (u64, u64, [Option<u64>; 2]) {
    let a0 = offset / lba * lba;
    let end = offset + len;
    let a1 = round_up(end, lba);
    let head = offset % lba != 0;
    let tail = end % lba != 0;
    let mut edges = [None, None];
    if a1 - a0 == lba {
        if head || tail {
            edges[0] = Some(a0);
        }
    } else {
        if head {
            edges[0] = Some(a0);
        }
        if tail {
            edges[1] = Some(a1 - lba);
        }
    }
    (a0, a1, edges)
}

// ---------------------------------------------------------------- devices

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
enum DevIo {
    Passthrough { ng: File, nsid: u32 },
    Fd { direct: Option<File>, buffered: File },
}

#[derive(Clone, Copy, Debug)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    atime: Time,
    ctime: Time,
}

#[derive(Debug)]
struct Dev {
    name: Vec<u8>,
    path: PathBuf,
    hash: u64,
    fileid: u64,
    io: DevIo,
    size_bytes: u64,
    used_bytes: u64,
    lba_bytes: u32,
    max_xfer_bytes: u32,
    iopoll: bool,
    meta: Mutex<Meta>,
    /// Last data write (ns since the epoch); written by every core's channel.
    mtime_ns: AtomicU64,
}

impl Dev {
    fn mode(&self) -> IoMode {
        match &self.io {
            DevIo::Passthrough { .. } => IoMode::Passthrough,
            DevIo::Fd { direct: Some(_), .. } => IoMode::Direct,
            DevIo::Fd { direct: None, .. } => IoMode::Buffered,
        }
    }
}

/// What probing a path found (everything of a [`Dev`] but its identity).
struct Probed {
    io: DevIo,
    size_bytes: u64,
    used_bytes: u64,
    lba_bytes: u32,
    max_xfer_bytes: u32,
    iopoll: bool,
    meta: Meta,
    mtime_ns: u64,
}

fn meta_from(md: &std::fs::Metadata) -> (Meta, u64) {
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
fn ng_block_name(canonical: &Path) -> Option<String> {
    let n = canonical.file_name()?.to_str()?;
    n.strip_prefix("ng").map(|rest| format!("nvme{rest}"))
}

fn identify_ns(ng: &File, nsid: u32) -> Result<NsGeometry, FsError> {
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
fn nvme_flush_sync(ng: &File, nsid: u32) -> FsResult<()> {
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

fn probe(path: &Path, passthrough: bool) -> FsResult<Probed> {
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

fn probe_passthrough(path: &Path, md: &std::fs::Metadata, blk: Option<&str>) -> FsResult<Probed> {
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
        iopoll = read_sysfs_u64(&format!("{s}/queue/io_poll")) == Some(1);
    }
    // Round down to whole LBAs, within the 16-bit NLB field.
    let max_xfer = (max_xfer / lba * lba).clamp(lba, 65536 * lba).min(1 << 30);
    let (meta, mtime_ns) = meta_from(md);
    Ok(Probed {
        io: DevIo::Passthrough { ng, nsid },
        size_bytes: geo.blocks * lba,
        used_bytes: geo.blocks * lba,
        lba_bytes: geo.lba_bytes,
        max_xfer_bytes: max_xfer as u32,
        iopoll,
        meta,
        mtime_ns,
    })
}

fn probe_block(path: &Path, md: &std::fs::Metadata) -> FsResult<Probed> {
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

fn probe_image(path: &Path, md: &std::fs::Metadata) -> FsResult<Probed> {
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

fn open_direct(path: &Path) -> Option<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

// ---------------------------------------------------------------- backend

const FH_BYTES: usize = 16;
const FH_MAGIC: [u8; 3] = [b'n', b'v', 1];
const FH_ROOT: u8 = 0;
const FH_FILE: u8 = 1;
const ROOT_FILEID: u64 = 1;
/// Largest queue depth per channel.
pub const MAX_QUEUE_DEPTH: u32 = 4096;
/// Most devices in one backend.
pub const MAX_DEVICES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    Root,
    File(usize),
}

/// One unaligned passthrough write's LBA range, locked for its
/// read-modify-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RangeLock {
    dev: usize,
    start: u64,
    end: u64,
}

#[derive(Debug)]
struct Shared {
    devs: Vec<Dev>,
    root_hash: u64,
    depth: u32,
    rmw: Mutex<Vec<RangeLock>>,
}

impl Shared {
    fn try_lock_range(&self, l: RangeLock) -> bool {
        let mut v = lock(&self.rmw);
        if v.iter().any(|o| o.dev == l.dev && o.start < l.end && l.start < o.end) {
            return false;
        }
        v.push(l);
        true
    }
    fn unlock_range(&self, l: RangeLock) {
        let mut v = lock(&self.rmw);
        if let Some(i) = v.iter().position(|o| *o == l) {
            v.swap_remove(i);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `nvme` backend: see the module documentation.
pub struct NvmeBackend {
    name: String,
    shared: Arc<Shared>,
    root_meta: Mutex<Meta>,
}

impl fmt::Debug for NvmeBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvmeBackend")
            .field("name", &self.name)
            .field("devices", &self.devices())
            .finish()
    }
}

impl NvmeBackend {
    /// Open every device of `devices` (see the module documentation for what
    /// each kind of path becomes). `queue_depth` is the number of requests a
    /// channel takes at once (a power of two, at most [`MAX_QUEUE_DEPTH`]).
    /// `passthrough` selects NVMe passthrough for `/dev/ngXnY`.
    ///
    /// Control path; any thread.
    pub fn open(name: &str, devices: &[PathBuf], queue_depth: u32, passthrough: bool) -> FsResult<NvmeBackend> {
        if queue_depth == 0 || !queue_depth.is_power_of_two() || queue_depth > MAX_QUEUE_DEPTH {
            return Err(FsError::Inval);
        }
        if devices.len() > MAX_DEVICES {
            return Err(FsError::Inval);
        }
        let mut devs: Vec<Dev> = Vec::with_capacity(devices.len());
        for path in devices {
            let fname = path.file_name().ok_or(FsError::Inval)?.as_bytes().to_vec();
            if fname.len() > NAME_MAX_BYTES {
                return Err(FsError::NameTooLong);
            }
            if devs.iter().any(|d| d.name == fname) {
                tracing::warn!(path = %path.display(), "nvme: two devices with the same file name");
                return Err(FsError::Exist);
            }
            let p = probe(path, passthrough).inspect_err(|e| {
                tracing::warn!(path = %path.display(), error = %e, "nvme: cannot open device");
            })?;
            let hash = fnv1a(&[path.as_os_str().as_bytes()]);
            let fileid = 2 + hash % (u64::MAX - 2);
            if devs.iter().any(|d| d.hash == hash) {
                return Err(FsError::Exist);
            }
            devs.push(Dev {
                name: fname,
                path: path.clone(),
                hash,
                fileid,
                io: p.io,
                size_bytes: p.size_bytes,
                used_bytes: p.used_bytes,
                lba_bytes: p.lba_bytes,
                max_xfer_bytes: p.max_xfer_bytes,
                iopoll: p.iopoll,
                meta: Mutex::new(p.meta),
                mtime_ns: AtomicU64::new(p.mtime_ns),
            });
        }
        let now = Time::now();
        Ok(NvmeBackend {
            name: name.to_string(),
            shared: Arc::new(Shared {
                devs,
                root_hash: fnv1a(&[b"nvme-root", name.as_bytes()]),
                depth: queue_depth,
                rmw: Mutex::new(Vec::new()),
            }),
            root_meta: Mutex::new(Meta {
                mode: 0o755,
                uid: 0,
                gid: 0,
                atime: now,
                ctime: now,
            }),
        })
    }

    /// The devices as opened, in configuration order. Any thread.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.shared
            .devs
            .iter()
            .map(|d| DeviceInfo {
                name: String::from_utf8_lossy(&d.name).into_owned(),
                path: d.path.clone(),
                mode: d.mode(),
                nsid: match d.io {
                    DevIo::Passthrough { nsid, .. } => nsid,
                    DevIo::Fd { .. } => 0,
                },
                size_bytes: d.size_bytes,
                lba_bytes: d.lba_bytes,
                max_xfer_bytes: d.max_xfer_bytes,
                iopoll: d.iopoll,
            })
            .collect()
    }

    /// [`Backend::open_channel`] with the concrete type. Call on the core
    /// that will use the channel.
    pub fn open_nvme_channel(&self, core: usize) -> FsResult<NvmeChannel> {
        NvmeChannel::new(self.shared.clone(), core)
    }

    fn fh(&self, node: Node) -> FileHandle {
        let mut b = [0u8; FH_BYTES];
        b[..3].copy_from_slice(&FH_MAGIC);
        match node {
            Node::Root => {
                b[3] = FH_ROOT;
                b[8..16].copy_from_slice(&self.shared.root_hash.to_le_bytes());
            }
            Node::File(i) => {
                b[3] = FH_FILE;
                b[4..8].copy_from_slice(&(i as u32).to_le_bytes());
                b[8..16].copy_from_slice(&self.shared.devs[i].hash.to_le_bytes());
            }
        }
        FileHandle::new(&b).expect("16-byte handle")
    }

    fn node(&self, fh: &FileHandle) -> FsResult<Node> {
        decode_fh(&self.shared, fh)
    }

    fn dir(&self, fh: &FileHandle) -> FsResult<()> {
        match self.node(fh)? {
            Node::Root => Ok(()),
            Node::File(_) => Err(FsError::NotDir),
        }
    }

    fn find(&self, name: &[u8]) -> Option<usize> {
        self.shared.devs.iter().position(|d| d.name == name)
    }

    fn attr(&self, node: Node) -> Attr {
        match node {
            Node::Root => {
                let m = *lock(&self.root_meta);
                Attr {
                    ftype: FileType::Directory,
                    mode: m.mode,
                    nlink: 2,
                    uid: m.uid,
                    gid: m.gid,
                    size: 4096,
                    used: 4096,
                    rdev: (0, 0),
                    fileid: ROOT_FILEID,
                    atime: m.atime,
                    mtime: m.ctime,
                    ctime: m.ctime,
                }
            }
            Node::File(i) => {
                let d = &self.shared.devs[i];
                let m = *lock(&d.meta);
                let mtime = time_from_ns(d.mtime_ns.load(Ordering::Relaxed));
                Attr {
                    ftype: FileType::Regular,
                    mode: m.mode,
                    nlink: 1,
                    uid: m.uid,
                    gid: m.gid,
                    size: d.size_bytes,
                    used: d.used_bytes,
                    rdev: (0, 0),
                    fileid: d.fileid,
                    atime: m.atime,
                    mtime,
                    ctime: m.ctime.max(mtime),
                }
            }
        }
    }

    /// Name checks shared by the directory operations: `Some(node)` when the
    /// name exists (`.` and `..` are the root).
    fn entry(&self, name: &[u8]) -> FsResult<Option<Node>> {
        if name.is_empty() {
            return Err(FsError::NoEnt);
        }
        if name.len() > NAME_MAX_BYTES {
            return Err(FsError::NameTooLong);
        }
        if name == b"." || name == b".." {
            return Ok(Some(Node::Root));
        }
        Ok(self.find(name).map(Node::File))
    }

    /// MKDIR, SYMLINK, MKNOD, LINK and new-name CREATE: the namespace is fixed.
    fn refuse_new(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        self.dir(dir)?;
        match self.entry(name)? {
            Some(_) => Err(FsError::Exist),
            None => Err(FsError::NotSupp),
        }
    }

    fn flush_dev(&self, i: usize) -> FsResult<()> {
        match &self.shared.devs[i].io {
            DevIo::Passthrough { ng, nsid } => nvme_flush_sync(ng, *nsid),
            DevIo::Fd { buffered, .. } => buffered.sync_all().map_err(|e| FsError::from_io(&e)),
        }
    }
}

fn decode_fh(shared: &Shared, fh: &FileHandle) -> FsResult<Node> {
    let b = fh.as_bytes();
    if b.len() != FH_BYTES || b[..3] != FH_MAGIC {
        return Err(FsError::BadHandle);
    }
    let idx = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    let hash = u64::from_le_bytes(b[8..16].try_into().map_err(|_| FsError::BadHandle)?);
    match b[3] {
        FH_ROOT if idx == 0 => {
            if hash == shared.root_hash {
                Ok(Node::Root)
            } else {
                Err(FsError::Stale)
            }
        }
        FH_FILE => {
            if shared.devs.get(idx).is_some_and(|d| d.hash == hash) {
                return Ok(Node::File(idx));
            }
            // The list was reordered: the path hash still names the device.
            shared
                .devs
                .iter()
                .position(|d| d.hash == hash)
                .map(Node::File)
                .ok_or(FsError::Stale)
        }
        _ => Err(FsError::BadHandle),
    }
}

fn apply_times(m: &mut Meta, set: &SetAttr, mtime: &AtomicU64) {
    let now = Time::now();
    if let Some(mode) = set.mode {
        m.mode = mode & 0o7777;
    }
    if let Some(uid) = set.uid {
        m.uid = uid;
    }
    if let Some(gid) = set.gid {
        m.gid = gid;
    }
    match set.atime {
        SetTime::DontChange => {}
        SetTime::ServerTime => m.atime = now,
        SetTime::Client(t) => m.atime = t,
    }
    match set.mtime {
        SetTime::DontChange => {}
        SetTime::ServerTime => mtime.store(ns_from_time(now), Ordering::Relaxed),
        SetTime::Client(t) => mtime.store(ns_from_time(t), Ordering::Relaxed),
    }
    m.ctime = now;
}

impl Backend for NvmeBackend {
    fn kind(&self) -> &'static str {
        "nvme"
    }

    fn root(&self) -> FileHandle {
        self.fh(Node::Root)
    }

    fn getattr(&self, fh: &FileHandle) -> FsResult<Attr> {
        Ok(self.attr(self.node(fh)?))
    }

    /// Mode, owner and times are kept in memory only; size must stay the capacity.
    fn setattr(&self, fh: &FileHandle, set: &SetAttr) -> FsResult<Attr> {
        let node = self.node(fh)?;
        match node {
            Node::Root => {
                if set.size.is_some() {
                    return Err(FsError::IsDir);
                }
                let mut m = lock(&self.root_meta);
                let unused = AtomicU64::new(0);
                apply_times(&mut m, set, &unused);
                if set.mtime != SetTime::DontChange {
                    // The root's mtime is its ctime (no separate field kept).
                    m.ctime = time_from_ns(unused.load(Ordering::Relaxed));
                }
            }
            Node::File(i) => {
                let d = &self.shared.devs[i];
                match set.size {
                    Some(s) if s > d.size_bytes => return Err(FsError::FBig),
                    Some(s) if s < d.size_bytes => return Err(FsError::Inval),
                    _ => {}
                }
                let mut m = lock(&d.meta);
                apply_times(&mut m, set, &d.mtime_ns);
            }
        }
        Ok(self.attr(node))
    }

    fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
        self.dir(dir)?;
        match self.entry(name)? {
            Some(n) => Ok((self.fh(n), self.attr(n))),
            None => Err(FsError::NoEnt),
        }
    }

    fn readlink(&self, fh: &FileHandle, _out: &mut [u8]) -> FsResult<usize> {
        self.node(fh)?;
        Err(FsError::Inval)
    }

    fn create(&self, dir: &FileHandle, name: &[u8], how: CreateHow, _owner: Owner) -> FsResult<(FileHandle, Attr)> {
        self.dir(dir)?;
        match (self.entry(name)?, how) {
            (Some(Node::File(i)), CreateHow::Unchecked(set)) => {
                let fh = self.fh(Node::File(i));
                let attr = self.setattr(&fh, &set)?;
                Ok((fh, attr))
            }
            (Some(_), _) => Err(FsError::Exist),
            (None, _) => Err(FsError::NotSupp),
        }
    }

    fn mkdir(&self, dir: &FileHandle, name: &[u8], _set: &SetAttr, _owner: Owner) -> FsResult<(FileHandle, Attr)> {
        self.refuse_new(dir, name)
    }

    fn symlink(
        &self,
        dir: &FileHandle,
        name: &[u8],
        _target: &[u8],
        _set: &SetAttr,
        _owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        self.refuse_new(dir, name)
    }

    fn mknod(
        &self,
        dir: &FileHandle,
        name: &[u8],
        _kind: NodeKind,
        _set: &SetAttr,
        _owner: Owner,
    ) -> FsResult<(FileHandle, Attr)> {
        self.refuse_new(dir, name)
    }

    fn remove(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        self.dir(dir)?;
        match self.entry(name)? {
            Some(Node::Root) => Err(FsError::Inval),
            Some(Node::File(_)) => Err(FsError::Acces),
            None => Err(FsError::NoEnt),
        }
    }

    fn rmdir(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        self.dir(dir)?;
        match self.entry(name)? {
            Some(Node::Root) => Err(FsError::Inval),
            Some(Node::File(_)) => Err(FsError::NotDir),
            None => Err(FsError::NoEnt),
        }
    }

    fn rename(&self, from_dir: &FileHandle, from: &[u8], to_dir: &FileHandle, to: &[u8]) -> FsResult<()> {
        self.dir(from_dir)?;
        self.dir(to_dir)?;
        let src = self.entry(from)?;
        // Validate the target name too (length).
        let dst = self.entry(to)?;
        match src {
            None => Err(FsError::NoEnt),
            Some(Node::Root) => Err(FsError::Inval),
            Some(Node::File(i)) if dst == Some(Node::File(i)) => Ok(()),
            Some(Node::File(_)) => Err(FsError::Acces),
        }
    }

    fn link(&self, fh: &FileHandle, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
        if self.node(fh)? == Node::Root {
            return Err(FsError::IsDir);
        }
        self.refuse_new(dir, name).map(|_| ())
    }

    fn readdir(&self, dir: &FileHandle, cookie: u64, sink: &mut dyn FnMut(DirEntry<'_>) -> bool) -> FsResult<bool> {
        self.dir(dir)?;
        let n = self.shared.devs.len() as u64;
        // Positions: 0 ".", 1 "..", 2.. the devices; an entry's cookie is its position + 1.
        if cookie > n + 2 {
            return Err(FsError::BadCookie);
        }
        for pos in cookie..n + 2 {
            let (node, name): (Node, &[u8]) = match pos {
                0 => (Node::Root, b"."),
                1 => (Node::Root, b".."),
                p => {
                    let i = (p - 2) as usize;
                    (Node::File(i), &self.shared.devs[i].name)
                }
            };
            let attr = self.attr(node);
            let entry = DirEntry {
                fileid: attr.fileid,
                name,
                cookie: pos + 1,
                handle: Some(self.fh(node)),
                attr: Some(attr),
            };
            if !sink(entry) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn cookie_verifier(&self, dir: &FileHandle) -> FsResult<u64> {
        self.dir(dir)?;
        // The directory never changes.
        Ok(self.shared.root_hash)
    }

    fn fsstat(&self) -> FsResult<FsStat> {
        let devs = &self.shared.devs;
        let total: u64 = devs.iter().map(|d| d.size_bytes).sum();
        Ok(FsStat {
            total_bytes: total,
            free_bytes: 0,
            avail_bytes: 0,
            total_files: devs.len() as u64 + 1,
            free_files: 0,
            avail_files: 0,
            max_file_size: devs.iter().map(|d| d.size_bytes).max().unwrap_or(0),
            block_size: devs.iter().map(|d| d.lba_bytes).max().unwrap_or(4096).max(4096),
        })
    }

    fn commit(&self, fh: &FileHandle) -> FsResult<()> {
        match self.node(fh)? {
            Node::Root => Ok(()),
            Node::File(i) => self.flush_dev(i),
        }
    }

    fn sync_all(&self) -> FsResult<()> {
        let mut first = Ok(());
        for i in 0..self.shared.devs.len() {
            let r = self.flush_dev(i);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
        Ok(Box::new(self.open_nvme_channel(core)?))
    }
}

// ---------------------------------------------------------------- channel

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Phase {
    #[default]
    Free,
    /// Waiting for the RMW range lock.
    Locking,
    /// Passthrough read into the caller's buffer or the bounce buffer.
    Read,
    /// Reading the partial edge LBAs of an unaligned write.
    RmwRead,
    /// Passthrough write from the caller's buffer or the bounce buffer.
    Write,
    /// Passthrough flush.
    Flush,
    /// One SQE on the descriptor ring (read, write or fsync).
    Fd,
}

#[derive(Clone, Copy, Debug)]
struct Region {
    dev_off: u64,
    mem: *mut u8,
    len: u64,
}

const NO_REGION: Region = Region {
    dev_off: 0,
    mem: std::ptr::null_mut(),
    len: 0,
};

#[derive(Debug)]
struct Slot {
    tag: u64,
    dev: usize,
    op: IoOp,
    offset: u64,
    buf: *mut u8,
    /// Bytes the caller gets (a read is clipped to the capacity).
    len: u32,
    phase: Phase,
    regions: [Region; 2],
    nregions: usize,
    /// Issue cursor: region index and offset within it (passthrough).
    cur_region: usize,
    cur_off: u64,
    /// SQEs of this slot not yet completed.
    outstanding: u32,
    err: Option<FsError>,
    /// Descriptor path: the CQE's byte count.
    bytes: u32,
    bounce: Option<AlignedBuf>,
    span_off: u64,
    range: Option<RangeLock>,
    /// The write was made durable before completion (FUA / RWF_[D]SYNC).
    durable: bool,
    in_backlog: bool,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            tag: 0,
            dev: 0,
            op: IoOp::Flush,
            offset: 0,
            buf: std::ptr::null_mut(),
            len: 0,
            phase: Phase::Free,
            regions: [NO_REGION; 2],
            nregions: 0,
            cur_region: 0,
            cur_off: 0,
            outstanding: 0,
            err: None,
            bytes: 0,
            bounce: None,
            span_off: 0,
            range: None,
            durable: false,
            in_backlog: false,
        }
    }
}

type PtRing = IoUring<squeue::Entry128, cqueue::Entry32>;

/// One core's data path into an [`NvmeBackend`]: a passthrough ring (when a
/// device uses passthrough) and a descriptor ring (when one does not).
/// Owned and polled by one core.
pub struct NvmeChannel {
    shared: Arc<Shared>,
    core: usize,
    pt: Option<PtRing>,
    pt_iopoll: bool,
    /// SQEs the passthrough ring may have outstanding (its SQ size).
    pt_cap: u32,
    pt_hw: u32,
    fd: Option<IoUring>,
    fd_hw: u32,
    slots: Vec<Slot>,
    free: Vec<u32>,
    ready: VecDeque<IoDone>,
    /// Passthrough slots with SQEs still to push (ring full).
    backlog: VecDeque<u32>,
    /// Unaligned passthrough writes waiting for their range lock.
    lock_wait: VecDeque<u32>,
    in_flight: usize,
    bounce_pool: Vec<AlignedBuf>,
    draining: bool,
}

impl fmt::Debug for NvmeChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvmeChannel")
            .field("core", &self.core)
            .field("passthrough_ring", &self.pt.is_some())
            .field("iopoll", &self.pt_iopoll)
            .field("fd_ring", &self.fd.is_some())
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

const BOUNCE_POOL_MAX: usize = 4;
const CQE_BATCH: usize = 32;

impl NvmeChannel {
    fn new(shared: Arc<Shared>, core: usize) -> FsResult<NvmeChannel> {
        let depth = shared.depth;
        let pts: Vec<&Dev> = shared
            .devs
            .iter()
            .filter(|d| matches!(d.io, DevIo::Passthrough { .. }))
            .collect();
        let any_fd = pts.len() < shared.devs.len();
        let pt_iopoll = !pts.is_empty() && pts.iter().all(|d| d.iopoll);
        let pt_cap = 2 * depth;
        let pt = if pts.is_empty() {
            None
        } else {
            let mut b = PtRing::builder();
            if pt_iopoll {
                b.setup_iopoll();
            }
            Some(b.build(pt_cap).map_err(|e| FsError::from_io(&e))?)
        };
        let fd = if any_fd {
            Some(IoUring::new(depth).map_err(|e| FsError::from_io(&e))?)
        } else {
            None
        };
        let n = depth as usize;
        Ok(NvmeChannel {
            shared,
            core,
            pt,
            pt_iopoll,
            pt_cap,
            pt_hw: 0,
            fd,
            fd_hw: 0,
            slots: (0..n).map(|_| Slot::default()).collect(),
            free: (0..n as u32).rev().collect(),
            ready: VecDeque::with_capacity(n),
            backlog: VecDeque::new(),
            lock_wait: VecDeque::new(),
            in_flight: 0,
            bounce_pool: Vec::new(),
            draining: false,
        })
    }

    /// The passthrough ring polls the device (`IORING_SETUP_IOPOLL`).
    pub fn iopoll(&self) -> bool {
        self.pt_iopoll
    }

    fn complete_now(&mut self, done: IoDone) {
        self.ready.push_back(done);
        self.in_flight += 1;
    }

    fn take_bounce(&mut self, len: usize, align: usize) -> AlignedBuf {
        if let Some(i) = self
            .bounce_pool
            .iter()
            .position(|b| b.capacity() >= len && b.layout.align() >= align)
        {
            return self.bounce_pool.swap_remove(i);
        }
        AlignedBuf::new(round_up(len as u64, 64 << 10) as usize, align.max(4096))
    }

    fn give_bounce(&mut self, b: AlignedBuf) {
        if self.bounce_pool.len() < BOUNCE_POOL_MAX && b.capacity() <= (4 << 20) {
            self.bounce_pool.push(b);
        }
    }

    /// Push the slot's remaining passthrough SQEs; false when the ring is full
    /// (the slot then waits on the backlog).
    fn issue_pt(&mut self, si: u32) -> bool {
        let s = &mut self.slots[si as usize];
        let d = &self.shared.devs[s.dev];
        let (fd, nsid) = match &d.io {
            DevIo::Passthrough { ng, nsid } => (ng.as_raw_fd(), *nsid),
            DevIo::Fd { .. } => unreachable!("passthrough slot on a descriptor device"),
        };
        let ring = self.pt.as_mut().expect("passthrough ring");
        let lba = d.lba_bytes as u64;
        loop {
            if self.pt_hw >= self.pt_cap {
                return false;
            }
            let cmd = if s.phase == Phase::Flush {
                if s.cur_region > 0 {
                    return true;
                }
                s.cur_region = 1;
                NvmeCmd {
                    opcode: NVME_OP_FLUSH,
                    nsid,
                    ..Default::default()
                }
            } else {
                if s.cur_region >= s.nregions {
                    return true;
                }
                let r = s.regions[s.cur_region];
                let chunk = (r.len - s.cur_off).min(d.max_xfer_bytes as u64);
                let dev_off = r.dev_off + s.cur_off;
                // SAFETY: within the region's memory (`cur_off + chunk <= len`).
                let mem = unsafe { r.mem.add(s.cur_off as usize) };
                let (op, fua) = match s.phase {
                    Phase::Write => (NVME_OP_WRITE, s.durable),
                    _ => (NVME_OP_READ, false),
                };
                s.cur_off += chunk;
                if s.cur_off == r.len {
                    s.cur_region += 1;
                    s.cur_off = 0;
                }
                NvmeCmd::rw(
                    op,
                    nsid,
                    dev_off / lba,
                    (chunk / lba) as u32,
                    mem as u64,
                    chunk as u32,
                    fua,
                )
            };
            let sqe = opcode::UringCmd80::new(types::Fd(fd), NVME_URING_CMD_IO)
                .cmd(cmd.encode())
                .build()
                .user_data(si as u64);
            // SAFETY: the command's buffer (caller's, per the `submit` contract,
            // or the slot's bounce buffer, kept until the slot completes) stays
            // valid until its CQE is reaped. The SQ has `pt_cap` entries and at
            // most `pt_cap` SQEs are outstanding, so the push cannot fail.
            let pushed = unsafe { ring.submission().push(&sqe) };
            debug_assert!(pushed.is_ok());
            if pushed.is_err() {
                return false;
            }
            self.pt_hw += 1;
            s.outstanding += 1;
        }
    }

    fn issue_or_backlog(&mut self, si: u32) {
        if !self.issue_pt(si) {
            let s = &mut self.slots[si as usize];
            if !s.in_backlog {
                s.in_backlog = true;
                self.backlog.push_back(si);
            }
        }
    }

    /// Start a passthrough phase over `regions`.
    fn start_phase(&mut self, si: u32, phase: Phase, regions: &[Region]) {
        let s = &mut self.slots[si as usize];
        s.phase = phase;
        s.nregions = regions.len();
        s.regions[..regions.len()].copy_from_slice(regions);
        s.cur_region = 0;
        s.cur_off = 0;
        self.issue_or_backlog(si);
    }

    /// Set up an unaligned passthrough write once its range lock is held.
    fn start_rmw(&mut self, si: u32) {
        let s = &self.slots[si as usize];
        let lba = self.shared.devs[s.dev].lba_bytes as u64;
        let (a0, a1, edges) = rmw_plan(s.offset, s.len as u64, lba);
        let bounce = self.take_bounce((a1 - a0) as usize, lba as usize);
        let base = bounce.as_ptr();
        let s = &mut self.slots[si as usize];
        s.span_off = a0;
        s.bounce = Some(bounce);
        let mut regions = [NO_REGION; 2];
        let mut n = 0;
        for e in edges.into_iter().flatten() {
            regions[n] = Region {
                dev_off: e,
                // SAFETY: `e - a0 + lba <= a1 - a0`, within the bounce buffer.
                mem: unsafe { base.add((e - a0) as usize) },
                len: lba,
            };
            n += 1;
        }
        if n == 0 {
            // Only the memory was misaligned: nothing to read first.
            self.merge_and_write(si);
        } else {
            self.start_phase(si, Phase::RmwRead, &regions[..n]);
        }
    }

    /// Copy the caller's data into the bounce span and write the span.
    fn merge_and_write(&mut self, si: u32) {
        let s = &mut self.slots[si as usize];
        let lba = self.shared.devs[s.dev].lba_bytes as u64;
        let bounce = s.bounce.as_ref().expect("rmw bounce").as_ptr();
        let span_len = round_up(s.offset + s.len as u64, lba) - s.span_off;
        // SAFETY: the caller's buffer is valid for `len` bytes (submit
        // contract); the bounce buffer holds the span, which contains
        // [offset, offset + len); the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(s.buf, bounce.add((s.offset - s.span_off) as usize), s.len as usize);
        }
        let r = Region {
            dev_off: s.span_off,
            mem: bounce,
            len: span_len,
        };
        self.start_phase(si, Phase::Write, &[r]);
    }

    fn finish(&mut self, si: u32) {
        let s = &mut self.slots[si as usize];
        let d = &self.shared.devs[s.dev];
        let result = match s.err {
            Some(e) => Err(e),
            None => Ok(if s.phase == Phase::Fd { s.bytes } else { s.len }),
        };
        let mut done = IoDone {
            tag: s.tag,
            result,
            eof: false,
            committed: Stable::Unstable,
        };
        match s.op {
            IoOp::Read => {
                if let Ok(n) = result {
                    done.eof = s.offset + n as u64 >= d.size_bytes || n < s.len;
                }
            }
            IoOp::Write(stable) => {
                if result.is_ok() {
                    if s.durable {
                        done.committed = stable;
                    }
                    d.mtime_ns.fetch_max(now_ns(), Ordering::Relaxed);
                }
            }
            IoOp::Flush => {}
        }
        if let Some(r) = s.range.take() {
            self.shared.unlock_range(r);
        }
        let bounce = s.bounce.take();
        *s = Slot::default();
        if let Some(b) = bounce {
            self.give_bounce(b);
        }
        self.free.push(si);
        self.ready.push_back(done);
    }

    /// All SQEs of the slot's current passthrough phase completed.
    fn phase_done(&mut self, si: u32) {
        let s = &mut self.slots[si as usize];
        if s.err.is_some() {
            return self.finish(si);
        }
        if self.draining {
            // Dropped with I/O in flight: nobody will see the result, and the
            // caller's buffer must not be touched any more.
            s.err = Some(FsError::Io);
            return self.finish(si);
        }
        match s.phase {
            Phase::Read => {
                if let Some(b) = &s.bounce {
                    // SAFETY: the bounce span covers [offset, offset + len) and
                    // was filled by the read; the caller's buffer is valid for
                    // `len` bytes (submit contract).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            b.as_ptr().add((s.offset - s.span_off) as usize),
                            s.buf,
                            s.len as usize,
                        );
                    }
                }
                self.finish(si)
            }
            Phase::RmwRead => self.merge_and_write(si),
            _ => self.finish(si),
        }
    }

    fn on_pt_cqe(&mut self, si: u32, res: i32) {
        self.pt_hw -= 1;
        let Some(s) = self.slots.get_mut(si as usize) else {
            return;
        };
        s.outstanding -= 1;
        if res != 0 && s.err.is_none() {
            s.err = Some(if res < 0 {
                FsError::from_errno(-res)
            } else {
                // An NVMe status code (status field of the completion).
                tracing::warn!(status = res, dev = s.dev, "nvme: command failed");
                FsError::Io
            });
        }
        if s.err.is_some() {
            // Stop issuing the rest of this phase.
            s.cur_region = s.nregions.max(1);
        }
        let all_issued = if s.phase == Phase::Flush {
            s.cur_region > 0
        } else {
            s.cur_region >= s.nregions
        };
        if s.outstanding == 0 && all_issued && !s.in_backlog {
            self.phase_done(si);
        }
    }

    fn on_fd_cqe(&mut self, si: u32, res: i32) {
        self.fd_hw -= 1;
        let Some(s) = self.slots.get_mut(si as usize) else {
            return;
        };
        s.outstanding -= 1;
        if res < 0 {
            s.err = Some(FsError::from_errno(-res));
        } else {
            s.bytes = res as u32;
        }
        self.finish(si);
    }

    fn retry_waiting(&mut self) {
        while let Some(&si) = self.backlog.front() {
            if !self.issue_pt(si) {
                break;
            }
            self.backlog.pop_front();
            let s = &mut self.slots[si as usize];
            s.in_backlog = false;
            if s.outstanding == 0 {
                // Everything completed while waiting (an error cut it short).
                self.phase_done(si);
            }
        }
        let n = self.lock_wait.len();
        for _ in 0..n {
            let Some(si) = self.lock_wait.pop_front() else { break };
            let r = self.slots[si as usize].range.expect("waiting slot has a range");
            if self.shared.try_lock_range(r) {
                self.start_rmw(si);
            } else {
                self.lock_wait.push_back(si);
            }
        }
    }

    /// Hand queued SQEs to the kernel; on an IOPOLL ring also poll the device
    /// once. Never waits.
    fn enter(&mut self) {
        if let Some(ring) = &mut self.pt {
            let queued = !ring.submission().is_empty();
            if queued || (self.pt_iopoll && self.pt_hw > 0) {
                // EAGAIN/EBUSY/EINTR: the SQEs stay queued for the next poll.
                let _ = ring.submit();
            }
        }
        if let Some(ring) = &mut self.fd {
            if !ring.submission().is_empty() {
                let _ = ring.submit();
            }
        }
    }

    fn reap(&mut self) {
        let mut batch = [(0u64, 0i32); CQE_BATCH];
        loop {
            let mut k = 0;
            if let Some(ring) = &mut self.pt {
                for cqe in ring.completion() {
                    batch[k] = (cqe.user_data(), cqe.result());
                    k += 1;
                    if k == CQE_BATCH {
                        break;
                    }
                }
            }
            for &(ud, res) in &batch[..k] {
                self.on_pt_cqe(ud as u32, res);
            }
            let mut j = 0;
            if let Some(ring) = &mut self.fd {
                for cqe in ring.completion() {
                    batch[j] = (cqe.user_data(), cqe.result());
                    j += 1;
                    if j == CQE_BATCH {
                        break;
                    }
                }
            }
            for &(ud, res) in &batch[..j] {
                self.on_fd_cqe(ud as u32, res);
            }
            if k < CQE_BATCH && j < CQE_BATCH {
                break;
            }
        }
    }

    fn pump(&mut self) {
        self.retry_waiting();
        self.enter();
        self.reap();
        // Phase changes and freed ring space may have queued more work.
        self.retry_waiting();
        let queued = self.pt.as_mut().is_some_and(|r| !r.submission().is_empty())
            || self.fd.as_mut().is_some_and(|r| !r.submission().is_empty());
        if queued {
            self.enter();
        }
    }

    fn submit_fd(&mut self, si: u32, io: &IoDesc, len: u32) -> FsResult<()> {
        let d = &self.shared.devs[self.slots[si as usize].dev];
        let DevIo::Fd { direct, buffered } = &d.io else {
            unreachable!("descriptor slot on a passthrough device")
        };
        let lba = d.lba_bytes as u64;
        let aligned = io.offset % lba == 0 && len as u64 % lba == 0 && (io.buf as usize as u64) % lba == 0;
        let fd: RawFd = match direct {
            Some(f) if aligned => f.as_raw_fd(),
            _ => buffered.as_raw_fd(),
        };
        let s = &mut self.slots[si as usize];
        let sqe = match io.op {
            IoOp::Read => opcode::Read::new(types::Fd(fd), io.buf, len).offset(io.offset).build(),
            IoOp::Write(stable) => {
                let flags = match stable {
                    Stable::Unstable => 0,
                    Stable::DataSync => libc::RWF_DSYNC,
                    Stable::FileSync => libc::RWF_SYNC,
                };
                s.durable = stable != Stable::Unstable;
                opcode::Write::new(types::Fd(fd), io.buf, len)
                    .offset(io.offset)
                    .rw_flags(flags)
                    .build()
            }
            IoOp::Flush => opcode::Fsync::new(types::Fd(buffered.as_raw_fd())).build(),
        };
        s.phase = Phase::Fd;
        s.outstanding = 1;
        let ring = self.fd.as_mut().expect("descriptor ring");
        // SAFETY: the buffer is the caller's, valid until the completion is
        // reaped (submit contract). The ring has `depth` entries and each of
        // the at most `depth` slots has at most one SQE outstanding.
        let pushed = unsafe { ring.submission().push(&sqe.user_data(si as u64)) };
        if pushed.is_err() {
            return Err(FsError::Jukebox);
        }
        self.fd_hw += 1;
        Ok(())
    }
}

fn aligned_to(offset: u64, len: u64, buf: *mut u8, lba: u64) -> bool {
    offset % lba == 0 && len % lba == 0 && (buf as usize as u64) % lba == 0
}

impl IoChannel for NvmeChannel {
    /// Errors found before queuing (bad handle, the root, a write past the
    /// capacity, a null buffer) are returned here and produce no completion.
    /// Runs on the channel's core.
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()> {
        if self.in_flight >= self.slots.len() {
            return Err(FsError::Jukebox);
        }
        let di = match decode_fh(&self.shared, &io.fh)? {
            Node::Root => return Err(FsError::IsDir),
            Node::File(i) => i,
        };
        let d = &self.shared.devs[di];
        let size = d.size_bytes;
        let lba = d.lba_bytes as u64;
        let is_pt = matches!(d.io, DevIo::Passthrough { .. });
        let mut len = io.len;
        match io.op {
            IoOp::Read => {
                if len > 0 && io.buf.is_null() {
                    return Err(FsError::Inval);
                }
                if io.offset >= size || len == 0 {
                    self.complete_now(IoDone {
                        tag: io.tag,
                        result: Ok(0),
                        eof: io.offset >= size,
                        committed: Stable::Unstable,
                    });
                    return Ok(());
                }
                len = (len as u64).min(size - io.offset) as u32;
            }
            IoOp::Write(stable) => {
                if len > 0 && io.buf.is_null() {
                    return Err(FsError::Inval);
                }
                match io.offset.checked_add(len as u64) {
                    Some(end) if end <= size => {}
                    _ => return Err(FsError::FBig),
                }
                if len == 0 {
                    self.complete_now(IoDone {
                        tag: io.tag,
                        result: Ok(0),
                        eof: false,
                        committed: stable,
                    });
                    return Ok(());
                }
            }
            IoOp::Flush => {}
        }
        let Some(si) = self.free.pop() else {
            return Err(FsError::Jukebox);
        };
        {
            let s = &mut self.slots[si as usize];
            *s = Slot {
                tag: io.tag,
                dev: di,
                op: io.op,
                offset: io.offset,
                buf: io.buf,
                len,
                ..Slot::default()
            };
        }
        if !is_pt {
            if let Err(e) = self.submit_fd(si, &io, len) {
                self.slots[si as usize] = Slot::default();
                self.free.push(si);
                return Err(e);
            }
            self.in_flight += 1;
            return Ok(());
        }
        self.in_flight += 1;
        match io.op {
            IoOp::Flush => {
                self.slots[si as usize].phase = Phase::Flush;
                self.issue_or_backlog(si);
            }
            IoOp::Read => {
                if aligned_to(io.offset, len as u64, io.buf, lba) {
                    let r = Region {
                        dev_off: io.offset,
                        mem: io.buf,
                        len: len as u64,
                    };
                    self.start_phase(si, Phase::Read, &[r]);
                } else {
                    let (a0, a1, _) = rmw_plan(io.offset, len as u64, lba);
                    let bounce = self.take_bounce((a1 - a0) as usize, lba as usize);
                    let r = Region {
                        dev_off: a0,
                        mem: bounce.as_ptr(),
                        len: a1 - a0,
                    };
                    let s = &mut self.slots[si as usize];
                    s.span_off = a0;
                    s.bounce = Some(bounce);
                    self.start_phase(si, Phase::Read, &[r]);
                }
            }
            IoOp::Write(stable) => {
                self.slots[si as usize].durable = stable != Stable::Unstable;
                if aligned_to(io.offset, len as u64, io.buf, lba) {
                    let r = Region {
                        dev_off: io.offset,
                        mem: io.buf,
                        len: len as u64,
                    };
                    self.start_phase(si, Phase::Write, &[r]);
                } else {
                    let (a0, a1, edges) = rmw_plan(io.offset, len as u64, lba);
                    if edges.iter().all(Option::is_none) {
                        // Whole LBAs from a misaligned buffer: no lock needed.
                        self.start_rmw(si);
                    } else {
                        let r = RangeLock {
                            dev: di,
                            start: a0,
                            end: a1,
                        };
                        self.slots[si as usize].range = Some(r);
                        if self.shared.try_lock_range(r) {
                            self.start_rmw(si);
                        } else {
                            self.slots[si as usize].phase = Phase::Locking;
                            self.lock_wait.push_back(si);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs on the channel's core; never blocks (one non-blocking
    /// `io_uring_enter` per ring with work queued, or with I/O outstanding on
    /// an IOPOLL ring).
    fn poll(&mut self, out: &mut [IoDone]) -> usize {
        if self.in_flight == 0 || out.is_empty() {
            return 0;
        }
        if self.ready.len() < out.len() {
            self.pump();
        }
        let mut n = 0;
        while n < out.len() {
            let Some(d) = self.ready.pop_front() else { break };
            out[n] = d;
            n += 1;
            self.in_flight -= 1;
        }
        n
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Device or kernel I/O: yes.
    fn completes_later(&self) -> bool {
        true
    }
}

impl Drop for NvmeChannel {
    /// Waits (blocking) until the kernel is done with every buffer it was
    /// given, so that bounce buffers are not freed under a DMA.
    fn drop(&mut self) {
        self.draining = true;
        // Never reached the device.
        while let Some(si) = self.lock_wait.pop_front() {
            let s = &mut self.slots[si as usize];
            s.range = None;
            s.err = Some(FsError::Io);
            self.finish(si);
        }
        while let Some(si) = self.backlog.pop_front() {
            let s = &mut self.slots[si as usize];
            s.in_backlog = false;
            s.err.get_or_insert(FsError::Io);
            s.cur_region = s.nregions.max(1);
            if s.outstanding == 0 {
                self.finish(si);
            }
        }
        let mut failures = 0;
        while self.pt_hw > 0 || self.fd_hw > 0 {
            let mut ok = true;
            if self.pt_hw > 0 {
                if let Some(r) = &mut self.pt {
                    ok &= r.submit_and_wait(1).is_ok();
                }
            }
            if self.fd_hw > 0 {
                if let Some(r) = &mut self.fd {
                    ok &= r.submit_and_wait(1).is_ok();
                }
            }
            self.reap();
            if !ok {
                failures += 1;
                if failures > 1000 {
                    // The kernel may still own them: leak rather than free.
                    for s in &mut self.slots {
                        if let Some(b) = s.bounce.take() {
                            std::mem::forget(b);
                        }
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_linux_headers() {
        assert_eq!(NVME_URING_CMD_IO, 0xC048_4E80);
        assert_eq!(NVME_IOCTL_ID, 0x4E40);
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xC048_4E41);
        assert_eq!(NVME_IOCTL_IO_CMD, 0xC048_4E43);
        assert_eq!(BLKGETSIZE64, 0x8008_1272);
        assert_eq!(BLKFLSBUF, 0x1261);
    }

    #[test]
    fn uring_cmd_layout() {
        let c = NvmeCmd::rw(NVME_OP_WRITE, 7, 0x1_2345_6789, 8, 0xdead_beef_0000, 4096, true);
        let b = c.encode();
        assert_eq!(b[0], 0x01);
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 7);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 0xdead_beef_0000);
        assert_eq!(u32::from_le_bytes(b[36..40].try_into().unwrap()), 4096);
        assert_eq!(u32::from_le_bytes(b[40..44].try_into().unwrap()), 0x2345_6789);
        assert_eq!(u32::from_le_bytes(b[44..48].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(b[48..52].try_into().unwrap()), 7 | NVME_RW_FUA);
        assert!(b[72..].iter().all(|&x| x == 0));
        // The field order of the struct agrees with the encoding.
        assert_eq!(std::mem::offset_of!(NvmeCmd, addr), 24);
        assert_eq!(std::mem::offset_of!(NvmeCmd, data_len), 36);
        assert_eq!(std::mem::offset_of!(NvmeCmd, cdw12), 48);
        assert_eq!(std::mem::offset_of!(NvmeCmd, timeout_ms), 64);
        let r = NvmeCmd::rw(NVME_OP_READ, 1, 0, 1, 0, 512, false);
        assert_eq!(r.cdw12, 0);
    }

    #[test]
    fn identify_parsing() {
        let mut id = vec![0u8; 4096];
        id[0..8].copy_from_slice(&131072u64.to_le_bytes());
        id[25] = 1; // two formats
        id[26] = 1; // format 1
        id[128 + 2] = 9; // format 0: 512 bytes
        id[132 + 2] = 12; // format 1: 4096 bytes
        assert_eq!(
            parse_identify_ns(&id),
            Some(NsGeometry {
                blocks: 131072,
                lba_bytes: 4096,
                meta_bytes: 0
            })
        );
        id[132] = 8; // 8 bytes of metadata per LBA
        assert_eq!(parse_identify_ns(&id).unwrap().meta_bytes, 8);
        id[26] = 2; // beyond NLBAF
        assert_eq!(parse_identify_ns(&id), None);
        id[26] = 0;
        id[128 + 2] = 3; // absurd LBA size
        assert_eq!(parse_identify_ns(&id), None);
        assert_eq!(parse_identify_ns(&id[..100]), None);
        // High index bits (FLBAS bits 6:5).
        let mut id = vec![0u8; 4096];
        id[25] = 63;
        id[26] = 0x20 | 0x01; // index 17
        id[128 + 4 * 17 + 2] = 12;
        assert_eq!(parse_identify_ns(&id).unwrap().lba_bytes, 4096);
    }

    #[test]
    fn rmw_plans() {
        // Inside one block.
        assert_eq!(rmw_plan(100, 10, 512), (0, 512, [Some(0), None]));
        // Two partial blocks.
        assert_eq!(rmw_plan(500, 100, 512), (0, 1024, [Some(0), Some(512)]));
        // Aligned start, partial tail.
        assert_eq!(rmw_plan(4096, 5000, 4096), (4096, 12288, [None, Some(8192)]));
        // Partial head, aligned end.
        assert_eq!(rmw_plan(4000, 96, 4096), (0, 4096, [Some(0), None]));
        // Fully aligned: nothing to read.
        assert_eq!(rmw_plan(8192, 8192, 4096), (8192, 16384, [None, None]));
    }

    #[test]
    fn fnv_separates_parts() {
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
        assert_eq!(fnv1a(&[b"/dev/ng0n1"]), fnv1a(&[b"/dev/ng0n1"]));
    }
}
