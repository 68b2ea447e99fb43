//! The state machine: [`Responder::advance`] moves a request between
//! [`ReqState`]s, the pending queue of each scarce resource, and a
//! request's release with every buffer it holds. Owning core only.

use super::*;

impl<'p, F: Fabric, S: Service> Responder<'p, F, S> {
    /// Advance request `i` as far as its resources allow. The single place where
    /// request states change (besides completions recording progress).
    pub(super) fn advance(&mut self, i: u32) {
        // A request whose connection went away while it waited drains
        // instead. Checked once: a step that closes the connection returns
        // `Step::Wait`, so it cannot go away between two steps of one call.
        // A `New` request was made from a receive on a live connection
        // (`handle_recv`) a moment ago.
        {
            let Some(r) = self.reqs.get(i) else { return };
            let conn_dead = r.state != ReqState::New && self.conn(r.conn).is_none_or(|c| c.state == ConnState::Dead);
            if conn_dead && r.state != ReqState::Draining {
                match r.state {
                    // The service may still write into its buffers: keep them
                    // until it reports the Call.
                    ReqState::Deferred => return,
                    ReqState::Resume => self.service.cancel(defer_token(i, r.gen)),
                    _ => {}
                }
                if r.wr_out == 0 {
                    self.release(i);
                } else {
                    self.reqs.get_mut(i).expect("live").state = ReqState::Draining;
                }
                return;
            }
        }
        self.run_states(i);
    }

    /// [`Self::advance`] for a request whose connection is live (or that is
    /// draining): step it through its states until one must wait.
    #[inline]
    pub(super) fn run_states(&mut self, i: u32) {
        loop {
            let Some(r) = self.reqs.get(i) else { return };
            debug_assert!(
                r.state == ReqState::Draining || self.conn(r.conn).is_some_and(|c| c.state != ConnState::Dead),
                "request {i} advanced on a dead connection"
            );
            let next = match r.state {
                ReqState::Free | ReqState::Reading | ReqState::Sending | ReqState::Draining | ReqState::Deferred => {
                    return
                }
                ReqState::New => self.step_new(i),
                ReqState::NeedChunkBuf => self.step_chunk_buf(i),
                ReqState::NeedReadSlots => self.step_reads(i),
                ReqState::Execute | ReqState::NeedReplyBufs | ReqState::Resume => self.step_execute(i),
                ReqState::NeedSendSlots => self.step_send(i),
                ReqState::NeedControlSend => self.step_control(i),
                ReqState::BackwardCall => self.step_backward_call(i),
                ReqState::BackwardReply => self.step_backward_reply(i),
            };
            match next {
                Step::Continue => continue,
                Step::Wait => return,
            }
        }
    }

    /// Request `i` (live) and the responder's other parts, borrowed apart:
    /// what each step of [`Self::advance`] works on.
    #[inline(always)]
    pub(super) fn step_parts(&mut self, i: u32) -> StepParts<'_, 'p, F, S> {
        StepParts {
            r: self.reqs.get_mut(i).expect("live"),
            conns: &mut self.conns,
            bufs: &mut self.bufs,
            fabric: &mut self.fabric,
            service: &mut self.service,
            stats: &mut self.stats,
            stages: &mut self.stages,
            cfg: &self.cfg,
            send_size: self.send_size,
            deferred: &mut self.deferred,
        }
    }

    pub(super) fn set_state(&mut self, i: u32, s: ReqState) {
        if let Some(r) = self.reqs.get_mut(i) {
            r.state = s;
        }
    }

    pub(super) fn control(&mut self, i: u32, c: Control) -> Step {
        let r = self.reqs.get_mut(i).expect("live");
        r.control = c;
        r.state = ReqState::NeedControlSend;
        // The answer needs the XID and version only (kept): messages waiting
        // to be answered hold no receive buffer.
        call_buffers_done(r, &mut self.bufs);
        Step::Continue
    }

    /// Drop a message without replying. `counted`: it was accounted as a Call.
    pub(super) fn drop_call(&mut self, i: u32, _counted: bool) {
        if self.reqs.get(i).is_some_and(|r| r.counted) {
            let conn = self.reqs.get(i).map(|r| r.conn);
            if let Some(c) = conn.and_then(|s| self.conn_mut(s)) {
                c.credits.on_drop();
            }
        }
        self.release(i);
    }

