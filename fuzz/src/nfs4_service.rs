//! Whole NFSv4.1 COMPOUNDs through the gateway's service
//! (`rpcrdma_apps::nfs::NfsService`, version 4) over a fresh `mem` backend
//! with a live session.
//!
//! Input: a mode byte (as `nfs_service`'s: peer, data buffer, head size),
//! then up to [`MAX_CALLS`] COMPOUND4args, each a big-endian `u16` length
//! and that many bytes; the harness puts an RPC call header (AUTH_SYS,
//! program 100003, version 4, procedure COMPOUND) in front. Inside, the
//! 8-byte handle placeholder of `nfs_service` becomes a real handle, and
//! the 16 bytes [`SID_MARK`] become the session id the harness made with
//! EXCHANGE_ID and CREATE_SESSION (which the fuzzer could never guess), so
//! SEQUENCE and everything behind it is reached.
//!
//! Invariants: those of `nfs_service` (nothing panics, the reply fits and
//! carries the XID, data and DDP items in bounds), and a successful RPC
//! reply holds a COMPOUND4res whose tag is at most 256 bytes and whose
//! results are at most the operations the session allows.
//!
//! Called from the fuzzing thread only.

use dataplane::service::{CallView, ReplyBuilder, Service};
use dataplane::ConnId;
use proto::nfs4::*;
use proto::plan::Piece;
use proto::rpc;
use proto::xdr::Reader;
use rpcrdma_apps::nfs::NfsService;

use crate::nfs_service::{one_call, setup, substitute, FH_MARK};

/// COMPOUNDs per input.
pub const MAX_CALLS: usize = 8;
/// Replaced by the session id.
pub const SID_MARK: [u8; 16] = *b"SESSION-ID-MARK!";

fn w(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_be_bytes());
}

fn opaque(v: &mut Vec<u8>, d: &[u8]) {
    w(v, d.len() as u32);
    v.extend_from_slice(d);
    v.resize(v.len() + (4 - d.len() % 4) % 4, 0);
}

/// An RPC Call of COMPOUND with AUTH_SYS (uid 1000) around `args`.
fn rpc_call(xid: u32, args: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(args.len() + 64);
    for x in [xid, 0, 2, 100_003, NFS_V4, NFSPROC4_COMPOUND] {
        w(&mut v, x);
    }
    w(&mut v, 1);
    w(&mut v, 24);
    w(&mut v, 0);
    w(&mut v, 2);
    v.extend_from_slice(b"fz\0\0");
    for x in [1000, 1000, 0, 0, 0] {
        w(&mut v, x);
    }
    v.extend_from_slice(args);
    v
}

/// Run `args` through `svc` with a big reply buffer; the reply's results
/// (after the RPC header).
fn run(svc: &mut NfsService, xid: u32, args: &[u8]) -> Vec<u8> {
    let msg = rpc_call(xid, args);
    let piece = [Piece::Inline {
        start: 0,
        len: msg.len() as u32,
    }];
    let view = CallView::contiguous(ConnId(0), Some("10.0.0.1".parse().expect("ip")), 1, xid, &msg, &piece);
    let mut head = vec![0u8; 8192];
    let mut rb = ReplyBuilder::new(&mut head, None);
    svc.handle_call(&view, &mut rb).expect("answered");
    let n = rb.finish().head_len as usize;
    let (_, at) = rpc::decode_reply(&head[..n]).expect("reply");
    head[at..n].to_vec()
}

