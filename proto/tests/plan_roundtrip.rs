//! End-to-end chunk planning: requester plan + encode → decode → responder plans
//! Reads and Reply → simulated RDMA Reads/Writes → requester reassembly, checking
//! that the service sees the original Call and the caller the original Reply,
//! byte for byte (RFC 8166 sections 3.4-3.5).

mod plan_common;

use plan_common::*;
use proptest::prelude::*;
use proto::plan::*;
use proto::ulb::DdpItem;

fn padded(n: u32) -> u32 {
    (n + 3) & !3
}

/// Build an exchange: items of the given lengths in the Call and the Reply, a
/// Write chunk per entry of `write_chunks`, `max_reply_size` = reduced reply
/// length (+ slack).
#[allow(clippy::too_many_arguments)]
fn build(
    vers: u32,
    call_items: &[u32],
    call_tail: u32,
    reply_items: &[u32],
    reply_tail: u32,
    write_chunks: &[u32],
    segs: u32,
) -> Exchange {
    let (ci, clen) = layout(call_items, &[3, 1, 2], call_tail);
    let (ri, rlen) = layout(reply_items, &[20, 2, 1], reply_tail);
    let reduced: u32 = rlen as u32 - ri.iter().take(write_chunks.len()).map(|it| padded(it.len)).sum::<u32>();
    let mut params = CallParams::new(vers);
    params.max_segments_per_chunk = segs;
    Exchange {
        params,
        call: message(clen, 0, &ci, 1),
        call_items: ci,
        reply: message(rlen, 1, &ri, 2),
        reply_items: ri,
        needs: ReplyNeeds::new(write_chunks, reduced).unwrap(),
        segs,
        seed: 42,
        max_read_bytes: 1 << 20,
    }
}

fn for_each_variant(f: impl Fn(u32, u32)) {
    for vers in [1, 2] {
        for segs in [1, 3] {
            f(vers, segs);
        }
    }
}

#[test]
fn short_call_short_reply() {
    // GETATTR-sized (s3.5.1): no chunks at all.
    for_each_variant(|vers, segs| {
        let x = build(vers, &[], 20, &[], 20, &[], segs);
        let o = run(&x).unwrap();
        assert_eq!(o.call_plan.kind, CallKind::Short);
        assert!(o.call_plan.reads.is_empty() && o.call_plan.write_chunks.is_empty());
        assert_eq!(o.call_plan.reply_chunk, None);
        assert_eq!(o.reply_plan.kind, ReplyKind::Short);
        assert!(o.read_ops.is_empty() && o.write_ops.is_empty());
        let fixed = if vers == 1 { 28 } else { 36 };
        assert_eq!(o.call_send_len, fixed + x.call.len());
        assert_eq!(o.reply_send_len, fixed + x.reply.len());
    });
}

#[test]
fn read_list_nfs_write() {
    // NFS WRITE of 8 KiB (s3.5.2): the data goes in one Read chunk at its
    // Position; the length word stays inline; the data is last in the call.
    for_each_variant(|vers, segs| {
        for len in [8192, 8191, 8190, 8189] {
            let x = build(vers, &[len], 0, &[], 10, &[], segs);
            let o = run(&x).unwrap();
            let cp = &o.call_plan;
            assert_eq!(cp.kind, CallKind::Chunked);
            assert_eq!(cp.reads.len(), 1);
            let item = x.call_items[0];
            assert_eq!(cp.reads[0].position, item.offset);
            // s3.4.5.2: no roundup in the chunk; s3.4.4.4: none inline either.
            assert_eq!(
                cp.reads[0].range,
                ByteRange {
                    start: item.offset,
                    len
                }
            );
            assert_eq!(cp.inline_len as usize, x.call.len() - padded(len) as usize);
            let rp = &o.read_plan;
            assert_eq!(rp.read_bytes, len as u64);
            assert_eq!(
                rp.pieces(),
                &[
                    Piece::Inline {
                        start: 0,
                        len: item.offset
                    },
                    Piece::Chunk {
                        index: 0,
                        len,
                        pad: padded(len) - len
                    }
                ]
            );
            assert_eq!(o.read_ops.len() as u32, segs.min(len));
        }
    });
}

