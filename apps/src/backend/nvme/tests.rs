//! Unit tests of the pieces that need no device: ioctl numbers, Identify
//! parsing, handles, the read-modify-write plan.

use super::align::rmw_plan;
use super::cmd::{
    parse_identify_ns, NsGeometry, NvmeCmd, BLKFLSBUF, BLKGETSIZE64, NVME_IOCTL_ADMIN_CMD, NVME_IOCTL_ID,
    NVME_IOCTL_IO_CMD, NVME_OP_READ, NVME_OP_WRITE, NVME_RW_FUA, NVME_URING_CMD_IO,
};
use super::fs::fnv1a;

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
    id[16..24].copy_from_slice(&1000u64.to_le_bytes()); // NUSE
    id[25] = 1; // two formats
    id[26] = 1; // format 1
    id[128 + 2] = 9; // format 0: 512 bytes
    id[132 + 2] = 12; // format 1: 4096 bytes
    assert_eq!(
        parse_identify_ns(&id),
        Some(NsGeometry {
            blocks: 131072,
            used_blocks: 1000,
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

#[test]
fn kernel_release_versions_parse() {
    use super::device::release_version;
    assert_eq!(release_version("6.1.0-50-amd64"), Some((6, 1)));
    assert_eq!(release_version("6.18.3"), Some((6, 18)));
    assert_eq!(release_version("5.15.0-91-generic"), Some((5, 15)));
    assert_eq!(release_version("6.6"), Some((6, 6)));
    assert_eq!(release_version("garbage"), None);
    assert_eq!(release_version("6"), None);
}
