//! Submitting Calls: the Call planned (RFC 8166 s3.4, s3.5; draft -09 s4)
//! and its chunks provisioned from registered buffers, the transport header
//! and the inline part in the slot's header buffer, one Send; the one-step
//! forms for chunk-free and READ-shaped Calls. Owning core only.

use super::*;

impl<'p, F: Fabric> Requester<'p, F> {
    /// Submit the Call of `len` bytes in `cb` whose DDP-eligible items are `items`
    /// and whose reply needs are `needs`. On error the buffer is returned to the
    /// caller inside the error tuple.
    pub fn submit(
        &mut self,
        mut cb: CallBuf<'p>,
        len: usize,
        items: &[DdpItem],
        needs: &ReplyNeeds,
    ) -> Result<CallId, (SubmitError, CallBuf<'p>)> {
        if self.link != LinkState::Ready {
            return Err((SubmitError::NotConnected, cb));
        }
        self.submit_t0 = cb.t0;
        if !self.credits.can_send() || self.calls.available() == 0 {
            return Err((SubmitError::Busy, cb));
        }
        if len > cb.len() || len < 4 {
            return Err((SubmitError::TooLarge, cb));
        }
        if self.neg.phase() == Phase::Negotiating {
            // The first v1 Call is the negotiation message (draft s7); the
            // negotiator tracks it (it may already be marked in flight).
            let _ = self.neg.try_send();
        }
        let params = CallParams {
            vers: self.vers,
            call_inline_max: self.call_inline_max,
            reply_inline_max: self.reply_inline_max,
            ddp: self.cfg.ddp,
            max_segments_per_chunk: 1,
            pad_read_chunks: self.cfg.pad_read_chunks,
        };
        if plan::is_chunk_free_call(len, items, needs, &params) {
            return self.submit_one_step(cb, len, None);
        }
        if let Some(wlen) = plan::one_write_call(len, items, needs, &params) {
            return self.submit_one_step(cb, len, Some(wlen));
        }
        let plan = match plan::plan_call(len, items, needs, &params) {
            Ok(p) => p,
            Err(e) => return Err((SubmitError::Plan(e), cb)),
        };
        let Some(i) = self.calls.alloc() else {
            unreachable!("availability checked above");
        };
        // Buffers: the slot's header buffer, one per Write chunk, one for the
        // Reply chunk.
        let Some(hdr) = self.slot_hdr_buf(i) else {
            self.calls.free(i);
            return Err((SubmitError::NoBuffers, cb));
        };
        let mut wbufs = [None; plan::PLAN_WRITE_CHUNKS];
        let mut ok = true;
        for (k, &wlen) in plan.write_chunks.iter().enumerate() {
            if wlen > self.data_size {
                ok = false;
                break;
            }
            match self.bufs.get(Class::Data) {
                Some(b) => wbufs[k] = Some(b),
                None => {
                    ok = false;
                    break;
                }
            }
        }
        let rbuf = match plan.reply_chunk {
            Some(rlen) if ok && rlen <= self.data_size => match self.bufs.get(Class::Data) {
                Some(b) => Some(b),
                None => {
                    ok = false;
                    None
                }
            },
            Some(_) => {
                ok = false;
                None
            }
            None => None,
        };
        if !ok {
            self.calls.free(i);
            self.bufs.put_all([rbuf]);
            self.bufs.put_all(wbufs);
            return Err((SubmitError::NoBuffers, cb));
        }
        let xid = self.stamp_xid(i, &mut cb);
        // Segments: one per chunk, each buffer exposed to this connection
        // for as long as the Call is in flight (RFC 8166 s8.1).
        let mut windows = [NO_WINDOW; CALL_WINDOWS];
        let mut nwin = 0;
        let mut read_segs = [[Segment::default(); 1]; plan::PLAN_READ_CHUNKS];
        let mut write_segs = [[Segment::default(); 1]; plan::PLAN_WRITE_CHUNKS];
        let mut reply_seg = [Segment::default()];
        let wants = plan
            .reads
            .iter()
            .map(|r| (Some(cb.buf), r.range.start, r.range.len, Access::Read))
            .chain(
                plan.write_chunks
                    .iter()
                    .enumerate()
                    .map(|(k, &w)| (wbufs[k], 0, w, Access::Write)),
            )
            .chain(plan.reply_chunk.map(|l| (rbuf, 0, l, Access::Write)));
        let (nr, nw) = (plan.reads.len(), plan.write_chunks.len());
        for (k, (b, at, len, access)) in wants.enumerate() {
            let Some(seg) = b.and_then(|b| self.expose(b, at, len, access)) else {
                self.hide(&windows[..nwin]);
                self.calls.free(i);
                self.bufs.put_all([rbuf]);
                self.bufs.put_all(wbufs);
                return Err((SubmitError::NoBuffers, cb));
            };
            windows[nwin] = seg.handle;
            nwin += 1;
            match k {
                k if k < nr => read_segs[k][0] = seg,
                k if k < nr + nw => write_segs[k - nr][0] = seg,
                _ => reply_seg[0] = seg,
            }
        }
        let read_refs: [&[Segment]; plan::PLAN_READ_CHUNKS] = std::array::from_fn(|k| &read_segs[k][..]);
        let write_refs: [&[Segment]; plan::PLAN_WRITE_CHUNKS] = std::array::from_fn(|k| &write_segs[k][..]);
        let out = self.bufs.bytes_mut(hdr);
        let hlen = match plan::encode_call_header(
            &plan,
            xid,
            self.credits.request(),
            0,
            &read_refs[..plan.reads.len()],
            &write_refs[..plan.write_chunks.len()],
            plan.reply_chunk.map(|_| &reply_seg[..]),
            out,
        ) {
            Ok(n) => n,
            Err(e) => {
                self.hide(&windows[..nwin]);
                self.calls.free(i);
                self.bufs.put_all([rbuf]);
                self.bufs.put_all(wbufs);
                return Err((SubmitError::Plan(e), cb));
            }
        };
        // Inline part of the Call after the header (copied: at most the inline
        // threshold, which the plan checked).
        let mut send_len = hlen;
        for r in plan.inline.iter() {
            let src = &cb.bytes[r.range()];
            out[send_len..send_len + src.len()].copy_from_slice(src);
            send_len += src.len();
        }
        if !self.post_call(i, hdr, send_len) {
            self.hide(&windows[..nwin]);
            self.calls.free(i);
            self.bufs.put_all([rbuf]);
            self.bufs.put_all(wbufs);
            return Err((SubmitError::NotConnected, cb));
        }
        let sent = self.credits.on_send();
        debug_assert!(sent);
        *self.calls.get_mut(i).expect("allocated") = Call {
            state: CallState::InFlight,
            xid,
            vers: self.vers,
            call_buf: Some(cb.buf),
            hdr_buf: Some(hdr),
            write_segs: std::array::from_fn(|k| write_segs[k][0]),
            write_count: plan.write_chunks.len() as u8,
            reply_seg: plan.reply_chunk.map(|_| reply_seg[0]),
            write_bufs: wbufs,
            reply_buf: rbuf,
            windows,
            window_count: nwin as u8,
            ..Call::default()
        };
        Ok(self.finish_submit(i, plan.kind))
    }

