//! RPC-over-RDMA protocol version negotiation as a pure state machine
//! (draft-cel-nfsv4-rpcrdma-version-two-09 section 7, RFC 8166 section 3.3.3).
//!
//! Both sides are sans-IO: the caller feeds events in (`handle_*`), asks what to do
//! next (`try_send`, `poll_action`) and reads the connection parameters
//! (`version`, `call_inline_threshold_bytes`, ...). There is no clock: "the first
//! message was lost" is reported by the caller as [`Requester::handle_connection_lost`].
//!
//! # Rules implemented
//!
//! - **One message at a time** (section 7, RFC 8166 section 3.3.3): after the
//!   connection is established a client MUST NOT send more than a single
//!   RPC-over-RDMA message until it receives a valid non-error message that grants
//!   credits. [`Requester::try_send`] refuses a second send with
//!   [`NegotiateError::InFlight`] until then.
//! - **First message** (section 7): it carries the client's highest version (as
//!   limited by [`PeerMemory`]) and is no larger than the version 1 default inline
//!   threshold, 1024 bytes.
//! - **Server supports the version** (section 7.1): it answers with the same
//!   `rdma_vers`; the version is then fixed and both sides may use that version's
//!   default inline threshold (1024 bytes for version 1, 4096 for version 2,
//!   section 4.2.1) unless RFC 8797 Private Data or RDMA2_CONNPROP (section 5.3.4)
//!   advertised another receive size.
//! - **Server does not** (section 7.2): it answers ERR_VERS / RDMA2_ERR_VERS with
//!   its supported range; the client picks the highest version it supports in that
//!   range and re-sends the message ([`RequesterAction::Resend`]). A version the
//!   server rejected is never tried again on that connection, so a confused server
//!   cannot cause a loop inside one connection.
//! - **Negotiation loop avoidance** (section 7.2): if the connection is lost right
//!   after an ERR_VERS, or while the initial message was outstanding, the client
//!   assumes the server does not support the newer version. That knowledge lives in
//!   a [`PeerMemory`] value the caller keeps across reconnects.
//! - **Version is fixed** (section 7.3): the server replies with the version the
//!   client uses, and the client never changes its version once a valid reply
//!   arrived. The [`Responder`] fixes the version at the first accepted call and
//!   answers calls in any other version with ERR_VERS naming only the fixed version.
//!
//! Both state machines are per connection and owned by the core that runs that
//! connection; they are `Send` but need no synchronisation.

use core::fmt;

use crate::private_data::ParsedPrivateData;

/// Lowest RPC-over-RDMA version this engine speaks (RFC 8166).
pub const MIN_VERSION: u32 = 1;
/// Highest RPC-over-RDMA version this engine speaks (draft -09).
pub const MAX_VERSION: u32 = 2;

/// Version 1 default inline threshold (RFC 8166 section 3.3.3), also the smallest
/// inline threshold any receiver must support.
pub const V1_DEFAULT_INLINE_BYTES: u32 = 1024;
/// Version 2 default inline threshold / Receive Buffer Size (draft -09 sections
/// 4.2.1 and 7.1).
pub const V2_DEFAULT_INLINE_BYTES: u32 = 4096;
/// Largest message a client may send before the version is known (draft -09
/// section 7: "no larger than the version 1 default inline threshold").
pub const NEGOTIATION_INLINE_BYTES: u32 = V1_DEFAULT_INLINE_BYTES;
/// Smallest inline size an endpoint may configure or a peer may advertise (RFC
/// 8166 section 3.3.3: receivers MUST support 1024-byte inline thresholds).
pub const MIN_INLINE_BYTES: u32 = V1_DEFAULT_INLINE_BYTES;

// Versions are tracked in a u32 bit set indexed by version number.
const _: () = assert!(MIN_VERSION >= 1 && MIN_VERSION <= MAX_VERSION && MAX_VERSION < 32);
const _: () = assert!(NEGOTIATION_INLINE_BYTES <= V2_DEFAULT_INLINE_BYTES);
const _: () = assert!(MIN_INLINE_BYTES <= NEGOTIATION_INLINE_BYTES);

/// The default inline threshold of `vers` (RFC 8166 section 3.3.3; draft -09
/// section 7.1), or `None` for a version this engine does not know.
pub const fn default_inline_bytes(vers: u32) -> Option<u32> {
    match vers {
        1 => Some(V1_DEFAULT_INLINE_BYTES),
        2 => Some(V2_DEFAULT_INLINE_BYTES),
        _ => None,
    }
}

/// Why a negotiation step failed. Small and `Copy`; no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NegotiateError {
    /// A configuration value is out of range (versions outside
    /// [`MIN_VERSION`]`..=`[`MAX_VERSION`], `low > high`, or a buffer size below
    /// [`MIN_INLINE_BYTES`]).
    InvalidConfig,
    /// A message is already outstanding and no valid credit-granting reply has
    /// arrived yet (draft -09 section 7): wait for the reply.
    InFlight,
    /// An ERR_VERS must first be answered by re-sending the rejected message; call
    /// [`Requester::poll_action`].
    ResendPending,
    /// A reply arrived while the requester had no message outstanding during
    /// negotiation. The reply is ignored.
    UnexpectedReply,
    /// A reply's `rdma_vers` differs from the version the requester sent or fixed
    /// (draft -09 section 7.3 requires the same version). The reply is ignored.
    VersionMismatch { expected: u32, got: u32 },
    /// ERR_VERS arrived after the version was fixed; the version does not change
    /// (draft -09 section 7.3). The transaction it answers fails.
    VersionFixed { vers: u32 },
    /// The peer's supported range shares no version with ours (or excludes every
    /// version it already rejected). The connection cannot be used.
    NoCommonVersion { peer_low: u32, peer_high: u32 },
    /// The connection was lost; build a new state machine for the next one.
    ConnectionLost,
    /// A peer advertised a receive or send size below [`MIN_INLINE_BYTES`]; the
    /// advertisement is ignored.
    PeerSizeTooSmall { bytes: u32 },
}

impl fmt::Display for NegotiateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::InvalidConfig => write!(f, "invalid negotiation configuration"),
            Self::InFlight => write!(f, "a message is already in flight during version negotiation"),
            Self::ResendPending => write!(f, "the message rejected by ERR_VERS must be re-sent first"),
            Self::UnexpectedReply => write!(f, "reply received with no message in flight"),
            Self::VersionMismatch { expected, got } => {
                write!(f, "reply has rdma_vers {got}, expected {expected}")
            }
            Self::VersionFixed { vers } => {
                write!(f, "ERR_VERS after the connection's version was fixed at {vers}")
            }
            Self::NoCommonVersion { peer_low, peer_high } => {
                write!(f, "no common version with peer range {peer_low}..={peer_high}")
            }
            Self::ConnectionLost => write!(f, "connection lost"),
            Self::PeerSizeTooSmall { bytes } => {
                write!(
                    f,
                    "peer advertised {bytes} bytes, below the {MIN_INLINE_BYTES}-byte minimum"
                )
            }
        }
    }
}

