//! The interface between the responder engine and the RPC services above it.
//!
//! A decoded Call reaches a [`Service`] as a [`CallView`]: borrowed slices of the
//! receive buffer and of the buffer the Read chunks were pulled into, in stream
//! order, with no copy. The service writes its Reply's head (RPC reply header and
//! results) with a [`ReplyBuilder`] and may attach one data item (e.g. NFS READ
//! data) in a registered buffer the engine provides, which the engine moves with
//! RDMA Write into the requester's Write chunk when one was provided.
//!
//! Services run on the core that owns the connection.

use proto::plan::{FixedVec, Piece, PLAN_WRITE_CHUNKS};
use proto::ulb::DdpItem;

use crate::fabric::ConnId;

/// A reassembled Call, as borrowed pieces.
#[derive(Debug, Clone, Copy)]
pub struct CallView<'a> {
    pub conn: ConnId,
    /// The peer's IP address, when the fabric can tell (access control).
    pub peer: Option<std::net::IpAddr>,
    /// RPC-over-RDMA version of the connection.
    pub vers: u32,
    pub xid: u32,
    pub(crate) pieces: &'a [Piece],
    pub(crate) inline: &'a [u8],
    pub(crate) chunk_area: &'a [u8],
    pub(crate) chunk_offsets: &'a [u32],
    pub(crate) token: Option<DeferToken>,
}

/// Names a Call whose reply a service deferred ([`ReplyBuilder::defer`]):
/// the engine's request slot and that slot's generation, so a token that
/// comes back late (after its request was reused) is recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeferToken(pub u64);

impl<'a> CallView<'a> {
    /// A view over one contiguous message (tests and the TCP path).
    /// `piece` must be `[Piece::Inline { start: 0, len: msg.len() }]`.
    pub fn contiguous(
        conn: ConnId,
        peer: Option<std::net::IpAddr>,
        vers: u32,
        xid: u32,
        msg: &'a [u8],
        piece: &'a [Piece; 1],
    ) -> Self {
        CallView {
            conn,
            peer,
            vers,
            xid,
            pieces: piece,
            inline: msg,
            chunk_area: &[],
            chunk_offsets: &[],
            token: None,
        }
    }

    /// The token under which this Call's reply may be deferred
    /// ([`ReplyBuilder::defer`]); `None` where the caller answers at once
    /// (the TCP path, tests).
    pub fn defer_token(&self) -> Option<DeferToken> {
        self.token
    }

    /// Total length of the reassembled Call.
    pub fn len(&self) -> usize {
        self.slices().map(|s| s.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The Call's bytes in stream order, one slice per piece (chunk data includes
    /// its XDR padding, which the engine zero-fills).
    pub fn slices(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (inline, area, offs) = (self.inline, self.chunk_area, self.chunk_offsets);
        self.pieces.iter().map(move |p| match *p {
            Piece::Inline { start, len } => inline.get(start as usize..(start + len) as usize).unwrap_or(&[]),
            Piece::Chunk { index, len, pad } => {
                let at = offs.get(index as usize).copied().unwrap_or(0) as usize;
                area.get(at..at + len as usize + pad as usize).unwrap_or(&[])
            }
        })
    }

    /// The first piece: for every Call this engine builds, it holds at least the
    /// RPC header and the procedure's fixed arguments up to the first chunk.
    pub fn head(&self) -> &'a [u8] {
        self.slices().next().unwrap_or(&[])
    }

    /// Data of Read chunk `index` (without padding), the zero-copy path for
    /// DDP-eligible arguments such as NFS WRITE data.
    pub fn chunk(&self, index: usize) -> Option<&'a [u8]> {
        self.pieces.iter().find_map(|p| match *p {
            Piece::Chunk { index: i, len, .. } if i as usize == index => {
                let at = *self.chunk_offsets.get(index)? as usize;
                self.chunk_area.get(at..at + len as usize)
            }
            _ => None,
        })
    }

    /// Copy the whole Call into `out` (tests, and services that want one buffer).
    /// Returns the bytes copied; stops when `out` is full.
    pub fn copy_to(&self, out: &mut [u8]) -> usize {
        let mut n = 0;
        for s in self.slices() {
            let k = s.len().min(out.len() - n);
            out[n..n + k].copy_from_slice(&s[..k]);
            n += k;
            if n == out.len() {
                break;
            }
        }
        n
    }
}