/// EXCHANGE_ID and CREATE_SESSION through the service: the session id.
fn session(svc: &mut NfsService) -> [u8; 16] {
    let mut a = Vec::new();
    opaque(&mut a, b"");
    w(&mut a, 1);
    w(&mut a, 1);
    w(&mut a, OP_EXCHANGE_ID);
    a.extend_from_slice(b"fuzzverf");
    opaque(&mut a, b"fuzz client");
    for x in [0, SP4_NONE, 0] {
        w(&mut a, x);
    }
    let r = run(svc, 1, &a);
    let mut d = Reader::new(&r);
    let ok = |d: &mut Reader<'_>| {
        let s = d.u32("status").expect("status");
        d.opaque_var(256, "tag").expect("tag");
        d.u32("numres").expect("numres");
        d.u32("op").expect("op");
        assert_eq!(d.u32("status").expect("status"), NFS4_OK, "{s}");
    };
    ok(&mut d);
    let clientid = d.u64("clientid").expect("clientid");
    let seq = d.u32("seq").expect("seq");
    let mut a = Vec::new();
    opaque(&mut a, b"");
    w(&mut a, 1);
    w(&mut a, 1);
    w(&mut a, OP_CREATE_SESSION);
    a.extend_from_slice(&clientid.to_be_bytes());
    for x in [seq, 0, 0, 65536, 65536, 4096, 16, 8, 0, 0, 4096, 4096, 0, 2, 1, 0, 0x4000_0000, 0] {
        w(&mut a, x);
    }
    let r = run(svc, 2, &a);
    let mut d = Reader::new(&r);
    ok(&mut d);
    let mut sid = [0u8; 16];
    sid.copy_from_slice(d.bytes(16, "sid").expect("sid"));
    sid
}

/// Replace the session placeholder.
fn put_sid(call: &mut [u8], sid: &[u8; 16]) {
    let mut i = 0;
    while i + 16 <= call.len() {
        if call[i..i + 16] == SID_MARK {
            call[i..i + 16].copy_from_slice(sid);
            i += 16;
        } else {
            i += 1;
        }
    }
}

/// The COMPOUND4res invariants of a successful reply.
fn check_compound_res(head: &[u8]) {
    let Ok((h, at)) = rpc::decode_reply(head) else { return };
    if !h.is_success() {
        return;
    }
    let mut r = Reader::new(&head[at..]);
    r.u32("status").expect("COMPOUND4res status");
    r.opaque_var(MAX_TAG_BYTES, "tag").expect("tag within bounds");
    let n = r.u32("numres").expect("numres");
    assert!(n <= MAX_OPS, "more results than operations allowed");
}

/// The `nfs4_service` target.
pub fn check_nfs4_service(data: &[u8]) {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let peer = match mode & 3 {
        0 | 1 => Some("10.1.2.3".parse().expect("ip")),
        2 => Some("192.0.2.1".parse().expect("ip")),
        _ => None,
    };
    let data_cap = match (mode >> 2) & 3 {
        0 => 0,
        1 => 100,
        _ => 65_536,
    };
    let head_cap = if mode & 0x10 != 0 { 256 } else { 8192 };
    let (mut svc, handles) = setup();
    let sid = session(&mut svc);
    let mut head = vec![0u8; head_cap];
    let mut buf = vec![0u8; data_cap];
    for i in 0..MAX_CALLS {
        if rest.len() < 2 {
            break;
        }
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let mut args = substitute(&rest[2..2 + n], &handles);
        rest = &rest[2 + n..];
        put_sid(&mut args, &sid);
        // The data hint's reading of a COMPOUND (a fast path for the Linux
        // client's READ) agrees with decoding every operation.
        assert_eq!(
            proto::nfs4::args::final_read_count(&args),
            proto::nfs4::args::final_read_count_by_decoding(&args),
            "final_read_count"
        );
        let msg = rpc_call(100 + i as u32, &args);
        one_call(&mut svc, &msg, peer, &mut head, &mut buf);
        // one_call checked the header; the results' top as well.
        check_compound_res(&head);
    }
}

