//! [`ReactorHandle`], the cloneable way into a running reactor from any
//! thread, and [`CoreCtx::handle`], which hands one out on a core thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::core_loop::CoreCtx;
use crate::error::{SendError, TrySendError};
use crate::shared::Shared;
use crate::stats::CoreStats;

/// Where a core runs: see [`ReactorHandle::placement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The CPU of the core's configuration (its pin at start-up).
    pub cpu_at_start: usize,
    /// The CPU it is pinned to now (`cpu_at_start` until a crowded-CPU move).
    pub cpu: usize,
    /// Crowded-CPU moves so far.
    pub crowd_moves: u64,
}

/// Cloneable, `Send + Sync` handle to a running reactor: send closures to
/// cores, read statistics, request shutdown. Usable from any thread,
/// including core threads (a send from a core thread is accounted to that
/// core, and stays allowed while the reactor drains).
#[derive(Clone)]
pub struct ReactorHandle {
    shared: Arc<Shared<CoreCtx>>,
}

impl core::fmt::Debug for ReactorHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReactorHandle")
            .field("cores", &self.shared.cores.len())
            .finish_non_exhaustive()
    }
}

impl ReactorHandle {
    pub(crate) fn from_shared(shared: Arc<Shared<CoreCtx>>) -> Self {
        ReactorHandle { shared }
    }

    /// Queues `f` to run on core `core`; see [`CoreCtx::send`]. From a
    /// non-core thread, fails with [`SendError::ShuttingDown`] once shutdown
    /// has begun.
    pub fn send<F>(&self, core: usize, f: F) -> Result<(), SendError>
    where
        F: FnOnce(&mut CoreCtx) + Send + 'static,
    {
        self.shared.send(core, f)
    }

    /// Like [`ReactorHandle::send`], handing the closure back on failure.
    pub fn try_send<F>(&self, core: usize, f: F) -> Result<(), TrySendError<F>>
    where
        F: FnOnce(&mut CoreCtx) + Send + 'static,
    {
        self.shared.try_send(core, f)
    }

    /// Number of cores.
    pub fn num_cores(&self) -> usize {
        self.shared.cores.len()
    }

    /// CPU core `core` was pinned to at start-up (see
    /// [`ReactorHandle::placement`] for where it is now).
    pub fn cpu(&self, core: usize) -> Option<usize> {
        self.shared.cores.get(core).map(|c| c.cpu)
    }

    /// Where core `core` is pinned now and how often the crowded-CPU watcher
    /// moved it (`reactor::crowding`). Any thread.
    pub fn placement(&self, core: usize) -> Option<Placement> {
        self.shared.cores.get(core).map(|c| Placement {
            cpu_at_start: c.cpu,
            cpu: c.home.load(Ordering::Relaxed),
            crowd_moves: c.crowd_moves.load(Ordering::Relaxed),
        })
    }

    /// Last published counters of core `core` (published at least once per
    /// timer tick while the core runs, and when it stops).
    pub fn stats(&self, core: usize) -> Option<CoreStats> {
        self.shared.cores.get(core).map(|c| CoreStats {
            crowd_moves: c.crowd_moves.load(Ordering::Relaxed),
            ..c.stats.snapshot(core, c.home.load(Ordering::Relaxed))
        })
    }

    /// Last published counters of every core.
    pub fn all_stats(&self) -> Vec<CoreStats> {
        (0..self.num_cores()).filter_map(|c| self.stats(c)).collect()
    }

    /// Messages queued to core `core` and not yet taken by it.
    pub fn queued(&self, core: usize) -> Option<usize> {
        self.shared.cores.get(core).map(|c| c.ring.len())
    }

    /// Starts shutdown (idempotent). The reactor's owner collects the
    /// threads with [`Reactor::shutdown`] or [`Reactor::join`].
    pub fn request_stop(&self) {
        self.shared.request_stop();
    }

    /// True once shutdown has been requested.
    pub fn is_stopping(&self) -> bool {
        self.shared.control.stopping.load(Ordering::Acquire)
    }
}

impl CoreCtx {
    /// A handle to the reactor (cloneable, `Send`), e.g. to give to another
    /// thread.
    pub fn handle(&self) -> ReactorHandle {
        ReactorHandle::from_shared(self.shared().clone())
    }
}
