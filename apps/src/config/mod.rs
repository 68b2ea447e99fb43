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

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use reactor::config::{CoreConfig, CoreRole, ReactorConfig};
use reactor::idle::{IdlePolicy, MAX_SLEEP_US};
use reactor::{ReactorOptions, MAX_CORES, MAX_MESSAGE_BATCH};

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

// ---------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------

/// A whole `cores.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Cores, in core-index order.
    pub cores: Vec<CoreConfig>,
    /// Reactor tuning (optional; defaults in [`ReactorConfig::default`]).
    #[serde(default)]
    pub reactor: ReactorConfig,
    /// Where the server listens.
    pub listeners: Listeners,
    /// The RDMA fabric provider and its options.
    pub fabric: FabricConfig,
    /// Registered buffer pools (size classes).
    pub pools: Vec<PoolConfig>,
    /// Credit limits (optional).
    #[serde(default)]
    pub credits: CreditsConfig,
    /// Inline thresholds per protocol version (optional).
    #[serde(default)]
    pub inline: InlineConfig,
    /// Storage backends.
    pub backends: Vec<BackendConfig>,
    /// Exported file systems.
    pub exports: Vec<ExportConfig>,
}

/// Listening endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listeners {
    /// RPC-over-RDMA listeners on the fabric.
    pub fabric: Vec<FabricListener>,
    /// TCP port of the NFS service (e.g. 2049).
    pub nfs_tcp_port: u16,
    /// TCP port of the MOUNT service (e.g. 20048).
    pub mount_tcp_port: u16,
    /// Limits and timeouts of both TCP services (optional; defaults apply).
    #[serde(default)]
    pub tcp: TcpConfig,
    /// Unix socket of the live statistics (`rpcrdma-target stats`); default
    /// `server::stats::default_socket_path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats_socket: Option<String>,
}

/// Limits and timeouts of the TCP services (NFS and MOUNT, each listener on
/// its own); every field is optional. A TCP peer is hostile: these bound how
/// long one connection can hold a slot, a thread and shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpConfig {
    /// Connections served at once per listener (default 64). A new
    /// connection beyond it closes the idlest one (the one whose last
    /// complete record is oldest) instead of being refused.
    pub max_conns: u32,
    /// A connection with no complete record for this long is closed
    /// (milliseconds, default 300000).
    pub idle_timeout_ms: u32,
    /// A record must arrive whole within this long of its first byte, or the
    /// connection is closed (milliseconds, default 30000).
    pub record_timeout_ms: u32,
    /// A reply must be written whole within this long, or the connection is
    /// closed (milliseconds, default 30000).
    pub write_timeout_ms: u32,
    /// At shutdown, after the backends are synced, how long connections get
    /// to finish the Call they are serving before they are closed
    /// (milliseconds, default 2000).
    pub shutdown_grace_ms: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            max_conns: 64,
            idle_timeout_ms: 300_000,
            record_timeout_ms: 30_000,
            write_timeout_ms: 30_000,
            shutdown_grace_ms: 2_000,
        }
    }
}

/// One RPC-over-RDMA listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FabricListener {
    /// Local address (an unspecified address listens on all).
    pub address: IpAddr,
    /// Port (20049 is the IANA port for NFS over RDMA).
    pub port: u16,
    /// RPC-over-RDMA versions accepted: 1 (RFC 8166) and/or 2
    /// (draft-cel-nfsv4-rpcrdma-version-two).
    pub versions: Vec<u32>,
}

/// Fabric provider, tagged by `"provider"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
pub enum FabricConfig {
    /// Shared-memory loopback fabric between processes on one host.
    Shm {
        /// Unix socket used to exchange the shared-memory descriptors.
        socket_path: String,
    },
    /// RDMA verbs on a real NIC.
    Verbs {
        /// Device name (e.g. `mlx5_0`).
        device: String,
        /// IP address of the device's port (for RDMA-CM).
        ip: IpAddr,
        /// Physical port number on the device (default 1).
        #[serde(default = "default_port_num")]
        port_num: u8,
        /// GID table index (default 0).
        #[serde(default)]
        gid_index: u32,
    },
    /// In-process simulated fabric (tests, fault injection).
    Sim {
        /// Random seed for loss and reordering (default 0).
        #[serde(default)]
        seed: u64,
        /// Dropped operations per million (default 0).
        #[serde(default)]
        loss_ppm: u32,
        /// Added one-way latency in microseconds (default 0).
        #[serde(default)]
        latency_us: u32,
    },
}

fn default_port_num() -> u8 {
    1
}