#[test]
fn read_chunk_with_padding_included() {
    // s3.4.5.2: a requester MAY include the roundup; the chunk is then len+pad
    // and the responder inserts nothing.
    for_each_variant(|vers, segs| {
        let mut x = build(vers, &[8191], 6, &[], 10, &[], segs);
        x.params.pad_read_chunks = true;
        let o = run(&x).unwrap();
        assert_eq!(o.call_plan.reads[0].range.len, 8192);
        assert_eq!(o.read_plan.read_bytes, 8192);
        let item = x.call_items[0];
        assert_eq!(
            o.read_plan.pieces(),
            &[
                Piece::Inline {
                    start: 0,
                    len: item.offset
                },
                Piece::Chunk {
                    index: 0,
                    len: 8192,
                    pad: 0
                },
                Piece::Inline {
                    start: item.offset,
                    len: 24
                }
            ]
        );
    });
}

#[test]
fn write_list_nfs_read() {
    // NFS READ (s3.4.6): a Write chunk provisioned at the ULB maximum, the
    // responder writes the actual item and returns its exact length.
    for_each_variant(|vers, segs| {
        for (len, cap) in [(4096, 8192), (4095, 4095), (1, 8192), (0, 4096)] {
            let x = build(vers, &[], 30, &[len], 2, &[cap], segs);
            let o = run(&x).unwrap();
            assert_eq!(o.call_plan.kind, CallKind::Short);
            assert_eq!(&o.call_plan.write_chunks[..], &[cap]);
            assert_eq!(o.call_plan.reply_chunk, None);
            assert_eq!(o.reply_plan.kind, ReplyKind::Short);
            assert_eq!(&o.layout.write_lens[..], &[len]);
            assert_eq!(o.write_ops.iter().map(|w| w.src.len).sum::<u32>(), len);
            assert_eq!(o.reply_plan.reduced_len as usize, x.reply.len() - padded(len) as usize);
        }
    });
}

#[test]
fn reply_chunk_long_reply() {
    // READDIR-like (s3.5.3): the largest reply exceeds the reply inline
    // threshold, so a Reply chunk is provisioned; this reply is long too.
    for_each_variant(|vers, segs| {
        let mut x = build(vers, &[], 20, &[], 1500, &[], segs);
        x.needs.max_reply_size = 8192;
        let o = run(&x).unwrap();
        assert_eq!(o.call_plan.kind, CallKind::Short);
        assert_eq!(o.call_plan.reply_chunk, Some(8192));
        assert_eq!(o.reply_plan.kind, ReplyKind::Long);
        assert_eq!(o.layout.reduced_len as usize, x.reply.len());
        assert!(o.write_ops.iter().all(|w| w.chunk == WriteTarget::Reply));
        // A short reply to the same call stays inline, Reply chunk not echoed.
        let mut y = build(vers, &[], 20, &[], 10, &[], segs);
        y.needs.max_reply_size = 8192;
        let o = run(&y).unwrap();
        assert_eq!(o.reply_plan.kind, ReplyKind::Short);
        assert!(o.write_ops.is_empty());
    });
}

#[test]
fn read_list_and_reply_chunk() {
    for_each_variant(|vers, segs| {
        let mut x = build(vers, &[16384], 4, &[], 1200, &[], segs);
        x.needs.max_reply_size = 6000;
        let o = run(&x).unwrap();
        assert_eq!(o.call_plan.kind, CallKind::Chunked);
        assert_eq!(o.call_plan.reply_chunk, Some(6000));
        assert_eq!(o.reply_plan.kind, ReplyKind::Long);
    });
}

