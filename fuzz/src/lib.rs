//! Invariant checks shared by the fuzz targets in `fuzz_targets/`.
//!
//! Each `check_*` function takes arbitrary bytes, runs one decoder family and
//! panics (via `assert!`) if an invariant beyond "does not panic" breaks. The fuzz
//! targets are one-line wrappers, so the same checks also run under plain
//! `cargo test` over the committed seeds (see the tests at the bottom).
//!
//! Called from the fuzzing thread only; no shared state.

use proto::header::{
    self, Body, BodyOut, ChunkLists, ChunksOut, Header, HeaderOut, Limits, Property, ReadSegment, Segment,
};
use proto::plan::{self, Piece, ReadLimits};
use proto::private_data;
use proto::rpc;
use proto::ulb::DdpItem;
use proto::xdr::Writer;
use rpcrdma_apps::dump;

pub mod nfs4_service;
pub mod nfs_service;
pub mod seeds;
pub use nfs4_service::check_nfs4_service;
pub use nfs_service::check_nfs_service;

// ------------------------------------------------------------------ headers

/// Owned copy of a decoded header's lists, to build a [`HeaderOut`] from.
struct Owned {
    reads: Vec<ReadSegment>,
    writes: Vec<Vec<Segment>>,
    reply: Option<Vec<Segment>>,
    props: Vec<(u32, Vec<u8>)>,
}

fn owned(h: &Header<'_>) -> Owned {
    let (reads, writes, reply) = match h.chunks() {
        Some(c) => (
            c.reads.segments().collect(),
            c.writes.iter().map(|w| w.iter().collect()).collect(),
            c.reply.map(|r| r.iter().collect()),
        ),
        None => (Vec::new(), Vec::new(), None),
    };
    let props = match h.body {
        Body::ConnProp(p) => p.iter().map(|p| (p.id, p.data.to_vec())).collect(),
        _ => Vec::new(),
    };
    Owned {
        reads,
        writes,
        reply,
        props,
    }
}

/// Check the structural invariants of decoded chunk lists against `limits`.
fn check_chunks(c: &ChunkLists<'_>, limits: &Limits) {
    let mut last = None;
    let mut chunks = 0;
    for s in c.reads.segments() {
        assert_eq!(s.position % 4, 0, "unaligned position accepted");
        if last != Some(s.position) {
            assert!(last.is_none_or(|p| p < s.position), "positions out of order accepted");
            chunks += 1;
            last = Some(s.position);
        }
    }
    assert_eq!(chunks, c.reads.chunk_count());
    assert_eq!(c.reads.chunks().count(), c.reads.chunk_count());
    assert_eq!(
        c.reads.chunks().map(|ch| ch.segment_count()).sum::<usize>(),
        c.reads.segment_count()
    );
    assert!(c.reads.chunk_count() <= limits.max_read_chunks as usize);
    assert!(c.reads.segment_count() <= limits.max_read_segments as usize);
    assert!(c.writes.len() <= limits.max_write_chunks as usize);
    assert_eq!(c.writes.iter().count(), c.writes.len());
    for w in c.writes.iter() {
        assert!(w.len() <= limits.max_chunk_segments as usize);
        assert_eq!(w.iter().count(), w.len());
    }
    if let Some(r) = c.reply {
        assert!(r.len() <= limits.max_chunk_segments as usize);
    }
    if let Some(pz) = c.reads.position_zero() {
        assert_eq!(pz.position, 0);
    }
}

/// Two headers are the same message: equal in every field, comparing property
/// data without its XDR padding (which the decoder does not check, RFC 4506 s3).
fn same_header(a: &Header<'_>, b: &Header<'_>) -> bool {
    match (a.body, b.body) {
        (Body::ConnProp(pa), Body::ConnProp(pb)) => {
            (a.xid, a.vers, a.credits, a.flags, a.header_len) == (b.xid, b.vers, b.credits, b.flags, b.header_len)
                && pa.iter().eq(pb.iter())
        }
        _ => a == b,
    }
}

