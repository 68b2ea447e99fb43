//! Decoder tests: hand-made vectors from the grammar, typed errors, limits,
//! truncation, and the one-step decoders against the walk.

use super::decode::{decode_msg_one_write_segment, decode_msg_without_chunks, decode_walk};
use super::*;
use crate::error::{DecodeError, DecodeErrorKind};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

const XID: u32 = 0x1234_5678;

/// The one-step decoder of chunk-free MSGs returns a header exactly when
/// the word-by-word walk accepts the message as such a MSG, and the same
/// header. Inputs are built from words near the fast path's conditions
/// (versions, types, list words, XIDs, flags, msg_type) plus random bytes.
#[test]
fn fast_decode_agrees_with_the_walk() {
    use proptest::prelude::*;
    // Each position mostly holds a value the fast path looks at there
    // (the XID, a version, a type, an empty list), sometimes any word.
    let near = |likely: Vec<u32>| {
        prop_oneof![
            8 => proptest::sample::select(likely),
            1 => any::<u32>(),
        ]
    };
    let msg = (
        (
            near(vec![XID]),
            near(vec![1, 2, 3]),
            near(vec![0, 8]),
            near(vec![RDMA_MSG, RDMA_NOMSG, RDMA_ERROR, RDMA2_CONNPROP]),
        ),
        proptest::collection::vec(near(vec![0, 0, 0, 1, 7]), 5),
        (near(vec![XID]), near(vec![0, 1, 2]), near(vec![2])),
        0usize..40,
    )
        .prop_map(|(prefix, lists, rpc, len)| {
            let mut ws = vec![prefix.0, prefix.1, prefix.2, prefix.3];
            ws.extend(lists);
            // The RPC message starts after the v1 or the v2 header.
            let at = if prefix.1 == 2 { 9 } else { 7 };
            ws.truncate(at);
            ws.extend([rpc.0, rpc.1, rpc.2]);
            (ws, len)
        });
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 20_000,
        ..Default::default()
    });
    let fast_hits = std::cell::Cell::new(0u32);
    runner
        .run(&msg, |(ws, len)| {
            let mut buf = words(&ws);
            buf.truncate(len);
            let walk = decode_walk(&buf, &Limits::DEFAULT);
            match decode_msg_without_chunks(&buf) {
                Some(h) => {
                    fast_hits.set(fast_hits.get() + 1);
                    prop_assert_eq!(Ok(h), walk);
                }
                None => {
                    let chunk_free_msg = walk
                        .as_ref()
                        .is_ok_and(|h| matches!(h.body, Body::Msg { chunks, .. } if chunks.is_empty()));
                    prop_assert!(!chunk_free_msg, "walk accepted a chunk-free MSG the fast path refused");
                }
            }
            prop_assert_eq!(decode(&buf, &Limits::DEFAULT), walk);
            Ok(())
        })
        .unwrap();
    // Hand-made hits, so the property above is not vacuous.
    let v1 = words(&[XID, 1, 8, RDMA_MSG, 0, 0, 0, XID, 0, 2]);
    let v2 = words(&[XID, 2, 8, RDMA2_MSG, 0, 7, 0, 0, 0, XID, 0, 2]);
    for (buf, len) in [(&v1, 28), (&v2, 36)] {
        let h = decode_msg_without_chunks(buf).expect("fast path");
        assert_eq!(Ok(h), decode_walk(buf, &Limits::DEFAULT));
        assert_eq!(h.header_len, len);
    }
    assert_eq!(decode(&v2, &Limits::DEFAULT).unwrap().inv_handle(), 7);
    // A v2 Call marked RESPONSE, a wrong RPC XID: not the fast path's.
    assert!(decode_msg_without_chunks(&words(&[XID, 2, 8, RDMA2_MSG, 1, 0, 0, 0, 0, XID, 0, 2])).is_none());
    assert!(decode_msg_without_chunks(&words(&[XID, 1, 8, RDMA_MSG, 0, 0, 0, XID + 1, 0, 2])).is_none());
    assert!(fast_hits.get() > 0, "the random inputs never took the fast path");
}

