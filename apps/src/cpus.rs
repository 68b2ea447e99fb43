//! Which CPUs the target's own non-reactor threads may use.
//!
//! A reactor core's thread is pinned to its CPU and polls (unless the
//! configuration says `reactor.pin_threads: false`: then no CPU is a core's
//! and nothing is kept off one). Work that blocks
//! (an fsync, `open_by_handle_at`, a record file's write) runs elsewhere: on
//! the kernel's io-wq workers of a core's ring (`backend::uring`'s `iowq`),
//! on the NFS helper pool (`nfs::offload`) and on the NFSv4 record writer
//! (`nfs4::grace`); NFS over TCP runs on its connection threads
//! (`server::tcp`). Each must stay off the io cores' CPUs, or it pre-empts
//! the reactor there and every client of that core waits for it (issue 21
//! item 5). A thread spawned by a core thread inherits the core's pinning,
//! and one spawned by the admin thread may run anywhere, so the pool, the
//! writer, the TCP listener (whose connection threads inherit from it) and
//! the statistics thread set their own affinity when they start
//! ([`OffCores::apply`]), to the set [`off_core_cpus`] computes — the same
//! rule the io-wq registration uses.

use std::sync::{Arc, Mutex};

/// The CPUs of the reactor's cores. Empty lists are allowed (a backend or
/// service used outside a target).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreCpus {
    /// CPUs of every core (io and admin).
    pub reactor: Vec<usize>,
    /// CPUs of the io cores (a subset of `reactor`).
    pub io: Vec<usize>,
}

impl CoreCpus {
    /// The cores of a configuration. Cores that are not pinned
    /// (`reactor.pin_threads: false`) hold no CPU of their own: the lists are
    /// empty and helpers run anywhere, as the cores do.
    pub fn of(cfg: &crate::config::Config) -> CoreCpus {
        if !cfg.reactor.pin_threads {
            return CoreCpus::default();
        }
        CoreCpus {
            reactor: cfg.cores.iter().map(|c| c.cpu as usize).collect(),
            io: cfg.io_cores().iter().map(|&i| cfg.cores[i].cpu as usize).collect(),
        }
    }
}

/// The CPUs that work kept off the cores may use: `allowed` without the
/// reactor's CPUs and without `own` (a submitting thread's CPUs when it is
/// pinned to fewer than `allowed`); failing that, `allowed` without the io
/// cores' CPUs and `own` (the admin cores', mostly idle); `None` when that is
/// empty too, or is all of `allowed` (nothing to keep off). Sorted.
pub fn off_core_cpus(allowed: &[usize], cores: &CoreCpus, own: &[usize]) -> Option<Vec<usize>> {
    let pinned = !own.is_empty() && allowed.iter().any(|c| !own.contains(c));
    let own: &[usize] = if pinned { own } else { &[] };
    let without = |avoid: &[usize]| -> Vec<usize> {
        let mut v: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|c| !avoid.contains(c) && !own.contains(c))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let useful = |v: &Vec<usize>| !v.is_empty() && allowed.iter().any(|c| !v.contains(c));
    let free = without(&cores.reactor);
    if useful(&free) {
        return Some(free);
    }
    let off_io = without(&cores.io);
    useful(&off_io).then_some(off_io)
}

/// Where a helper thread of the target runs: the process's allowed CPUs
/// (taken when this is built, on the thread that starts the target, before
/// the cores pin themselves) and the reactor's cores, as they are now: a
/// crowded-CPU move (`reactor::crowding`) changes a core's CPU, and
/// [`OffCores::follow_move`] moves the helpers with it. Clones share the
/// cores' placement.
#[derive(Clone, Debug, Default)]
pub struct OffCores {
    allowed: Vec<usize>,
    /// The cores' CPUs now (the configuration's until a move).
    cores: Arc<Mutex<CoreCpus>>,
    /// Which cores (indices into `CoreCpus::reactor`) are io cores.
    io_index: Vec<usize>,
}

/// What [`OffCores::follow_move`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Followed {
    /// The helpers' CPUs before the move.
    pub from: Vec<usize>,
    /// The helpers' CPUs after it.
    pub to: Vec<usize>,
    /// Threads moved from `from` to `to`.
    pub threads: usize,
    /// Threads confined to `from` that could not be moved.
    pub failed: usize,
}

impl OffCores {
    /// With the calling thread's allowed CPUs as the process's.
    pub fn new(cores: CoreCpus) -> OffCores {
        OffCores::with_allowed(thread_cpus().unwrap_or_default(), cores)
    }

    /// With `allowed` as the process's CPUs. The io cores are those of
    /// `cores.reactor` whose CPU is in `cores.io` (a configuration lists no
    /// CPU twice).
    pub fn with_allowed(allowed: Vec<usize>, cores: CoreCpus) -> OffCores {
        let io_index = (0..cores.reactor.len())
            .filter(|&i| cores.io.contains(&cores.reactor[i]))
            .collect();
        OffCores {
            allowed,
            cores: Arc::new(Mutex::new(cores)),
            io_index,
        }
    }