    /// Return every buffer a request holds and free its slot. A Call that
    /// counted and was never answered is counted here, by why.
    pub(super) fn release(&mut self, i: u32) {
        let Some(r) = self.reqs.get_mut(i) else { return };
        debug_assert_eq!(r.wr_out, 0, "releasing request {i} with work outstanding");
        if r.counted && !r.replied {
            let conn_lost = self
                .conns
                .get(r.conn)
                .and_then(Option::as_ref)
                .is_none_or(|c| c.state == ConnState::Dead);
            if conn_lost {
                self.stats.unanswered_conn_lost += 1;
            } else {
                self.stats.unanswered_other += 1;
            }
        }
        // The send and head buffers stay with the slot.
        let held = [r.recv.take(), r.chunk_buf.take(), r.data_buf.take()];
        let conn = r.conn;
        let backward = std::mem::take(&mut r.backward);
        // The generation stays (the next request in this slot takes the next
        // one); `start` resets the rest when the slot is reused.
        r.state = ReqState::Free;
        r.hdr = None;
        r.form = ReplyForm::None;
        self.reqs.free(i);
        self.bufs.put_all(held);
        let forget = self.conn_mut(conn).is_some_and(|c| {
            crate::count::dec(&mut c.requests, "connection requests live");
            if backward {
                super::backward::backward_slot_released(c);
            }
            c.state == ConnState::Dead && c.requests == 0
        });
        if forget {
            self.maybe_forget_conn(conn);
        }
    }

    pub(super) fn wait(&mut self, i: u32, q: Queue) -> Step {
        // Sized to the request slots: a request waits in one queue at a time.
        let pushed = self.queue(q).push(i);
        debug_assert!(pushed.is_ok(), "pending queue overflow");
        Step::Wait
    }

    /// Retry waiting requests, in order, per resource.
    pub(super) fn drain_pending(&mut self) -> usize {
        let mut work = 0;
        for q in [
            Queue::ChunkBuf,
            Queue::ReadSlots,
            Queue::ReplyBufs,
            Queue::Backend,
            Queue::SendSlots,
        ] {
            let n = self.queue(q).len();
            for _ in 0..n {
                let Some(i) = self.queue(q).pop() else { break };
                let before = self.queue(q).len();
                self.advance(i);
                work += 1;
                // Still blocked on the same resource: stop, keep FIFO order.
                if self.queue(q).len() > before {
                    break;
                }
            }
        }
        work
    }

    pub(super) fn queue(&mut self, q: Queue) -> &mut IndexQueue {
        match q {
            Queue::ChunkBuf => &mut self.wait_chunk_buf,
            Queue::ReadSlots => &mut self.wait_read_slots,
            Queue::ReplyBufs => &mut self.wait_reply_bufs,
            Queue::SendSlots => &mut self.wait_send_slots,
            Queue::Backend => &mut self.wait_backend,
        }
    }
}

/// Request `r` is answered, or its answer is built: its received message
/// goes back to the pool now rather than when the answer's Send completes,
/// so a peer slow to complete Sends (or posting no receives) holds request
/// slots, not the receive buffers the shared receive queue is refilled from.
/// Its other buffers stay until the Send completes (or it is released).
#[inline(always)]
pub(super) fn call_buffers_done(r: &mut Request<'_>, bufs: &mut EngineBufs<'_>) {
    // The header borrows the receive buffer: gone first.
    r.hdr = None;
    if let Some(b) = r.recv.take() {
        bufs.put(b);
    }
}

/// What a step of one request works on ([`Responder::step_parts`]): the
/// request, and the responder's other parts a step may need.
pub(super) struct StepParts<'a, 'p, F, S> {
    pub(super) r: &'a mut Request<'p>,
    pub(super) conns: &'a mut Slab<Option<Conn>>,
    pub(super) bufs: &'a mut EngineBufs<'p>,
    pub(super) fabric: &'a mut F,
    pub(super) service: &'a mut S,
    pub(super) stats: &'a mut ResponderStats,
    pub(super) stages: &'a mut StageTimer,
    pub(super) cfg: &'a ResponderConfig,
    pub(super) send_size: u32,
    /// Requests in state `Deferred`.
    pub(super) deferred: &'a mut u32,
}
