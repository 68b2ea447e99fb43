//! The backward direction: the responder calls the requester on the same
//! connection (RFC 8167 for version 1; draft -09's RPCRDMA2_F_RESPONSE flag
//! and BRS property for version 2), through the [`Service`] hooks
//! `has_backward_calls`, `poll_backward_call`, `handle_backward_reply` and
//! `backward_channel`. Owning core only.
//!
//! # Rules followed
//!
//! - Direction (RFC 8167 s3; RFC 5531 s9 `msg_type`): a message carrying
//!   an RPC Reply is a backward-direction Reply, never a Call. In version 1
//!   the RPC message's `msg_type` tells (the word after the XID, RFC 8167
//!   s5.2); in version 2 the RPCRDMA2_F_RESPONSE flag does (draft -09 s3.2:
//!   it equals the `msg_type` of the message it conveys, which the decoder
//!   checks), so the receiver looks no XID up to tell.
//! - Credits (RFC 8167 s4.1): backward credits are accounted apart from
//!   the forward ones. This side is the backward requester: each backward
//!   Call asks for [`ResponderConfig::backward_credits`] in its
//!   `rdma_credit`; it starts with one Call in flight and the limit is then
//!   the smaller of that request and the grant in the latest backward
//!   Reply, at least one ([`RequesterCredits`], the rules of RFC 8166
//!   s3.3.1 in this direction). A backward Reply's credit value never
//!   touches the forward grant, nor a forward Call's the backward one.
//! - Receives (RFC 8167 s4.3.2): the shared receive queue holds, beside
//!   the forward credits, one receive per backward Call that may be
//!   outstanding on each connection ([`ResponderConfig::srq_depth`]). A
//!   connection has at most `backward_credits` backward Calls in flight and
//!   holds at most that many request slots for them, so a client cannot
//!   make the server hold more: a Reply is handed over and released in the
//!   turn it arrives.
//! - Inline only (RFC 8167 s5.1, s5.2: RDMA_MSG, the three chunk lists
//!   empty; draft -09 s4.2.2 RDMA2_RVREQSUP_INLINE): a backward Call is
//!   written by the service into at most the peer's inline threshold less
//!   the chunk-free header ([`BackwardChannel::max_call_bytes`]); one that
//!   does not fit, is not an RPC Call, or reuses an XID in flight is not
//!   sent (`ResponderStats::backward_calls_refused`). A backward Reply with
//!   chunks is refused: dropped, its Call ended without a Reply
//!   (`backward_replies_refused`); a responder cannot answer a Reply with
//!   RDMA_ERROR (RFC 8166 s4.5: errors answer Calls).
//! - Hostile peer: a Reply whose XID names no backward Call in flight on
//!   its connection (unknown, a duplicate, or beyond the credits) is dropped
//!   and counted (`backward_replies_dropped`) and reaches no service. An
//!   RDMA_ERROR / RDMA2_ERROR answering a backward Call says the peer does
//!   not take them (RFC 8167 s4.3.3): the backchannel is withdrawn for the
//!   connection (`backward_errors`).
//! - When usable: in version 1 RPC-over-RDMA has no transport-level offer
//!   (the client's ULP binds the backchannel, e.g. NFSv4.1 CONN_BACK_CHAN),
//!   so the service hears of every established connection whose version is
//!   fixed and decides which ones it calls on. In version 2 the client's
//!   RDMA2_CONNPROP BRS property decides: RDMA2_RVREQSUP_NONE closes it,
//!   the default (none sent) is INLINE (draft -09 s4.2.2, Table 1). Our own
//!   CONNPROP answer advertises INLINE, or NONE without a backchannel.
//! - Loss (RFC 8167 s4.3.1, s5.4 retransmission belongs to the ULP): when
//!   the connection goes, the service hears `backward_channel(conn, None)`
//!   once; backward Calls in flight get no Reply and their slots drain with
//!   the connection's other requests.
//!
//! A backward Call is a request like any other in the one state machine:
//! `BackwardCall` (waiting for a send-queue slot) then `Sending`, released
//! by its Send's completion; a backward Reply enters as `New` like every
//! received message and goes to `BackwardReply`.

