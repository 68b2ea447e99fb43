//! `--transport tcp`: the same loads (NULL, READ, WRITE, mixed) as ONC RPC
//! over TCP with record marking (RFC 5531 s11) to an NFS server's TCP port,
//! so one target and backend can be measured over its fabric and over TCP
//! with the same client, timing and result record.
//!
//! - [`TcpSession`]: one blocking Call at a time (LOOKUP, CREATE, the fill
//!   and the read-back check, through [`NfsCaller`]).
//! - [`Framer`]: a non-blocking record reader that reads large fragment
//!   bodies straight into the record buffer (no copy beyond the socket's).
//! - the worker: per connection up to `--qd` Calls pipelined on a
//!   non-blocking socket; WRITE data goes out with `writev` from a shared
//!   buffer (or the connection's pattern buffer with `--verify`); the thread
//!   waits in `ppoll` when no socket is ready, as a TCP client does (it does
//!   not spin: its CPU time is the system calls' and the copies').
//!
//! With `--nfs 4.1` the set-up is NFSv4.1's ([`crate::nfs4setup`]: a
//! client id, a session per load connection, the file opened) and each
//! Call a COMPOUND (SEQUENCE alone for NULL; SEQUENCE, PUTFH, READ or WRITE)
//! on a free slot of its connection's session, freed by its reply.
//!
//! Timing and counting are those of the fabric path ([`crate::run`]):
//! a Call counts when sent (or intended) at or after the end of the warm-up
//! and answered by the end of the measured time. Worker threads own their
//! sockets; the main thread sets up and waits.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use proto::rpc::{RecordMark, RM_BYTES};
use proto::ulb::Nfs3Binding;
use proto::EncodeError;

use crate::engine::{
    self, next_slot, Clock, NfsCaller, OpKind, OpMeta, Progress, Recorder, Workload, K_NULL, K_READ, K_WRITE,
};
use crate::nfs::{self, ReplyError};
use crate::run::{self, RunConfig, RunOutput};
use crate::schedule::{Offsets, OpenLoop};
use crate::tcp::{self, TcpRpc};
use crate::{pattern, PerfError};

/// Room for RPC and NFS headers around READ/WRITE data in a record.
pub const HEADER_ROOM_BYTES: usize = 8192;
/// Fragment bodies at least this long are read straight into the record.
const DIRECT_READ_BYTES: usize = 32 * 1024;
/// Staging buffer of the record reader.
const STAGE_BYTES: usize = 64 * 1024;
/// Bytes one connection may read in one turn before the others get theirs.
const TURN_READ_BYTES: usize = 4 << 20;
/// Most messages gathered in one `writev`.
const WRITEV_MSGS: usize = 32;
/// Longest wait in `ppoll` (the end of the run and `abort` are looked at
/// between waits).
const MAX_WAIT: Duration = Duration::from_millis(5);

/// The NFS server's TCP address from `--target` (`ip[:port]`, port 2049
/// when omitted; a host name resolves).
pub fn tcp_addr(target: &str) -> Result<SocketAddr, PerfError> {
    if let Ok(a) = target.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = target.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, 2049));
    }
    let with_port = if target.contains(':') {
        target.to_string()
    } else {
        format!("{target}:2049")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| PerfError::io(format!("--target {target}"), e))?
        .next()
        .ok_or_else(|| PerfError::Option(format!("--target {target}: no address")))
}

/// The largest reply record a run accepts: READ data and headers.
fn max_record_bytes(io_size: u32) -> usize {
    io_size as usize + HEADER_ROOM_BYTES
}

/// One Call at a time over a blocking TCP connection. Main thread.
#[derive(Debug)]
pub struct TcpSession {
    rpc: TcpRpc,
    buf: Vec<u8>,
}

impl TcpSession {
    /// Connect to the NFS server at `addr`.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self, PerfError> {
        let rpc =
            TcpRpc::connect(addr, timeout, false).map_err(|e| PerfError::io(format!("NFS over TCP at {addr}"), e))?;
        Ok(TcpSession { rpc, buf: Vec::new() })
    }
}

