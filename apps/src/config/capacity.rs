//! What a configuration can serve (issue 24 item 5): connections per core,
//! credits, receive buffers, and the pools behind them, derived the way the
//! target sizes its engines. `rpcrdma-target --check-config` prints it;
//! docs/CONFIG.md ("Capacity") explains the arithmetic.

use std::fmt;

use super::{Config, PoolUsage};

/// Most connections one engine serves, whatever the pools allow.
pub const MAX_CONNS_PER_ENGINE: u64 = 1024;

/// The capacity a configuration derives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Cores with role `io` that run an engine (one per fabric listener, in
    /// turn), and all cores (each has a per-core cache of every pool).
    pub engines: u64,
    pub cores: u64,
    /// Credits granted per connection (`credits.max_per_connection`).
    pub credits: u64,
    /// The receive pool: buffers, of which the per-core caches keep
    /// `cores x per_core_cache`; the rest is the engines' budget.
    pub receive_count: u64,
    pub receive_cached: u64,
    pub receive_budget: u64,
    /// Receive buffers one connection may need: `credits` posted on the SRQ
    /// and `credits` held by Calls being served.
    pub receive_per_conn: u64,
    /// What the pools allow per engine before the clamp to
    /// 1..=[`MAX_CONNS_PER_ENGINE`], and the result.
    pub conns_per_core_unclamped: u64,
    pub conns_per_core: u64,
    /// SRQ depth of each engine: `conns_per_core x credits`.
    pub srq_depth: u64,
    /// Send and data buffers (engines queue for them when they run dry: they
    /// bound throughput, not connections).
    pub send_count: u64,
    pub data_count: u64,
    pub data_buffer_bytes: u64,
}

impl Config {
    /// The capacity this configuration derives (see [`Capacity`]).
    pub fn capacity(&self) -> Capacity {
        let cores = self.cores.len() as u64;
        let io = self.io_cores().len() as u64;
        let engines = io.min(self.listeners.fabric.len() as u64).max(1);
        let credits = u64::from(self.credits.max_per_connection.max(1));
        let pool = |u: PoolUsage| self.pools.iter().filter(move |p| p.usage == u);
        let recv = pool(PoolUsage::Receive).max_by_key(|p| p.buffer_size_bytes);
        let receive_count = recv.map_or(0, |p| u64::from(p.count));
        let receive_cached = recv.map_or(0, |p| cores * u64::from(p.per_core_cache));
        let receive_budget = receive_count.saturating_sub(receive_cached);
        let receive_per_conn = 2 * credits;
        let conns_per_core_unclamped = receive_budget / (engines * receive_per_conn);
        let conns_per_core = conns_per_core_unclamped.clamp(1, MAX_CONNS_PER_ENGINE);
        let data = pool(PoolUsage::Data).max_by_key(|p| p.buffer_size_bytes);
        Capacity {
            engines,
            cores,
            credits,
            receive_count,
            receive_cached,
            receive_budget,
            receive_per_conn,
            conns_per_core_unclamped,
            conns_per_core,
            srq_depth: conns_per_core * credits,
            send_count: pool(PoolUsage::Send).map(|p| u64::from(p.count)).sum(),
            data_count: data.map_or(0, |p| u64::from(p.count)),
            data_buffer_bytes: data.map_or(0, |p| u64::from(p.buffer_size_bytes)),
        }
    }
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "capacity: {} connections per engine core ({} engine core(s)), {} credits each",
            self.conns_per_core, self.engines, self.credits
        )?;
        writeln!(
            f,
            "  receive buffers: {} in the pool - {} in per-core caches ({} cores) = {} for the engines",
            self.receive_count, self.receive_cached, self.cores, self.receive_budget
        )?;
        writeln!(
            f,
            "  per connection: {} (2 x {} credits: posted on the SRQ, and held by Calls being served)",
            self.receive_per_conn, self.credits
        )?;
        writeln!(
            f,
            "  connections per core: {} / ({} x {}) = {}{}",
            self.receive_budget,
            self.engines,
            self.receive_per_conn,
            self.conns_per_core_unclamped,
            if self.conns_per_core != self.conns_per_core_unclamped {
                format!(" (clamped to {})", self.conns_per_core)
            } else {
                String::new()
            }
        )?;
        writeln!(
            f,
            "  SRQ depth per core: {} x {} = {} receives posted",
            self.conns_per_core, self.credits, self.srq_depth
        )?;
        write!(
            f,
            "  send buffers: {}; data buffers: {} of {} bytes (engines queue for these when they run dry)",
            self.send_count, self.data_count, self.data_buffer_bytes
        )
    }
}
