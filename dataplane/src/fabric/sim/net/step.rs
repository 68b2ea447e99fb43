//! Stepping virtual time: handing out events in `(time, sequence)` order,
//! running for a duration, and the faults injected as the network steps
//! (lost messages, dropped connections, RNR storms, per-endpoint slowness).

use super::*;

impl Net {
    /// Process the earliest event. False when there is none.
    pub(in crate::fabric::sim) fn step(&mut self) -> bool {
        let Some(((t, _), ev)) = self.events.pop_first() else {
            return false;
        };
        self.now_ns = self.now_ns.max(t);
        self.stats.steps += 1;
        self.inject_step_faults();
        self.handle(ev);
        true
    }

    /// Process every event due within `duration_ns` of now, then move the clock
    /// to that time. Returns the number of steps.
    pub(in crate::fabric::sim) fn run_for(&mut self, duration_ns: u64) -> u64 {
        let target = self.now_ns.saturating_add(duration_ns);
        let mut steps = 0;
        while self.next_event_ns().is_some_and(|t| t <= target) {
            self.step();
            steps += 1;
        }
        self.now_ns = self.now_ns.max(target);
        steps
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Exec { qp } => self.exec(qp),
            Event::Ack { qp } => {
                if let Some((e, n)) = self.qps[qp].inflight.pop_front() {
                    self.complete_send(qp, &e.wr, WcStatus::Success, n);
                }
            }
            Event::ConnectArrive { qp, name, pd } => self.connect_arrive(qp, &name, pd),
            Event::AcceptArrive { qp, pd } => {
                if self.qps[qp].state != ConnState::Connecting {
                    return;
                }
                let Some(p) = self.qps[qp].peer else { return };
                self.qps[qp].state = ConnState::Ready;
                let (ep, conn) = (self.qps[qp].ep, self.qps[qp].conn);
                self.push_cm(ep, CmEvent::Established { conn, private_data: pd });
                let at = self.now_ns + self.cm_delay(ep, self.qps[p].ep);
                self.schedule(at, Event::EstablishedPassive { qp: p });
                self.kick(p);
                self.kick(qp);
            }
            Event::EstablishedPassive { qp } => {
                let x = &self.qps[qp];
                if x.state == ConnState::Ready && !x.terminal_reported {
                    let (ep, conn) = (x.ep, x.conn);
                    self.push_cm(
                        ep,
                        CmEvent::Established {
                            conn,
                            private_data: PrivateData::EMPTY,
                        },
                    );
                }
            }
            Event::RejectArrive { qp, pd } => {
                if self.qps[qp].state == ConnState::Connecting {
                    let conn = self.qps[qp].conn;
                    self.close_unconnected(qp, CmEvent::Rejected { conn, private_data: pd });
                }
            }
            Event::UnreachableArrive { qp } => {
                if self.qps[qp].state == ConnState::Connecting {
                    let conn = self.qps[qp].conn;
                    self.close_unconnected(qp, CmEvent::Unreachable { conn });
                }
            }
            Event::PeerDown { qp } => self.enter_error(qp),
        }
    }

    fn inject_step_faults(&mut self) {
        let f = self.cfg.faults;
        if self.fault_rng.chance(f.flush_error) {
            if let Some(q) = self.random_ready_qp() {
                let (ep, conn) = (self.qps[q].ep, self.qps[q].conn);
                self.fault(ep, Some(conn), FaultKind::FlushError);
                self.enter_error(q);
            }
        }
        if self.fault_rng.chance(f.lost_connection) {
            if let Some(q) = self.random_ready_qp() {
                let (ep, conn) = (self.qps[q].ep, self.qps[q].conn);
                self.fault(ep, Some(conn), FaultKind::LostConnection);
                let peer = self.qps[q].peer;
                self.lose(q);
                if let Some(p) = peer {
                    self.lose(p);
                }
            }
        }
    }

    fn random_ready_qp(&mut self) -> Option<usize> {
        let ready = |x: &Qp| x.state == ConnState::Ready && self.eps[x.ep].alive;
        let n = self.qps.iter().filter(|x| ready(x)).count();
        if n == 0 {
            return None;
        }
        let k = self.fault_rng.index(n);
        self.qps
            .iter()
            .enumerate()
            .filter(|(_, x)| ready(x))
            .nth(k)
            .map(|(i, _)| i)
    }

    /// The link under `q` is gone: its oldest outstanding send work request
    /// exhausts transport retries, the rest is flushed.
    fn lose(&mut self, q: usize) {
        if self.qps[q].state == ConnState::Error {
            return;
        }
        let oldest = match self.qps[q].inflight.pop_front() {
            Some((e, _)) => Some(e),
            None => self.qps[q].pending.pop_front(),
        };
        if let Some(e) = oldest {
            self.complete_send(q, &e.wr, WcStatus::RetryExceeded, 0);
        }
        self.stats.conn_errors += 1;
        self.enter_error(q);
    }
}
