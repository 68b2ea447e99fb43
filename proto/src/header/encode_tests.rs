//! Encoder tests: every one-step encoder of a header shape equals the general
//! encoders ([`encode`](super::encode), `encode_call_header`'s word-by-word
//! writer, [`encode_reply_header`](super::encode_reply_header)) byte for byte.

use super::*;
use super::{encode_call_header_general, encode_reply_header_general};
use crate::plan::*;

/// The one-step Call header of the READ shape is the general encoder's.
#[test]
fn one_write_call_header_agrees_with_the_general_encoder() {
    use proptest::prelude::*;
    let case = (
        prop_oneof![Just(1u32), Just(2u32)],
        (any::<u32>(), 0u32..256, any::<u32>()),
        (any::<u32>(), 0u32..10_000, any::<u64>()),
        0u32..10_000,
        0u32..400,
        64u32..1200,
    );
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 10_000,
        ..Default::default()
    });
    runner
        .run(
            &case,
            |(vers, (xid, credits, inv), (handle, length, offset), want, inline_len, max)| {
                let mut plan = CallPlan {
                    vers,
                    kind: CallKind::Short,
                    call_len: inline_len,
                    reads: FixedVec::new(),
                    inline: FixedVec::new(),
                    inline_len,
                    write_chunks: FixedVec::new(),
                    reply_chunk: None,
                    call_inline_max: max,
                };
                let _ = plan.write_chunks.push(want);
                let seg = [Segment { handle, length, offset }];
                let writes: [&[Segment]; 1] = [&seg];
                let mut a = [0u8; 128];
                let fast = encode_call_header(&plan, xid, credits, inv, &[], &writes, None, &mut a);
                // The word-by-word writer, which every shape takes.
                let mut b = [0u8; 128];
                let general = encode_call_header_general(&plan, xid, credits, inv, &[], &writes, None, &mut b);
                prop_assert_eq!(fast, general);
                if let Ok(n) = fast {
                    prop_assert_eq!(&a[..n], &b[..n]);
                    let msg = [&a[..n], &xid.to_be_bytes()[..]].concat();
                    let h = crate::header::decode(&msg, &crate::header::Limits::DEFAULT);
                    prop_assert!(h.is_ok_and(|h| h.chunks().and_then(|c| c.one_write_segment()) == Some(seg[0])));
                }
                Ok(())
            },
        )
        .unwrap();
}

/// The one-step Short reply header equals what the planner writes for a
/// chunk-free Call, in both versions, whatever the credits and flags.
#[test]
fn short_reply_header_equals_the_planned_one() {
    let none = ChunkLists::default();
    for vers in [RPCRDMA_VERSION_1, RPCRDMA_VERSION_2] {
        for (xid, credits, flags, reply_len) in
            [(1u32, 1u32, 0u32, 24usize), (0xdead_beef, 128, 0, 100), (7, 0, 0x10, 4)]
        {
            let plan = plan_reply(reply_len, &[], &none, vers, 4096).expect("short plan");
            assert_eq!(plan.kind, ReplyKind::Short);
            let mut a = [0xeeu8; 64];
            let mut b = [0xeeu8; 64];
            let planned = ReplyHeaderOut::Planned {
                plan: &plan,
                call: &none,
            };
            let n = encode_reply_header(planned, xid, credits, flags, &mut a).expect("planned");
            let chunk_free = ReplyHeaderOut::ChunkFree { vers };
            let m = encode_reply_header(chunk_free, xid, credits, flags, &mut b).expect("short");
            assert_eq!((n, &a[..]), (m, &b[..]), "v{vers} xid {xid:#x}");
            assert_eq!(n, plan.header_len as usize);
            let mut g = [0xeeu8; 64];
            let flags = flags | RPCRDMA2_F_RESPONSE;
            let k = encode_reply_header_general(&plan, &none, xid, credits, flags, &mut g).expect("general");
            assert_eq!((k, &g[..]), (n, &a[..]), "the word-by-word writer");
        }
        let chunk_free = ReplyHeaderOut::ChunkFree { vers };
        assert!(encode_reply_header(chunk_free, 1, 1, 0, &mut [0u8; 20]).is_err());
    }
    let unknown = ReplyHeaderOut::ChunkFree { vers: 3 };
    assert_eq!(
        encode_reply_header(unknown, 1, 1, 0, &mut [0u8; 64]),
        Err(PlanError::UnsupportedVersion { vers: 3 })
    );
}

