//! The requester's connection: RDMA-CM events with RFC 8797 private data,
//! version negotiation (draft -09 s7: the first Call or RDMA2_CONNPROP),
//! and failing every Call in flight when the connection goes. Owning core
//! only.

use super::*;

impl<'p, F: Fabric> Requester<'p, F> {
    pub(super) fn handle_cm(&mut self, ev: CmEvent) {
        match ev {
            CmEvent::Established { conn, private_data } if Some(conn) == self.conn => {
                let peer = private_data::decode(private_data.as_bytes());
                self.neg.apply_private_data(&peer);
                self.refresh_thresholds();
                self.link = LinkState::Negotiating;
                self.start_negotiation();
            }
            CmEvent::Rejected { conn, .. } | CmEvent::Unreachable { conn } if Some(conn) == self.conn => {
                self.link = LinkState::Failed;
                self.fail_all();
            }
            CmEvent::Disconnected { conn } if Some(conn) == self.conn => {
                self.link = LinkState::Failed;
                self.fail_all();
            }
            _ => {}
        }
    }

    /// The first message: a v2 requester sends RDMA2_CONNPROP (draft s5.3.4) and
    /// learns the version from the answer; a v1-only requester is ready at once
    /// and its first Call negotiates.
    pub(super) fn start_negotiation(&mut self) {
        match self.neg.try_send() {
            Ok(p) if p.vers == RPCRDMA_VERSION_2 => self.send_connprop(p.vers),
            Ok(p) => {
                // v1: nothing to exchange before Calls; the credit limit of one
                // until the first reply (draft s7) applies through the credits.
                self.vers = p.vers;
                self.link = LinkState::Ready;
            }
            Err(_) => self.link = LinkState::Failed,
        }
    }

    pub(super) fn send_connprop(&mut self, vers: u32) {
        let Some(conn) = self.conn else { return };
        let Some(b) = self.bufs.get(Class::Send) else {
            self.link = LinkState::Failed;
            return;
        };
        // Tagged so it never equals a Call's XID (those keep bit 31 clear).
        let xid = 0x8000_0000 | self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let rb = self.recv_size.to_be_bytes();
        // Reverse Request Support (draft -09 s4.2.2): inline backward
        // Calls when the backchannel is on, none otherwise (the default,
        // when nothing is said, would be INLINE).
        let brs = match self.cfg.backward_credits {
            0 => header::RDMA2_RVREQSUP_NONE,
            _ => header::RDMA2_RVREQSUP_INLINE,
        }
        .to_be_bytes();
        let props = [
            Property {
                id: RDMA2_PROPID_RBSIZ,
                data: &rb,
            },
            Property {
                id: header::RDMA2_PROPID_BRS,
                data: &brs,
            },
        ];
        let h = HeaderOut {
            xid,
            vers,
            credits: self.credits.request(),
            flags: 0,
            body: BodyOut::ConnProp(&props),
        };
        let out = self.bufs.bytes_mut(b);
        let Ok(n) = header::encode(&h, out) else {
            self.bufs.put(b);
            self.link = LinkState::Failed;
            return;
        };
        let wr = SendWr::new(
            WrId::new(TAG_CTRL, 0),
            SendOp::Send,
            self.bufs.local(b, n as u32),
            Segment::default(),
        );
        if self.fabric.post_send(conn, &wr).is_err() {
            self.bufs.put(b);
            self.link = LinkState::Failed;
            return;
        }
        self.credits.on_send();
        self.connprop_xid = Some(xid);
        self.connprop_buf = Some(b);
    }

    pub(super) fn on_wc_error(&mut self, status: WcStatus) {
        if status != WcStatus::Flushed {
            self.stats.wc_errors += 1;
        }
        if let Some(c) = self.conn {
            let _ = self.fabric.disconnect(c);
        }
        if self.link != LinkState::Failed {
            self.link = LinkState::Failed;
            self.fail_all();
        }
    }

    /// The connection is gone: every Call in flight ends with ConnectionLost.
    pub(super) fn fail_all(&mut self) {
        let ids: Vec<u32> = self.calls.used_indices().collect();
        for i in ids {
            self.hide_call(i);
            let c = self.calls.get_mut(i).expect("used");
            if c.state == CallState::InFlight {
                c.state = CallState::Done;
                c.outcome = Some(CallOutcome::ConnectionLost);
                let xid = c.xid;
                self.credits.on_abandon();
                self.completions.push_back(Completed {
                    id: CallId(i),
                    xid,
                    outcome: CallOutcome::ConnectionLost,
                });
            }
        }
        if let Some(b) = self.connprop_buf.take() {
            self.bufs.put(b);
        }
        self.drop_backward_calls();
    }

    pub(super) fn after_negotiation_input(&mut self) {
        // A version fixed brings its default sizes (draft -09 s4.2.1).
        self.refresh_thresholds();
        match self.neg.phase() {
            Phase::Established => {
                if let Some(v) = self.neg.version() {
                    if v == RPCRDMA_VERSION_1 && self.vers == RPCRDMA_VERSION_2 {
                        self.stats.fallbacks_to_v1 += 1;
                    }
                    self.vers = v;
                }
                self.link = LinkState::Ready;
            }
            Phase::Failed(_) | Phase::Closed => self.link = LinkState::Failed,
            Phase::Negotiating => {
                if let Some(RequesterAction::Resend { params }) = self.neg.poll_action() {
                    // The server does not speak our version: use the one it offered.
                    // v1 needs no CONNPROP; the next Call goes in v1.
                    if params.vers == RPCRDMA_VERSION_1 {
                        self.stats.fallbacks_to_v1 += 1;
                        self.vers = RPCRDMA_VERSION_1;
                        self.link = LinkState::Ready;
                    } else {
                        self.send_connprop(params.vers);
                    }
                }
            }
        }
    }
}