/// Buffer pool: one size class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Unique name.
    pub name: String,
    /// What the buffers are for.
    pub usage: PoolUsage,
    /// Size of each buffer in bytes.
    pub buffer_size_bytes: u32,
    /// Number of buffers.
    pub count: u32,
    /// Page size backing the pool.
    pub page_size: PageSize,
    /// Buffers each core keeps in its private cache.
    pub per_core_cache: u32,
    /// If hugepages of `page_size` cannot be mapped at start, use 4 KiB
    /// pages instead of failing (default `false`).
    #[serde(default)]
    pub fallback_to_4k: bool,
}

/// Role of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolUsage {
    /// Posted receive buffers (one per credit, RFC 8166 §3.3.1).
    Receive,
    /// Send buffers for replies and calls.
    Send,
    /// Bulk data (RDMA Read/Write payloads).
    Data,
}

/// Page size of a pool's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PageSize {
    /// 4 KiB base pages.
    #[serde(rename = "4K")]
    Size4K,
    /// 2 MiB hugepages.
    #[serde(rename = "2M")]
    Size2M,
    /// 1 GiB hugepages.
    #[serde(rename = "1G")]
    Size1G,
}

impl PageSize {
    /// The page size in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            PageSize::Size4K => 4 << 10,
            PageSize::Size2M => 2 << 20,
            PageSize::Size1G => 1 << 30,
        }
    }
}

/// Credit limits (RFC 8166 §3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CreditsConfig {
    /// Largest credit grant per connection (default 128); each credit needs
    /// a posted receive buffer, so it is at most the receive pool's count.
    pub max_per_connection: u32,
}

impl Default for CreditsConfig {
    fn default() -> Self {
        CreditsConfig {
            max_per_connection: 128,
        }
    }
}

/// Inline thresholds per protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InlineConfig {
    /// Version 1 (default 1024/1024, RFC 8166 §3.3.3).
    pub v1: InlinePair,
    /// Version 2 (default 4096/4096, draft-cel-nfsv4-rpcrdma-version-two §8.3).
    pub v2: InlinePair,
}

impl Default for InlineConfig {
    fn default() -> Self {
        InlineConfig {
            v1: InlinePair {
                send_bytes: 1024,
                receive_bytes: 1024,
            },
            v2: InlinePair {
                send_bytes: 4096,
                receive_bytes: 4096,
            },
        }
    }
}

/// Send and receive inline thresholds of one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InlinePair {
    /// Largest message this server sends inline, in bytes.
    pub send_bytes: u32,
    /// Largest message this server receives inline, in bytes.
    pub receive_bytes: u32,
}

/// A storage backend, tagged by `"type"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum BackendConfig {
    /// RAM-backed.
    Mem {
        /// Unique name.
        name: String,
        /// Capacity in bytes (a multiple of 4096).
        size_bytes: u64,
    },
    /// A directory tree on a local file system, data through io_uring.
    Uring {
        /// Unique name.
        name: String,
        /// Absolute path of the directory to export (created if missing).
        path: String,
        /// Submission queue depth, a power of two (default 128).
        #[serde(default = "default_queue_depth")]
        queue_depth: u32,
        /// Use O_DIRECT for aligned data I/O (default `true`).
        #[serde(default = "default_true")]
        o_direct: bool,
    },
    /// NVMe namespaces, partitions or image files, exported as the files of a
    /// flat directory; I/O through io_uring NVMe passthrough on `/dev/ngXnY`
    /// or O_DIRECT on the block device or file.
    Nvme {
        /// Unique name.
        name: String,
        /// Absolute paths: `/dev/ngXnY` char devices, `/dev/nvmeXnY[pZ]` block
        /// devices, or image files. Each becomes one file named after its last
        /// path component.
        devices: Vec<String>,
        /// Queue depth per core, a power of two (default 128).
        #[serde(default = "default_queue_depth")]
        queue_depth: u32,
        /// Use NVMe passthrough (IORING_OP_URING_CMD) where the device is a
        /// `/dev/ngXnY` char device (default `true`).
        #[serde(default = "default_true")]
        passthrough: bool,
    },
}

fn default_queue_depth() -> u32 {
    128
}

impl BackendConfig {
    /// The backend's name.
    pub fn name(&self) -> &str {
        match self {
            BackendConfig::Mem { name, .. } | BackendConfig::Uring { name, .. } | BackendConfig::Nvme { name, .. } => {
                name
            }
        }
    }

    /// `"mem"`, `"uring"` or `"nvme"`.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendConfig::Mem { .. } => "mem",
            BackendConfig::Uring { .. } => "uring",
            BackendConfig::Nvme { .. } => "nvme",
        }
    }
}