use super::*;

/// Most backward credits per connection ([`ResponderConfig::backward_credits`]).
pub const MAX_BACKWARD_CREDITS: u32 = 16;

/// Backward credits a server that makes callbacks asks for: NFSv4.1
/// callbacks are rare and short (the Linux client's backchannel takes one
/// Call at a time per session slot), so two keep one in flight while the
/// next is written.
pub const DEFAULT_BACKWARD_CREDITS: u32 = 2;

/// A connection's backward direction.
#[derive(Clone, Copy, Debug)]
pub(super) struct Backchannel {
    /// What the service was last told ([`Service::backward_channel`]):
    /// `Some` while backward Calls may be sent.
    pub(super) open: Option<BackwardChannel>,
    /// The v2 peer said RDMA2_RVREQSUP_NONE, or answered a backward Call
    /// with an error: no backward Calls on this connection.
    pub(super) refused: bool,
    /// Backward Calls in flight and the peer's backward grant.
    pub(super) credits: RequesterCredits,
    /// The XIDs of the backward Calls in flight: `xids[..credits.in_flight()]`.
    xids: [u32; MAX_BACKWARD_CREDITS as usize],
    /// Request slots held by backward Calls (until their Send completes).
    pub(super) slots: u32,
}

impl Backchannel {
    pub(super) fn new(want: u32) -> Self {
        Backchannel {
            open: None,
            refused: false,
            credits: RequesterCredits::new(want),
            xids: [0; MAX_BACKWARD_CREDITS as usize],
            slots: 0,
        }
    }

    fn in_flight(&self) -> &[u32] {
        let n = self.credits.in_flight() as usize;
        debug_assert!(n <= self.xids.len(), "backward Calls in flight beyond the array");
        &self.xids[..n.min(self.xids.len())]
    }

    /// Take a backward credit for a Call with `xid`: `false` (nothing
    /// changed) when none is free or `xid` is in flight already.
    fn take(&mut self, xid: u32) -> bool {
        let n = self.credits.in_flight() as usize;
        if n >= self.xids.len() || self.in_flight().contains(&xid) || !self.credits.on_send() {
            return false;
        }
        self.xids[n] = xid;
        true
    }

    /// The backward Call `xid` ended: its Reply granted `grant`, or
    /// (`None`) it ends without one. `false` when `xid` is not in flight.
    fn retire(&mut self, xid: u32, grant: Option<u32>) -> bool {
        let n = self.credits.in_flight() as usize;
        let Some(k) = self.in_flight().iter().position(|&x| x == xid) else {
            return false;
        };
        self.xids[k] = self.xids[n - 1];
        match grant {
            Some(g) => self.credits.on_reply(g),
            None => self.credits.on_abandon(),
        }
        true
    }

    /// Forget every backward Call in flight (the channel closed).
    fn forget_in_flight(&mut self) {
        while self.credits.in_flight() > 0 {
            self.credits.on_abandon();
        }
    }
}

/// Whether the transport header `h` conveys an RPC Reply: the v2
/// RPCRDMA2_F_RESPONSE flag (draft -09 s3.2), or in v1 an RDMA_MSG whose
/// RPC message has `msg_type` REPLY (RFC 8167 s5.2; RFC 5531 s9). An
/// RDMA_NOMSG's message is not inline: in v1 it is taken for a Call.
#[inline(always)]
pub(super) fn carries_rpc_reply(h: &Header<'_>) -> bool {
    h.rpc_direction() == Some(header::RpcDirection::Reply)
}

/// A backward Call's request of connection `c` is released: its backward
/// slot is free again. Out of line: forward requests only test the flag.
#[cold]
#[inline(never)]
pub(super) fn backward_slot_released(c: &mut Conn) {
    crate::count::dec(&mut c.back.slots, "connection backward slots held");
}

