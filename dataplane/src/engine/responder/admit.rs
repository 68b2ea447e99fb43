//! Receives and admission: the shared receive queue kept full, completions
//! dispatched by their `wr_id` tag, a received message turned into a request,
//! its header decoded and checked (RFC 8166 s4; draft -09 s5, s7) and the
//! Call admitted against the connection's credits (RFC 8166 s3.3.1).
//! Owning core only.

use super::*;

impl<'p, F: Fabric, S: Service> Responder<'p, F, S> {
    pub(super) fn refill_srq(&mut self) {
        while self.srq_deficit > 0 {
            let Some(slot) = self.srq_free.pop() else { return };
            let Some(b) = self.bufs.get(Class::Recv) else {
                self.srq_free.push(slot);
                self.stats.recv_refill_stalls += 1;
                return;
            };
            let wr = RecvWr {
                wr_id: WrId::new(TAG_RECV, slot as u64),
                buf: self.bufs.local(b, self.recv_size),
            };
            if self.fabric.post_srq_recv(self.srq, &wr).is_err() {
                self.srq_free.push(slot);
                self.bufs.put(b);
                return;
            }
            self.srq_slots[slot as usize] = Some(b);
            self.srq_posted += 1;
            self.srq_deficit -= 1;
        }
    }

    /// A batch of `n` completions was polled: when a Call among them may be
    /// the next one timed from arrival to reply ([`Service::reply_timing_every`];
    /// at most `n` of them are Calls), read the clock now, before any of
    /// them is handled, so a timed Call's time includes its wait behind the
    /// batch's earlier completions.
    #[inline(always)]
    pub(super) fn batch_polled(&mut self, n: usize) {
        if let Some(origin) = self.reply_clock {
            if self.reply_tick as usize + n >= self.reply_every as usize {
                let now = self.service.reply_clock_now();
                self.batch_ns = (now.saturating_duration_since(origin).as_nanos() as u64).max(1);
            }
        }
    }

    pub(super) fn handle_completion(&mut self, wc: Completion) {
        match wc.wr_id.tag() {
            TAG_RECV => self.handle_recv(wc),
            TAG_REQ => self.handle_req_completion(wc),
            _ => self.stats.ignored += 1,
        }
    }

    pub(super) fn handle_recv(&mut self, wc: Completion) {
        let slot = wc.wr_id.index() as usize;
        let Some(b) = self.srq_slots.get_mut(slot).and_then(Option::take) else {
            self.stats.ignored += 1;
            return;
        };
        self.srq_free.push(slot as u32);
        crate::count::dec(&mut self.srq_posted, "SRQ receives posted");
        self.srq_deficit += 1;
        let slot = self.conn_by_id.get(&wc.conn).copied();
        if !wc.status.is_success() {
            // SRQ receives only fail for the message that hit them (e.g. too long).
            self.bufs.put(b);
            if wc.status != WcStatus::Flushed {
                self.stats.wc_errors += 1;
                if let Some(s) = slot {
                    self.kill_conn(s, true);
                }
            }
            return;
        }
        let share = self.cfg.conn_share();
        let Self {
            conns,
            reqs,
            bufs,
            stats,
            ..
        } = self;
        let live = slot.and_then(|s| Some((s, conns.get_mut(s)?.as_mut()?)));
        let Some((slot, c)) = live.filter(|(_, c)| c.state != ConnState::Dead) else {
            bufs.put(b);
            stats.ignored += 1;
            return;
        };
        // Every received message is charged to its connection, Call or not
        // (errors, MSGP, CONNPROP, DONE, v2 RESPONSE are answered or dropped
        // outside the credits): one that would hold more than its share of
        // request slots is closed, so it cannot take another connection's.
        if c.requests >= share {
            bufs.put(b);
            stats.share_overruns += 1;
            self.kill_conn(slot, true);
            return;
        }
        let Some(i) = reqs.alloc() else {
            // Cannot happen: the slots are every connection's share.
            debug_assert!(false, "request slots exhausted");
            bufs.put(b);
            stats.dropped += 1;
            return;
        };
        c.requests += 1;
        debug_assert!(c.requests <= share, "connection {slot} over its share");
        let recv_len = wc.byte_len.min(self.recv_size);
        let r = reqs.get_mut(i).expect("allocated");
        r.start(slot, b, recv_len);
        r.t0 = self.polled_at;
        if self.reply_clock.is_some() {
            self.reply_tick += 1;
            if self.reply_tick >= self.reply_every {
                self.reply_tick = 0;
                r.arrived_ns = self.batch_ns;
            }
        }
        self.advance(i);
    }

