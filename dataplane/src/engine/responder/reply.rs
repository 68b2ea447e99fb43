//! Replies: the one place a reply is put on the wire (header and inline
//! part, RDMA Writes, Send or Send with Invalidate; RFC 8166 s3.4.6, s3.5,
//! RFC 8797 s4.1, draft -09 s3.3) and counted, and the error and CONNPROP
//! answers (RFC 8166 s4.5; draft -09 s5.3). Owning core only.

use super::*;

impl<'p, F: Fabric, S: Service> Responder<'p, F, S> {
    /// Post the reply in its planned form ([`ReplyForm`]): the transport
    /// header and the inline part into the send buffer, the RDMA Writes
    /// (Write chunks, then a Long reply's Reply chunk; RFC 8166 s3.4.6,
    /// s3.5.3), then the Send or Send with Invalidate ([`send_op`]). Every
    /// form is posted, counted and timed here.
    ///
    /// Called on the request's core only.
    #[inline]
    pub(super) fn step_send(&mut self, i: u32) -> Step {
        self.receives_before_grant();
        let reply_clock = self.reply_clock;
        let p = self.step_parts(i);
        let (r, conns, bufs, fabric, cfg) = (p.r, p.conns, p.bufs, p.fabric, p.cfg);
        let service = p.service;
        let (send_size, stages, stats) = (p.send_size, p.stages, p.stats);
        let Some(c) = conns.get_mut(r.conn).and_then(Option::as_mut) else {
            return Step::Wait;
        };
        let (conn_id, remote_inv) = (c.id, c.remote_inv);
        if c.state == ConnState::Accepting || cfg.send_depth.saturating_sub(c.sq_used) < r.sq_need {
            return self.wait(i, Queue::SendSlots);
        }
        // Credits: the grant goes in this reply (never zero, at most reserved).
        let grant = c.credits.grant();
        let Some(h) = r.hdr.as_ref() else { return Step::Wait };
        let chunks = h.chunks();
        let Some(send_b) = r.send_buf else { return Step::Wait };
        let Some(send_len) = encode_reply(bufs, r, grant, chunks) else {
            return self.control(i, Control::ErrorV1(header::V1Error::Chunk));
        };
        // The RDMA Writes, from pieces of the head and data buffers.
        let wr_id = req_wr_id(i, r.gen);
        let mut posted = 0u32;
        let mut err = false;
        stages.lap(LAP_FIRST_POST, r.t0);
        let mut writer = ReplyWriter {
            fabric,
            bufs,
            send_size,
            r,
            conn_id,
            wr_id,
        };
        match r.form {
            ReplyForm::OneWrite { seg, placed: false } => {
                if let Some(item) = r.shape.items().first() {
                    let target = Segment {
                        length: item.len,
                        ..seg
                    };
                    err = !writer.post(target, item.offset, item.len);
                    posted += u32::from(!err);
                }
            }
            ReplyForm::Planned(ref plan) => {
                for op in chunks.iter().flat_map(|c| plan.write_ops(c)) {
                    if !writer.post(op.target, op.src.start, op.src.len) {
                        err = true;
                        break;
                    }
                    posted += 1;
                }
            }
            _ => {}
        }
        let writes = posted;
        let op = send_op(r.vers, remote_inv && fabric.caps().send_with_invalidate, h);
        if !err {
            let wr = SendWr::new(wr_id, op, send_b.local(send_len as u32), RemoteBuf::default());
            if fabric.post_send(conn_id, &wr).is_ok() {
                posted += 1;
            } else {
                err = true;
            }
        }
        // The reply is on its way: what follows is bookkeeping. The credit
        // comes back with the reply posted; the request (now Sending) and its
        // send-queue slots with the Send's completion.
        let kind = reply_stat_kind(&r.form);
        let conn = r.conn;
        r.wr_out += posted;
        r.state = ReqState::Sending;
        c.sq_used += posted;
        stats.rdma_writes += u64::from(writes);
        if err {
            self.kill_conn(conn, true);
            return Step::Wait;
        }
        r.replied = true;
        stages.lap(LAP_REPLY_POSTED, r.t0);
        if let (Some(origin), true) = (reply_clock, r.arrived_ns != 0) {
            let now = service.reply_clock_now();
            let ns = (now.saturating_duration_since(origin).as_nanos() as u64).saturating_sub(r.arrived_ns);
            service.reply_posted(r.shape.stat_tag, ns);
        }
        super::machine::call_buffers_done(r, bufs);
        c.credits.on_reply(grant);
        stats.sends_with_invalidate += u64::from(matches!(op, SendOp::SendWithInv { .. }));
        stats.replies += 1;
        match kind {
            ReplyStat::Inline => stats.replies_inline += 1,
            ReplyStat::WriteChunks { placed } => {
                stats.writes_placed += u64::from(placed);
                stats.replies_write_chunks += 1;
            }
            ReplyStat::Long { with_writes } => {
                stats.replies_long += 1;
                stats.replies_write_and_long += u64::from(with_writes);
            }
        }
        Step::Wait
    }