    fn cores(&self) -> CoreCpus {
        self.cores.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The CPUs a helper thread may use: [`off_core_cpus`] of the allowed
    /// set, or the whole allowed set when nothing can be (or need be) kept
    /// off (it still undoes a core's pinning a spawned thread inherits).
    /// Empty when the allowed set is unknown.
    pub fn cpus(&self) -> Vec<usize> {
        off_core_cpus(&self.allowed, &self.cores(), &[]).unwrap_or_else(|| self.allowed.clone())
    }

    /// The cores are now on `homes` (by core index, as the reactor reports
    /// a crowded-CPU move): the helpers' CPUs are worked out again, and
    /// every thread of the process that was confined to the old set is
    /// moved to the new one, except `keep` (the core threads, whose own
    /// pinning may equal it). `None` when nothing changed (or the cores are
    /// not pinned). io-wq workers cannot be moved this way (the kernel
    /// refuses to set their affinity): their channels register the new set
    /// ([`crate::backend::uring::follow_move`]). Called by the reactor's
    /// watcher thread, never a core.
    pub fn follow_move(&self, homes: &[usize], keep: &[libc::pid_t]) -> Option<Followed> {
        let from = self.cpus();
        {
            let mut c = self.cores.lock().unwrap_or_else(|e| e.into_inner());
            if c.reactor.is_empty() || homes.len() != c.reactor.len() {
                return None;
            }
            c.reactor = homes.to_vec();
            c.io = self.io_index.iter().map(|&i| homes[i]).collect();
        }
        let to = self.cpus();
        if to == from || to.is_empty() {
            return None;
        }
        let (mut threads, mut failed) = (0, 0);
        let tasks = std::fs::read_dir("/proc/self/task").ok()?;
        for tid in tasks
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse::<libc::pid_t>().ok())
        {
            if keep.contains(&tid) || thread_cpus_of(tid).as_deref() != Some(&from[..]) {
                continue;
            }
            match reactor::affinity::set_thread_cpus(tid, &to) {
                Ok(()) => threads += 1,
                // Exited in the meantime.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(_) => failed += 1,
            }
        }
        Some(Followed {
            from,
            to,
            threads,
            failed,
        })
    }

    /// Set the calling thread's affinity to [`OffCores::cpus`]; nothing when
    /// that is empty. Failures are logged: the thread works either way.
    pub fn apply(&self) {
        let cpus = self.cpus();
        if cpus.is_empty() {
            return;
        }
        if let Err(e) = set_thread_cpus(&cpus) {
            tracing::debug!(?cpus, error = %e, "helper thread affinity not set");
        }
    }
}

pub(crate) use reactor::affinity::cpu_set;
pub use reactor::affinity::{thread_cpus, thread_cpus_of};

/// Restrict the calling thread to `cpus`.
pub fn set_thread_cpus(cpus: &[usize]) -> std::io::Result<()> {
    reactor::affinity::set_thread_cpus(0, cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(reactor: &[usize], io: &[usize]) -> CoreCpus {
        CoreCpus {
            reactor: reactor.to_vec(),
            io: io.to_vec(),
        }
    }

    #[test]
    fn off_core_cpus_avoid_reactor_then_io_cores() {
        let all = [0, 1, 2, 3];
        assert_eq!(off_core_cpus(&all, &cores(&[0, 1], &[1]), &[1]), Some(vec![2, 3]));
        // Every CPU runs a core: the admin core's CPU.
        assert_eq!(off_core_cpus(&[0, 1], &cores(&[0, 1], &[1]), &[1]), Some(vec![0]));
        // Only io cores: nothing left.
        assert_eq!(off_core_cpus(&[0, 1], &cores(&[0, 1], &[0, 1]), &[1]), None);
        assert_eq!(off_core_cpus(&[0], &cores(&[], &[]), &[0]), None);
        // No core list: the opening thread's own CPU when it is pinned ...
        assert_eq!(off_core_cpus(&all, &CoreCpus::default(), &[0]), Some(vec![1, 2, 3]));
        // ... and nothing when it is not, or there is one CPU.
        assert_eq!(off_core_cpus(&all, &CoreCpus::default(), &all), None);
        assert_eq!(off_core_cpus(&[0], &CoreCpus::default(), &[]), None);
    }

    #[test]
    fn helper_cpus_fall_back_to_the_allowed_set() {
        let p = |allowed: &[usize], c: CoreCpus| OffCores::with_allowed(allowed.to_vec(), c);
        assert_eq!(p(&[0, 1, 2, 3], cores(&[0, 1], &[1])).cpus(), vec![2, 3]);
        assert_eq!(p(&[0, 1], cores(&[0, 1], &[1])).cpus(), vec![0]);
        // Only io cores: anywhere allowed (not the inherited core's CPU alone).
        assert_eq!(p(&[0, 1], cores(&[0, 1], &[0, 1])).cpus(), vec![0, 1]);
        assert_eq!(p(&[0, 1], CoreCpus::default()).cpus(), vec![0, 1]);
        assert!(p(&[], cores(&[0], &[0])).cpus().is_empty());
    }

    #[test]
    fn cpu_set_round_trip() {
        let set = cpu_set(&[0, 3, 5000]);
        // SAFETY: reads within the set.
        let got: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect();
        assert_eq!(got, vec![0, 3]);
    }
}