impl<'p, F: Fabric, S: Service> Responder<'p, F, S> {
    /// The backchannel of connection `slot` as it stands now: open (with
    /// its current limits) when configured, the connection is up, its
    /// version fixed and the peer has not refused; the service is told
    /// when that changes ([`Service::backward_channel`]). Closing forgets
    /// the backward Calls in flight.
    #[cold]
    #[inline(never)]
    pub(super) fn refresh_backward(&mut self, slot: u32) {
        if self.cfg.backward_credits == 0 {
            return;
        }
        let (send_size, recv_size) = (self.send_size, self.recv_size);
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let vers = c.neg.version();
        let want = match (c.state, vers.and_then(plan::chunk_free_header_len)) {
            (ConnState::Up, Some(hdr)) if !c.back.refused => {
                let hdr = hdr as u32;
                Some(BackwardChannel {
                    credits: c.back.credits.limit().min(u32::from(u16::MAX)) as u16,
                    max_call_bytes: c.send_max.min(send_size).saturating_sub(hdr),
                    max_reply_bytes: recv_size.saturating_sub(hdr),
                })
            }
            _ => None,
        };
        if want == c.back.open {
            return;
        }
        c.back.open = want;
        if want.is_none() {
            c.back.forget_in_flight();
        }
        let id = c.id;
        self.service.backward_channel(id, want);
    }

    /// Ask the service for backward Calls, for every connection with an
    /// open backchannel, a backward credit and a backward slot free, and
    /// start each as a request (`BackwardCall`). Called each turn while the
    /// service has some ([`Service::has_backward_calls`]). Returns the
    /// Calls started.
    #[inline(never)]
    pub(super) fn start_backward_calls(&mut self) -> usize {
        let mut work = 0;
        for slot in 0..self.cfg.max_conns {
            while let Some(c) = self.conns.get(slot).and_then(Option::as_ref) {
                let Some(chan) = c.back.open else { break };
                let Some(hdr_len) = c.neg.version().and_then(plan::chunk_free_header_len) else {
                    break;
                };
                if c.state != ConnState::Up
                    || !c.back.credits.can_send()
                    || c.back.slots >= self.cfg.backward_credits
                    || c.requests >= self.cfg.conn_share()
                {
                    break;
                }
                let (id, vers) = (c.id, c.neg.version().unwrap_or(RPCRDMA_VERSION_1));
                let Some(i) = self.reqs.alloc() else { return work };
                let r = self.reqs.get_mut(i).expect("allocated");
                r.start_backward(slot);
                if r.send_buf.is_none() {
                    r.send_buf = SlotBuf::take(&mut self.bufs, Class::Send);
                }
                let Some(send_b) = r.send_buf else {
                    r.backward = false;
                    r.state = ReqState::Free;
                    self.reqs.free(i);
                    return work;
                };
                let out = send_b.bytes_mut();
                let room = (chan.max_call_bytes as usize).min(out.len().saturating_sub(hdr_len));
                let Some(n) = self.service.poll_backward_call(id, &mut out[hdr_len..hdr_len + room]) else {
                    // Nothing for this connection.
                    r.backward = false;
                    r.state = ReqState::Free;
                    self.reqs.free(i);
                    break;
                };
                let msg = out.get(hdr_len..hdr_len + n).filter(|_| n <= room);
                let call = msg.and_then(|m| proto::rpc::peek_msg(m).ok());
                let c = self.conns.get_mut(slot).and_then(Option::as_mut).expect("live");
                let want = c.back.credits.request();
                let taken = match call {
                    Some((xid, proto::rpc::CALL)) => c.back.take(xid).then_some(xid),
                    _ => None,
                };
                let encoded = taken.and_then(|xid| plan::encode_chunk_free_call_header(vers, xid, want, out));
                let (Some(xid), Some(_)) = (taken, encoded) else {
                    if let Some(xid) = taken {
                        c.back.retire(xid, None);
                    }
                    self.stats.backward_calls_refused += 1;
                    let r = self.reqs.get_mut(i).expect("allocated");
                    r.backward = false;
                    r.state = ReqState::Free;
                    self.reqs.free(i);
                    continue;
                };
                c.back.slots += 1;
                c.requests += 1;
                debug_assert!(
                    c.back.slots <= self.cfg.backward_credits,
                    "backward slots beyond the credits"
                );
                debug_assert!(c.requests <= self.cfg.conn_share(), "connection {slot} over its share");
                let r = self.reqs.get_mut(i).expect("allocated");
                r.xid = xid;
                r.vers = vers;
                r.backward_len = (hdr_len + n) as u32;
                r.state = ReqState::BackwardCall;
                self.advance(i);
                work += 1;
            }
        }
        work
    }