    /// Before a reply grants credits, the receives they stand for are
    /// posted: the SRQ is refilled now rather than at the end of the poll,
    /// so the peer is never granted more than the receives waiting for it,
    /// even for the moment between this post and the refill (RFC 8166
    /// s3.3.1: the grant promises receives). A grant posted while the SRQ is
    /// still short (the receive pool was empty) is counted in
    /// `ResponderStats::grants_ahead_of_receives`.
    #[inline]
    pub(super) fn receives_before_grant(&mut self) {
        if self.srq_deficit > 0 {
            self.refill_srq();
            self.stats.grants_ahead_of_receives += u64::from(self.srq_deficit > 0);
        }
    }

    /// Send an error reply or a CONNPROP answer.
    #[inline(never)]
    pub(super) fn step_control(&mut self, i: u32) -> Step {
        self.receives_before_grant();
        let r = {
            let r = self.reqs.get(i).expect("live");
            ControlArgs {
                conn: r.conn,
                control: r.control,
                xid: r.xid,
                counted: r.counted,
            }
        };
        let Some(c) = self.conn(r.conn) else { return Step::Wait };
        let conn_id = c.id;
        if c.state == ConnState::Accepting || c.sq_used >= self.cfg.send_depth {
            return self.wait(i, Queue::SendSlots);
        }
        // Control replies also answer a message that consumed a receive: grant.
        let grant = c.credits.grant();
        let send_b = match self.reqs.get(i).expect("live").send_buf {
            Some(b) => b,
            None => match SlotBuf::take(&mut self.bufs, Class::Send) {
                Some(b) => {
                    self.reqs.get_mut(i).expect("live").send_buf = Some(b);
                    b
                }
                None => return self.wait(i, Queue::ReplyBufs),
            },
        };
        let rbsiz = self.recv_size.to_be_bytes();
        // Our Reverse Request Support (draft -09 s4.2.2): backward Replies
        // are taken inline only, and not at all without a backchannel.
        let brs = match self.cfg.backward_credits {
            0 => header::RDMA2_RVREQSUP_NONE,
            _ => header::RDMA2_RVREQSUP_INLINE,
        }
        .to_be_bytes();
        let props = [
            Property {
                id: RDMA2_PROPID_RBSIZ,
                data: &rbsiz,
            },
            Property {
                id: header::RDMA2_PROPID_BRS,
                data: &brs,
            },
        ];
        let out = send_b.bytes_mut();
        // The answer's version, flags and body (RFC 8166 s4.5; draft s5.3.3,
        // s7.2); an ERR_VERS for a version we do not speak goes in the v1
        // layout under that version's word.
        let (vers, flags, body) = match r.control {
            Control::ErrorV1(e) => (RPCRDMA_VERSION_1, 0, BodyOut::ErrorV1(e)),
            Control::ErrorV2(e) => (RPCRDMA_VERSION_2, RPCRDMA2_F_RESPONSE, BodyOut::ErrorV2(e)),
            Control::ConnProp => (RPCRDMA_VERSION_2, RPCRDMA2_F_RESPONSE, BodyOut::ConnProp(&props)),
            Control::ErrVersRaw(_) | Control::None => (RPCRDMA_VERSION_1, 0, BodyOut::Done),
        };
        let len = match r.control {
            Control::ErrVersRaw(v) => {
                let mut w = proto::xdr::Writer::new(out);
                header::put_prefix(&mut w, r.xid, RPCRDMA_VERSION_1, grant, header::RDMA_ERROR, 0)
                    .and_then(|_| w.put_u32(header::ERR_VERS))
                    .and_then(|_| w.put_u32(self.cfg.versions.low()))
                    .and_then(|_| w.put_u32(self.cfg.versions.high()))
                    .and_then(|_| w.patch_u32(4, v))
                    .map(|_| w.len())
            }
            Control::None => Ok(0),
            _ => header::encode(
                &HeaderOut {
                    xid: r.xid,
                    vers,
                    credits: grant,
                    flags,
                    body,
                },
                out,
            ),
        };
        let Ok(len) = len else {
            self.drop_call(i, false);
            return Step::Wait;
        };
        let wr = SendWr::new(
            self.req_wr_id(i),
            SendOp::Send,
            send_b.local(len as u32),
            RemoteBuf::default(),
        );
        let conn = r.conn;
        if self.fabric.post_send(conn_id, &wr).is_err() {
            self.kill_conn(conn, true);
            return Step::Wait;
        }
        if !matches!(r.control, Control::ConnProp) {
            self.stats.error_replies += 1;
        }
        self.stats.call_errors += u64::from(r.counted);
        let rr = self.reqs.get_mut(i).expect("live");
        rr.replied = true;
        rr.wr_out += 1;
        rr.state = ReqState::Sending;
        if let Some(c) = self.conn_mut(conn) {
            c.sq_used += 1;
            if r.counted {
                c.credits.on_reply(grant);
            }
        }
        Step::Wait
    }
}