impl std::error::Error for NegotiateError {}

/// An inclusive range of RPC-over-RDMA versions, within
/// [`MIN_VERSION`]`..=`[`MAX_VERSION`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionRange {
    low: u32,
    high: u32,
}

impl VersionRange {
    /// Every version this engine speaks: prefer 2, fall back to 1.
    pub const ALL: Self = Self {
        low: MIN_VERSION,
        high: MAX_VERSION,
    };

    /// `low..=high`; fails with [`NegotiateError::InvalidConfig`] if empty or
    /// outside the versions this engine speaks.
    pub const fn new(low: u32, high: u32) -> Result<Self, NegotiateError> {
        if low < MIN_VERSION || high > MAX_VERSION || low > high {
            return Err(NegotiateError::InvalidConfig);
        }
        Ok(Self { low, high })
    }

    /// Exactly one version.
    pub const fn only(vers: u32) -> Result<Self, NegotiateError> {
        Self::new(vers, vers)
    }

    pub const fn low(&self) -> u32 {
        self.low
    }

    pub const fn high(&self) -> u32 {
        self.high
    }

    pub const fn contains(&self, vers: u32) -> bool {
        self.low <= vers && vers <= self.high
    }
}

/// One endpoint's negotiation settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    versions: VersionRange,
    send_size_bytes: u32,
    receive_size_bytes: u32,
}

impl Default for Config {
    /// Versions 1 and 2, 4096-byte send and receive buffers (the version 2 default).
    fn default() -> Self {
        Self {
            versions: VersionRange::ALL,
            send_size_bytes: V2_DEFAULT_INLINE_BYTES,
            receive_size_bytes: V2_DEFAULT_INLINE_BYTES,
        }
    }
}

impl Config {
    /// `send_size_bytes` is the largest message this endpoint will post in one RDMA
    /// Send, `receive_size_bytes` the size of its posted Receive buffers. Both must
    /// be at least [`MIN_INLINE_BYTES`] (RFC 8166 section 3.3.3). An endpoint that
    /// speaks version 2 without advertising its receive size (RFC 8797 Private Data
    /// or RDMA2_CONNPROP) should post at least [`V2_DEFAULT_INLINE_BYTES`].
    pub const fn new(
        versions: VersionRange,
        send_size_bytes: u32,
        receive_size_bytes: u32,
    ) -> Result<Self, NegotiateError> {
        if send_size_bytes < MIN_INLINE_BYTES || receive_size_bytes < MIN_INLINE_BYTES {
            return Err(NegotiateError::InvalidConfig);
        }
        Ok(Self {
            versions,
            send_size_bytes,
            receive_size_bytes,
        })
    }

    pub const fn versions(&self) -> VersionRange {
        self.versions
    }

    pub const fn send_size_bytes(&self) -> u32 {
        self.send_size_bytes
    }

    pub const fn receive_size_bytes(&self) -> u32 {
        self.receive_size_bytes
    }
}

/// What a client remembers about one server across reconnects (draft -09 section
/// 7.2), so that a server which drops the connection after ERR_VERS, or loses the
/// first message, does not trap the client in a negotiation loop.
///
/// Keep one per server, pass it to [`Requester::new`] and store
/// [`Requester::peer_memory`] back when the connection ends. Reset it to
/// [`PeerMemory::UNKNOWN`] to probe the server's highest version again (e.g. after
/// a server upgrade).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerMemory {
    /// Highest version the server is assumed to support; `u32::MAX` = unknown.
    assumed_high: u32,
}

impl Default for PeerMemory {
    fn default() -> Self {
        Self::UNKNOWN
    }
}

impl PeerMemory {
    /// Nothing known: start with the client's highest version.
    pub const UNKNOWN: Self = Self { assumed_high: u32::MAX };

    /// Highest version the server is assumed to support, if anything was learned.
    pub const fn assumed_high(&self) -> Option<u32> {
        if self.assumed_high == u32::MAX {
            None
        } else {
            Some(self.assumed_high)
        }
    }

    /// Whether the client should assume the server lacks version 2 (draft -09
    /// section 7.2).
    pub const fn assumes_no_v2(&self) -> bool {
        self.assumed_high < 2
    }

    /// Lower the assumed ceiling to `vers`, never below [`MIN_VERSION`].
    fn cap_at(&mut self, vers: u32) {
        let vers = if vers < MIN_VERSION { MIN_VERSION } else { vers };
        if vers < self.assumed_high {
            self.assumed_high = vers;
        }
    }
}

/// How far a [`Requester`] has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No valid credit-granting reply yet: at most one message outstanding.
    Negotiating,
    /// The version is fixed for the rest of the connection.
    Established,
    /// Negotiation failed; the connection cannot be used.
    Failed(NegotiateError),
    /// The connection was lost.
    Closed,
}

/// What the server's answer to an outstanding message was, as seen by the
/// requester (`rdma_vers` is passed separately to [`Requester::handle_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyKind {
    /// A valid non-error message (RDMA_MSG / RDMA_NOMSG, or the v2 equivalents)
    /// with its credit grant (`rdma_credit`).
    Normal { credits: u32 },
    /// RDMA_ERROR / ERR_VERS (v1) or RDMA2_ERROR / RDMA2_ERR_VERS (v2) with the
    /// server's supported range (RFC 8166 section 4.5, draft -09 section 5.3.3).
    VersionError { low: u32, high: u32 },
    /// Any other transport error (ERR_CHUNK, RDMA2_ERR_*): it answers the
    /// outstanding message but grants nothing.
    OtherError,
}

/// Parameters for one message the requester may send now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SendParams {
    /// Value for the transport header's `rdma_vers`.
    pub vers: u32,
    /// Largest message that may go inline (RDMA Send); anything larger needs a
    /// Position-Zero Read chunk.
    pub inline_threshold_bytes: u32,
}

/// Something the requester must do, from [`Requester::poll_action`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequesterAction {
    /// Re-send the message the server rejected with ERR_VERS, re-encoded with
    /// `rdma_vers = params.vers` and within `params.inline_threshold_bytes`
    /// (draft -09 section 7.2). It counts as the one outstanding message.
    Resend { params: SendParams },
}

