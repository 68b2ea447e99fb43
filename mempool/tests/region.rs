//! Region creation, the no-hugepage fallback, and mapping from a descriptor.

use std::os::fd::{AsRawFd, OwnedFd};

use mempool::region::{hugepage_counts, HugePageSize, Region, RegionBacking, RegionConfig, RegionWarning, HUGEPAGE_2M};
use mempool::MempoolError;

fn hugepages_total() -> u64 {
    hugepage_counts().map_or(0, |(total, _, _)| total)
}

fn free_2m_hugepages() -> u64 {
    match hugepage_counts() {
        Some((_, free, size)) if size == HUGEPAGE_2M as u64 => free,
        _ => 0,
    }
}

#[test]
fn create_rounds_up_and_reports_backing() {
    let r = Region::create(3, 10_000, &RegionConfig::default()).unwrap();
    assert_eq!(r.id(), 3);
    assert_eq!(r.len(), HUGEPAGE_2M);
    assert!(!r.as_ptr().is_null());
    assert_eq!(r.as_ptr() as usize % 4096, 0);
    if hugepages_total() == 0 {
        // No hugepages reserved (as on the development machine): the
        // fallback must be taken.
        assert!(matches!(r.backing(), RegionBacking::NormalPages { .. }));
    }
    let fell_back = r
        .warnings()
        .iter()
        .any(|w| matches!(w, RegionWarning::HugepageFallback { .. }));
    match r.backing() {
        RegionBacking::HugeTlb { page_size } => {
            assert_eq!(page_size, HUGEPAGE_2M);
            assert!(!fell_back);
        }
        RegionBacking::NormalPages { .. } => {
            // One warning that names the setting to change.
            assert!(fell_back);
            let w = r.warning().expect("fallback must warn");
            assert!(w.contains("vm.nr_hugepages"), "{w}");
            assert!(w.contains("scripts/hugepages.sh"), "{w}");
        }
    }
    // The memfd is sealed against resizing, so a peer cannot SIGBUS us.
    assert!(r.is_sealed());
    // SAFETY: plain syscall on a valid fd.
    let rc = unsafe { libc::ftruncate(r.fd().as_raw_fd(), 0) };
    assert_eq!(rc, -1, "sealed memfd must refuse to shrink");
}

#[test]
fn zero_length_is_an_error() {
    assert!(matches!(
        Region::create(0, 0, &RegionConfig::default()),
        Err(MempoolError::InvalidRegionLength { .. })
    ));
}

#[test]
fn no_fallback_fails_cleanly_without_hugepages() {
    if free_2m_hugepages() >= 1 {
        return; // the machine has hugepages; the strict path succeeds there
    }
    let cfg = RegionConfig {
        allow_fallback: false,
        ..RegionConfig::default()
    };
    let err = Region::create(0, 1, &cfg).unwrap_err();
    assert!(
        matches!(err, MempoolError::HugepagesUnavailable { page_size, .. } if page_size == HUGEPAGE_2M),
        "{err:?}"
    );
    assert!(std::error::Error::source(&err).is_some());
    // 1 GiB pages are never reserved here either.
    let cfg1g = RegionConfig {
        page_size: HugePageSize::Size1G,
        allow_fallback: false,
        ..RegionConfig::default()
    };
    assert!(Region::create(0, 1, &cfg1g).is_err());
}

#[test]
fn second_mapping_from_fd_shares_memory() {
    let a = Region::create(1, 4 * 4096, &RegionConfig::default()).unwrap();
    // What the fabric does: pass the descriptor (here: a dup of it) to the
    // other side, which maps it with its own local id.
    let fd: OwnedFd = a.fd().try_clone_to_owned().unwrap();
    let b = Region::map_from_fd(fd, a.len(), 9).unwrap();
    assert_eq!(b.id(), 9);
    assert_eq!(b.len(), a.len());
    assert!(b.is_imported());
    assert!(b.is_sealed());
    assert_eq!(
        std::mem::discriminant(&a.backing()),
        std::mem::discriminant(&b.backing())
    );
    assert_ne!(a.as_ptr(), b.as_ptr());
    // SAFETY: both mappings are live and this test is their only user.
    unsafe {
        a.as_ptr().add(100).write(0x5A);
        b.as_ptr().add(a.len() - 1).write(0xC3);
        assert_eq!(b.as_ptr().add(100).read(), 0x5A);
        assert_eq!(a.as_ptr().add(a.len() - 1).read(), 0xC3);
    }
}

#[test]
fn map_from_fd_rejects_lengths_beyond_the_file() {
    let a = Region::create(1, 4096, &RegionConfig::default()).unwrap();
    let fd = a.fd().try_clone_to_owned().unwrap();
    let err = Region::map_from_fd(fd, a.len() + 1, 2).unwrap_err();
    assert!(matches!(err, MempoolError::InvalidRegionLength { .. }), "{err:?}");
    let fd = a.fd().try_clone_to_owned().unwrap();
    assert!(Region::map_from_fd(fd, 0, 2).is_err());
    // Not a memory file at all: /dev/null has size 0.
    let null = std::fs::File::open("/dev/null").unwrap();
    assert!(Region::map_from_fd(OwnedFd::from(null), 4096, 2).is_err());
}