/// Write request `r`'s transport header (granting `grant` credits) and the
/// inline part of its reply into its send buffer, as its [`ReplyForm`]
/// says; returns the Send's length, `None` when the reply does not fit
/// (the caller answers ERR_CHUNK). `chunks`: the Call's chunk lists.
///
/// The header is `plan::encode_reply_header`'s for each form:
/// - `Short`: the chunk-free header, then head, data and padding.
/// - `OneWrite`: the header with the segment's length set to the item's,
///   then the reply without the item and its XDR padding.
/// - `Planned`: the plan's header, then a Short plan's reduced reply (a
///   Long reply's goes by RDMA Write into the Reply chunk).
#[inline(always)]
pub(super) fn encode_reply(
    bufs: &mut EngineBufs<'_>,
    r: &Request<'_>,
    grant: u32,
    chunks: Option<&header::ChunkLists<'_>>,
) -> Option<usize> {
    let (send_b, head_b) = (r.send_buf?, r.head_buf?);
    if let ReplyForm::Planned(_) = r.form {
        // The zero padding RDMA Writes into a Reply chunk take from the
        // end of the head buffer (`for_each_local`).
        let hb = head_b.bytes_mut();
        let n = hb.len();
        hb[n - HEAD_PAD_BYTES..].fill(0);
    }
    let out = send_b.bytes_mut();
    let head = head_b.bytes();
    let data = r.data_buf.map_or(&[][..], |b| bufs.bytes(b));
    let shape = &r.shape;
    match r.form {
        ReplyForm::None => None,
        ReplyForm::Short => {
            // No flags beyond RESPONSE, which the encoder sets in v2.
            let hdr = ReplyHeaderOut::ChunkFree { vers: r.vers };
            let hdr_len = plan::encode_reply_header(hdr, r.xid, grant, 0, out).ok()?;
            // Sizes were checked against the send buffer (`short_reply_fits`):
            // head, data, then the data's XDR padding.
            let (head_len, data_len, pad) = (shape.head_len as usize, shape.data_len as usize, shape.pad() as usize);
            let mut at = hdr_len + head_len;
            out.get_mut(hdr_len..at)?.copy_from_slice(head.get(..head_len)?);
            if data_len > 0 {
                out.get_mut(at..at + data_len)?.copy_from_slice(data.get(..data_len)?);
                at += data_len;
            }
            out.get_mut(at..at + pad)?.fill(0);
            Some(at + pad)
        }
        ReplyForm::OneWrite { seg, .. } => {
            let item = *shape.items().first()?;
            let written = item.len;
            let hdr = ReplyHeaderOut::OneWrite {
                vers: r.vers,
                seg,
                written,
            };
            let hdr_len = plan::encode_reply_header(hdr, r.xid, grant, 0, out).ok()?;
            let item_end = item.offset as usize + item.len as usize + (item.len.wrapping_neg() & 3) as usize;
            let at = copy_stream_range(shape, head, data, 0, item.offset as usize, out, hdr_len)?;
            copy_stream_range(shape, head, data, item_end, shape.stream_len() as usize, out, at)
        }
        ReplyForm::Planned(ref plan) => {
            // No flags beyond RESPONSE, which the encoder sets in v2.
            let hdr = ReplyHeaderOut::Planned { plan, call: chunks? };
            let mut send_len = plan::encode_reply_header(hdr, r.xid, grant, 0, out).ok()?;
            if plan.kind == ReplyKind::Short {
                // The reduced reply after the header (at most the inline
                // threshold, which the plan checked).
                for rg in plan.reduced_ranges() {
                    let (s, e) = (rg.start as usize, rg.start as usize + rg.len as usize);
                    send_len = copy_stream_range(shape, head, data, s, e, out, send_len)?;
                }
            }
            Some(send_len)
        }
    }
}