/// One exported file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    /// Absolute export path, as clients mount it.
    pub path: String,
    /// Name of the backend that stores it.
    pub backend: String,
    /// Client networks allowed (`10.0.0.0/8`, `192.0.2.7`, `::/0`, ...).
    pub clients: Vec<String>,
    /// Refuse writes (default `false`).
    #[serde(default)]
    pub read_only: bool,
    /// Map uid 0 to the anonymous user (default `true`).
    #[serde(default = "default_true")]
    pub root_squash: bool,
    /// Accept `AUTH_NONE` credentials (default `false`); such calls act as
    /// the anonymous user.
    #[serde(default)]
    pub allow_auth_none: bool,
    /// The anonymous user that squashed root and AUTH_NONE map to (default 65534).
    #[serde(default = "default_anon_id")]
    pub anon_uid: u32,
    /// The anonymous group (default 65534).
    #[serde(default = "default_anon_id")]
    pub anon_gid: u32,
}

fn default_anon_id() -> u32 {
    65534
}

fn default_true() -> bool {
    true
}

impl ExportConfig {
    /// Whether `addr` is in one of the export's client networks. Entries
    /// that do not parse (rejected by validation) match nothing.
    pub fn allows(&self, addr: IpAddr) -> bool {
        self.clients
            .iter()
            .filter_map(|c| parse_network(c).ok())
            .any(|net| net.contains(addr))
    }
}

/// An IP network: address plus prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNetwork {
    /// Network address (host bits zero).
    pub addr: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
}

impl IpNetwork {
    /// Whether `a` is inside the network (an IPv4 address never matches an
    /// IPv6 network and vice versa).
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = prefix_mask_32(self.prefix_len);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = prefix_mask_128(self.prefix_len);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

fn prefix_mask_32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

fn prefix_mask_128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

/// Parses `addr` or `addr/len`. Errors say what was wrong.
pub fn parse_network(s: &str) -> Result<IpNetwork, &'static str> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().map_err(|_| "not an IP address")?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix_len = match len {
        None => max,
        Some(l) => {
            if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                return Err("prefix length is not a number");
            }
            let v: u8 = l.parse().map_err(|_| "prefix length too long")?;
            if v > max {
                return Err("prefix length too long");
            }
            v
        }
    };
    let host_bits_zero = match addr {
        IpAddr::V4(v) => u32::from(v) & !prefix_mask_32(prefix_len) == 0,
        IpAddr::V6(v) => u128::from(v) & !prefix_mask_128(prefix_len) == 0,
    };
    if !host_bits_zero {
        return Err("host bits set below the prefix length");
    }
    Ok(IpNetwork { addr, prefix_len })
}

// ---------------------------------------------------------------------------
// Problems and errors
// ---------------------------------------------------------------------------

/// One configuration problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// JSON path of the field, e.g. `$.pools[1].count`.
    pub path: String,
    /// What was expected there.
    pub expected: String,
    /// What was found.
    pub found: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: expected {}, found {}", self.path, self.expected, self.found)
    }
}

/// Every problem found in one configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblems(pub Vec<Problem>);

impl ConfigProblems {
    /// The problem reported for `path`, if any.
    pub fn at(&self, path: &str) -> Option<&Problem> {
        self.0.iter().find(|p| p.path == path)
    }
}

