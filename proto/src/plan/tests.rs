//! Tests of the planners, and that each one-step planning shortcut agrees
//! with the general planner it stands for.

use super::*;
use crate::header::{encode_call_header_general, Segment, V1Error, V2Error};
use crate::ulb::DdpItem;

/// `one_write_short_reply` says yes exactly when `plan_reply` makes a
/// Short plan reducing the one item into the one Write chunk, with the
/// same reduced length, and the one-step header is `encode_reply_header`'s
/// byte for byte.
#[test]
fn one_write_reply_agrees_with_plan_reply() {
    use proptest::prelude::*;
    let case = (
        0usize..6000,
        prop_oneof![
            3 => proptest::collection::vec((0u32..1500, 0u32..5000), 1..2),
            1 => proptest::collection::vec((0u32..1500, 0u32..5000), 0..3),
        ],
        (any::<u32>(), 0u32..6000, any::<u64>()),
        prop_oneof![Just(1u32), Just(2u32), Just(3u32)],
        0u32..6000,
        (any::<u32>(), 0u32..64, any::<u32>()),
        // Edges: the segment exactly the item's length (or one byte
        // either side), the threshold exactly header + reduced reply.
        (0u32..6, 0u32..6),
    );
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 20_000,
        ..Default::default()
    });
    let hits = std::cell::Cell::new(0u32);
    runner
        .run(
            &case,
            |(len, raw_items, (handle, length, offset), vers, max, (xid, credits, flags), (es, em))| {
                // Items at aligned offsets, mostly valid.
                let items: Vec<DdpItem> = raw_items
                    .iter()
                    .map(|&(o, l)| DdpItem { offset: o * 4, len: l })
                    .collect();
                let edge = |base: u64, e: u32, other: u32| match e {
                    0 => base.saturating_sub(1) as u32,
                    1 => base as u32,
                    2 => base as u32 + 1,
                    _ => other,
                };
                let first_len = items.first().map_or(0, |it| it.len as u64);
                let length = edge(first_len, es, length);
                let removed = first_len + pad4(first_len);
                let threshold = one_write_header_len(vers).unwrap_or(0) as u64 + (len as u64).saturating_sub(removed);
                let max = edge(threshold, em, max);
                let seg = Segment { handle, length, offset };
                let mut wire = Vec::new();
                for w in [0, 1, 1, handle, length, (offset >> 32) as u32, offset as u32, 0, 0] {
                    wire.extend_from_slice(&w.to_be_bytes());
                }
                // The Call's lists as the decoder sees them (after the prefix).
                let mut msg = vec![0u8; 16];
                msg[..4].copy_from_slice(&7u32.to_be_bytes());
                msg[4..8].copy_from_slice(&1u32.to_be_bytes());
                msg.extend_from_slice(&wire);
                msg.extend_from_slice(&7u32.to_be_bytes());
                let h = crate::header::decode(&msg, &crate::header::Limits::DEFAULT).expect("valid Call");
                let chunks = *h.chunks().expect("MSG");
                prop_assert_eq!(chunks.one_write_segment(), Some(seg));
                let general = plan_reply(len, &items, &chunks, vers, max);
                let fast = one_write_short_reply(len, &items, seg, vers, max);
                match (fast, general) {
                    (Some(reduced), Ok(p)) => {
                        hits.set(hits.get() + 1);
                        prop_assert_eq!(p.kind, ReplyKind::Short);
                        prop_assert_eq!(p.reduced_items(), &items[..]);
                        prop_assert_eq!(p.reduced_len, reduced);
                        prop_assert_eq!(Some(p.header_len as usize), one_write_header_len(vers));
                        let mut a = [0u8; 64];
                        let mut b = [0u8; 64];
                        let planned = ReplyHeaderOut::Planned {
                            plan: &p,
                            call: &chunks,
                        };
                        let n = encode_reply_header(planned, xid, credits, flags, &mut a).expect("encodes");
                        let written = items[0].len;
                        let one_write = ReplyHeaderOut::OneWrite { vers, seg, written };
                        let m = encode_reply_header(one_write, xid, credits, flags, &mut b);
                        prop_assert_eq!(Ok(n), m);
                        prop_assert_eq!(&a[..n], &b[..n]);
                        // The one RDMA Write goes where the general plan puts it.
                        let ops: Vec<WriteOp> = p.write_ops(&chunks).collect();
                        if items[0].len == 0 {
                            prop_assert!(ops.is_empty());
                        } else {
                            prop_assert_eq!(ops.len(), 1);
                            prop_assert_eq!(
                                ops[0].src,
                                ByteRange {
                                    start: items[0].offset,
                                    len: items[0].len
                                }
                            );
                            prop_assert_eq!(
                                ops[0].target,
                                Segment {
                                    length: items[0].len,
                                    ..seg
                                }
                            );
                        }
                    }
                    (None, Ok(p)) => {
                        let reduces_one =
                            p.kind == ReplyKind::Short && p.reduced_items().len() == 1 && items.len() == 1;
                        prop_assert!(!reduces_one, "plan_reply reduced the one item, the short cut refused");
                    }
                    (Some(_), Err(e)) => prop_assert!(false, "short cut accepted what plan_reply refuses: {e:?}"),
                    (None, Err(_)) => {}
                }
                Ok(())
            },
        )
        .unwrap();
    assert!(hits.get() > 500, "the short cut was rarely taken: {}", hits.get());
}