/// What posting a reply's RDMA Writes needs: the fabric, the engine's
/// buffers, request `r` and its connection and `wr_id`.
struct ReplyWriter<'a, 'p, 'r, F: Fabric> {
    fabric: &'a mut F,
    bufs: &'a EngineBufs<'p>,
    send_size: u32,
    r: &'a Request<'r>,
    conn_id: ConnId,
    wr_id: WrId,
}

impl<F: Fabric> ReplyWriter<'_, '_, '_, F> {
    /// The local pieces of bytes `start..start + len` of the request's reply
    /// stream, as the gather list of one work request: `None` when the range is
    /// empty or needs more than [`MAX_SGE`] pieces.
    #[inline(always)]
    fn gather_local(&self, start: u32, len: u32) -> Option<([LocalBuf; MAX_SGE], u8)> {
        let mut pieces = [LocalBuf::default(); MAX_SGE];
        let mut n = 0usize;
        let mut overflow = false;
        for_each_local(self.bufs, self.send_size, self.r, start, len, |lb, _| {
            if n < MAX_SGE {
                pieces[n] = lb;
                n += 1;
            } else {
                overflow = true;
            }
        });
        (!overflow && n > 0).then_some((pieces, n as u8))
    }

    /// Post one RDMA Write of bytes `start..start + len` of the reply
    /// stream (from pieces of the head and data buffers, [`Self::gather_local`])
    /// into `target`; `false` when it cannot be posted.
    #[inline]
    fn post(&mut self, target: Segment, start: u32, len: u32) -> bool {
        let Some((pieces, n)) = self.gather_local(start, len) else {
            return false;
        };
        let mut wr = SendWr::new(self.wr_id, SendOp::RdmaWrite, pieces[0], target);
        wr.sge = pieces;
        wr.num_sge = n;
        wr.remote.length = len;
        self.fabric.post_send(self.conn_id, &wr).is_ok()
    }
}