/// Decode `buf` as a transport header with `limits`; if it decodes, check the
/// views, re-encode it and check the bytes and the re-decoded header; if it does
/// not, check the error and the error reply a responder would send.
pub fn check_header(buf: &[u8], limits: &Limits) {
    // The chunk-free one-step decoder the engines try first agrees with the
    // full decoder: the same header when it accepts, and it accepts every
    // chunk-free MSG the full decoder does.
    let full = header::decode(buf, limits);
    match header::decode_chunk_free_msg(buf) {
        Some(fast) => assert_eq!(Ok(fast), full, "chunk-free decode disagrees"),
        None => assert!(
            !full
                .as_ref()
                .is_ok_and(|h| matches!(h.body, Body::Msg { chunks, .. } if chunks.is_empty())),
            "chunk-free decode refused a chunk-free MSG"
        ),
    }
    // The direction a header conveys (RFC 8167; draft -09 s3.2), which the
    // engines route by before any XID lookup: the v2 flag, or the inline
    // message's msg_type in v1, as the RPC decoder reads it.
    if let Ok(h) = &full {
        let dir = h.rpc_direction();
        match (h.vers, h.body) {
            (header::RPCRDMA_VERSION_2, Body::Msg { .. } | Body::NoMsg { .. }) => {
                let want = if h.is_response() {
                    header::RpcDirection::Reply
                } else {
                    header::RpcDirection::Call
                };
                assert_eq!(dir, Some(want));
            }
            (header::RPCRDMA_VERSION_1, Body::Msg { payload, .. }) => {
                let want = match rpc::peek_msg(payload).map(|(_, t)| t) {
                    Ok(rpc::CALL) => Some(header::RpcDirection::Call),
                    Ok(rpc::REPLY) => Some(header::RpcDirection::Reply),
                    _ => None,
                };
                assert_eq!(dir, want);
            }
            _ => assert_eq!(dir, None),
        }
    }
    let h = match full {
        Ok(h) => h,
        Err(e) => {
            assert!(
                e.offset <= buf.len(),
                "error offset {} past the end {}",
                e.offset,
                buf.len()
            );
            assert!(!e.field.is_empty());
            let text = e.to_string();
            assert!(!text.contains('\n') && text.contains(e.field));
            // The error reply a responder sends must itself decode as an error.
            if let Some(p) = header::peek_prefix(buf) {
                let mut out = [0u8; 64];
                let n = header::encode_error_reply(&p, 7, &e, (1, 2), &mut out).expect("error reply fits 64 bytes");
                match header::decode(&out[..n], &Limits::DEFAULT) {
                    Ok(r) => {
                        assert_eq!(r.xid, p.xid);
                        assert!(matches!(r.body, Body::ErrorV1(_) | Body::ErrorV2(_)), "{:?}", r.body);
                    }
                    // A reply to an unknown version keeps that version word.
                    Err(re) => assert!(p.vers != 1 && p.vers != 2 && re.field == "rdma_vers", "{re}"),
                }
            }
            return;
        }
    };
    assert!(h.header_len <= buf.len());
    assert!(h.vers == 1 || h.vers == 2);
    if h.vers == 1 {
        assert_eq!(h.flags, 0);
    }
    if let Some(c) = h.chunks() {
        check_chunks(c, limits);
    }
    match h.body {
        Body::Msg {
            payload_offset,
            payload,
            ..
        }
        | Body::MsgP {
            payload_offset,
            payload,
            ..
        } => {
            assert_eq!(payload_offset, h.header_len);
            assert_eq!(payload, &buf[payload_offset..]);
            assert!(payload.len() >= 4 && payload[..4] == h.xid.to_be_bytes());
        }
        Body::NoMsg { ref chunks, .. } => {
            assert!(chunks.reads.position_zero().is_some() || chunks.reply.is_some());
        }
        Body::ConnProp(p) => {
            assert!(p.len() <= limits.max_properties as usize);
            assert_eq!(p.iter().count(), p.len());
            for prop in p.iter() {
                assert!(prop.data.len() <= limits.max_property_len as usize);
                if let Some(v) = prop.value() {
                    assert_eq!(prop.data, v.to_be_bytes());
                }
            }
        }
        _ => {}
    }
    // A strict prefix of the header never decodes.
    if h.header_len > 0 {
        assert!(header::decode(&buf[..h.header_len - 1], limits).is_err());
    }

    // Re-encode.
    let o = owned(&h);
    let writes: Vec<&[Segment]> = o.writes.iter().map(Vec::as_slice).collect();
    let chunks = ChunksOut {
        reads: &o.reads,
        writes: &writes,
        reply: o.reply.as_deref(),
    };
    let props: Vec<Property<'_>> = o.props.iter().map(|(id, data)| Property { id: *id, data }).collect();
    let body = match h.body {
        Body::Msg { inv_handle, .. } => BodyOut::Msg { inv_handle, chunks },
        Body::NoMsg { inv_handle, .. } => BodyOut::NoMsg { inv_handle, chunks },
        Body::MsgP { align, thresh, .. } => BodyOut::MsgP { align, thresh, chunks },
        Body::Done => BodyOut::Done,
        Body::ErrorV1(e) => BodyOut::ErrorV1(e),
        Body::ErrorV2(e) => BodyOut::ErrorV2(e),
        Body::ConnProp(_) => BodyOut::ConnProp(&props),
    };
    let out = HeaderOut {
        xid: h.xid,
        vers: h.vers,
        credits: h.credits,
        flags: h.flags,
        body,
    };
    assert_eq!(out.encoded_len(), h.header_len);
    let mut enc = vec![0u8; h.header_len];
    let n = header::encode(&out, &mut enc).expect("re-encode fits");
    assert_eq!(n, h.header_len);
    // One byte short is refused, never written past.
    if n > 0 {
        let mut short = vec![0u8; n - 1];
        assert!(header::encode(&out, &mut short).is_err());
    }
    if matches!(h.body, Body::ConnProp(_)) {
        // Equal except XDR padding, which the encoder writes as zero.
        for (i, (&e, &b)) in enc.iter().zip(buf).enumerate() {
            assert!(e == b || e == 0, "byte {i}: encoded {e:#x}, received {b:#x}");
        }
    } else {
        assert_eq!(&enc[..], &buf[..n], "re-encoding differs");
    }
    let mut again = enc.clone();
    again.extend_from_slice(&buf[n..]);
    let h2 = header::decode(&again, limits).expect("re-encoded header decodes");
    assert!(same_header(&h, &h2), "{h:?} != {h2:?}");
}

/// Small limits taken from one input byte, so the limit paths are reached.
pub fn limits_from(b: u8) -> Limits {
    let small = |shift: u8| u32::from((b >> shift) & 3) + 1;
    Limits {
        max_read_chunks: small(0),
        max_read_segments: small(0) + small(2),
        max_write_chunks: small(2),
        max_chunk_segments: small(4),
        max_properties: small(6) * 2,
        max_property_len: 8,
    }
}

/// Fuzz entry for one version: the first byte picks default or small limits, the
/// rest is the header with its version word forced to `vers`.
pub fn check_header_version(data: &[u8], vers: u32) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if buf.len() >= 8 {
        buf[4..8].copy_from_slice(&vers.to_be_bytes());
    }
    let limits = if sel & 0x80 == 0 {
        Limits::DEFAULT
    } else {
        limits_from(sel)
    };
    check_header(&buf, &limits);
}

// ------------------------------------------------------------- private data