/// Builds one Reply: a head written into an engine buffer and an optional data
/// item in a registered data buffer.
#[derive(Debug)]
pub struct ReplyBuilder<'a> {
    head: &'a mut [u8],
    head_len: usize,
    data: Option<&'a mut [u8]>,
    data_len: usize,
    data_ddp: bool,
    data_used: bool,
    deferred: bool,
    head_items: FixedVec<DdpItem, PLAN_WRITE_CHUNKS>,
    stat_tag: u16,
}

impl<'a> ReplyBuilder<'a> {
    /// A builder over a head buffer and an optional data buffer (the engine's,
    /// or a TCP server's own).
    pub fn new(head: &'a mut [u8], data: Option<&'a mut [u8]>) -> Self {
        ReplyBuilder {
            head,
            head_len: 0,
            data,
            data_len: 0,
            data_ddp: false,
            data_used: false,
            deferred: false,
            head_items: FixedVec::new(),
            stat_tag: 0,
        }
    }
    /// A tag of the service's own for this Call's statistics (e.g. its
    /// procedure), handed back with [`Service::reply_posted`] when the Call
    /// is timed. 0 unless set.
    pub fn set_stat_tag(&mut self, tag: u16) {
        self.stat_tag = tag;
    }
    /// The reply will be built later, by [`Service::resume`], once the
    /// service reports the Call's [`CallView::defer_token`] from
    /// [`Service::poll_deferred`] (e.g. when its backend I/O into the data
    /// buffer completes). The engine keeps the Call's buffers (the data
    /// buffer too) until then, whatever `handle_call` returns. Only for
    /// Calls that have a token.
    pub fn defer(&mut self) {
        self.deferred = true;
    }
    /// Whether [`ReplyBuilder::defer`] was called.
    pub fn is_deferred(&self) -> bool {
        self.deferred
    }
    /// Mark `len` bytes at `offset` of the head as a DDP-eligible item (RFC 8166
    /// s6.1), e.g. a result whose bytes the service encoded in the head. Items
    /// must be added in stream order, must not overlap, and come before the data
    /// item. Returns false (and marks nothing) if that is violated or too many
    /// items are marked.
    pub fn add_head_item(&mut self, offset: usize, len: usize) -> bool {
        let (Ok(offset), Ok(len)) = (u32::try_from(offset), u32::try_from(len)) else {
            return false;
        };
        let end = offset as u64 + len as u64;
        let after_last = self
            .head_items
            .last()
            .is_none_or(|l| offset as u64 >= l.offset as u64 + l.len as u64);
        // One slot stays free for the data item.
        if end > self.head.len() as u64 || !after_last || self.head_items.len() + 1 >= PLAN_WRITE_CHUNKS {
            return false;
        }
        self.head_items.push(DdpItem { offset, len })
    }
    /// Room for the head (the RPC reply header and results, without the data item).
    pub fn head_mut(&mut self) -> &mut [u8] {
        self.head
    }
    /// Set how many head bytes were written (multiple of 4 for valid XDR).
    pub fn set_head_len(&mut self, n: usize) {
        self.head_len = n.min(self.head.len());
    }
    pub fn head_len(&self) -> usize {
        self.head_len
    }
    /// Bytes of the data item attached ([`ReplyBuilder::set_data`]; 0 without one).
    pub fn data_len(&self) -> usize {
        if self.data_used {
            self.data_len
        } else {
            0
        }
    }
    /// Capacity of the data buffer (0 when the engine has none for this call).
    pub fn data_capacity(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.len())
    }
    /// The registered data buffer, to fill with the data item (a backend reads
    /// straight into it). `None` when the engine had no data buffer to give.
    pub fn data_mut(&mut self) -> Option<&mut [u8]> {
        self.data.as_deref_mut()
    }
    /// Attach `len` bytes of the data buffer as the item that follows the head in
    /// the reply stream. `ddp`: the item is DDP-eligible (RFC 8166 s6.1), so it may
    /// travel in a Write chunk. Its XDR padding is added by the engine.
    pub fn set_data(&mut self, len: usize, ddp: bool) {
        self.data_len = len.min(self.data_capacity());
        self.data_ddp = ddp;
        self.data_used = true;
    }
    /// The finished reply's shape (head length, data item, DDP items).
    pub fn finish(&self) -> ReplyShape {
        let mut items = FixedVec::new();
        for it in self.head_items.iter() {
            if it.offset as u64 + it.len as u64 <= self.head_len as u64 {
                // Capacity: head items are at most PLAN_WRITE_CHUNKS - 1.
                let _ = items.push(*it);
            }
        }
        let data_len = if self.data_used { self.data_len as u32 } else { 0 };
        if self.data_used && self.data_ddp {
            // Capacity: add_head_item keeps one slot free for this item.
            let _ = items.push(DdpItem {
                offset: self.head_len as u32,
                len: data_len,
            });
        }
        ReplyShape {
            head_len: self.head_len as u32,
            data_len,
            has_data: self.data_used,
            items,
            stat_tag: self.stat_tag,
        }
    }
}

