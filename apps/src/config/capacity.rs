//! What a configuration can serve (issue 24 item 5): connections per core,
//! credits, receive buffers, and the pools behind them, derived the way the
//! target sizes its engines. `rpcrdma-target --check-config` prints it;
//! docs/CONFIG.md ("Capacity") explains the arithmetic.

use std::fmt;

use super::{BackendConfig, Config, PoolUsage};

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
    /// Most Calls one engine core can have in flight at once, to one
    /// backend or another: `conns_per_core x credits` (each connection's
    /// Calls outstanding are bounded by its credits, RFC 8166 s3.3.1).
    pub calls_in_flight_per_core: u64,
    /// Each `uring` and `nvme` backend and its queue depth, the I/O its
    /// channel on each core takes at once (issue 21 item 4).
    pub backend_queues: Vec<BackendQueue>,
}

/// A backend with a queue of bounded depth per core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendQueue {
    pub name: String,
    /// `"uring"` or `"nvme"`.
    pub kind: &'static str,
    pub queue_depth: u64,
}

impl Capacity {
    /// The backends whose queue depth is below the Calls a core can have in
    /// flight ([`Capacity::calls_in_flight_per_core`]), each as a warning
    /// line. Not an error: a Call that finds its backend's queue full waits
    /// in the engine's backend queue until an I/O completes (no
    /// NFS3ERR_JUKEBOX), so a smaller depth is a bottleneck under full
    /// load, not a failure.
    pub fn queue_warnings(&self) -> Vec<String> {
        self.backend_queues
            .iter()
            .filter(|q| q.queue_depth < self.calls_in_flight_per_core)
            .map(|q| {
                format!(
                    "backend {:?} ({}): queue_depth {} is below the {} Calls a core can have in flight \
                     ({} connections x {} credits); the rest wait in the engine's backend queue",
                    q.name, q.kind, q.queue_depth, self.calls_in_flight_per_core, self.conns_per_core, self.credits
                )
            })
            .collect()
    }
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
            calls_in_flight_per_core: conns_per_core * credits,
            backend_queues: self
                .backends
                .iter()
                .filter_map(|b| match b {
                    BackendConfig::Uring { queue_depth, .. } | BackendConfig::Nvme { queue_depth, .. } => {
                        Some(BackendQueue {
                            name: b.name().to_string(),
                            kind: b.kind(),
                            queue_depth: u64::from(*queue_depth),
                        })
                    }
                    BackendConfig::Mem { .. } => None,
                })
                .collect(),
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
        )?;
        for q in &self.backend_queues {
            let verdict = if q.queue_depth < self.calls_in_flight_per_core {
                "below: the rest wait in the engine's backend queue"
            } else {
                "enough"
            };
            write!(
                f,
                "\n  backend {} ({}): queue depth {} per core for up to {} x {} = {} Calls in flight ({verdict})",
                q.name, q.kind, q.queue_depth, self.conns_per_core, self.credits, self.calls_in_flight_per_core
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    /// The quick-start configuration with `edit` applied.
    fn config_after(edit: impl FnOnce(&mut serde_json::Value)) -> Config {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/cores.json");
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        edit(&mut v);
        Config::from_json_value(&v).unwrap()
    }

    /// issue 21 item 4: a Call that finds its backend's queue full waits in
    /// the engine (no JUKEBOX), so `--check-config` compares each `uring`
    /// and `nvme` queue depth with the Calls a core can have in flight
    /// (connections per core x credits): below it is a warning, never a
    /// refusal; `mem` has no queue. The capacity output shows each.
    #[test]
    fn nfs_safety_check_config_compares_queue_depth_with_in_flight_calls() {
        let with_backends = |count: u64, uring: u32, nvme: u32| {
            config_after(|v| {
                // A receive budget of 4096: 16 connections per core of 128 credits.
                v["pools"][0]["count"] = serde_json::json!(count);
                let b = v["backends"].as_array_mut().unwrap();
                b.push(serde_json::json!({"type": "uring", "name": "u0", "path": "/srv/u0", "queue_depth": uring}));
                b.push(
                    serde_json::json!({"type": "nvme", "name": "n0", "devices": ["/dev/ng0n1"], "queue_depth": nvme}),
                );
            })
        };
        let c = with_backends(4096 + 128, 1024, 2048);
        c.validate().expect("a small queue depth is not an error");
        let cap = c.capacity();
        assert_eq!((cap.conns_per_core, cap.credits), (16, 128));
        assert_eq!(cap.calls_in_flight_per_core, 2048);
        assert_eq!(cap.backend_queues.len(), 2, "mem has no queue: {cap:?}");
        let w = cap.queue_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("\"u0\" (uring): queue_depth 1024 is below the 2048"),
            "{}",
            w[0]
        );
        let text = cap.to_string();
        assert!(
            text.contains(
                "backend u0 (uring): queue depth 1024 per core for up to 16 x 128 = 2048 Calls in flight (below"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "backend n0 (nvme): queue depth 2048 per core for up to 16 x 128 = 2048 Calls in flight (enough)"
            ),
            "{text}"
        );
        // Both at or above the Calls in flight: no warning.
        assert!(with_backends(4096 + 128, 2048, 4096)
            .capacity()
            .queue_warnings()
            .is_empty());
        // Twice the receive budget, twice the connections: 2048 falls short.
        let cap = with_backends(8192 + 128, 2048, 4096).capacity();
        assert_eq!(cap.calls_in_flight_per_core, 4096);
        assert_eq!(cap.queue_warnings().len(), 1, "{:?}", cap.queue_warnings());
        // The quick start has no queued backend.
        assert!(config_after(|_| {}).capacity().queue_warnings().is_empty());
    }
}