impl fmt::Display for ConfigProblems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} configuration problem(s):", self.0.len())?;
        for p in &self.0 {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigProblems {}

/// Failure to load a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The text is not JSON.
    #[error("configuration is not valid JSON (line {line}, column {column}): {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// The JSON does not describe a valid configuration.
    #[error("{0}")]
    Invalid(#[from] ConfigProblems),
}

impl ConfigError {
    /// The problems, if this is [`ConfigError::Invalid`].
    pub fn problems(&self) -> Option<&ConfigProblems> {
        match self {
            ConfigError::Invalid(p) => Some(p),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------
// Loading: walk the JSON value, collecting every structural problem
// ---------------------------------------------------------------------------

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
        let idle = self.opt(p, m, "idle", d.idle, Walker::idle);
        let ring = self.opt(p, m, "message_ring_size", d.message_ring_size, Walker::u32);
        let batch = self.opt(p, m, "message_batch", d.message_batch, Walker::u32);
        let tick = self.opt(p, m, "timer_tick_us", d.timer_tick_us, Walker::u32);
        let slots = self.opt(p, m, "timer_slots", d.timer_slots, Walker::u32);
        let timers = self.opt(p, m, "max_timers", d.max_timers, Walker::u32);
        let drain = self.opt(p, m, "drain_timeout_ms", d.drain_timeout_ms, Walker::u32);
        Some(ReactorConfig {
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
        }
        let kind = self.req(p, m, "policy", |w, p, v| {
            w.choice(
                p,
                v,
                &[
                    ("spin", Kind::Spin),
                    ("spin_then_pause", Kind::Pause),
                    ("spin_then_sleep", Kind::Sleep),
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
                let max_sleep_us = self.req(p, m, "max_sleep_us", Walker::u32);
                Some(IdlePolicy::SpinThenSleep {
                    idle_loops: idle_loops?,
                    max_sleep_us: max_sleep_us?,
                })
            }
        }
    }

    fn listeners(&mut self, p: &str, v: &Value) -> Option<Listeners> {
        let m = self.strict_object(
            p,
            v,
            &["fabric", "nfs_tcp_port", "mount_tcp_port", "tcp", "stats_socket"],
        )?;
        let fabric = self.req(p, m, "fabric", |w, p, v| w.list(p, v, Walker::fabric_listener));
        let nfs = self.req(p, m, "nfs_tcp_port", Walker::u16);
        let mount = self.req(p, m, "mount_tcp_port", Walker::u16);
        let tcp = self.opt(p, m, "tcp", TcpConfig::default(), Walker::tcp);
        let stats = self.opt(p, m, "stats_socket", None, |w, p, v| w.string(p, v).map(Some));
        Some(Listeners {
            fabric: fabric?,
            nfs_tcp_port: nfs?,
            mount_tcp_port: mount?,
            tcp: tcp?,
            stats_socket: stats?,
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
                self.deny_unknown(p, m, &["type", "name", "path", "queue_depth", "o_direct"]);
                let path = self.req(p, m, "path", Walker::string);
                let qd = self.opt(p, m, "queue_depth", default_queue_depth(), Walker::u32);
                let o_direct = self.opt(p, m, "o_direct", true, Walker::boolean);
                Some(BackendConfig::Uring {
                    name: name?,
                    path: path?,
                    queue_depth: qd?,
                    o_direct: o_direct?,
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
                "root_squash",
                "allow_auth_none",
                "anon_uid",
                "anon_gid",
            ],
        )?;
        let path = self.req(p, m, "path", Walker::string);
        let backend = self.req(p, m, "backend", Walker::string);
        let clients = self.req(p, m, "clients", |w, p, v| w.list(p, v, Walker::string));
        let read_only = self.opt(p, m, "read_only", false, Walker::boolean);
        let root_squash = self.opt(p, m, "root_squash", true, Walker::boolean);
        let auth_none = self.opt(p, m, "allow_auth_none", false, Walker::boolean);
        let anon_uid = self.opt(p, m, "anon_uid", default_anon_id(), Walker::u32);
        let anon_gid = self.opt(p, m, "anon_gid", default_anon_id(), Walker::u32);
        Some(ExportConfig {
            path: path?,
            backend: backend?,
            clients: clients?,
            read_only: read_only?,
            root_squash: root_squash?,
            allow_auth_none: auth_none?,
            anon_uid: anon_uid?,
            anon_gid: anon_gid?,
        })
    }
}

// ---------------------------------------------------------------------------
// Semantic validation
// ---------------------------------------------------------------------------

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

    /// The configuration as pretty-printed JSON (loads back to an equal
    /// value).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

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

    /// Reactor options for these cores and the `reactor` section (threads
    /// pinned, cores in list order).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks() {
        let n = parse_network("10.0.0.0/8").unwrap();
        assert!(n.contains("10.1.2.3".parse().unwrap()));
        assert!(!n.contains("11.0.0.1".parse().unwrap()));
        assert!(!n.contains("::1".parse().unwrap()));
        let any = parse_network("0.0.0.0/0").unwrap();
        assert!(any.contains("203.0.113.9".parse().unwrap()));
        let host = parse_network("192.0.2.7").unwrap();
        assert_eq!(host.prefix_len, 32);
        assert!(host.contains("192.0.2.7".parse().unwrap()));
        assert!(!host.contains("192.0.2.8".parse().unwrap()));
        let v6 = parse_network("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert_eq!(
            parse_network("10.0.0.1/8"),
            Err("host bits set below the prefix length")
        );
        assert_eq!(parse_network("10.0.0.0/33"), Err("prefix length too long"));
        assert_eq!(parse_network("10.0.0.0/"), Err("prefix length is not a number"));
        assert_eq!(parse_network("10.0.0.0/+8"), Err("prefix length is not a number"));
        assert_eq!(parse_network("ten/8"), Err("not an IP address"));
        assert!(parse_network("::/0").is_ok());
    }

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