/// The client (requester) side of version negotiation for one connection.
///
/// Owned by the core that runs the connection.
#[derive(Clone, Debug)]
pub struct Requester {
    config: Config,
    memory: PeerMemory,
    phase: Phase,
    /// Version in use: tentative while negotiating, fixed once established.
    vers: u32,
    /// A message is outstanding (meaningful only while negotiating).
    in_flight: bool,
    /// ERR_VERS was received and the message has not been re-sent yet.
    resend_pending: bool,
    /// Bit `v` set: the server rejected version `v` on this connection.
    rejected: u32,
    /// Latest non-zero credit grant once established; 1 before.
    credit_limit: u32,
    peer_receive_bytes: Option<u32>,
    peer_send_bytes: Option<u32>,
}

impl Requester {
    /// A requester for a fresh connection. The first message uses the highest
    /// configured version not excluded by `memory` (draft -09 sections 7, 7.2); if
    /// `memory` excludes every configured version it is ignored and the lowest
    /// configured version is used, letting the server's ERR_VERS decide.
    pub fn new(config: Config, memory: PeerMemory) -> Self {
        let range = config.versions;
        let mut vers = range.high;
        if memory.assumed_high < vers {
            vers = memory.assumed_high;
        }
        if vers < range.low {
            vers = range.low;
        }
        Self {
            config,
            memory,
            phase: Phase::Negotiating,
            vers,
            in_flight: false,
            resend_pending: false,
            rejected: 0,
            credit_limit: 1,
            peer_receive_bytes: None,
            peer_send_bytes: None,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The connection's version once fixed (draft -09 section 7.3).
    pub fn version(&self) -> Option<u32> {
        match self.phase {
            Phase::Established => Some(self.vers),
            _ => None,
        }
    }

    /// The version the next (or outstanding) message carries, fixed or not.
    pub fn current_version(&self) -> u32 {
        self.vers
    }

    /// Whether a message is outstanding during negotiation (always `false` once
    /// established: credits are accounted elsewhere).
    pub fn in_flight(&self) -> bool {
        self.phase == Phase::Negotiating && self.in_flight
    }

    /// Number of requests the server allows outstanding: 1 until a valid
    /// credit-granting reply (RFC 8166 section 3.3.3), then the latest non-zero
    /// grant (a zero grant is invalid, RFC 8166 section 3.3.1, and is ignored).
    pub fn credit_limit(&self) -> u32 {
        self.credit_limit
    }

    /// The memory to keep for the next connection to this server.
    pub fn peer_memory(&self) -> PeerMemory {
        self.memory
    }

    /// Client-to-server ("call") inline threshold: the smaller of our send size and
    /// the server's receive size, where the server's receive size is what it
    /// advertised ([`Requester::set_peer_receive_size`]) or else the fixed
    /// version's default. Before the version is fixed it is also capped at
    /// [`NEGOTIATION_INLINE_BYTES`] (draft -09 section 7).
    pub fn call_inline_threshold_bytes(&self) -> u32 {
        threshold(self.config.send_size_bytes, self.peer_receive_bytes, self.version())
    }

    /// Server-to-client ("reply") inline threshold: the smaller of our receive size
    /// and the server's send size (advertised, or else the version default). Use it
    /// to decide when a Reply chunk is needed.
    pub fn reply_inline_threshold_bytes(&self) -> u32 {
        threshold(self.config.receive_size_bytes, self.peer_send_bytes, self.version())
    }

    /// Record the server's advertised Receive size (RFC 8797 Receive Size, or the
    /// RDMA2_CONNPROP Receive Buffer Size property, draft -09 section 4.2.1). It
    /// replaces the version default in [`Requester::call_inline_threshold_bytes`].
    ///
    /// # Errors
    /// [`NegotiateError::PeerSizeTooSmall`] below [`MIN_INLINE_BYTES`]; the value
    /// is then ignored.
    pub fn set_peer_receive_size(&mut self, bytes: u32) -> Result<(), NegotiateError> {
        self.peer_receive_bytes = Some(check_peer_size(bytes)?);
        Ok(())
    }

    /// Record the server's advertised Send size (RFC 8797 Send Size).
    ///
    /// # Errors
    /// As [`Requester::set_peer_receive_size`].
    pub fn set_peer_send_size(&mut self, bytes: u32) -> Result<(), NegotiateError> {
        self.peer_send_bytes = Some(check_peer_size(bytes)?);
        Ok(())
    }

    /// Apply the server's RFC 8797 Private Data if some was found; when absent the
    /// version defaults stay in force (RFC 8797 section 5.1 for version 1).
    pub fn apply_private_data(&mut self, parsed: &ParsedPrivateData) {
        if parsed.present() {
            // Decoded sizes are always within 1024..=262144, so neither can fail.
            let data = parsed.data();
            self.peer_receive_bytes = Some(data.receive_size_bytes);
            self.peer_send_bytes = Some(data.send_size_bytes);
        }
    }

    /// Ask to send one new message. Returns the `rdma_vers` to use and the inline
    /// threshold. While negotiating, only one message may be outstanding (draft
    /// -09 section 7); after that, credit accounting is the caller's (this always
    /// succeeds).
    ///
    /// # Errors
    /// [`NegotiateError::InFlight`], [`NegotiateError::ResendPending`],
    /// [`NegotiateError::ConnectionLost`], or the error that failed negotiation.
    pub fn try_send(&mut self) -> Result<SendParams, NegotiateError> {
        match self.phase {
            Phase::Closed => Err(NegotiateError::ConnectionLost),
            Phase::Failed(e) => Err(e),
            Phase::Established => Ok(self.send_params()),
            Phase::Negotiating => {
                if self.resend_pending {
                    Err(NegotiateError::ResendPending)
                } else if self.in_flight {
                    Err(NegotiateError::InFlight)
                } else {
                    self.in_flight = true;
                    Ok(self.send_params())
                }
            }
        }
    }

    /// The next action the caller must take, if any. Taking a
    /// [`RequesterAction::Resend`] marks that message outstanding.
    pub fn poll_action(&mut self) -> Option<RequesterAction> {
        if self.phase == Phase::Negotiating && self.resend_pending {
            self.resend_pending = false;
            self.in_flight = true;
            return Some(RequesterAction::Resend {
                params: self.send_params(),
            });
        }
        None
    }

    /// Feed the server's answer: `vers` is the reply header's `rdma_vers`.
    ///
    /// - Normal reply while negotiating, in the version sent, with a non-zero
    ///   credit grant: the version is fixed and credits become usable (sections
    ///   7.1, 7.3). A zero grant (invalid, RFC 8166 section 3.3.1) answers the
    ///   message but grants nothing: negotiation continues one message at a time.
    /// - ERR_VERS while negotiating: the highest configured version inside
    ///   `low..=high` that the server has not already rejected is chosen and a
    ///   [`RequesterAction::Resend`] is queued (section 7.2). Its `rdma_vers` is
    ///   not checked: the server copies it from our header, but an older server
    ///   may write its own version.
    /// - Other errors answer the outstanding message without granting credits.
    ///
    /// # Errors
    /// - [`NegotiateError::NoCommonVersion`]: ERR_VERS left nothing to try; the
    ///   requester is now [`Phase::Failed`].
    /// - [`NegotiateError::VersionFixed`]: ERR_VERS after the version was fixed;
    ///   nothing changes and that transaction fails.
    /// - [`NegotiateError::VersionMismatch`], [`NegotiateError::UnexpectedReply`]:
    ///   the reply is ignored (state unchanged).
    /// - [`NegotiateError::ConnectionLost`] or the earlier failure after the end.
    pub fn handle_reply(&mut self, vers: u32, kind: ReplyKind) -> Result<(), NegotiateError> {
        match self.phase {
            Phase::Closed => Err(NegotiateError::ConnectionLost),
            Phase::Failed(e) => Err(e),
            Phase::Established => match kind {
                ReplyKind::VersionError { .. } => Err(NegotiateError::VersionFixed { vers: self.vers }),
                ReplyKind::Normal { .. } | ReplyKind::OtherError if vers != self.vers => {
                    Err(NegotiateError::VersionMismatch {
                        expected: self.vers,
                        got: vers,
                    })
                }
                ReplyKind::Normal { credits } => {
                    if credits != 0 {
                        self.credit_limit = credits;
                    }
                    Ok(())
                }
                ReplyKind::OtherError => Ok(()),
            },
            Phase::Negotiating => {
                if !self.in_flight {
                    return Err(NegotiateError::UnexpectedReply);
                }
                match kind {
                    ReplyKind::Normal { .. } | ReplyKind::OtherError if vers != self.vers => {
                        Err(NegotiateError::VersionMismatch {
                            expected: self.vers,
                            got: vers,
                        })
                    }
                    ReplyKind::Normal { credits } => {
                        self.in_flight = false;
                        if credits != 0 {
                            self.phase = Phase::Established;
                            self.credit_limit = credits;
                        }
                        Ok(())
                    }
                    ReplyKind::OtherError => {
                        self.in_flight = false;
                        Ok(())
                    }
                    ReplyKind::VersionError { low, high } => {
                        self.in_flight = false;
                        self.rejected |= 1 << self.vers;
                        match self.pick_version(low, high) {
                            Some(next) => {
                                self.vers = next;
                                self.resend_pending = true;
                                Ok(())
                            }
                            None => {
                                let e = NegotiateError::NoCommonVersion {
                                    peer_low: low,
                                    peer_high: high,
                                };
                                self.phase = Phase::Failed(e);
                                Err(e)
                            }
                        }
                    }
                }
            }
        }
    }

    /// The connection is gone (or the caller gave up waiting for the first reply,
    /// which the draft treats as the initial message being lost).
    ///
    /// While negotiating, this updates [`Requester::peer_memory`] (draft -09
    /// section 7.2):
    /// - lost after an ERR_VERS (whether or not the message was re-sent): the
    ///   server is assumed to support at most the version chosen from its range,
    ///   so the next connection starts there without another ERR_VERS round;
    /// - lost while the initial message in version `v > 1` was outstanding, with
    ///   no ERR_VERS: the server is assumed to support at most `v - 1`.
    ///
    /// Lost before anything was sent, or after establishment, nothing is learned.
    pub fn handle_connection_lost(&mut self) {
        if self.phase == Phase::Negotiating {
            if self.rejected != 0 {
                // The server's own ERR_VERS range named this version; start there
                // next time (this may also raise a stale ceiling).
                self.memory.assumed_high = self.vers;
            } else if self.in_flight && self.vers > MIN_VERSION {
                // The initial message was lost: assume the version was too new.
                self.memory.cap_at(self.vers - 1);
            }
        }
        self.in_flight = false;
        self.resend_pending = false;
        self.phase = Phase::Closed;
    }

    fn send_params(&self) -> SendParams {
        SendParams {
            vers: self.vers,
            inline_threshold_bytes: self.call_inline_threshold_bytes(),
        }
    }

    /// Highest configured version in `low..=high` not yet rejected.
    fn pick_version(&self, low: u32, high: u32) -> Option<u32> {
        let ours = self.config.versions;
        (ours.low..=ours.high)
            .rev()
            .find(|&v| low <= v && v <= high && self.rejected & (1 << v) == 0)
    }
}

/// The server (responder) side of version negotiation for one connection.
///
/// Owned by the core that runs the connection.
#[derive(Clone, Debug)]
pub struct Responder {
    config: Config,
    vers: Option<u32>,
    peer_receive_bytes: Option<u32>,
    peer_send_bytes: Option<u32>,
}

/// What to do with an incoming call, from [`Responder::handle_call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallVerdict {
    /// Process the call and reply with `rdma_vers = vers` (draft -09 section 7.3).
    Accept { vers: u32 },
    /// Do not process the call; answer RDMA_ERROR / ERR_VERS (or RDMA2_ERROR /
    /// RDMA2_ERR_VERS) with this range, copying `rdma_xid` and `rdma_vers` from
    /// the incoming header (RFC 8166 section 4.5, draft -09 section 5.3.3).
    RejectVersion { low: u32, high: u32 },
}

impl Responder {
    pub fn new(config: Config) -> Self {
        Self {
            config,
            vers: None,
            peer_receive_bytes: None,
            peer_send_bytes: None,
        }
    }

