//! The committed sample files (`apps/samples/*.bin`) and fuzz seeds
//! (`fuzz/seeds/<target>/*`) must equal what `rpcrdma_apps::dump_samples` and the
//! seed recipes below produce.
//!
//! To (re)write them after changing a sample:
//!
//! ```text
//! RPCRDMA_WRITE_SAMPLES=1 cargo test -p rpcrdma-apps --test samples
//! ```

use std::path::{Path, PathBuf};

use rpcrdma_apps::dump::{self, to_hex};
use rpcrdma_apps::dump_samples::{self, words, Sample};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn writing() -> bool {
    std::env::var_os("RPCRDMA_WRITE_SAMPLES").is_some_and(|v| v == "1")
}

/// Write `bytes` to `path` when writing, else check the file holds exactly them.
fn check_or_write(path: &Path, bytes: &[u8]) {
    if writing() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        return;
    }
    let got = std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run RPCRDMA_WRITE_SAMPLES=1 cargo test -p rpcrdma-apps --test samples",
            path.display()
        )
    });
    assert_eq!(
        got,
        bytes,
        "{} is stale; run RPCRDMA_WRITE_SAMPLES=1 cargo test -p rpcrdma-apps --test samples",
        path.display()
    );
}

/// Seeds per fuzz target: (target, file name, bytes).
fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let samples = dump_samples::all();
    let mut out = Vec::new();
    let stem = |s: &Sample| s.file.trim_end_matches(".bin").to_owned();
    for s in &samples {
        if s.private_data {
            out.push(("private_data", stem(s), s.bytes.clone()));
            let mut noisy = vec![0xf6, 0xab, 0x0e, 0x00, 0x42];
            noisy.extend_from_slice(&s.bytes);
            out.push(("private_data", format!("{}-after-noise", stem(s)), noisy));
            // dump_input mode 3: private data bytes; mode 4: its JSON
            let mut m = vec![3];
            m.extend_from_slice(&s.bytes);
            out.push(("dump_input", format!("pd-{}", stem(s)), m));
            let mut m = vec![4];
            m.extend_from_slice(
                dump::render(&dump::decode_private_data(&s.bytes), true)
                    .unwrap()
                    .as_bytes(),
            );
            out.push(("dump_input", format!("pd-json-{}", stem(s)), m));
            continue;
        }
        let target = if s.bytes[4..8] == 1u32.to_be_bytes() {
            "header_v1"
        } else {
            "header_v2"
        };
        // header_v1/v2 and plan: a selector byte (0 = default limits), then the header
        let mut h = vec![0];
        h.extend_from_slice(&s.bytes);
        out.push((target, stem(s), h));
        // plan: 8 parameter bytes (see rpcrdma_fuzz::plan_params), then the header.
        // "short": 4096-byte inline threshold, one 700-byte item at offset 16 in a
        // reply of 16 + 700 + 256 bytes. "long": 256-byte threshold, no items, a
        // 2000-byte reply, so a Reply chunk is needed.
        for (tag, params) in [
            ("short", [0x03, 1, 0, 1, 2, 100, 0, 0]),
            ("long", [0x0d, 0x07, 0xd0, 0, 0, 0, 0, 0]),
        ] {
            let mut p = params.to_vec();
            p.extend_from_slice(&s.bytes);
            out.push(("plan", format!("{}-{tag}", stem(s)), p));
        }
        // dump_input: mode byte 0 = raw bytes, 1 = hex text, 2 = header JSON text
        let mut m = vec![0];
        m.extend_from_slice(&s.bytes);
        out.push(("dump_input", format!("raw-{}", stem(s)), m));
        let mut m = vec![1];
        m.extend_from_slice(format!("0x{}\n", to_hex(&s.bytes)).as_bytes());
        out.push(("dump_input", format!("hex-{}", stem(s)), m));
        let mut m = vec![2];
        m.extend_from_slice(
            dump::render(&dump::decode_header(&s.bytes).unwrap(), true)
                .unwrap()
                .as_bytes(),
        );
        out.push(("dump_input", format!("json-{}", stem(s)), m));
    }
    // RPC messages: the inline payloads of the samples, plus AUTH_SYS and denials.
    let auth_sys_call = words(&[
        0x0102_0304,
        0,
        2,
        100_003,
        3,
        1,
        1,  // AUTH_SYS
        32, // body length
        7,  // stamp
        4,
        0x686f_7374, // "host"
        1000,
        1000,
        2,
        10,
        20, // gids
        0,
        0, // verf AUTH_NONE
        8,
        0xdead_beef,
        1,
    ]);
    out.push(("rpc_call", "auth-sys-getattr".into(), auth_sys_call.clone()));
    out.push((
        "rpc_call",
        "auth-none-null".into(),
        words(&dump_samples::rpc_call(5, 0, &[])),
    ));
    out.push((
        "rpc_call",
        "auth-none-read".into(),
        words(&dump_samples::rpc_call(6, 6, &[8, 1, 2, 0, 0, 4096])),
    ));
    out.push(("rpc_reply", "success".into(), words(&dump_samples::rpc_reply(5, &[0]))));
    out.push(("rpc_reply", "prog-mismatch".into(), words(&[5, 1, 0, 0, 0, 2, 2, 4])));
    out.push(("rpc_reply", "rpc-mismatch".into(), words(&[5, 1, 1, 0, 2, 2])));
    out.push(("rpc_reply", "auth-error".into(), words(&[5, 1, 1, 1, 1])));
    // Record marking: two selector bytes (record limit 1 + 4 * 64 bytes, piece
    // sizes), then a 2-fragment record and a 1-fragment record.
    let mut rm = vec![64, 3];
    rm.extend_from_slice(&8u32.to_be_bytes());
    rm.extend_from_slice(&auth_sys_call[..8]);
    rm.extend_from_slice(&(0x8000_0000u32 | (auth_sys_call.len() as u32 - 8)).to_be_bytes());
    rm.extend_from_slice(&auth_sys_call[8..]);
    rm.extend_from_slice(&(0x8000_0000u32 | 24).to_be_bytes());
    rm.extend_from_slice(&words(&dump_samples::rpc_reply(5, &[0])));
    out.push(("record_marking", "two-records".into(), rm));
    out.push((
        "record_marking",
        "empty-last".into(),
        0x8000_0000u32.to_be_bytes().to_vec(),
    ));
    out
}