/// `is_chunk_free_call` says yes exactly when `plan_call` makes a Short
/// plan without chunks, and the one-step Call header is the planner's.
#[test]
fn chunk_free_call_agrees_with_plan_call() {
    use proptest::prelude::*;
    let case = (
        0usize..3000,
        proptest::collection::vec((0u32..3000, 0u32..600), 0..2),
        proptest::collection::vec(0u32..5000, 0..2),
        0u32..5000,
        prop_oneof![Just(1u32), Just(2u32), Just(3u32)],
        (0u32..4200, 0u32..4200, any::<bool>()),
    );
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 20_000,
        ..Default::default()
    });
    let hits = std::cell::Cell::new([0u32; 2]);
    runner
        .run(
            &(case, 0u32..6, 0u32..6),
            |((len, items, writes, max_reply, vers, (cmax, rmax, ddp)), cb, rb)| {
                // Thresholds at the edges half of the time: exactly the
                // chunk-free header plus the Call (or the reply), or one off.
                let hdr = if vers == 2 { 36 } else { 28 };
                let edge = |sel: u32, need: u32, random: u32| if sel < 3 { need + sel - 1 } else { random };
                let cmax = edge(cb, hdr + len as u32, cmax);
                let rmax = edge(rb, hdr + max_reply, rmax);
                let items: Vec<DdpItem> = items.iter().map(|&(offset, len)| DdpItem { offset, len }).collect();
                let needs = ReplyNeeds::new(&writes, max_reply).expect("at most 2");
                let p = CallParams {
                    vers,
                    call_inline_max: cmax,
                    reply_inline_max: rmax,
                    ddp,
                    max_segments_per_chunk: 1,
                    pad_read_chunks: false,
                };
                let fast = is_chunk_free_call(len, &items, &needs, &p);
                let planned = plan_call(len, &items, &needs, &p);
                let chunk_free = planned.as_ref().is_ok_and(|c| {
                    c.kind == CallKind::Short
                        && c.reads.is_empty()
                        && c.write_chunks.is_empty()
                        && c.reply_chunk.is_none()
                });
                prop_assert_eq!(fast, chunk_free, "{:?}", planned);
                let mut h = hits.get();
                h[fast as usize] += 1;
                hits.set(h);
                if let (true, Ok(plan)) = (fast, planned) {
                    let (mut a, mut b) = ([0xeeu8; 64], [0xeeu8; 64]);
                    let n = encode_call_header(&plan, 9, 5, 0, &[], &[], None, &mut a).expect("planned header");
                    let m = encode_chunk_free_call_header(vers, 9, 5, &mut b).expect("one step");
                    prop_assert_eq!((n, &a[..]), (m, &b[..]));
                }
                Ok(())
            },
        )
        .unwrap();
    let h = hits.get();
    assert!(h[0] > 1000 && h[1] > 1000, "both answers exercised: {h:?}");
    assert_eq!(encode_chunk_free_call_header(1, 1, 1, &mut [0u8; 27]), None);
}