    /// The connection's version, fixed by the first accepted call.
    pub fn version(&self) -> Option<u32> {
        self.vers
    }

    /// Classify a call by its `rdma_vers`.
    ///
    /// Before any call was accepted, a configured version is accepted and becomes
    /// the connection's version; anything else is rejected with the configured
    /// range (draft -09 section 7.2). Afterwards only that version is accepted
    /// (section 7.3: the client must not change it); a call in another version is
    /// a protocol error, rejected with the range `vers..=vers` of the fixed version
    /// so that the client is not invited to switch.
    pub fn handle_call(&mut self, vers: u32) -> CallVerdict {
        match self.vers {
            Some(fixed) if vers == fixed => CallVerdict::Accept { vers },
            Some(fixed) => CallVerdict::RejectVersion {
                low: fixed,
                high: fixed,
            },
            None if self.config.versions.contains(vers) => {
                self.vers = Some(vers);
                CallVerdict::Accept { vers }
            }
            None => CallVerdict::RejectVersion {
                low: self.config.versions.low,
                high: self.config.versions.high,
            },
        }
    }

    /// Client-to-server ("call") inline threshold: the smaller of our receive size
    /// and the client's send size (advertised, or else the version default;
    /// [`NEGOTIATION_INLINE_BYTES`] before a version is fixed).
    pub fn call_inline_threshold_bytes(&self) -> u32 {
        threshold(self.config.receive_size_bytes, self.peer_send_bytes, self.vers)
    }

