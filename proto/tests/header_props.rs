//! Property tests for the v1/v2 transport header codec: every header type
//! round-trips (encode, decode, compare), and no input makes the decoder panic.

use proptest::prelude::*;
use proto::header::*;
use proto::DecodeErrorKind;

fn segment() -> impl Strategy<Value = Segment> {
    (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(handle, length, offset)| Segment { handle, length, offset })
}

/// A Read list in wire order: strictly increasing aligned positions, each chunk a
/// run of 1..4 segments.
fn read_list() -> impl Strategy<Value = Vec<ReadSegment>> {
    prop::collection::vec((0u32..64, prop::collection::vec(segment(), 1..4)), 0..4).prop_map(|chunks| {
        let mut pos = 0u32;
        let mut out = Vec::new();
        for (i, (step, segs)) in chunks.into_iter().enumerate() {
            pos += if i == 0 { step * 4 } else { 4 + step * 4 };
            out.extend(segs.into_iter().map(|target| ReadSegment { position: pos, target }));
        }
        out
    })
}

#[derive(Debug, Clone)]
struct Lists {
    reads: Vec<ReadSegment>,
    writes: Vec<Vec<Segment>>,
    reply: Option<Vec<Segment>>,
}

fn lists() -> impl Strategy<Value = Lists> {
    (
        read_list(),
        prop::collection::vec(prop::collection::vec(segment(), 0..4), 0..4),
        prop::option::of(prop::collection::vec(segment(), 0..4)),
    )
        .prop_map(|(reads, writes, reply)| Lists { reads, writes, reply })
}

#[derive(Debug, Clone)]
enum Kind {
    Msg { inv: u32, payload_words: Vec<u32> },
    NoMsg { inv: u32 },
    MsgP { align: u32, thresh: u32 },
    Done,
    ErrV1(V1Error),
    ErrV2(V2Error),
    ConnProp(Vec<(u32, Vec<u8>)>),
}

fn v2_error() -> impl Strategy<Value = V2Error> {
    (1u32..12, any::<u32>(), any::<u32>()).prop_map(|(c, a, b)| V2Error::from_code(c, a, b))
}

fn props() -> impl Strategy<Value = Vec<(u32, Vec<u8>)>> {
    prop::collection::vec(
        prop_oneof![
            any::<u32>().prop_map(|v| (RDMA2_PROPID_RBSIZ, v.to_be_bytes().to_vec())),
            (0u32..3).prop_map(|v| (RDMA2_PROPID_BRS, v.to_be_bytes().to_vec())),
            (3u32..1000, prop::collection::vec(any::<u8>(), 0..20)).prop_map(|(id, d)| (id, d)),
            Just((RDMA2_PROPID_RBSIZ, vec![])),
        ],
        0..5,
    )
}

fn kind(vers: u32) -> BoxedStrategy<Kind> {
    let msg = (any::<u32>(), prop::collection::vec(any::<u32>(), 0..6))
        .prop_map(|(inv, payload_words)| Kind::Msg { inv, payload_words });
    let nomsg = any::<u32>().prop_map(|inv| Kind::NoMsg { inv });
    if vers == 1 {
        prop_oneof![
            msg,
            nomsg,
            (any::<u32>(), any::<u32>()).prop_map(|(align, thresh)| Kind::MsgP { align, thresh }),
            Just(Kind::Done),
            (any::<u32>(), any::<u32>()).prop_map(|(low, high)| Kind::ErrV1(V1Error::Vers { low, high })),
            Just(Kind::ErrV1(V1Error::Chunk)),
        ]
        .boxed()
    } else {
        prop_oneof![
            msg,
            nomsg,
            v2_error().prop_map(Kind::ErrV2),
            props().prop_map(Kind::ConnProp)
        ]
        .boxed()
    }
}