#[test]
fn position_zero_long_call() {
    for_each_variant(|vers, segs| {
        // No DDP-eligible item and too large: PZRC with RDMA_NOMSG.
        let x = build(vers, &[], 700, &[], 5, &[], segs);
        let o = run(&x).unwrap();
        assert_eq!(o.call_plan.kind, CallKind::Long);
        assert_eq!(o.call_plan.reads.len(), 1);
        assert_eq!(o.call_plan.reads[0].position, 0);
        assert_eq!(o.call_plan.reads[0].range.len as usize, x.call.len());
        assert!(o.call_plan.inline.is_empty());
        assert_eq!(o.read_plan.stream_len as usize, x.call.len());
        // Items, but still too large after reduction.
        let x = build(vers, &[100], 700, &[], 5, &[], segs);
        assert_eq!(run(&x).unwrap().call_plan.kind, CallKind::Long);
        // DDP disabled: a WRITE that would be chunked goes as a long call.
        let mut x = build(vers, &[8192], 0, &[], 5, &[], segs);
        x.params.ddp = false;
        assert_eq!(run(&x).unwrap().call_plan.kind, CallKind::Long);
    });
}

#[test]
fn several_write_chunks() {
    // Not sent by the Linux client, allowed by s3.4.6: item k in chunk k.
    for_each_variant(|vers, segs| {
        let x = build(vers, &[], 10, &[1000, 2001, 3003], 3, &[1000, 4000, 3003], segs);
        let o = run(&x).unwrap();
        assert_eq!(&o.layout.write_lens[..], &[1000, 2001, 3003]);
        // Fewer results than chunks: the last chunk comes back unused.
        let x = build(vers, &[], 10, &[500, 6], 3, &[1000, 4000, 3003], segs);
        let o = run(&x).unwrap();
        assert_eq!(&o.layout.write_lens[..], &[500, 6, 0]);
        // More results than chunks: the extra one stays inline.
        let x = build(vers, &[], 10, &[500, 6, 7], 3, &[1000], segs);
        let o = run(&x).unwrap();
        assert_eq!(&o.layout.write_lens[..], &[500]);
        assert_eq!(o.reply_plan.reduced_items().len(), 1);
    });
}

#[test]
fn write_list_and_reply_chunk() {
    // Not sent by the Linux client: DDP result in the Write chunk, the rest of a
    // large reply in the Reply chunk (s3.5.3: reduce first, then choose).
    for_each_variant(|vers, segs| {
        let x = build(vers, &[], 10, &[4096], 600, &[8192], segs);
        let o = run(&x).unwrap();
        assert!(o.call_plan.reply_chunk.is_some());
        assert_eq!(o.reply_plan.kind, ReplyKind::Long);
        assert_eq!(&o.layout.write_lens[..], &[4096]);
        assert_eq!(o.layout.reduced_len as usize, x.reply.len() - 4096);
    });
}

#[test]
fn several_read_chunks_and_trailing_data() {
    for_each_variant(|vers, segs| {
        let x = build(vers, &[3001, 2, 4000], 9, &[], 3, &[], segs);
        let o = run(&x).unwrap();
        assert_eq!(o.call_plan.kind, CallKind::Chunked);
        assert_eq!(o.read_plan.chunk_count(), 3);
        // chunk data area: 4-byte aligned offsets with room for padding
        assert_eq!(o.read_plan.chunk_offset(1), Some(3004));
        assert_eq!(o.read_plan.chunk_offset(2), Some(3008));
        assert_eq!(o.read_plan.data_area_len, 7008);
    });
}