    /// Server-to-client ("reply") inline threshold: the smaller of our send size
    /// and the client's receive size (advertised, or else the version default;
    /// [`NEGOTIATION_INLINE_BYTES`] before a version is fixed). Larger replies
    /// need the client's Reply chunk.
    pub fn reply_inline_threshold_bytes(&self) -> u32 {
        threshold(self.config.send_size_bytes, self.peer_receive_bytes, self.vers)
    }

    /// Record the client's advertised Receive size (RFC 8797 Receive Size or
    /// RDMA2_CONNPROP Receive Buffer Size).
    ///
    /// # Errors
    /// [`NegotiateError::PeerSizeTooSmall`] below [`MIN_INLINE_BYTES`] (ignored).
    pub fn set_peer_receive_size(&mut self, bytes: u32) -> Result<(), NegotiateError> {
        self.peer_receive_bytes = Some(check_peer_size(bytes)?);
        Ok(())
    }

    /// Record the client's advertised Send size (RFC 8797 Send Size).
    ///
    /// # Errors
    /// As [`Responder::set_peer_receive_size`].
    pub fn set_peer_send_size(&mut self, bytes: u32) -> Result<(), NegotiateError> {
        self.peer_send_bytes = Some(check_peer_size(bytes)?);
        Ok(())
    }

