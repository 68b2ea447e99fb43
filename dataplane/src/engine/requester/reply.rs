//! Replies: completions dispatched, a Reply matched to its Call by XID,
//! its grant taken (RFC 8166 s3.3.1), checked against the chunks the Call
//! provisioned (s3.4.6, s3.5.3) and reported. Owning core only.

use super::*;

impl<'p, F: Fabric> Requester<'p, F> {
    /// A batch of completions was polled: nothing to do (the responder
    /// times its Calls from here).
    #[inline(always)]
    pub(super) fn batch_polled(&mut self, _n: usize) {}

    pub(super) fn handle_completion(&mut self, wc: Completion) {
        match wc.wr_id.tag() {
            TAG_RECV => self.handle_recv(wc),
            TAG_CALL => {
                let i = wc.wr_id.index() as u32;
                if !wc.status.is_success() {
                    self.on_wc_error(wc.status);
                }
                if let Some(c) = self.calls.get_mut(i) {
                    c.send_done = true;
                    if c.replied && c.state == CallState::InFlight {
                        c.state = CallState::Done;
                    }
                }
            }
            // The CONNPROP buffer is freed when its answer arrives or the link fails.
            TAG_CTRL if !wc.status.is_success() => self.on_wc_error(wc.status),
            TAG_BACK => self.backward_send_done(wc),
            _ => {}
        }
    }

    pub(super) fn handle_recv(&mut self, wc: Completion) {
        let Some(b) = BufRef::from_u64(wc.wr_id.index()) else {
            return;
        };
        crate::count::dec(&mut self.recvs_posted, "requester receives posted");
        if !wc.status.is_success() {
            self.bufs.put(b);
            self.on_wc_error(wc.status);
            return;
        }
        // Reposted by the next submit or poll.
        self.recv_deficit += 1;
        let len = (wc.byte_len as usize).min(self.recv_size as usize);
        let msg = &self.bufs.bytes(b)[..len];
        if self.short_reply(b, msg) {
            return;
        }
        let Some(prefix) = header::peek_prefix(msg) else {
            self.bufs.put(b);
            return;
        };
        // Version negotiation answers (CONNPROP or the first v1 call).
        let decoded = header::decode(msg, &self.cfg.limits);
        // A backward-direction Call is told apart before any XID lookup
        // (RFC 8167 s5.1; draft -09 s3.2): it answers nothing of ours.
        if let Ok(h) = decoded {
            if backward::carries_rpc_call(&h) {
                self.take_backward_call(b, &h);
                return;
            }
        }
        if Some(prefix.xid) == self.connprop_xid {
            self.connprop_xid = None;
            if let Some(cb) = self.connprop_buf.take() {
                self.bufs.put(cb);
            }
            self.credits.on_reply(prefix.credits);
            let kind = match decoded {
                Ok(h) => negotiation_reply_kind(&h),
                Err(_) => match header::peek_err_vers_v1_layout(msg) {
                    Some((low, high)) => negotiate::ReplyKind::VersionError { low, high },
                    None => negotiate::ReplyKind::OtherError,
                },
            };
            if let Ok(h) = decoded {
                if let Body::ConnProp(p) = h.body {
                    let _ = self.neg.set_peer_receive_size(p.rbsiz());
                    self.refresh_thresholds();
                }
            }
            let _ = self.neg.handle_reply(prefix.vers, kind);
            self.bufs.put(b);
            self.after_negotiation_input();
            return;
        }
        let h = match decoded {
            Ok(h) => h,
            Err(_) => {
                self.stats.bad_replies += 1;
                self.bufs.put(b);
                return;
            }
        };
        // RDMA_DONE, RDMA_MSGP and RDMA2_CONNPROP never answer a Call
        // (RFC 8166 s4.6; draft -09 s5.3.4): ignored, whatever XID they carry.
        if matches!(h.body, Body::Done | Body::MsgP { .. } | Body::ConnProp(_)) {
            self.stats.ignored += 1;
            self.bufs.put(b);
            return;
        }
        let Some(i) = self.find_call(h.xid) else {
            self.stats.unmatched += 1;
            self.bufs.put(b);
            return;
        };
        // An error's credit field is ignored (draft -09 s5.3.3).
        let grant = match h.body {
            Body::ErrorV1(_) | Body::ErrorV2(_) => None,
            _ => Some(h.credits),
        };
        self.accept_reply(i, grant);
        if self.neg.phase() == Phase::Negotiating {
            let _ = self.neg.handle_reply(h.vers, negotiation_reply_kind(&h));
        }
        let outcome = match h.body {
            Body::ErrorV1(e) => {
                self.stats.transport_errors += 1;
                CallOutcome::TransportErrorV1(e)
            }
            Body::ErrorV2(e) => {
                self.stats.transport_errors += 1;
                CallOutcome::TransportErrorV2(e)
            }
            Body::Msg { .. } | Body::NoMsg { .. } => {
                // The Reply is checked against what the Call advertised.
                let c = self.calls.get(i).expect("found");
                let n = (c.write_count as usize).min(plan::PLAN_WRITE_CHUNKS);
                let writes: [&[Segment]; plan::PLAN_WRITE_CHUNKS] =
                    std::array::from_fn(|k| std::slice::from_ref(&c.write_segs[k]));
                let reply = c.reply_seg.as_ref().map(std::slice::from_ref);
                match plan::reassemble_reply_provisioned(&h, &writes[..n], reply) {
                    Ok(layout) => {
                        let cm = self.calls.get_mut(i).expect("found");
                        cm.layout = Some(layout);
                        self.stats.replies += 1;
                        CallOutcome::Reply
                    }
                    _ => {
                        self.stats.bad_replies += 1;
                        CallOutcome::BadReply
                    }
                }
            }
            _ => {
                self.stats.bad_replies += 1;
                CallOutcome::BadReply
            }
        };
        let payload_at = match h.body {
            Body::Msg { payload_offset, .. } => payload_offset as u32,
            _ => 0,
        };
        self.complete_call(i, b, len as u32, payload_at, outcome);
        self.after_negotiation_input();
    }