#[test]
fn requester_thresholds_and_sizes() {
    // The Short/Chunked boundary is exactly header + call == threshold.
    for vers in [1u32, 2] {
        let x = build(vers, &[], 100, &[], 0, &[], 1);
        let fixed = if vers == 1 { 28 } else { 36 };
        let mut p = x.params;
        p.call_inline_max = (fixed + x.call.len()) as u32;
        let cp = plan_call(x.call.len(), &[], &x.needs, &p).unwrap();
        assert_eq!(cp.kind, CallKind::Short);
        p.call_inline_max -= 4;
        let cp = plan_call(x.call.len(), &[], &x.needs, &p).unwrap();
        assert_eq!(cp.kind, CallKind::Long);
        // header alone too large
        p.call_inline_max = fixed as u32 + 8;
        assert!(matches!(
            plan_call(x.call.len(), &[], &x.needs, &p),
            Err(PlanError::HeaderTooLarge { .. })
        ));
    }
    // DDP off: the results stay in the reply, so its bound grows by them.
    let mut p = CallParams::new(1);
    p.ddp = false;
    let needs = ReplyNeeds::new(&[900], 100).unwrap();
    let cp = plan_call(100, &[], &needs, &p).unwrap();
    assert!(cp.write_chunks.is_empty());
    assert_eq!(cp.reply_chunk, Some(1000));
    p.ddp = true;
    let cp = plan_call(100, &[], &needs, &p).unwrap();
    assert_eq!(&cp.write_chunks[..], &[900]);
    assert_eq!(cp.reply_chunk, None);
    // encode_call_header refuses segments that do not match the plan.
    let mut buf = [0u8; 256];
    let seg = proto::header::Segment {
        handle: 1,
        length: 899,
        offset: 0,
    };
    assert_eq!(
        encode_call_header(&cp, 1, 1, 0, &[], &[&[seg]], None, &mut buf),
        Err(PlanError::ChunkMismatch {
            what: "write chunk length"
        })
    );
    assert_eq!(
        encode_call_header(&cp, 1, 1, 0, &[], &[], None, &mut buf),
        Err(PlanError::ChunkMismatch {
            what: "write chunk count"
        })
    );
}

#[test]
fn ulb_needs_from_nfs3_binding() {
    use proto::nfs3::{NFSPROC3_GETATTR, NFSPROC3_READ, NFS_V3};
    use proto::ulb::{Nfs3Binding, UpperLayerBinding};
    let b = Nfs3Binding::new(1 << 20);
    let n = ReplyNeeds::from_ulb(&b, NFS_V3, NFSPROC3_READ);
    assert_eq!(&n.write_chunks[..], &[b.reply_ddp_max(NFS_V3, NFSPROC3_READ).unwrap()]);
    assert_eq!(n.max_reply_size, b.max_reply_size(NFS_V3, NFSPROC3_READ));
    let n = ReplyNeeds::from_ulb(&b, NFS_V3, NFSPROC3_GETATTR);
    assert!(n.write_chunks.is_empty());
}