/// A Call without chunks (written in one step) is byte for byte what the
/// header encoder writes for the same RDMA_MSG, in both versions, and a
/// buffer too small still gets the error.
#[test]
fn chunkless_call_header_matches_the_header_encoder() {
    use crate::header::{encode, BodyOut, ChunksOut, HeaderOut};
    for vers in [1u32, 2] {
        let p = CallParams::new(vers);
        let needs = ReplyNeeds::new(&[], 200).unwrap();
        let plan = plan_call(100, &[], &needs, &p).unwrap();
        assert!(plan.reads.is_empty() && plan.write_chunks.is_empty() && plan.reply_chunk.is_none());
        let mut fast = [0xaau8; 64];
        let n = encode_call_header(&plan, 0x51, 7, 0x66, &[], &[], None, &mut fast).unwrap();
        let mut want = [0x55u8; 64];
        let m = encode(
            &HeaderOut {
                xid: 0x51,
                vers,
                credits: 7,
                flags: 0,
                body: BodyOut::Msg {
                    inv_handle: 0x66,
                    chunks: ChunksOut::default(),
                },
            },
            &mut want,
        )
        .unwrap();
        assert_eq!(&fast[..n], &want[..m], "v{vers}");
        assert!(encode_call_header(&plan, 0x51, 7, 0x66, &[], &[], None, &mut fast[..n - 1]).is_err());
    }
}

/// The general encoder's bytes for an RDMA_MSG / RDMA2_MSG carrying `chunks`.
fn general_msg(vers: u32, xid: u32, credits: u32, flags: u32, chunks: ChunksOut<'_>) -> Vec<u8> {
    let mut out = vec![0u8; 128];
    let h = HeaderOut {
        xid,
        vers,
        credits,
        flags,
        body: BodyOut::Msg { inv_handle: 0, chunks },
    };
    let n = encode(&h, &mut out).expect("fits");
    out.truncate(n);
    out
}

fn runner(cases: u32) -> proptest::test_runner::TestRunner {
    proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases,
        ..Default::default()
    })
}

/// The chunk-free one-step encoders write what `encode` writes for an
/// RDMA_MSG with three empty lists (a Call: flags 0; a Short reply: flags
/// with RESPONSE in v2), refuse a buffer one byte short, and refuse another
/// version; and the Short reply header is `encode_reply_header`'s for the
/// plan `plan_reply` makes against a chunk-free Call.
#[test]
fn chunk_free_encoders_equal_the_general_encoder() {
    use proptest::prelude::*;
    let case = (
        prop_oneof![Just(1u32), Just(2u32), 3u32..10],
        (any::<u32>(), any::<u32>(), any::<u32>()),
        0usize..4096,
    );
    runner(5_000)
        .run(&case, |(vers, (xid, credits, flags), reply_len)| {
            let (mut call, mut reply) = ([0xeeu8; 64], [0xeeu8; 64]);
            let c = encode_chunk_free_call_header(vers, xid, credits, &mut call);
            let r = encode_reply_header(ReplyHeaderOut::ChunkFree { vers }, xid, credits, flags, &mut reply).ok();
            let Some(len) = chunk_free_header_len(vers) else {
                prop_assert_eq!((c, r), (None, None));
                return Ok(());
            };
            let v2_flags = if vers == RPCRDMA_VERSION_2 {
                flags | RPCRDMA2_F_RESPONSE
            } else {
                0
            };
            prop_assert_eq!(c, Some(len));
            prop_assert_eq!(
                &call[..len],
                &general_msg(vers, xid, credits, 0, ChunksOut::default())[..]
            );
            prop_assert!(call[len..].iter().all(|&b| b == 0xee));
            prop_assert_eq!(r, Some(len));
            prop_assert_eq!(
                &reply[..len],
                &general_msg(vers, xid, credits, v2_flags, ChunksOut::default())[..]
            );
            let none = ChunkLists::default();
            let plan = plan_reply(reply_len, &[], &none, vers, 8192).expect("short plan");
            let mut planned = [0xeeu8; 64];
            let out = ReplyHeaderOut::Planned {
                plan: &plan,
                call: &none,
            };
            let n = encode_reply_header(out, xid, credits, flags, &mut planned).expect("planned");
            prop_assert_eq!((n, &planned[..]), (len, &reply[..]));
            // The plan's one-step write inside is the word-by-word writer's.
            let mut general = [0xeeu8; 64];
            let rflags = flags | RPCRDMA2_F_RESPONSE;
            let k = encode_reply_header_general(&plan, &none, xid, credits, rflags, &mut general);
            prop_assert_eq!((k, &general[..]), (Ok(len), &reply[..]));
            prop_assert_eq!(
                encode_chunk_free_call_header(vers, xid, credits, &mut call[..len - 1]),
                None
            );
            let chunk_free = ReplyHeaderOut::ChunkFree { vers };
            prop_assert!(encode_reply_header(chunk_free, xid, credits, flags, &mut reply[..len - 1]).is_err());
            Ok(())
        })
        .unwrap();
}

