//! The `cores.json` configuration: a serde model of the server (cores,
//! listeners, fabric provider, buffer pools, credits, inline thresholds,
//! storage backends and exports), a loader that reports *every* problem with
//! the JSON path of the offending field, and cross-field validation.
//!
//! Loading ([`Config::from_json_str`], [`Config::load`]) first parses the
//! text into a `serde_json::Value` and walks it, so that wrong types,
//! missing fields and unknown fields are all reported at once, each as a
//! [`Problem`] `{ path: "$.pools[1].count", expected, found }`. It then runs
//! [`Config::validate`], the semantic checks (duplicate CPUs, credits versus
//! the receive pool, inline thresholds within the RFC 8797 range, exports
//! naming unknown backends, ...). The serde derives describe the same
//! schema (with `deny_unknown_fields`) for programs that build or print a
//! configuration; a test keeps the walker and the derives in agreement on
//! the example files.
//!
//! Whether the configured CPUs exist is *not* checked here: that happens
//! when the reactor starts ([`reactor::ReactorError::CpuUnavailable`]), so a
//! configuration can be validated on another machine.
//!
//! The field reference with defaults is in `docs/CONFIG.md`.
//!
//! The module's files, one job each: `model` (the serde types), `network`
//! (client networks in exports), `error` (problems and load errors), `load`
//! (the JSON walker that reports every structural problem), `validate` (the
//! cross-field checks).

mod capacity;
mod error;
mod load;
mod model;
mod network;
mod validate;

pub use capacity::{Capacity, MAX_CONNS_PER_ENGINE};
pub use error::{ConfigError, ConfigProblems, Problem};
pub use model::*;
pub use network::{parse_network, IpNetwork};
pub use reactor::config::{CoreConfig, CoreRole, ReactorConfig};
use reactor::ReactorOptions;

/// Smallest inline threshold: the RPC-over-RDMA version 1 default (RFC 8166
/// §3.3.3) and the smallest size the RFC 8797 private data can express.
pub const INLINE_MIN_BYTES: u32 = 1024;
/// Largest inline threshold expressible in RFC 8797 private data (§4.2: one
/// octet counting additional KiB beyond the first, so 256 KiB).
pub const INLINE_MAX_BYTES: u32 = 262_144;
/// Inline thresholds are expressed in units of 1024 octets (RFC 8797 §4.2).
pub const INLINE_UNIT_BYTES: u32 = 1024;

const _: () = assert!(INLINE_MAX_BYTES == 256 * INLINE_UNIT_BYTES);
const _: () = assert!(INLINE_MIN_BYTES / INLINE_UNIT_BYTES * INLINE_UNIT_BYTES == INLINE_MIN_BYTES);

/// Largest message ring accepted in the configuration.
pub const MAX_MESSAGE_RING: u32 = 1 << 16;
/// Largest queue depth accepted for `uring` and `nvme` backends.
pub const MAX_QUEUE_DEPTH: u32 = 4096;
/// Largest pool buffer (1 GiB).
pub const MAX_BUFFER_BYTES: u32 = 1 << 30;
/// Longest Unix socket path (`sun_path` is 108 bytes including the NUL).
pub const MAX_SOCKET_PATH_BYTES: usize = 107;
/// Most connections per TCP listener (each is served by its own thread).
pub const MAX_TCP_CONNS: u64 = 4096;
/// Longest shutdown grace for TCP connections (a supervisor's stop timeout is
/// usually well under two minutes).
pub const MAX_TCP_SHUTDOWN_GRACE_MS: u64 = 60_000;

impl Config {
    /// The configuration as pretty-printed JSON (loads back to an equal
    /// value).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reactor options for these cores and the `reactor` section (cores in
    /// list order; threads pinned unless `reactor.pin_threads` is false).
    pub fn reactor_options(&self) -> ReactorOptions {
        reactor::config::reactor_options(&self.cores, &self.reactor)
    }

    /// Indices of the cores with role `io`.
    pub fn io_cores(&self) -> Vec<usize> {
        (0..self.cores.len())
            .filter(|&i| self.cores[i].role == CoreRole::Io)
            .collect()
    }

    /// The backend named `name`.
    pub fn backend(&self, name: &str) -> Option<&BackendConfig> {
        self.backends.iter().find(|b| b.name() == name)
    }

    /// The receive pool (validation guarantees exactly one).
    pub fn receive_pool(&self) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.usage == PoolUsage::Receive)
    }
}
