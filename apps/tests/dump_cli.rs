//! `rpcrdma-dump` end to end: the built binary against hand-written byte vectors
//! (the samples of `rpcrdma_apps::dump_samples`, written word by word from the
//! specs) and hand-written expected JSON.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use rpcrdma_apps::dump_samples::{self, words};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_rpcrdma-dump");

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The tool may exit before reading everything (usage errors): ignore EPIPE.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

/// Run, expect success, parse stdout as one JSON value.
fn dump_json(args: &[&str], stdin: &[u8]) -> Value {
    let out = run(args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sample(file: &str) -> Vec<u8> {
    dump_samples::by_file(file).unwrap().bytes
}

/// Hex with spaces (for readability of the expected values) to plain hex.
fn hx(s: &str) -> String {
    s.split_whitespace().collect()
}

/// Expect exit status 1, exactly one line on stderr containing every `needle`,
/// and nothing on stdout.
fn assert_fails(args: &[&str], stdin: &[u8], needles: &[&str]) {
    let out = run(args, stdin);
    assert_eq!(out.status.code(), Some(1), "{args:?} {needles:?}");
    assert!(out.stdout.is_empty(), "{args:?}: stdout not empty");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.ends_with('\n'));
    for n in needles {
        assert!(err.contains(n), "{err:?} lacks {n:?}");
    }
}

const NFS_WRITE_CALL_TAIL: &str = "000186a3 00000003 00000007 00000000 00000000 00000000 00000000 \
                                   00000008 deadbeef 00000001 00000000 00000000 00001770 00000002 00001770";

#[test]
fn v1_msg_with_write_chunk() {
    let v = dump_json(&[], &sample("v1-msg-write-chunk.bin"));
    assert_eq!(
        v,
        json!({
            "version": 1, "xid": 0x2a00_0001u32, "credits": 32, "type": "RDMA_MSG",
            "reads": [],
            "writes": [[
                {"handle": 0x1001, "length": 4096, "offset": 0x7f00_0000_1000u64},
                {"handle": 0x1002, "length": 4096, "offset": 0x7f00_0000_2000u64}
            ]],
            "reply": null,
            "payload_offset": 68, "payload_length": 64,
            "payload": hx("2a000001 00000000 00000002 000186a3 00000003 00000006 00000000 00000000 00000000 00000000 \
                           00000008 deadbeef 00000001 00000000 00000000 00002000"),
        })
    );
}

#[test]
fn v1_msg_with_read_chunk() {
    let v = dump_json(&[], &sample("v1-msg-read-chunk.bin"));
    assert_eq!(
        v,
        json!({
            "version": 1, "xid": 0x2a00_0002u32, "credits": 16, "type": "RDMA_MSG",
            "reads": [
                {"position": 72, "handle": 0x3001, "length": 4096, "offset": 0x10_0000},
                {"position": 72, "handle": 0x3002, "length": 1904, "offset": 0x20_0000}
            ],
            "writes": [], "reply": null,
            "payload_offset": 76, "payload_length": 72,
            "payload": hx(&format!("2a000002 00000000 00000002 {NFS_WRITE_CALL_TAIL}")),
        })
    );
}

#[test]
fn v1_nomsg_msgp_done() {
    assert_eq!(
        dump_json(&[], &sample("v1-nomsg-pzrc.bin")),
        json!({
            "version": 1, "xid": 0x2a00_0003u32, "credits": 8, "type": "RDMA_NOMSG",
            "reads": [{"position": 0, "handle": 0x2001, "length": 2048, "offset": 0x1_0000_0000u64}],
            "writes": [],
            "reply": [{"handle": 0x2002, "length": 4096, "offset": 0x2_0000_0000u64}],
        })
    );
    assert_eq!(
        dump_json(&[], &sample("v1-msgp.bin")),
        json!({
            "version": 1, "xid": 0x2a00_0004u32, "credits": 4, "type": "RDMA_MSGP",
            "align": 64, "thresh": 1024,
            "reads": [], "writes": [], "reply": null,
            "payload_offset": 36, "payload_length": 40,
            "payload": hx("2a000004 00000000 00000002 000186a3 00000003 00000000 00000000 00000000 00000000 00000000"),
        })
    );
    assert_eq!(
        dump_json(&[], &sample("v1-done.bin")),
        json!({"version": 1, "xid": 0x2a00_0005u32, "credits": 0, "type": "RDMA_DONE"})
    );
}

#[test]
fn v1_errors() {
    assert_eq!(
        dump_json(&[], &sample("v1-err-vers.bin")),
        json!({
            "version": 1, "xid": 0x2a00_0006u32, "credits": 0, "type": "RDMA_ERROR",
            "error": {"code": 1, "name": "ERR_VERS", "vers_low": 1, "vers_high": 2},
        })
    );
    assert_eq!(
        dump_json(&[], &sample("v1-err-chunk.bin")),
        json!({
            "version": 1, "xid": 0x2a00_0006u32, "credits": 0, "type": "RDMA_ERROR",
            "error": {"code": 2, "name": "ERR_CHUNK"},
        })
    );
}

#[test]
fn v2_msg_and_nomsg() {
    assert_eq!(
        dump_json(&[], &sample("v2-msg.bin")),
        json!({
            "version": 2, "xid": 0x2b00_0001u32, "credits": 64, "type": "RDMA2_MSG", "flags": 0,
            "inv_handle": 0x77,
            "reads": [{"position": 72, "handle": 0x4001, "length": 6000, "offset": 0x30_0000}],
            "writes": [],
            "reply": [{"handle": 0x4002, "length": 1024, "offset": 0x40_0000}],
            "payload_offset": 80, "payload_length": 72,
            "payload": hx(&format!("2b000001 00000000 00000002 {NFS_WRITE_CALL_TAIL}")),
        })
    );
    assert_eq!(
        dump_json(&[], &sample("v2-msg-reply.bin")),
        json!({
            "version": 2, "xid": 0x2b00_0002u32, "credits": 64, "type": "RDMA2_MSG", "flags": 1,
            "inv_handle": 0, "reads": [], "writes": [], "reply": null,
            "payload_offset": 36, "payload_length": 24,
            "payload": hx("2b000002 00000001 00000000 00000000 00000000 00000000"),
        })
    );
    assert_eq!(
        dump_json(&[], &sample("v2-nomsg.bin")),
        json!({
            "version": 2, "xid": 0x2b00_0003u32, "credits": 64, "type": "RDMA2_NOMSG", "flags": 0,
            "inv_handle": 0,
            "reads": [
                {"position": 0, "handle": 0x5001, "length": 4096, "offset": 0x1000},
                {"position": 0, "handle": 0x5002, "length": 100, "offset": 0x2000}
            ],
            "writes": [[{"handle": 0x5003, "length": 65536, "offset": 0x3000}]],
            "reply": null,
        })
    );
}

#[test]
fn v2_connprop() {
    assert_eq!(
        dump_json(&[], &sample("v2-connprop.bin")),
        json!({
            "version": 2, "xid": 0x2b00_0004u32, "credits": 0, "type": "RDMA2_CONNPROP", "flags": 0,
            "properties": [
                {"id": 1, "name": "RBSIZ", "value": 8192, "data": "00002000"},
                {"id": 2, "name": "BRS", "value": 2, "data": "00000002"},
                {"id": 99, "name": null, "value": null, "data": "6162636465"}
            ],
        })
    );
    // RBSIZ with zero-length data means "the default": value null
    let b = words(&[1, 2, 0, 5, 0, 1, 1, 0]);
    assert_eq!(
        dump_json(&[], &b)["properties"],
        json!([{"id": 1, "name": "RBSIZ", "value": null, "data": ""}])
    );
}

#[test]
fn v2_errors_every_arm() {
    assert_eq!(
        dump_json(&[], &sample("v2-error.bin")),
        json!({
            "version": 2, "xid": 0x2b00_0005u32, "credits": 1, "type": "RDMA2_ERROR", "flags": 1,
            "error": {"code": 7, "name": "RDMA2_ERR_WRITE_RESOURCE", "chunk_index": 1, "length_needed": 4096},
        })
    );
    assert_eq!(
        dump_json(&[], &sample("v2-err-vers.bin"))["error"],
        json!({"code": 1, "name": "RDMA2_ERR_VERS", "vers_low": 1, "vers_high": 2})
    );
    for (arm, want) in [
        (vec![2], json!({"code": 2, "name": "RDMA2_ERR_BAD_XDR"})),
        (vec![3], json!({"code": 3, "name": "RDMA2_ERR_INVAL_HTYPE"})),
        (
            vec![4, 8],
            json!({"code": 4, "name": "RDMA2_ERR_READ_CHUNKS", "max_chunks": 8}),
        ),
        (
            vec![5, 9],
            json!({"code": 5, "name": "RDMA2_ERR_WRITE_CHUNKS", "max_chunks": 9}),
        ),
        (
            vec![6, 64],
            json!({"code": 6, "name": "RDMA2_ERR_SEGMENTS", "max_segments": 64}),
        ),
        (
            vec![8, 9000],
            json!({"code": 8, "name": "RDMA2_ERR_REPLY_RESOURCE", "length_needed": 9000}),
        ),
        (vec![9], json!({"code": 9, "name": "RDMA2_ERR_SYSTEM"})),
        (vec![1234], json!({"code": 1234, "name": null})),
    ] {
        let mut ws = vec![0x77, 2, 1, 4, 1];
        ws.extend(arm);
        let b = words(&ws);
        let v = dump_json(&[], &b);
        assert_eq!(v["error"], want);
        // and back, byte for byte
        let out = run(&["--encode"], v.to_string().as_bytes());
        assert!(out.status.success());
        assert_eq!(out.stdout, b);
    }
}

#[test]
fn every_sample_round_trips_through_encode() {
    for s in dump_samples::all() {
        let pd: &[&str] = if s.private_data { &["--private-data"] } else { &[] };
        let dumped = run(pd, &s.bytes);
        assert!(dumped.status.success(), "{}", s.file);
        // binary out
        let enc = run(&[pd, &["--encode"]].concat(), &dumped.stdout);
        assert!(
            enc.status.success(),
            "{}: {}",
            s.file,
            String::from_utf8_lossy(&enc.stderr)
        );
        assert_eq!(enc.stdout, s.bytes, "{}", s.file);
        // hex out, then hex in again
        let enc_hex = run(&[pd, &["--encode", "--hex"]].concat(), &dumped.stdout);
        assert!(enc_hex.status.success());
        let text = String::from_utf8(enc_hex.stdout).unwrap();
        assert_eq!(text, format!("{}\n", rpcrdma_apps::dump::to_hex(&s.bytes)));
        let again = run(&[pd, &["--hex"]].concat(), text.as_bytes());
        assert_eq!(again.stdout, dumped.stdout, "{}", s.file);
    }
}

#[test]
fn reads_a_file_argument_and_compact_output() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples");
    let path = dir.join("v1-done.bin");
    let out = run(&["--compact", path.to_str().unwrap()], b"ignored");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"version": 1, "xid": 0x2a00_0005u32, "credits": 0, "type": "RDMA_DONE"})
    );
    // "-" is stdin
    let v = dump_json(&["-"], &sample("v1-done.bin"));
    assert_eq!(v["type"], "RDMA_DONE");
}