/// Send or Send with Invalidate for a reply to the Call `h` of version
/// `vers`. Only a handle the Call itself advertised in its chunk lists is
/// ever invalidated, so a peer cannot make the responder invalidate memory
/// it did not offer for this Call (draft -09 s3.3, RFC 8797 s4.1):
/// - v2: the Call's `rdma_inv_handle` when it is non-zero and names one of
///   the Call's own segments; a plain Send otherwise (the handle is then
///   left for the requester to invalidate, as with a zero one);
/// - v1, when both peers set the RFC 8797 R flag and the provider can
///   (`remote_inv`): the first handle the Call advertised (Write chunks,
///   then the Reply chunk, then Read chunks);
/// - a plain Send otherwise.
#[inline(always)]
pub(super) fn send_op(vers: u32, remote_inv: bool, h: &Header<'_>) -> SendOp {
    let advertised = || {
        h.chunks().into_iter().flat_map(|chunks| {
            chunks
                .writes
                .iter()
                .flat_map(|w| w.iter())
                .chain(chunks.reply.iter().flat_map(|r| r.iter()))
                .chain(chunks.reads.segments().map(|s| s.target))
                .map(|s| s.handle)
        })
    };
    let rkey = match vers {
        RPCRDMA_VERSION_2 => match h.inv_handle() {
            0 => None,
            inv => advertised().any(|handle| handle == inv).then_some(inv),
        },
        RPCRDMA_VERSION_1 if remote_inv => advertised().next(),
        _ => None,
    };
    rkey.map_or(SendOp::Send, |rkey| SendOp::SendWithInv { rkey })
}

/// Copy bytes `s..e` of a reply stream shaped `shape` (head ++ data ++ zero
/// padding) into `out` at `at`; returns the new end, `None` when `out` is too
/// short.
#[inline]
pub(super) fn copy_stream_range(
    shape: &ReplyShape,
    head: &[u8],
    data: &[u8],
    s: usize,
    e: usize,
    out: &mut [u8],
    mut at_out: usize,
) -> Option<usize> {
    let (head_len, data_len) = (shape.head_len as usize, shape.data_len as usize);
    let mut at = s;
    while at < e {
        let (src, n): (&[u8], usize) = if at < head_len {
            let n = (head_len - at).min(e - at);
            (head.get(at..at + n)?, n)
        } else if at < head_len + data_len {
            let off = at - head_len;
            let n = (data_len - off).min(e - at);
            (data.get(off..off + n)?, n)
        } else {
            let n = (e - at).min(4);
            (&[0u8; 4][..n], n)
        };
        out.get_mut(at_out..at_out + n)?.copy_from_slice(src);
        at_out += n;
        at += n;
    }
    Some(at_out)
}

/// Map a byte range of request `r`'s unreduced reply stream (head ++ data ++
/// pad) onto local buffers, calling `f` for each contiguous piece.
pub(super) fn for_each_local(
    bufs: &EngineBufs<'_>,
    send_size: u32,
    r: &Request,
    start: u32,
    len: u32,
    mut f: impl FnMut(LocalBuf, u32),
) {
    let head_len = r.shape.head_len;
    let data_len = r.shape.data_len;
    let mut at = start;
    let end = start + len;
    let head = r.head_buf.expect("head").local(0);
    let data = r.data_buf.map(|b| bufs.local(b, 0));
    // Bytes `off..off + n` of the buffer at `b` as the piece at `at`.
    let mut piece = |b: LocalBuf, off: u32, n: u32, at: u32| {
        f(
            LocalBuf {
                offset: b.offset + off as u64,
                len: n,
                ..b
            },
            at - start,
        );
    };
    while at < end {
        if at < head_len {
            let n = (head_len - at).min(end - at);
            piece(head, at, n, at);
            at += n;
        } else if at < head_len + data_len {
            let off = at - head_len;
            let n = (data_len - off).min(end - at);
            piece(data.expect("data"), off, n, at);
            at += n;
        } else {
            // Padding: zero bytes; a Write into a Reply chunk needs them
            // (s3.5.3). They come from the zeroed tail of the head buffer.
            let n = (end - at).min(4);
            piece(head, send_size - HEAD_PAD_BYTES as u32, n, at);
            at += n;
        }
    }
}