/// `one_write_call` says yes exactly when `plan_call` makes a Short plan
/// whose only chunk is one Write chunk, with its length, and the one-step
/// header is `encode_call_header`'s for that plan.
#[test]
fn one_write_call_agrees_with_plan_call() {
    use proptest::prelude::*;
    let case = (
        0usize..3000,
        proptest::collection::vec((0u32..3000, 0u32..600), 0..2),
        prop_oneof![
            3 => proptest::collection::vec(0u32..5000, 1..2),
            1 => proptest::collection::vec(0u32..5000, 0..3),
        ],
        0u32..5000,
        prop_oneof![Just(1u32), Just(2u32), Just(3u32)],
        (
            0u32..4200,
            0u32..4200,
            prop_oneof![3 => Just(true), 1 => Just(false)],
            1u32..3,
        ),
    );
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        cases: 20_000,
        ..Default::default()
    });
    let hits = std::cell::Cell::new([0u32; 2]);
    runner
        .run(
            &(case, 0u32..6, 0u32..6),
            |((len, items, writes, max_reply, vers, (cmax, rmax, ddp, segs)), cb, rb)| {
                // Thresholds at the edges half of the time.
                let hdr = (if vers == 2 { 24 } else { 16 }) + 4 + (8 + 16 * segs) + 4 + 4;
                let edge = |sel: u32, need: u32, random: u32| if sel < 3 { need + sel - 1 } else { random };
                let cmax = edge(cb, hdr + len as u32, cmax);
                let rmax = edge(rb, hdr + max_reply, rmax);
                let items: Vec<DdpItem> = items.iter().map(|&(offset, len)| DdpItem { offset, len }).collect();
                let needs = ReplyNeeds::new(&writes, max_reply).expect("at most 2");
                let p = CallParams {
                    vers,
                    call_inline_max: cmax,
                    reply_inline_max: rmax,
                    ddp,
                    max_segments_per_chunk: segs,
                    pad_read_chunks: false,
                };
                let fast = one_write_call(len, &items, &needs, &p);
                let planned = plan_call(len, &items, &needs, &p);
                let one_write = planned.as_ref().ok().and_then(|c| {
                    (c.kind == CallKind::Short
                        && c.reads.is_empty()
                        && c.write_chunks.len() == 1
                        && c.reply_chunk.is_none())
                    .then(|| c.write_chunks[0])
                });
                prop_assert_eq!(fast, one_write, "{:?}", planned);
                let mut h = hits.get();
                h[fast.is_some() as usize] += 1;
                hits.set(h);
                if let (Some(w), Ok(plan)) = (fast, planned) {
                    let seg = Segment {
                        handle: 0x1234_5678,
                        length: w,
                        offset: 0xfeed_0000_1000,
                    };
                    let (mut a, mut b) = ([0xeeu8; 64], [0xeeu8; 64]);
                    let n = encode_call_header(&plan, 9, 5, 0, &[], &[&[seg]], None, &mut a);
                    let m = encode_one_write_call_header(vers, 9, 5, seg, &mut b);
                    prop_assert_eq!(n.ok(), m);
                    prop_assert_eq!(&a[..], &b[..]);
                    // And the word-by-word writer agrees too.
                    let mut c = [0xeeu8; 64];
                    let g = encode_call_header_general(&plan, 9, 5, 0, &[], &[&[seg]], None, &mut c);
                    prop_assert_eq!(g.ok(), m);
                    prop_assert_eq!(&a[..], &c[..]);
                }
                Ok(())
            },
        )
        .unwrap();
    let h = hits.get();
    assert!(h[0] > 1000 && h[1] > 1000, "both answers exercised: {h:?}");
}

