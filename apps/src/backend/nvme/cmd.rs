//! The kernel's NVMe ABI as this backend uses it: ioctl numbers (NVMe and
//! block), NVM and admin opcodes, the 72-byte passthrough command
//! ([`NvmeCmd`]) and the parse of Identify Namespace ([`parse_identify_ns`]).
//! Pure encoding: nothing here touches a device.

/// `_IOC(dir, type, nr, size)` as in `<asm-generic/ioctl.h>` (x86, arm64).
pub(super) const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}
pub(super) const IOC_NONE: u32 = 0;
pub(super) const IOC_WRITE: u32 = 1;
pub(super) const IOC_READ: u32 = 2;

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
pub(super) const BLKGETSIZE64: u32 = ioc(IOC_READ, 0x12, 114, 8);
/// `BLKFLSBUF`: write back and drop a block device's page cache.
pub(super) const BLKFLSBUF: u32 = ioc(IOC_NONE, 0x12, 97, 0);

/// NVM command set opcodes.
pub const NVME_OP_FLUSH: u8 = 0x00;
pub const NVME_OP_WRITE: u8 = 0x01;
pub const NVME_OP_READ: u8 = 0x02;
/// Admin Identify.
pub(super) const NVME_ADMIN_IDENTIFY: u8 = 0x06;
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
    /// `NUSE`: LBAs allocated (a thin-provisioned namespace has fewer than
    /// `NSZE`; the rest is free space).
    pub used_blocks: u64,
    /// Data bytes per LBA of the formatted LBA format.
    pub lba_bytes: u32,
    /// Metadata bytes per LBA (0: none).
    pub meta_bytes: u16,
}

/// Parse an Identify Namespace data structure (4096 bytes, NVMe base spec
/// "Identify Namespace data structure": NSZE at byte 0, NUSE at 16, FLBAS at 26, the LBA
/// formats from byte 128). `None` when it is short or the format is absurd.
pub fn parse_identify_ns(data: &[u8]) -> Option<NsGeometry> {
    if data.len() < 4096 {
        return None;
    }
    let blocks = u64::from_le_bytes(data[0..8].try_into().ok()?);
    let used_blocks = u64::from_le_bytes(data[16..24].try_into().ok()?);
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
        used_blocks,
        lba_bytes: 1 << lbads,
        meta_bytes,
    })
}