/// The one-step decoder of the READ shape (one Write chunk of one
/// segment, nothing else) returns a header exactly when the walk accepts
/// such a MSG under the same limits, and the same header; `decode` agrees
/// with the walk on every input.
#[test]
fn one_write_segment_decode_agrees_with_the_walk() {
    use proptest::prelude::*;
    let near = |likely: Vec<u32>| {
        prop_oneof![
            20 => proptest::sample::select(likely),
            1 => any::<u32>(),
        ]
    };
    // Per list word: what the fast path expects there, or a neighbour.
    let lists = (
        (
            near(vec![0, 0, 0, 0, 1]),
            near(vec![1, 1, 1, 1, 0, 2]),
            near(vec![1, 1, 1, 1, 0, 2]),
        ),
        (any::<u32>(), near(vec![4096, 0, 1 << 20]), any::<u32>(), any::<u32>()),
        (near(vec![0, 0, 0, 0, 1]), near(vec![0, 0, 0, 0, 1])),
    )
        .prop_map(|((a, b, c), (h, l, o1, o2), (d, e))| vec![a, b, c, h, l, o1, o2, d, e]);
    let msg = (
        (
            near(vec![XID]),
            near(vec![1, 2, 3]),
            near(vec![0, 8]),
            near(vec![
                RDMA_MSG,
                RDMA_MSG,
                RDMA_MSG,
                RDMA_NOMSG,
                RDMA_ERROR,
                RDMA2_CONNPROP,
            ]),
        ),
        (near(vec![0, RPCRDMA2_F_RESPONSE]), any::<u32>()),
        lists,
        (near(vec![XID]), near(vec![0, 1, 2]), near(vec![2])),
        prop_oneof![3 => Just(usize::MAX), 1 => 0usize..80],
        (near(vec![1, 8, 0]), near(vec![1, 16, 0])),
    )
        .prop_map(|(prefix, v2, lists, rpc, len, (max_w, max_s))| {
            let mut ws = vec![prefix.0, prefix.1, prefix.2, prefix.3];
            if prefix.1 == 2 {
                ws.extend([v2.0, v2.1]);
            }
            ws.extend(lists);
            ws.extend([rpc.0, rpc.1, rpc.2]);
            let limits = Limits {
                max_write_chunks: max_w.min(64),
                max_chunk_segments: max_s.min(64),
                ..Limits::DEFAULT
            };
            (ws, len, limits)
        });
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 20_000,
        ..Default::default()
    });
    let fast_hits = std::cell::Cell::new(0u32);
    runner
        .run(&msg, |(ws, len, limits)| {
            let mut buf = words(&ws);
            buf.truncate(len);
            let walk = decode_walk(&buf, &limits);
            match decode_msg_one_write_segment(&buf, &limits) {
                Some(h) => {
                    fast_hits.set(fast_hits.get() + 1);
                    prop_assert_eq!(Ok(h), walk);
                }
                None => {
                    let read_shape = walk.as_ref().is_ok_and(|h| {
                        matches!(h.body, Body::Msg { chunks, .. }
                            if chunks.reads.is_empty() && chunks.reply.is_none()
                                && chunks.writes.len() == 1
                                && chunks.writes.get(0).is_some_and(|c| c.len() == 1))
                    });
                    prop_assert!(!read_shape, "walk accepted a READ-shaped MSG the fast path refused");
                }
            }
            prop_assert_eq!(decode(&buf, &limits), walk);
            Ok(())
        })
        .unwrap();
    assert!(
        fast_hits.get() > 100,
        "the random inputs rarely took the fast path: {}",
        fast_hits.get()
    );
    // By hand: v1 and v2, the segment as sent.
    let seg = [0xabcd, 4096, 0, 0x1000];
    let mut v1 = vec![XID, 1, 8, RDMA_MSG, 0, 1, 1];
    v1.extend(seg);
    v1.extend([0, 0, XID, 0, 2]);
    let mut v2 = vec![XID, 2, 8, RDMA2_MSG, 0, 7, 0, 1, 1];
    v2.extend(seg);
    v2.extend([0, 0, XID, 0, 2]);
    for (ws, len) in [(&v1, 52), (&v2, 60)] {
        let buf = words(ws);
        let h = decode_msg_one_write_segment(&buf, &Limits::DEFAULT).expect("fast path");
        assert_eq!(Ok(h), decode_walk(&buf, &Limits::DEFAULT));
        assert_eq!(h.header_len, len);
        let w = h.chunks().unwrap().writes.get(0).unwrap();
        assert_eq!(
            w.iter().next().unwrap(),
            Segment {
                handle: 0xabcd,
                length: 4096,
                offset: 0x1000
            }
        );
        // No Write chunk allowed: the walk refuses it, and so does `decode`.
        let none = Limits {
            max_write_chunks: 0,
            ..Limits::DEFAULT
        };
        assert!(decode_msg_one_write_segment(&buf, &none).is_none());
        assert!(decode(&buf, &none).is_err());
    }
}