#[test]
fn hex_input() {
    let want = dump_json(&[], &sample("v1-err-vers.bin"));
    for text in [
        "2a000006000000010000000000000004000000010000000100000002",
        "0x2a000006 0x00000001 0x00000000 0x00000004\n0x00000001 0x00000001 0x00000002\n",
        "  2A00 0006\r\n0000 0001 0000 0000\t00000004 00000001 00000001 00000002  ",
        "0X2a0000060000000100000000000000040000000100000001 00000002",
    ] {
        assert_eq!(dump_json(&["--hex"], text.as_bytes()), want, "{text:?}");
    }
    assert_fails(&["--hex"], b"2a00 00zz", &["hex", "'z'", "offset 7"]);
    assert_fails(&["--hex"], b"2a0", &["hex", "odd"]);
    assert_fails(&["--hex"], &[0xff, 0xfe], &["hex", "offset 0"]);
}

#[test]
fn malformed_headers_name_field_and_offset() {
    let write_chunk = sample("v1-msg-write-chunk.bin");
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (vec![], "rdma_xid", "offset 0"),
        (words(&[1, 7, 0, 0]), "rdma_vers", "offset 4"),
        (words(&[1, 1, 0, 9]), "rdma_proc", "offset 12"),
        (
            words(&[1, 1, 0, 0, 1, 6, 1, 1, 0, 0, 0, 0, 0, 1]),
            "rdma_position",
            "offset 20",
        ),
        (write_chunk[..40].to_vec(), "rdma_segment", "offset 28"),
        (words(&[1, 1, 0, 0, 2]), "rdma_reads", "offset 16"),
        (words(&[1, 2, 0, 4, 0, 2]), "rdma_flags", "offset 16"),
        (words(&[1, 1, 0, 1, 0, 0, 0]), "rdma_nomsg", "offset 12"),
        (words(&[1, 2, 0, 5, 0, 1, 1, 2, 0]), "rdma_data", "offset 28"),
    ];
    for (bytes, field, offset) in cases {
        assert_fails(&[], &bytes, &[field, offset]);
        // the same through --hex
        let text = rpcrdma_apps::dump::to_hex(&bytes);
        assert_fails(&["--hex"], text.as_bytes(), &[field, offset]);
    }
}