    /// What every submit ends with, once its Send is posted, its credit
    /// taken and call slot `i` holds the Call: it is counted by its `kind`,
    /// and the receives are reposted while the responder works.
    #[inline(always)]
    pub(super) fn finish_submit(&mut self, i: u32, kind: CallKind) -> CallId {
        self.stats.calls += 1;
        match kind {
            CallKind::Short => self.stats.short_calls += 1,
            CallKind::Chunked => self.stats.chunked_calls += 1,
            CallKind::Long => self.stats.long_calls += 1,
        }
        self.refill_recvs();
        CallId(i)
    }

    /// Send call slot `i`'s header buffer `hdr` (`send_len` bytes: transport
    /// header and inline Call), first making sure a receive waits for every
    /// Reply in flight. `false` when the fabric refused the Send.
    #[inline]
    pub(super) fn post_call(&mut self, i: u32, hdr: BufRef, send_len: usize) -> bool {
        let Some(conn) = self.conn else { return false };
        let wr = SendWr::new(
            WrId::new(TAG_CALL, i as u64),
            SendOp::Send,
            self.bufs.local(hdr, send_len as u32),
            Segment::default(),
        );
        // Every Call in flight needs a receive posted for its Reply.
        if self.recvs_posted <= self.credits.in_flight() {
            self.refill_recvs();
        }
        let ok = self.fabric.post_send(conn, &wr).is_ok();
        self.stages.lap(LAP_CALL_POSTED, self.submit_t0);
        if let Some(p) = self.posted_at.get_mut(i as usize) {
            *p = StageTimer::now();
        }
        ok
    }

    /// The XID of a new Call in slot `i`, written into its first word. The
    /// XID carries the slot in its low bits, so a Reply finds its Call with
    /// an array index (checked against the stored XID); it must equal the
    /// transport header's (RFC 8166 s4.2.1).
    #[inline]
    pub(super) fn stamp_xid(&mut self, i: u32, cb: &mut CallBuf<'p>) -> u32 {
        let xid = ((self.next_xid << self.slot_bits) | i) & 0x7fff_ffff;
        self.next_xid = self.next_xid.wrapping_add(1);
        cb.bytes[..4].copy_from_slice(&xid.to_be_bytes());
        xid
    }

    /// The slot's header buffer (transport header and inline Call), taken
    /// from the pool on the slot's first use.
    #[inline]
    pub(super) fn slot_hdr_buf(&mut self, i: u32) -> Option<BufRef> {
        if let Some(b) = self.slot_hdr[i as usize] {
            return Some(b);
        }
        let b = self.bufs.get(Class::Send)?;
        self.slot_hdr[i as usize] = Some(b);
        Some(b)
    }