    pub(super) fn handle_req_completion(&mut self, wc: Completion) {
        let idx = wc.wr_id.index();
        let (i, gen) = ((idx & 0xffff_ffff) as u32, (idx >> 32) as u32 & 0xff_ffff);
        let Some(r) = self.reqs.get_mut(i) else {
            self.stats.ignored += 1;
            return;
        };
        if r.gen & 0xff_ffff != gen {
            self.stats.ignored += 1;
            return;
        }
        crate::count::dec(&mut r.wr_out, "request work requests outstanding");
        let conn = r.conn;
        if let Some(c) = self.conn_mut(conn) {
            crate::count::dec(&mut c.sq_used, "connection send-queue slots used");
            if wc.opcode == WcOpcode::RdmaRead {
                crate::count::dec(&mut c.reads_out, "connection RDMA Reads outstanding");
            }
        }
        let r = self.reqs.get_mut(i).expect("live");
        if !wc.status.is_success() {
            r.failed = true;
            if wc.status != WcStatus::Flushed {
                self.stats.wc_errors += 1;
            }
            // An error completion means the QP is in error: tear it down.
            self.kill_conn(conn, true);
            if let Some(r) = self.reqs.get_mut(i) {
                if r.wr_out == 0 {
                    self.release(i);
                }
            }
            return;
        }
        match (r.state, wc.opcode) {
            // A Read completes while its request is `Reading` (all posted)
            // or still `NeedReadSlots` (posted in turns: a chunk with more
            // segments than the connection's free Read slots). Either way it
            // counts; a request that still waits for slots sits in that
            // queue, which `drain_pending` retries, so only the last
            // completion of a fully posted request moves it on.
            (ReqState::Reading | ReqState::NeedReadSlots, WcOpcode::RdmaRead) => {
                r.reads_done += 1;
                debug_assert!(
                    r.reads_done <= r.reads_posted,
                    "request {i}: more Reads done than posted"
                );
                if r.reads_done == r.reads_total {
                    debug_assert_eq!(r.state, ReqState::Reading);
                    r.state = ReqState::Execute;
                    self.advance(i);
                }
            }
            // The reply (or the drain after an error) is done when no work is left.
            (ReqState::Sending | ReqState::Draining, _) if r.wr_out == 0 => {
                self.reaps_this_turn += usize::from(r.state == ReqState::Sending);
                self.release(i)
            }
            // One of a reply's several Writes (or its Send before them).
            (ReqState::Sending, _) => self.reaps_this_turn += 1,
            _ => {}
        }
    }

    // ------------------------------------------------------------- the state machine

    /// Decode and validate the received message, and admit it as a Call.
    ///
    /// A chunk-free RDMA_MSG / RDMA2_MSG (three empty lists: how NULL,
    /// GETATTR, LOOKUP and most small Calls travel) on a connection whose
    /// version is already fixed to its own (draft s7.3) is decoded in one
    /// step (`header::decode_chunk_free_msg`, which the fuzz targets check
    /// against `header::decode` on every input) and goes straight to
    /// `Execute`: version negotiation would accept it and change nothing,
    /// and it has no Read to plan. Everything else takes the general decode.
    #[inline]
    pub(super) fn step_new(&mut self, i: u32) -> Step {
        let p = self.step_parts(i);
        let (r, conns, bufs, stats, stages) = (p.r, p.conns, p.bufs, p.stats, p.stages);
        let conn = r.conn;
        let b = r.recv.expect("new request holds its receive");
        let msg = &bufs.bytes(b)[..r.recv_len as usize];
        if let Some(h) = header::decode_chunk_free_msg(msg) {
            let Some(c) = conns.get_mut(conn).and_then(Option::as_mut) else {
                return Step::Wait;
            };
            // An RPC Reply (a backward-direction Reply, or a v2 RESPONSE
            // that is none) takes the general path (RFC 8167 s5.2; draft
            // s3.2).
            let steady = c.neg.version() == Some(h.vers) && !backward::carries_rpc_reply(&h);
            if steady {
                if !admit(c, r, stats, h.credits) {
                    return self.overrun(i, conn);
                }
                r.xid = h.xid;
                r.vers = h.vers;
                let payload_len = h.payload().map_or(0, <[u8]>::len) as u32;
                plan::plan_inline_call_into(payload_len, &mut r.read_plan);
                r.hdr = Some(h);
                r.chunk_free = true;
                r.reads_total = 0;
                r.state = ReqState::Execute;
                stages.lap(LAP_DECODED, r.t0);
                return Step::Continue;
            }
        }
        self.step_new_general(i, msg, conn)
    }