/// RFC 8166 s4.1 by hand: RDMA_MSG, one Read chunk of two segments at position
/// 132, one Write chunk with one segment, a Reply chunk, then an RPC CALL.
fn v1_msg_vector() -> Vec<u8> {
    words(&[
        XID, 1, 32, RDMA_MSG, // prefix
        1, 132, 0xa, 4096, 0, 0x1000, // read seg 1
        1, 132, 0xb, 100, 0, 0x2000, // read seg 2, same position
        0,      // end reads
        1, 1, 0xc, 8192, 0x1, 0x0, // write chunk: 1 segment
        0,   // end writes
        1, 1, 0xd, 1024, 0, 0x3000, // reply chunk
        XID, 0, 2, // rpc: xid, CALL, rpcvers
    ])
}

#[test]
fn v1_msg_by_hand() {
    let buf = v1_msg_vector();
    let h = decode(&buf, &Limits::DEFAULT).unwrap();
    assert_eq!(h.header_type(), HeaderType::RdmaMsg);
    assert_eq!((h.xid, h.vers, h.credits), (XID, 1, 32));
    let c = h.chunks().unwrap();
    assert_eq!(c.reads.segment_count(), 2);
    assert_eq!(c.reads.chunk_count(), 1);
    let rc = c.reads.chunks().next().unwrap();
    assert_eq!(rc.position, 132);
    assert_eq!(rc.total_len(), 4196);
    assert_eq!(c.writes.len(), 1);
    let wc = c.writes.get(0).unwrap();
    assert_eq!(
        wc.get(0).unwrap(),
        Segment {
            handle: 0xc,
            length: 8192,
            offset: 1 << 32
        }
    );
    assert_eq!(c.reply.unwrap().total_len(), 1024);
    assert_eq!(h.header_len, buf.len() - 12);
    assert_eq!(h.payload().unwrap(), &words(&[XID, 0, 2])[..]);
    // re-encode byte-exactly
    let reads: Vec<_> = c.reads.segments().collect();
    let w0: Vec<_> = wc.iter().collect();
    let rep: Vec<_> = c.reply.unwrap().iter().collect();
    let writes = [&w0[..]];
    let out = HeaderOut {
        xid: XID,
        vers: 1,
        credits: 32,
        flags: 0,
        body: BodyOut::Msg {
            inv_handle: 0,
            chunks: ChunksOut {
                reads: &reads,
                writes: &writes,
                reply: Some(&rep),
            },
        },
    };
    let mut ob = vec![0u8; 512];
    let n = encode(&out, &mut ob).unwrap();
    assert_eq!(n, out.encoded_len());
    assert_eq!(&ob[..n], &buf[..h.header_len]);
}