impl NfsCaller for TcpSession {
    fn nfs_call<T>(
        &mut self,
        binding: &Nfs3Binding,
        _proc: u32,
        encode: impl FnOnce(&mut [u8]) -> Result<usize, EncodeError>,
        parse: impl FnOnce(&[u8], Option<&[u8]>, u32) -> Result<T, ReplyError>,
    ) -> Result<T, PerfError> {
        let room = max_record_bytes(binding.max_io_bytes);
        self.buf.resize(room, 0);
        let n = encode(&mut self.buf).map_err(|e| PerfError::Other(format!("encoding a Call: {e}")))?;
        let xid = self.rpc.xid();
        self.buf[..4].copy_from_slice(&xid.to_be_bytes());
        let reply = self.rpc.call_max(&self.buf[..n], room)?;
        parse(&reply, None, xid).map_err(|e| match e {
            ReplyError::Nfs(status) => PerfError::Nfs { what: "call", status },
            e => PerfError::Rpc {
                what: "reply",
                detail: e.to_string(),
            },
        })
    }
}

/// Reads record-marked messages from a non-blocking stream (RFC 5531 s11):
/// any number of fragments per record, each announced length checked
/// against the maximum before a byte of it is stored.
#[derive(Debug)]
pub struct Framer {
    stage: Box<[u8]>,
    s_at: usize,
    s_end: usize,
    rec: Box<[u8]>,
    rec_len: usize,
    mark: [u8; RM_BYTES],
    mark_have: usize,
    /// In a fragment body with this many bytes to go.
    frag_left: usize,
    in_body: bool,
    last: bool,
}

/// A stream broke the record format: larger than allowed.
fn too_large(len: usize, max: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("record of {len} bytes over {max}"))
}

impl Framer {
    /// A reader of records of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        Framer {
            stage: vec![0u8; STAGE_BYTES].into_boxed_slice(),
            s_at: 0,
            s_end: 0,
            rec: vec![0u8; max].into_boxed_slice(),
            rec_len: 0,
            mark: [0; RM_BYTES],
            mark_have: 0,
            frag_left: 0,
            in_body: false,
            last: false,
        }
    }

    /// A fragment ended: hand the record on when it was the last.
    fn end_fragment(&mut self, on_record: &mut dyn FnMut(&[u8])) {
        self.in_body = false;
        if self.last {
            on_record(&self.rec[..self.rec_len]);
            self.rec_len = 0;
        }
    }

    /// Take what the staging buffer holds.
    fn consume_staged(&mut self, on_record: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        while self.s_at < self.s_end {
            let avail = self.s_end - self.s_at;
            if !self.in_body {
                let n = (RM_BYTES - self.mark_have).min(avail);
                self.mark[self.mark_have..self.mark_have + n].copy_from_slice(&self.stage[self.s_at..self.s_at + n]);
                self.mark_have += n;
                self.s_at += n;
                if self.mark_have < RM_BYTES {
                    continue;
                }
                self.mark_have = 0;
                let m = RecordMark::from_bytes(self.mark);
                let len = m.len() as usize;
                if len > self.rec.len() - self.rec_len {
                    return Err(too_large(self.rec_len + len, self.rec.len()));
                }
                self.frag_left = len;
                self.last = m.last();
                self.in_body = true;
                if len == 0 {
                    self.end_fragment(on_record);
                }
            } else {
                let n = self.frag_left.min(avail);
                self.rec[self.rec_len..self.rec_len + n].copy_from_slice(&self.stage[self.s_at..self.s_at + n]);
                self.rec_len += n;
                self.s_at += n;
                self.frag_left -= n;
                if self.frag_left == 0 {
                    self.end_fragment(on_record);
                }
            }
        }
        Ok(())
    }

    /// Read what `read` has now (until it would block), calling `on_record`
    /// for every complete record. Returns the bytes read; an error at the
    /// end of the stream (`UnexpectedEof`), on a record over the maximum
    /// (`InvalidData`), or from `read`.
    pub fn pump(
        &mut self,
        mut read: impl FnMut(&mut [u8]) -> io::Result<usize>,
        on_record: &mut dyn FnMut(&[u8]),
    ) -> io::Result<usize> {
        let mut total = 0;
        loop {
            self.consume_staged(on_record)?;
            if total >= TURN_READ_BYTES {
                return Ok(total);
            }
            let direct = self.in_body && self.frag_left >= DIRECT_READ_BYTES;
            let r = if direct {
                read(&mut self.rec[self.rec_len..self.rec_len + self.frag_left])
            } else {
                read(&mut self.stage)
            };
            let n = match r {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            total += n;
            if direct {
                self.rec_len += n;
                self.frag_left -= n;
                if self.frag_left == 0 {
                    self.end_fragment(on_record);
                }
            } else {
                self.s_at = 0;
                self.s_end = n;
            }
        }
    }
}

