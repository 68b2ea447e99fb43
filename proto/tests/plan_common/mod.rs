//! Shared harness for the chunk-planning tests: a requester and a responder
//! exchanging one Call and one Reply, with RDMA Reads and Writes simulated as
//! byte copies between the requester's "memory" and the responder's buffers.
#![allow(dead_code)]

use proto::header::{decode, Limits, Segment};
use proto::plan::*;
use proto::ulb::DdpItem;

/// Remote addresses start here, so offsets exercise all 64 bits.
pub const BASE: u64 = 0x7f00_0000_1000;
pub const HANDLE: u32 = 0x5eed;
pub const XID: u32 = 0xabcd_0123;

/// The requester's registered memory: one region, one steering tag.
#[derive(Default)]
pub struct Mem {
    pub bytes: Vec<u8>,
}

impl Mem {
    /// Place `data` (4-byte aligned) and return its remote address.
    pub fn place(&mut self, data: &[u8]) -> u64 {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0xa5);
        }
        let at = BASE + self.bytes.len() as u64;
        self.bytes.extend_from_slice(data);
        // a guard gap between regions
        self.bytes.extend_from_slice(&[0xa5; 16]);
        at
    }
    pub fn slice(&self, addr: u64, len: u32) -> &[u8] {
        let s = (addr - BASE) as usize;
        &self.bytes[s..s + len as usize]
    }
    pub fn slice_mut(&mut self, addr: u64, len: u32) -> &mut [u8] {
        let s = (addr - BASE) as usize;
        &mut self.bytes[s..s + len as usize]
    }
}

/// Split `[addr, addr+len)` into `n` segments (at least one) at cut points
/// derived from `seed`; some segments may be empty when `len < n`.
pub fn split(addr: u64, len: u32, n: u32, seed: u64) -> Vec<Segment> {
    let n = n.max(1);
    let mut cuts: Vec<u32> = (1..n)
        .map(|i| {
            let x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(i * 7) ^ i as u64;
            if len == 0 {
                0
            } else {
                (x % (len as u64 + 1)) as u32
            }
        })
        .collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut prev = 0;
    for c in cuts.into_iter().chain([len]) {
        out.push(Segment {
            handle: HANDLE,
            length: c - prev,
            offset: addr + prev as u64,
        });
        prev = c;
    }
    out
}

/// An XDR-looking message: XID, msg_type, then `len - 8` bytes of filler, with
/// the DDP items filled with distinct data and their padding zeroed.
pub fn message(len: usize, msg_type: u32, items: &[DdpItem], salt: u8) -> Vec<u8> {
    assert!(len >= 8 && len.is_multiple_of(4));
    let mut m: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt) | 1)
        .collect();
    m[..4].copy_from_slice(&XID.to_be_bytes());
    m[4..8].copy_from_slice(&msg_type.to_be_bytes());
    for it in items {
        let o = it.offset as usize;
        // the XDR length word before the item
        m[o - 4..o].copy_from_slice(&it.len.to_be_bytes());
        for (j, b) in m[o..o + it.len as usize].iter_mut().enumerate() {
            *b = (j as u8) ^ salt ^ 0x5a;
        }
        let padded = o + ((it.len as usize + 3) & !3);
        m[o + it.len as usize..padded].fill(0);
    }
    m
}

/// Lay out items (given lengths) at aligned offsets with `gaps[i]` words of other
/// XDR before each; returns (items, message length) with `tail` words after.
pub fn layout(lens: &[u32], gaps: &[u32], tail: u32) -> (Vec<DdpItem>, usize) {
    let mut off = 8usize; // xid, msg_type
    let mut items = Vec::new();
    for (i, &l) in lens.iter().enumerate() {
        off += 4 * (gaps.get(i).copied().unwrap_or(1) as usize) + 4; // other words + length word
        items.push(DdpItem {
            offset: off as u32,
            len: l,
        });
        off += (l as usize + 3) & !3;
    }
    (items, off + 4 * tail as usize)
}

/// One exchange to run.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub params: CallParams,
    pub call: Vec<u8>,
    pub call_items: Vec<DdpItem>,
    pub reply: Vec<u8>,
    pub reply_items: Vec<DdpItem>,
    pub needs: ReplyNeeds,
    /// Segments per chunk actually used (≤ params.max_segments_per_chunk).
    pub segs: u32,
    pub seed: u64,
    pub max_read_bytes: u64,
}