#[test]
fn v1_minimal_and_errors_by_hand() {
    // The smallest RDMA_MSG: 7 words + rpc xid.
    let b = words(&[XID, 1, 1, RDMA_MSG, 0, 0, 0, XID]);
    let h = decode(&b, &Limits::DEFAULT).unwrap();
    assert_eq!(h.header_len, V1_MIN_HEADER_LEN);
    assert!(h.chunks().unwrap().is_empty());
    // ERR_VERS
    let b = words(&[XID, 1, 0, RDMA_ERROR, ERR_VERS, 1, 1]);
    assert_eq!(
        decode(&b, &Limits::DEFAULT).unwrap().body,
        Body::ErrorV1(V1Error::Vers { low: 1, high: 1 })
    );
    // ERR_CHUNK (5 words, the smallest RDMA_ERROR)
    let b = words(&[XID, 1, 0, RDMA_ERROR, ERR_CHUNK]);
    assert_eq!(
        decode(&b, &Limits::DEFAULT).unwrap().body,
        Body::ErrorV1(V1Error::Chunk)
    );
    // RDMA_DONE
    let b = words(&[XID, 1, 0, RDMA_DONE]);
    assert_eq!(
        decode(&b, &Limits::DEFAULT).unwrap().header_type(),
        HeaderType::RdmaDone
    );
    // MSGP
    let b = words(&[XID, 1, 4, RDMA_MSGP, 64, 1024, 0, 0, 0, XID, 0]);
    let h = decode(&b, &Limits::DEFAULT).unwrap();
    assert!(matches!(
        h.body,
        Body::MsgP {
            align: 64,
            thresh: 1024,
            ..
        }
    ));
}

#[test]
fn v2_by_hand() {
    // RDMA2_MSG call: inv_handle 0xb, one read seg at 0? no: at 8, empty lists after.
    let b = words(&[XID, 2, 16, RDMA2_MSG, 0, 0xb, 1, 8, 0xb, 12, 0, 0x40, 0, 0, 0, XID, 0]);
    let h = decode(&b, &Limits::DEFAULT).unwrap();
    assert_eq!(h.header_type(), HeaderType::Rdma2Msg);
    assert_eq!(h.inv_handle(), 0xb);
    assert!(!h.is_response());
    // A reply (msg_type 1) must carry RESPONSE.
    let bad = words(&[XID, 2, 16, RDMA2_MSG, 0, 0, 0, 0, 0, XID, 1]);
    let e = decode(&bad, &Limits::DEFAULT).unwrap_err();
    assert_eq!((e.field, e.offset), ("rdma_flags", 16));
    let good = words(&[XID, 2, 16, RDMA2_MSG, 1, 0, 0, 0, 0, XID, 1]);
    assert!(decode(&good, &Limits::DEFAULT).unwrap().is_response());
    // RDMA2_ERROR: every code and its body
    for (code, arm, want) in [
        (1, vec![1, 2], V2Error::Vers { low: 1, high: 2 }),
        (2, vec![], V2Error::BadXdr),
        (3, vec![], V2Error::InvalHtype),
        (4, vec![3], V2Error::ReadChunks { max_chunks: 3 }),
        (5, vec![4], V2Error::WriteChunks { max_chunks: 4 }),
        (6, vec![5], V2Error::Segments { max_segments: 5 }),
        (
            7,
            vec![1, 4096],
            V2Error::WriteResource {
                chunk_index: 1,
                length_needed: 4096,
            },
        ),
        (8, vec![9000], V2Error::ReplyResource { length_needed: 9000 }),
        (9, vec![], V2Error::System),
        (77, vec![], V2Error::Other { code: 77 }),
    ] {
        let mut ws = vec![XID, 2, 1, RDMA2_ERROR, RPCRDMA2_F_RESPONSE, code];
        ws.extend(arm);
        let b = words(&ws);
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        assert_eq!(h.body, Body::ErrorV2(want));
        let mut ob = [0u8; 64];
        let n = encode(
            &HeaderOut {
                xid: XID,
                vers: 2,
                credits: 1,
                flags: RPCRDMA2_F_RESPONSE,
                body: BodyOut::ErrorV2(want),
            },
            &mut ob,
        )
        .unwrap();
        assert_eq!(&ob[..n], &b[..], "code {code}");
    }
    // RDMA2_ERROR without RESPONSE is refused.
    let b = words(&[XID, 2, 1, RDMA2_ERROR, 0, 2]);
    assert_eq!(decode(&b, &Limits::DEFAULT).unwrap_err().field, "rdma_flags");
    // CONNPROP with RBSIZ, BRS and an unknown property (kept and skipped).
    let b = words(&[
        XID,
        2,
        0,
        RDMA2_CONNPROP,
        0,
        3,
        1,
        4,
        8192,
        2,
        4,
        2,
        99,
        5,
        0x61626364,
        0x65000000,
    ]);
    let h = decode(&b, &Limits::DEFAULT).unwrap();
    let Body::ConnProp(p) = h.body else { panic!() };
    assert_eq!(p.len(), 3);
    assert_eq!(p.rbsiz(), 8192);
    assert_eq!(p.brs(), RDMA2_RVREQSUP_GENL);
    let unknown = p.iter().nth(2).unwrap();
    assert_eq!(
        (unknown.id, unknown.data, unknown.name(), unknown.value()),
        (99, &b"abcde"[..], None, None)
    );
    // RBSIZ with 2 bytes of data is RDMA2_ERR_BAD_XDR
    let b = words(&[XID, 2, 0, RDMA2_CONNPROP, 0, 1, 1, 2, 0x10000000]);
    let e = decode(&b, &Limits::DEFAULT).unwrap_err();
    assert_eq!(e.v2_reply(1, 2), V2Error::BadXdr);
    // defaults when absent
    let b = words(&[XID, 2, 0, RDMA2_CONNPROP, 0, 0]);
    let Body::ConnProp(p) = decode(&b, &Limits::DEFAULT).unwrap().body else {
        panic!()
    };
    assert_eq!((p.rbsiz(), p.brs()), (4096, RDMA2_RVREQSUP_INLINE));
}

