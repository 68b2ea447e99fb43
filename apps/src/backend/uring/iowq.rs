//! Where a channel's io-wq workers run, and how many there may be.
//!
//! The kernel completes what io_uring cannot do without blocking (a buffered
//! write it cannot finish under `IOCB_NOWAIT`, every `IORING_OP_FSYNC`) on
//! the submitting task's io-wq worker threads (`iou-wrk-<tid>`). Left alone,
//! the scheduler wakes them on the submitter's CPU, which for a channel is
//! the io core's own pinned CPU: a 1 MiB buffered write then spends its
//! 100 µs-1.5 ms page-cache copy there and pre-empts the reactor thread, and
//! every other client of the core waits for it (issue 21 item 5).
//!
//! A channel therefore registers its task's io-wq affinity
//! (`IORING_REGISTER_IOWQ_AFF`, Linux 5.14) to the CPUs of the process's
//! allowed set that run no reactor core; when every allowed CPU runs a
//! core, to those that run no io core (the admin cores', mostly idle); when
//! none remain (one CPU, or only io cores), it leaves the affinity unset
//! (the rule is [`crate::cpus::off_core_cpus`], which the NFS helper pool's
//! threads follow too).
//! It also bounds the task's io-wq workers (`IORING_REGISTER_IOWQ_MAX_WORKERS`,
//! Linux 5.15) with [`max_workers`]. Both settings belong to the task (the
//! core thread), not to the ring: every ring the thread submits to shares
//! them. A kernel without either registration keeps its defaults (logged at
//! debug level).

use io_uring::IoUring;

pub use crate::cpus::CoreCpus;
use crate::cpus::{cpu_set, off_core_cpus, thread_cpus};

/// Where a backend's channels put their io-wq workers.
#[derive(Clone, Debug)]
pub(crate) struct IoWorkerPolicy {
    /// Register the io-wq affinity at all (the `iowq_off_cores` option).
    pub off_cores: bool,
    /// The process's allowed CPUs when the backend was opened (before the
    /// core threads pinned themselves).
    pub allowed: Vec<usize>,
    /// The reactor's cores.
    pub cores: CoreCpus,
}

impl IoWorkerPolicy {
    /// The policy with the calling thread's allowed CPUs as the process's.
    pub fn new(off_cores: bool) -> IoWorkerPolicy {
        IoWorkerPolicy {
            off_cores,
            allowed: thread_cpus().unwrap_or_default(),
            cores: CoreCpus::default(),
        }
    }
}

/// Largest io-wq worker count per kind (bounded: regular files; unbounded:
/// anything else, which this backend never submits) for a ring of
/// `queue_depth` entries whose workers may use `cpus` CPUs: one worker per
/// four ring entries (most I/O completes without a worker: reads take the
/// page cache's async path, `O_DIRECT` goes to the device, and buffered
/// writes to one file are serialised by the kernel on one worker anyway), at
/// most four per CPU (the kernel's own default bound), at least one.
pub fn max_workers(queue_depth: u32, cpus: usize) -> u32 {
    let per_cpu = u32::try_from(cpus.saturating_mul(4)).unwrap_or(u32::MAX);
    (queue_depth / 4).min(per_cpu).max(1)
}

/// Apply `policy` to the calling thread's io-wq through `ring` (created on
/// this thread). Returns the CPUs registered, `None` when the affinity was
/// left unset. Failures of the kernel (too old) are logged, not returned:
/// the channel works either way.
pub(crate) fn place(ring: &IoUring, policy: &IoWorkerPolicy, queue_depth: u32, core: usize) -> Option<Vec<usize>> {
    let own = thread_cpus().unwrap_or_default();
    let set = if policy.off_cores {
        off_core_cpus(&policy.allowed, &policy.cores, &own)
    } else {
        None
    };
    let registered = match (&set, policy.off_cores) {
        (Some(cpus), _) => match ring.submitter().register_iowq_aff(&cpu_set(cpus)) {
            Ok(()) => {
                tracing::debug!(core, ?cpus, "uring: io-wq workers kept off the reactor's CPUs");
                set.clone()
            }
            Err(e) => {
                tracing::debug!(core, ?cpus, error = %e, "uring: io-wq affinity not registered");
                None
            }
        },
        (None, true) => {
            tracing::debug!(
                core,
                allowed = ?policy.allowed,
                "uring: io-wq affinity left unset: no allowed CPU is free of io cores, or none needs avoiding"
            );
            None
        }
        (None, false) => None,
    };
    let cpus = registered.as_ref().map_or(policy.allowed.len(), Vec::len);
    let n = max_workers(queue_depth, cpus.max(1));
    let mut max = [n, n];
    if let Err(e) = ring.submitter().register_iowq_max_workers(&mut max) {
        tracing::debug!(core, error = %e, "uring: io-wq worker bound not registered");
    }
    registered
}

/// A crowded-CPU move changed where the cores run (`reactor::crowding`):
/// register `cpus` as the calling core thread's io-wq affinity. The setting
/// belongs to the thread's io_uring task context, shared by all its rings,
/// so a small ring made for the purpose carries it (this runs once per
/// move; the channels' rings live in their owners). Workers the kernel
/// starts from now on run on `cpus`; ones already running keep their CPUs
/// until they retire (the kernel ends an idle io-wq worker after a few
/// seconds) because the kernel refuses to move them. `Err` when the thread
/// has no io-wq (it never used io_uring) or the kernel is too old: nothing
/// to follow then. Core thread (the one whose channels' workers these are).
pub fn follow_move(cpus: &[usize]) -> std::io::Result<()> {
    let ring = IoUring::new(2)?;
    ring.submitter().register_iowq_aff(&cpu_set(cpus))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_bound_follows_depth_and_cpus() {
        assert_eq!(max_workers(64, 1), 4);
        assert_eq!(max_workers(64, 8), 16);
        assert_eq!(max_workers(1, 8), 1);
        assert_eq!(max_workers(4096, 2), 8);
    }
}
