//! The responder's connections: RDMA-CM events (accept with our RFC 8797
//! private data, establish, disconnect), the connection table, and tearing
//! a connection down with every request it holds. Owning core only.

use super::*;

impl<'p, F: Fabric, S: Service> Responder<'p, F, S> {
    pub(super) fn handle_cm(&mut self, ev: CmEvent) {
        match ev {
            CmEvent::ConnectRequest { req, private_data, .. } => {
                let peer = private_data::decode(private_data.as_bytes());
                let ours = Rfc8797::new(self.cfg.remote_invalidation, self.send_size, self.recv_size);
                let mut pd = [0u8; 8];
                let pd_len = ours.encode(&mut pd).unwrap_or(0);
                if self.conns.available() == 0 || self.draining {
                    self.stats.conns_rejected += 1;
                    let _ = self.fabric.reject(req, &pd[..pd_len]);
                    return;
                }
                let qp = QpConfig {
                    cq: self.cq,
                    srq: Some(self.srq),
                    send_depth: self.cfg.send_depth,
                    recv_depth: 0,
                    max_rdma_reads: self.cfg.max_rdma_reads.min(255) as u8,
                    ..QpConfig::default()
                };
                match self.fabric.accept(req, &qp, &pd[..pd_len]) {
                    Ok(id) => {
                        let slot = self.conns.alloc().expect("checked available");
                        let cfg = negotiate::Config::new(self.cfg.versions, self.send_size, self.recv_size)
                            .expect("sizes checked at construction");
                        let mut neg = negotiate::Responder::new(cfg);
                        // RFC 8797: sizes the peer advertised bound what we
                        // send; `neg` is the one source of the thresholds
                        // (refreshed when the version is fixed and when a
                        // CONNPROP brings the peer's RBSIZ).
                        neg.apply_private_data(&peer);
                        let send_max = neg.reply_inline_threshold_bytes();
                        *self.conns.get_mut(slot).expect("allocated") = Some(Conn {
                            id,
                            state: ConnState::Accepting,
                            credits: ResponderCredits::new(self.cfg.credits),
                            neg,
                            sq_used: 0,
                            reads_out: 0,
                            requests: 0,
                            send_max,
                            remote_inv: private_data::remote_invalidation_allowed(&ours, &peer.data()),
                            peer: self.fabric.peer_addr(id),
                            back: Backchannel::new(self.cfg.backward_credits),
                        });
                        self.conn_by_id.insert(id, slot);
                        self.accepting += 1;
                        self.stats.conns_accepted += 1;
                    }
                    Err(_) => self.stats.conns_rejected += 1,
                }
            }
            CmEvent::Established { conn, .. } => {
                if let Some(c) = self.conn_mut_by_id(conn) {
                    if c.state == ConnState::Accepting {
                        c.state = ConnState::Up;
                        self.accepting -= 1;
                    }
                }
                // A version fixed before the event was seen opens the
                // backchannel now.
                if let Some(&slot) = self.conn_by_id.get(&conn) {
                    self.refresh_backward(slot);
                }
            }
            CmEvent::Disconnected { conn } | CmEvent::Unreachable { conn } | CmEvent::Rejected { conn, .. } => {
                if let Some(&slot) = self.conn_by_id.get(&conn) {
                    self.kill_conn(slot, false);
                }
            }
        }
    }

    pub(super) fn conn_mut_by_id(&mut self, id: ConnId) -> Option<&mut Conn> {
        let slot = *self.conn_by_id.get(&id)?;
        self.conns.get_mut(slot)?.as_mut()
    }

    pub(super) fn conn(&self, slot: u32) -> Option<&Conn> {
        self.conns.get(slot)?.as_ref()
    }

    pub(super) fn conn_mut(&mut self, slot: u32) -> Option<&mut Conn> {
        self.conns.get_mut(slot)?.as_mut()
    }

    /// Tear a connection down: disconnect, release every request that has no
    /// work posted, leave the others to drain their flushed completions.
    pub(super) fn kill_conn(&mut self, slot: u32, disconnect: bool) {
        let Some(c) = self.conn_mut(slot) else { return };
        if c.state == ConnState::Dead {
            return;
        }
        let was_accepting = c.state == ConnState::Accepting;
        c.state = ConnState::Dead;
        let id = c.id;
        if was_accepting {
            self.accepting -= 1;
        }
        if disconnect {
            let _ = self.fabric.disconnect(id);
        }
        self.stats.conns_closed += 1;
        // The service hears the backchannel is gone; backward Calls in
        // flight get no Reply (their slots drain with the requests below).
        self.refresh_backward(slot);
        // Requests of this connection leave every pending queue.
        let reqs = &self.reqs;
        let of_conn = |i: u32| reqs.get(i).is_some_and(|r| r.conn == slot);
        for q in [
            &mut self.wait_chunk_buf,
            &mut self.wait_read_slots,
            &mut self.wait_reply_bufs,
            &mut self.wait_send_slots,
            &mut self.wait_backend,
        ] {
            q.remove_where(of_conn);
        }
        let live: Vec<u32> = self.reqs.used_indices().filter(|&i| of_conn(i)).collect();
        for i in live {
            let r = self.reqs.get_mut(i).expect("live");
            match r.state {
                // Released when the service reports it (see `advance`).
                ReqState::Deferred => continue,
                ReqState::Resume => self.service.cancel(defer_token(i, r.gen)),
                _ => {}
            }
            let r = self.reqs.get_mut(i).expect("live");
            if r.wr_out == 0 {
                self.release(i);
            } else {
                r.state = ReqState::Draining;
            }
        }
        self.maybe_forget_conn(slot);
    }

    /// Forget a dead connection once no request refers to it.
    #[inline]
    pub(super) fn maybe_forget_conn(&mut self, slot: u32) {
        let Some(c) = self.conn(slot) else { return };
        if c.state == ConnState::Dead && c.requests == 0 {
            let id = c.id;
            self.conn_by_id.remove(&id);
            *self.conns.get_mut(slot).expect("live") = None;
            self.conns.free(slot);
        }
    }

    // ------------------------------------------------------------- receives
}
