//! Error types of the mempool crate.
//!
//! Start-up and syscall failures are [`MempoolError`] (a `thiserror` enum that
//! carries the failing `io::Error` as its `#[source]`). Hot-path failures on a
//! single buffer are the small `Copy` enum [`BufError`], so that `put_bulk`
//! never allocates or formats.

use std::io;

use crate::pool::BufRef;

/// Errors from creating rings, regions and pools (start-up paths).
#[derive(Debug, thiserror::Error)]
pub enum MempoolError {
    /// A ring capacity was zero, not a power of two, or above
    /// [`crate::ring::MAX_CAPACITY`].
    #[error("ring capacity {requested} is not a power of two in 1..={max}")]
    InvalidCapacity {
        /// The capacity asked for.
        requested: usize,
        /// The largest capacity accepted.
        max: usize,
    },
    /// A system call failed.
    #[error("{call} failed while {what}")]
    Syscall {
        /// Name of the system call (`mmap`, `memfd_create`, ...).
        call: &'static str,
        /// What the crate was doing.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A region length was zero, overflowed, or did not fit the backing file.
    #[error("invalid region length {len} bytes: {reason}")]
    InvalidRegionLength {
        /// The length asked for.
        len: usize,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// Hugepages were required (`RegionConfig::allow_fallback == false`) but
    /// could not be mapped.
    #[error("{page_size}-byte hugepages required but could not be mapped (reserve them with vm.nr_hugepages or scripts/hugepages.sh)")]
    HugepagesUnavailable {
        /// Hugepage size asked for, in bytes.
        page_size: usize,
        /// The error from the hugetlb attempt.
        #[source]
        source: io::Error,
    },
    /// The pool plan is inconsistent (sizes, counts, caches or classes).
    #[error("invalid pool plan: {0}")]
    InvalidPlan(String),
    /// A class id did not name a class of this pool.
    #[error("unknown size class {0}")]
    UnknownClass(u8),
    /// A per-core cache slot was out of range or already claimed.
    #[error("cache slot for class {class} core {core} is {reason}")]
    CacheSlot {
        /// Class index.
        class: u8,
        /// Core index asked for.
        core: usize,
        /// "out of range" or "already claimed".
        reason: &'static str,
    },
    /// A buffer operation failed.
    #[error(transparent)]
    Buf(#[from] BufError),
}

impl MempoolError {
    /// Wraps `io::Error::last_os_error()` for a failed call.
    pub(crate) fn last_os(call: &'static str, what: &'static str) -> Self {
        MempoolError::Syscall {
            call,
            what,
            source: io::Error::last_os_error(),
        }
    }
}

/// Errors about one buffer handle, returned on the hot path. `Copy`, no
/// allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BufError {
    /// The handle names a region, class or index that this pool (or this
    /// cache's class) does not have.
    #[error("buffer handle {0:?} does not belong to this pool or cache")]
    Foreign(BufRef),
    /// Debug builds: the buffer was already free when it was put back.
    #[error("double free of buffer {0:?}")]
    DoubleFree(BufRef),
    /// Debug builds: the guard bytes after the buffer were overwritten. The
    /// buffer has been returned to the pool and its guard restored.
    #[error("overrun past the end of buffer {0:?}")]
    Overrun(BufRef),
    /// The shared free ring refused a buffer. Only possible after a double
    /// free went undetected (release builds); the buffer was dropped from the
    /// pool to keep the ring consistent.
    #[error("free ring full while returning buffer {0:?}; pool accounting is corrupt")]
    RingFull(BufRef),
}