#[test]
fn typed_errors() {
    let l = Limits::DEFAULT;
    // bad version
    let e = decode(&words(&[XID, 7, 0, 0]), &l).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::BadVersion { vers: 7 });
    assert_eq!(e.v1_reply(1, 2), V1Error::Vers { low: 1, high: 2 });
    // unknown proc: ERR_CHUNK in v1, INVAL_HTYPE in v2
    let e = decode(&words(&[XID, 1, 0, 9]), &l).unwrap_err();
    assert_eq!(e.v1_reply(1, 2), V1Error::Chunk);
    let e = decode(&words(&[XID, 2, 0, 2, 0]), &l).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::BadHeaderType { htype: 2 });
    assert_eq!(e.v2_reply(1, 2), V2Error::InvalHtype);
    // bad optional-data discriminant
    let e = decode(&words(&[XID, 1, 0, 0, 2]), &l).unwrap_err();
    assert_eq!((e.kind, e.offset), (DecodeErrorKind::BadDiscriminant { value: 2 }, 16));
    // unaligned position
    let e = decode(&words(&[XID, 1, 0, 0, 1, 6, 1, 1, 0, 0, 0, 0, 0, XID]), &l).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::UnalignedPosition { position: 6 });
    assert_eq!(e.offset, 20);
    // positions going backwards / non-adjacent segments of one chunk
    let e = decode(
        &words(&[XID, 1, 0, 0, 1, 8, 1, 1, 0, 0, 1, 4, 1, 1, 0, 0, 0, 0, 0, XID]),
        &l,
    )
    .unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::ReadListOrder { position: 4 });
    // xid mismatch
    let e = decode(&words(&[XID, 1, 0, 0, 0, 0, 0, XID + 1]), &l).unwrap_err();
    assert!(matches!(e.kind, DecodeErrorKind::XidMismatch { .. }));
    // NOMSG with no chunks
    let e = decode(&words(&[XID, 1, 0, RDMA_NOMSG, 0, 0, 0]), &l).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::NoMsgWithoutChunks);
    // unknown error code in v1
    let e = decode(&words(&[XID, 1, 0, RDMA_ERROR, 3]), &l).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::BadDiscriminant { value: 3 });
}