/// The one-Write-segment one-step encoders write what `encode` writes for an
/// RDMA_MSG whose only chunk is one Write chunk of that segment (the reply's
/// segment length clamped to the bytes written), refuse a buffer one byte
/// short and another version; and the reply header is `encode_reply_header`'s
/// for a Short plan reducing one item into the Call's Write chunk.
#[test]
fn one_write_encoders_equal_the_general_encoder() {
    use proptest::prelude::*;
    let case = (
        prop_oneof![Just(1u32), Just(2u32), 3u32..10],
        (any::<u32>(), any::<u32>(), any::<u32>()),
        (any::<u32>(), 0u32..20_000, any::<u64>()),
        0u32..20_000,
    );
    runner(5_000)
        .run(
            &case,
            |(vers, (xid, credits, flags), (handle, length, offset), written)| {
                let seg = Segment { handle, length, offset };
                let (mut call, mut reply) = ([0xeeu8; 80], [0xeeu8; 80]);
                let c = encode_one_write_call_header(vers, xid, credits, seg, &mut call);
                let one_write = ReplyHeaderOut::OneWrite { vers, seg, written };
                let r = encode_reply_header(one_write, xid, credits, flags, &mut reply).ok();
                let Some(len) = one_write_header_len(vers) else {
                    prop_assert_eq!((c, r), (None, None));
                    return Ok(());
                };
                let chunks = |s: &[Segment]| {
                    general_msg(
                        vers,
                        xid,
                        credits,
                        0,
                        ChunksOut {
                            writes: &[s],
                            ..Default::default()
                        },
                    )
                };
                prop_assert_eq!(c, Some(len));
                prop_assert_eq!(&call[..len], &chunks(&[seg])[..]);
                prop_assert!(call[len..].iter().all(|&b| b == 0xee));
                let echoed = Segment {
                    length: written.min(length),
                    ..seg
                };
                let v2_flags = if vers == RPCRDMA_VERSION_2 {
                    flags | RPCRDMA2_F_RESPONSE
                } else {
                    0
                };
                let want = general_msg(
                    vers,
                    xid,
                    credits,
                    v2_flags,
                    ChunksOut {
                        writes: &[&[echoed]],
                        ..Default::default()
                    },
                );
                prop_assert_eq!(r, Some(len));
                prop_assert_eq!(&reply[..len], &want[..]);
                prop_assert_eq!(
                    encode_one_write_call_header(vers, xid, credits, seg, &mut call[..len - 1]),
                    None
                );
                prop_assert!(encode_reply_header(one_write, xid, credits, flags, &mut reply[..len - 1]).is_err());
                // Against the planner: the Call decoded, one item of `written`
                // bytes (when the segment holds it) reduced into its Write chunk.
                let msg = [&call[..len], &xid.to_be_bytes()[..], &[0, 0, 0, 0]].concat();
                let h = decode(&msg, &Limits::DEFAULT).expect("the one-step Call decodes");
                let lists = *h.chunks().expect("MSG");
                let item = [crate::ulb::DdpItem {
                    offset: 8,
                    len: written,
                }];
                let reply_len = 8 + written as usize + 3;
                if let Ok(plan) = plan_reply(reply_len, &item, &lists, vers, 1 << 16) {
                    let mut planned = [0xeeu8; 80];
                    let out = ReplyHeaderOut::Planned {
                        plan: &plan,
                        call: &lists,
                    };
                    let n = encode_reply_header(out, xid, credits, flags, &mut planned).expect("planned");
                    prop_assert_eq!(n, len);
                    prop_assert_eq!(&planned[..], &reply[..]);
                    // The plan's one-step write inside is the word-by-word writer's.
                    let mut general = [0xeeu8; 80];
                    let rflags = flags | RPCRDMA2_F_RESPONSE;
                    let k = encode_reply_header_general(&plan, &lists, xid, credits, rflags, &mut general);
                    prop_assert_eq!((k, &general[..]), (Ok(len), &reply[..]));
                } else {
                    prop_assert!(written > length, "plan_reply refused a fitting item");
                }
                Ok(())
            },
        )
        .unwrap();
}
