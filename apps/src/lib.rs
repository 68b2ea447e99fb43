//! # rpcrdma-apps: the command-line tools' library parts
//!
//! Binaries live in `src/bin/`; the logic they share, and that tests and fuzz
//! targets exercise without spawning a process, lives here:
//!
//! | module | what |
//! |---|---|
//! | [`dump`] | the JSON form of transport headers and RFC 8797 Private Data used by `rpcrdma-dump` (both directions), and its hex input parser |
//! | [`dump_samples`] | hand-written sample messages of every header type (the files in `apps/samples/`, the fuzz seeds) |
//! | [`config`] | the `cores.json` model (listeners, fabric, pools, credits, inline sizes, backends, exports; the reactor's part from `reactor::config`), its loader and `--check-config` validation |
//! | [`cpus`] | where the target's non-reactor threads (io-wq workers, helper pool, TCP and stats threads) may run: off the cores' CPUs |
//! | [`backend`] | storage backends (`mem`, `uring`, `nvme`): the SPDK-bdev-shaped trait the gateway serves files from |
//! | [`nfs`] | the NFSv3 and MOUNT v3 services, exports and access control |
//! | [`server`] | `rpcrdma-target`: reactors, fabric listeners, TCP listeners, shutdown |
#![deny(missing_debug_implementations)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod backend;
pub mod config;
pub mod cpus;
pub mod dump;
pub mod dump_samples;
pub mod nfs;
pub mod nfs4;
pub mod server;
