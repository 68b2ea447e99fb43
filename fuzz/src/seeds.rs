//! The committed seed corpus: how a multi-Call input is framed, and the
//! check that what is on disk under `fuzz/seeds/` is what the code builds.
//!
//! An input of the service targets (`nfs_service`, `nfs4_service`) is a mode
//! byte followed by Calls, each a big-endian `u16` length and that many bytes.
//!
//! Called from the fuzzing thread and from tests only.

use std::path::{Path, PathBuf};

/// The mode byte the service seeds start with (allowed peer, a data buffer,
/// a large head).
pub const SEED_MODE: u8 = 0x08;

/// Each family's Calls framed into one input, named by the family.
pub fn frame_families(families: Vec<(&'static str, Vec<Vec<u8>>)>) -> Vec<(&'static str, Vec<u8>)> {
    families
        .into_iter()
        .map(|(name, calls)| {
            let mut input = vec![SEED_MODE];
            for c in calls {
                let len = u16::try_from(c.len()).expect("a seed Call fits a u16 length");
                input.extend_from_slice(&len.to_be_bytes());
                input.extend_from_slice(&c);
            }
            (name, input)
        })
        .collect()
}

/// The Calls of a framed input (after its mode byte); stops at the first
/// length that runs past the end.
pub fn framed_calls(mut rest: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<2>()?;
        let n = usize::from(u16::from_be_bytes(*len));
        let call = tail.get(..n)?;
        rest = &tail[n..];
        Some(call)
    })
}

/// `fuzz/seeds/<target>`.
pub fn seed_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join(target)
}

/// Asserts that `path` holds `bytes`, or writes it when `RPCRDMA_WRITE_SEEDS`
/// is set (`RPCRDMA_WRITE_SEEDS=1 cargo test` refreshes the corpus).
pub fn check_or_write_seed(path: &Path, bytes: &[u8]) {
    if std::env::var_os("RPCRDMA_WRITE_SEEDS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a seed path has a folder")).expect("seed folder");
        std::fs::write(path, bytes).expect("seed written");
    } else {
        let on_disk = std::fs::read(path).unwrap_or_default();
        assert_eq!(on_disk, bytes, "{} is stale: RPCRDMA_WRITE_SEEDS=1 cargo test", path.display());
    }
}

/// Runs `check` on every committed seed of `target` under each of `modes`
/// (as its first byte) and cut at every `step`-th offset; the number of seeds.
pub fn run_seeds_mutated(target: &str, modes: &[u8], step: usize, check: impl Fn(&[u8])) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(seed_dir(target)).expect("seed folder") {
        let data = std::fs::read(e.expect("seed entry").path()).expect("seed");
        for &mode in modes {
            let mut v = data.clone();
            if let Some(first) = v.first_mut() {
                *first = mode;
            }
            check(&v);
        }
        for cut in (0..data.len()).step_by(step) {
            check(&data[..cut]);
        }
        n += 1;
    }
    n
}
