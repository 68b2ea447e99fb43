//! Chunk planning on hostile or inadequate input: typed errors with the right
//! wire mapping (RFC 8166 s4.5, draft-cel-nfsv4-rpcrdma-version-two-09 s5.3.3),
//! and no panic on any decoded header.

use proptest::prelude::*;
use proto::header::*;
use proto::plan::*;
use proto::ulb::DdpItem;

const XID: u32 = 0x0102_0304;

fn seg(handle: u32, length: u32, offset: u64) -> Segment {
    Segment { handle, length, offset }
}

/// An RPC message of `len` bytes starting with XID and `msg_type`.
fn rpc(len: usize, msg_type: u32) -> Vec<u8> {
    let mut m = vec![0u8; len.max(8)];
    m[..4].copy_from_slice(&XID.to_be_bytes());
    m[4..8].copy_from_slice(&msg_type.to_be_bytes());
    m
}

/// Encode a header (and append `payload` for MSG/MSGP).
fn build(vers: u32, body: BodyOut<'_>, payload: &[u8]) -> Vec<u8> {
    let h = HeaderOut {
        xid: XID,
        vers,
        credits: 8,
        flags: 0,
        body,
    };
    let mut b = vec![0u8; h.encoded_len()];
    let n = encode(&h, &mut b).unwrap();
    b.truncate(n);
    if matches!(body, BodyOut::Msg { .. } | BodyOut::MsgP { .. }) {
        b.extend_from_slice(payload);
    }
    b
}

fn msg(reads: &[ReadSegment], writes: &[&[Segment]], reply: Option<&[Segment]>) -> BodyOut<'static> {
    // leak is fine in tests: keeps the helper signature simple
    let reads: &'static [ReadSegment] = Box::leak(reads.to_vec().into_boxed_slice());
    let writes: Vec<&'static [Segment]> = writes
        .iter()
        .map(|w| &*Box::leak(w.to_vec().into_boxed_slice()))
        .collect();
    let writes: &'static [&'static [Segment]] = Box::leak(writes.into_boxed_slice());
    let reply: Option<&'static [Segment]> = reply.map(|r| &*Box::leak(r.to_vec().into_boxed_slice()));
    BodyOut::Msg {
        inv_handle: 0,
        chunks: ChunksOut { reads, writes, reply },
    }
}

