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
//! | SETATTR size equal to or below the capacity | success, the size stays the capacity (as `O_TRUNC` on a block device: `cp` onto a device file works) |
//! | SETATTR size above the capacity | `FBig` |
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
//! FSINFO advertises no hard or symbolic links (PATHCONF `linkmax` 1), and
//! FSSTAT's free space is what the devices have unallocated
//! (`Dev::free_bytes` in `device.rs`: `NSZE - NUSE` of a thin-provisioned
//! namespace, the holes of an image file within its file system's free
//! space, none on a block device).
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
//! reaped by polling the completion queue from [`IoChannel::poll`](crate::backend::IoChannel::poll), which
//! never blocks.
//!
//! * `/dev/ngXnY` with passthrough on: NVMe Read (`0x02`) and Write (`0x01`)
//!   as `IORING_OP_URING_CMD` on a ring of 128-byte SQEs and 32-byte CQEs,
//!   at most `max_hw_sectors`/`max_segments` per command (larger requests
//!   are split). When the namespace's block queue has poll queues
//!   (`/sys/block/nvmeXnY/queue/io_poll` is 1, e.g. the `nvme` module loaded
//!   with `poll_queues=1`) and the kernel is 6.6 or later (before it,
//!   passthrough polling can reach a bio its completion already freed: the
//!   test guest's 6.1 took a general protection fault there; the backend
//!   logs that it refuses), the ring is `IORING_SETUP_IOPOLL` and each
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
//!
//! # Files
//!
//! | file | what |
//! |---|---|
//! | `cmd.rs` | NVMe and block ioctl numbers, opcodes, the passthrough command, Identify Namespace parsing |
//! | `align.rs` | aligned buffers and the LBA arithmetic of unaligned requests |
//! | `device.rs` | probing and opening a configured path; device metadata; Identify and Flush on the control path |
//! | `fs.rs` | [`NvmeBackend`]: the flat file system over the devices (handles, attributes, namespace answers) |
//! | `channel.rs` | [`NvmeChannel`]: one core's I/O (passthrough and descriptor rings, bounce, RMW) |
//! | `tests.rs` | unit tests |

// `u64::is_multiple_of` needs Rust 1.87; the workspace MSRV is 1.80.
#![allow(unknown_lints, clippy::manual_is_multiple_of)]

mod align;
mod channel;
mod cmd;
mod device;
mod fs;
#[cfg(test)]
mod tests;

pub use channel::NvmeChannel;
pub use cmd::{
    parse_identify_ns, NsGeometry, NvmeCmd, NVME_CMD_BYTES, NVME_IOCTL_ADMIN_CMD, NVME_IOCTL_ID, NVME_IOCTL_IO_CMD,
    NVME_OP_FLUSH, NVME_OP_READ, NVME_OP_WRITE, NVME_RW_FUA, NVME_URING_CMD_IO,
};
pub use device::{kernel_polls_passthrough_safely, DeviceInfo, IoMode};
pub use fs::{NvmeBackend, MAX_DEVICES, MAX_QUEUE_DEPTH};