    /// What the one-step submits share: a call slot and its header buffer,
    /// the XID stamped into the Call, the transport header `encode(xid,
    /// credits, segment of the Write chunk, out)` writes followed by the Call,
    /// the Send posted and the credit taken. `write_len`: also provision one
    /// data buffer of that many bytes as the one Write chunk. On failure
    /// nothing is held. Returns the slot, the XID, the header buffer and the
    /// Write chunk (buffer, segment) when one was provisioned.
    #[allow(clippy::type_complexity)]
    #[inline(always)]
    pub(super) fn post_one_step(
        &mut self,
        cb: &mut CallBuf<'p>,
        len: usize,
        write_len: Option<u32>,
        encode: impl FnOnce(u32, u32, Segment, &mut [u8]) -> Option<usize>,
    ) -> Result<(u32, u32, BufRef, Option<(BufRef, Segment)>), SubmitError> {
        if write_len.is_some_and(|w| w > self.data_size) {
            return Err(SubmitError::NoBuffers);
        }
        let i = self.calls.alloc().ok_or(SubmitError::Busy)?;
        let Some(hdr) = self.slot_hdr_buf(i) else {
            self.calls.free(i);
            return Err(SubmitError::NoBuffers);
        };
        let write = match write_len {
            Some(w) => match self.bufs.get(Class::Data) {
                Some(b) => match self.expose(b, 0, w, Access::Write) {
                    Some(seg) => Some((b, seg)),
                    None => {
                        self.bufs.put(b);
                        self.calls.free(i);
                        return Err(SubmitError::NoBuffers);
                    }
                },
                None => {
                    self.calls.free(i);
                    return Err(SubmitError::NoBuffers);
                }
            },
            None => None,
        };
        let xid = self.stamp_xid(i, cb);
        let out = self.bufs.bytes_mut(hdr);
        let seg = write.map_or(Segment::default(), |(_, s)| s);
        // The caller's check (`is_chunk_free_call`, `one_write_call`) put
        // header + Call within the inline threshold, which is at most our
        // send buffer's size.
        let sent = encode(xid, self.credits.request(), seg, out).and_then(|h| {
            out.get_mut(h..h + len)?.copy_from_slice(&cb.bytes[..len]);
            Some(h + len)
        });
        let err = match sent {
            None => Some(SubmitError::TooLarge),
            Some(n) if !self.post_call(i, hdr, n) => Some(SubmitError::NotConnected),
            Some(_) => None,
        };
        if let Some(e) = err {
            self.calls.free(i);
            if let Some((b, seg)) = write {
                self.hide(&[seg.handle]);
                self.bufs.put(b);
            }
            return Err(e);
        }
        let ok = self.credits.on_send();
        debug_assert!(ok);
        Ok((i, xid, hdr, write))
    }

    /// [`Requester::submit`] of a Call that needs no plan, one Send of the
    /// one-step header and the Call after it: without any chunk
    /// (`write_len` `None`, [`plan::is_chunk_free_call`]), or of the READ
    /// shape (`Some(wlen)`, [`plan::one_write_call`]: one data buffer
    /// provisioned as the one Write chunk of `wlen` bytes); each checked by
    /// the caller. The Reply is checked against the chunks advertised like
    /// any other.
    #[inline(always)]
    pub(super) fn submit_one_step(
        &mut self,
        mut cb: CallBuf<'p>,
        len: usize,
        write_len: Option<u32>,
    ) -> Result<CallId, (SubmitError, CallBuf<'p>)> {
        let vers = self.vers;
        let posted = self.post_one_step(&mut cb, len, write_len, |xid, credits, seg, out| match write_len {
            Some(_) => plan::encode_one_write_call_header(vers, xid, credits, seg, out),
            None => plan::encode_chunk_free_call_header(vers, xid, credits, out),
        });
        let (i, xid, hdr, write) = match posted {
            Ok(v) => v,
            Err(e) => return Err((e, cb)),
        };
        let c = self.calls.get_mut(i).expect("allocated");
        // A fresh slot; `write_segs` (read only up to `write_count`) is left
        // as it was rather than rewritten.
        let mut fresh = Call {
            state: CallState::InFlight,
            xid,
            vers,
            call_buf: Some(cb.buf),
            hdr_buf: Some(hdr),
            write_segs: c.write_segs,
            ..Call::default()
        };
        if let Some((wbuf, seg)) = write {
            fresh.write_segs[0] = seg;
            fresh.write_count = 1;
            fresh.write_bufs[0] = Some(wbuf);
            fresh.windows[0] = seg.handle;
            fresh.window_count = 1;
        }
        *c = fresh;
        Ok(self.finish_submit(i, CallKind::Short))
    }
}