/// RFC 8797: the search finds the *first* valid message, and its fields are what
/// the encoder would write for the decoded values (reserved bits aside).
pub fn check_private_data(buf: &[u8]) {
    let p = private_data::decode(buf);
    let d = p.data();
    assert!((private_data::MIN_SIZE_BYTES..=private_data::MAX_SIZE_BYTES).contains(&d.send_size_bytes));
    assert!((private_data::MIN_SIZE_BYTES..=private_data::MAX_SIZE_BYTES).contains(&d.receive_size_bytes));
    match p.offset() {
        None => {
            assert!(!p.present());
            assert_eq!(d, private_data::PrivateData::default());
        }
        Some(off) => {
            assert!(p.present());
            let msg = &buf[off..off + private_data::ENCODED_LEN_BYTES];
            assert_eq!(msg[..4], private_data::FORMAT_IDENTIFIER.to_be_bytes());
            // Nothing valid ends before this one: cutting the buffer just short of
            // its end finds nothing.
            assert!(!private_data::decode(&buf[..off + private_data::ENCODED_LEN_BYTES - 1]).present());
            // Starting the search here finds it at offset 0 with the same data.
            let q = private_data::decode(&buf[off..]);
            assert_eq!((q.offset(), q.data()), (Some(0), d));
            // Re-encoding gives the same bytes, except the 7 reserved bits.
            let enc = d.to_bytes().expect("decoded data re-encodes");
            let mut want = [0u8; 8];
            want.copy_from_slice(msg);
            want[5] &= 0x01;
            assert_eq!(enc, want);
            assert_eq!(d.normalized(), d);
        }
    }
}

// --------------------------------------------------------------------- RPC

/// ONC RPC call header: a decoded header re-encodes to its own length and
/// decodes back to the same value.
pub fn check_rpc_call(buf: &[u8]) {
    if let Ok((xid, _)) = rpc::peek_msg(buf) {
        assert_eq!(xid.to_be_bytes(), buf[..4]);
    }
    let Ok((hdr, off)) = rpc::decode_call(buf) else {
        return;
    };
    assert!(off <= buf.len());
    assert_eq!(off, hdr.encoded_len());
    assert_eq!(rpc::peek_msg(buf).unwrap(), (hdr.xid, rpc::CALL));
    if let Some(Ok(sys)) = hdr.auth_sys() {
        let mut b = vec![0u8; sys.encoded_len()];
        let mut w = Writer::new(&mut b);
        sys.encode(&mut w).expect("AUTH_SYS re-encodes");
        assert_eq!(w.len(), sys.encoded_len());
        let back = rpc::AuthSysParms::decode(&b).expect("AUTH_SYS re-decodes");
        assert_eq!(back, sys);
    }
    if let Some(g) = hdr.rpcsec_gss() {
        let _ = g.map(|g| g.args_unwrapped());
    }
    let mut b = vec![0u8; hdr.encoded_len()];
    let mut w = Writer::new(&mut b);
    rpc::encode_call_header(&mut w, &hdr).expect("call header re-encodes");
    assert_eq!(w.len(), off);
    let (back, off2) = rpc::decode_call(&b).expect("re-encoded call decodes");
    assert_eq!((back, off2), (hdr, off));
}

/// ONC RPC reply header: same round trip as [`check_rpc_call`].
pub fn check_rpc_reply(buf: &[u8]) {
    let Ok((hdr, off)) = rpc::decode_reply(buf) else {
        return;
    };
    assert!(off <= buf.len());
    assert_eq!(off, hdr.encoded_len());
    assert_eq!(rpc::peek_msg(buf).unwrap(), (hdr.xid, rpc::REPLY));
    let mut b = vec![0u8; hdr.encoded_len()];
    let mut w = Writer::new(&mut b);
    rpc::encode_reply_header(&mut w, &hdr).expect("reply header re-encodes");
    assert_eq!(w.len(), off);
    let (back, off2) = rpc::decode_reply(&b).expect("re-encoded reply decodes");
    assert_eq!((back, off2), (hdr, off));
}

// ------------------------------------------------------- NFSv4 callbacks

/// A Reply to a backward-direction Call (RFC 8881 s20): the RPC reply
/// header, then, when it is MSG_ACCEPTED / SUCCESS, a CB_COMPOUND4res.
/// What decodes has at most `MAX_CB_RESULTS` results and a tag inside the
/// input within `MAX_TAG_BYTES`; the decoder consumed the whole body, so
/// no strict prefix of it decodes.
pub fn check_nfs4_cb_reply(buf: &[u8]) {
    use proto::nfs4::cb::{CbCompoundRes, MAX_CB_RESULTS};
    let Ok((hdr, off)) = rpc::decode_reply(buf) else {
        return;
    };
    if !hdr.is_success() {
        return;
    }
    let body = &buf[off..];
    let Ok(r) = CbCompoundRes::decode(body) else {
        return;
    };
    assert!(r.tag.len() <= proto::nfs4::MAX_TAG_BYTES as usize);
    let inside = body.as_ptr_range();
    assert!(r.tag.is_empty() || inside.contains(&r.tag.as_ptr()), "the tag borrows the input");
    let results = usize::from(r.sequence.is_some()) + usize::from(r.op.is_some());
    assert!(results <= MAX_CB_RESULTS as usize);
    for cut in 0..body.len() {
        assert!(CbCompoundRes::decode(&body[..cut]).is_err(), "prefix {cut} decoded");
    }
}

/// A callback Call as a client reads it (`decode_cb_call`): never panics;
/// what it returns borrows the input and is within the bounds; every
/// proper prefix of a Call that decoded is refused; the Reply to it
/// encodes.
pub fn check_nfs4_cb_call(buf: &[u8]) {
    use proto::nfs4::cb::{decode_cb_call, encode_cb_compound_reply, CbCall, CbOp};
    let Ok((xid, c)) = decode_cb_call(buf) else {
        return;
    };
    let inside = buf.as_ptr_range();
    if let CbCall::Compound { seq, op, .. } = c {
        match op {
            Some(Ok(CbOp::Recall { fh, .. })) => {
                assert!(fh.len() <= proto::nfs4::NFS4_FHSIZE as usize);
                assert!(fh.is_empty() || inside.contains(&fh.as_ptr()));
            }
            Some(Ok(CbOp::NotifyLock { fh, owner, .. })) => {
                assert!(fh.len() <= proto::nfs4::NFS4_FHSIZE as usize);
                assert!(owner.len() <= proto::nfs4::NFS4_OPAQUE_LIMIT as usize);
            }
            _ => {}
        }
        let mut out = [0u8; 256];
        let opnum = op.map(|o| match o {
            Ok(CbOp::Recall { .. }) => proto::nfs4::cb::OP_CB_RECALL,
            Ok(CbOp::NotifyLock { .. }) => proto::nfs4::cb::OP_CB_NOTIFY_LOCK,
            Err(n) => n,
        });
        assert!(encode_cb_compound_reply(xid, &seq, opnum, 0, &mut out).is_ok());
        if !matches!(op, Some(Err(_))) {
            for cut in 0..buf.len() {
                assert!(decode_cb_call(&buf[..cut]).is_err(), "prefix {cut} decoded");
            }
        }
    }
}

