//! The reactor's part of `cores.json`: the core list (CPU and role of each
//! core) and the optional `reactor` section (idle policy, message rings,
//! timer wheel, drain timeout), with [`reactor_options`] turning them into
//! [`ReactorOptions`]. Plain serde data; usable from any thread.
//!
//! The rest of the file (listeners, fabric, pools, credits, inline sizes,
//! backends, exports), the loader that reports every problem with its JSON
//! path, and the cross-field checks belong to the application that owns
//! them (`rpcrdma-apps`'s `config` module), which embeds these types.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::crowding::CrowdRule;
use crate::idle::IdlePolicy;
use crate::options::ReactorOptions;

/// One core: the CPU it is pinned to and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoreConfig {
    /// CPU number (as in `/proc/cpuinfo`).
    pub cpu: u32,
    /// Role of the core.
    pub role: CoreRole,
}

/// What a core runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CoreRole {
    /// Data path: connections, RPC processing, backend I/O.
    Io,
    /// Control path: connection management, MOUNT, statistics.
    Admin,
}

/// Reactor tuning; every field is optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReactorConfig {
    /// Pin each core's thread to its `cpu` (default `true`). `false`: every
    /// core thread may run on any CPU the process may use and the kernel's
    /// scheduler places it (and moves it off a CPU that other work needs);
    /// `cpu` then only names the core. See docs/CONFIG.md for when each
    /// helps (the shipped configurations pin).
    pub pin_threads: bool,
    /// With pinned cores, pin a core whose CPU other threads crowd to an
    /// idle CPU of the process instead (default `true`; the rule and its
    /// figures: [`crate::crowding`], docs/CONFIG.md).
    pub move_when_crowded: bool,
    /// Idle policy (default spin 1000 loops, then sleep up to 100 µs).
    pub idle: IdlePolicy,
    /// Slots of each core's message ring, a power of two (default 1024).
    pub message_ring_size: u32,
    /// Messages run per loop iteration (default 32).
    pub message_batch: u32,
    /// Timer tick in microseconds (default 1000).
    pub timer_tick_us: u32,
    /// Timer wheel buckets, a power of two (default 256).
    pub timer_slots: u32,
    /// Timers per core (default 1024).
    pub max_timers: u32,
    /// Shutdown drain timeout in milliseconds (default 10000).
    pub drain_timeout_ms: u32,
}

impl Default for ReactorConfig {
    fn default() -> Self {
        ReactorConfig {
            pin_threads: true,
            move_when_crowded: true,
            idle: IdlePolicy::default(),
            message_ring_size: 1024,
            message_batch: 32,
            timer_tick_us: 1000,
            timer_slots: 256,
            max_timers: 1024,
            drain_timeout_ms: 10_000,
        }
    }
}

/// Reactor options for `cores` (in core-index order) and the `reactor`
/// section (threads pinned unless it says `pin_threads: false`). Not checked
/// here: [`ReactorOptions::check`] runs when the reactor starts.
pub fn reactor_options(cores: &[CoreConfig], reactor: &ReactorConfig) -> ReactorOptions {
    let cpus: Vec<usize> = cores.iter().map(|c| c.cpu as usize).collect();
    let mut o = ReactorOptions::new(&cpus);
    o.pin_threads = reactor.pin_threads;
    o.crowd_move = reactor.move_when_crowded.then(CrowdRule::default);
    o.idle = reactor.idle;
    o.ring_capacity = reactor.message_ring_size as usize;
    o.message_batch = reactor.message_batch as usize;
    o.timer_tick = Duration::from_micros(u64::from(reactor.timer_tick_us));
    o.timer_slots = reactor.timer_slots as usize;
    o.max_timers = reactor.max_timers as usize;
    o.drain_timeout = Duration::from_millis(u64::from(reactor.drain_timeout_ms));
    o
}