#[test]
fn over_limit_chunk_lists() {
    let small = Limits {
        max_read_chunks: 2,
        max_read_segments: 3,
        max_write_chunks: 1,
        max_chunk_segments: 2,
        ..Limits::DEFAULT
    };
    let seg = |p: u32| vec![1, p, 1, 1, 0, 0];
    // three read chunks
    let mut ws = vec![XID, 1, 0, 0];
    for p in [0, 4, 8] {
        ws.extend(seg(p));
    }
    ws.extend([0, 0, 0, XID]);
    let e = decode(&words(&ws), &small).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooManyReadChunks { max: 2 });
    assert_eq!(e.v2_reply(1, 2), V2Error::ReadChunks { max_chunks: 2 });
    assert_eq!(e.v1_reply(1, 2), V1Error::Chunk);
    // four read segments in one chunk
    let mut ws = vec![XID, 1, 0, 0];
    for _ in 0..4 {
        ws.extend(seg(4));
    }
    ws.extend([0, 0, 0, XID]);
    let e = decode(&words(&ws), &small).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooManySegments { max: 3 });
    // two write chunks
    let ws = [XID, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, XID];
    let e = decode(&words(&ws), &small).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooManyWriteChunks { max: 1 });
    assert_eq!(e.v2_reply(1, 2), V2Error::WriteChunks { max_chunks: 1 });
    // write chunk with 3 segments; huge counts never allocate or overrun
    let ws = [XID, 1, 0, 0, 0, 1, 3];
    let e = decode(&words(&ws), &small).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooManySegments { max: 2 });
    let ws = [XID, 1, 0, 0, 0, 1, u32::MAX];
    assert!(decode(&words(&ws), &Limits::DEFAULT).is_err());
    let ws = [XID, 1, 0, 0, 0, 0, 1, 0xffff];
    assert!(decode(&words(&ws), &Limits::DEFAULT).is_err());
}

#[test]
fn truncation_at_every_offset() {
    for v in [v1_msg_vector()] {
        let h = decode(&v, &Limits::DEFAULT).unwrap();
        for cut in 0..h.header_len + 4 {
            let e = decode(&v[..cut], &Limits::DEFAULT);
            assert!(e.is_err(), "cut at {cut} decoded");
        }
    }
}

#[test]
fn v1_layout_err_vers_is_recognised_under_any_version_word() {
    let b = words(&[XID, 2, 1, RDMA_ERROR, ERR_VERS, 1, 1]);
    assert!(decode(&b, &Limits::DEFAULT).is_err(), "not a valid v2 header");
    assert_eq!(peek_err_vers_v1_layout(&b), Some((1, 1)));
    assert_eq!(
        peek_err_vers_v1_layout(&words(&[XID, 1, 1, RDMA_ERROR, ERR_CHUNK, 0, 0])),
        None
    );
    assert_eq!(
        peek_err_vers_v1_layout(&words(&[XID, 1, 1, RDMA_ERROR, ERR_VERS, 1])),
        None
    );
}

#[test]
fn error_reply_for_unknown_version_keeps_xid_and_version() {
    let p = peek_prefix(&words(&[XID, 9, 5, 0])).unwrap();
    let err = DecodeError::new(DecodeErrorKind::BadVersion { vers: 9 }, "rdma_vers", 4);
    let mut b = [0u8; 64];
    let n = encode_error_reply(&p, 3, &err, (1, 2), &mut b).unwrap();
    assert_eq!(&b[..n], &words(&[XID, 9, 3, RDMA_ERROR, ERR_VERS, 1, 2])[..]);
    let p = Prefix {
        xid: XID,
        vers: 2,
        credits: 1,
    };
    let err = DecodeError::new(DecodeErrorKind::TooManySegments { max: 64 }, "rdma_target", 40);
    let n = encode_error_reply(&p, 3, &err, (1, 2), &mut b).unwrap();
    assert_eq!(
        &b[..n],
        &words(&[XID, 2, 3, RDMA2_ERROR, 1, RDMA2_ERR_SEGMENTS, 64])[..]
    );
}
