//! The serde model of `cores.json`: every section and field, with the
//! defaults `docs/CONFIG.md` documents.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::parse_network;
use super::{CoreConfig, ReactorConfig};

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
    /// NFSv4 server state (optional).
    #[serde(default)]
    pub nfs4: Nfs4Config,
    /// RPC-over-RDMA transport options (optional).
    #[serde(default)]
    pub rdma: RdmaConfig,
}

/// RPC-over-RDMA transport options (`$.rdma`, docs/CONFIG.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RdmaConfig {
    /// Whether the target sets the Remote Invalidation flag in its RFC 8797
    /// CM private data (section 5.1, "R"), so that toward a version 1
    /// client that sets it too (the Linux client does), the Reply to a Call
    /// with chunks goes as RDMA Send with Invalidate of one handle that
    /// Call advertised (section 3.2): the client then has one memory
    /// registration less to invalidate itself before it can complete the
    /// RPC. Version 2 names the handle in each Call (draft -09 s3.3) and
    /// does not depend on this flag. Default on.
    pub remote_invalidation: bool,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            remote_invalidation: true,
        }
    }
}

/// NFSv4 server state kept across restarts (docs/NFSV4.md, "Grace").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Nfs4Config {
    /// Directory of the stable client records, one small file per `uring`
    /// or `nvme` backend (created if missing); none: no records and no
    /// grace period after a restart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// Whether OPEN grants read delegations (docs/NFSV4.md).
    pub delegations: bool,
    /// How long after a recall no delegation is granted on the file
    /// (capped by the lease), so the conflicting client's retry is not
    /// sent back to wait for the recall of a new one.
    pub regrant_after_recall_ms: u32,
}

/// [`Nfs4Config::regrant_after_recall_ms`]'s default: 30 s.
pub const DEFAULT_REGRANT_AFTER_RECALL_MS: u32 = 30_000;

impl Default for Nfs4Config {
    fn default() -> Self {
        Nfs4Config {
            state_dir: None,
            delegations: true,
            regrant_after_recall_ms: DEFAULT_REGRANT_AFTER_RECALL_MS,
        }
    }
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
    /// Registration with the host's rpcbind, or answering rpcbind queries
    /// (optional; default `auto` on port 111).
    #[serde(default)]
    pub rpcbind: RpcbindConfig,
}

/// What the target does about rpcbind (`server::rpcbind`), so clients find
/// MOUNT without `mountport=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RpcbindConfig {
    /// Default `auto`.
    pub mode: RpcbindMode,
    /// rpcbind's port: where the host's is asked (over TCP, when its local
    /// socket is missing) and where ours answers (default 111).
    pub port: u16,
}

impl Default for RpcbindConfig {
    fn default() -> Self {
        RpcbindConfig {
            mode: RpcbindMode::Auto,
            port: 111,
        }
    }
}

/// `listeners.rpcbind.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RpcbindMode {
    /// Register with the host's rpcbind if one answers, else answer on the
    /// port ourselves (nothing if it is taken).
    Auto,
    /// Only register with the host's rpcbind.
    Register,
    /// Only answer on the port ourselves.
    Serve,
    /// Neither.
    Off,
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

pub(super) fn default_port_num() -> u8 {
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
        /// Keep the kernel's io-wq workers (buffered writes, fsync) off the
        /// cores' CPUs (default `true`; docs/BACKENDS.md).
        #[serde(default = "default_true")]
        iowq_off_cores: bool,
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

pub(super) fn default_queue_depth() -> u32 {
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
    /// Reply to namespace changes and SETATTR before they are on disk
    /// (default `false`: `sync`, as RFC 1813 s1.6 asks). Unsafe: a crash of
    /// the server loses changes the clients were told are done.
    #[serde(default)]
    pub r#async: bool,
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
    /// The backend directory the export serves, as a path from the
    /// backend's root (default `/`: all of it). Several exports of one
    /// backend each serve their own subtree; missing directories are
    /// created (mode 0755, owner root) at start.
    #[serde(default = "default_export_dir")]
    pub dir: String,
}

pub(super) fn default_export_dir() -> String {
    "/".to_string()
}

pub(super) fn default_anon_id() -> u32 {
    65534
}

pub(super) fn default_true() -> bool {
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
