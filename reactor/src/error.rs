//! Error types of the reactor crate.
//!
//! Start-up, shutdown and thread failures are [`ReactorError`]. The message
//! path returns the small `Copy` enum [`SendError`] (or [`TrySendError`],
//! which hands the closure back), and the timer API returns [`TimerError`],
//! so that neither allocates nor formats on failure.

use std::io;

use mempool::MempoolError;

/// Errors from starting, running or shutting down a [`crate::Reactor`].
#[derive(Debug, thiserror::Error)]
pub enum ReactorError {
    /// The options were inconsistent (no cores, a capacity that is not a
    /// power of two, a zero batch, ...).
    #[error("invalid reactor options: {0}")]
    InvalidOptions(String),
    /// The same CPU was listed for two cores.
    #[error("cpu {cpu} is configured for core {first} and core {second}")]
    DuplicateCpu {
        /// The repeated CPU number.
        cpu: usize,
        /// Index of the first core that uses it.
        first: usize,
        /// Index of the second core that uses it.
        second: usize,
    },
    /// A configured CPU is not in this process's affinity mask (it does not
    /// exist on this machine, is offline, or is excluded by a cpuset).
    #[error("core {core} wants cpu {cpu}, which is not available to this process (available cpus: {available:?})")]
    CpuUnavailable {
        /// Core index.
        core: usize,
        /// The CPU asked for.
        cpu: usize,
        /// The CPUs this process may run on.
        available: Vec<usize>,
    },
    /// The operating system could not list the CPUs this process may use.
    #[error("cannot list the cpus available to this process")]
    CpuListUnavailable,
    /// Pinning a core thread to its CPU failed.
    #[error("pinning core {core} to cpu {cpu} failed")]
    PinFailed {
        /// Core index.
        core: usize,
        /// The CPU asked for.
        cpu: usize,
    },
    /// Spawning a core thread failed.
    #[error("spawning the thread of core {core} failed")]
    Spawn {
        /// Core index.
        core: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Creating a message ring failed.
    #[error("creating the message ring of core {core} failed")]
    Ring {
        /// Core index.
        core: usize,
        /// The ring error.
        #[source]
        source: MempoolError,
    },
    /// A core thread panicked (in a poller, a message closure, a timer
    /// callback or the start-up hook). Messages still queued to that core
    /// were dropped without running.
    #[error("core {core} (cpu {cpu}) panicked: {message}")]
    CorePanicked {
        /// Core index.
        core: usize,
        /// Its CPU.
        cpu: usize,
        /// The panic payload, if it was a string.
        message: String,
    },
    /// Shutdown did not reach quiescence in time: this core still had work
    /// when its drain timeout expired (a poller kept returning `Busy` from
    /// `drain`, or messages kept circulating). The other cores were stopped
    /// without finishing their drain.
    #[error("core {core} did not drain within {timeout_ms} ms")]
    DrainTimeout {
        /// Core index that gave up first.
        core: usize,
        /// The configured drain timeout.
        timeout_ms: u64,
    },
}

/// Why a message could not be queued. Small and `Copy`: the send path never
/// allocates or formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The destination's bounded message ring is full. Back off (run your own
    /// loop, retry later) — the reactor never blocks a sender.
    #[error("message ring of core {core} is full")]
    Full {
        /// Destination core index.
        core: usize,
    },
    /// The destination index is not a core of this reactor.
    #[error("no core {core}: the reactor has {cores} cores")]
    NoSuchCore {
        /// Destination asked for.
        core: usize,
        /// Number of cores.
        cores: usize,
    },
    /// Shutdown has begun and the sender is not a core of this reactor; only
    /// core threads may still send while the reactor drains.
    #[error("the reactor is shutting down")]
    ShuttingDown,
    /// The destination core has stopped: its thread panicked (or the reactor
    /// aborted), or, to a sender on another core, it drained and exited
    /// during shutdown. An external sender is told [`SendError::ShuttingDown`]
    /// for a clean shutdown instead, however far it has got.
    #[error("core {core} has stopped")]
    CoreStopped {
        /// Destination core index.
        core: usize,
    },
}

/// A failed `try_send`: the reason plus the closure, handed back unrun.
pub struct TrySendError<F> {
    /// Why the message was not queued.
    pub error: SendError,
    /// The closure that was not queued.
    pub closure: F,
}

impl<F> core::fmt::Debug for TrySendError<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TrySendError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<F> core::fmt::Display for TrySendError<F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.error, f)
    }
}

impl<F> std::error::Error for TrySendError<F> {}

/// Why a timer could not be scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    /// All `max_timers` entries of this core's wheel are in use.
    #[error("timer wheel is full ({capacity} timers)")]
    Full {
        /// The wheel's capacity.
        capacity: usize,
    },
    /// The core is draining for shutdown; timers no longer fire.
    #[error("the core is shutting down; timers are disabled")]
    ShuttingDown,
    /// A periodic timer needs a period of at least one tick.
    #[error("a periodic timer needs a non-zero period")]
    ZeroPeriod,
}
