//! `perf raw`: the fabric's own ping-pong, without RPC or RPC-over-RDMA
//! headers — the floor every RPC figure is compared with.
//!
//! The client sends `size`-byte Sends (up to `qd` outstanding per
//! connection); the echo side answers every received message with a Send of
//! the same length. A round trip is timed from just before the client posts
//! its Send to the moment its poll returns the answer's receive completion, so
//! it contains what an RPC round trip contains minus the transport engine and
//! the RPC layers: two Sends, two receive completions, two receive reposts.
//!
//! Neither side reads the messages it receives: a fabric moves the bytes and
//! the receiving CPU need not look at them. With `touch` each side reads
//! every message it receives (every byte, as 8-byte words) before answering
//! or timing it, as an RPC layer must to decode it; that is the floor plus
//! moving the message's cache lines to the reading CPU, a reference for how
//! much of an RPC's round trip is that movement rather than its software.
//!
//! Both sides post receives before the peer can send, signal one Send in
//! [`SIGNAL_EVERY`] (so a verbs send queue drains) and never allocate on the
//! data path. Each side runs on one thread; the echo side serves any number
//! of connections on one CQ.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::{
    CmEvent, Completion, ConnId, CqId, Fabric, FabricError, LocalBuf, QpConfig, RecvWr, SendOp, SendWr, WcOpcode, WrId,
};
use mempool::region::{Region, RegionConfig};

use crate::engine::{Clock, FabricMaker, Progress, Recorder};
use crate::PerfError;

/// Default message size: about an RPC-over-RDMA NULL. A version 1 NULL Call
/// with AUTH_NONE is a 28-byte transport header plus a 40-byte RPC header (68
/// bytes), its Reply 28 + 24 = 52 bytes.
pub const DEFAULT_SIZE: u32 = 64;
/// Largest raw message.
pub const MAX_SIZE: u32 = 1 << 20;
/// One Send in this many is signaled.
pub const SIGNAL_EVERY: u64 = 8;
/// Receives an echo side posts per connection beyond the client's depth.
const RECV_SLACK: u32 = 4;
/// Connection slots of an echo side (reused round-robin).
pub const ECHO_SLOTS: u32 = 16;

const TAG_RECV: u8 = 1;
const TAG_SEND: u8 = 2;

fn stride(size: u32) -> u64 {
    (size.max(64) as u64).next_multiple_of(64)
}

fn region(len: u64) -> Result<Arc<Region>, PerfError> {
    let cfg = RegionConfig {
        lock: false,
        ..RegionConfig::default()
    };
    Ok(Arc::new(Region::create(0, len as usize, &cfg)?))
}

/// One endpoint: a fabric with one registered region and one CQ.
struct Endpoint<F: Fabric> {
    f: F,
    cq: CqId,
    region: Arc<Region>,
}

impl<F: Fabric> Endpoint<F> {
    fn new<M: FabricMaker<F = F>>(maker: &M, len: u64, cq_depth: u32) -> Result<Self, PerfError> {
        let mut f = maker.make()?;
        let region = region(len)?;
        f.register_region(&region, dataplane::fabric::RegionAccess::Local)?;
        let cq = f.create_cq(cq_depth)?;
        Ok(Endpoint { f, cq, region })
    }

    fn buf(&self, offset: u64, len: u32) -> LocalBuf {
        LocalBuf {
            region: self.region.id(),
            offset,
            len,
        }
    }

    /// [`touch`] on this endpoint's region.
    fn touch(&self, offset: u64, len: u32) -> u64 {
        touch(&self.region, offset, len)
    }
}

/// Reads the `len` bytes at `offset` of the region (a received message)
/// one 8-byte word at a time and returns their wrapping sum, so the
/// reading CPU pulls in every cache line of the message as an RPC layer
/// decoding it would. Ranges outside the region read nothing.
fn touch(region: &Region, offset: u64, len: u32) -> u64 {
    let (Ok(start), Ok(len)) = (usize::try_from(offset), usize::try_from(len)) else {
        return 0;
    };
    let Some(end) = start.checked_add(len).filter(|&e| e <= region.len()) else {
        return 0;
    };
    let base = region.as_ptr();
    let mut sum = 0u64;
    let mut at = start;
    while at < end {
        let n = (end - at).min(8);
        let mut word = [0u8; 8];
        // SAFETY: `at..at + n` lies inside the region (checked above),
        // which stays mapped while borrowed. The bytes are a
        // message the peer finished writing before the receive completion
        // that named it was polled (the completion's Acquire makes them
        // visible), and the peer does not write the buffer again until it
        // is reposted, after this read.
        unsafe { std::ptr::copy_nonoverlapping(base.add(at), word.as_mut_ptr(), n) };
        sum = sum.wrapping_add(u64::from_le_bytes(word));
        at += 8;
    }
    std::hint::black_box(sum)
}