/// A plan reused for Calls of every form (as a responder's request slot
/// reuses it) comes out equal to a fresh one.
#[test]
fn plan_reads_into_a_used_plan_equals_a_fresh_plan() {
    use crate::header::{encode, BodyOut, ChunksOut, HeaderOut, ReadSegment};
    let seg = |handle: u32, length: u32| Segment {
        handle,
        length,
        offset: 0x1000 * handle as u64,
    };
    let rs = |position: u32, handle: u32, length: u32| ReadSegment {
        position,
        target: seg(handle, length),
    };
    let two_chunks = [rs(8, 1, 6), rs(8, 2, 3), rs(24, 3, 4)];
    let one_chunk = [rs(12, 4, 4096)];
    let pzrc = [rs(0, 5, 130), rs(0, 6, 7)];
    let forms: [(&[ReadSegment], bool); 4] = [(&[], false), (&two_chunks, false), (&pzrc, true), (&one_chunk, false)];
    let mut msgs = Vec::new();
    for (reads, nomsg) in forms {
        let chunks = ChunksOut {
            reads,
            writes: &[],
            reply: None,
        };
        let body = if nomsg {
            BodyOut::NoMsg { inv_handle: 0, chunks }
        } else {
            BodyOut::Msg { inv_handle: 0, chunks }
        };
        let mut buf = vec![0u8; 512];
        let n = encode(
            &HeaderOut {
                xid: 7,
                vers: 1,
                credits: 4,
                flags: 0,
                body,
            },
            &mut buf,
        )
        .unwrap();
        buf.truncate(n);
        if !nomsg {
            // The RPC message: its XID, then 20 more bytes.
            buf.extend_from_slice(&7u32.to_be_bytes());
            buf.extend_from_slice(&[0xab; 20]);
        }
        msgs.push(buf);
    }
    let limits = ReadLimits::new(1 << 20);
    let mut reused = ReadPlan::default();
    for order in [[0usize, 1, 2, 3], [3, 2, 1, 0], [1, 2, 0, 3]] {
        for k in order {
            let h = crate::header::decode(&msgs[k], &crate::header::Limits::DEFAULT).unwrap();
            let fresh = plan_reads(&h, &limits).unwrap();
            plan_reads_into(&h, &limits, &mut reused).unwrap();
            assert_eq!(reused, fresh, "form {k}");
            assert_eq!(reused.pieces(), fresh.pieces());
            assert_eq!(reused.chunk_count(), fresh.chunk_count());
        }
    }
}

/// Checking a Reply against the advertised segments gives what checking
/// it against the Call's decoded chunk lists gives, for good and bad echoes.
#[test]
fn reassemble_against_provisioned_segments_matches_decoded_lists() {
    use crate::header::{decode, encode, BodyOut, ChunksOut, HeaderOut, Limits};
    let seg = |handle: u32, length: u32, offset: u64| Segment { handle, length, offset };
    let w0 = [seg(1, 4096, 0x1000)];
    let w1 = [seg(2, 100, 0x9000), seg(3, 50, 0xa000)];
    let rc = [seg(4, 2048, 0x20000)];
    let msg = |xid: u32, writes: &[&[Segment]], reply: Option<&[Segment]>, nomsg: bool| {
        let chunks = ChunksOut {
            reads: &[],
            writes,
            reply,
        };
        let body = if nomsg {
            BodyOut::NoMsg { inv_handle: 0, chunks }
        } else {
            BodyOut::Msg { inv_handle: 0, chunks }
        };
        let mut buf = vec![0u8; 1024];
        let n = encode(
            &HeaderOut {
                xid,
                vers: 1,
                credits: 8,
                flags: 0,
                body,
            },
            &mut buf,
        )
        .unwrap();
        buf.truncate(n);
        if !nomsg {
            buf.extend_from_slice(&xid.to_be_bytes());
            buf.extend_from_slice(&[0; 24]);
        }
        buf
    };
    type Advertised<'s> = (&'s [&'s [Segment]], Option<&'s [Segment]>);
    let calls: [Advertised; 4] = [(&[], None), (&[&w0], None), (&[&w0, &w1], Some(&rc)), (&[], Some(&rc))];
    let (mut compared, mut oks) = (0, 0);
    for (cw, cr) in calls {
        let call = msg(5, cw, cr, cr.is_some() && cw.is_empty());
        let ch = decode(&call, &Limits::DEFAULT).unwrap();
        let lists = *ch.chunks().unwrap();
        let mut short0 = w0;
        short0[0].length = 17;
        let mut moved = w1;
        moved[1].offset += 4;
        let mut over = rc;
        over[0].length += 1;
        let mut gap = w1;
        gap[0].length = 0;
        let replies: Vec<Vec<u8>> = vec![
            msg(5, cw, None, false),
            msg(5, cw, cr, false),
            msg(5, cw, cr, true),
            msg(5, &[&short0], None, false),
            msg(5, &[&w0, &moved], Some(&rc), false),
            msg(5, &[&w0, &w1], Some(&over), true),
            msg(5, &[&w0, &gap], Some(&rc), true),
            msg(5, &[], Some(&rc), true),
            msg(5, &[], None, false),
        ];
        for (k, r) in replies.iter().enumerate() {
            // (RDMA_NOMSG without a Reply chunk does not even decode.)
            let Ok(rh) = decode(r, &Limits::DEFAULT) else { continue };
            compared += 1;
            oks += reassemble_reply(&rh, &lists).is_ok() as u32;
            assert_eq!(
                reassemble_reply_provisioned(&rh, cw, cr),
                reassemble_reply(&rh, &lists),
                "call {cw:?} {cr:?}, reply {k}"
            );
        }
    }
    assert!(
        compared >= 30 && oks >= 6 && oks < compared,
        "{compared} compared, {oks} good"
    );
}

