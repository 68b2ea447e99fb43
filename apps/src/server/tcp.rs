//! The target's RPC services over TCP with record marking (RFC 5531 s11).
//!
//! Mount helpers reach MOUNT over TCP even for RDMA mounts, and clients
//! without RDMA (and comparisons) use NFS over TCP. This is control-path and
//! compatibility code, not the data plane: one listener thread per port and
//! one thread per connection with blocking I/O, each connection with its own
//! [`NfsService`] (own backend channels) and its own buffers, bounded in
//! number ([`TcpOptions::max_conns`]) and in record size
//! ([`TcpOptions::max_record_bytes`]). The connections of one listener share
//! one duplicate request cache behind a mutex (held only to look a Call up
//! and to store its reply), so a Call a client resends on a new connection
//! after a reconnect is answered from it ([`crate::nfs::drc`]).
//!
//! A TCP peer is hostile, so no connection holds its slot, its thread or
//! shutdown for long:
//! - a connection with no complete record for [`TcpOptions::idle_timeout`] is
//!   closed, and so is one whose record (every fragment, s11) has not arrived
//!   whole [`TcpOptions::record_timeout`] after its first byte (a sender
//!   trickling one byte at a time), or whose reply cannot be written whole
//!   within [`TcpOptions::write_timeout`] (a client that stops reading);
//! - when `max_conns` connections are open, a new one closes the idlest
//!   (the one whose last complete record is oldest) instead of being
//!   refused; it is refused only while every connection is serving a Call;
//! - [`TcpServer::finish`] gives connections a bounded grace to finish the
//!   Call they serve, then closes them.
//!
//! Evictions, refusals and timeouts are counted ([`TcpStats`]) and logged at
//! most once a second per listener, with the counts since the last line.
//!
//! The backward direction (RFC 8881 s2.10.3.1: NFSv4.1 callbacks on the
//! client's own connection; RFC 5531 s9, s11): each connection is offered
//! to its service as a backchannel ([`Service::backward_channel`]) for as
//! long as it lives. Backward Calls the service has
//! ([`Service::poll_backward_call`]) are written as records on the same
//! socket, between forward Replies (after each Call served, and while the
//! connection waits for a record); a record whose `msg_type` is REPLY is
//! the Reply to one of them, handed to [`Service::handle_backward_reply`]
//! when its XID names a backward Call in flight on this connection and
//! dropped and counted otherwise. At most [`TCP_BACKWARD_CALLS`] are in
//! flight per connection.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dataplane::fabric::ConnId;
use dataplane::service::{BackwardChannel, CallView, ReplyBuilder, Service};
use proto::plan::Piece;
use proto::rpc::{RecordMark, RM_BYTES};

use crate::nfs::drc::{ReplyCache, DRC_ENTRIES};
use crate::nfs::{NfsService, NfsShared, ReplyCacheRef};

/// Limits of one TCP listener.
#[derive(Clone, Copy, Debug)]
pub struct TcpOptions {
    /// Connections served at once; a new one beyond it closes the idlest.
    pub max_conns: usize,
    /// Largest Call record (all fragments); a larger one closes the connection.
    pub max_record_bytes: usize,
    /// Room for a reply's data item (NFS READ data): the largest READ served.
    pub max_data_bytes: usize,
    /// Core index the connection threads' backend channels are opened for.
    pub service_core: usize,
    /// No complete record for this long closes the connection.
    pub idle_timeout: Duration,
    /// A record must arrive whole within this long of its first byte.
    pub record_timeout: Duration,
    /// A reply must be written whole within this long.
    pub write_timeout: Duration,
    /// How long [`TcpServer::stop`] lets connections finish before closing them.
    pub shutdown_grace: Duration,
}

impl TcpOptions {
    /// The limits for one listener from the configuration's `listeners.tcp`.
    pub fn new(
        cfg: &crate::config::TcpConfig,
        max_record_bytes: usize,
        max_data_bytes: usize,
        service_core: usize,
    ) -> TcpOptions {
        let ms = |v: u32| Duration::from_millis(u64::from(v));
        TcpOptions {
            max_conns: cfg.max_conns as usize,
            max_record_bytes,
            max_data_bytes,
            service_core,
            idle_timeout: ms(cfg.idle_timeout_ms),
            record_timeout: ms(cfg.record_timeout_ms),
            write_timeout: ms(cfg.write_timeout_ms),
            shutdown_grace: ms(cfg.shutdown_grace_ms),
        }
    }
}