/// A client connection's ping-pong state.
struct Pinger<F: Fabric> {
    ep: Endpoint<F>,
    conn: ConnId,
    recvs: u32,
    size: u32,
    sent: u64,
    /// Send times of the messages in flight, oldest first (an RC connection
    /// delivers the answers in order).
    inflight: VecDeque<u64>,
    dead: bool,
}

impl<F: Fabric> Pinger<F> {
    fn connect<M: FabricMaker<F = F>>(
        maker: &M,
        addr: &str,
        size: u32,
        qd: u32,
        timeout: Duration,
    ) -> Result<Self, PerfError> {
        let recvs = qd + RECV_SLACK;
        let st = stride(size);
        let mut ep = Endpoint::new(maker, st * (recvs as u64 + 1), 4 * recvs + 64)?;
        let qp = QpConfig {
            cq: ep.cq,
            send_depth: 2 * qd + 2 * SIGNAL_EVERY as u32 + 8,
            recv_depth: recvs,
            ..QpConfig::default()
        };
        let conn = ep.f.connect(addr, &qp, b"")?;
        for i in 0..recvs {
            let wr = RecvWr {
                wr_id: WrId::new(TAG_RECV, i as u64),
                buf: ep.buf(i as u64 * st, size),
            };
            ep.f.post_recv(conn, &wr)?;
        }
        let t0 = Instant::now();
        loop {
            match ep.f.poll_cm() {
                Some(CmEvent::Established { conn: c, .. }) if c == conn => break,
                Some(CmEvent::Rejected { .. } | CmEvent::Unreachable { .. } | CmEvent::Disconnected { .. }) => {
                    return Err(PerfError::Connect(format!("raw connection to {addr} failed")))
                }
                _ if t0.elapsed() > timeout => {
                    return Err(PerfError::Connect(format!("{addr}: no connection after {timeout:?}")))
                }
                _ => std::thread::yield_now(),
            }
        }
        Ok(Pinger {
            ep,
            conn,
            recvs,
            size,
            sent: 0,
            inflight: VecDeque::with_capacity(qd as usize),
            dead: false,
        })
    }

    fn send(&mut self, t0: u64) -> Result<(), PerfError> {
        let mut wr = SendWr::new(
            WrId::new(TAG_SEND, 0),
            SendOp::Send,
            self.ep.buf(self.recvs as u64 * stride(self.size), self.size),
            Default::default(),
        );
        self.sent += 1;
        wr.signaled = self.sent.is_multiple_of(SIGNAL_EVERY);
        self.ep.f.post_send(self.conn, &wr)?;
        self.inflight.push_back(t0);
        Ok(())
    }
}

