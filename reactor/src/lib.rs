//! Per-core run-to-completion reactor for the rpcrdma data plane, in the
//! style of SPDK's reactors and DPDK's lcores, plus the reactor's part of
//! `cores.json` ([`config`]: cores, roles, reactor tuning).
//!
//! * One thread per configured core, pinned to its CPU
//!   ([`ReactorOptions::cpus`]); a CPU that does not exist is reported as
//!   [`ReactorError::CpuUnavailable`] at start.
//! * Each core busy-polls its [`Poller`]s, runs closure messages sent to it
//!   by any thread ([`ReactorHandle::send`], [`CoreCtx::send`] — SPDK's
//!   `spdk_thread_send_msg`), and fires its coarse timer wheel
//!   ([`CoreCtx::schedule_timer`]). What an idle core does is an
//!   [`IdlePolicy`]: spin, spin then pause, or spin then a bounded sleep.
//! * Messages travel over bounded lock-free MPMC rings
//!   ([`mempool::ring::Ring`]), one inbound ring per core, drained in
//!   batches. A full ring is an error for the sender ([`SendError::Full`]);
//!   nothing blocks. Closures up to [`INLINE_MESSAGE_BYTES`] travel inline
//!   without allocation; larger ones are boxed (one allocation each).
//! * [`Reactor::shutdown`] drains every ring and poller until the reactor is
//!   quiescent, joins the threads and returns per-core [`CoreStats`], which
//!   are also readable while running ([`ReactorHandle::stats`]).
//!
//! # Modules and their direction
//!
//! Each module uses only those listed before it (no import circle):
//!
//! | module | what | uses |
//! |---|---|---|
//! | `error`, `idle`, `stats`, `timer` | errors, idle policies, counters, the timer wheel | (`error` only, for `timer`) |
//! | [`affinity`] | thread CPU sets (`sched_getaffinity` / `sched_setaffinity`) | nothing |
//! | [`crowding`] | the crowded-CPU move: its rule, decision (sans IO) and watcher thread | `affinity` |
//! | `msg` | type-erased closure records, generic over the context they receive | nothing |
//! | `options` | [`ReactorOptions`] and its limits | `error`, `idle`, `timer`, `crowding` |
//! | `shared` | what cores and handles share: per-core rings and counters, the send path, the shutdown detector (generic over the context) | `msg`, `options`, `stats`, `error` |
//! | `core_loop` | [`Poller`], [`CoreCtx`] and the per-core loop; fixes the context to `CoreCtx` | `shared`, `msg`, `timer`, `idle`, `stats`, `error` |
//! | `handle` | [`ReactorHandle`] (and [`CoreCtx::handle`]) | `shared`, `core_loop` |
//! | `reactor` | [`Reactor`], [`ReactorBuilder`]: start-up, core threads, the crowded-CPU watcher, shutdown | `handle`, `core_loop`, `shared`, `options`, `crowding` |
//! | [`config`] | the reactor's part of `cores.json` and [`config::reactor_options`] | `options`, `idle`, `crowding` |
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use reactor::{IdlePolicy, Reactor, ReactorOptions};
//!
//! let mut opts = ReactorOptions::new(&[0]);
//! opts.idle = IdlePolicy::SpinThenSleep { idle_loops: 100, max_sleep_us: 100 };
//! let r = Reactor::start(opts).unwrap();
//! let hits = Arc::new(AtomicU64::new(0));
//! let h = hits.clone();
//! r.handle().send(0, move |ctx| {
//!     assert_eq!(ctx.core(), 0);
//!     h.fetch_add(1, Ordering::Relaxed);
//! }).unwrap();
//! let stats = r.shutdown().unwrap(); // queued messages run before exit
//! assert_eq!(hits.load(Ordering::Relaxed), 1);
//! assert_eq!(stats[0].messages_handled, 1);
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod affinity;
pub mod clock;
pub mod config;
mod core_loop;
pub mod crowding;
pub mod error;
mod handle;
pub mod idle;
pub mod loop_timing;
mod msg;
mod options;
mod reactor;
mod shared;
pub mod stats;
pub mod timer;
pub mod waiter;

pub use crate::core_loop::{Arm, CoreCtx, PollStatus, Poller, PollerId};
pub use crate::crowding::CrowdRule;
pub use crate::error::{ReactorError, SendError, TimerError, TrySendError};
pub use crate::handle::{Placement, ReactorHandle};
pub use crate::idle::IdlePolicy;
pub use crate::options::{ReactorOptions, MAX_CORES, MAX_MESSAGE_BATCH};
pub use crate::reactor::{CrowdMove, CrowdMoved, Reactor, ReactorBuilder};
pub use crate::shared::on_core_thread;
pub use crate::stats::CoreStats;
pub use crate::timer::TimerId;

/// A closure message capturing at most this many bytes (with at most
/// pointer alignment) is sent without any allocation; larger closures are
/// boxed.
pub const INLINE_MESSAGE_BYTES: usize = msg::INLINE_BYTES;

/// Whether sending a closure of type `F` allocates (`false`) or not.
pub const fn message_is_inline<F>() -> bool {
    msg::fits_inline::<F>()
}