#[test]
fn sample_files_match_the_vectors() {
    let dir = repo_root().join("apps/samples");
    for s in dump_samples::all() {
        check_or_write(&dir.join(s.file), &s.bytes);
    }
    if !writing() {
        // no stray sample files that the vectors no longer describe
        let names: Vec<_> = dump_samples::all().iter().map(|s| s.file).collect();
        for e in std::fs::read_dir(&dir).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".bin") {
                assert!(names.contains(&name.as_str()), "apps/samples/{name} has no vector");
            }
        }
    }
}

#[test]
fn fuzz_seeds_match_the_vectors() {
    let dir = repo_root().join("fuzz/seeds");
    for (target, name, bytes) in seeds() {
        check_or_write(&dir.join(target).join(name), &bytes);
    }
}

#[test]
fn every_sample_decodes() {
    for s in dump_samples::all() {
        if s.private_data {
            assert!(proto::private_data::decode(&s.bytes).present(), "{}", s.file);
        } else {
            let h = proto::header::decode(&s.bytes, &proto::header::Limits::DEFAULT)
                .unwrap_or_else(|e| panic!("{}: {e}", s.file));
            // the RPC message inside MSG samples decodes too
            if let Some(p) = h.payload() {
                let ok = if p[4..8] == [0, 0, 0, 0] {
                    proto::rpc::decode_call(p).is_ok()
                } else {
                    proto::rpc::decode_reply(p).is_ok()
                };
                assert!(ok, "{}: inline RPC message does not decode", s.file);
            }
        }
    }
}

#[test]
fn rpc_seeds_decode() {
    for (target, name, bytes) in seeds() {
        match target {
            "rpc_call" => assert!(proto::rpc::decode_call(&bytes).is_ok(), "{name}"),
            "rpc_reply" => assert!(proto::rpc::decode_reply(&bytes).is_ok(), "{name}"),
            _ => {}
        }
    }
}
