//! Credit accounting for both roles (RFC 8166 section 3.3; draft -09 section 7 and
//! section 8.2, which keeps the version 1 scheme for version 2).
//!
//! - A Requester may have at most *credit limit* Calls outstanding; the limit is
//!   the most recent grant it received, never more than it asked for (s3.3.1:
//!   the smaller of the requested and the granted credits), and is 1 until
//!   the first valid reply
//!   arrives (draft s7: "MUST NOT send more than a single RPC-over-RDMA message at a
//!   time until it receives a valid non-error RPC-over-RDMA message from the server
//!   that grants client credits"). A grant of zero would stall the Requester; like
//!   the Linux client we floor it at one.
//! - A Responder never grants zero and never grants more than the Receives it holds
//!   for the connection (s3.3.1). Receiving more Calls than it ever granted is a
//!   credit overrun: a protocol error for which the connection is closed, because
//!   with a shared receive queue the extra Calls consume Receives that belong to
//!   other connections.
//!
//! Both books are plain counters owned by the core that owns the connection.

/// The Requester's view: how many Calls may be outstanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequesterCredits {
    limit: u32,
    in_flight: u32,
    /// Highest number of Calls this side wants outstanding (its credit request).
    want: u32,
    granted_once: bool,
}

impl RequesterCredits {
    /// `want`: the credit request put in every Call (at least 1).
    pub const fn new(want: u32) -> Self {
        RequesterCredits {
            limit: 1,
            in_flight: 0,
            want: if want == 0 { 1 } else { want },
            granted_once: false,
        }
    }
    /// The value for `rdma_credit` in a Call.
    pub const fn request(&self) -> u32 {
        self.want
    }
    pub const fn limit(&self) -> u32 {
        self.limit
    }
    pub const fn in_flight(&self) -> u32 {
        self.in_flight
    }
    /// True once a reply has granted credits.
    pub const fn granted(&self) -> bool {
        self.granted_once
    }
    /// May another Call be sent now?
    pub const fn can_send(&self) -> bool {
        self.in_flight < self.limit
    }
    /// Account a Call being sent. Returns false (and changes nothing) if that would
    /// exceed the limit.
    pub fn on_send(&mut self) -> bool {
        if !self.can_send() {
            return false;
        }
        self.in_flight += 1;
        true
    }
    /// Account a Reply carrying `grant`: the new limit is the smaller of
    /// the grant and our request (RFC 8166 s3.3.1), at least one.
    pub fn on_reply(&mut self, grant: u32) {
        debug_assert!(self.in_flight > 0, "reply without a call in flight");
        crate::count::dec(&mut self.in_flight, "requester credits in flight");
        self.on_grant(grant);
    }
    /// Account an RDMA_ERROR / RDMA2_ERROR answering a Call: the Call is no
    /// longer outstanding, and the error's credit field is ignored (draft
    /// -09 s5.3.3: the requester MUST ignore it), so an error never lifts
    /// the one-message limit of negotiation (s7) nor changes the limit.
    pub fn on_error_reply(&mut self) {
        debug_assert!(self.in_flight > 0, "error reply without a call in flight");
        crate::count::dec(&mut self.in_flight, "requester credits in flight");
    }
    /// A message that grants credits without retiring a Call (e.g.
    /// RDMA2_CONNPROP): the limit is the smaller of the grant and our
    /// request, at least one.
    pub fn on_grant(&mut self, grant: u32) {
        self.limit = grant.clamp(1, self.want);
        self.granted_once = true;
    }
    /// A Call was abandoned without a reply (connection lost): forget it.
    pub fn on_abandon(&mut self) {
        crate::count::dec(&mut self.in_flight, "requester credits in flight");
    }
}

/// Why a Responder refuses a Call on credit grounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreditError {
    /// More Calls outstanding than Receives reserved for the connection.
    Overrun { outstanding: u32, reserved: u32 },
}

/// The Responder's book for one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponderCredits {
    /// Receives reserved for this connection (its share of the SRQ, or its own RQ).
    reserved: u32,
    /// Calls received and not yet answered.
    outstanding: u32,
    /// The Requester's latest credit request.
    requested: u32,
    /// Largest grant ever sent (the ceiling the Requester may legitimately use).
    max_granted: u32,
    pub calls_total: u64,
    pub replies_total: u64,
}