fn nomsg(body: BodyOut<'static>) -> BodyOut<'static> {
    match body {
        BodyOut::Msg { inv_handle, chunks } => BodyOut::NoMsg { inv_handle, chunks },
        b => b,
    }
}

fn rs(position: u32, length: u32) -> ReadSegment {
    ReadSegment {
        position,
        target: seg(1, length, 0x1000),
    }
}

#[test]
fn write_chunk_too_small() {
    for vers in [1, 2] {
        let b = build(
            vers,
            msg(&[], &[&[seg(1, 100, 0)], &[seg(2, 30, 0), seg(3, 20, 0)]], None),
            &rpc(64, 0),
        );
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        let call = *h.chunks().unwrap();
        let items = [DdpItem { offset: 12, len: 80 }, DdpItem { offset: 100, len: 60 }];
        let e = plan_reply(400, &items, &call, vers, 4096).unwrap_err();
        assert_eq!(
            e,
            PlanError::WriteResource {
                chunk_index: 2,
                length_needed: 60
            }
        );
        assert_eq!(
            e.v2(),
            V2Error::WriteResource {
                chunk_index: 2,
                length_needed: 60
            }
        );
        assert_eq!(e.v1(), V1Error::Chunk);
        // exactly fitting is fine, the second chunk filled across both segments
        let items = [DdpItem { offset: 12, len: 100 }, DdpItem { offset: 116, len: 50 }];
        let p = plan_reply(400, &items, &call, vers, 4096).unwrap();
        let ops: Vec<_> = p.write_ops(&call).collect();
        assert_eq!(
            ops.iter()
                .map(|o| (o.target.handle, o.src.start, o.src.len))
                .collect::<Vec<_>>(),
            vec![(1, 12, 100), (2, 116, 30), (3, 146, 20)]
        );
        // the first too-short chunk is reported
        let items = [DdpItem { offset: 12, len: 101 }, DdpItem { offset: 120, len: 51 }];
        assert_eq!(
            plan_reply(400, &items, &call, vers, 4096),
            Err(PlanError::WriteResource {
                chunk_index: 1,
                length_needed: 101
            })
        );
    }
}

/// An empty Write chunk (a zero segment count; by definition of length zero,
/// RFC 8166 s3.4.6) is not a chunk too short for its item: the item stays in
/// the reply, inline here, and the chunk is echoed with its segment count
/// (zero) copied, as s3.4.6 requires of every Write chunk. Later items still
/// go into their own chunks. Before, the Call was answered with ERR_CHUNK
/// (RDMA2_ERR_WRITE_RESOURCE in v2).
#[test]
fn hostile_peer_empty_write_chunk_leaves_its_item_inline_and_is_echoed() {
    for vers in [1, 2] {
        let b = build(vers, msg(&[], &[&[], &[seg(7, 64, 0x40)]], None), &rpc(64, 0));
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        let call = *h.chunks().unwrap();
        let items = [DdpItem { offset: 12, len: 100 }, DdpItem { offset: 200, len: 60 }];
        let p = plan_reply(400, &items, &call, vers, 4096).expect("planned, not refused");
        assert_eq!(p.kind, ReplyKind::Short);
        // Only the second item (60 bytes, no padding) left the inline reply.
        assert_eq!(p.reduced_len, 400 - 60);
        let inline: Vec<_> = p.reduced_ranges().map(|r| (r.start, r.len)).collect();
        assert_eq!(inline.iter().map(|r| r.1).sum::<u32>(), 340);
        assert!(inline.iter().all(|&(s, l)| s + l <= 200 || s >= 260), "{inline:?}");
        let ops: Vec<_> = p
            .write_ops(&call)
            .map(|o| (o.target.handle, o.src.start, o.src.len))
            .collect();
        assert_eq!(ops, vec![(7, 200, 60)], "one RDMA Write, into the second chunk");
        // The reply's header: both Write chunks echoed, the first empty.
        let mut out = [0u8; 256];
        let n = encode_reply_header(ReplyHeaderOut::Planned { plan: &p, call: &call }, 9, 3, 0, &mut out).unwrap();
        let mut reply = out[..n].to_vec();
        reply.extend_from_slice(&9u32.to_be_bytes());
        let r = decode(&reply, &Limits::DEFAULT).expect("the reply decodes");
        let chunks: Vec<Vec<Segment>> = r.chunks().unwrap().writes.iter().map(|c| c.iter().collect()).collect();
        assert_eq!(chunks, vec![vec![], vec![seg(7, 60, 0x40)]]);
    }
}

#[test]
fn reply_too_large() {
    for vers in [1, 2] {
        let fixed = if vers == 1 { 28 } else { 36 };
        // No Reply chunk.
        let b = build(vers, msg(&[], &[], None), &rpc(64, 0));
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        let call = h.chunks().unwrap();
        assert_eq!(
            plan_reply(1024 - fixed, &[], call, vers, 1024).unwrap().kind,
            ReplyKind::Short
        );
        let e = plan_reply(1028 - fixed, &[], call, vers, 1024).unwrap_err();
        assert_eq!(
            e,
            PlanError::ReplyResource {
                length_needed: 1028 - fixed as u32
            }
        );
        assert_eq!(
            e.v2(),
            V2Error::ReplyResource {
                length_needed: 1028 - fixed as u32
            }
        );
        assert_eq!(e.v1(), V1Error::Chunk);
        // A Reply chunk too small by 4 bytes, then just big enough.
        let b = build(
            vers,
            msg(&[], &[], Some(&[seg(9, 1000, 0), seg(9, 996, 4096)])),
            &rpc(64, 0),
        );
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        let call = h.chunks().unwrap();
        assert_eq!(
            plan_reply(2000, &[], call, vers, 1024),
            Err(PlanError::ReplyResource { length_needed: 2000 })
        );
        let p = plan_reply(1996, &[], call, vers, 1024).unwrap();
        assert_eq!(p.kind, ReplyKind::Long);
        let ops: Vec<_> = p.write_ops(call).collect();
        assert_eq!(ops.len(), 2);
        assert_eq!(
            (ops[1].src.start, ops[1].target.offset, ops[1].target.length),
            (1000, 4096, 996)
        );
        // With a Write chunk the reduced length is what must fit.
        let b = build(
            vers,
            msg(&[], &[&[seg(1, 8192, 0)]], Some(&[seg(9, 1000, 0)])),
            &rpc(64, 0),
        );
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        let items = [DdpItem { offset: 16, len: 5001 }];
        let e = plan_reply(16 + 5004 + 2000, &items, h.chunks().unwrap(), vers, 1024);
        assert_eq!(e, Err(PlanError::ReplyResource { length_needed: 2016 }));
    }
}

fn plan_reads_of(b: &[u8], max: u64) -> Result<ReadPlan, PlanError> {
    let h = decode(b, &Limits::DEFAULT).unwrap();
    plan_reads(&h, &ReadLimits::new(max))
}

#[test]
fn read_position_rules() {
    for vers in [1, 2] {
        let payload = rpc(64, 0);
        // Position at the end of the payload is fine; one word beyond is not.
        assert!(plan_reads_of(&build(vers, msg(&[rs(64, 10)], &[], None), &payload), 1 << 20).is_ok());
        let e = plan_reads_of(&build(vers, msg(&[rs(68, 10)], &[], None), &payload), 1 << 20).unwrap_err();
        assert_eq!(
            e,
            PlanError::PositionBeyondPayload {
                position: 68,
                inline_len: 64
            }
        );
        assert_eq!(e.v2(), V2Error::BadXdr);
        assert_eq!(e.v1(), V1Error::Chunk);
        // Second chunk: position minus the first chunk's padded length.
        let b = build(vers, msg(&[rs(16, 10), rs(64 + 12, 4)], &[], None), &payload);
        let p = plan_reads_of(&b, 1 << 20).unwrap();
        assert_eq!(p.stream_len, 64 + 12 + 4);
        let b = build(vers, msg(&[rs(16, 10), rs(64 + 16, 4)], &[], None), &payload);
        assert_eq!(
            plan_reads_of(&b, 1 << 20),
            Err(PlanError::PositionBeyondPayload {
                position: 80,
                inline_len: 64
            })
        );
        // Second chunk inside the first one's data.
        let b = build(vers, msg(&[rs(16, 10), rs(24, 4)], &[], None), &payload);
        assert_eq!(
            plan_reads_of(&b, 1 << 20),
            Err(PlanError::ChunkOverlap { position: 24 })
        );
    }
}

#[test]
fn position_zero_rules() {
    for vers in [1, 2] {
        let payload = rpc(64, 0);
        // PZRC in RDMA_MSG.
        let e = plan_reads_of(&build(vers, msg(&[rs(0, 100)], &[], None), &payload), 1 << 20).unwrap_err();
        assert_eq!(e, PlanError::PositionZeroInMsg);
        // PZRC with another Read chunk in RDMA_NOMSG.
        let b = build(vers, nomsg(msg(&[rs(0, 100), rs(0, 8), rs(8, 4)], &[], None)), &[]);
        assert_eq!(plan_reads_of(&b, 1 << 20), Err(PlanError::PositionZeroNotAlone));
        // NOMSG with only a Reply chunk carries no Call.
        let b = build(vers, nomsg(msg(&[], &[], Some(&[seg(1, 100, 0)]))), &[]);
        assert_eq!(plan_reads_of(&b, 1 << 20), Err(PlanError::NoCallMessage));
        // A PZRC split over two segments with an odd total.
        let b = build(vers, nomsg(msg(&[rs(0, 100), rs(0, 7)], &[], None)), &[]);
        let p = plan_reads_of(&b, 1 << 20).unwrap();
        assert_eq!(p.kind, CallKind::Long);
        assert_eq!(
            p.pieces(),
            &[Piece::Chunk {
                index: 0,
                len: 107,
                pad: 1
            }]
        );
        assert_eq!(p.stream_len, 108);
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        let ops: Vec<_> = p.read_ops(&h.chunks().unwrap().reads).collect();
        assert_eq!(ops.iter().map(|o| o.dest_offset).collect::<Vec<_>>(), vec![0, 100]);
    }
}

#[test]
fn read_totals_and_counts() {
    for vers in [1, 2] {
        let payload = rpc(64, 0);
        // Total over segments, summed in u64 (two near-u32::MAX segments).
        let b = build(vers, msg(&[rs(16, u32::MAX), rs(16, u32::MAX)], &[], None), &payload);
        let e = plan_reads_of(&b, 1 << 20).unwrap_err();
        assert_eq!(
            e,
            PlanError::ReadTooLarge {
                total: 2 * u32::MAX as u64,
                max: 1 << 20
            }
        );
        assert_eq!(e.v1(), V1Error::Chunk);
        // exactly at the maximum passes, one byte above fails
        let b = build(vers, msg(&[rs(16, 1000), rs(1016, 24)], &[], None), &payload);
        assert!(plan_reads_of(&b, 1024).is_ok());
        assert!(matches!(
            plan_reads_of(&b, 1023),
            Err(PlanError::ReadTooLarge { total: 1024, max: 1023 })
        ));
        // Even with an unlimited total a reassembled Call past 4 GiB is refused.
        let b = build(vers, msg(&[rs(16, u32::MAX)], &[], None), &payload);
        assert_eq!(plan_reads_of(&b, u64::MAX), Err(PlanError::MessageTooLong));
        let b = build(vers, msg(&[rs(16, 8), rs(16, 8), rs(32, 4)], &[], None), &payload);
        // Responder limits on chunks and segments map to the v2 errors.
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        let lim = ReadLimits {
            max_total_bytes: u64::MAX,
            max_chunks: 1,
            max_segments: 64,
        };
        let e = plan_reads(&h, &lim).unwrap_err();
        assert_eq!(e.v2(), V2Error::ReadChunks { max_chunks: 1 });
        let lim = ReadLimits {
            max_total_bytes: u64::MAX,
            max_chunks: 8,
            max_segments: 1,
        };
        assert_eq!(
            plan_reads(&h, &lim).unwrap_err().v2(),
            V2Error::Segments { max_segments: 1 }
        );
        let lim = ReadLimits {
            max_total_bytes: u64::MAX,
            max_chunks: 0,
            max_segments: 0,
        };
        assert_eq!(
            plan_reads(&h, &lim).unwrap_err().v2(),
            V2Error::ReadChunks { max_chunks: 0 }
        );
    }
}

/// Issue 20: chunks of 1 and D-1 bytes sum to D, but chunk 1 is placed after
/// chunk 0 and its 3 bytes of XDR padding (RFC 8166 s3.4.5.2), so the area
/// needs D+4 bytes and its last Read would end 3 bytes past a D-byte buffer.
/// The plan is refused with ERR_CHUNK (v1) / RDMA2_ERR_BAD_XDR (v2).
#[test]
fn hostile_peer_read_chunks_of_1_and_d_minus_1_bytes_do_not_overrun_the_buffer() {
    const D: u32 = 8192;
    for vers in [1, 2] {
        let payload = rpc(64, 0);
        // chunk 0 at 16 (1 byte + 3 pad), chunk 1 right after it in the stream
        let b = build(vers, msg(&[rs(16, 1), rs(20, D - 1)], &[], None), &payload);
        let e = plan_reads_of(&b, u64::from(D)).unwrap_err();
        assert_eq!(
            e,
            PlanError::ReadTooLarge {
                total: u64::from(D) + 4,
                max: u64::from(D)
            }
        );
        assert_eq!(e.v1(), V1Error::Chunk);
        assert_eq!(e.v2(), V2Error::BadXdr);
        // With room for the padding it is accepted, and every Read lands
        // inside the area.
        let p = plan_reads_of(&b, u64::from(D) + 4).unwrap();
        assert_eq!(p.data_area_len, D + 4);
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        let reads = h.chunks().unwrap().reads;
        let end = p.read_ops(&reads).map(|o| o.dest_offset + o.segment.length).max();
        assert_eq!(end, Some(D + 3));
        // A Position-Zero chunk is padded too: 5 bytes take 8.
        let b = build(vers, nomsg(msg(&[rs(0, 5)], &[], Some(&[seg(9, 64, 0)]))), &[]);
        assert_eq!(plan_reads_of(&b, 5), Err(PlanError::ReadTooLarge { total: 8, max: 5 }));
        assert_eq!(plan_reads_of(&b, 8).unwrap().data_area_len, 8);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Issue 20: whatever `plan_reads` accepts fits its limit, padding
    /// included (`data_area_len <= max_total_bytes`), and a Call whose placed
    /// chunks fit is not refused for size. Chunks of odd lengths at the
    /// positions a requester would give them, limits near their sum.
    #[test]
    fn hostile_peer_read_plan_area_fits_the_limit(
        vers in prop_oneof![Just(1u32), Just(2u32)],
        pz in 0u8..4,
        lens in prop::collection::vec(prop_oneof![4 => 0u32..16, 2 => 0u32..9000, 1 => Just(u32::MAX - 2)], 1..6),
        gaps in prop::collection::vec(0u32..3, 6),
        slack in prop_oneof![Just(0u64), 0u64..8, 0u64..20_000],
        below in any::<bool>(),
    ) {
        let padded: u64 = lens.iter().map(|&l| u64::from(l).next_multiple_of(4)).sum();
        let sum: u64 = lens.iter().map(|&l| u64::from(l)).sum();
        // a limit around the segment sum, below or above the padded area
        let max = if below { sum.saturating_add(slack).min(padded.saturating_sub(1)).max(sum) } else { padded + slack };
        let (b, area) = if pz == 0 {
            // one Position-Zero chunk carrying the whole Call
            let l = lens[0];
            (build(vers, nomsg(msg(&[rs(0, l)], &[], Some(&[seg(9, 64, 0)]))), &[]), u64::from(l).next_multiple_of(4))
        } else {
            let mut reads = Vec::new();
            let mut pos = 16u32;
            for (k, &l) in lens.iter().enumerate() {
                pos = pos.saturating_add(4 * gaps[k]);
                reads.push(rs(pos, l));
                pos = pos.saturating_add(l.saturating_add(3) & !3);
            }
            (build(vers, msg(&reads, &[], None), &rpc(64, 0)), padded)
        };
        let Ok(h) = decode(&b, &Limits::DEFAULT) else { return Ok(()); };
        match plan_reads(&h, &ReadLimits::new(max)) {
            Ok(p) => {
                prop_assert!(u64::from(p.data_area_len) <= max, "area {} over limit {}", p.data_area_len, max);
                prop_assert_eq!(u64::from(p.data_area_len), area);
                let reads = h.chunks().unwrap().reads;
                for op in p.read_ops(&reads) {
                    prop_assert!(u64::from(op.dest_offset) + u64::from(op.segment.length) <= max);
                }
            }
            Err(PlanError::ReadTooLarge { total, max: m }) => {
                prop_assert_eq!(m, max);
                prop_assert!(total > max);
                prop_assert!(area > max, "refused although the area {} fits {}", area, max);
            }
            Err(e) => {
                // only a reassembled Call past 4 GiB or positions past the payload
                prop_assert!(matches!(e, PlanError::MessageTooLong | PlanError::PositionBeyondPayload { .. }), "{:?}", e);
            }
        }
    }
}

#[test]
fn header_types_without_a_call() {
    let b = build(
        1,
        BodyOut::MsgP {
            align: 4,
            thresh: 8,
            chunks: ChunksOut::default(),
        },
        &rpc(16, 0),
    );
    let h = decode(&b, &Limits::DEFAULT).unwrap();
    let e = plan_reads(&h, &ReadLimits::new(1 << 20)).unwrap_err();
    assert_eq!(e, PlanError::MsgPUnsupported);
    assert_eq!(e.v2(), V2Error::InvalHtype);
    let b = build(1, BodyOut::Done, &[]);
    let h = decode(&b, &Limits::DEFAULT).unwrap();
    assert_eq!(
        plan_reads(&h, &ReadLimits::new(1)),
        Err(PlanError::NotAMessage { htype: RDMA_DONE })
    );
    let call = ChunkLists::default();
    assert_eq!(
        reassemble_reply(&h, &call),
        Err(PlanError::NotAMessage { htype: RDMA_DONE })
    );
}

#[test]
fn bad_items_and_versions() {
    let call = ChunkLists::default();
    for items in [
        vec![DdpItem { offset: 0, len: 4 }],
        vec![DdpItem { offset: 5, len: 4 }],
        vec![DdpItem { offset: 8, len: 100 }],
        vec![DdpItem { offset: 8, len: 8 }, DdpItem { offset: 12, len: 0 }],
    ] {
        assert!(matches!(
            plan_reply(64, &items, &call, 1, 4096),
            Err(PlanError::BadItem { .. })
        ));
        let p = CallParams::new(1);
        let r = plan_call(64, &items, &ReplyNeeds::default(), &p);
        assert!(matches!(r, Err(PlanError::BadItem { .. })));
    }
    assert_eq!(
        plan_reply(64, &[], &call, 3, 4096),
        Err(PlanError::UnsupportedVersion { vers: 3 })
    );
    assert_eq!(
        plan_call(64, &[], &ReplyNeeds::default(), &CallParams::new(0)),
        Err(PlanError::UnsupportedVersion { vers: 0 })
    );
}

/// The requester refuses reply headers that contradict what it provisioned.
#[test]
fn requester_checks_the_echo() {
    let provisioned = build(
        1,
        msg(&[], &[&[seg(1, 100, 0), seg(2, 100, 0x100)]], Some(&[seg(3, 500, 0)])),
        &rpc(16, 0),
    );
    let hc = decode(&provisioned, &Limits::DEFAULT).unwrap();
    let call = *hc.chunks().unwrap();
    let reply = |w: &[Segment], r: Option<&[Segment]>, long: bool| {
        let b = if long {
            nomsg(msg(&[], &[w], r))
        } else {
            msg(&[], &[w], r)
        };
        build(1, b, &rpc(16, 1))
    };
    let check = |b: Vec<u8>| {
        let h = decode(&b, &Limits::DEFAULT).unwrap();
        reassemble_reply(&h, &call)
    };
    // good: 150 bytes across both segments, inline
    let l = check(reply(&[seg(1, 100, 0), seg(2, 50, 0x100)], None, false)).unwrap();
    assert_eq!(
        (&l.write_lens[..], l.kind, l.reduced_len),
        (&[150][..], ReplyKind::Short, 16)
    );
    // good: long reply in the Reply chunk
    let l = check(reply(&[seg(1, 0, 0), seg(2, 0, 0x100)], Some(&[seg(3, 300, 0)]), true)).unwrap();
    assert_eq!((l.kind, l.reduced_len), (ReplyKind::Long, 300));
    for (b, what) in [
        (
            reply(&[seg(1, 101, 0), seg(2, 0, 0x100)], None, false),
            "segment length above provisioned",
        ),
        (
            reply(&[seg(1, 50, 0), seg(2, 10, 0x100)], None, false),
            "chunk not filled in segment order",
        ),
        (
            reply(&[seg(1, 50, 0), seg(9, 0, 0x100)], None, false),
            "segment changed",
        ),
        (reply(&[seg(1, 50, 0)], None, false), "segment count changed"),
        (
            reply(&[seg(1, 0, 0), seg(2, 0, 0x100)], Some(&[seg(3, 300, 0)]), false),
            "RDMA_MSG with data in the reply chunk",
        ),
        (
            reply(&[seg(1, 0, 0), seg(2, 0, 0x100)], Some(&[seg(3, 501, 0)]), true),
            "segment length above provisioned",
        ),
    ] {
        assert_eq!(check(b), Err(PlanError::BadReply { what }));
    }
    // NOMSG without a Reply chunk cannot be decoded at all (header rule), and a
    // reply with a Read list is refused.
    let b = build(
        1,
        msg(&[rs(8, 4)], &[&[seg(1, 0, 0), seg(2, 0, 0x100)]], None),
        &rpc(16, 1),
    );
    assert_eq!(
        check(b),
        Err(PlanError::BadReply {
            what: "read list in a reply"
        })
    );
}

// ------------------------------------------------------------------ never panic

#[derive(Clone, Debug)]
struct RandomHeader {
    vers: u32,
    kind: u8,
    reads: Vec<ReadSegment>,
    writes: Vec<Vec<Segment>>,
    reply: Option<Vec<Segment>>,
    payload_len: usize,
}

fn arb_len() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => 0u32..64,
        6 => 0u32..9000,
        1 => Just(u32::MAX),
        1 => Just(u32::MAX - 3),
        1 => any::<u32>()
    ]
}

