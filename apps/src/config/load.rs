//! Loading: the JSON value is walked field by field so that wrong types,
//! missing and unknown fields are all reported at once, then validated.

use std::net::IpAddr;
use std::path::Path;

use reactor::idle::{IdlePolicy, MAX_SLEEP_US, MAX_SPIN_US, MAX_WAIT_MS, SPIN_THEN_WAIT};
use serde_json::{Map, Value};

use super::model::{
    default_anon_id, default_export_dir, default_port_num, default_queue_depth, DEFAULT_REGRANT_AFTER_RECALL_MS,
};
use super::*;

/// Short description of a JSON value for "found ...".
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let mut t: String = s.chars().take(64).collect();
            if t.len() < s.len() {
                t.push_str("...");
            }
            format!("{t:?}")
        }
        Value::Array(a) => format!("an array of {} element(s)", a.len()),
        Value::Object(_) => "an object".to_string(),
    }
}

struct Walker {
    problems: Vec<Problem>,
}

type Obj = Map<String, Value>;

impl Walker {
    fn push(&mut self, path: &str, expected: impl Into<String>, found: impl Into<String>) {
        self.problems.push(Problem {
            path: path.to_string(),
            expected: expected.into(),
            found: found.into(),
        });
    }

    /// Checks that `v` is an object (no field check).
    fn object<'v>(&mut self, path: &str, v: &'v Value) -> Option<&'v Obj> {
        match v {
            Value::Object(m) => Some(m),
            other => {
                self.push(path, "an object", describe(other));
                None
            }
        }
    }

    /// Reports every field of `m` not in `known`.
    fn deny_unknown(&mut self, path: &str, m: &Obj, known: &[&str]) {
        for key in m.keys() {
            if !known.contains(&key.as_str()) {
                let list: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
                self.push(
                    &format!("{path}.{key}"),
                    format!("only known fields ({})", list.join(", ")),
                    format!("unknown field `{key}`"),
                );
            }
        }
    }

    /// An object with exactly the fields `known` allows.
    fn strict_object<'v>(&mut self, path: &str, v: &'v Value, known: &[&str]) -> Option<&'v Obj> {
        let m = self.object(path, v)?;
        self.deny_unknown(path, m, known);
        Some(m)
    }

    fn req<T>(
        &mut self,
        path: &str,
        m: &Obj,
        key: &str,
        parse: impl FnOnce(&mut Self, &str, &Value) -> Option<T>,
    ) -> Option<T> {
        let p = format!("{path}.{key}");
        match m.get(key) {
            Some(v) => parse(self, &p, v),
            None => {
                self.push(&p, "a value (this field is required)", "no such field");
                None
            }
        }
    }

    fn opt<T>(
        &mut self,
        path: &str,
        m: &Obj,
        key: &str,
        default: T,
        parse: impl FnOnce(&mut Self, &str, &Value) -> Option<T>,
    ) -> Option<T> {
        match m.get(key) {
            Some(v) => parse(self, &format!("{path}.{key}"), v),
            None => Some(default),
        }
    }

    fn uint(&mut self, path: &str, v: &Value, max: u64) -> Option<u64> {
        match v.as_u64() {
            Some(x) if x <= max => Some(x),
            _ => {
                self.push(path, format!("an integer in 0..={max}"), describe(v));
                None
            }
        }
    }

    fn u8(&mut self, path: &str, v: &Value) -> Option<u8> {
        self.uint(path, v, u64::from(u8::MAX)).map(|x| x as u8)
    }

    fn u16(&mut self, path: &str, v: &Value) -> Option<u16> {
        self.uint(path, v, u64::from(u16::MAX)).map(|x| x as u16)
    }

    fn u32(&mut self, path: &str, v: &Value) -> Option<u32> {
        self.uint(path, v, u64::from(u32::MAX)).map(|x| x as u32)
    }

    fn u64(&mut self, path: &str, v: &Value) -> Option<u64> {
        self.uint(path, v, u64::MAX)
    }

    /// A `u32` in the field's documented range `lo..=hi`: anything else
    /// (negative, fractional, out of range) is reported against that range,
    /// not against the type's.
    fn u32_in(&mut self, path: &str, v: &Value, lo: u32, hi: u32) -> Option<u32> {
        match v.as_u64() {
            Some(x) if (u64::from(lo)..=u64::from(hi)).contains(&x) => Some(x as u32),
            _ => {
                self.push(path, format!("an integer in {lo}..={hi}"), describe(v));
                None
            }
        }
    }

    fn string(&mut self, path: &str, v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.push(path, "a string", describe(other));
                None
            }
        }
    }

    fn boolean(&mut self, path: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            other => {
                self.push(path, "true or false", describe(other));
                None
            }
        }
    }

    fn ip(&mut self, path: &str, v: &Value) -> Option<IpAddr> {
        match v {
            Value::String(s) => match s.parse::<IpAddr>() {
                Ok(a) => Some(a),
                Err(_) => {
                    self.push(
                        path,
                        "an IPv4 or IPv6 address such as \"192.0.2.1\" or \"::\"",
                        describe(v),
                    );
                    None
                }
            },
            other => {
                self.push(path, "an IP address string", describe(other));
                None
            }
        }
    }

    fn choice<T: Copy>(&mut self, path: &str, v: &Value, options: &[(&str, T)]) -> Option<T> {
        if let Value::String(s) = v {
            if let Some((_, t)) = options.iter().find(|(name, _)| name == s) {
                return Some(*t);
            }
        }
        let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
        self.push(path, format!("one of {}", names.join(", ")), describe(v));
        None
    }

    /// Parses every element (so all element problems are reported); `None`
    /// if `v` is not an array or any element failed.
    fn list<T>(
        &mut self,
        path: &str,
        v: &Value,
        mut parse: impl FnMut(&mut Self, &str, &Value) -> Option<T>,
    ) -> Option<Vec<T>> {
        let Value::Array(items) = v else {
            self.push(path, "an array", describe(v));
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match parse(self, &format!("{path}[{i}]"), item) {
                Some(t) => out.push(t),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    // -- sections ----------------------------------------------------------

    fn config(&mut self, v: &Value) -> Option<Config> {
        let p = "$";
        let m = self.strict_object(
            p,
            v,
            &[
                "cores",
                "reactor",
                "listeners",
                "fabric",
                "pools",
                "credits",
                "inline",
                "backends",
                "exports",
                "nfs4",
                "rdma",
            ],
        )?;
        let cores = self.req(p, m, "cores", |w, p, v| w.list(p, v, Walker::core));
        let reactor = self.opt(p, m, "reactor", ReactorConfig::default(), Walker::reactor);
        let listeners = self.req(p, m, "listeners", Walker::listeners);
        let fabric = self.req(p, m, "fabric", Walker::fabric);
        let pools = self.req(p, m, "pools", |w, p, v| w.list(p, v, Walker::pool));
        let credits = self.opt(p, m, "credits", CreditsConfig::default(), Walker::credits);
        let inline = self.opt(p, m, "inline", InlineConfig::default(), Walker::inline);
        let backends = self.req(p, m, "backends", |w, p, v| w.list(p, v, Walker::backend));
        let exports = self.req(p, m, "exports", |w, p, v| w.list(p, v, Walker::export));
        let nfs4 = self.opt(p, m, "nfs4", Nfs4Config::default(), Walker::nfs4);
        let rdma = self.opt(p, m, "rdma", RdmaConfig::default(), Walker::rdma);
        Some(Config {
            cores: cores?,
            reactor: reactor?,
            listeners: listeners?,
            fabric: fabric?,
            pools: pools?,
            credits: credits?,
            inline: inline?,
            backends: backends?,
            exports: exports?,
            nfs4: nfs4?,
            rdma: rdma?,
        })
    }

    fn rdma(&mut self, p: &str, v: &Value) -> Option<RdmaConfig> {
        let m = self.strict_object(p, v, &["remote_invalidation"])?;
        let d = RdmaConfig::default();
        let reminv = self.opt(p, m, "remote_invalidation", d.remote_invalidation, Walker::boolean);
        Some(RdmaConfig {
            remote_invalidation: reminv?,
        })
    }

    fn nfs4(&mut self, p: &str, v: &Value) -> Option<Nfs4Config> {
        let m = self.strict_object(p, v, &["state_dir", "delegations", "regrant_after_recall_ms"])?;
        let dir = self.opt(p, m, "state_dir", None, |w, p, v| w.string(p, v).map(Some));
        let delegations = self.opt(p, m, "delegations", true, Walker::boolean);
        let regrant = self.opt(
            p,
            m,
            "regrant_after_recall_ms",
            DEFAULT_REGRANT_AFTER_RECALL_MS,
            Walker::u32,
        );
        Some(Nfs4Config {
            state_dir: dir?,
            delegations: delegations?,
            regrant_after_recall_ms: regrant?,
        })
    }

    fn core(&mut self, p: &str, v: &Value) -> Option<CoreConfig> {
        let m = self.strict_object(p, v, &["cpu", "role"])?;
        let cpu = self.req(p, m, "cpu", Walker::u32);
        let role = self.req(p, m, "role", |w, p, v| {
            w.choice(p, v, &[("io", CoreRole::Io), ("admin", CoreRole::Admin)])
        });
        Some(CoreConfig { cpu: cpu?, role: role? })
    }

    fn reactor(&mut self, p: &str, v: &Value) -> Option<ReactorConfig> {
        let m = self.strict_object(
            p,
            v,
            &[
                "pin_threads",
                "move_when_crowded",
                "idle",
                "message_ring_size",
                "message_batch",
                "timer_tick_us",
                "timer_slots",
                "max_timers",
                "drain_timeout_ms",
            ],
        )?;
        let d = ReactorConfig::default();
        let pin = self.opt(p, m, "pin_threads", d.pin_threads, Walker::boolean);
        let crowd = self.opt(p, m, "move_when_crowded", d.move_when_crowded, Walker::boolean);
        let idle = self.opt(p, m, "idle", d.idle, Walker::idle);
        let ring = self.opt(p, m, "message_ring_size", d.message_ring_size, Walker::u32);
        let batch = self.opt(p, m, "message_batch", d.message_batch, Walker::u32);
        let tick = self.opt(p, m, "timer_tick_us", d.timer_tick_us, Walker::u32);
        let slots = self.opt(p, m, "timer_slots", d.timer_slots, Walker::u32);
        let timers = self.opt(p, m, "max_timers", d.max_timers, Walker::u32);
        let drain = self.opt(p, m, "drain_timeout_ms", d.drain_timeout_ms, Walker::u32);
        Some(ReactorConfig {
            pin_threads: pin?,
            move_when_crowded: crowd?,
            idle: idle?,
            message_ring_size: ring?,
            message_batch: batch?,
            timer_tick_us: tick?,
            timer_slots: slots?,
            max_timers: timers?,
            drain_timeout_ms: drain?,
        })
    }

    fn idle(&mut self, p: &str, v: &Value) -> Option<IdlePolicy> {
        let m = self.object(p, v)?;
        #[derive(Clone, Copy)]
        enum Kind {
            Spin,
            Pause,
            Sleep,
            Wait,
        }
        let kind = self.req(p, m, "policy", |w, p, v| {
            w.choice(
                p,
                v,
                &[
                    ("spin", Kind::Spin),
                    ("spin_then_pause", Kind::Pause),
                    ("spin_then_sleep", Kind::Sleep),
                    ("spin_then_wait", Kind::Wait),
                ],
            )
        })?;
        match kind {
            Kind::Spin => {
                self.deny_unknown(p, m, &["policy"]);
                Some(IdlePolicy::Spin)
            }
            Kind::Pause => {
                self.deny_unknown(p, m, &["policy", "idle_loops", "pause_spins"]);
                let idle_loops = self.req(p, m, "idle_loops", Walker::u32);
                let pause_spins = self.req(p, m, "pause_spins", Walker::u32);
                Some(IdlePolicy::SpinThenPause {
                    idle_loops: idle_loops?,
                    pause_spins: pause_spins?,
                })
            }
            Kind::Sleep => {
                self.deny_unknown(p, m, &["policy", "idle_loops", "max_sleep_us"]);
                let idle_loops = self.req(p, m, "idle_loops", Walker::u32);
                let max_sleep_us = self.req(p, m, "max_sleep_us", |w, p, v| w.u32_in(p, v, 1, MAX_SLEEP_US));
                Some(IdlePolicy::SpinThenSleep {
                    idle_loops: idle_loops?,
                    max_sleep_us: max_sleep_us?,
                })
            }
            Kind::Wait => {
                self.deny_unknown(
                    p,
                    m,
                    &["policy", "spin_us", "max_spin_us", "max_wait_ms", "fallback_sleep_us"],
                );
                let IdlePolicy::SpinThenWait {
                    spin_us: d_spin,
                    max_spin_us: d_max_spin,
                    max_wait_ms: d_wait,
                    fallback_sleep_us: d_fallback,
                } = SPIN_THEN_WAIT
                else {
                    unreachable!("SPIN_THEN_WAIT is a SpinThenWait")
                };
                let spin_us = self.opt(p, m, "spin_us", d_spin, |w, p, v| w.u32_in(p, v, 0, MAX_SPIN_US));
                let max_spin_us = self.opt(p, m, "max_spin_us", d_max_spin, |w, p, v| {
                    w.u32_in(p, v, 0, MAX_SPIN_US)
                });
                let max_wait_ms = self.opt(p, m, "max_wait_ms", d_wait, |w, p, v| w.u32_in(p, v, 1, MAX_WAIT_MS));
                let fallback_sleep_us = self.opt(p, m, "fallback_sleep_us", d_fallback, |w, p, v| {
                    w.u32_in(p, v, 1, MAX_SLEEP_US)
                });
                Some(IdlePolicy::SpinThenWait {
                    spin_us: spin_us?,
                    max_spin_us: max_spin_us?,
                    max_wait_ms: max_wait_ms?,
                    fallback_sleep_us: fallback_sleep_us?,
                })
            }
        }
    }

    fn listeners(&mut self, p: &str, v: &Value) -> Option<Listeners> {
        let m = self.strict_object(
            p,
            v,
            &[
                "fabric",
                "nfs_tcp_port",
                "mount_tcp_port",
                "tcp",
                "stats_socket",
                "rpcbind",
            ],
        )?;
        let fabric = self.req(p, m, "fabric", |w, p, v| w.list(p, v, Walker::fabric_listener));
        let nfs = self.req(p, m, "nfs_tcp_port", Walker::u16);
        let mount = self.req(p, m, "mount_tcp_port", Walker::u16);
        let tcp = self.opt(p, m, "tcp", TcpConfig::default(), Walker::tcp);
        let stats = self.opt(p, m, "stats_socket", None, |w, p, v| w.string(p, v).map(Some));
        let rpcbind = self.opt(p, m, "rpcbind", RpcbindConfig::default(), Walker::rpcbind);
        Some(Listeners {
            fabric: fabric?,
            nfs_tcp_port: nfs?,
            mount_tcp_port: mount?,
            tcp: tcp?,
            stats_socket: stats?,
            rpcbind: rpcbind?,
        })
    }

    fn rpcbind(&mut self, p: &str, v: &Value) -> Option<RpcbindConfig> {
        let m = self.strict_object(p, v, &["mode", "port"])?;
        let d = RpcbindConfig::default();
        let mode = self.opt(p, m, "mode", d.mode, |w, p, v| {
            w.choice(
                p,
                v,
                &[
                    ("auto", RpcbindMode::Auto),
                    ("register", RpcbindMode::Register),
                    ("serve", RpcbindMode::Serve),
                    ("off", RpcbindMode::Off),
                ],
            )
        });
        let port = self.opt(p, m, "port", d.port, Walker::u16);
        Some(RpcbindConfig {
            mode: mode?,
            port: port?,
        })
    }

    fn tcp(&mut self, p: &str, v: &Value) -> Option<TcpConfig> {
        let m = self.strict_object(
            p,
            v,
            &[
                "max_conns",
                "idle_timeout_ms",
                "record_timeout_ms",
                "write_timeout_ms",
                "shutdown_grace_ms",
            ],
        )?;
        let d = TcpConfig::default();
        let max_conns = self.opt(p, m, "max_conns", d.max_conns, Walker::u32);
        let idle = self.opt(p, m, "idle_timeout_ms", d.idle_timeout_ms, Walker::u32);
        let record = self.opt(p, m, "record_timeout_ms", d.record_timeout_ms, Walker::u32);
        let write = self.opt(p, m, "write_timeout_ms", d.write_timeout_ms, Walker::u32);
        let grace = self.opt(p, m, "shutdown_grace_ms", d.shutdown_grace_ms, Walker::u32);
        Some(TcpConfig {
            max_conns: max_conns?,
            idle_timeout_ms: idle?,
            record_timeout_ms: record?,
            write_timeout_ms: write?,
            shutdown_grace_ms: grace?,
        })
    }

    fn fabric_listener(&mut self, p: &str, v: &Value) -> Option<FabricListener> {
        let m = self.strict_object(p, v, &["address", "port", "versions"])?;
        let address = self.req(p, m, "address", Walker::ip);
        let port = self.req(p, m, "port", Walker::u16);
        let versions = self.req(p, m, "versions", |w, p, v| w.list(p, v, Walker::u32));
        Some(FabricListener {
            address: address?,
            port: port?,
            versions: versions?,
        })
    }

    fn fabric(&mut self, p: &str, v: &Value) -> Option<FabricConfig> {
        let m = self.object(p, v)?;
        #[derive(Clone, Copy)]
        enum Kind {
            Shm,
            Verbs,
            Sim,
        }
        let kind = self.req(p, m, "provider", |w, p, v| {
            w.choice(p, v, &[("shm", Kind::Shm), ("verbs", Kind::Verbs), ("sim", Kind::Sim)])
        })?;
        match kind {
            Kind::Shm => {
                self.deny_unknown(p, m, &["provider", "socket_path"]);
                let socket_path = self.req(p, m, "socket_path", Walker::string);
                Some(FabricConfig::Shm {
                    socket_path: socket_path?,
                })
            }
            Kind::Verbs => {
                self.deny_unknown(p, m, &["provider", "device", "ip", "port_num", "gid_index"]);
                let device = self.req(p, m, "device", Walker::string);
                let ip = self.req(p, m, "ip", Walker::ip);
                let port_num = self.opt(p, m, "port_num", default_port_num(), Walker::u8);
                let gid_index = self.opt(p, m, "gid_index", 0, Walker::u32);
                Some(FabricConfig::Verbs {
                    device: device?,
                    ip: ip?,
                    port_num: port_num?,
                    gid_index: gid_index?,
                })
            }
            Kind::Sim => {
                self.deny_unknown(p, m, &["provider", "seed", "loss_ppm", "latency_us"]);
                let seed = self.opt(p, m, "seed", 0, Walker::u64);
                let loss_ppm = self.opt(p, m, "loss_ppm", 0, Walker::u32);
                let latency_us = self.opt(p, m, "latency_us", 0, Walker::u32);
                Some(FabricConfig::Sim {
                    seed: seed?,
                    loss_ppm: loss_ppm?,
                    latency_us: latency_us?,
                })
            }
        }
    }

    fn pool(&mut self, p: &str, v: &Value) -> Option<PoolConfig> {
        let m = self.strict_object(
            p,
            v,
            &[
                "name",
                "usage",
                "buffer_size_bytes",
                "count",
                "page_size",
                "per_core_cache",
                "fallback_to_4k",
            ],
        )?;
        let name = self.req(p, m, "name", Walker::string);
        let usage = self.req(p, m, "usage", |w, p, v| {
            w.choice(
                p,
                v,
                &[
                    ("receive", PoolUsage::Receive),
                    ("send", PoolUsage::Send),
                    ("data", PoolUsage::Data),
                ],
            )
        });
        let buffer = self.req(p, m, "buffer_size_bytes", Walker::u32);
        let count = self.req(p, m, "count", Walker::u32);
        let page_size = self.req(p, m, "page_size", |w, p, v| {
            w.choice(
                p,
                v,
                &[
                    ("4K", PageSize::Size4K),
                    ("2M", PageSize::Size2M),
                    ("1G", PageSize::Size1G),
                ],
            )
        });
        let cache = self.req(p, m, "per_core_cache", Walker::u32);
        let fallback = self.opt(p, m, "fallback_to_4k", false, Walker::boolean);
        Some(PoolConfig {
            name: name?,
            usage: usage?,
            buffer_size_bytes: buffer?,
            count: count?,
            page_size: page_size?,
            per_core_cache: cache?,
            fallback_to_4k: fallback?,
        })
    }

    fn credits(&mut self, p: &str, v: &Value) -> Option<CreditsConfig> {
        let m = self.strict_object(p, v, &["max_per_connection"])?;
        let d = CreditsConfig::default();
        let max = self.opt(p, m, "max_per_connection", d.max_per_connection, Walker::u32);
        Some(CreditsConfig {
            max_per_connection: max?,
        })
    }

    fn inline(&mut self, p: &str, v: &Value) -> Option<InlineConfig> {
        let m = self.strict_object(p, v, &["v1", "v2"])?;
        let d = InlineConfig::default();
        let v1 = self.opt(p, m, "v1", d.v1, Walker::inline_pair);
        let v2 = self.opt(p, m, "v2", d.v2, Walker::inline_pair);
        Some(InlineConfig { v1: v1?, v2: v2? })
    }

    fn inline_pair(&mut self, p: &str, v: &Value) -> Option<InlinePair> {
        let m = self.strict_object(p, v, &["send_bytes", "receive_bytes"])?;
        let send = self.req(p, m, "send_bytes", Walker::u32);
        let recv = self.req(p, m, "receive_bytes", Walker::u32);
        Some(InlinePair {
            send_bytes: send?,
            receive_bytes: recv?,
        })
    }

    fn backend(&mut self, p: &str, v: &Value) -> Option<BackendConfig> {
        let m = self.object(p, v)?;
        #[derive(Clone, Copy)]
        enum Kind {
            Mem,
            Uring,
            Nvme,
        }
        let kind = self.req(p, m, "type", |w, p, v| {
            w.choice(
                p,
                v,
                &[("mem", Kind::Mem), ("uring", Kind::Uring), ("nvme", Kind::Nvme)],
            )
        })?;
        let name = self.req(p, m, "name", Walker::string);
        match kind {
            Kind::Mem => {
                self.deny_unknown(p, m, &["type", "name", "size_bytes"]);
                let size = self.req(p, m, "size_bytes", Walker::u64);
                Some(BackendConfig::Mem {
                    name: name?,
                    size_bytes: size?,
                })
            }
            Kind::Uring => {
                self.deny_unknown(
                    p,
                    m,
                    &["type", "name", "path", "queue_depth", "o_direct", "iowq_off_cores"],
                );
                let path = self.req(p, m, "path", Walker::string);
                let qd = self.opt(p, m, "queue_depth", default_queue_depth(), Walker::u32);
                let o_direct = self.opt(p, m, "o_direct", true, Walker::boolean);
                let iowq_off_cores = self.opt(p, m, "iowq_off_cores", true, Walker::boolean);
                Some(BackendConfig::Uring {
                    name: name?,
                    path: path?,
                    queue_depth: qd?,
                    o_direct: o_direct?,
                    iowq_off_cores: iowq_off_cores?,
                })
            }
            Kind::Nvme => {
                self.deny_unknown(p, m, &["type", "name", "devices", "queue_depth", "passthrough"]);
                let devices = self.req(p, m, "devices", |w, p, v| w.list(p, v, Walker::string));
                let qd = self.opt(p, m, "queue_depth", default_queue_depth(), Walker::u32);
                let passthrough = self.opt(p, m, "passthrough", true, Walker::boolean);
                Some(BackendConfig::Nvme {
                    name: name?,
                    devices: devices?,
                    queue_depth: qd?,
                    passthrough: passthrough?,
                })
            }
        }
    }

    fn export(&mut self, p: &str, v: &Value) -> Option<ExportConfig> {
        let m = self.strict_object(
            p,
            v,
            &[
                "path",
                "backend",
                "clients",
                "read_only",
                "async",
                "root_squash",
                "allow_auth_none",
                "anon_uid",
                "anon_gid",
                "dir",
            ],
        )?;
        let path = self.req(p, m, "path", Walker::string);
        let backend = self.req(p, m, "backend", Walker::string);
        let clients = self.req(p, m, "clients", |w, p, v| w.list(p, v, Walker::string));
        let read_only = self.opt(p, m, "read_only", false, Walker::boolean);
        let r#async = self.opt(p, m, "async", false, Walker::boolean);
        let root_squash = self.opt(p, m, "root_squash", true, Walker::boolean);
        let auth_none = self.opt(p, m, "allow_auth_none", false, Walker::boolean);
        let anon_uid = self.opt(p, m, "anon_uid", default_anon_id(), Walker::u32);
        let anon_gid = self.opt(p, m, "anon_gid", default_anon_id(), Walker::u32);
        let dir = self.opt(p, m, "dir", default_export_dir(), Walker::string);
        Some(ExportConfig {
            path: path?,
            backend: backend?,
            clients: clients?,
            read_only: read_only?,
            r#async: r#async?,
            root_squash: root_squash?,
            allow_auth_none: auth_none?,
            anon_uid: anon_uid?,
            anon_gid: anon_gid?,
            dir: dir?,
        })
    }
}

impl Config {
    /// Parses and validates a configuration, reporting every problem.
    pub fn from_json_str(text: &str) -> Result<Config, ConfigError> {
        let value: Value = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        Config::from_json_value(&value)
    }

    /// Like [`Config::from_json_str`] for an already parsed value.
    pub fn from_json_value(value: &Value) -> Result<Config, ConfigError> {
        let mut w = Walker { problems: Vec::new() };
        let parsed = w.config(value);
        match parsed {
            Some(c) if w.problems.is_empty() => {
                c.validate()?;
                Ok(c)
            }
            _ => Err(ConfigError::Invalid(ConfigProblems(w.problems))),
        }
    }

    /// Reads, parses and validates a configuration file.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_json_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_values() {
        assert_eq!(describe(&serde_json::json!(null)), "null");
        assert_eq!(describe(&serde_json::json!(-3)), "-3");
        assert_eq!(describe(&serde_json::json!("x")), "\"x\"");
        assert_eq!(describe(&serde_json::json!([1, 2])), "an array of 2 element(s)");
        assert_eq!(describe(&serde_json::json!({})), "an object");
        let long = "y".repeat(100);
        assert_eq!(describe(&serde_json::json!(long)).len(), 64 + 3 + 2);
    }
}
