//! Cross-field (semantic) validation of a parsed configuration.

use std::fmt;

use reactor::idle::{IdlePolicy, MAX_SLEEP_US, MAX_SPIN_US, MAX_WAIT_MS};
use reactor::{MAX_CORES, MAX_MESSAGE_BATCH};

use super::*;

struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn push(&mut self, path: String, expected: impl Into<String>, found: impl fmt::Display) {
        self.problems.push(Problem {
            path,
            expected: expected.into(),
            found: found.to_string(),
        });
    }

    /// Reports `value` at `path` unless `lo <= value <= hi`.
    fn range(&mut self, path: String, value: u64, lo: u64, hi: u64) {
        if value < lo || value > hi {
            self.push(path, format!("a value in {lo}..={hi}"), value);
        }
    }

    fn pow2(&mut self, path: String, value: u64, lo: u64, hi: u64) {
        if !value.is_power_of_two() || value < lo || value > hi {
            self.push(path, format!("a power of two in {lo}..={hi}"), value);
        }
    }
}

impl Config {
    /// Cross-field checks; returns every problem found. Does not check that
    /// the CPUs exist on this machine (the reactor does that at start).
    pub fn validate(&self) -> Result<(), ConfigProblems> {
        let mut c = Checker { problems: Vec::new() };
        self.check_cores(&mut c);
        self.check_reactor(&mut c);
        self.check_listeners(&mut c);
        self.check_fabric(&mut c);
        self.check_inline(&mut c);
        self.check_pools_and_credits(&mut c);
        self.check_backends(&mut c);
        self.check_exports(&mut c);
        if c.problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigProblems(c.problems))
        }
    }

    fn check_cores(&self, c: &mut Checker) {
        if self.cores.is_empty() || self.cores.len() > MAX_CORES {
            c.push(
                "$.cores".into(),
                format!("1..={MAX_CORES} cores"),
                format!("{} core(s)", self.cores.len()),
            );
        }
        for (j, core) in self.cores.iter().enumerate() {
            if let Some(i) = self.cores[..j].iter().position(|o| o.cpu == core.cpu) {
                c.push(
                    format!("$.cores[{j}].cpu"),
                    format!(
                        "a cpu not used by another core (cpu {} is already $.cores[{i}].cpu)",
                        core.cpu
                    ),
                    core.cpu,
                );
            }
        }
        if !self.cores.is_empty() && !self.cores.iter().any(|k| k.role == CoreRole::Io) {
            c.push("$.cores".into(), "at least one core with role \"io\"", "none");
        }
    }

    fn check_reactor(&self, c: &mut Checker) {
        let r = &self.reactor;
        c.pow2(
            "$.reactor.message_ring_size".into(),
            u64::from(r.message_ring_size),
            2,
            u64::from(MAX_MESSAGE_RING),
        );
        let batch_max = (MAX_MESSAGE_BATCH as u64).min(u64::from(r.message_ring_size.max(1)));
        c.range(
            "$.reactor.message_batch".into(),
            u64::from(r.message_batch),
            1,
            batch_max,
        );
        c.range(
            "$.reactor.timer_tick_us".into(),
            u64::from(r.timer_tick_us),
            1,
            1_000_000,
        );
        c.pow2(
            "$.reactor.timer_slots".into(),
            u64::from(r.timer_slots),
            1,
            reactor::timer::MAX_SLOTS as u64,
        );
        c.range(
            "$.reactor.max_timers".into(),
            u64::from(r.max_timers),
            1,
            reactor::timer::MAX_TIMERS as u64,
        );
        c.range(
            "$.reactor.drain_timeout_ms".into(),
            u64::from(r.drain_timeout_ms),
            1,
            u64::from(u32::MAX),
        );
        if let IdlePolicy::SpinThenSleep { max_sleep_us, .. } = r.idle {
            c.range(
                "$.reactor.idle.max_sleep_us".into(),
                u64::from(max_sleep_us),
                1,
                u64::from(MAX_SLEEP_US),
            );
        }
        if let IdlePolicy::SpinThenWait {
            spin_us,
            max_spin_us,
            max_wait_ms,
            fallback_sleep_us,
        } = r.idle
        {
            let idle = "$.reactor.idle";
            c.range(format!("{idle}.spin_us"), u64::from(spin_us), 0, u64::from(MAX_SPIN_US));
            c.range(
                format!("{idle}.max_spin_us"),
                u64::from(max_spin_us),
                0,
                u64::from(MAX_SPIN_US),
            );
            c.range(
                format!("{idle}.max_wait_ms"),
                u64::from(max_wait_ms),
                1,
                u64::from(MAX_WAIT_MS),
            );
            c.range(
                format!("{idle}.fallback_sleep_us"),
                u64::from(fallback_sleep_us),
                1,
                u64::from(MAX_SLEEP_US),
            );
        }
    }

    fn check_listeners(&self, c: &mut Checker) {
        let l = &self.listeners;
        if l.fabric.is_empty() {
            c.push(
                "$.listeners.fabric".into(),
                "at least one fabric listener",
                "an empty list",
            );
        }
        for (i, fl) in l.fabric.iter().enumerate() {
            let base = format!("$.listeners.fabric[{i}]");
            if fl.port == 0 {
                c.push(format!("{base}.port"), "a port in 1..=65535", 0);
            }
            if fl.versions.is_empty() {
                c.push(
                    format!("{base}.versions"),
                    "a non-empty list of protocol versions (1, 2)",
                    "an empty list",
                );
            }
            for (j, ver) in fl.versions.iter().enumerate() {
                if !(1..=2).contains(ver) {
                    c.push(format!("{base}.versions[{j}]"), "RPC-over-RDMA version 1 or 2", ver);
                } else if fl.versions[..j].contains(ver) {
                    c.push(
                        format!("{base}.versions[{j}]"),
                        "each version listed once",
                        format!("version {ver} again"),
                    );
                }
            }
            if let Some(k) = l.fabric[..i]
                .iter()
                .position(|o| o.address == fl.address && o.port == fl.port)
            {
                c.push(
                    base.clone(),
                    format!("an address and port not used by $.listeners.fabric[{k}]"),
                    format!("{} port {} again", fl.address, fl.port),
                );
            }
            if let FabricConfig::Verbs { ip, .. } = &self.fabric {
                if !fl.address.is_unspecified() && fl.address != *ip {
                    c.push(
                        format!("{base}.address"),
                        format!("the verbs device address $.fabric.ip ({ip}) or an unspecified address"),
                        fl.address,
                    );
                }
            }
        }
        if l.nfs_tcp_port == 0 {
            c.push("$.listeners.nfs_tcp_port".into(), "a port in 1..=65535", 0);
        }
        let t = &l.tcp;
        c.range(
            "$.listeners.tcp.max_conns".into(),
            u64::from(t.max_conns),
            1,
            MAX_TCP_CONNS,
        );
        for (key, ms) in [
            ("idle_timeout_ms", t.idle_timeout_ms),
            ("record_timeout_ms", t.record_timeout_ms),
            ("write_timeout_ms", t.write_timeout_ms),
        ] {
            c.range(format!("$.listeners.tcp.{key}"), u64::from(ms), 1, u64::from(u32::MAX));
        }
        c.range(
            "$.listeners.tcp.shutdown_grace_ms".into(),
            u64::from(t.shutdown_grace_ms),
            0,
            MAX_TCP_SHUTDOWN_GRACE_MS,
        );
        let rb = l.rpcbind.port;
        if rb == 0 {
            c.push("$.listeners.rpcbind.port".into(), "a port in 1..=65535", 0);
        } else if rb == l.nfs_tcp_port || rb == l.mount_tcp_port {
            c.push(
                "$.listeners.rpcbind.port".into(),
                "a port different from $.listeners.nfs_tcp_port and mount_tcp_port",
                rb,
            );
        }
        if l.mount_tcp_port == 0 {
            c.push("$.listeners.mount_tcp_port".into(), "a port in 1..=65535", 0);
        } else if l.mount_tcp_port == l.nfs_tcp_port {
            c.push(
                "$.listeners.mount_tcp_port".into(),
                "a port different from $.listeners.nfs_tcp_port",
                l.mount_tcp_port,
            );
        }
    }

    fn check_fabric(&self, c: &mut Checker) {
        if let Some(s) = self.listeners.stats_socket.as_ref() {
            if !s.starts_with('/') || s.len() > MAX_SOCKET_PATH_BYTES {
                let want = format!("an absolute path of at most {MAX_SOCKET_PATH_BYTES} bytes");
                c.push("$.listeners.stats_socket".into(), want, format!("{s:?}"));
            }
        }
        match &self.fabric {
            FabricConfig::Shm { socket_path } => {
                if !socket_path.starts_with('/') || socket_path.len() > MAX_SOCKET_PATH_BYTES {
                    c.push(
                        "$.fabric.socket_path".into(),
                        format!("an absolute path of at most {MAX_SOCKET_PATH_BYTES} bytes"),
                        format!("{socket_path:?}"),
                    );
                }
            }
            FabricConfig::Verbs { device, port_num, .. } => {
                if device.is_empty() || device.contains('/') {
                    c.push(
                        "$.fabric.device".into(),
                        "an RDMA device name such as \"mlx5_0\"",
                        format!("{device:?}"),
                    );
                }
                if *port_num == 0 {
                    c.push("$.fabric.port_num".into(), "a port number >= 1", 0);
                }
            }
            FabricConfig::Sim { loss_ppm, .. } => {
                c.range("$.fabric.loss_ppm".into(), u64::from(*loss_ppm), 0, 1_000_000);
            }
        }
    }

    /// Largest receive and send inline thresholds among the versions some
    /// listener accepts (both versions if no listener is configured).
    pub fn max_inline_bytes(&self) -> (u32, u32) {
        let mut uses = [false; 2];
        for l in &self.listeners.fabric {
            for v in &l.versions {
                if (1..=2).contains(v) {
                    uses[(*v - 1) as usize] = true;
                }
            }
        }
        if !uses[0] && !uses[1] {
            uses = [true, true];
        }
        let mut recv = 0;
        let mut send = 0;
        for (used, pair) in uses.iter().zip([self.inline.v1, self.inline.v2]) {
            if *used {
                recv = recv.max(pair.receive_bytes);
                send = send.max(pair.send_bytes);
            }
        }
        (recv, send)
    }

    fn check_inline(&self, c: &mut Checker) {
        for (ver, pair) in [("v1", self.inline.v1), ("v2", self.inline.v2)] {
            for (field, value) in [("send_bytes", pair.send_bytes), ("receive_bytes", pair.receive_bytes)] {
                if !(INLINE_MIN_BYTES..=INLINE_MAX_BYTES).contains(&value) || value % INLINE_UNIT_BYTES != 0 {
                    c.push(
                        format!("$.inline.{ver}.{field}"),
                        format!(
                            "a multiple of {INLINE_UNIT_BYTES} in {INLINE_MIN_BYTES}..={INLINE_MAX_BYTES} (RFC 8797 section 4.2)"
                        ),
                        value,
                    );
                }
            }
        }
    }

    fn check_pools_and_credits(&self, c: &mut Checker) {
        if self.pools.is_empty() {
            c.push(
                "$.pools".into(),
                "at least a receive pool and a send pool",
                "an empty list",
            );
        }
        let ncores = self.cores.len().max(1) as u64;
        for (i, pool) in self.pools.iter().enumerate() {
            let base = format!("$.pools[{i}]");
            if pool.name.is_empty() {
                c.push(format!("{base}.name"), "a non-empty name", "\"\"");
            } else if let Some(k) = self.pools[..i].iter().position(|o| o.name == pool.name) {
                c.push(
                    format!("{base}.name"),
                    format!("a name not used by $.pools[{k}]"),
                    format!("{:?}", pool.name),
                );
            }
            c.range(
                format!("{base}.buffer_size_bytes"),
                u64::from(pool.buffer_size_bytes),
                1,
                u64::from(MAX_BUFFER_BYTES),
            );
            if pool.count == 0 {
                c.push(format!("{base}.count"), "at least 1 buffer", 0);
            } else if u64::from(pool.per_core_cache) * ncores > u64::from(pool.count) {
                c.push(
                    format!("{base}.per_core_cache"),
                    format!(
                        "at most count / cores = {} / {} = {} (the per-core caches must not be able to hold every buffer)",
                        pool.count,
                        ncores,
                        u64::from(pool.count) / ncores
                    ),
                    pool.per_core_cache,
                );
            }
        }
        let receive: Vec<usize> = (0..self.pools.len())
            .filter(|&i| self.pools[i].usage == PoolUsage::Receive)
            .collect();
        let send: Vec<usize> = (0..self.pools.len())
            .filter(|&i| self.pools[i].usage == PoolUsage::Send)
            .collect();
        if !self.pools.is_empty() && receive.len() != 1 {
            c.push(
                "$.pools".into(),
                "exactly one pool with usage \"receive\"",
                format!("{}", receive.len()),
            );
        }
        if !self.pools.is_empty() && send.is_empty() {
            c.push("$.pools".into(), "at least one pool with usage \"send\"", "none");
        }
        let (max_recv, max_send) = self.max_inline_bytes();
        if let [r] = receive[..] {
            let pool = &self.pools[r];
            if pool.buffer_size_bytes < max_recv {
                c.push(
                    format!("$.pools[{r}].buffer_size_bytes"),
                    format!(
                        "at least {max_recv} (the largest inline receive threshold of an accepted version, $.inline)"
                    ),
                    pool.buffer_size_bytes,
                );
            }
            let credits = self.credits.max_per_connection;
            if credits == 0 || credits > pool.count {
                c.push(
                    "$.credits.max_per_connection".into(),
                    format!(
                        "a value in 1..={} (one posted receive buffer per credit, $.pools[{r}].count)",
                        pool.count
                    ),
                    credits,
                );
            } else {
                // At least one connection per engine at full credits
                // (docs/CONFIG.md, "Capacity"); the target used to start
                // anyway, with one connection per core.
                let cap = self.capacity();
                if cap.conns_per_core_unclamped == 0 {
                    c.push(
                        format!("$.pools[{r}].count"),
                        format!(
                            "at least {} (per-core caches {} + {} engine(s) x 2 x {} credits, for one connection per core)",
                            cap.receive_cached + cap.engines * cap.receive_per_conn,
                            cap.receive_cached,
                            cap.engines,
                            cap.credits
                        ),
                        pool.count,
                    );
                }
            }
        } else if self.credits.max_per_connection == 0 {
            c.push("$.credits.max_per_connection".into(), "at least 1", 0);
        }
        if !send.is_empty() && send.iter().all(|&s| self.pools[s].buffer_size_bytes < max_send) {
            let s = send[0];
            c.push(
                format!("$.pools[{s}].buffer_size_bytes"),
                format!(
                    "at least {max_send} in some send pool (the largest inline send threshold of an accepted version, $.inline)"
                ),
                self.pools[s].buffer_size_bytes,
            );
        }
    }

    fn check_backends(&self, c: &mut Checker) {
        for (i, b) in self.backends.iter().enumerate() {
            let base = format!("$.backends[{i}]");
            let name = b.name();
            if name.is_empty() {
                c.push(format!("{base}.name"), "a non-empty name", "\"\"");
            } else if let Some(k) = self.backends[..i].iter().position(|o| o.name() == name) {
                c.push(
                    format!("{base}.name"),
                    format!("a name not used by $.backends[{k}]"),
                    format!("{name:?}"),
                );
            }
            match b {
                BackendConfig::Mem { size_bytes, .. } => {
                    if *size_bytes == 0 || size_bytes % 4096 != 0 {
                        c.push(format!("{base}.size_bytes"), "a non-zero multiple of 4096", size_bytes);
                    }
                }
                BackendConfig::Uring { path, queue_depth, .. } => {
                    if !path.starts_with('/') {
                        c.push(format!("{base}.path"), "an absolute path", format!("{path:?}"));
                    }
                    c.pow2(
                        format!("{base}.queue_depth"),
                        u64::from(*queue_depth),
                        1,
                        u64::from(MAX_QUEUE_DEPTH),
                    );
                }
                BackendConfig::Nvme {
                    devices, queue_depth, ..
                } => {
                    if devices.is_empty() {
                        c.push(
                            format!("{base}.devices"),
                            "at least one device or image file",
                            "an empty list",
                        );
                    }
                    for (k, d) in devices.iter().enumerate() {
                        let last = d.rsplit('/').next().unwrap_or("");
                        if !d.starts_with('/') || last.is_empty() {
                            c.push(
                                format!("{base}.devices[{k}]"),
                                "an absolute path to a device or file",
                                format!("{d:?}"),
                            );
                        } else if devices[..k].iter().any(|o| o.rsplit('/').next() == Some(last)) {
                            c.push(
                                format!("{base}.devices[{k}]"),
                                "a path whose last component is unique",
                                format!("{d:?}"),
                            );
                        }
                    }
                    c.pow2(
                        format!("{base}.queue_depth"),
                        u64::from(*queue_depth),
                        2,
                        u64::from(MAX_QUEUE_DEPTH),
                    );
                }
            }
        }
    }

    fn check_exports(&self, c: &mut Checker) {
        if self.exports.is_empty() {
            c.push("$.exports".into(), "at least one export", "an empty list");
        }
        let names: Vec<String> = self.backends.iter().map(|b| format!("{:?}", b.name())).collect();
        for (i, e) in self.exports.iter().enumerate() {
            let base = format!("$.exports[{i}]");
            if !e.path.starts_with('/') {
                c.push(format!("{base}.path"), "an absolute path", format!("{:?}", e.path));
            } else if let Some(k) = self.exports[..i].iter().position(|o| o.path == e.path) {
                c.push(
                    format!("{base}.path"),
                    format!("a path not exported by $.exports[{k}]"),
                    format!("{:?}", e.path),
                );
            }
            let bad_part = e.dir.split('/').any(|p| p == "." || p == ".." || p.len() > 255);
            if !e.dir.starts_with('/') || bad_part || e.dir.contains('\0') {
                c.push(
                    format!("{base}.dir"),
                    "an absolute path in the backend without `.` or `..` components",
                    format!("{:?}", e.dir),
                );
            }
            if !self.backends.iter().any(|b| b.name() == e.backend) {
                let expected = if names.is_empty() {
                    "the name of a backend in $.backends (there are none)".to_string()
                } else {
                    format!("the name of a backend in $.backends (one of {})", names.join(", "))
                };
                c.push(format!("{base}.backend"), expected, format!("{:?}", e.backend));
            }
            if e.clients.is_empty() {
                c.push(
                    format!("{base}.clients"),
                    "at least one client network (\"0.0.0.0/0\" allows every IPv4 client)",
                    "an empty list",
                );
            }
            for (j, net) in e.clients.iter().enumerate() {
                if let Err(why) = parse_network(net) {
                    c.push(
                        format!("{base}.clients[{j}]"),
                        format!("an address or network such as \"10.0.0.0/8\", \"192.0.2.7\" or \"::/0\" ({why})"),
                        format!("{net:?}"),
                    );
                }
            }
        }
    }
}