/// Ping-pong on connections to `addr` until the window is over (count mode:
/// `quotas[i]` measured round trips on connection `i`). `ready` is called once
/// every connection is up and returns the clock and the measured window.
/// Worker thread.
#[allow(clippy::too_many_arguments)]
pub fn client<M: FabricMaker>(
    maker: &M,
    addr: &str,
    conns: usize,
    size: u32,
    qd: u32,
    timeout: Duration,
    ready: impl FnOnce() -> (Clock, u64, u64),
    quotas: Option<Vec<u64>>,
    progress: &Progress,
    abort: &AtomicBool,
    touch: bool,
) -> Result<Recorder, PerfError> {
    let mut ps = Vec::with_capacity(conns);
    for _ in 0..conns {
        ps.push(Pinger::connect(maker, addr, size, qd, timeout)?);
    }
    let (clock, start_ns, end_ns) = ready();
    let mut rec = Recorder::new(start_ns, end_ns);
    let count_mode = quotas.is_some();
    let mut left: Vec<Option<u64>> = match quotas {
        Some(q) => (0..conns).map(|i| Some(q.get(i).copied().unwrap_or(0))).collect(),
        None => vec![None; conns],
    };
    let mut wc = [Completion::EMPTY; 32];
    let st = stride(size);
    for p in ps.iter_mut() {
        for _ in 0..qd {
            p.send(clock.now_ns())?;
        }
    }
    let mut drain_deadline = None;
    loop {
        let now = clock.now_ns();
        let quota_done = left.iter().zip(&ps).all(|(q, p)| p.dead || *q == Some(0));
        let stopping = now >= end_ns || (count_mode && quota_done) || abort.load(Ordering::Relaxed);
        if stopping && drain_deadline.is_none() {
            drain_deadline = Some(now + timeout.as_nanos() as u64);
        }
        let mut busy = 0;
        for (p, q) in ps.iter_mut().zip(left.iter_mut()).filter(|(p, _)| !p.dead) {
            let n = p.ep.f.poll_cq(p.ep.cq, &mut wc);
            for w in &wc[..n] {
                if !w.status.is_success() {
                    p.dead = true;
                    break;
                }
                if w.opcode != WcOpcode::Recv {
                    continue;
                }
                let i = w.wr_id.index();
                if touch {
                    p.ep.touch(i * st, w.byte_len.min(size));
                }
                let t = clock.now_ns();
                let Some(t0) = p.inflight.pop_front() else {
                    p.dead = true;
                    break;
                };
                let ok = w.byte_len == size;
                rec.complete(t0, t, ok);
                if rec.measured(t0, t) {
                    if let Some(k) = q.as_mut() {
                        *k = k.saturating_sub(1);
                    }
                }
                let r = RecvWr {
                    wr_id: w.wr_id,
                    buf: p.ep.buf(i * st, size),
                };
                p.ep.f.post_recv(p.conn, &r)?;
                if !stopping && *q != Some(0) {
                    p.send(clock.now_ns())?;
                }
            }
            busy += p.inflight.len();
        }
        progress.ops.store(rec.ops, Ordering::Relaxed);
        progress.errors.store(rec.errors, Ordering::Relaxed);
        if stopping && (busy == 0 || drain_deadline.is_some_and(|d| clock.now_ns() >= d)) {
            break;
        }
    }
    // A lost connection is an error of the run; so is every round trip of the
    // measured window still unanswered after the drain time.
    if ps.iter().any(|p| p.dead) {
        rec.errors += 1;
    }
    let now = clock.now_ns();
    for p in ps.iter().filter(|p| !p.dead) {
        rec.errors += p
            .inflight
            .iter()
            .filter(|&&t0| rec.measured(t0, now.min(end_ns)))
            .count() as u64;
    }
    for p in ps.iter_mut() {
        let _ = p.ep.f.disconnect(p.conn);
    }
    Ok(rec)
}

/// The echo side: listen at `addr` and answer every message with a Send of
/// the same length, for up to [`ECHO_SLOTS`] connections at a time of depth
/// `qd` and messages of at most `size` bytes, until `stop` is set. `ready` is
/// called once listening. Its own thread.
pub fn echo<M: FabricMaker>(
    maker: &M,
    addr: &str,
    size: u32,
    qd: u32,
    stop: &AtomicBool,
    touch: bool,
    ready: impl FnOnce(),
) -> Result<u64, PerfError> {
    let recvs = qd + RECV_SLACK;
    let st = stride(size);
    let per_slot = recvs as u64 * st;
    let len = per_slot * ECHO_SLOTS as u64 + st;
    if len > 1 << 31 {
        return Err(PerfError::Option(format!(
            "echo buffers would take {len} bytes: lower --size or --qd"
        )));
    }
    let mut ep = Endpoint::new(maker, len, (4 * recvs + 64) * ECHO_SLOTS)?;
    ep.f.listen(addr)?;
    ready();
    let send_at = per_slot * ECHO_SLOTS as u64;
    let mut next_slot = 0u32;
    let mut sent = 0u64;
    let mut wc = [Completion::EMPTY; 32];
    let mut tick = 0u32;
    // Answers not posted yet: (connection, length, tick queued).
    let mut pending: VecDeque<(ConnId, u32, u32)> = VecDeque::with_capacity(64);
    while !stop.load(Ordering::Relaxed) {
        tick = tick.wrapping_add(1);
        if tick.is_multiple_of(256) {
            while let Some(ev) = ep.f.poll_cm() {
                if let CmEvent::ConnectRequest { req, .. } = ev {
                    let qp = QpConfig {
                        cq: ep.cq,
                        send_depth: 2 * qd + 2 * SIGNAL_EVERY as u32 + 8,
                        recv_depth: recvs,
                        ..QpConfig::default()
                    };
                    let slot = next_slot % ECHO_SLOTS;
                    next_slot = next_slot.wrapping_add(1);
                    if let Ok(c) = ep.f.accept(req, &qp, b"") {
                        for i in 0..recvs {
                            let idx = slot as u64 * recvs as u64 + i as u64;
                            let wr = RecvWr {
                                wr_id: WrId::new(TAG_RECV, idx),
                                buf: ep.buf(idx * st, size),
                            };
                            if ep.f.post_recv(c, &wr).is_err() {
                                let _ = ep.f.disconnect(c);
                                break;
                            }
                        }
                    }
                }
            }
        }
        let n = ep.f.poll_cq(ep.cq, &mut wc);
        for w in &wc[..n] {
            if w.opcode != WcOpcode::Recv || !w.status.is_success() {
                continue;
            }
            if touch {
                ep.touch(w.wr_id.index() * st, w.byte_len.min(size));
            }
            let r = RecvWr {
                wr_id: w.wr_id,
                buf: ep.buf(w.wr_id.index() * st, size),
            };
            if ep.f.post_recv(w.conn, &r).is_err() {
                continue;
            }
            pending.push_back((w.conn, w.byte_len.min(size), tick));
        }
        if !pending.is_empty() {
            flush_echoes(&mut ep, &mut pending, send_at, &mut sent, tick);
        }
    }
    Ok(sent)
}