/// Counters of one listener.
#[derive(Debug, Default)]
pub struct TcpStats {
    pub conns_accepted: AtomicU64,
    /// New connections closed at once: every open one was serving a Call.
    pub conns_refused: AtomicU64,
    /// Open connections closed to make room for a new one.
    pub conns_evicted: AtomicU64,
    /// Connections closed with no complete record for the idle timeout.
    pub idle_timeouts: AtomicU64,
    /// Connections closed with a record not whole by its deadline.
    pub record_timeouts: AtomicU64,
    /// Connections closed with a reply not written by its deadline.
    pub write_timeouts: AtomicU64,
    /// Connections still open after the shutdown grace, closed by force.
    pub closed_at_shutdown: AtomicU64,
    pub calls: AtomicU64,
    pub bad_records: AtomicU64,
    /// Backward-direction Calls written to clients.
    pub backward_calls: AtomicU64,
    /// Backward-direction Replies handed to the service.
    pub backward_replies: AtomicU64,
    /// REPLY records naming no backward Call in flight on their connection,
    /// and backward Calls the service wrote that were not sent (too long,
    /// not a Call, an XID in flight): dropped.
    pub backward_dropped: AtomicU64,
}

/// A snapshot of [`TcpStats`], summable over listeners.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounts {
    pub conns_accepted: u64,
    pub conns_refused: u64,
    pub conns_evicted: u64,
    pub idle_timeouts: u64,
    pub record_timeouts: u64,
    pub write_timeouts: u64,
    pub closed_at_shutdown: u64,
    pub calls: u64,
    pub bad_records: u64,
    pub backward_calls: u64,
    pub backward_replies: u64,
    pub backward_dropped: u64,
}

impl TcpCounts {
    /// Add `o` field by field.
    pub fn add(&mut self, o: &TcpCounts) {
        self.conns_accepted += o.conns_accepted;
        self.conns_refused += o.conns_refused;
        self.conns_evicted += o.conns_evicted;
        self.idle_timeouts += o.idle_timeouts;
        self.record_timeouts += o.record_timeouts;
        self.write_timeouts += o.write_timeouts;
        self.closed_at_shutdown += o.closed_at_shutdown;
        self.calls += o.calls;
        self.bad_records += o.bad_records;
        self.backward_calls += o.backward_calls;
        self.backward_replies += o.backward_replies;
        self.backward_dropped += o.backward_dropped;
    }
}

impl TcpStats {
    /// The counters now.
    pub fn snapshot(&self) -> TcpCounts {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TcpCounts {
            conns_accepted: r(&self.conns_accepted),
            conns_refused: r(&self.conns_refused),
            conns_evicted: r(&self.conns_evicted),
            idle_timeouts: r(&self.idle_timeouts),
            record_timeouts: r(&self.record_timeouts),
            write_timeouts: r(&self.write_timeouts),
            closed_at_shutdown: r(&self.closed_at_shutdown),
            calls: r(&self.calls),
            bad_records: r(&self.bad_records),
            backward_calls: r(&self.backward_calls),
            backward_replies: r(&self.backward_replies),
            backward_dropped: r(&self.backward_dropped),
        }
    }
}

/// One listening port and its connection threads.
#[derive(Debug)]
pub struct TcpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<TcpStats>,
    grace: Duration,
    thread: Option<JoinHandle<Vec<Conn>>>,
}

/// How often blocked threads look at the stop flag and their deadlines.
const STOP_POLL: Duration = Duration::from_millis(50);

/// At most one log line per listener per this long (with counts).
const LOG_EVERY: Duration = Duration::from_secs(1);