#[test]
fn fixed_vec_capacity_and_equality() {
    let mut v: FixedVec<u32, 2> = FixedVec::new();
    assert!(v.push(1));
    assert!(v.push(2));
    assert!(!v.push(3));
    assert_eq!(&v[..], &[1, 2]);
    assert_eq!(FixedVec::<u32, 2>::from_slice(&[1, 2]).unwrap(), v);
    assert!(FixedVec::<u32, 2>::from_slice(&[1, 2, 3]).is_none());
    assert_eq!(format!("{v:?}"), "[1, 2]");
}

#[test]
fn reduced_ranges_drop_items_and_padding() {
    let items = [DdpItem { offset: 8, len: 5 }, DdpItem { offset: 20, len: 4 }];
    let r: Vec<_> = ReducedRanges::new(&items, 32).collect();
    assert_eq!(
        r,
        vec![
            ByteRange { start: 0, len: 8 },
            ByteRange { start: 16, len: 4 },
            ByteRange { start: 24, len: 8 }
        ]
    );
    // An item running to the end leaves no trailing range.
    let items = [DdpItem { offset: 4, len: 3 }];
    let r: Vec<_> = ReducedRanges::new(&items, 8).collect();
    assert_eq!(r, vec![ByteRange { start: 0, len: 4 }]);
}

#[test]
fn check_items_rules() {
    let ok = [DdpItem { offset: 4, len: 3 }, DdpItem { offset: 8, len: 0 }];
    assert_eq!(check_items(&ok, 12), Ok(4));
    for (bad, idx) in [
        (vec![DdpItem { offset: 0, len: 4 }], 0),
        (vec![DdpItem { offset: 6, len: 4 }], 0),
        (vec![DdpItem { offset: 4, len: 9 }], 0),
        (vec![DdpItem { offset: 4, len: 5 }, DdpItem { offset: 8, len: 0 }], 1),
    ] {
        assert_eq!(check_items(&bad, 12), Err(PlanError::BadItem { index: idx }));
    }
}

#[test]
fn error_mapping() {
    assert_eq!(
        PlanError::WriteResource {
            chunk_index: 2,
            length_needed: 9
        }
        .v2(),
        V2Error::WriteResource {
            chunk_index: 2,
            length_needed: 9
        }
    );
    assert_eq!(
        PlanError::ReplyResource { length_needed: 7 }.v2(),
        V2Error::ReplyResource { length_needed: 7 }
    );
    assert_eq!(
        PlanError::TooManyReadChunks { max: 3 }.v2(),
        V2Error::ReadChunks { max_chunks: 3 }
    );
    assert_eq!(
        PlanError::TooManyReadSegments { max: 5 }.v2(),
        V2Error::Segments { max_segments: 5 }
    );
    assert_eq!(PlanError::PositionZeroInMsg.v2(), V2Error::BadXdr);
    assert_eq!(PlanError::MsgPUnsupported.v2(), V2Error::InvalHtype);
    assert_eq!(PlanError::ReplyResource { length_needed: 7 }.v1(), V1Error::Chunk);
}