/// What a finished [`ReplyBuilder`] holds, for the engine's planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplyShape {
    pub head_len: u32,
    pub data_len: u32,
    pub has_data: bool,
    /// DDP-eligible items of the unreduced reply, in stream order.
    pub items: FixedVec<DdpItem, PLAN_WRITE_CHUNKS>,
    /// [`ReplyBuilder::set_stat_tag`]'s tag.
    pub stat_tag: u16,
}

impl ReplyShape {
    /// Padding after the data item.
    pub fn pad(&self) -> u32 {
        if self.has_data {
            (4 - self.data_len % 4) % 4
        } else {
            0
        }
    }
    /// Unreduced reply length: head, data, padding.
    pub fn stream_len(&self) -> u64 {
        self.head_len as u64 + self.data_len as u64 + self.pad() as u64
    }
    /// The DDP-eligible items of the unreduced reply.
    pub fn items(&self) -> &[DdpItem] {
        &self.items
    }
}

/// What a service reports for a Call it cannot answer with an RPC reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceError {
    /// Drop the Call without a reply, on purpose: another instance of it
    /// answers (a retransmission of a Call still in progress). The engine
    /// releases the Call's resources and its credit and counts it
    /// (`ResponderStats::unanswered_service_drop`); the requester's RPC
    /// layer waits for the first instance's reply or retransmits.
    Drop,
    /// The message cannot be answered at the RPC level: it is not an RPC
    /// Call, its header does not decode far enough to name a reply, or no
    /// reply fits. The engine answers with the transport's error for the
    /// Call's XID (RFC 8166 s4.5 ERR_CHUNK in version 1, draft -09 s5.3.3
    /// RDMA2_ERR_SYSTEM in version 2), so the requester gets its credit
    /// back and ends the RPC at once instead of at a time-out.
    Reject,
    /// A resource the Call needs is exhausted for now (the backend's I/O
    /// queue is full). The engine keeps the Call, with its buffers, in the
    /// pending queue of that resource and runs it again (`handle_call`,
    /// from the start) on a later turn, in arrival order: the client waits
    /// for its reply instead of getting NFS3ERR_JUKEBOX and retrying
    /// seconds later. Only answered this way to a Call the engine may defer
    /// ([`CallView::defer_token`] is set); other transports never see it.
    Busy,
}

/// An RPC service the responder engine dispatches decoded Calls to.
pub trait Service {
    /// Handle one Call and build its Reply. Runs on the connection's core.
    fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError>;

    /// How many bytes of data buffer this Call's reply may need (e.g. the count of
    /// an NFS READ), so the engine attaches a data buffer. Default: none.
    fn reply_data_hint(&mut self, _call: &CallView<'_>) -> usize {
        0
    }

    /// Whether this service writes a Call's data item within `handle_call`
    /// and never defers a Call that has a data buffer. Then the engine may
    /// give it, as the data buffer, the requester's own memory behind the
    /// Call's single Write chunk, where the provider maps that memory here
    /// ([`crate::Fabric::remote_window`]: shm), and the data item reaches the
    /// requester with the service's one copy instead of two (into the data
    /// buffer, then the RDMA Write). The buffer holds nothing the service did
    /// not write, like a fresh data buffer. Default: no.
    fn fills_data_in_call(&self) -> bool {
        false
    }

