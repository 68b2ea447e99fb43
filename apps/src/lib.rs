//! # rpcrdma-apps: the command-line tools' library parts
//!
//! Binaries live in `src/bin/`; the logic they share, and that tests and fuzz
//! targets exercise without spawning a process, lives here:
//!
//! | module | what |
//! |---|---|
//! | [`dump`] | the JSON form of transport headers and RFC 8797 Private Data used by `rpcrdma-dump` (both directions), and its hex input parser |
//! | [`dump_samples`] | hand-written sample messages of every header type (the files in `apps/samples/`, the fuzz seeds) |
#![forbid(unsafe_code)]
#![deny(missing_debug_implementations)]

pub mod dump;
pub mod dump_samples;