/// What happened, for assertions.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub call_plan: CallPlan,
    pub read_plan: ReadPlan,
    pub reply_plan: ReplyPlan,
    pub layout: ReplyLayout,
    pub call_send_len: usize,
    pub reply_send_len: usize,
    pub read_ops: Vec<ReadOp>,
    pub write_ops: Vec<WriteOp>,
}

/// Where a planning step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Call,
    Reads,
    Reply,
}

/// Run the whole exchange; asserts the service sees the original Call and the
/// caller reassembles the original Reply, byte for byte.
pub fn run(x: &Exchange) -> Result<Outcome, (Stage, PlanError)> {
    let p = &x.params;
    // ---------------- requester: plan and encode the Call
    let cp = plan_call(x.call.len(), &x.call_items, &x.needs, p).map_err(|e| (Stage::Call, e))?;
    let mut mem = Mem::default();
    let call_addr = mem.place(&x.call);
    let read_segs: Vec<Vec<Segment>> = cp
        .reads
        .iter()
        .enumerate()
        .map(|(i, r)| split(call_addr + r.range.start as u64, r.range.len, x.segs, x.seed ^ i as u64))
        .collect();
    let write_bufs: Vec<u64> = cp
        .write_chunks
        .iter()
        .map(|&n| mem.place(&vec![0xee; n as usize]))
        .collect();
    let write_segs: Vec<Vec<Segment>> = cp
        .write_chunks
        .iter()
        .zip(&write_bufs)
        .enumerate()
        .map(|(i, (&n, &a))| split(a, n, x.segs, x.seed ^ (100 + i as u64)))
        .collect();
    let reply_buf = cp.reply_chunk.map(|n| (mem.place(&vec![0xdd; n as usize]), n));
    let reply_segs = reply_buf.map(|(a, n)| split(a, n, x.segs, x.seed ^ 999));
    let rs: Vec<&[Segment]> = read_segs.iter().map(|v| &v[..]).collect();
    let ws: Vec<&[Segment]> = write_segs.iter().map(|v| &v[..]).collect();
    let mut call_send = vec![0u8; 64 * 1024];
    let inv = if p.vers == 2 { 0x1234 } else { 0 };
    let hl = encode_call_header(&cp, XID, 32, inv, &rs, &ws, reply_segs.as_deref(), &mut call_send)
        .expect("encode_call_header");
    call_send.truncate(hl);
    for r in cp.inline.iter() {
        call_send.extend_from_slice(&x.call[r.range()]);
    }
    assert_eq!(cp.inline.iter().map(|r| r.len).sum::<u32>(), cp.inline_len);
    assert!(
        call_send.len() <= p.call_inline_max as usize,
        "call Send exceeds threshold"
    );

    // ---------------- responder: decode, plan the Reads, pull, reassemble
    let h = decode(&call_send, &Limits::DEFAULT).expect("call header decodes");
    assert_eq!(h.inv_handle(), inv);
    let call_chunks = *h.chunks().unwrap();
    let limits = ReadLimits::new(x.max_read_bytes);
    let rp = plan_reads(&h, &limits).map_err(|e| (Stage::Reads, e))?;
    assert_eq!(rp.kind, cp.kind);
    let mut area = vec![0u8; rp.data_area_len as usize];
    let read_ops: Vec<ReadOp> = rp.read_ops(&call_chunks.reads).collect();
    for op in &read_ops {
        assert_eq!(op.segment.handle, HANDLE);
        let src = mem.slice(op.segment.offset, op.segment.length).to_vec();
        let d = op.dest_offset as usize;
        area[d..d + src.len()].copy_from_slice(&src);
    }
    assert_eq!(
        read_ops.iter().map(|o| o.segment.length as u64).sum::<u64>(),
        rp.read_bytes
    );
    let payload = h.payload().unwrap_or(&[]);
    let mut seen = Vec::new();
    for piece in rp.pieces() {
        match *piece {
            Piece::Inline { start, len } => seen.extend_from_slice(&payload[start as usize..(start + len) as usize]),
            Piece::Chunk { index, len, pad } => {
                let o = rp.chunk_offset(index).unwrap() as usize;
                seen.extend_from_slice(&area[o..o + len as usize]);
                seen.extend(std::iter::repeat_n(0, pad as usize));
            }
        }
    }
    assert_eq!(seen.len(), rp.stream_len as usize);
    assert!(seen == x.call, "reassembled Call differs from the original");

    // ---------------- responder: plan the Reply, write, send
    let rpl = plan_reply(x.reply.len(), &x.reply_items, &call_chunks, p.vers, p.reply_inline_max)
        .map_err(|e| (Stage::Reply, e))?;
    let write_ops: Vec<WriteOp> = rpl.write_ops(&call_chunks).collect();
    for op in &write_ops {
        assert_eq!(op.target.length, op.src.len);
        assert_ne!(op.src.len, 0);
        // the target must lie inside the provisioned buffer of that chunk
        let (buf, cap) = match op.chunk {
            WriteTarget::Write(k) => (write_bufs[k as usize], cp.write_chunks[k as usize]),
            WriteTarget::Reply => reply_buf.unwrap(),
        };
        assert!(op.target.offset >= buf && op.target.offset + op.target.length as u64 <= buf + cap as u64);
        let data = &x.reply[op.src.range()];
        mem.slice_mut(op.target.offset, op.target.length).copy_from_slice(data);
    }
    let mut reply_send = vec![0u8; 64 * 1024];
    let rhl = encode_reply_header(
        ReplyHeaderOut::Planned {
            plan: &rpl,
            call: &call_chunks,
        },
        XID,
        17,
        0,
        &mut reply_send,
    )
    .expect("encode_reply_header");
    assert_eq!(rhl, rpl.header_len as usize);
    reply_send.truncate(rhl);
    if rpl.kind == ReplyKind::Short {
        for r in rpl.reduced_ranges() {
            reply_send.extend_from_slice(&x.reply[r.range()]);
        }
    }
    assert_eq!(reply_send.len() as u64, rpl.send_len());
    assert!(
        reply_send.len() <= p.reply_inline_max as usize,
        "reply Send exceeds threshold"
    );

    // ---------------- requester: decode the reply, reassemble
    // The requester keeps its Send buffer until the reply: decode its own chunks.
    let own = decode(&call_send, &Limits::DEFAULT).unwrap();
    let rh = decode(&reply_send, &Limits::DEFAULT).expect("reply header decodes");
    if p.vers == 2 {
        assert!(rh.is_response());
        assert_eq!(rh.inv_handle(), 0);
    }
    let lay = reassemble_reply(&rh, own.chunks().unwrap()).expect("reassemble_reply");
    assert_eq!(lay.kind, rpl.kind);
    let reduced: Vec<u8> = match lay.kind {
        ReplyKind::Short => rh.payload().unwrap().to_vec(),
        ReplyKind::Long => mem.slice(reply_buf.unwrap().0, lay.reduced_len).to_vec(),
    };
    assert_eq!(reduced.len(), rpl.reduced_len as usize);
    // positions of the reduced results in the reduced stream
    let nred = rpl.reduced_items().len();
    let mut positions = Vec::new();
    let mut removed = 0u32;
    for it in &x.reply_items[..nred] {
        positions.push(it.offset - removed);
        removed += (it.len + 3) & !3;
    }
    for (k, &n) in lay.write_lens.iter().enumerate() {
        let want = x.reply_items.get(k).filter(|_| k < nred).map_or(0, |it| it.len);
        assert_eq!(n, want, "write chunk {k} returned length (s3.4.6.2)");
    }
    let pieces = lay.pieces(&positions).expect("pieces");
    let mut got = Vec::new();
    for piece in pieces.iter() {
        match *piece {
            Piece::Inline { start, len } => got.extend_from_slice(&reduced[start as usize..(start + len) as usize]),
            Piece::Chunk { index, len, pad } => {
                got.extend_from_slice(mem.slice(write_bufs[index as usize], len));
                got.extend(std::iter::repeat_n(0, pad as usize));
            }
        }
    }
    assert!(got == x.reply, "reassembled Reply differs from the original");
    Ok(Outcome {
        call_plan: cp,
        read_plan: rp,
        reply_plan: rpl,
        layout: lay,
        call_send_len: call_send.len(),
        reply_send_len: reply_send.len(),
        read_ops,
        write_ops,
    })
}