impl TcpServer {
    /// Bind `addr` and start serving. Call from the admin thread.
    pub fn start(addr: SocketAddr, shared: Arc<NfsShared>, opts: TcpOptions) -> io::Result<TcpServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(TcpStats::default());
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let thread = std::thread::Builder::new()
            .name(format!("tcp-{}", addr.port()))
            .spawn(move || {
                // Off the io cores' CPUs, and so is every connection thread
                // it spawns (they inherit it): a connection's NFS work and
                // its backend's blocking calls must not pre-empt a reactor.
                shared.off_cores().apply();
                accept_loop(listener, shared, opts, stop2, stats2)
            })?;
        Ok(TcpServer {
            addr,
            stop,
            stats,
            grace: opts.shutdown_grace,
            thread: Some(thread),
        })
    }

    /// The bound address (the port is known even when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stats(&self) -> &TcpStats {
        &self.stats
    }

    /// The counters, shared (the live statistics thread reads them).
    pub fn stats_arc(&self) -> Arc<TcpStats> {
        self.stats.clone()
    }

    /// Stop accepting: connections close between records (a Call being
    /// served is answered first); returns at once. [`TcpServer::finish`]
    /// waits for them.
    pub fn stop_accepting(&self) {
        // Release: pairs with the Acquire loads in the accept loop and the
        // connection threads.
        self.stop.store(true, Ordering::Release);
    }

    /// Stop accepting, give the connections `grace` to finish the Call they
    /// serve and close, then close the ones still open (a client stalled in
    /// the middle of a record, or not reading its reply) and wait for every
    /// thread. Returns how many were closed by force.
    pub fn finish(&mut self, grace: Duration) -> u64 {
        self.stop_accepting();
        let Some(t) = self.thread.take() else { return 0 };
        let conns = t.join().unwrap_or_default();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && !conns.iter().all(|c| c.thread.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut forced = 0;
        for c in &conns {
            if !c.thread.is_finished() {
                c.slot.close();
                forced += 1;
            }
        }
        if forced > 0 {
            self.stats.closed_at_shutdown.fetch_add(forced, Ordering::Relaxed);
            tracing::warn!(
                addr = %self.addr,
                connections = forced,
                grace_ms = grace.as_millis() as u64,
                "TCP connections still busy after the shutdown grace: closed"
            );
        }
        for c in conns {
            let _ = c.thread.join();
        }
        forced
    }

    /// [`TcpServer::finish`] with the configured grace.
    pub fn stop(&mut self) {
        self.finish(self.grace);
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the accept loop and a connection thread share about the connection.
#[derive(Debug)]
struct Slot {
    /// Another handle on the connection's socket, to close it from outside.
    sock: TcpStream,
    /// When the last record was complete (or the connection accepted), in
    /// milliseconds since the listener started.
    last_record_ms: AtomicU64,
    /// Between a complete record and its reply written: not to be evicted.
    busy: AtomicBool,
    /// Closed from outside (eviction, shutdown).
    closed: AtomicBool,
}

impl Slot {
    /// Close from outside: a thread blocked on the socket wakes at once.
    fn close(&self) {
        // Release: pairs with the Acquire load in the connection thread.
        self.closed.store(true, Ordering::Release);
        let _ = self.sock.shutdown(Shutdown::Both);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
struct Conn {
    slot: Arc<Slot>,
    thread: JoinHandle<()>,
    /// Closed to make room: no longer counts against `max_conns`.
    evicted: bool,
}

/// Logs what the listener refused, evicted and timed out at most once per
/// [`LOG_EVERY`], with the counts since the previous line.
struct RateLog {
    at: Instant,
    seen: [u64; 5],
}

impl RateLog {
    fn counts(s: &TcpStats) -> [u64; 5] {
        [
            s.conns_evicted.load(Ordering::Relaxed),
            s.conns_refused.load(Ordering::Relaxed),
            s.idle_timeouts.load(Ordering::Relaxed),
            s.record_timeouts.load(Ordering::Relaxed),
            s.write_timeouts.load(Ordering::Relaxed),
        ]
    }

    fn poll(&mut self, addr: SocketAddr, s: &TcpStats, max_conns: usize) {
        if self.at.elapsed() < LOG_EVERY {
            return;
        }
        let now = Self::counts(s);
        let d: [u64; 5] = std::array::from_fn(|i| now[i] - self.seen[i]);
        if d.iter().any(|&x| x > 0) {
            tracing::warn!(
                %addr,
                max_conns,
                evicted = d[0],
                refused = d[1],
                idle_timeouts = d[2],
                record_timeouts = d[3],
                write_timeouts = d[4],
                "TCP connections closed for the limits (counts since the last line)"
            );
            self.at = Instant::now();
        }
        self.seen = now;
    }
}

/// The last TCP connection id given, process-wide: every listener (NFS and
/// MOUNT ports, on each address) serves with the same
/// [`TcpOptions::service_core`], and NFSv4.1 names a backchannel by
/// `(core, ConnId)` (`crate::nfs4::callback::ConnKey`), so ids must not
/// repeat across listeners: a MOUNT connection closing would otherwise
/// withdraw the backchannel of the NFS connection with its number.
static LAST_CONN_ID: AtomicU32 = AtomicU32::new(0);

/// A connection id no other TCP connection of this process has (until the
/// counter wraps after 2^32 connections).
fn next_conn_id() -> u32 {
    // Relaxed: only uniqueness is needed, which the RMW gives.
    LAST_CONN_ID.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
}

/// Waits until `listener` has a connection to accept, or `timeout`.
fn wait_readable(listener: &TcpListener, timeout: Duration) {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd; the descriptor is the listener's, open for
    // the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
}

fn accept_loop(
    listener: TcpListener,
    shared: Arc<NfsShared>,
    opts: TcpOptions,
    stop: Arc<AtomicBool>,
    stats: Arc<TcpStats>,
) -> Vec<Conn> {
    let epoch = Instant::now();
    let addr = listener.local_addr().ok();
    let mut log = RateLog {
        at: epoch.checked_sub(LOG_EVERY).unwrap_or(epoch),
        seen: [0; 5],
    };
    let mut conns: Vec<Conn> = Vec::new();
    let drc = Arc::new(Mutex::new(ReplyCache::new(DRC_ENTRIES)));
    // Acquire: pairs with the Release store in `TcpServer::stop_accepting`.
    while !stop.load(Ordering::Acquire) {
        if let Some(a) = addr {
            log.poll(a, &stats, opts.max_conns);
        }
        // Release the handles of connections whose threads have ended.
        conns.retain(|c| !c.thread.is_finished());
        let (sock, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Block until a connection arrives (accepted at once, not up
                // to a sleep later: issue 24 item 5), waking every STOP_POLL
                // to look at the stop flag and the rate-limited log.
                wait_readable(&listener, STOP_POLL);
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(STOP_POLL);
                continue;
            }
        };
        let open = conns.iter().filter(|c| !c.evicted).count();
        if open >= opts.max_conns {
            // Make room: close the idlest connection not serving a Call.
            let idlest = conns
                .iter_mut()
                .filter(|c| !c.evicted && !c.slot.busy.load(Ordering::Acquire))
                .min_by_key(|c| c.slot.last_record_ms.load(Ordering::Relaxed));
            match idlest {
                Some(c) => {
                    c.slot.close();
                    c.evicted = true;
                    stats.conns_evicted.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    stats.conns_refused.fetch_add(1, Ordering::Relaxed);
                    drop(sock);
                    continue;
                }
            }
        }
        let Ok(handle) = sock.try_clone() else {
            stats.conns_refused.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let slot = Arc::new(Slot {
            sock: handle,
            last_record_ms: AtomicU64::new(epoch.elapsed().as_millis() as u64),
            busy: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        stats.conns_accepted.fetch_add(1, Ordering::Relaxed);
        let (shared, stop, stats, slot2) = (shared.clone(), stop.clone(), stats.clone(), slot.clone());
        let drc = drc.clone();
        let id = next_conn_id();
        let spawned = std::thread::Builder::new()
            .name(format!("tcp-conn-{id}"))
            .spawn(move || {
                let conn = ConnCtx {
                    id,
                    peer,
                    drc,
                    opts,
                    stop: &stop,
                    stats: &stats,
                    slot: &slot2,
                    epoch,
                };
                if let Err(e) = serve_conn(sock, &shared, &conn) {
                    tracing::debug!(%peer, reason = %e, "TCP connection closed");
                }
            });
        match spawned {
            Ok(thread) => conns.push(Conn {
                slot,
                thread,
                evicted: false,
            }),
            Err(e) => tracing::warn!(%peer, error = %e, "cannot start a connection thread"),
        }
    }
    conns
}

/// What a connection thread needs besides its socket and service.
struct ConnCtx<'a> {
    id: u32,
    peer: SocketAddr,
    /// The listener's duplicate request cache.
    drc: Arc<Mutex<ReplyCache>>,
    opts: TcpOptions,
    stop: &'a AtomicBool,
    stats: &'a TcpStats,
    slot: &'a Slot,
    epoch: Instant,
}

/// Why a connection ended other than by a clean end of stream.
#[derive(Debug, thiserror::Error)]
enum ConnEnd {
    #[error("no complete record within the idle timeout")]
    Idle,
    #[error("record not complete within the record timeout")]
    Record,
    #[error("reply not written within the write timeout")]
    Write,
    #[error("closed by the listener (evicted or shut down)")]
    Closed,
    #[error("record over {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// The deadlines of the record being read: the idle deadline (from the last
/// complete record) and, from its first byte, the record's own.
struct Clock {
    idle_until: Instant,
    record_until: Option<Instant>,
}

impl Clock {
    /// `Err` once a deadline has passed (checked after every wake-up).
    fn check(&self, now: Instant) -> Result<(), ConnEnd> {
        if self.record_until.is_some_and(|t| now >= t) {
            return Err(ConnEnd::Record);
        }
        if now >= self.idle_until {
            return Err(ConnEnd::Idle);
        }
        Ok(())
    }
}

/// A hook [`read_full`] runs between records.
type IdleHook = fn(&mut TcpStream) -> Result<(), ConnEnd>;

/// No idle hook: [`read_full`] inside a record.
const NO_IDLE: Option<IdleHook> = None;

/// Read exactly `buf.len()` bytes; `Ok(false)` on a clean end of stream, or
/// on shutdown, before the first byte of a record (`boundary`: then `Some`,
/// a hook run before waiting and at each wake-up while no byte came: the
/// backchannel's sends). The socket's
/// read timeout ([`STOP_POLL`]) wakes it to look at the deadlines and the
/// flags; the record's deadline starts with its first byte.
fn read_full(
    sock: &mut TcpStream,
    buf: &mut [u8],
    conn: &ConnCtx<'_>,
    clock: &mut Clock,
    mut boundary: Option<impl FnMut(&mut TcpStream) -> Result<(), ConnEnd>>,
) -> Result<bool, ConnEnd> {
    let mut n = 0;
    // Before waiting for a record: what the connection has to send.
    if let Some(idle) = boundary.as_mut() {
        idle(sock)?;
    }
    while n < buf.len() {
        match sock.read(&mut buf[n..]) {
            Ok(0) if conn.slot.is_closed() => return Err(ConnEnd::Closed),
            Ok(0) if n == 0 && boundary.is_some() => return Ok(false),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(k) => {
                if clock.record_until.is_none() {
                    clock.record_until = Some(Instant::now() + conn.opts.record_timeout);
                }
                n += k;
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                // Acquire: pairs with the Release store in `TcpServer::stop_accepting`.
                if boundary.is_some() && n == 0 && conn.stop.load(Ordering::Acquire) {
                    return Ok(false);
                }
                // Woken between records: what came up to send meanwhile.
                if let (Some(idle), 0) = (boundary.as_mut(), n) {
                    idle(sock)?;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) if conn.slot.is_closed() => return Err(ConnEnd::Closed),
            Err(e) => return Err(e.into()),
        }
        if conn.slot.is_closed() {
            return Err(ConnEnd::Closed);
        }
        if n < buf.len() {
            clock.check(Instant::now())?;
        }
    }
    Ok(true)
}

/// Write all of `buf` by `deadline`; the socket's write timeout
/// ([`STOP_POLL`]) wakes it to look at the deadline and the close flag.
fn write_full(sock: &mut TcpStream, buf: &[u8], conn: &ConnCtx<'_>, deadline: Instant) -> Result<(), ConnEnd> {
    let mut n = 0;
    while n < buf.len() {
        match sock.write(&buf[n..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
            Ok(k) => n += k,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) => {}
            Err(_) if conn.slot.is_closed() => return Err(ConnEnd::Closed),
            Err(e) => return Err(e.into()),
        }
        if conn.slot.is_closed() {
            return Err(ConnEnd::Closed);
        }
        if n < buf.len() && Instant::now() >= deadline {
            return Err(ConnEnd::Write);
        }
    }
    Ok(())
}

fn serve_conn(sock: TcpStream, shared: &Arc<NfsShared>, conn: &ConnCtx<'_>) -> Result<(), ConnEnd> {
    let r = serve_records(sock, shared, conn);
    // The listener holds another handle on the socket (to close it from
    // outside): dropping this one alone would leave the connection open.
    let _ = conn.slot.sock.shutdown(Shutdown::Both);
    let counter = match &r {
        Err(ConnEnd::Idle) => Some(&conn.stats.idle_timeouts),
        Err(ConnEnd::Record) => Some(&conn.stats.record_timeouts),
        Err(ConnEnd::Write) => Some(&conn.stats.write_timeouts),
        Err(ConnEnd::TooLarge(_)) => Some(&conn.stats.bad_records),
        _ => None,
    };
    if let Some(c) = counter {
        c.fetch_add(1, Ordering::Relaxed);
    }
    r
}

fn serve_records(sock: TcpStream, shared: &Arc<NfsShared>, conn: &ConnCtx<'_>) -> Result<(), ConnEnd> {
    let opts = &conn.opts;
    let mut service = NfsService::with_reply_cache(
        shared.clone(),
        opts.service_core,
        ReplyCacheRef::Shared(conn.drc.clone()),
    )
    .map_err(|e| io::Error::other(format!("backend channel: {e}")))?;
    serve_with(sock, &mut service, conn)
}

/// Backward Calls in flight at most on one TCP connection: the credits
/// the backchannel is offered with (TCP itself has none).
pub const TCP_BACKWARD_CALLS: u16 = 16;

/// A connection's backward direction: the XIDs of the backward Calls in
/// flight, and the buffer a Call is written into (record mark first).
struct TcpBackchannel {
    in_flight: Vec<u32>,
    buf: Vec<u8>,
}

impl TcpBackchannel {
    /// Write the backward Calls the service has for connection `id`, while
    /// fewer than [`TCP_BACKWARD_CALLS`] are in flight.
    fn send<S: Service>(
        &mut self,
        sock: &mut TcpStream,
        service: &mut S,
        id: ConnId,
        conn: &ConnCtx<'_>,
    ) -> Result<(), ConnEnd> {
        while service.has_backward_calls() && self.in_flight.len() < usize::from(TCP_BACKWARD_CALLS) {
            let room = self.buf.len() - RM_BYTES;
            let Some(n) = service.poll_backward_call(id, &mut self.buf[RM_BYTES..]) else {
                return Ok(());
            };
            let call = (n <= room)
                .then(|| proto::rpc::peek_msg(&self.buf[RM_BYTES..RM_BYTES + n]).ok())
                .flatten();
            let (xid, mark) = match (call, RecordMark::new(true, n as u32)) {
                (Some((xid, proto::rpc::CALL)), Ok(mark)) if !self.in_flight.contains(&xid) => (xid, mark),
                _ => {
                    conn.stats.backward_dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            self.buf[..RM_BYTES].copy_from_slice(&mark.to_bytes());
            write_full(
                sock,
                &self.buf[..RM_BYTES + n],
                conn,
                Instant::now() + conn.opts.write_timeout,
            )?;
            self.in_flight.push(xid);
            conn.stats.backward_calls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A REPLY record `msg` with `xid` arrived: the service's when it
    /// answers a backward Call in flight, dropped and counted otherwise.
    fn reply<S: Service>(&mut self, service: &mut S, id: ConnId, xid: u32, msg: &[u8], conn: &ConnCtx<'_>) {
        match self.in_flight.iter().position(|&x| x == xid) {
            Some(k) => {
                self.in_flight.swap_remove(k);
                conn.stats.backward_replies.fetch_add(1, Ordering::Relaxed);
                service.handle_backward_reply(id, msg);
            }
            None => {
                conn.stats.backward_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Serve `conn`'s records with `service` until the connection ends; its
/// backchannel is offered to the service meanwhile and withdrawn at the end,
/// however it ends.
fn serve_with<S: Service>(mut sock: TcpStream, service: &mut S, conn: &ConnCtx<'_>) -> Result<(), ConnEnd> {
    let id = ConnId(conn.id);
    let max = conn
        .opts
        .max_record_bytes
        .min(proto::rpc::RM_MAX_FRAGMENT_BYTES as usize) as u32;
    service.backward_channel(
        id,
        Some(BackwardChannel {
            credits: TCP_BACKWARD_CALLS,
            max_call_bytes: max,
            max_reply_bytes: max,
        }),
    );
    let mut back = TcpBackchannel {
        in_flight: Vec::with_capacity(usize::from(TCP_BACKWARD_CALLS)),
        buf: vec![0u8; RM_BYTES + max as usize],
    };
    let r = serve_loop(&mut sock, service, conn, &mut back);
    service.backward_channel(id, None);
    r
}

fn serve_loop<S: Service>(
    sock: &mut TcpStream,
    service: &mut S,
    conn: &ConnCtx<'_>,
    back: &mut TcpBackchannel,
) -> Result<(), ConnEnd> {
    let opts = &conn.opts;
    let id = ConnId(conn.id);
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(STOP_POLL))?;
    sock.set_write_timeout(Some(STOP_POLL))?;
    sock.set_nodelay(true)?;
    let mut record = vec![0u8; opts.max_record_bytes];
    // Head room: RPC reply header plus the largest results without the data item.
    let mut head = vec![0u8; 64 * 1024];
    let mut data = vec![0u8; opts.max_data_bytes];
    let mut out = Vec::with_capacity(64 * 1024);
    loop {
        // Acquire: pairs with the Release store in `TcpServer::stop_accepting`.
        if conn.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        // One record: fragments until the last one (RFC 5531 s11).
        let mut clock = Clock {
            idle_until: Instant::now() + opts.idle_timeout,
            record_until: None,
        };
        let mut len = 0usize;
        let mut first = true;
        loop {
            let mut mark = [0u8; RM_BYTES];
            // Between records: backward Calls go out while we wait.
            let idle = |sock: &mut TcpStream| back.send(sock, service, id, conn);
            if !read_full(sock, &mut mark, conn, &mut clock, first.then_some(idle))? {
                return Ok(());
            }
            first = false;
            let m = RecordMark::from_bytes(mark);
            let frag = m.len() as usize;
            if frag > opts.max_record_bytes - len {
                return Err(ConnEnd::TooLarge(opts.max_record_bytes));
            }
            read_full(sock, &mut record[len..len + frag], conn, &mut clock, NO_IDLE)?;
            len += frag;
            if m.last() {
                break;
            }
        }
        let msg = &record[..len];
        // A Reply is the client answering a backward Call (RFC 5531 s9
        // `msg_type`; RFC 8881 s2.10.3.1), never a Call to serve.
        if let Ok((xid, proto::rpc::REPLY)) = proto::rpc::peek_msg(msg) {
            back.reply(service, id, xid, msg, conn);
            conn.slot
                .last_record_ms
                .store(conn.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
            back.send(sock, service, id, conn)?;
            continue;
        }
        // Release: the accept loop reads `busy` (Acquire) before evicting.
        conn.slot.busy.store(true, Ordering::Release);
        conn.stats.calls.fetch_add(1, Ordering::Relaxed);
        let xid = msg.get(..4).map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let piece = [Piece::Inline {
            start: 0,
            len: len as u32,
        }];
        let call = CallView::contiguous(ConnId(conn.id), Some(conn.peer.ip()), 0, xid, msg, &piece);
        let hint = service.reply_data_hint(&call).min(data.len());
        let mut rb = ReplyBuilder::new(&mut head, Some(&mut data[..hint]));
        if service.handle_call(&call, &mut rb).is_ok() {
            let shape = rb.finish();
            let (h, d) = (shape.head_len as usize, shape.data_len as usize);
            let total = h + d + shape.pad() as usize;
            out.clear();
            let mark = RecordMark::new(true, total as u32).map_err(|_| io::Error::other("reply too large"))?;
            out.extend_from_slice(&mark.to_bytes());
            out.extend_from_slice(&head[..h]);
            out.extend_from_slice(&data[..d]);
            out.extend_from_slice(&[0u8; 3][..shape.pad() as usize]);
            write_full(sock, &out, conn, Instant::now() + opts.write_timeout)?;
        }
        // else the service asked to drop the call: no reply (the client
        // retransmits).
        conn.slot
            .last_record_ms
            .store(conn.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        conn.slot.busy.store(false, Ordering::Release);
        back.send(sock, service, id, conn)?;
    }
}

#[cfg(test)]
mod backchannel_tests {
    //! The backward direction on the TCP path (RFC 8881 s2.10.3.1; RFC
    //! 5531 s9, s11) against a client on a loopback socket.

    use std::collections::VecDeque;

    use dataplane::service::ServiceError;

    use super::*;

    /// What the test service saw, shared with the test thread.
    #[derive(Debug, Default)]
    struct Seen {
        queue: VecDeque<Vec<u8>>,
        events: Vec<(ConnId, Option<BackwardChannel>)>,
        replies: Vec<Vec<u8>>,
        calls: u32,
    }

    /// Answers every forward Call with an empty success and makes the
    /// backward Calls queued in [`Seen`].
    struct Svc(Arc<Mutex<Seen>>);

    impl Service for Svc {
        fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
            self.0.lock().unwrap().calls += 1;
            let words = [call.xid, 1, 0, 0, 0, 0];
            for (k, w) in words.iter().enumerate() {
                reply.head_mut()[4 * k..4 * k + 4].copy_from_slice(&w.to_be_bytes());
            }
            reply.set_head_len(24);
            Ok(())
        }
        fn has_backward_calls(&self) -> bool {
            !self.0.lock().unwrap().queue.is_empty()
        }
        fn poll_backward_call(&mut self, _conn: ConnId, buf: &mut [u8]) -> Option<usize> {
            let m = self.0.lock().unwrap().queue.pop_front()?;
            buf.get_mut(..m.len())?.copy_from_slice(&m);
            Some(m.len())
        }
        fn handle_backward_reply(&mut self, _conn: ConnId, msg: &[u8]) {
            self.0.lock().unwrap().replies.push(msg.to_vec());
        }
        fn backward_channel(&mut self, conn: ConnId, chan: Option<BackwardChannel>) {
            self.0.lock().unwrap().events.push((conn, chan));
        }
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    /// A record: the last-fragment mark and `msg`.
    fn record(msg: &[u8]) -> Vec<u8> {
        let mut r = RecordMark::new(true, msg.len() as u32).unwrap().to_bytes().to_vec();
        r.extend_from_slice(msg);
        r
    }

    /// Read one record (one fragment) from the client socket.
    fn read_record(c: &mut TcpStream) -> Vec<u8> {
        let mut mark = [0u8; RM_BYTES];
        c.read_exact(&mut mark).unwrap();
        let m = RecordMark::from_bytes(mark);
        let mut msg = vec![0u8; m.len() as usize];
        c.read_exact(&mut msg).unwrap();
        msg
    }

    /// A backward Call (CB_NULL-like: program 0x40000000, AUTH_NONE).
    fn cb_call(xid: u32) -> Vec<u8> {
        words(&[xid, 0, 2, 0x4000_0000, 1, 0, 0, 0, 0, 0])
    }

    fn cb_reply(xid: u32) -> Vec<u8> {
        words(&[xid, 1, 0, 0, 0, 0, 0xfeed])
    }

    /// Backward Calls written on the client's own connection while it is
    /// idle and between forward Replies; the client's REPLY records reach
    /// `handle_backward_reply` intact; a Reply naming no backward Call in
    /// flight is dropped and counted; forward Calls are served as before;
    /// the channel is offered once and withdrawn when the connection ends.
    #[test]
    fn backchannel_tcp_calls_answered_on_the_same_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, peer) = listener.accept().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        seen.lock().unwrap().queue.push_back(cb_call(0xcb01));
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(TcpStats::default());
        let slot = Arc::new(Slot {
            sock: sock.try_clone().unwrap(),
            last_record_ms: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        let opts = TcpOptions {
            max_conns: 4,
            max_record_bytes: 4096,
            max_data_bytes: 4096,
            service_core: 0,
            idle_timeout: Duration::from_secs(10),
            record_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(1),
        };
        let server = {
            let (seen, stop, stats, slot) = (seen.clone(), stop.clone(), stats.clone(), slot.clone());
            std::thread::spawn(move || {
                let conn = ConnCtx {
                    id: 7,
                    peer,
                    drc: Arc::new(Mutex::new(ReplyCache::new(DRC_ENTRIES))),
                    opts,
                    stop: &stop,
                    stats: &stats,
                    slot: &slot,
                    epoch: Instant::now(),
                };
                serve_with(sock, &mut Svc(seen), &conn)
            })
        };
        client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // The first backward Call goes out before any forward Call.
        assert_eq!(read_record(&mut client), cb_call(0xcb01));
        // A stranger's Reply, then the true one.
        client.write_all(&record(&cb_reply(0xdead))).unwrap();
        client.write_all(&record(&cb_reply(0xcb01))).unwrap();
        // A forward Call is served, and a backward Call queued meanwhile
        // follows its Reply.
        seen.lock().unwrap().queue.push_back(cb_call(0xcb02));
        client
            .write_all(&record(&words(&[0x1001, 0, 2, 100003, 4, 0, 0, 0, 0, 0])))
            .unwrap();
        let mut got = vec![read_record(&mut client), read_record(&mut client)];
        got.sort();
        let mut want = vec![words(&[0x1001, 1, 0, 0, 0, 0]), cb_call(0xcb02)];
        want.sort();
        assert_eq!(got, want);
        client.write_all(&record(&cb_reply(0xcb02))).unwrap();
        let t0 = Instant::now();
        while seen.lock().unwrap().replies.len() < 2 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(client);
        let r = server.join().unwrap();
        assert!(r.is_ok(), "{r:?}");
        let s = seen.lock().unwrap();
        assert_eq!(s.replies, vec![cb_reply(0xcb01), cb_reply(0xcb02)]);
        assert_eq!(s.calls, 1, "the Replies were never served as Calls");
        let events: Vec<bool> = s
            .events
            .iter()
            .map(|(c, ch)| {
                assert_eq!(*c, ConnId(7));
                ch.is_some()
            })
            .collect();
        assert_eq!(events, vec![true, false], "offered once, withdrawn at the end");
        let c = stats.snapshot();
        assert_eq!(
            (c.backward_calls, c.backward_replies, c.backward_dropped, c.calls),
            (2, 2, 1, 1)
        );
    }
}
