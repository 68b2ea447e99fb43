//! # rpcrdma-dataplane
//!
//! The fabric trait ([`fabric::Fabric`]) and its providers, and the RPC-over-RDMA
//! transport engine for both roles on top of `proto`'s planner.
//!
//! | module | what |
//! |---|---|
//! | [`fabric`] | the verbs-shaped provider interface |
//! | [`sim`] | in-process deterministic fabric with fault injection |
//! | [`shm`] | two processes on one host over shared memory |
//! | [`responder`] | the server side of the transport engine |
//! | [`service`] | what the responder hands decoded Calls to |
//! | [`credits`] | credit accounting for both roles |
//! | [`queue`] | fixed-capacity pending queues and slabs |
//! | [`stages`] | per-Call stage timing (feature `stage-timing`; profiling only) |
#![deny(missing_debug_implementations)]

mod bufs;
mod count;
pub mod credits;
pub mod engine;
pub mod fabric;
pub mod queue;
pub mod service;
pub mod stages;
#[cfg(feature = "testprog")]
pub mod testprog;

pub use engine::{requester, responder};
#[cfg(feature = "verbs")]
pub use fabric::verbs;
pub use fabric::*;
pub use fabric::{shm, sim};

/// The fabric providers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// rdma-core verbs and RDMA-CM (hardware, Soft-RoCE, siw).
    Verbs,
    /// Two processes on one host over shared memory.
    Shm,
    /// In-process, deterministic (tests).
    Sim,
}

/// Where the kernel lists RDMA devices.
pub const RDMA_DEVICE_DIR: &str = "/sys/class/infiniband";

/// The provider to use when a configuration does not name one: `verbs` when the
/// kernel lists an RDMA device in [`RDMA_DEVICE_DIR`] and this build has the
/// `verbs` feature, otherwise `shm`, the embedded default for hosts without RDMA.
///
/// May be called from any thread (it reads one directory).
pub fn default_provider() -> ProviderKind {
    default_provider_in(std::path::Path::new(RDMA_DEVICE_DIR))
}

/// [`default_provider`] with the device directory given (for tests).
pub fn default_provider_in(dir: &std::path::Path) -> ProviderKind {
    let has_device = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
    if has_device && cfg!(feature = "verbs") {
        ProviderKind::Verbs
    } else {
        ProviderKind::Shm
    }
}

#[cfg(test)]
mod provider_tests {
    use super::*;

    #[test]
    fn shm_without_devices_verbs_with_one() {
        let d = std::env::temp_dir().join(format!("rpcrdma-ib-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(default_provider_in(&d), ProviderKind::Shm, "no directory");
        std::fs::create_dir_all(&d).unwrap();
        assert_eq!(default_provider_in(&d), ProviderKind::Shm, "no device");
        std::fs::create_dir_all(d.join("rxe0")).unwrap();
        let want = if cfg!(feature = "verbs") {
            ProviderKind::Verbs
        } else {
            ProviderKind::Shm
        };
        assert_eq!(default_provider_in(&d), want);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