    /// Post backward Call `i` (RFC 8167 s5.1): one Send of its send buffer,
    /// when its connection has a send-queue slot free.
    #[cold]
    #[inline(never)]
    pub(super) fn step_backward_call(&mut self, i: u32) -> Step {
        let (conn, len, send_b) = {
            let r = self.reqs.get(i).expect("live");
            (r.conn, r.backward_len, r.send_buf)
        };
        let Some(c) = self.conn(conn) else { return Step::Wait };
        if c.state == ConnState::Accepting || c.sq_used >= self.cfg.send_depth {
            return self.wait(i, Queue::SendSlots);
        }
        let id = c.id;
        let Some(send_b) = send_b else { return Step::Wait };
        let wr = SendWr::new(self.req_wr_id(i), SendOp::Send, send_b.local(len), RemoteBuf::default());
        if self.fabric.post_send(id, &wr).is_err() {
            self.kill_conn(conn, true);
            return Step::Wait;
        }
        let r = self.reqs.get_mut(i).expect("live");
        r.wr_out += 1;
        r.state = ReqState::Sending;
        if let Some(c) = self.conn_mut(conn) {
            c.sq_used += 1;
        }
        self.stats.backward_calls += 1;
        Step::Wait
    }

    /// A received backward-direction Reply (RFC 8167 s5.2): matched by XID
    /// to a backward Call in flight on its connection, its grant taken,
    /// handed to the service, and its receive released. Dropped and
    /// counted when nothing matches; refused when it has chunks.
    #[cold]
    #[inline(never)]
    pub(super) fn step_backward_reply(&mut self, i: u32) -> Step {
        let r = self.reqs.get_mut(i).expect("live");
        let conn = r.conn;
        let Some(h) = r.hdr.take() else {
            self.drop_call(i, false);
            return Step::Wait;
        };
        let inline = match h.body {
            Body::Msg { chunks, payload, .. } if chunks.is_empty() => Some(payload),
            _ => None,
        };
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else {
            self.drop_call(i, false);
            return Step::Wait;
        };
        let id = c.id;
        let retired = match inline {
            Some(_) => c.back.retire(h.xid, Some(h.credits)),
            None => c.back.retire(h.xid, None),
        };
        match (retired, inline) {
            (false, _) => self.stats.backward_replies_dropped += 1,
            (true, None) => self.stats.backward_replies_refused += 1,
            (true, Some(msg)) => {
                self.stats.backward_replies += 1;
                self.service.handle_backward_reply(id, msg);
            }
        }
        self.drop_call(i, false);
        // The grant may have changed the limit the service knows.
        self.refresh_backward(conn);
        Step::Wait
    }

    /// An RDMA_ERROR / RDMA2_ERROR with `xid` arrived on connection `slot`:
    /// when it answers a backward Call, the peer does not take them, and the
    /// backchannel is withdrawn (RFC 8167 s4.3.3); any other is ignored, as
    /// before (errors answer no forward Call).
    #[cold]
    #[inline(never)]
    pub(super) fn backward_error(&mut self, slot: u32, xid: u32) {
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if c.back.retire(xid, None) {
            self.stats.backward_errors += 1;
            c.back.refused = true;
            self.refresh_backward(slot);
        } else {
            self.stats.ignored += 1;
        }
    }
}