/// What follows a message's head on the wire.
#[derive(Debug)]
enum Tail {
    None,
    /// This many bytes of the worker's zero buffer (WRITE data and padding).
    Zeros(usize),
    /// The connection's own bytes (WRITE data with `--verify`, padding).
    Own(Vec<u8>),
}

/// A Call waiting to be written.
#[derive(Debug)]
struct OutMsg {
    /// Record mark and the message up to any WRITE data.
    head: Vec<u8>,
    tail: Tail,
    /// Bytes written so far.
    pos: usize,
}

impl OutMsg {
    fn tail_len(&self) -> usize {
        match &self.tail {
            Tail::None => 0,
            Tail::Zeros(n) => *n,
            Tail::Own(v) => v.len(),
        }
    }
    fn len(&self) -> usize {
        self.head.len() + self.tail_len()
    }
}

/// One connection of a worker.
struct TcpConn {
    sock: TcpStream,
    out: VecDeque<OutMsg>,
    rx: Framer,
    /// Calls sent and not answered: (XID, what).
    inflight: Vec<(u32, OpMeta)>,
    next_xid: u32,
    sched: Option<OpenLoop>,
    offsets: Offsets,
    quota: Option<u64>,
    dead: bool,
    /// Its NFSv4.1 session (`--nfs 4.1`).
    v4: Option<engine::V4Conn>,
}

/// The worker's buffers shared by its connections.
struct Scratch {
    /// Where a Call is encoded (room for WRITE data, which stays zero).
    enc: Vec<u8>,
    /// WRITE data without `--verify`: zeros.
    zeros: Vec<u8>,
    /// Head buffers of written messages, for reuse.
    spare: Vec<Vec<u8>>,
}

/// Encode one Call of `kind` at `offset` with `xid` (on NFSv4.1 session
/// slot `slot`) and queue it on `c`.
#[allow(clippy::too_many_arguments)]
fn queue_call(
    c: &mut TcpConn,
    s: &mut Scratch,
    wl: &Workload,
    kind: u8,
    offset: u64,
    xid: u32,
    slot: Option<&crate::nfs4::Slot>,
) -> Result<(), PerfError> {
    let enc = |e: EncodeError| PerfError::Option(format!("the Call does not fit: {e}"));
    let body = &mut s.enc[RM_BYTES..];
    let fh = wl.file.as_ref().map_or(&[][..], |f| &f.fh[..]);
    let v4 = slot.zip(wl.v4.as_ref());
    let (head_len, msg_len, tail) = match (kind, wl.kind) {
        (K_NULL, _) if v4.is_some() => {
            let n = v4
                .map_or(Ok(0), |(sl, _)| crate::nfs4::encode_null(body, xid, &wl.cred, sl))
                .map_err(enc)?;
            (n, n, Tail::None)
        }
        (K_READ, _) if v4.is_some() => {
            let n = v4
                .map_or(Ok(0), |(sl, v)| {
                    crate::nfs4::encode_read(body, xid, &wl.cred, sl, fh, &v.stateid, offset, wl.io_size)
                })
                .map_err(enc)?;
            (n, n, Tail::None)
        }
        (K_NULL, OpKind::Null { prog, vers }) => {
            let n = nfs::encode_null(body, xid, prog, vers, &wl.cred).map_err(enc)?;
            (n, n, Tail::None)
        }
        (K_READ, _) => {
            let n = nfs::encode_read(body, xid, &wl.cred, fh, offset, wl.io_size).map_err(enc)?;
            (n, n, Tail::None)
        }
        _ => {
            let at = match v4 {
                Some((sl, v)) => crate::nfs4::encode_write_head(
                    body, xid, &wl.cred, sl, fh, &v.stateid, offset, wl.io_size, wl.stable,
                ),
                None => nfs::encode_write_head(body, xid, &wl.cred, fh, offset, wl.io_size, wl.stable),
            }
            .map_err(enc)?;
            let len = nfs::write_call_len(at, wl.io_size);
            let tail = if wl.verify {
                let mut v = vec![0u8; len - at];
                pattern::fill(&mut v[..wl.io_size as usize], offset, wl.salt);
                Tail::Own(v)
            } else {
                Tail::Zeros(len - at)
            };
            (at, len, tail)
        }
    };
    let mark = RecordMark::new(true, msg_len as u32).map_err(enc)?;
    s.enc[..RM_BYTES].copy_from_slice(&mark.to_bytes());
    let mut head = s.spare.pop().unwrap_or_default();
    head.clear();
    head.extend_from_slice(&s.enc[..RM_BYTES + head_len]);
    c.out.push_back(OutMsg { head, tail, pos: 0 });
    Ok(())
}