    /// Apply the client's RFC 8797 Private Data if some was found.
    pub fn apply_private_data(&mut self, parsed: &ParsedPrivateData) {
        if parsed.present() {
            let data = parsed.data();
            self.peer_receive_bytes = Some(data.receive_size_bytes);
            self.peer_send_bytes = Some(data.send_size_bytes);
        }
    }
}

fn check_peer_size(bytes: u32) -> Result<u32, NegotiateError> {
    if bytes < MIN_INLINE_BYTES {
        Err(NegotiateError::PeerSizeTooSmall { bytes })
    } else {
        Ok(bytes)
    }
}

/// min(own size, peer's advertised size or the default of `fixed`); before a
/// version is fixed the result is also capped at [`NEGOTIATION_INLINE_BYTES`].
fn threshold(own_bytes: u32, peer_bytes: Option<u32>, fixed: Option<u32>) -> u32 {
    let default = fixed.and_then(default_inline_bytes).unwrap_or(NEGOTIATION_INLINE_BYTES);
    let mut t = own_bytes.min(peer_bytes.unwrap_or(default));
    if fixed.is_none() {
        t = t.min(NEGOTIATION_INLINE_BYTES);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_data::{decode, PrivateData};
    use proptest::prelude::*;

    fn cfg(low: u32, high: u32) -> Config {
        Config::new(VersionRange::new(low, high).unwrap(), 8192, 8192).unwrap()
    }

    /// Deliver the server's verdict on `vers` back to the requester the way a
    /// server would: Accept → normal reply with `credits`, Reject → ERR_VERS.
    fn answer(req: &mut Requester, resp: &mut Responder, vers: u32, credits: u32) -> Result<(), NegotiateError> {
        match resp.handle_call(vers) {
            CallVerdict::Accept { vers } => req.handle_reply(vers, ReplyKind::Normal { credits }),
            // The error header copies rdma_vers from the call.
            CallVerdict::RejectVersion { low, high } => req.handle_reply(vers, ReplyKind::VersionError { low, high }),
        }
    }

    #[test]
    fn version_range_validation() {
        assert!(VersionRange::new(1, 2).is_ok());
        assert_eq!(VersionRange::new(0, 2), Err(NegotiateError::InvalidConfig));
        assert_eq!(VersionRange::new(1, 3), Err(NegotiateError::InvalidConfig));
        assert_eq!(VersionRange::new(2, 1), Err(NegotiateError::InvalidConfig));
        assert_eq!(
            Config::new(VersionRange::ALL, 1023, 4096),
            Err(NegotiateError::InvalidConfig)
        );
        assert_eq!(
            Config::new(VersionRange::ALL, 4096, 512),
            Err(NegotiateError::InvalidConfig)
        );
    }

    #[test]
    fn v2_client_v2_server() {
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        let mut resp = Responder::new(cfg(1, 2));
        assert_eq!(req.phase(), Phase::Negotiating);
        assert_eq!(req.call_inline_threshold_bytes(), 1024);
        let p = req.try_send().unwrap();
        assert_eq!(
            p,
            SendParams {
                vers: 2,
                inline_threshold_bytes: 1024
            }
        );
        assert_eq!(req.try_send(), Err(NegotiateError::InFlight));
        answer(&mut req, &mut resp, p.vers, 32).unwrap();
        assert_eq!(req.phase(), Phase::Established);
        assert_eq!(req.version(), Some(2));
        assert_eq!(resp.version(), Some(2));
        assert_eq!(req.credit_limit(), 32);
        // Section 7.1: the version 2 default inline threshold, capped by our sizes.
        assert_eq!(req.call_inline_threshold_bytes(), 4096);
        assert_eq!(req.reply_inline_threshold_bytes(), 4096);
        assert_eq!(resp.reply_inline_threshold_bytes(), 4096);
        assert_eq!(resp.call_inline_threshold_bytes(), 4096);
        // Many sends allowed now.
        for _ in 0..5 {
            assert_eq!(req.try_send().unwrap().vers, 2);
        }
        assert_eq!(req.poll_action(), None);
        assert_eq!(req.peer_memory(), PeerMemory::UNKNOWN);
    }

    #[test]
    fn v2_client_v1_only_server() {
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        let mut resp = Responder::new(cfg(1, 1));
        let p = req.try_send().unwrap();
        assert_eq!(p.vers, 2);
        assert_eq!(resp.handle_call(2), CallVerdict::RejectVersion { low: 1, high: 1 });
        assert_eq!(resp.version(), None);
        req.handle_reply(2, ReplyKind::VersionError { low: 1, high: 1 })
            .unwrap();
        assert_eq!(req.phase(), Phase::Negotiating);
        assert!(!req.in_flight());
        // The rejected message must be re-sent before anything else.
        assert_eq!(req.try_send(), Err(NegotiateError::ResendPending));
        let Some(RequesterAction::Resend { params }) = req.poll_action() else {
            panic!("expected a resend");
        };
        assert_eq!(
            params,
            SendParams {
                vers: 1,
                inline_threshold_bytes: 1024
            }
        );
        assert_eq!(req.poll_action(), None);
        assert!(req.in_flight());
        assert_eq!(req.try_send(), Err(NegotiateError::InFlight));
        answer(&mut req, &mut resp, params.vers, 8).unwrap();
        assert_eq!(req.version(), Some(1));
        assert_eq!(resp.version(), Some(1));
        assert_eq!(req.call_inline_threshold_bytes(), 1024);
        assert_eq!(req.try_send().unwrap().vers, 1);
        // A late ERR_VERS cannot move the version any more (section 7.3).
        assert_eq!(
            req.handle_reply(1, ReplyKind::VersionError { low: 2, high: 2 }),
            Err(NegotiateError::VersionFixed { vers: 1 })
        );
        assert_eq!(req.version(), Some(1));
        // Normal completion does not touch the memory.
        assert_eq!(req.peer_memory(), PeerMemory::UNKNOWN);
    }

    #[test]
    fn v1_client_v2_capable_server() {
        let mut req = Requester::new(cfg(1, 1), PeerMemory::UNKNOWN);
        let mut resp = Responder::new(cfg(1, 2));
        let p = req.try_send().unwrap();
        assert_eq!(p.vers, 1);
        assert_eq!(resp.handle_call(1), CallVerdict::Accept { vers: 1 });
        req.handle_reply(1, ReplyKind::Normal { credits: 4 }).unwrap();
        assert_eq!(req.version(), Some(1));
        assert_eq!(resp.version(), Some(1));
        // Version 1 default thresholds apply on both sides.
        assert_eq!(req.call_inline_threshold_bytes(), 1024);
        assert_eq!(resp.reply_inline_threshold_bytes(), 1024);
        // The server now refuses a version switch with the fixed range only.
        assert_eq!(resp.handle_call(2), CallVerdict::RejectVersion { low: 1, high: 1 });
        assert_eq!(resp.handle_call(7), CallVerdict::RejectVersion { low: 1, high: 1 });
        assert_eq!(resp.handle_call(1), CallVerdict::Accept { vers: 1 });
        assert_eq!(resp.version(), Some(1));
    }

    #[test]
    fn responder_rejects_unknown_versions_before_fixing() {
        let mut resp = Responder::new(cfg(1, 2));
        assert_eq!(resp.handle_call(0), CallVerdict::RejectVersion { low: 1, high: 2 });
        assert_eq!(resp.handle_call(3), CallVerdict::RejectVersion { low: 1, high: 2 });
        assert_eq!(
            resp.handle_call(u32::MAX),
            CallVerdict::RejectVersion { low: 1, high: 2 }
        );
        assert_eq!(resp.version(), None);
        assert_eq!(resp.reply_inline_threshold_bytes(), 1024);
        assert_eq!(resp.handle_call(2), CallVerdict::Accept { vers: 2 });
        assert_eq!(resp.handle_call(1), CallVerdict::RejectVersion { low: 2, high: 2 });
    }

    #[test]
    fn only_one_message_before_a_credit_grant() {
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        assert!(req.try_send().is_ok());
        assert_eq!(req.try_send(), Err(NegotiateError::InFlight));
        assert_eq!(req.credit_limit(), 1);
        // ERR_CHUNK answers it but grants no credits: one more single message.
        req.handle_reply(2, ReplyKind::OtherError).unwrap();
        assert_eq!(req.phase(), Phase::Negotiating);
        assert!(req.try_send().is_ok());
        assert_eq!(req.try_send(), Err(NegotiateError::InFlight));
        // A zero grant is invalid (RFC 8166 s3.3.1): still one at a time.
        req.handle_reply(2, ReplyKind::Normal { credits: 0 }).unwrap();
        assert_eq!(req.phase(), Phase::Negotiating);
        assert_eq!(req.credit_limit(), 1);
        assert!(req.try_send().is_ok());
        assert_eq!(req.try_send(), Err(NegotiateError::InFlight));
        // A reply in the wrong version is ignored and does not free the slot.
        assert_eq!(
            req.handle_reply(1, ReplyKind::Normal { credits: 10 }),
            Err(NegotiateError::VersionMismatch { expected: 2, got: 1 })
        );
        assert_eq!(req.try_send(), Err(NegotiateError::InFlight));
        req.handle_reply(2, ReplyKind::Normal { credits: 10 }).unwrap();
        assert_eq!(req.phase(), Phase::Established);
        assert_eq!(req.credit_limit(), 10);
        assert!(req.try_send().is_ok());
        assert!(req.try_send().is_ok());
    }

    #[test]
    fn unsolicited_reply_is_refused() {
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        assert_eq!(
            req.handle_reply(2, ReplyKind::Normal { credits: 5 }),
            Err(NegotiateError::UnexpectedReply)
        );
        assert_eq!(req.phase(), Phase::Negotiating);
        assert_eq!(req.version(), None);
    }

    #[test]
    fn version_never_changes_once_fixed() {
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.try_send().unwrap();
        req.handle_reply(2, ReplyKind::Normal { credits: 3 }).unwrap();
        assert_eq!(
            req.handle_reply(1, ReplyKind::Normal { credits: 3 }),
            Err(NegotiateError::VersionMismatch { expected: 2, got: 1 })
        );
        assert_eq!(
            req.handle_reply(2, ReplyKind::VersionError { low: 1, high: 1 }),
            Err(NegotiateError::VersionFixed { vers: 2 })
        );
        assert_eq!(req.poll_action(), None);
        // Zero grants are ignored after establishment too.
        req.handle_reply(2, ReplyKind::Normal { credits: 0 }).unwrap();
        assert_eq!(req.credit_limit(), 3);
        req.handle_reply(2, ReplyKind::Normal { credits: 7 }).unwrap();
        assert_eq!(req.credit_limit(), 7);
        assert_eq!(req.version(), Some(2));
        assert_eq!(req.try_send().unwrap().vers, 2);
    }

    #[test]
    fn loop_avoidance_after_err_vers_and_lost_connection() {
        // Connection 1: ERR_VERS 1..1, then the server drops the connection.
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.try_send().unwrap();
        req.handle_reply(2, ReplyKind::VersionError { low: 1, high: 1 })
            .unwrap();
        req.handle_connection_lost();
        assert_eq!(req.phase(), Phase::Closed);
        assert_eq!(req.try_send(), Err(NegotiateError::ConnectionLost));
        assert_eq!(req.poll_action(), None);
        let memory = req.peer_memory();
        assert!(memory.assumes_no_v2());
        assert_eq!(memory.assumed_high(), Some(1));
        // Connection 2 starts with version 1 directly: no ERR_VERS needed.
        let mut req = Requester::new(cfg(1, 2), memory);
        let mut resp = Responder::new(cfg(1, 1));
        let p = req.try_send().unwrap();
        assert_eq!(p.vers, 1);
        answer(&mut req, &mut resp, p.vers, 2).unwrap();
        assert_eq!(req.version(), Some(1));
        assert!(req.peer_memory().assumes_no_v2());
    }

    #[test]
    fn loop_avoidance_after_lost_resend() {
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.try_send().unwrap();
        req.handle_reply(2, ReplyKind::VersionError { low: 1, high: 1 })
            .unwrap();
        assert!(matches!(req.poll_action(), Some(RequesterAction::Resend { .. })));
        req.handle_connection_lost();
        assert_eq!(req.peer_memory().assumed_high(), Some(1));
    }

    #[test]
    fn loop_avoidance_when_first_message_is_lost() {
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        assert_eq!(req.try_send().unwrap().vers, 2);
        req.handle_connection_lost();
        assert!(req.peer_memory().assumes_no_v2());
        assert_eq!(Requester::new(cfg(1, 2), req.peer_memory()).current_version(), 1);
    }

    #[test]
    fn connection_loss_without_evidence_learns_nothing() {
        // Lost before anything was sent.
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.handle_connection_lost();
        assert_eq!(req.peer_memory(), PeerMemory::UNKNOWN);
        // Lost after a successful negotiation.
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.try_send().unwrap();
        req.handle_reply(2, ReplyKind::Normal { credits: 1 }).unwrap();
        req.try_send().unwrap();
        req.handle_connection_lost();
        assert_eq!(req.peer_memory(), PeerMemory::UNKNOWN);
        // A v1-only client losing its v1 message cannot go lower.
        let mut req = Requester::new(cfg(1, 1), PeerMemory::UNKNOWN);
        req.try_send().unwrap();
        req.handle_connection_lost();
        assert_eq!(req.peer_memory(), PeerMemory::UNKNOWN);
    }

    #[test]
    fn stale_memory_is_corrected_by_err_vers() {
        // Memory says v1, but this server is v2-only now: ERR_VERS 2..2 moves the
        // client up to 2 (version 1 is marked rejected).
        let mut memory = PeerMemory::UNKNOWN;
        memory.cap_at(1);
        let mut req = Requester::new(cfg(1, 2), memory);
        let mut resp = Responder::new(cfg(2, 2));
        let p = req.try_send().unwrap();
        assert_eq!(p.vers, 1);
        answer(&mut req, &mut resp, p.vers, 4).unwrap();
        let Some(RequesterAction::Resend { params }) = req.poll_action() else {
            panic!("expected a resend");
        };
        assert_eq!(params.vers, 2);
        answer(&mut req, &mut resp, params.vers, 4).unwrap();
        assert_eq!(req.version(), Some(2));

        // Same, but the server drops the connection after its ERR_VERS: the
        // memory is raised to the version the server named, so the next
        // connection does not repeat the ERR_VERS round (section 7.2).
        let mut req = Requester::new(cfg(1, 2), memory);
        assert_eq!(req.try_send().unwrap().vers, 1);
        req.handle_reply(1, ReplyKind::VersionError { low: 2, high: 2 })
            .unwrap();
        req.handle_connection_lost();
        assert_eq!(req.peer_memory().assumed_high(), Some(2));
        assert_eq!(Requester::new(cfg(1, 2), req.peer_memory()).current_version(), 2);
    }

    #[test]
    fn memory_excluding_every_version_is_ignored() {
        let mut memory = PeerMemory::UNKNOWN;
        memory.cap_at(1);
        let req = Requester::new(cfg(2, 2), memory);
        assert_eq!(req.current_version(), 2);
    }

    #[test]
    fn err_vers_without_common_version_fails() {
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.try_send().unwrap();
        let e = NegotiateError::NoCommonVersion {
            peer_low: 3,
            peer_high: 5,
        };
        assert_eq!(req.handle_reply(2, ReplyKind::VersionError { low: 3, high: 5 }), Err(e));
        assert_eq!(req.phase(), Phase::Failed(e));
        assert_eq!(req.try_send(), Err(e));
        assert_eq!(req.poll_action(), None);
        assert_eq!(req.handle_reply(2, ReplyKind::Normal { credits: 1 }), Err(e));
        // An inverted (empty) range is also "no common version".
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.try_send().unwrap();
        assert!(matches!(
            req.handle_reply(2, ReplyKind::VersionError { low: 2, high: 1 }),
            Err(NegotiateError::NoCommonVersion { .. })
        ));
    }

    #[test]
    fn err_vers_naming_the_rejected_version_cannot_loop() {
        // A confused server rejects 2 but claims to support 1..=2; then rejects 1.
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.try_send().unwrap();
        req.handle_reply(2, ReplyKind::VersionError { low: 1, high: 2 })
            .unwrap();
        let Some(RequesterAction::Resend { params }) = req.poll_action() else {
            panic!("expected a resend");
        };
        assert_eq!(params.vers, 1);
        assert!(matches!(
            req.handle_reply(1, ReplyKind::VersionError { low: 1, high: 2 }),
            Err(NegotiateError::NoCommonVersion {
                peer_low: 1,
                peer_high: 2
            })
        ));
    }

    #[test]
    fn advertised_sizes_override_defaults() {
        // Server advertised RFC 8797 Private Data: send 2048, receive 16384.
        let server_pd = PrivateData::new(false, 2048, 16_384).to_bytes().unwrap();
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.apply_private_data(&decode(&server_pd));
        // Still capped at 1024 while negotiating (section 7).
        assert_eq!(req.try_send().unwrap().inline_threshold_bytes, 1024);
        req.handle_reply(2, ReplyKind::Normal { credits: 2 }).unwrap();
        // min(our send 8192, server receive 16384); min(our receive 8192, server send 2048).
        assert_eq!(req.call_inline_threshold_bytes(), 8192);
        assert_eq!(req.reply_inline_threshold_bytes(), 2048);
        // A CONNPROP-style update later replaces it.
        req.set_peer_receive_size(6000).unwrap();
        assert_eq!(req.call_inline_threshold_bytes(), 6000);
        assert_eq!(
            req.set_peer_receive_size(512),
            Err(NegotiateError::PeerSizeTooSmall { bytes: 512 })
        );
        assert_eq!(req.call_inline_threshold_bytes(), 6000);
        // Absent private data leaves the defaults.
        let mut req = Requester::new(cfg(1, 2), PeerMemory::UNKNOWN);
        req.apply_private_data(&decode(&[1, 2, 3]));
        req.try_send().unwrap();
        req.handle_reply(2, ReplyKind::Normal { credits: 2 }).unwrap();
        assert_eq!(req.call_inline_threshold_bytes(), 4096);

        let mut resp = Responder::new(cfg(1, 2));
        resp.set_peer_receive_size(32_768).unwrap();
        resp.set_peer_send_size(2048).unwrap();
        assert_eq!(resp.reply_inline_threshold_bytes(), 1024);
        assert_eq!(resp.handle_call(1), CallVerdict::Accept { vers: 1 });
        assert_eq!(resp.reply_inline_threshold_bytes(), 8192);
        assert_eq!(resp.call_inline_threshold_bytes(), 2048);
        assert_eq!(
            resp.set_peer_send_size(0),
            Err(NegotiateError::PeerSizeTooSmall { bytes: 0 })
        );
    }

    #[derive(Clone, Copy, Debug)]
    enum Op {
        TrySend,
        PollAction,
        Reply(u32, ReplyKind),
        Lost,
        PeerRecv(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        let vers = prop_oneof![0u32..4, Just(u32::MAX)];
        let kind = prop_oneof![
            (0u32..5).prop_map(|credits| ReplyKind::Normal { credits }),
            (0u32..4, 0u32..4).prop_map(|(low, high)| ReplyKind::VersionError { low, high }),
            Just(ReplyKind::OtherError),
        ];
        prop_oneof![
            4 => Just(Op::TrySend),
            3 => Just(Op::PollAction),
            6 => (vers, kind).prop_map(|(v, k)| Op::Reply(v, k)),
            1 => Just(Op::Lost),
            1 => any::<u32>().prop_map(Op::PeerRecv),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn requester_invariants(low in 1u32..=2, high_off in 0u32..=1, cap in 0u32..4,
                                ops in proptest::collection::vec(op(), 0..40)) {
            let high = (low + high_off).min(MAX_VERSION);
            let mut memory = PeerMemory::UNKNOWN;
            if cap > 0 { memory.cap_at(cap); }
            let config = cfg(low, high);
            let mut req = Requester::new(config, memory);
            // Messages sent since the last answer the requester accepted.
            let mut outstanding = 0u32;
            let mut fixed: Option<u32> = None;
            for op in ops {
                let was_negotiating = req.phase() == Phase::Negotiating;
                match op {
                    Op::TrySend => {
                        if let Ok(p) = req.try_send() {
                            prop_assert!(config.versions().contains(p.vers));
                            if was_negotiating {
                                outstanding += 1;
                                prop_assert!(p.inline_threshold_bytes <= NEGOTIATION_INLINE_BYTES);
                            }
                        }
                    }
                    Op::PollAction => {
                        if let Some(RequesterAction::Resend { params }) = req.poll_action() {
                            prop_assert!(was_negotiating);
                            prop_assert!(config.versions().contains(params.vers));
                            outstanding += 1;
                        }
                    }
                    Op::Reply(v, k) => {
                        let r = req.handle_reply(v, k);
                        if was_negotiating && matches!(r, Ok(()) | Err(NegotiateError::NoCommonVersion { .. })) {
                            outstanding = 0;
                        }
                    }
                    Op::Lost => {
                        req.handle_connection_lost();
                        prop_assert_eq!(req.phase(), Phase::Closed);
                    }
                    Op::PeerRecv(b) => {
                        let _ = req.set_peer_receive_size(b);
                    }
                }
                if req.phase() == Phase::Negotiating {
                    prop_assert!(outstanding <= 1, "two messages outstanding before credits");
                    prop_assert_eq!(req.credit_limit(), 1);
                    prop_assert!(req.call_inline_threshold_bytes() <= NEGOTIATION_INLINE_BYTES);
                }
                if let Some(v) = fixed {
                    // Once fixed, the version never changes and the phase never
                    // goes back to negotiating.
                    prop_assert!(matches!(req.phase(), Phase::Established | Phase::Closed));
                    prop_assert_eq!(req.current_version(), v);
                }
                if let Some(v) = req.version() {
                    prop_assert!(config.versions().contains(v));
                    prop_assert!(req.credit_limit() >= 1);
                    fixed = Some(v);
                }
                prop_assert!(req.call_inline_threshold_bytes() >= MIN_INLINE_BYTES);
                prop_assert!(req.call_inline_threshold_bytes() <= config.send_size_bytes());
                let mem = req.peer_memory().assumed_high();
                prop_assert!(mem.unwrap_or(MIN_VERSION) >= MIN_VERSION);
            }
        }

        #[test]
        fn responder_invariants(low in 1u32..=2, high_off in 0u32..=1,
                                calls in proptest::collection::vec(prop_oneof![0u32..5, Just(u32::MAX)], 0..30)) {
            let high = (low + high_off).min(MAX_VERSION);
            let mut resp = Responder::new(cfg(low, high));
            let mut fixed: Option<u32> = None;
            for vers in calls {
                match resp.handle_call(vers) {
                    CallVerdict::Accept { vers: v } => {
                        prop_assert_eq!(v, vers);
                        prop_assert!((low..=high).contains(&v));
                        if let Some(f) = fixed { prop_assert_eq!(f, v); }
                        fixed = Some(v);
                    }
                    CallVerdict::RejectVersion { low: l, high: h } => {
                        match fixed {
                            Some(f) => {
                                prop_assert_ne!(f, vers);
                                prop_assert_eq!((l, h), (f, f));
                            }
                            None => {
                                prop_assert!(!(low..=high).contains(&vers));
                                prop_assert_eq!((l, h), (low, high));
                            }
                        }
                    }
                }
                prop_assert_eq!(resp.version(), fixed);
            }
        }

        #[test]
        fn any_client_meets_any_server(cl in 1u32..=2, ch_off in 0u32..=1,
                                       sl in 1u32..=2, sh_off in 0u32..=1, cap in 0u32..3) {
            let (ch, sh) = ((cl + ch_off).min(2), (sl + sh_off).min(2));
            let mut memory = PeerMemory::UNKNOWN;
            if cap > 0 { memory.cap_at(cap); }
            let mut req = Requester::new(cfg(cl, ch), memory);
            let mut resp = Responder::new(cfg(sl, sh));
            let mut p = req.try_send().unwrap();
            let mut result = answer(&mut req, &mut resp, p.vers, 16);
            // At most one ERR_VERS round with two versions.
            if let Some(RequesterAction::Resend { params }) = req.poll_action() {
                p = params;
                result = answer(&mut req, &mut resp, p.vers, 16);
            }
            prop_assert_eq!(req.poll_action(), None);
            let common_high = ch.min(sh);
            let common_low = cl.max(sl);
            if common_low <= common_high {
                prop_assert_eq!(result, Ok(()));
                let v = req.version().unwrap();
                prop_assert_eq!(resp.version(), Some(v));
                prop_assert!(common_low <= v && v <= common_high);
                // Without memory the best common version is found.
                if cap == 0 { prop_assert_eq!(v, common_high); }
            } else {
                let failed = matches!(result, Err(NegotiateError::NoCommonVersion { .. }));
                prop_assert!(failed);
                prop_assert_eq!(resp.version(), None);
            }
        }
    }
}
