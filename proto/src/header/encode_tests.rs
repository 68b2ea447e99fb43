use super::encode_call_header_general;
use super::*;
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
            let n = encode_reply_header(&plan, &none, xid, credits, flags, &mut a).expect("planned");
            let m = encode_short_reply_header(vers, xid, credits, flags, &mut b).expect("short");
            assert_eq!((n, &a[..]), (m, &b[..]), "v{vers} xid {xid:#x}");
            assert_eq!(n, plan.header_len as usize);
        }
        assert_eq!(encode_short_reply_header(vers, 1, 1, 0, &mut [0u8; 20]), None);
    }
    assert_eq!(encode_short_reply_header(3, 1, 1, 0, &mut [0u8; 64]), None);
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