/// Random exchanges: sizes, item offsets, segment splits, thresholds, both
/// versions. Every successful exchange is byte-identical (checked in `run`);
/// the only failures allowed are thresholds too small for the headers.
fn arb_exchange() -> impl Strategy<Value = Exchange> {
    (
        (
            prop_oneof![Just(1u32), Just(2u32)],
            prop::collection::vec(0u32..3000, 0..4),
            prop::collection::vec(0u32..8, 3),
            0u32..64,
        ),
        (
            prop::collection::vec(0u32..5000, 0..4),
            prop::collection::vec(0u32..30, 3),
            0u32..600,
            0usize..=4,
            0u32..64,
            0u32..100,
        ),
        (
            128u32..12000,
            128u32..12000,
            any::<bool>(),
            any::<bool>(),
            1u32..=4,
            1u32..=4,
            any::<u64>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (vers, clens, cgaps, ctail),
                (rlens, rgaps, rtail, nwrite, wslack, rslack),
                (cmax, rmax, ddp, pad, maxsegs, segs, seed, tight_reads),
            )| {
                let (ci, clen) = layout(&clens, &cgaps, ctail);
                let (ri, rlen) = layout(&rlens, &rgaps, rtail);
                let nwrite = nwrite.min(4);
                let writes: Vec<u32> = (0..nwrite)
                    .map(|k| ri.get(k).map_or(wslack, |it| it.len + wslack))
                    .collect();
                let reduced = rlen as u32 - ri.iter().take(nwrite).map(|it| padded(it.len)).sum::<u32>();
                let params = CallParams {
                    vers,
                    call_inline_max: cmax,
                    reply_inline_max: rmax,
                    ddp,
                    max_segments_per_chunk: maxsegs,
                    pad_read_chunks: pad,
                };
                let mut x = Exchange {
                    params,
                    call: message(clen, 0, &ci, seed as u8),
                    call_items: ci,
                    reply: message(rlen, 1, &ri, (seed >> 8) as u8),
                    reply_items: ri,
                    needs: ReplyNeeds::new(&writes, reduced + rslack).unwrap(),
                    segs: segs.min(maxsegs),
                    seed,
                    max_read_bytes: u64::MAX,
                };
                if tight_reads {
                    // exactly what this call needs, whichever way it travels:
                    // each chunk with room for its XDR padding (s3.4.5.2)
                    let cp = plan_call(x.call.len(), &x.call_items, &x.needs, &x.params);
                    if let Ok(cp) = cp {
                        x.max_read_bytes = cp.reads.iter().map(|r| (r.range.len as u64).next_multiple_of(4)).sum();
                    }
                }
                x
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn random_exchanges_are_byte_identical(x in arb_exchange()) {
        match run(&x) {
            Ok(o) => {
                prop_assert!(o.call_send_len <= x.params.call_inline_max as usize);
                prop_assert!(o.reply_send_len <= x.params.reply_inline_max as usize);
            }
            Err((Stage::Call, PlanError::HeaderTooLarge { needed, max })) => {
                prop_assert!(needed > max as u64);
            }
            Err(e) => prop_assert!(false, "unexpected failure {:?} for {:?}", e, x.params),
        }
    }
}

#[test]
fn items_with_zero_length_and_adjacent() {
    // Adjacent items (no words between them) and an empty item.
    let call_items = vec![DdpItem { offset: 12, len: 0 }, DdpItem { offset: 16, len: 4096 }];
    let mut call = message(16 + 4096 + 8, 0, &[], 3);
    call[16..16 + 4096].fill(0x77);
    let mut params = CallParams::new(2);
    params.max_segments_per_chunk = 2;
    let x = Exchange {
        params,
        call,
        call_items,
        reply: message(64, 1, &[], 4),
        reply_items: vec![],
        needs: ReplyNeeds::default(),
        segs: 2,
        seed: 7,
        max_read_bytes: 4096,
    };
    let o = run(&x).unwrap();
    assert_eq!(o.call_plan.kind, CallKind::Chunked);
    assert_eq!(o.read_plan.chunk_count(), 2);
}

/// The random exchanges above must reach every call and reply form, with few
/// rejections, or the property proves little.
#[test]
fn random_exchange_generator_covers_every_form() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]));
    let strat = arb_exchange();
    let (mut calls, mut replies, mut rejected, mut pzrc_with_items) = ([0; 3], [0; 2], 0, 0);
    let n = 300;
    for _ in 0..n {
        let x = strat.new_tree(&mut runner).unwrap().current();
        match run(&x) {
            Ok(o) => {
                calls[o.call_plan.kind as usize] += 1;
                replies[o.reply_plan.kind as usize] += 1;
                if o.call_plan.kind == CallKind::Long && !x.call_items.is_empty() {
                    pzrc_with_items += 1;
                }
            }
            Err(_) => rejected += 1,
        }
    }
    eprintln!("calls {calls:?} replies {replies:?} rejected {rejected} pzrc_with_items {pzrc_with_items}");
    assert!(calls.iter().all(|&c| c >= 10), "{calls:?}");
    assert!(replies.iter().all(|&c| c >= 10), "{replies:?}");
    assert!(rejected < n / 4);
}