    /// Deferred Calls whose replies can now be built: write their tokens to
    /// `ready` (at most its length) and return how many. The engine polls
    /// this every turn while it holds deferred Calls. Default: none.
    fn poll_deferred(&mut self, _ready: &mut [DeferToken]) -> usize {
        0
    }

    /// Build the reply of a deferred Call that [`Service::poll_deferred`]
    /// reported: the same Call view and reply buffers as its `handle_call`
    /// had (the head's length 0 again; the bytes of the head and data buffers
    /// as the service left them, with any I/O it started into either while
    /// the Call was deferred landed there).
    /// May defer again. Default: reject the Call.
    fn resume(
        &mut self,
        _token: DeferToken,
        _call: &CallView<'_>,
        _reply: &mut ReplyBuilder<'_>,
    ) -> Result<(), ServiceError> {
        Err(ServiceError::Reject)
    }

    /// The engine will not resume `token` (its connection went away while the
    /// Call was deferred): forget it. Called only for reported tokens.
    fn cancel(&mut self, _token: DeferToken) {}

    /// Time one Call in this many from its arrival to its reply posted,
    /// and report each with [`Service::reply_posted`]; 0 (the default): none.
    /// Asked once, when the engine is made.
    fn reply_timing_every(&self) -> u32 {
        0
    }

    /// The clock the engine times replies with (both ends of a timed
    /// Call's interval). `Instant::now()` by default; a service on a reactor
    /// core gives the core's cheap clock, so that timing costs no system call
    /// where the OS clock has no vDSO path. Called on the engine's core.
    fn reply_clock_now(&self) -> std::time::Instant {
        std::time::Instant::now()
    }

    /// A timed Call's reply was posted (its Send, after its RDMA Writes)
    /// `ns` nanoseconds after the engine polled the batch of completions
    /// that delivered the Call: its wait behind the work of that batch
    /// handled before it and of any pending queue, its service (a deferred
    /// Call's backend I/O included), and its reply's posting. `tag`: the
    /// reply's [`ReplyBuilder::set_stat_tag`]. Replies the engine builds
    /// itself (transport errors) are not reported.
    fn reply_posted(&mut self, _tag: u16, _ns: u64) {}

    // The backward direction (RFC 8167; in version 2, draft -09's RPCRDMA2_F_RESPONSE flag):
    // the service (NFSv4 callbacks) calls the client on a connection the
    // client offered for it. The engine owns credits, receives and framing;
    // the service owns which connection a callback goes on and what it says.

    /// Whether any backward-direction Call is waiting to be sent. Cheap: the
    /// engine asks once per turn and polls [`Service::poll_backward_call`]
    /// only when it says yes. Default: never.
    fn has_backward_calls(&self) -> bool {
        false
    }

    /// A backward-direction Call for `conn`: the whole RPC Call message (the
    /// service chooses its XID) written into `buf`; its length, or `None`
    /// when nothing waits for this connection. The engine asks only for a
    /// connection whose backchannel is usable ([`Service::backward_channel`])
    /// and has a backward credit free; `buf` is at most the peer's backward
    /// inline size (RFC 8167 s4: backward messages carry no chunks), and a
    /// Call that does not fit is not sent: the service answers it as failed.
    fn poll_backward_call(&mut self, _conn: ConnId, _buf: &mut [u8]) -> Option<usize> {
        None
    }

    /// The Reply to a backward-direction Call arrived on `conn`: the whole
    /// RPC Reply message (peer input: decode it as hostile).
    fn handle_backward_reply(&mut self, _conn: ConnId, _msg: &[u8]) {}

    /// `conn` can now carry backward-direction Calls with `chan`'s limits,
    /// or (`None`) no longer can (closed, lost, or the peer withdrew its
    /// receives); Calls in flight on it get no Reply.
    fn backward_channel(&mut self, _conn: ConnId, _chan: Option<BackwardChannel>) {}
}

/// What a connection's backward direction allows (RFC 8167 s4-5): the
/// backward Calls the requester can take at once (its backward credits),
/// and the largest backward Call and Reply, inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardChannel {
    pub credits: u16,
    pub max_call_bytes: u32,
    pub max_reply_bytes: u32,
}

/// Errors setting up an engine (responder or requester).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Fabric(#[from] crate::fabric::FabricError),
    #[error(transparent)]
    Pool(#[from] mempool::MempoolError),
    #[error("configuration: {0}")]
    Config(String),
}