fn arb_seg() -> impl Strategy<Value = Segment> {
    (any::<u32>(), arb_len(), any::<u64>()).prop_map(|(handle, length, offset)| Segment { handle, length, offset })
}

fn arb_header() -> impl Strategy<Value = RandomHeader> {
    (
        prop_oneof![Just(1u32), Just(2u32)],
        0u8..3,
        prop::collection::vec((0u32..40, arb_seg(), 0u32..3), 0..6),
        prop::collection::vec(prop::collection::vec(arb_seg(), 0..4), 0..4),
        prop::option::of(prop::collection::vec(arb_seg(), 0..4)),
        prop_oneof![8usize..200, 0usize..9000],
    )
        .prop_map(|(vers, kind, raw_reads, writes, reply, payload_len)| {
            // positions: non-decreasing multiples of four, segments sharing one
            // position adjacent (what the decoder accepts) — with some zeros
            let mut pos = 0u32;
            let reads = raw_reads
                .into_iter()
                .map(|(step, target, same)| {
                    // mostly a new chunk a few words on; sometimes the same
                    // position (another segment) or position zero
                    if same != 0 || pos == 0 {
                        pos = pos.saturating_add(4 * (step % 11));
                    }
                    ReadSegment { position: pos, target }
                })
                .collect();
            RandomHeader {
                vers,
                kind,
                reads,
                writes,
                reply,
                payload_len,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary decodable headers given to every responder and requester entry
    /// point: typed results, never a panic; whatever is accepted is consistent.
    #[test]
    fn planning_never_panics(
        rh in arb_header(),
        reply_tail in prop_oneof![4 => 8usize..3000, 1 => 0usize..20_000],
        items in prop::collection::vec((0u32..64, prop_oneof![8 => 0u32..5000, 1 => arb_len()]), 0..5),
        inline_max in prop_oneof![1 => 0u32..64, 6 => 64u32..10_000, 1 => Just(u32::MAX)],
        max_read in prop_oneof![3 => Just(u64::MAX), 1 => 0u64..100_000],
        positions in prop::collection::vec(0u32..30_000, 0..5),
    ) {
        let writes: Vec<&[Segment]> = rh.writes.iter().map(|w| &w[..]).collect();
        let chunks = ChunksOut { reads: &rh.reads, writes: &writes, reply: rh.reply.as_deref() };
        let body = match rh.kind {
            0 => BodyOut::Msg { inv_handle: 7, chunks },
            1 => BodyOut::NoMsg { inv_handle: 7, chunks },
            _ => BodyOut::MsgP { align: 0, thresh: 0, chunks },
        };
        let vers = if rh.kind == 2 { 1 } else { rh.vers };
        let b = build(vers, body, &rpc(rh.payload_len, 0));
        let Ok(h) = decode(&b, &Limits::DEFAULT) else { return Ok(()); };

        match plan_reads(&h, &ReadLimits::new(max_read)) {
            Ok(p) => {
                let reads = h.chunks().unwrap().reads;
                let total: u64 = p.read_ops(&reads).map(|o| o.segment.length as u64).sum();
                prop_assert_eq!(total, p.read_bytes);
                prop_assert!(p.read_bytes <= max_read);
                let sum: u64 = p.pieces().iter().map(|x| x.stream_len()).sum();
                prop_assert_eq!(sum, p.stream_len as u64);
                for op in p.read_ops(&reads) {
                    prop_assert!(op.dest_offset as u64 + op.segment.length as u64 <= p.data_area_len as u64);
                }
            }
            Err(e) => { let _ = (e.v1(), e.v2(), e.to_string()); }
        }

        // items at aligned offsets in stream order (may still be invalid)
        let mut off = 8u32;
        let items: Vec<DdpItem> = items.iter().map(|&(gap, len)| {
            off = off.saturating_add(gap & !3);
            let it = DdpItem { offset: off, len };
            off = off.saturating_add(len.saturating_add(3) & !3);
            it
        }).collect();
        // mostly long enough to hold the items, sometimes not
        let reply_len = if reply_tail % 5 == 0 { reply_tail } else { off as usize + reply_tail };
        if let Some(call) = h.chunks() {
            match plan_reply(reply_len, &items, call, h.vers, inline_max) {
                Ok(p) => {
                    prop_assert!(p.send_len() <= inline_max as u64);
                    let mut to_writes = 0u64;
                    let mut to_reply = 0u64;
                    for op in p.write_ops(call).take(10_000) {
                        prop_assert_eq!(op.src.len, op.target.length);
                        prop_assert!(op.src.end() <= reply_len as u64);
                        match op.chunk {
                            WriteTarget::Write(_) => to_writes += op.src.len as u64,
                            WriteTarget::Reply => to_reply += op.src.len as u64,
                        }
                    }
                    let item_bytes: u64 = p.reduced_items().iter().map(|i| i.len as u64).sum();
                    prop_assert_eq!(to_writes, item_bytes);
                    let want_reply = if p.kind == ReplyKind::Long { p.reduced_len as u64 } else { 0 };
                    prop_assert_eq!(to_reply, want_reply);
                    let reduced: u64 = p.reduced_ranges().map(|r| r.len as u64).sum();
                    prop_assert_eq!(reduced, p.reduced_len as u64);
                    let mut out = vec![0u8; p.header_len as usize];
                    let n = encode_reply_header(ReplyHeaderOut::Planned { plan: &p, call }, XID, 1, 0, &mut out).unwrap();
                    // our reply header decodes, and the requester accepts it
                    let mut send = out[..n].to_vec();
                    if p.kind == ReplyKind::Short {
                        send.extend_from_slice(&rpc(p.reduced_len as usize, 1));
                    }
                    if p.reduced_len >= 8 || p.kind == ReplyKind::Long {
                        let rh2 = decode(&send, &Limits::DEFAULT).unwrap();
                        let lay = reassemble_reply(&rh2, call).unwrap();
                        prop_assert_eq!(lay.reduced_len, p.reduced_len);
                        let _ = lay.pieces(&positions);
                    }
                    // too small a buffer is an error, not a panic
                    if n > 0 {
                        let planned = ReplyHeaderOut::Planned { plan: &p, call };
                        prop_assert!(encode_reply_header(planned, XID, 1, 0, &mut out[..n - 1]).is_err());
                    }
                }
                Err(e) => { let _ = (e.v1(), e.v2()); }
            }
            // the decoded header taken as a reply to itself: never panics
            let _ = reassemble_reply(&h, call).map(|l| l.pieces(&positions));
        }
    }
}

/// `encode_reply_header` with chunk lists other than the plan's is refused.
#[test]
fn reply_header_with_other_chunks_is_refused() {
    for vers in [1, 2] {
        let a = build(
            vers,
            msg(&[], &[&[seg(1, 100, 0)]], Some(&[seg(2, 4000, 0)])),
            &rpc(16, 0),
        );
        let b = build(
            vers,
            msg(&[], &[&[seg(1, 50, 0)]], Some(&[seg(2, 4000, 0)])),
            &rpc(16, 0),
        );
        let c = build(vers, msg(&[], &[&[seg(1, 100, 0)], &[]], None), &rpc(16, 0));
        let ha = decode(&a, &Limits::DEFAULT).unwrap();
        let hb = decode(&b, &Limits::DEFAULT).unwrap();
        let hc = decode(&c, &Limits::DEFAULT).unwrap();
        let items = [DdpItem { offset: 8, len: 80 }];
        let p = plan_reply(2000, &items, ha.chunks().unwrap(), vers, 1024).unwrap();
        assert_eq!(p.kind, ReplyKind::Long);
        let mut out = [0u8; 256];
        let n = encode_reply_header(
            ReplyHeaderOut::Planned {
                plan: &p,
                call: ha.chunks().unwrap(),
            },
            XID,
            3,
            0,
            &mut out,
        )
        .unwrap();
        assert_eq!(n, p.header_len as usize);
        // the good header decodes with the lengths written
        let h = decode(&out[..n], &Limits::DEFAULT).unwrap();
        let l = reassemble_reply(&h, ha.chunks().unwrap()).unwrap();
        assert_eq!(
            (&l.write_lens[..], l.kind, l.reduced_len),
            (&[80][..], ReplyKind::Long, 2000 - 80)
        );
        let mismatch = Err(PlanError::ChunkMismatch {
            what: "chunks differ from the plan",
        });
        assert_eq!(
            encode_reply_header(
                ReplyHeaderOut::Planned {
                    plan: &p,
                    call: hb.chunks().unwrap()
                },
                XID,
                3,
                0,
                &mut out
            ),
            mismatch
        );
        assert_eq!(
            encode_reply_header(
                ReplyHeaderOut::Planned {
                    plan: &p,
                    call: hc.chunks().unwrap()
                },
                XID,
                3,
                0,
                &mut out
            ),
            mismatch
        );
    }
}