/// Write what the socket takes of `c`'s queued Calls. Returns bytes written.
fn flush(c: &mut TcpConn, s: &mut Scratch) -> io::Result<usize> {
    let mut total = 0;
    while !c.out.is_empty() {
        let mut iov: [libc::iovec; 2 * WRITEV_MSGS] = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2 * WRITEV_MSGS];
        let mut k = 0;
        for m in c.out.iter().take(WRITEV_MSGS) {
            let mut push = |b: &[u8]| {
                if !b.is_empty() {
                    iov[k] = libc::iovec {
                        iov_base: b.as_ptr() as *mut libc::c_void,
                        iov_len: b.len(),
                    };
                    k += 1;
                }
            };
            let tail: &[u8] = match &m.tail {
                Tail::None => &[],
                Tail::Zeros(n) => &s.zeros[..*n],
                Tail::Own(v) => v,
            };
            if m.pos < m.head.len() {
                push(&m.head[m.pos..]);
                push(tail);
            } else {
                push(&tail[m.pos - m.head.len()..]);
            }
        }
        // SAFETY: `iov[..k]` describes live slices (the queued messages and
        // the zero buffer, not touched until writev returns); writev only
        // reads them.
        let n = unsafe { libc::writev(c.sock.as_raw_fd(), iov.as_ptr(), k as libc::c_int) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(total),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        let mut n = n as usize;
        total += n;
        while n > 0 {
            let Some(m) = c.out.front_mut() else { break };
            let left = m.len() - m.pos;
            if n >= left {
                n -= left;
                if let Some(done) = c.out.pop_front() {
                    s.spare.push(done.head);
                }
            } else {
                m.pos += n;
                n = 0;
            }
        }
    }
    Ok(total)
}