/// Seeds: one input per family of operations, each COMPOUND after SEQUENCE
/// on its own slot sequence.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    fn fh(v: &mut Vec<u8>, n: u8) {
        v.extend_from_slice(&FH_MARK);
        v.push(n);
    }
    fn compound(seq: u32, ops: &dyn Fn(&mut Vec<u8>) -> u32) -> Vec<u8> {
        compound_minor(1, seq, ops)
    }
    fn compound_minor(minor: u32, seq: u32, ops: &dyn Fn(&mut Vec<u8>) -> u32) -> Vec<u8> {
        let mut body = Vec::new();
        w(&mut body, OP_SEQUENCE);
        body.extend_from_slice(&SID_MARK);
        for x in [seq, 0, 0, 1] {
            w(&mut body, x);
        }
        let n = ops(&mut body) + 1;
        let mut v = Vec::new();
        opaque(&mut v, b"");
        w(&mut v, minor);
        w(&mut v, n);
        v.extend_from_slice(&body);
        v
    }
    let stateid0 = |v: &mut Vec<u8>| v.extend_from_slice(&[0; 16]);
    let getattr = |v: &mut Vec<u8>| {
        w(v, OP_GETATTR);
        for x in [2, 0x0010_011a, 0x00b0_a23a] {
            w(v, x);
        }
    };
    let families: Vec<(&'static str, Vec<Vec<u8>>)> = vec![
        (
            "namespace",
            vec![
                compound(1, &|v| {
                    w(v, OP_PUTROOTFH);
                    w(v, OP_LOOKUP);
                    opaque(v, b"e");
                    w(v, OP_GETFH);
                    getattr(v);
                    4
                }),
                compound(2, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 0);
                    w(v, OP_LOOKUPP);
                    w(v, OP_SECINFO_NO_NAME);
                    w(v, 0);
                    3
                }),
                compound(3, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 0);
                    w(v, OP_READDIR);
                    for x in [0, 0, 0, 0, 4096, 8192, 1, 0x0010_011a] {
                        w(v, x);
                    }
                    2
                }),
            ],
        ),
        (
            "open-io-close",
            vec![
                compound(1, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 0);
                    w(v, OP_OPEN);
                    for x in [0, 3, 0, 0, 0] {
                        w(v, x);
                    }
                    opaque(v, b"owner");
                    for x in [OPEN4_CREATE, UNCHECKED4, 0, 0, CLAIM_NULL] {
                        w(v, x);
                    }
                    opaque(v, b"new");
                    w(v, OP_WRITE);
                    w(v, 1);
                    v.extend_from_slice(&[0; 12]);
                    for x in [0, 0, FILE_SYNC4] {
                        w(v, x);
                    }
                    opaque(v, b"hello");
                    w(v, OP_READ);
                    w(v, 1);
                    v.extend_from_slice(&[0; 12]);
                    for x in [0, 0, 5] {
                        w(v, x);
                    }
                    4
                }),
                compound(2, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 1);
                    w(v, OP_READ);
                    stateid0(v);
                    for x in [0, 0, 4096] {
                        w(v, x);
                    }
                    2
                }),
                compound(3, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 1);
                    w(v, OP_COMMIT);
                    for x in [0, 0, 0] {
                        w(v, x);
                    }
                    2
                }),
            ],
        ),
        (
            "change",
            vec![
                compound(1, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 1);
                    w(v, OP_SETATTR);
                    stateid0(v);
                    for x in [2, 0, 2, 4, 0o600] {
                        w(v, x);
                    }
                    2
                }),
                compound(2, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 2);
                    w(v, OP_CREATE);
                    w(v, NF4LNK);
                    opaque(v, b"target");
                    opaque(v, b"sl");
                    w(v, 0);
                    w(v, 0);
                    w(v, OP_READLINK);
                    3
                }),
                compound(3, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 0);
                    w(v, OP_SAVEFH);
                    w(v, OP_PUTFH);
                    fh(v, 2);
                    w(v, OP_RENAME);
                    opaque(v, b"file");
                    opaque(v, b"moved");
                    w(v, OP_REMOVE);
                    opaque(v, b"moved");
                    5
                }),
            ],
        ),
        (
            "locks",
            vec![compound(1, &|v| {
                w(v, OP_PUTFH);
                fh(v, 0);
                w(v, OP_OPEN);
                for x in [0, 3, 0, 0, 0] {
                    w(v, x);
                }
                opaque(v, b"lock-open-owner");
                for x in [OPEN4_CREATE, UNCHECKED4, 0, 0, CLAIM_NULL] {
                    w(v, x);
                }
                opaque(v, b"locked");
                // LOCK through the current (open) stateid, a new owner.
                for x in [OP_LOCK, WRITE_LT, 0, 0, 0, 0, 10, 1, 0, 1] {
                    w(v, x);
                }
                v.extend_from_slice(&[0; 12]);
                for x in [0, 0, 0] {
                    w(v, x);
                }
                opaque(v, b"lock-owner");
                for x in [OP_LOCKT, READ_LT, 0, 0, 0, 10, 0, 0] {
                    w(v, x);
                }
                opaque(v, b"lock-owner");
                // LOCKU through the current (lock) stateid.
                for x in [OP_LOCKU, WRITE_LT, 0, 1] {
                    w(v, x);
                }
                v.extend_from_slice(&[0; 12]);
                for x in [0, 0, 0, 10] {
                    w(v, x);
                }
                5
            })],
        ),
        (
            "v42",
            vec![
                compound_minor(2, 1, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 1);
                    w(v, OP_ALLOCATE);
                    stateid0(v);
                    for x in [0, 0, 0, 4096] {
                        w(v, x);
                    }
                    w(v, OP_SEEK);
                    stateid0(v);
                    for x in [0, 0, NFS4_CONTENT_DATA] {
                        w(v, x);
                    }
                    3
                }),
                compound_minor(2, 2, &|v| {
                    w(v, OP_PUTFH);
                    fh(v, 1);
                    w(v, OP_SAVEFH);
                    w(v, OP_PUTFH);
                    fh(v, 0);
                    w(v, OP_OPEN);
                    for x in [0, 3, 0, 0, 0] {
                        w(v, x);
                    }
                    opaque(v, b"copy-owner");
                    for x in [OPEN4_CREATE, UNCHECKED4, 0, 0, CLAIM_NULL] {
                        w(v, x);
                    }
                    opaque(v, b"copied");
                    // COPY from the saved file (anonymous stateid) to the
                    // current one (its open's stateid), to the source's end.
                    w(v, OP_COPY);
                    stateid0(v);
                    w(v, 1);
                    v.extend_from_slice(&[0; 12]);
                    for x in [0, 0, 0, 0, 0, 0, 0, 1, 0] {
                        w(v, x);
                    }
                    w(v, OP_DEALLOCATE);
                    w(v, 1);
                    v.extend_from_slice(&[0; 12]);
                    for x in [0, 0, 0, 1] {
                        w(v, x);
                    }
                    6
                }),
            ],
        ),
    ];
    crate::seeds::frame_families(families)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::{check_or_write_seed, framed_calls, run_seeds_mutated, seed_dir};

    /// The committed seeds are what [`seeds`] builds (RPCRDMA_WRITE_SEEDS=1
    /// rewrites them).
    #[test]
    fn nfs4_service_seeds_are_current() {
        for (name, bytes) in seeds() {
            check_or_write_seed(&seed_dir("nfs4_service").join(name), &bytes);
        }
    }

    /// Every seed, every truncation, and every mode byte.
    #[test]
    fn nfs4_service_seeds() {
        let n = run_seeds_mutated("nfs4_service", &[0u8, 2, 3, 0x08, 0x14, 0x1c], 5, check_nfs4_service);
        assert!(n >= 3, "seeds missing");
    }

    /// A COMPOUND whose tag (256 bytes, the most allowed) does not fit a
    /// 256-byte reply head is answered, SYSTEM_ERR, whether its minor version
    /// is served or not (the fuzzer's first finding: it was dropped).
    #[test]
    fn hostile_peer_nfs4_tag_that_does_not_fit_the_head_is_answered() {
        for minor in [1u32, 7] {
            let mut args = Vec::new();
            opaque(&mut args, &[b't'; MAX_TAG_BYTES as usize]);
            w(&mut args, minor);
            w(&mut args, 1);
            w(&mut args, OP_PUTROOTFH);
            let (mut svc, _) = setup();
            let msg = rpc_call(9, &args);
            let mut head = vec![0u8; 256];
            one_call(&mut svc, &msg, Some("10.1.2.3".parse().expect("ip")), &mut head, &mut []);
            let (h, _) = rpc::decode_reply(&head).expect("reply");
            assert!(
                matches!(h.body, rpc::ReplyBody::Accepted { data: rpc::AcceptedReply::SystemErr, .. }),
                "minor {minor}: {:?}",
                h.body
            );
        }
    }

    /// The seeds reach the operations: every COMPOUND succeeds, with a
    /// live session.
    #[test]
    fn nfs4_seeds_succeed() {
        for (name, input) in seeds() {
            let (mut svc, handles) = setup();
            let sid = session(&mut svc);
            for framed in framed_calls(&input[1..]) {
                let mut args = substitute(framed, &handles);
                put_sid(&mut args, &sid);
                let r = run(&mut svc, 7, &args);
                let status = u32::from_be_bytes([r[0], r[1], r[2], r[3]]);
                assert_eq!(status, NFS4_OK, "{name}: {r:?}");
            }
        }
    }
}