impl ResponderCredits {
    /// `reserved` Receives are held for this connection; it must be at least 1.
    pub const fn new(reserved: u32) -> Self {
        let reserved = if reserved == 0 { 1 } else { reserved };
        ResponderCredits {
            reserved,
            outstanding: 0,
            requested: 1,
            // Before the first reply the Requester may send one message (draft s7).
            max_granted: 1,
            calls_total: 0,
            replies_total: 0,
        }
    }
    pub const fn outstanding(&self) -> u32 {
        self.outstanding
    }
    pub const fn reserved(&self) -> u32 {
        self.reserved
    }
    /// Account a received Call carrying credit request `requested`.
    ///
    /// More Calls outstanding than Receives reserved is an overrun (s3.3.1); the
    /// caller closes the connection.
    pub fn on_call(&mut self, requested: u32) -> Result<(), CreditError> {
        if self.outstanding >= self.reserved {
            return Err(CreditError::Overrun {
                outstanding: self.outstanding + 1,
                reserved: self.reserved,
            });
        }
        self.outstanding += 1;
        self.requested = requested;
        self.calls_total += 1;
        Ok(())
    }
    /// The grant to put in the next Reply (or error) on this connection: the
    /// Requester's request, at least 1, at most the Receives reserved (s3.3.1).
    #[inline(always)]
    pub fn grant(&self) -> u32 {
        let g = self.requested.clamp(1, self.reserved);
        debug_assert!(g >= 1 && g <= self.reserved);
        g
    }
    /// Account a Reply being sent with grant `grant` (from [`Self::grant`]).
    pub fn on_reply(&mut self, grant: u32) {
        debug_assert!(self.outstanding > 0, "reply without an outstanding call");
        debug_assert!(grant >= 1 && grant <= self.reserved, "grant out of range");
        crate::count::dec(&mut self.outstanding, "responder credits outstanding");
        self.max_granted = self.max_granted.max(grant);
        self.replies_total += 1;
    }
    /// A Call was dropped without a Reply (connection torn down).
    pub fn on_drop(&mut self) {
        crate::count::dec(&mut self.outstanding, "responder credits outstanding");
    }
    /// Invariant check: calls and replies balance with what is outstanding.
    pub fn check(&self) -> bool {
        self.outstanding <= self.reserved && self.max_granted <= self.reserved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requester_starts_with_one_credit() {
        let mut c = RequesterCredits::new(32);
        assert_eq!(c.request(), 32);
        assert!(c.on_send());
        assert!(!c.on_send(), "only one message before the first grant (draft s7)");
        c.on_reply(16);
        assert_eq!(c.limit(), 16);
        for _ in 0..16 {
            assert!(c.on_send());
        }
        assert!(!c.can_send());
        c.on_reply(0);
        assert_eq!(c.limit(), 1, "a zero grant is floored at one");
        assert_eq!(c.in_flight(), 15);
        assert!(!c.can_send());
    }

    #[test]
    fn responder_grants_within_reserved_and_detects_overrun() {
        let mut r = ResponderCredits::new(4);
        r.on_call(100).unwrap();
        assert_eq!(r.grant(), 4, "never more than the receives reserved");
        r.on_reply(r.grant());
        r.on_call(0).unwrap();
        assert_eq!(r.grant(), 1, "never zero");
        r.on_reply(1);
        for _ in 0..4 {
            r.on_call(4).unwrap();
        }
        assert_eq!(
            r.on_call(4),
            Err(CreditError::Overrun {
                outstanding: 5,
                reserved: 4
            })
        );
        assert!(r.check());
        assert_eq!((r.calls_total, r.replies_total), (6, 2));
    }

    /// A responder that grants more than we asked for (the Linux server
    /// grants its own maximum) does not raise our limit above our request:
    /// more Calls than we posted receives for would end in RNR (RFC 8166
    /// s3.3.1: the smaller of the requested and granted credits). Before,
    /// the limit was the grant alone.
    #[test]
    fn hostile_peer_requester_limit_is_the_smaller_of_request_and_grant() {
        let mut c = RequesterCredits::new(8);
        assert!(c.on_send());
        c.on_reply(1000);
        assert_eq!(c.limit(), 8);
        c.on_grant(1000);
        assert_eq!(c.limit(), 8);
        c.on_grant(3);
        assert_eq!(c.limit(), 3);
    }

    /// An RDMA_ERROR / RDMA2_ERROR's credit field is ignored (draft -09
    /// s5.3.3): it retires its Call but neither lifts the one-message limit
    /// of negotiation nor changes a limit already granted. Before, the error's
    /// credit value became the limit.
    #[test]
    fn hostile_peer_requester_ignores_the_credits_of_an_error_reply() {
        let mut c = RequesterCredits::new(8);
        assert!(c.on_send());
        c.on_error_reply();
        assert_eq!((c.limit(), c.in_flight(), c.granted()), (1, 0, false));
        assert!(c.on_send());
        assert!(!c.on_send(), "still one message at a time (draft s7)");
        c.on_reply(4);
        assert!(c.on_send());
        c.on_error_reply();
        assert_eq!(c.limit(), 4);
    }
}
