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

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use dataplane::fabric::ConnId;
use dataplane::service::{CallView, ReplyBuilder, Service};
use proto::plan::Piece;
use proto::rpc::{RecordMark, RM_BYTES};

use crate::nfs::drc::{ReplyCache, DRC_ENTRIES};
use crate::nfs::{NfsService, NfsShared, ReplyCacheRef};

/// Limits of one TCP listener.
#[derive(Clone, Copy, Debug)]
pub struct TcpOptions {
    /// Connections served at once; more are accepted and closed at once.
    pub max_conns: usize,
    /// Largest Call record (all fragments); a larger one closes the connection.
    pub max_record_bytes: usize,
    /// Room for a reply's data item (NFS READ data): the largest READ served.
    pub max_data_bytes: usize,
    /// Core index the connection threads' backend channels are opened for.
    pub service_core: usize,
}

/// Counters of one listener.
#[derive(Debug, Default)]
pub struct TcpStats {
    pub conns_accepted: AtomicU64,
    pub conns_refused: AtomicU64,
    pub calls: AtomicU64,
    pub bad_records: AtomicU64,
}

/// One listening port and its connection threads.
#[derive(Debug)]
pub struct TcpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    stats: Arc<TcpStats>,
    thread: Option<JoinHandle<()>>,
}

/// How often blocked threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

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
            .spawn(move || accept_loop(listener, shared, opts, stop2, stats2))?;
        Ok(TcpServer {
            addr,
            stop,
            stats,
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

    /// Stop accepting; connection threads finish the call they are serving
    /// (its reply is sent), then close. Waits for all of them.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(
    listener: TcpListener,
    shared: Arc<NfsShared>,
    opts: TcpOptions,
    stop: Arc<AtomicBool>,
    stats: Arc<TcpStats>,
) {
    let live = Arc::new(AtomicUsize::new(0));
    let drc = Arc::new(Mutex::new(ReplyCache::new(DRC_ENTRIES)));
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 0u32;
    // Acquire: pairs with the Release store in `TcpServer::stop`.
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((sock, peer)) => {
                conns.retain(|h| !h.is_finished());
                if live.load(Ordering::Relaxed) >= opts.max_conns {
                    stats.conns_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%peer, max = opts.max_conns, "TCP connection refused: too many connections");
                    drop(sock);
                    continue;
                }
                stats.conns_accepted.fetch_add(1, Ordering::Relaxed);
                live.fetch_add(1, Ordering::Relaxed);
                next_id = next_id.wrapping_add(1);
                let (shared, stop, stats, live) = (shared.clone(), stop.clone(), stats.clone(), live.clone());
                let drc = ReplyCacheRef::Shared(drc.clone());
                let id = next_id;
                let spawned = std::thread::Builder::new()
                    .name(format!("tcp-conn-{id}"))
                    .spawn(move || {
                        if let Err(e) = serve_conn(sock, peer, id, &shared, drc, opts, &stop, &stats) {
                            tracing::debug!(%peer, error = %e, "TCP connection closed");
                        }
                        live.fetch_sub(1, Ordering::Relaxed);
                    });
                match spawned {
                    Ok(h) => conns.push(h),
                    Err(e) => tracing::warn!(%peer, error = %e, "cannot start a connection thread"),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(STOP_POLL),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(STOP_POLL);
            }
        }
    }
    for h in conns {
        let _ = h.join();
    }
}

/// Read exactly `buf.len()` bytes; `Ok(false)` on a clean end of stream
/// before the first byte. Gives up when `stop` is set while waiting between
/// records (`idle` true) — never in the middle of one.
fn read_full(sock: &mut TcpStream, buf: &mut [u8], stop: &AtomicBool, idle: bool) -> io::Result<bool> {
    let mut n = 0;
    while n < buf.len() {
        match sock.read(&mut buf[n..]) {
            Ok(0) if n == 0 && idle => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => n += k,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                // Acquire: pairs with the Release store in `TcpServer::stop`.
                if idle && n == 0 && stop.load(Ordering::Acquire) {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[allow(clippy::too_many_arguments)]
fn serve_conn(
    mut sock: TcpStream,
    peer: SocketAddr,
    id: u32,
    shared: &Arc<NfsShared>,
    drc: ReplyCacheRef,
    opts: TcpOptions,
    stop: &AtomicBool,
    stats: &TcpStats,
) -> io::Result<()> {
    sock.set_nonblocking(false)?;
    sock.set_read_timeout(Some(STOP_POLL))?;
    sock.set_nodelay(true)?;
    let mut service = NfsService::with_reply_cache(shared.clone(), opts.service_core, drc)
        .map_err(|e| io::Error::other(format!("backend channel: {e}")))?;
    let mut record = vec![0u8; opts.max_record_bytes];
    // Head room: RPC reply header plus the largest results without the data item.
    let mut head = vec![0u8; 64 * 1024];
    let mut data = vec![0u8; opts.max_data_bytes];
    let mut out = Vec::with_capacity(64 * 1024);
    loop {
        // One record: fragments until the last one (RFC 5531 s11).
        let mut len = 0usize;
        let mut first = true;
        loop {
            let mut mark = [0u8; RM_BYTES];
            if !read_full(&mut sock, &mut mark, stop, first)? {
                return Ok(());
            }
            first = false;
            let m = RecordMark::from_bytes(mark);
            let frag = m.len() as usize;
            if frag > opts.max_record_bytes - len {
                stats.bad_records.fetch_add(1, Ordering::Relaxed);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("record over {} bytes", opts.max_record_bytes),
                ));
            }
            read_full(&mut sock, &mut record[len..len + frag], stop, false)?;
            len += frag;
            if m.last() {
                break;
            }
        }
        stats.calls.fetch_add(1, Ordering::Relaxed);
        let msg = &record[..len];
        let xid = msg.get(..4).map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let piece = [Piece::Inline {
            start: 0,
            len: len as u32,
        }];
        let call = CallView::contiguous(ConnId(id), Some(peer.ip()), 0, xid, msg, &piece);
        let hint = service.reply_data_hint(&call).min(data.len());
        let mut rb = ReplyBuilder::new(&mut head, Some(&mut data[..hint]));
        if service.handle_call(&call, &mut rb).is_err() {
            // The service asked to drop the call: no reply (the client retransmits).
            continue;
        }
        let shape = rb.finish();
        let (h, d) = (shape.head_len as usize, shape.data_len as usize);
        let total = h + d + shape.pad() as usize;
        out.clear();
        let mark = RecordMark::new(true, total as u32).map_err(|_| io::Error::other("reply too large"))?;
        out.extend_from_slice(&mark.to_bytes());
        out.extend_from_slice(&head[..h]);
        out.extend_from_slice(&data[..d]);
        out.extend_from_slice(&[0u8; 3][..shape.pad() as usize]);
        sock.write_all(&out)?;
    }
}
