//! Connection management in the simulated network: listen, connect, accept,
//! reject, disconnect, and a connect request arriving at its listener after
//! the simulated CM delay.

use super::*;

impl Net {
    pub(in crate::fabric::sim) fn listen(&mut self, ep: usize, addr: &str) -> Result<ListenerId, FabricError> {
        if addr.is_empty() {
            return Err(FabricError::BadAddress(String::new()));
        }
        if self.listeners.contains_key(addr) {
            return Err(FabricError::io(
                "listen",
                std::io::Error::new(std::io::ErrorKind::AddrInUse, addr.to_string()),
            ));
        }
        let e = &mut self.eps[ep];
        let id = ListenerId(e.listeners.len() as u32);
        e.listeners.push(addr.to_string());
        self.listeners.insert(addr.to_string(), (ep, id));
        Ok(id)
    }

    pub(in crate::fabric::sim) fn connect(
        &mut self,
        ep: usize,
        addr: &str,
        cfg: &QpConfig,
        pd: &[u8],
    ) -> Result<ConnId, FabricError> {
        if addr.is_empty() {
            return Err(FabricError::BadAddress(String::new()));
        }
        self.check_qp_config(ep, cfg)?;
        let (q, conn) = self.new_qp(ep, cfg, ConnState::Connecting, None);
        let at = self.now_ns + self.cm_delay(ep, ep);
        self.schedule(
            at,
            Event::ConnectArrive {
                qp: q,
                name: addr.to_string(),
                pd: PrivateData::new(pd),
            },
        );
        Ok(conn)
    }

    fn take_req(&mut self, ep: usize, req: ConnReqId) -> Result<ConnReq, FabricError> {
        let r = self.eps[ep]
            .reqs
            .get_mut(req.0 as usize)
            .and_then(Option::take)
            .ok_or(FabricError::UnknownId {
                what: "connection request",
                id: req.0,
            })?;
        self.eps[ep].pending_reqs -= 1;
        Ok(r)
    }

    pub(in crate::fabric::sim) fn accept(
        &mut self,
        ep: usize,
        req: ConnReqId,
        cfg: &QpConfig,
        pd: &[u8],
    ) -> Result<ConnId, FabricError> {
        self.check_qp_config(ep, cfg)?;
        let r = self.take_req(ep, req)?;
        let active = r.active;
        // rdma_accept moves the passive QP to RTS before the REP leaves, so it
        // may post sends at once; they execute once the active side is ready.
        let (p, conn) = self.new_qp(ep, cfg, ConnState::Ready, Some(active));
        let at = self.now_ns + self.cm_delay(ep, self.qps[active].ep);
        if self.qps[active].state == ConnState::Connecting {
            self.qps[active].peer = Some(p);
            self.schedule(
                at,
                Event::AcceptArrive {
                    qp: active,
                    pd: PrivateData::new(pd),
                },
            );
        } else {
            // The active side gave up meanwhile.
            self.schedule(at, Event::PeerDown { qp: p });
        }
        Ok(conn)
    }

    pub(in crate::fabric::sim) fn reject(&mut self, ep: usize, req: ConnReqId, pd: &[u8]) -> Result<(), FabricError> {
        let r = self.take_req(ep, req)?;
        let at = self.now_ns + self.cm_delay(ep, self.qps[r.active].ep);
        self.schedule(
            at,
            Event::RejectArrive {
                qp: r.active,
                pd: PrivateData::new(pd),
            },
        );
        Ok(())
    }

    pub(in crate::fabric::sim) fn disconnect(&mut self, ep: usize, conn: ConnId) -> Result<(), FabricError> {
        let q = self.qp_of(ep, conn)?;
        self.enter_error(q);
        Ok(())
    }

    pub(in crate::fabric::sim) fn poll_cm(&mut self, ep: usize) -> Option<CmEvent> {
        self.auto_step();
        self.eps[ep].cm.pop_front()
    }

    pub(super) fn connect_arrive(&mut self, q: usize, name: &str, pd: PrivateData) {
        if self.qps[q].state != ConnState::Connecting {
            return;
        }
        let conn = self.qps[q].conn;
        let Some(&(lep, listener)) = self.listeners.get(name) else {
            self.close_unconnected(q, CmEvent::Unreachable { conn });
            return;
        };
        if self.eps[lep].pending_reqs >= LISTEN_BACKLOG {
            self.close_unconnected(
                q,
                CmEvent::Rejected {
                    conn,
                    private_data: PrivateData::EMPTY,
                },
            );
            return;
        }
        let e = &mut self.eps[lep];
        let req = ConnReqId(e.reqs.len() as u32);
        e.reqs.push(Some(ConnReq { active: q }));
        e.pending_reqs += 1;
        self.push_cm(
            lep,
            CmEvent::ConnectRequest {
                listener,
                req,
                private_data: pd,
            },
        );
    }
}
