//! # rpcrdma-perf
//!
//! The load generator behind the `perf` binary: RPC NULL and NFSv3 READ/WRITE
//! over RPC-over-RDMA (versions 1 and 2) through [`dataplane::requester`] or
//! over TCP with record marking, and
//! the fabric's own ping-pong without RPC (the floor every other figure is
//! compared with).
//!
//! | module | what |
//! |---|---|
//! | [`args`] | parsing helpers for the command line (sizes, core lists, durations) |
//! | [`stats`] | latency histograms, the result record (`--json`), the fio-like summary, `compare` |
//! | [`plot`] | the SVG percentile plot |
//! | [`hdrlog`] | HdrHistogram interval logs (`--hdr-log`) |
//! | [`schedule`] | open-loop send times and I/O offsets |
//! | [`pattern`] | the data pattern of `--verify` |
//! | [`nfs`] | NFSv3, MOUNT and portmap encoders and decoders |
//! | [`tcp`] | RPC over TCP with record marking (MOUNT, portmap) |
//! | [`tcpload`] | `--transport tcp`: the loads over TCP with record marking |
//! | [`cpu`] | CPU per operation of perf and of the target |
//! | [`engine`] | pools, connections and the per-thread load loop over the requester |
//! | [`raw`] | the fabric ping-pong (`perf raw`) |
//! | [`run`] | a whole run: setup, threads, warm-up, measurement, result |
//!
//! Threads: the main thread sets up and waits; one worker thread per client
//! core (pinned by absolute CPU id) owns its connections and everything they
//! touch. Functions say where they may be called.
#![deny(missing_debug_implementations)]

pub mod args;
pub mod cpu;
pub mod deleg;
pub mod engine;
pub mod hdrlog;
pub mod nfs;
pub mod nfs4;
pub mod nfs4setup;
pub mod pattern;
pub mod plot;
pub mod raw;
pub mod run;
pub mod schedule;
pub mod stats;
pub mod tcp;
pub mod tcpload;

/// Errors of the perf library.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("invalid option: {0}")]
    Option(String),
    #[error(transparent)]
    Fabric(#[from] dataplane::FabricError),
    #[error(transparent)]
    Engine(#[from] dataplane::service::EngineError),
    #[error(transparent)]
    Pool(#[from] mempool::MempoolError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("connection: {0}")]
    Connect(String),
    #[error("RPC {what}: {detail}")]
    Rpc { what: &'static str, detail: String },
    #[error("MOUNT of {export:?} failed: mountstat3 {status}")]
    Mount { export: String, status: u32 },
    #[error("NFS {what} failed: nfsstat3 {status}")]
    Nfs { what: &'static str, status: u32 },
    #[error("cannot pin a thread to CPU {0}")]
    Pin(usize),
    #[error("{0}")]
    Other(String),
}

impl PerfError {
    /// An I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        PerfError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result type of the library.
pub type Result<T, E = PerfError> = std::result::Result<T, E>;

/// Pin the calling thread to CPU `cpu` (absolute id, as `taskset` numbers
/// CPUs). Not through `core_affinity::get_core_ids()`, which lists the CPUs of
/// the caller's *current* mask and would map every id onto the parent's CPU in
/// a thread spawned by a pinned thread. Any thread, for itself.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        Ok(())
    } else {
        Err(PerfError::Pin(cpu))
    }
}