/// `read(2)` on a raw descriptor.
fn read_fd(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Acknowledge what was received at once rather than up to 40 ms later
/// (Linux delayed ACKs; TCP_QUICKACK lasts until the stack next decides to
/// delay, so it is set again after every read). A server whose replies
/// leave in several writes with Nagle's algorithm on waits for that ACK
/// before its last segment: without this, such a server's 1 MiB READ takes
/// 40 ms whatever its speed.
fn quick_ack(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: `one` is a valid c_int of the size passed; a failure only
    // leaves delayed ACKs on.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Wait until a socket of `conns` is readable (or writable while it has
/// Calls queued), or `timeout` passes.
fn wait(conns: &[TcpConn], timeout: Duration) {
    let mut fds: Vec<libc::pollfd> = conns
        .iter()
        .filter(|c| !c.dead)
        .map(|c| libc::pollfd {
            fd: c.sock.as_raw_fd(),
            events: libc::POLLIN | if c.out.is_empty() { 0 } else { libc::POLLOUT },
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a valid array of its length; `ts` a valid timespec;
    // no signal mask is passed.
    unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
}

/// Connect one load connection.
fn connect_load(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, PerfError> {
    let sock =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| PerfError::io(format!("NFS over TCP at {addr}"), e))?;
    sock.set_nodelay(true)
        .and_then(|()| sock.set_nonblocking(true))
        .map_err(|e| PerfError::io("setting up a TCP connection", e))?;
    Ok(sock)
}

/// The load of one worker over its connected sockets. Worker thread.
#[allow(clippy::too_many_arguments)]
fn run_worker(
    socks: Vec<TcpStream>,
    plan: &engine::WorkerPlan,
    wl: &Workload,
    clock: Clock,
    start_ns: u64,
    end_ns: u64,
    drain: Duration,
    progress: &Progress,
    abort: &AtomicBool,
) -> Result<engine::WorkerOut, PerfError> {
    let file_size = wl.file.as_ref().map_or(0, |f| f.size);
    let max_record = max_record_bytes(wl.io_size);
    let seed_xid = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos());
    let mut conns: Vec<TcpConn> = socks
        .into_iter()
        .zip(&plan.conns)
        .enumerate()
        .map(|(i, (sock, &c))| TcpConn {
            sock,
            out: VecDeque::new(),
            rx: Framer::new(max_record),
            inflight: Vec::with_capacity(plan.qd as usize),
            next_xid: seed_xid ^ c.rotate_left(24),
            sched: plan.rate.map(|r| OpenLoop::new(clock.now_ns(), r)),
            offsets: Offsets::new(file_size, wl.io_size as u64, wl.seq, c, plan.total_conns, plan.seed),
            quota: plan.quotas.as_ref().map(|q| q.get(i).copied().unwrap_or(0)),
            dead: false,
            v4: wl.v4.as_ref().map(|v| engine::V4Conn::of(v, c)),
        })
        .collect();
    let mut s = Scratch {
        enc: vec![0u8; max_record + RM_BYTES],
        zeros: vec![0u8; wl.io_size as usize + 4],
        spare: Vec::new(),
    };
    let blocks = (file_size / wl.io_size.max(1) as u64).max(1);
    let mut written = if wl.verify && wl.kind.writes() {
        vec![0u64; blocks.div_ceil(64) as usize]
    } else {
        Vec::new()
    };
    let mut rec = Recorder::new(start_ns, end_ns);
    let mut stats = vec![dataplane::requester::RequesterStats::default(); conns.len()];
    let mut drain_deadline: Option<u64> = None;
    loop {
        let now = clock.now_ns();
        let count_done = conns.iter().all(|c| c.dead || c.quota == Some(0));
        let stopping = now >= end_ns || (plan.quotas.is_some() && count_done) || abort.load(Ordering::Relaxed);
        if stopping && drain_deadline.is_none() {
            drain_deadline = Some(now + drain.as_nanos() as u64);
        }
        let mut busy = 0usize;
        let mut moved = 0usize;
        let mut next_due: Option<u64> = None;
        for (ci, c) in conns.iter_mut().enumerate().filter(|(_, c)| !c.dead) {
            // Replies.
            let fd = c.sock.as_raw_fd();
            let st = &mut stats[ci];
            let (inflight, rx, v4) = (&mut c.inflight, &mut c.rx, &mut c.v4);
            let r = rx.pump(|b| read_fd(fd, b), &mut |record: &[u8]| {
                let t = clock.now_ns();
                st.replies += 1;
                let xid = record
                    .get(..4)
                    .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                let Some(k) = inflight.iter().position(|(x, _)| *x == xid) else {
                    st.unmatched += 1;
                    rec.errors += 1;
                    return;
                };
                let (_, m) = inflight.swap_remove(k);
                if let Some(v) = v4.as_mut() {
                    v.free.push(m.slot);
                }
                let ok = engine::check_reply_bytes(record, None, xid, wl, &m).is_ok();
                st.bad_replies += u64::from(!ok);
                if ok && m.kind == K_WRITE && !written.is_empty() {
                    let b = (m.offset / wl.io_size as u64) as usize;
                    written[b / 64] |= 1 << (b % 64);
                }
                rec.complete(m.t0_ns, t, ok);
            });
            match r {
                Ok(n) => {
                    moved += n;
                    if n > 0 {
                        quick_ack(fd);
                    }
                }
                Err(_) => {
                    c.dead = true;
                    abort.store(true, Ordering::Relaxed);
                    continue;
                }
            }
            // New Calls.
            while !stopping && c.inflight.len() < plan.qd as usize {
                let now = clock.now_ns();
                let t0 = match &c.sched {
                    Some(sc) => match sc.next_due(now) {
                        Some(t) => t,
                        None => {
                            let due = sc.intended(sc.taken());
                            next_due = Some(next_due.map_or(due, |d: u64| d.min(due)));
                            break;
                        }
                    },
                    None => now,
                };
                let measured = t0 >= start_ns;
                if measured && c.quota == Some(0) {
                    break;
                }
                let (kind, offset) = engine::next_call(wl, &mut c.offsets, false);
                let Some(slot) = next_slot(&mut c.v4) else { break };
                c.next_xid = c.next_xid.wrapping_add(1);
                let xid = c.next_xid;
                queue_call(c, &mut s, wl, kind, offset, xid, slot.as_ref())?;
                stats[ci].calls += 1;
                if let Some(sc) = c.sched.as_mut() {
                    sc.advance();
                }
                if measured {
                    if let Some(q) = c.quota.as_mut() {
                        *q -= 1;
                    }
                }
                c.inflight.push((
                    xid,
                    OpMeta {
                        t0_ns: t0,
                        offset,
                        kind,
                        live: true,
                        slot: slot.map_or(0, |sl| sl.slot),
                    },
                ));
            }
            match flush(c, &mut s) {
                Ok(n) => moved += n,
                Err(_) => {
                    c.dead = true;
                    abort.store(true, Ordering::Relaxed);
                    continue;
                }
            }
            busy += c.inflight.len();
        }
        progress.ops.store(rec.ops, Ordering::Relaxed);
        progress.errors.store(rec.errors, Ordering::Relaxed);
        if stopping && (busy == 0 || drain_deadline.is_some_and(|d| clock.now_ns() >= d)) {
            break;
        }
        if moved == 0 {
            let now = clock.now_ns();
            let mut limit = MAX_WAIT.as_nanos() as u64;
            if let Some(d) = next_due {
                limit = limit.min(d.saturating_sub(now));
            }
            if !stopping && now < end_ns {
                limit = limit.min(end_ns - now);
            }
            if limit > 0 {
                wait(&conns, Duration::from_nanos(limit));
            }
        }
    }
    let now = clock.now_ns();
    for c in conns.iter().filter(|c| !c.dead) {
        for (_, m) in &c.inflight {
            if rec.measured(m.t0_ns, now.min(end_ns)) {
                rec.errors += 1;
            }
        }
    }
    let lost = conns.iter().any(|c| c.dead);
    if lost {
        rec.errors += 1;
    }
    Ok(engine::WorkerOut {
        rec,
        written,
        stats,
        lost,
        idle_waits: 0,
        idle_wakes: 0,
        held_back_ns: [0; 3],
    })
}

/// A whole run over TCP (`--transport tcp`). Main thread.
pub fn run_tcp(cfg: &RunConfig, kind: OpKind) -> Result<RunOutput, PerfError> {
    cfg.validate()?;
    let addr = tcp_addr(&cfg.target)?;
    let is_nfs = !matches!(kind, OpKind::Null { .. });
    let io_size = if is_nfs { cfg.size } else { 0 };
    let mut wl = Workload {
        kind,
        cred: cfg.cred()?,
        io_size,
        file: None,
        seq: cfg.nfs.as_ref().is_some_and(|n| n.seq),
        verify: cfg.verify || cfg.verify_only,
        salt: cfg.nfs.as_ref().map_or(0, |n| n.salt),
        stable: cfg.nfs.as_ref().map_or(0, |n| n.stable),
        binding: Nfs3Binding::new(io_size.max(1)),
        // COMMIT every N bytes is a fabric-path option only.
        commit_every: 0,
        v4: None,
    };
    if cfg.nfs.as_ref().is_some_and(|n| n.commit_every > 0) {
        return Err(PerfError::Option(
            "--commit-every is not supported with --transport tcp".into(),
        ));
    }
    if cfg.nfs41 {
        let mut s = TcpSession::connect(addr, cfg.timeout)?;
        crate::nfs4setup::setup(&mut s, &mut wl, cfg)?;
    } else if is_nfs {
        let n = cfg
            .nfs
            .as_ref()
            .ok_or_else(|| PerfError::Option("NFS options missing".into()))?;
        let root = tcp::mount(&n.mount, &n.export, &wl.cred)?;
        let mut s = TcpSession::connect(addr, cfg.timeout)?;
        wl.file = Some(run::prepare_file(&mut s, &wl, cfg, n, &root)?);
    }
    let clock = Clock::start();
    let connect = |_| connect_load(addr, cfg.timeout);
    let work = |socks, plan: &engine::WorkerPlan, start_ns, end_ns, progress: &Progress, abort: &AtomicBool| {
        run_worker(socks, plan, &wl, clock, start_ns, end_ns, cfg.timeout, progress, abort)
    };
    let (outs, cpu, start_ns) = run::drive_workers(cfg, clock, 0, connect, work)?;
    let (mut rec, mut written, _, lost) = run::merge_outs(&outs, start_ns);
    let verified = run::check_back(cfg, &wl, kind, lost, &mut written, &mut rec, |written| {
        TcpSession::connect(addr, cfg.timeout).and_then(|mut s| engine::verify_blocks(&mut s, &wl, written))
    });
    if let Some(n) = cfg.nfs.as_ref().filter(|n| n.unmount && is_nfs && !lost) {
        let _ = tcp::unmount(&n.mount, &n.export, &wl.cred);
    }
    let mut out = run::finish(cfg, kind.name(), "tcp", 0, io_size as u64, rec, clock, verified, &cpu);
    out.target_lost = lost;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader handing out `data` `chunk` bytes at a time, then WouldBlock.
    fn chunked<'a>(data: &'a [u8], chunk: usize) -> impl FnMut(&mut [u8]) -> io::Result<usize> + 'a {
        let mut at = 0;
        move |b: &mut [u8]| {
            if at == data.len() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = chunk.min(b.len()).min(data.len() - at);
            b[..n].copy_from_slice(&data[at..at + n]);
            at += n;
            Ok(n)
        }
    }

    fn frag(last: bool, body: &[u8]) -> Vec<u8> {
        let mut v = RecordMark::new(last, body.len() as u32).unwrap().to_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn framer_reassembles_fragments_in_any_chunking() {
        let big: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut stream = frag(true, b"one");
        stream.extend(frag(false, b"tw"));
        stream.extend(frag(false, b""));
        stream.extend(frag(true, b"o"));
        stream.extend(frag(false, &big[..40_000]));
        stream.extend(frag(true, &big[40_000..]));
        stream.extend(frag(true, b""));
        for chunk in [1, 3, 7, 4096, 65536, 1 << 20] {
            let mut f = Framer::new(200_000);
            let mut got: Vec<Vec<u8>> = Vec::new();
            let n = f.pump(chunked(&stream, chunk), &mut |r| got.push(r.to_vec())).unwrap();
            assert_eq!(n, stream.len());
            assert_eq!(got.len(), 4, "chunk {chunk}");
            assert_eq!((&got[0][..], &got[1][..]), (&b"one"[..], &b"two"[..]));
            assert_eq!(got[2], big, "chunk {chunk}");
            assert!(got[3].is_empty());
        }
    }

    #[test]
    fn framer_refuses_records_over_the_limit_and_reports_eof() {
        let mut f = Framer::new(10);
        let mut stream = frag(false, b"123456");
        stream.extend(frag(true, b"12345"));
        let e = f.pump(chunked(&stream, 100), &mut |_| panic!("no record")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // A mark announcing 2 GiB is refused before anything is stored.
        let mut f = Framer::new(10);
        let e = f
            .pump(chunked(&[0xff, 0xff, 0xff, 0xff, 1], 100), &mut |_| panic!("no record"))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let mut f = Framer::new(10);
        let e = f.pump(|_| Ok(0), &mut |_| {}).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn target_addresses() {
        assert_eq!(tcp_addr("127.0.0.1").unwrap(), "127.0.0.1:2049".parse().unwrap());
        assert_eq!(tcp_addr("127.0.0.1:12049").unwrap(), "127.0.0.1:12049".parse().unwrap());
        assert_eq!(tcp_addr("[::1]:7").unwrap(), "[::1]:7".parse().unwrap());
        assert!(tcp_addr("").is_err());
    }
}