// ---------------------------------------------------------- record marking

/// What a stream of record-marked bytes holds, computed the obvious way over the
/// whole buffer: the complete records, and whether the stream then failed.
fn records_reference(stream: &[u8], max: usize) -> (Vec<Vec<u8>>, bool) {
    let mut records = Vec::new();
    let mut cur = Vec::new();
    let mut pos = 0;
    loop {
        let Some(mark) = stream.get(pos..pos + 4) else {
            return (records, false);
        };
        pos += 4;
        let word = u32::from_be_bytes([mark[0], mark[1], mark[2], mark[3]]);
        let len = (word & rpc::RM_MAX_FRAGMENT_BYTES) as usize;
        if cur.len() + len > max {
            return (records, true);
        }
        let take = len.min(stream.len() - pos);
        cur.extend_from_slice(&stream[pos..pos + take]);
        pos += take;
        if take < len {
            return (records, false);
        }
        if word & rpc::RM_LAST_FRAGMENT != 0 {
            records.push(std::mem::take(&mut cur));
        }
    }
}

/// The TCP record reassembler (RFC 5531 section 11), fed the stream in pieces
/// whose sizes come from the input, must find exactly the records the reference
/// finds over the whole stream, and fail exactly when it does.
pub fn check_record_marking(data: &[u8]) {
    let Some((&[max_sel, cut_sel], stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let max = 1 + usize::from(max_sel) * 4;
    let (want, want_err) = records_reference(stream, max);
    let mut ra = rpc::RecordReassembler::new(max);
    let mut record = vec![0u8; max];
    let mut got = Vec::new();
    let mut err = false;
    let mut pos = 0;
    let mut step = 0usize;
    'outer: while pos < stream.len() {
        // piece sizes 1..=16, varied by the selector
        let piece = 1 + ((usize::from(cut_sel) + step * 7) % 16);
        step += 1;
        let end = (pos + piece).min(stream.len());
        let mut input = &stream[pos..end];
        while !input.is_empty() {
            match ra.feed(input, &mut record) {
                Ok(p) => {
                    assert!(p.consumed <= input.len());
                    if let Some(n) = p.record_len {
                        assert!(n <= max);
                        got.push(record[..n].to_vec());
                    } else {
                        assert_eq!(p.consumed, input.len(), "stopped early without a record");
                    }
                    input = &input[p.consumed..];
                }
                Err(e) => {
                    assert!(matches!(e, rpc::RecordError::TooLarge { .. }), "{e}");
                    // Failure is sticky.
                    assert!(ra.feed(&[0, 0, 0, 0], &mut record).is_err());
                    err = true;
                    break 'outer;
                }
            }
        }
        pos = end;
    }
    assert_eq!(got, want);
    assert_eq!(err, want_err);
}

// --------------------------------------------------------------- dump input

/// `rpcrdma-dump`'s input paths. The first byte picks the mode:
/// 0 raw header bytes, 1 hex text, 2 header JSON (`--encode`), 3 private data
/// bytes (`--private-data`), 4 private data JSON (`--encode --private-data`).
pub fn check_dump_input(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 5 {
        0 => check_dump_bytes(rest),
        1 => {
            if let Ok(bytes) = dump::parse_hex(rest) {
                assert_eq!(dump::parse_hex(dump::to_hex(&bytes).as_bytes()).unwrap(), bytes);
                check_dump_bytes(&bytes);
            }
        }
        2 => {
            let Ok(j) = dump::parse_header_json(rest) else {
                return;
            };
            let Ok(bytes) = dump::encode_header(&j) else {
                return;
            };
            // Whatever it encoded, if it decodes, dumps and re-encodes exactly.
            if let Ok(j2) = dump::decode_header(&bytes) {
                assert_eq!(dump::encode_header(&j2).expect("own JSON encodes"), bytes);
                assert_eq!(
                    (j2.xid, j2.credits, &j2.header_type),
                    (j.xid, j.credits, &j.header_type)
                );
            }
        }
        3 => {
            let j = dump::decode_private_data(rest);
            let text = dump::render(&j, mode & 0x80 != 0).unwrap();
            assert_eq!(dump::parse_private_data_json(text.as_bytes()).unwrap(), j);
            let enc = dump::encode_private_data(&j).expect("own private data JSON encodes");
            if j.present {
                let j2 = dump::decode_private_data(&enc);
                assert_eq!(j2, dump::PrivateDataJson { offset: Some(0), ..j });
            } else {
                assert!(enc.is_empty());
            }
        }
        _ => {
            let Ok(j) = dump::parse_private_data_json(rest) else {
                return;
            };
            let Ok(enc) = dump::encode_private_data(&j) else {
                return;
            };
            if j.present {
                let j2 = dump::decode_private_data(&enc);
                assert_eq!(
                    (
                        j2.present,
                        j2.version,
                        j2.remote_invalidation,
                        j2.send_size,
                        j2.receive_size
                    ),
                    (true, j.version, j.remote_invalidation, j.send_size, j.receive_size)
                );
            }
        }
    }
}

/// Raw bytes through decode → JSON text → parse → encode.
fn check_dump_bytes(buf: &[u8]) {
    match dump::decode_header(buf) {
        Ok(j) => {
            for compact in [false, true] {
                let text = dump::render(&j, compact).unwrap();
                assert_eq!(dump::parse_header_json(text.as_bytes()).unwrap(), j);
            }
            let enc = dump::encode_header(&j).expect("own JSON encodes");
            assert_eq!(enc.len(), buf.len());
            if j.properties.is_some() {
                assert_eq!(dump::decode_header(&enc).unwrap(), j);
            } else {
                assert_eq!(enc, buf);
            }
        }
        Err(e) => {
            let text = e.to_string();
            assert!(!text.contains('\n') && text.contains(e.field) && text.contains("offset"));
        }
    }
}

// -------------------------------------------------------------------- plan

/// Bytes of parameters in front of the header in a `plan` input.
pub const PLAN_PARAM_BYTES: usize = 8;

/// The reply a `plan` input describes: its length, DDP items, the reply inline
/// threshold and the responder's read limit.
#[derive(Clone, Debug)]
pub struct PlanParams {
    pub reply_len: usize,
    pub items: Vec<DdpItem>,
    pub reply_inline_max: u32,
    pub read_limits: ReadLimits,
}

/// Parse the 8 parameter bytes:
/// `p[0]` bit 0: read limit 1 MiB (else 8 KiB); bits 1-2: reply inline threshold
/// 1024/4096/256/65536; bit 3: reply length taken raw (may leave items outside
/// the reply). `p[1..3]`: extra reply bytes (BE u16). `p[3] % 3`: item count.
/// Item 0 at `8 + 4 * p[4]`, `7 * p[5]` bytes; item 1 at `4 * p[6]` past item 0's
/// padded end, `7 * p[7]` bytes. Offsets start at 8 so the reply's XID and
/// message type stay inline.
pub fn plan_params(p: &[u8; PLAN_PARAM_BYTES]) -> PlanParams {
    let mut items = Vec::new();
    let n = p[3] % 3;
    let mut end = 8u32;
    if n >= 1 {
        let it = DdpItem {
            offset: 8 + 4 * u32::from(p[4]),
            len: 7 * u32::from(p[5]),
        };
        end = it.offset + it.len.next_multiple_of(4);
        items.push(it);
    }
    if n >= 2 {
        let it = DdpItem {
            offset: end + 4 * u32::from(p[6]),
            len: 7 * u32::from(p[7]),
        };
        end = it.offset + it.len.next_multiple_of(4);
        items.push(it);
    }
    let extra = usize::from(u16::from_be_bytes([p[1], p[2]]));
    let reply_len = if p[0] & 8 != 0 { extra } else { end as usize + extra };
    PlanParams {
        reply_len,
        items,
        reply_inline_max: [1024, 4096, 256, 65536][usize::from((p[0] >> 1) & 3)],
        read_limits: ReadLimits::new(if p[0] & 1 != 0 { 1 << 20 } else { 8192 }),
    }
}

/// Responder planning over a decoded Call header: [`plan::plan_reads`] must lay
/// every Read chunk at its Position in the reassembled stream and issue reads
/// that fit the data area; [`plan::plan_reply`] must produce a reply header that
/// decodes, echoes the Call's chunks with the planned lengths, and that the
/// requester side ([`plan::reassemble_reply`]) accepts with the same layout.
pub fn check_plan(data: &[u8]) {
    let Some((params, buf)) = data.split_first_chunk::<PLAN_PARAM_BYTES>() else {
        return;
    };
    let pp = plan_params(params);
    let Ok(h) = header::decode(buf, &Limits::DEFAULT) else {
        return;
    };
    match plan::plan_reads(&h, &pp.read_limits) {
        Ok(rp) => check_read_plan(&h, &rp, &pp.read_limits),
        Err(e) => {
            let _ = (e.v1(), e.v2(), e.to_string());
        }
    }
    if let Some(call) = h.chunks() {
        check_reply_plan(&h, call, &pp);
    }
}

fn check_read_plan(h: &Header<'_>, rp: &plan::ReadPlan, limits: &ReadLimits) {
    let c = h.chunks().expect("a read plan comes from a message with chunks");
    let reads = &c.reads;
    assert_eq!(
        rp.read_bytes,
        reads.segments().map(|s| u64::from(s.target.length)).sum::<u64>()
    );
    assert!(rp.read_bytes <= limits.max_total_bytes);
    // The placed area, XDR padding included (RFC 8166 s3.4.5.2), fits the
    // limit, which the responder sets to at most its data buffer's size.
    assert!(
        u64::from(rp.data_area_len) <= limits.max_total_bytes,
        "data area {} over the limit {}",
        rp.data_area_len,
        limits.max_total_bytes
    );
    assert_eq!(rp.chunk_count(), reads.chunk_count());
    let nomsg = matches!(h.body, Body::NoMsg { .. });
    assert_eq!(rp.kind == plan::CallKind::Long, nomsg);
    assert_eq!(
        rp.inline_len as usize,
        h.payload().map_or(0, <[u8]>::len),
        "inline length is the payload length"
    );
    // Walk the pieces: inline ranges are consecutive and cover the payload; chunk
    // k sits at its Position in the stream and has its data plus padding.
    let chunks: Vec<_> = reads.chunks().collect();
    let mut stream = 0u64;
    let mut inline_next = 0u64;
    let mut next_chunk = 0u32;
    for piece in rp.pieces() {
        match *piece {
            Piece::Inline { start, len } => {
                assert_eq!(u64::from(start), inline_next, "inline ranges not consecutive");
                assert!(len > 0);
                inline_next += u64::from(len);
            }
            Piece::Chunk { index, len, pad } => {
                assert_eq!(index, next_chunk, "chunks out of order");
                let ch = chunks[index as usize];
                assert_eq!(stream, u64::from(ch.position), "chunk {index} not at its position");
                assert_eq!(u64::from(len), ch.total_len());
                assert_eq!(pad, (4 - len % 4) % 4);
                next_chunk += 1;
            }
        }
        stream += piece.stream_len();
    }
    assert_eq!(next_chunk as usize, chunks.len());
    assert_eq!(inline_next, u64::from(rp.inline_len));
    assert_eq!(stream, u64::from(rp.stream_len));
    // Reads land inside the data area, each chunk's at its 4-aligned offset.
    let mut per_chunk = vec![0u64; chunks.len()];
    let mut nops = 0;
    for op in rp.read_ops(reads) {
        let base = rp.chunk_offset(op.chunk).expect("op for a planned chunk");
        assert_eq!(base % 4, 0);
        assert_eq!(
            u64::from(op.dest_offset),
            u64::from(base) + per_chunk[op.chunk as usize]
        );
        per_chunk[op.chunk as usize] += u64::from(op.segment.length);
        assert!(u64::from(op.dest_offset) + u64::from(op.segment.length) <= u64::from(rp.data_area_len));
        assert!(op.segment.length > 0);
        nops += 1;
    }
    assert_eq!(nops, reads.segments().filter(|s| s.target.length > 0).count());
    for (k, ch) in chunks.iter().enumerate() {
        assert_eq!(per_chunk[k], ch.total_len());
    }
}

fn check_reply_plan(h: &Header<'_>, call: &ChunkLists<'_>, pp: &PlanParams) {
    let rp = match plan::plan_reply(pp.reply_len, &pp.items, call, h.vers, pp.reply_inline_max) {
        Ok(rp) => rp,
        Err(e) => {
            let _ = (e.v1(), e.v2(), e.to_string());
            return;
        }
    };
    let reduced: Vec<_> = rp.reduced_ranges().collect();
    let mut last_end = 0u64;
    for r in &reduced {
        assert!(u64::from(r.start) >= last_end && r.len > 0);
        last_end = r.end();
        assert!(last_end <= pp.reply_len as u64);
    }
    assert_eq!(
        reduced.iter().map(|r| u64::from(r.len)).sum::<u64>(),
        u64::from(rp.reduced_len)
    );
    let reduced_items = rp.reduced_items();
    assert!(reduced_items.len() <= call.writes.len());
    if rp.kind == plan::ReplyKind::Short {
        assert!(rp.send_len() <= u64::from(pp.reply_inline_max));
    }
    // The RDMA Writes: each reduced item fills its chunk, the reduced reply fills
    // the Reply chunk for a Long reply.
    let mut written = vec![0u64; call.writes.len()];
    let mut to_reply = 0u64;
    for op in rp.write_ops(call) {
        assert_eq!(op.target.length, op.src.len);
        assert!(op.src.end() <= pp.reply_len as u64);
        match op.chunk {
            plan::WriteTarget::Write(k) => written[k as usize] += u64::from(op.src.len),
            plan::WriteTarget::Reply => to_reply += u64::from(op.src.len),
        }
    }
    for (k, w) in written.iter().enumerate() {
        assert_eq!(
            *w,
            reduced_items.get(k).map_or(0, |it| u64::from(it.len)),
            "write chunk {k}"
        );
    }
    match rp.kind {
        plan::ReplyKind::Long => assert_eq!(to_reply, u64::from(rp.reduced_len)),
        plan::ReplyKind::Short => assert_eq!(to_reply, 0),
    }
    // The reply header, followed for a Short reply by the reduced reply of a
    // synthetic RPC reply (XID, REPLY, then a byte pattern).
    let mut send = vec![0u8; rp.header_len as usize];
    let n = plan::encode_reply_header(
        plan::ReplyHeaderOut::Planned { plan: &rp, call },
        h.xid,
        5,
        0,
        &mut send,
    )
    .expect("planned header encodes");
    assert_eq!(n, rp.header_len as usize);
    if rp.kind == plan::ReplyKind::Short {
        let mut reply: Vec<u8> = (0..pp.reply_len).map(|i| i as u8).collect();
        if reply.len() < 8 {
            return; // too short to carry an RPC reply header
        }
        reply[..4].copy_from_slice(&h.xid.to_be_bytes());
        reply[4..8].copy_from_slice(&rpc::REPLY.to_be_bytes());
        for r in &reduced {
            send.extend_from_slice(&reply[r.range()]);
        }
    }
    assert_eq!(send.len() as u64, rp.send_len());
    let got = header::decode(&send, &Limits::DEFAULT).expect("planned reply header decodes");
    assert_eq!((got.xid, got.vers, got.credits), (h.xid, h.vers, 5));
    let layout = plan::reassemble_reply(&got, call).expect("the requester accepts the planned reply");
    assert_eq!(layout.kind, rp.kind);
    assert_eq!(layout.reduced_len, rp.reduced_len);
    for (k, w) in written.iter().enumerate() {
        assert_eq!(u64::from(layout.write_lens[k]), *w);
    }
}


/// NFSv3 decoders on peer input: the binding's item locators (RFC 8267) on
/// arbitrary Calls and Replies, and each argument/result decoder on arbitrary
/// bytes. Whatever they accept must lie inside the message.
pub fn check_nfs3(data: &[u8]) {
    use proto::nfs3::{Read3Args, Read3Res, Readlink3Res, Symlink3Args, Write3Args};
    use proto::ulb::{DdpItem, Nfs3Binding, UpperLayerBinding};
    use proto::xdr::Reader;
    let b = Nfs3Binding::default();
    let mut items = [DdpItem::default(); 4];
    let inside = |it: &DdpItem| it.offset as usize + it.len as usize <= data.len();
    if let Ok(n) = b.call_items(data, &mut items) {
        assert!(n <= items.len());
        assert!(items[..n].iter().all(inside), "call item outside the message");
    }
    for p in [6u32, 5] {
        if let Ok(n) = b.reply_items(3, p, data, &mut items) {
            assert!(items[..n].iter().all(inside), "reply item outside the message");
        }
    }
    let at = |d: &proto::nfs3::DataAt<'_>| d.offset + d.data.len() <= data.len();
    let _ = Read3Args::decode(&mut Reader::new(data));
    if let Ok(w) = Write3Args::decode(&mut Reader::new(data), 1 << 20) {
        assert!(at(&w.data) && w.data.data.len() <= 1 << 20);
    }
    if let Ok(s) = Symlink3Args::decode(&mut Reader::new(data), 4096) {
        assert!(at(&s.symlink_data) && s.symlink_data.data.len() <= 4096);
    }
    if let Ok(r) = Read3Res::decode(&mut Reader::new(data), 1 << 20) {
        if let Some(ok) = r.ok {
            assert!(at(&ok.data));
        }
    }
    if let Ok(r) = Readlink3Res::decode(&mut Reader::new(data), 4096) {
        if let Some(d) = r.data {
            assert!(at(&d));
        }
    }
}

/// The shm fabric's connection-setup messages, which come from another process:
/// decoding never panics, and what decodes re-encodes to a message that decodes
/// to the same value.
pub fn check_shm_wire(data: &[u8]) {
    use dataplane::shm::wire;
    if let Ok(m) = wire::decode(data) {
        let mut buf = [0u8; wire::MAX_MSG_LEN];
        let n = wire::encode(&m, &mut buf);
        assert_eq!(
            wire::decode(&buf[..n]).ok(),
            Some(m),
            "shm wire message does not round-trip"
        );
    }
    check_shm_ring_file(data);
}

/// The parts of an shm ring file (format 2) another process wrote and this
/// one reads: the layout its header words give (`shm::file_layout`: every
/// part in order, inside the total, or refused) and its window table
/// (`shm::window::lookup` of any key over any table bytes: never panics; an
/// open window is what the table's entry says).
fn check_shm_ring_file(data: &[u8]) {
    use dataplane::shm::{file_layout, mapping::SharedFile, window};
    use dataplane::Access;
    let word = |k: usize| data.get(4 * k..4 * k + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let (Some(cap), Some(windows), Some(slot), Some(key), Some(acc)) = (word(0), word(1), word(2), word(3), word(4))
    else {
        return;
    };
    if let Some(l) = file_layout(cap, windows, slot) {
        assert!(l.desc <= l.deliv && l.deliv <= l.windows && l.windows <= l.area && l.area <= l.total);
        assert!(l.windows + windows as usize * window::WINDOW_BYTES <= l.area, "window table overlaps the slots");
        assert_eq!(l.total - l.area, cap as usize * slot as usize, "receive slots");
    }
    const TABLE: usize = 64 << 10;
    thread_local! {
        static FILE: SharedFile = SharedFile::create("fuzz", TABLE).expect("memfd");
    }
    FILE.with(|f| {
        let table = &data[20..];
        let n = table.len().min(TABLE);
        // SAFETY: the file is ours, mapped for TABLE bytes; nothing else
        // reads or writes it now.
        unsafe { std::ptr::copy_nonoverlapping(table.as_ptr(), f.as_ptr(), n) };
        let count = (TABLE / window::WINDOW_BYTES) as u32;
        let access = match acc % 3 {
            0 => Access::Read,
            1 => Access::Write,
            _ => Access::ReadWrite,
        };
        if let Some(w) = window::lookup(f, 0, count, key, access) {
            let at = (key >> 16) as usize * window::WINDOW_BYTES;
            // SAFETY: `lookup` accepted the slot, so the entry is inside.
            let entry = unsafe { std::slice::from_raw_parts(f.as_ptr().add(at), window::WINDOW_BYTES) };
            let w64 = |k: usize| u64::from_le_bytes(entry[8 * k..8 * k + 8].try_into().unwrap());
            assert_eq!(w64(0) >> 32, u64::from(key), "the entry carries the key");
            assert_eq!((w.region as u64, w.start, w.len), (w64(1), w64(2), w64(3)));
        }
        // Leave the table closed for the next input.
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(f.as_ptr(), 0, n) };
    });
}

/// The gateway's rpcbind responder (`server::rpcbind::wire::answer`) on
/// any datagram or TCP record: never panics; an answer is whole XDR words,
/// carries the Call's XID and decodes as an RPC reply; a Call whose header
/// decodes is always answered.
pub fn check_rpcbind(data: &[u8]) {
    use rpcrdma_apps::server::rpcbind::wire::{answer, Mapping, Netid};
    use std::net::IpAddr;
    let v4 = IpAddr::from([10, 0, 2, 15]);
    let any = IpAddr::from([0, 0, 0, 0]);
    let maps = [
        Mapping { prog: 100_003, vers: 3, netid: Netid::Tcp, ip: v4, port: 2049 },
        Mapping { prog: 100_003, vers: 3, netid: Netid::Rdma, ip: v4, port: 20049 },
        Mapping { prog: 100_005, vers: 3, netid: Netid::Tcp, ip: any, port: 20048 },
        Mapping { prog: 100_005, vers: 1, netid: Netid::Tcp6, ip: "::".parse().unwrap(), port: 20048 },
    ];
    let mut out = Vec::new();
    let answered = answer(&maps, "192.0.2.1".parse().unwrap(), data, &mut out);
    let header_ok = proto::rpc::decode_call(data).is_ok();
    assert_eq!(answered, header_ok, "answered exactly the Calls whose header decodes");
    if answered {
        assert_eq!(out.len() % 4, 0, "whole XDR words");
        let (h, _) = proto::rpc::decode_reply(&out).expect("the answer decodes as a reply");
        assert_eq!(h.xid.to_be_bytes(), data[..4], "the Call's XID");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Run `check` over every committed seed of `target` (and require some).
    fn over_seeds(target: &str, check: fn(&[u8])) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join(target);
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            check(&data);
            // and every truncation of it
            for cut in 0..data.len() {
                check(&data[..cut]);
            }
            n += 1;
        }
        assert!(n > 0, "no seeds for {target}");
    }

    #[test]
    fn header_seeds() {
        over_seeds("header_v1", |d| check_header_version(d, 1));
        over_seeds("header_v2", |d| check_header_version(d, 2));
        // the same with small limits
        over_seeds("header_v1", |d| {
            let mut v = d.to_vec();
            if let Some(b) = v.first_mut() {
                *b = 0x80;
            }
            check_header_version(&v, 1)
        });
    }

    #[test]
    fn other_seeds() {
        over_seeds("private_data", check_private_data);
        over_seeds("rpc_call", check_rpc_call);
        over_seeds("rpc_reply", check_rpc_reply);
        over_seeds("nfs4_cb_reply", check_nfs4_cb_reply);
        over_seeds("nfs4_cb_call", check_nfs4_cb_call);
        over_seeds("record_marking", check_record_marking);
        over_seeds("dump_input", check_dump_input);
        over_seeds("plan", check_plan);
        over_seeds("nfs3", check_nfs3);
        over_seeds("shm_wire", check_shm_wire);
    }

    /// Seeds of the nfs3 and shm_wire targets, built from the encoders. With
    /// RPCRDMA_WRITE_SEEDS=1 they are (re)written; otherwise the committed files
    /// must match.
    #[test]
    fn generated_seeds_are_current() {
        use dataplane::shm::wire::{self, Hello, Msg, RegionInfo};
        use dataplane::PrivateData;
        use proto::rpc::{encode_call_header, encode_reply_header, CallHeader, OpaqueAuth, ReplyHeader};
        use proto::xdr::Writer;
        let call = |proc_: u32, body: &dyn Fn(&mut Writer)| {
            let mut b = vec![0u8; 512];
            let mut w = Writer::new(&mut b);
            encode_call_header(
                &mut w,
                &CallHeader::new(7, 100_003, 3, proc_, OpaqueAuth::NONE, OpaqueAuth::NONE),
            )
            .unwrap();
            body(&mut w);
            let n = w.len();
            b.truncate(n);
            b
        };
        let reply = |body: &dyn Fn(&mut Writer)| {
            let mut b = vec![0u8; 512];
            let mut w = Writer::new(&mut b);
            encode_reply_header(&mut w, &ReplyHeader::success(7, OpaqueAuth::NONE)).unwrap();
            body(&mut w);
            let n = w.len();
            b.truncate(n);
            b
        };
        let fh = [0xabu8; 8];
        let mut seeds: Vec<(&str, &str, Vec<u8>)> = vec![
            (
                "nfs3",
                "write-call",
                call(7, &|w| {
                    w.put_opaque_var(&fh).unwrap();
                    w.put_u64(4096).unwrap();
                    w.put_u32(5).unwrap();
                    w.put_u32(2).unwrap();
                    w.put_opaque_var(b"hello").unwrap();
                }),
            ),
            (
                "nfs3",
                "symlink-call",
                call(10, &|w| {
                    w.put_opaque_var(&fh).unwrap();
                    w.put_opaque_var(b"link").unwrap();
                    for _ in 0..6 {
                        w.put_u32(0).unwrap();
                    }
                    w.put_opaque_var(b"target/path").unwrap();
                }),
            ),
            (
                "nfs3",
                "read-reply",
                reply(&|w| {
                    w.put_u32(0).unwrap();
                    w.put_u32(0).unwrap();
                    w.put_u32(6).unwrap();
                    w.put_u32(1).unwrap();
                    w.put_opaque_var(b"abcdef").unwrap();
                }),
            ),
            (
                "nfs3",
                "readlink-reply",
                reply(&|w| {
                    w.put_u32(0).unwrap();
                    w.put_u32(0).unwrap();
                    w.put_opaque_var(b"/a/b").unwrap();
                }),
            ),
        ];
        let hello = Hello {
            private_data: PrivateData::new(&[0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3]),
            ring_cap: 256,
            file_len: 1 << 20,
            regions: vec![RegionInfo {
                id: 1,
                rkey: 0x10001,
                len: 2 << 20,
            }],
        };
        for (name, m) in [
            ("req", Msg::Req(hello.clone())),
            ("accept", Msg::Accept(hello)),
            ("reject", Msg::Reject(PrivateData::new(b"busy"))),
            ("rtu", Msg::Rtu),
        ] {
            let mut buf = [0u8; wire::MAX_MSG_LEN];
            let n = wire::encode(&m, &mut buf);
            seeds.push(("shm_wire", name, buf[..n].to_vec()));
        }
        for (target, name, bytes) in seeds {
            crate::seeds::check_or_write_seed(&crate::seeds::seed_dir(target).join(name), &bytes);
        }
    }

    /// The plan seeds reach the interesting outcomes, so the fuzzer starts from
    /// inputs past the early returns.
    #[test]
    fn plan_seeds_reach_read_and_reply_plans() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/plan");
        let (mut reads_ok, mut short, mut long, mut reduced) = (0, 0, 0, 0);
        for e in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            let (params, buf) = data.split_first_chunk::<PLAN_PARAM_BYTES>().unwrap();
            let pp = plan_params(params);
            let h = header::decode(buf, &Limits::DEFAULT).unwrap();
            reads_ok += plan::plan_reads(&h, &pp.read_limits).is_ok() as u32;
            if let Some(call) = h.chunks() {
                if let Ok(rp) = plan::plan_reply(pp.reply_len, &pp.items, call, h.vers, pp.reply_inline_max) {
                    match rp.kind {
                        plan::ReplyKind::Short => short += 1,
                        plan::ReplyKind::Long => long += 1,
                    }
                    reduced += !rp.reduced_items().is_empty() as u32;
                }
            }
        }
        assert!(reads_ok >= 4, "{reads_ok}");
        assert!(short >= 2 && long >= 1 && reduced >= 1, "{short} {long} {reduced}");
    }

    #[test]
    fn record_reference_agrees_on_a_hand_written_stream() {
        // fragment "ab" (not last), fragment "cd" (last), then "e" (last)
        let s = [0, 0, 0, 2, b'a', b'b', 0x80, 0, 0, 2, b'c', b'd', 0x80, 0, 0, 1, b'e'];
        assert_eq!(
            records_reference(&s, 100),
            (vec![b"abcd".to_vec(), b"e".to_vec()], false)
        );
        assert_eq!(records_reference(&s, 3), (vec![], true));
        let mut v = vec![0, 0];
        v.extend_from_slice(&s);
        check_record_marking(&v);
    }
}