fn case() -> impl Strategy<Value = (u32, u32, u32, Lists, Kind, bool)> {
    (1u32..=2).prop_flat_map(|vers| {
        (
            Just(vers),
            any::<u32>(),
            any::<u32>(),
            lists(),
            kind(vers),
            any::<bool>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// encode → decode gives back every field; re-encoding the decoded views gives
    /// the same bytes.
    #[test]
    fn every_header_type_round_trips((vers, xid, credits, mut l, k, reply_msg) in case()) {
        // A NOMSG must carry a Position-Zero Read chunk or a Reply chunk.
        if matches!(k, Kind::NoMsg { .. }) && l.reply.is_none() && l.reads.first().map(|r| r.position) != Some(0) {
            l.reply = Some(vec![]);
        }
        let writes: Vec<&[Segment]> = l.writes.iter().map(|w| &w[..]).collect();
        let chunks = ChunksOut { reads: &l.reads, writes: &writes, reply: l.reply.as_deref() };
        let prop_store: Vec<Property> = match &k {
            Kind::ConnProp(ps) => ps.iter().map(|(id, d)| Property { id: *id, data: d }).collect(),
            _ => vec![],
        };
        let (body, flags) = match &k {
            Kind::Msg { inv, .. } => (BodyOut::Msg { inv_handle: if vers == 1 { 0 } else { *inv }, chunks }, 0),
            Kind::NoMsg { inv } => (BodyOut::NoMsg { inv_handle: if vers == 1 { 0 } else { *inv }, chunks }, 0),
            Kind::MsgP { align, thresh } => (BodyOut::MsgP { align: *align, thresh: *thresh, chunks }, 0),
            Kind::Done => (BodyOut::Done, 0),
            Kind::ErrV1(e) => (BodyOut::ErrorV1(*e), 0),
            Kind::ErrV2(e) => (BodyOut::ErrorV2(*e), RPCRDMA2_F_RESPONSE),
            Kind::ConnProp(_) => (BodyOut::ConnProp(&prop_store), 0),
        };
        let is_msg = matches!(k, Kind::Msg { .. } | Kind::MsgP { .. });
        let flags = if is_msg && vers == 2 && reply_msg { RPCRDMA2_F_RESPONSE } else { flags };
        let out = HeaderOut { xid, vers, credits, flags, body };
        let mut buf = vec![0u8; out.encoded_len() + 64];
        let n = encode(&out, &mut buf).unwrap();
        prop_assert_eq!(n, out.encoded_len());
        // Append an RPC message for MSG/MSGP: xid, msg_type, then some words.
        buf.truncate(n);
        if is_msg {
            buf.extend(xid.to_be_bytes());
            buf.extend((reply_msg as u32).to_be_bytes());
            if let Kind::Msg { payload_words, .. } = &k {
                for w in payload_words { buf.extend(w.to_be_bytes()); }
            }
        }
        let h = decode(&buf, &Limits::DEFAULT).unwrap();
        prop_assert_eq!((h.xid, h.vers, h.credits, h.flags), (xid, vers, credits, flags));
        prop_assert_eq!(h.header_len, n);
        match (&k, h.body) {
            (Kind::Msg { .. } | Kind::MsgP { .. }, Body::Msg { payload, .. } | Body::MsgP { payload, .. }) => {
                prop_assert_eq!(payload, &buf[n..]);
            }
            (Kind::NoMsg { .. }, Body::NoMsg { .. }) | (Kind::Done, Body::Done) => {}
            (Kind::ErrV1(e), Body::ErrorV1(d)) => prop_assert_eq!(*e, d),
            (Kind::ErrV2(e), Body::ErrorV2(d)) => prop_assert_eq!(*e, d),
            (Kind::ConnProp(ps), Body::ConnProp(d)) => {
                let got: Vec<(u32, Vec<u8>)> = d.iter().map(|p| (p.id, p.data.to_vec())).collect();
                prop_assert_eq!(ps, &got);
            }
            (k, b) => prop_assert!(false, "kind {:?} decoded as {:?}", k, b),
        }
        if let Some(c) = h.chunks() {
            let reads: Vec<ReadSegment> = c.reads.segments().collect();
            prop_assert_eq!(&reads, &l.reads);
            let ws: Vec<Vec<Segment>> = c.writes.iter().map(|w| w.iter().collect()).collect();
            prop_assert_eq!(&ws, &l.writes);
            let rep: Option<Vec<Segment>> = c.reply.map(|r| r.iter().collect());
            prop_assert_eq!(&rep, &l.reply);
            // chunk grouping: one chunk per distinct position
            let mut positions: Vec<u32> = l.reads.iter().map(|r| r.position).collect();
            positions.dedup();
            prop_assert_eq!(c.reads.chunk_count(), positions.len());
            let chunk_positions: Vec<u32> = c.reads.chunks().map(|ch| ch.position).collect();
            prop_assert_eq!(chunk_positions, positions);
            let seg_total: usize = c.reads.chunks().map(|ch| ch.segment_count()).sum();
            prop_assert_eq!(seg_total, l.reads.len());
            prop_assert_eq!(c.reads.position_zero().is_some(), l.reads.first().map(|r| r.position) == Some(0));
        }
    }

    /// Arbitrary bytes never panic the decoder, and whatever decodes has views whose
    /// accessors stay inside the buffer.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), vers in 0u32..4) {
        let mut b = bytes.clone();
        if b.len() >= 8 { b[4..8].copy_from_slice(&vers.to_be_bytes()); }
        if let Ok(h) = decode(&b, &Limits::DEFAULT) {
            prop_assert!(h.header_len <= b.len());
            if let Some(c) = h.chunks() {
                let _ = c.reads.segments().count();
                let _ = c.reads.chunks().map(|c| c.total_len()).sum::<u64>();
                let _ = c.writes.iter().map(|w| w.total_len()).sum::<u64>();
                let _ = c.reply.map(|r| r.total_len());
            }
            if let Body::ConnProp(p) = h.body { let _ = (p.rbsiz(), p.brs(), p.iter().count()); }
        }
    }

    /// Truncating a valid header anywhere inside the header is an error naming a
    /// field, never a panic or a success.
    #[test]
    fn truncation_is_an_error((vers, xid, credits, l, _k, _r) in case(), cut in any::<prop::sample::Index>()) {
        let writes: Vec<&[Segment]> = l.writes.iter().map(|w| &w[..]).collect();
        let chunks = ChunksOut { reads: &l.reads, writes: &writes, reply: l.reply.as_deref() };
        let out = HeaderOut { xid, vers, credits, flags: 0, body: BodyOut::Msg { inv_handle: 0, chunks } };
        let mut buf = vec![0u8; out.encoded_len()];
        encode(&out, &mut buf).unwrap();
        buf.extend(xid.to_be_bytes());
        buf.extend(0u32.to_be_bytes());
        let at = cut.index(out.encoded_len() + 4);
        let e = decode(&buf[..at], &Limits::DEFAULT).unwrap_err();
        prop_assert!(matches!(e.kind, DecodeErrorKind::Truncated), "{:?}", e);
        prop_assert!(e.offset <= at);
    }
}