    /// `step_new` for every message but a chunk-free Call in the steady
    /// state: version negotiation, the whole header's decode and checks,
    /// admission and the Read plan.
    #[inline(never)]
    pub(super) fn step_new_general(&mut self, i: u32, msg: &'p [u8], conn: u32) -> Step {
        let Some(prefix) = header::peek_prefix(msg) else {
            // Too short to answer at all (RFC 8166 s4.5 needs the XID): drop.
            self.stats.dropped += 1;
            self.drop_call(i, false);
            return Step::Wait;
        };
        let rr = self.reqs.get_mut(i).expect("live");
        rr.xid = prefix.xid;
        rr.vers = prefix.vers;
        // Version negotiation (draft s7): unknown versions, or a change of version
        // on a connection whose version is fixed, get ERR_VERS.
        let verdict = match self.conn_mut(conn) {
            Some(c) => {
                let v = c.neg.handle_call(prefix.vers);
                // A version fixed brings its default sizes (RFC 8166 s3.3.3;
                // draft -09 s4.2.1: RBSIZ 4096 when the peer sent none).
                c.send_max = c.neg.reply_inline_threshold_bytes();
                v
            }
            None => return Step::Wait,
        };
        if let CallVerdict::RejectVersion { low, high } = verdict {
            // A version we speak but the connection is fixed to another: answer in
            // that version's layout. A version we do not speak: the v1 layout,
            // which every version shares, under the peer's version word (RFC 8166
            // s4.5, draft s7.2; as Linux svcrdma does).
            let ctl = match prefix.vers {
                v if !self.cfg.versions.contains(v) => Control::ErrVersRaw(v),
                RPCRDMA_VERSION_2 => Control::ErrorV2(header::V2Error::Vers { low, high }),
                _ => Control::ErrorV1(header::V1Error::Vers { low, high }),
            };
            return self.control(i, ctl);
        }
        // Decoded straight into the request (the header is a large value:
        // no copies of it on the way).
        let Self {
            reqs,
            conns,
            cfg,
            stats,
            ..
        } = self;
        let rr = reqs.get_mut(i).expect("live");
        let h = match header::decode(msg, &cfg.limits) {
            Ok(h) => rr.hdr.insert(h),
            Err(e) => {
                let (lo, hi) = (cfg.versions.low(), cfg.versions.high());
                let ctl = if prefix.vers == RPCRDMA_VERSION_2 {
                    Control::ErrorV2(e.v2_reply(lo, hi))
                } else {
                    Control::ErrorV1(e.v1_reply(lo, hi))
                };
                return self.control(i, ctl);
            }
        };
        let refuse = match h.body {
            Body::Msg { .. } | Body::NoMsg { .. } => None,
            Body::ConnProp(props) => {
                // The peer's Receive Buffer Size bounds what we send it
                // (draft -09 s4.2.1, s7.1); the default when it sends none.
                if let Some(c) = conns.get_mut(conn).and_then(Option::as_mut) {
                    let _ = c.neg.set_peer_receive_size(props.rbsiz());
                    c.send_max = c.neg.reply_inline_threshold_bytes();
                    // The peer's Reverse Request Support (draft -09 s4.2.2):
                    // NONE closes the backchannel, anything else allows
                    // inline backward Calls (the only kind sent).
                    c.back.refused = props.brs() == header::RDMA2_RVREQSUP_NONE;
                }
                Some(Control::ConnProp)
            }
            // RFC 8166 s4.6: no longer used; answer ERR_CHUNK.
            Body::MsgP { .. } => Some(Control::ErrorV1(header::V1Error::Chunk)),
            // An error answering a backward Call withdraws the backchannel
            // (`backward_error`).
            Body::ErrorV1(_) | Body::ErrorV2(_) if self.cfg.backward_credits > 0 => {
                let xid = h.xid;
                self.backward_error(conn, xid);
                self.drop_call(i, false);
                return Step::Wait;
            }
            // RDMA_DONE is ignored (s4.6); errors answer no forward Call.
            Body::Done | Body::ErrorV1(_) | Body::ErrorV2(_) => {
                stats.ignored += 1;
                self.drop_call(i, false);
                return Step::Wait;
            }
        };
        let (reply, vers, requested) = (backward::carries_rpc_reply(h), h.vers, h.credits);
        // A version fixed opens the backchannel, once a v2 peer's CONNPROP
        // had its say (RFC 8167; draft -09 s4.2.2: BRS defaults to inline
        // support).
        self.refresh_backward(conn);
        if let Some(ctl) = refuse {
            return self.control(i, ctl);
        }
        // An RPC Reply is a backward-direction Reply (RFC 8167 s5.2; in v2
        // the RESPONSE flag, draft s3.2): never a Call. Without a
        // backchannel a v2 one is answered as a Call that must not carry
        // RESPONSE.
        if reply {
            if vers == RPCRDMA_VERSION_2 && self.cfg.backward_credits == 0 {
                return self.control(i, Control::ErrorV2(header::V2Error::BadXdr));
            }
            self.set_state(i, ReqState::BackwardReply);
            return Step::Continue;
        }
        if !self.admit_call(i, conn, requested) {
            return Step::Wait;
        }
        let Self {
            reqs, cfg, data_size, ..
        } = self;
        let rr = reqs.get_mut(i).expect("live");
        let limits = ReadLimits {
            max_total_bytes: cfg.max_read_bytes.min(*data_size as u64),
            max_chunks: cfg.limits.max_read_chunks,
            max_segments: cfg.limits.max_read_segments,
        };
        // From here on the Call holds a credit: its reply, an error reply
        // included, or its drop gives it back.
        let Request {
            hdr,
            read_plan,
            chunk_offs,
            reads_total,
            chunk_free,
            state,
            vers,
            ..
        } = rr;
        let Some(h) = hdr.as_ref() else { return Step::Wait };
        if let Err(e) = plan::plan_reads_into(h, &limits, read_plan) {
            let ctl = if *vers == RPCRDMA_VERSION_2 {
                Control::ErrorV2(e.v2())
            } else {
                Control::ErrorV1(e.v1())
            };
            return self.control(i, ctl);
        }
        for (k, o) in chunk_offs.iter_mut().enumerate().take(read_plan.chunk_count()) {
            *o = read_plan.chunk_offset(k as u32).unwrap_or(0);
        }
        *reads_total = h.chunks().map_or(0, |c| c.reads.segment_count() as u32);
        *chunk_free = matches!(h.body, Body::Msg { chunks, .. } if chunks.is_empty());
        *state = if *reads_total > 0 {
            ReqState::NeedChunkBuf
        } else {
            ReqState::Execute
        };
        self.stages.lap(LAP_DECODED, rr.t0);
        Step::Continue
    }