/// Post the queued answers in order. A connection whose first message arrived
/// before the handshake finished on this side (the RTU is read by `poll_cm`)
/// cannot send yet: its answers wait, in order, and are dropped if it never
/// becomes ready (about a million turns of the loop).
fn flush_echoes<F: Fabric>(
    ep: &mut Endpoint<F>,
    pending: &mut VecDeque<(ConnId, u32, u32)>,
    send_at: u64,
    sent: &mut u64,
    tick: u32,
) {
    let mut blocked: Vec<ConnId> = Vec::new();
    pending.retain(|&(c, len, since)| {
        if blocked.contains(&c) {
            return true;
        }
        let mut s = SendWr::new(
            WrId::new(TAG_SEND, 0),
            SendOp::Send,
            ep.buf(send_at, len),
            Default::default(),
        );
        s.signaled = (*sent + 1).is_multiple_of(SIGNAL_EVERY);
        match ep.f.post_send(c, &s) {
            Ok(()) => {
                *sent += 1;
                false
            }
            Err(FabricError::NotConnected(_) | FabricError::QueueFull { .. }) if tick.wrapping_sub(since) < 1 << 20 => {
                blocked.push(c);
                true
            }
            Err(_) => false,
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_reads_every_byte_of_the_range_and_nothing_outside() {
        let r = region(4096).unwrap();
        // SAFETY: the region is 4096 bytes, ours alone, and mapped while `r` lives.
        let bytes = unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), 4096) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let expect = |off: usize, len: usize| {
            bytes[off..off + len].chunks(8).fold(0u64, |s, c| {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                s.wrapping_add(u64::from_le_bytes(w))
            })
        };
        for (off, len) in [(0, 64), (64, 100), (3, 13), (4000, 96), (0, 4096), (4095, 1)] {
            assert_eq!(touch(&r, off as u64, len as u32), expect(off, len), "{off}+{len}");
        }
        // A change anywhere in the range changes the sum.
        let before = touch(&r, 128, 68);
        bytes[128 + 67] ^= 1;
        assert_ne!(touch(&r, 128, 68), before);
        // Out of the region: nothing is read.
        let end = r.len() as u64;
        // SAFETY: the last byte of the region, ours alone.
        unsafe { *r.as_ptr().add(r.len() - 1) = 1 };
        assert_eq!(touch(&r, end - 96, 96), 1 << 56);
        assert_eq!(touch(&r, end - 96, 97), 0);
        assert_eq!(touch(&r, u64::MAX, 8), 0);
        assert_eq!(touch(&r, 8, 0), 0);
    }

    #[test]
    fn strides_hold_a_message() {
        assert_eq!(stride(1), 64);
        assert_eq!(stride(64), 64);
        assert_eq!(stride(65), 128);
        assert_eq!(stride(4096), 4096);
        assert_eq!(stride(MAX_SIZE), MAX_SIZE as u64);
    }
}