#[test]
fn other_failures_are_one_line_exit_1() {
    assert_fails(
        &["/nonexistent/rpcrdma-dump-input"],
        b"",
        &["/nonexistent/rpcrdma-dump-input"],
    );
    assert_fails(&[env!("CARGO_MANIFEST_DIR")], b"", &["cannot read"]);
    assert_fails(&["--encode"], b"{", &["JSON"]);
    assert_fails(&["--encode"], b"not json at all", &["JSON"]);
    assert_fails(
        &["--encode"],
        br#"{"version":1,"xid":1,"credits":0,"type":"RDMA_DONE","flags":1}"#,
        &["flags"],
    );
    assert_fails(
        &["--encode"],
        br#"{"version":1,"xid":1,"credits":0,"type":"RDMA_ERROR","error":{"code":1}}"#,
        &["error.vers_low"],
    );
    assert_fails(
        &["--encode", "--private-data"],
        br#"{"send_size": 1000}"#,
        &["send_size"],
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = run(&["--no-such-flag"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let out = run(&["a", "b"], b"");
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--help"], b"");
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    // the help documents where the error arguments go
    assert!(help.contains("inside the") && help.contains("length_needed"), "{help}");
}

#[test]
fn private_data_present_and_absent() {
    assert_eq!(
        dump_json(&["--private-data"], &sample("private-data.bin")),
        json!({
            "present": true, "offset": 0, "version": 1, "remote_invalidation": true,
            "send_size": 4096, "receive_size": 8192
        })
    );
    // after noise, via hex, R clear
    assert_eq!(
        dump_json(&["--private-data", "--hex"], b"00 11 f6ab0e18 01 00 ff 1f 99"),
        json!({
            "present": true, "offset": 2, "version": 1, "remote_invalidation": false,
            "send_size": 262_144, "receive_size": 32_768
        })
    );
    let absent = json!({
        "present": false, "offset": null, "version": 1, "remote_invalidation": false,
        "send_size": 1024, "receive_size": 1024
    });
    assert_eq!(dump_json(&["--private-data"], b""), absent);
    // an identifier with an unknown version is not a message
    assert_eq!(dump_json(&["--private-data", "--hex"], b"f6ab0e18 02 01 03 03"), absent);
    // absent encodes to nothing
    let out = run(&["--encode", "--private-data"], absent.to_string().as_bytes());
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    // a hand-written JSON form
    let out = run(
        &["--encode", "--private-data", "--hex"],
        br#"{"remote_invalidation": false, "send_size": 2048, "receive_size": 262144}"#,
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "f6ab0e18010001ff\n");
}

#[test]
fn edited_json_encodes() {
    // Take a dump, change fields, encode, and dump again.
    let mut v = dump_json(&[], &sample("v1-nomsg-pzrc.bin"));
    v["credits"] = json!(99);
    v["writes"] = json!([[{"handle": 1, "length": 2, "offset": 3}]]);
    let out = run(&["--encode"], v.to_string().as_bytes());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(dump_json(&[], &out.stdout), v);
}