    /// Admit request `i` as a Call on connection `conn` whose header asks
    /// for `requested` credits: one credit of the connection's, counted in
    /// the statistics; from here on the Call ends in one counted way
    /// ([`ResponderStats::unaccounted`]). A Call beyond the receives the
    /// connection may use is a credit overrun (RFC 8166 s3.3.1: with an SRQ
    /// the extra Calls eat other connections' receives): the message is
    /// dropped and the connection closed; `false` then.
    #[inline]
    pub(super) fn admit_call(&mut self, i: u32, conn: u32, requested: u32) -> bool {
        let (Some(c), Some(r)) = (self.conns.get_mut(conn).and_then(Option::as_mut), self.reqs.get_mut(i)) else {
            self.drop_call(i, false);
            return false;
        };
        if !admit(c, r, &mut self.stats, requested) {
            let _ = self.overrun(i, conn);
            return false;
        }
        true
    }

    /// Request `i` is one Call more than connection `conn` may have
    /// outstanding: a credit overrun (RFC 8166 s3.3.1). The message is
    /// dropped and the connection closed.
    #[cold]
    #[inline(never)]
    pub(super) fn overrun(&mut self, i: u32, conn: u32) -> Step {
        self.stats.credit_overruns += 1;
        self.drop_call(i, false);
        self.kill_conn(conn, true);
        Step::Wait
    }
}

/// Admission proper, for `admit_call` and `step_new`'s steady-state branch
/// (which has the connection at hand): one of connection `c`'s credits for
/// request `r`, whose header asks for `requested` (RFC 8166 s3.3.1), the
/// Call counted, and the connection's inline threshold copied into the
/// request. `false`, having changed nothing, when it would be a credit
/// overrun.
#[inline(always)]
fn admit(c: &mut Conn, r: &mut Request<'_>, stats: &mut ResponderStats, requested: u32) -> bool {
    if c.credits.on_call(requested).is_err() {
        return false;
    }
    stats.calls += 1;
    r.counted = true;
    r.inline_max = c.send_max;
    true
}