    /// The slot of the Call in flight that a Reply with `xid` answers: the
    /// XID carries the slot in its low bits ([`Self::stamp_xid`]), checked
    /// against the XID stored there. `None` for any other XID.
    #[inline(always)]
    pub(super) fn find_call(&self, xid: u32) -> Option<u32> {
        let i = xid & ((1 << self.slot_bits) - 1);
        self.calls.get(i).filter(|c| c.answers(xid)).map(|_| i)
    }

    /// [`Self::find_call`], with the Call.
    #[inline(always)]
    pub(super) fn find_call_mut(&mut self, xid: u32) -> Option<(u32, &mut Call)> {
        let i = xid & ((1 << self.slot_bits) - 1);
        self.calls.get_mut(i).filter(|c| c.answers(xid)).map(|c| (i, c))
    }

    /// The Reply to call slot `i` ([`Self::find_call`]) is taken: the Call
    /// leaves the credits in flight and the Reply's `grant` is the new
    /// limit (RFC 8166 s3.3.1); `None` for an error reply, whose credit
    /// field is ignored (draft -09 s5.3.3).
    #[inline(always)]
    pub(super) fn accept_reply(&mut self, i: u32, grant: Option<u32>) {
        match grant {
            Some(g) => self.credits.on_reply(g),
            None => self.credits.on_error_reply(),
        }
        if let Some(&p) = self.posted_at.get(i as usize) {
            self.stages.interval(LAP_REPLY_SEEN, p, self.polled_at);
        }
    }

    /// Call slot `i` is answered: its Reply (`len` bytes, the RPC message at
    /// `payload_at`) stays in receive buffer `b`, and the Call is reported
    /// with `outcome`. A reply implies the Send was delivered; its completion
    /// may still be pending in the CQ, but the buffers are no longer used by
    /// the device. Inlined into both callers: a Reply's completion is the
    /// requester's hot path.
    #[inline(always)]
    pub(super) fn complete_call(&mut self, i: u32, b: BufRef, len: u32, payload_at: u32, outcome: CallOutcome) {
        let Some(c) = self.calls.get_mut(i) else { return };
        if c.window_count > 0 {
            self.hide_windows(i);
        }
        let Some(c) = self.calls.get_mut(i) else { return };
        c.recv = Some(b);
        c.recv_len = len;
        c.payload_at = payload_at;
        c.replied = true;
        c.outcome = Some(outcome);
        c.state = CallState::Done;
        let xid = c.xid;
        self.completions.push_back(Completed {
            id: CallId(i),
            xid,
            outcome,
        });
        self.stages.lap(LAP_REPLY_COMPLETED, self.polled_at);
    }

    /// A chunk-free Reply (RDMA_MSG / RDMA2_MSG with three empty lists) to
    /// a Call in flight that provisioned no Write chunk, in receive buffer
    /// `b` (`msg`: its bytes), on a link in its steady state: the same
    /// outcome as the rest of [`Self::handle_recv`] (the credit grant taken,
    /// the Call done with [`plan::ReplyLayout::short_inline`]), with the
    /// checks a chunk-free Reply needs made once. `false`, having changed
    /// nothing, for any other message or state, which `handle_recv` then
    /// handles.
    ///
    /// Called on the requester's core only.
    #[inline]
    pub(super) fn short_reply(&mut self, b: BufRef, msg: &[u8]) -> bool {
        if self.link != LinkState::Ready || self.connprop_xid.is_some() || self.neg.phase() != Phase::Established {
            return false;
        }
        // RFC 8166 s4.2 / draft s5.3.1, validated as `header::decode` would.
        let Some(h) = header::decode_chunk_free_msg(msg) else {
            return false;
        };
        // A backward Call goes the general way (RFC 8167 s5.1).
        if backward::carries_rpc_call(&h) {
            return false;
        }
        let Some((i, c)) = self.find_call_mut(h.xid) else {
            return false;
        };
        if c.write_count != 0 {
            return false;
        }
        // No Write chunk to check the Reply's (empty) Write list against,
        // and an unused Reply chunk, if one was provisioned, is allowed
        // (RFC 8166 s3.4.6, s3.5.3).
        let payload_len = h.payload().map_or(0, <[u8]>::len) as u32;
        c.layout = Some(plan::ReplyLayout::short_inline(payload_len));
        self.accept_reply(i, Some(h.credits));
        self.stats.replies += 1;
        self.complete_call(i, b, msg.len() as u32, h.header_len as u32, CallOutcome::Reply);
        true
    }
}

/// What a decoded Reply tells version negotiation (draft -09 s7): ERR_VERS
/// with the responder's range, another error, or a normal Reply with its
/// credit grant.
fn negotiation_reply_kind(h: &header::Header<'_>) -> negotiate::ReplyKind {
    match h.body {
        Body::ErrorV1(header::V1Error::Vers { low, high }) | Body::ErrorV2(header::V2Error::Vers { low, high }) => {
            negotiate::ReplyKind::VersionError { low, high }
        }
        Body::ErrorV1(_) | Body::ErrorV2(_) => negotiate::ReplyKind::OtherError,
        _ => negotiate::ReplyKind::Normal { credits: h.credits },
    }
}
