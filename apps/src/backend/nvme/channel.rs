//! One core's data path, [`NvmeChannel`]: NVMe Read/Write/Flush as
//! `IORING_OP_URING_CMD` on a passthrough ring, O_DIRECT or buffered I/O on a
//! descriptor ring, bounce buffers and read-modify-write for unaligned
//! requests, completions reaped by polling. Owned and polled by one core.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::align::{rmw_plan, round_up, AlignedBuf};
use super::cmd::{NvmeCmd, NVME_OP_FLUSH, NVME_OP_READ, NVME_OP_WRITE, NVME_URING_CMD_IO};
use super::device::{now_ns, Dev, DevIo};
use super::fs::{decode_fh, Node, RangeLock, Shared};
use crate::backend::{FsError, FsResult, IoChannel, IoDesc, IoDone, IoOp, Stable};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Phase {
    #[default]
    Free,
    /// Waiting for the RMW range lock.
    Locking,
    /// Passthrough read into the caller's buffer or the bounce buffer.
    Read,
    /// Reading the partial edge LBAs of an unaligned write.
    RmwRead,
    /// Passthrough write from the caller's buffer or the bounce buffer.
    Write,
    /// Passthrough flush.
    Flush,
    /// One SQE on the descriptor ring (read, write or fsync).
    Fd,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Region {
    pub(super) dev_off: u64,
    pub(super) mem: *mut u8,
    pub(super) len: u64,
}

pub(super) const NO_REGION: Region = Region {
    dev_off: 0,
    mem: std::ptr::null_mut(),
    len: 0,
};

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) tag: u64,
    pub(super) dev: usize,
    pub(super) op: IoOp,
    pub(super) offset: u64,
    pub(super) buf: *mut u8,
    /// Bytes the caller gets (a read is clipped to the capacity).
    pub(super) len: u32,
    pub(super) phase: Phase,
    pub(super) regions: [Region; 2],
    pub(super) nregions: usize,
    /// Issue cursor: region index and offset within it (passthrough).
    pub(super) cur_region: usize,
    pub(super) cur_off: u64,
    /// SQEs of this slot not yet completed.
    pub(super) outstanding: u32,
    pub(super) err: Option<FsError>,
    /// Descriptor path: the CQE's byte count.
    pub(super) bytes: u32,
    pub(super) bounce: Option<AlignedBuf>,
    pub(super) span_off: u64,
    pub(super) range: Option<RangeLock>,
    /// The write was made durable before completion (FUA / RWF_[D]SYNC).
    pub(super) durable: bool,
    pub(super) in_backlog: bool,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            tag: 0,
            dev: 0,
            op: IoOp::Flush,
            offset: 0,
            buf: std::ptr::null_mut(),
            len: 0,
            phase: Phase::Free,
            regions: [NO_REGION; 2],
            nregions: 0,
            cur_region: 0,
            cur_off: 0,
            outstanding: 0,
            err: None,
            bytes: 0,
            bounce: None,
            span_off: 0,
            range: None,
            durable: false,
            in_backlog: false,
        }
    }
}

pub(super) type PtRing = IoUring<squeue::Entry128, cqueue::Entry32>;

/// One core's data path into an [`NvmeBackend`](super::NvmeBackend): a passthrough ring (when a
/// device uses passthrough) and a descriptor ring (when one does not).
/// Owned and polled by one core.
pub struct NvmeChannel {
    shared: Arc<Shared>,
    core: usize,
    pt: Option<PtRing>,
    pt_iopoll: bool,
    /// SQEs the passthrough ring may have outstanding (its SQ size).
    pt_cap: u32,
    pt_hw: u32,
    fd: Option<IoUring>,
    fd_hw: u32,
    slots: Vec<Slot>,
    free: Vec<u32>,
    ready: VecDeque<IoDone>,
    /// Passthrough slots with SQEs still to push (ring full).
    backlog: VecDeque<u32>,
    /// Unaligned passthrough writes waiting for their range lock.
    lock_wait: VecDeque<u32>,
    in_flight: usize,
    bounce_pool: Vec<AlignedBuf>,
    draining: bool,
}

impl fmt::Debug for NvmeChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvmeChannel")
            .field("core", &self.core)
            .field("passthrough_ring", &self.pt.is_some())
            .field("iopoll", &self.pt_iopoll)
            .field("fd_ring", &self.fd.is_some())
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

pub(super) const BOUNCE_POOL_MAX: usize = 4;
pub(super) const CQE_BATCH: usize = 32;

impl NvmeChannel {
    pub(super) fn new(shared: Arc<Shared>, core: usize) -> FsResult<NvmeChannel> {
        let depth = shared.depth;
        let pts: Vec<&Dev> = shared
            .devs
            .iter()
            .filter(|d| matches!(d.io, DevIo::Passthrough { .. }))
            .collect();
        let any_fd = pts.len() < shared.devs.len();
        let pt_iopoll = !pts.is_empty() && pts.iter().all(|d| d.iopoll);
        let pt_cap = 2 * depth;
        let pt = if pts.is_empty() {
            None
        } else {
            let mut b = PtRing::builder();
            if pt_iopoll {
                b.setup_iopoll();
            }
            Some(b.build(pt_cap).map_err(|e| FsError::from_io(&e))?)
        };
        let fd = if any_fd {
            Some(IoUring::new(depth).map_err(|e| FsError::from_io(&e))?)
        } else {
            None
        };
        let n = depth as usize;
        Ok(NvmeChannel {
            shared,
            core,
            pt,
            pt_iopoll,
            pt_cap,
            pt_hw: 0,
            fd,
            fd_hw: 0,
            slots: (0..n).map(|_| Slot::default()).collect(),
            free: (0..n as u32).rev().collect(),
            ready: VecDeque::with_capacity(n),
            backlog: VecDeque::new(),
            lock_wait: VecDeque::new(),
            in_flight: 0,
            bounce_pool: Vec::new(),
            draining: false,
        })
    }

    /// The passthrough ring polls the device (`IORING_SETUP_IOPOLL`).
    pub fn iopoll(&self) -> bool {
        self.pt_iopoll
    }

    fn complete_now(&mut self, done: IoDone) {
        self.ready.push_back(done);
        self.in_flight += 1;
    }

    fn take_bounce(&mut self, len: usize, align: usize) -> AlignedBuf {
        if let Some(i) = self
            .bounce_pool
            .iter()
            .position(|b| b.capacity() >= len && b.layout.align() >= align)
        {
            return self.bounce_pool.swap_remove(i);
        }
        AlignedBuf::new(round_up(len as u64, 64 << 10) as usize, align.max(4096))
    }

    fn give_bounce(&mut self, b: AlignedBuf) {
        if self.bounce_pool.len() < BOUNCE_POOL_MAX && b.capacity() <= (4 << 20) {
            self.bounce_pool.push(b);
        }
    }

    /// Push the slot's remaining passthrough SQEs; false when the ring is full
    /// (the slot then waits on the backlog).
    fn issue_pt(&mut self, si: u32) -> bool {
        let s = &mut self.slots[si as usize];
        let d = &self.shared.devs[s.dev];
        let (fd, nsid) = match &d.io {
            DevIo::Passthrough { ng, nsid } => (ng.as_raw_fd(), *nsid),
            DevIo::Fd { .. } => unreachable!("passthrough slot on a descriptor device"),
        };
        let ring = self.pt.as_mut().expect("passthrough ring");
        let lba = d.lba_bytes as u64;
        loop {
            if self.pt_hw >= self.pt_cap {
                return false;
            }
            let cmd = if s.phase == Phase::Flush {
                if s.cur_region > 0 {
                    return true;
                }
                s.cur_region = 1;
                NvmeCmd {
                    opcode: NVME_OP_FLUSH,
                    nsid,
                    ..Default::default()
                }
            } else {
                if s.cur_region >= s.nregions {
                    return true;
                }
                let r = s.regions[s.cur_region];
                let chunk = (r.len - s.cur_off).min(d.max_xfer_bytes as u64);
                let dev_off = r.dev_off + s.cur_off;
                // SAFETY: within the region's memory (`cur_off + chunk <= len`).
                let mem = unsafe { r.mem.add(s.cur_off as usize) };
                let (op, fua) = match s.phase {
                    Phase::Write => (NVME_OP_WRITE, s.durable),
                    _ => (NVME_OP_READ, false),
                };
                s.cur_off += chunk;
                if s.cur_off == r.len {
                    s.cur_region += 1;
                    s.cur_off = 0;
                }
                NvmeCmd::rw(
                    op,
                    nsid,
                    dev_off / lba,
                    (chunk / lba) as u32,
                    mem as u64,
                    chunk as u32,
                    fua,
                )
            };
            let sqe = opcode::UringCmd80::new(types::Fd(fd), NVME_URING_CMD_IO)
                .cmd(cmd.encode())
                .build()
                .user_data(si as u64);
            // SAFETY: the command's buffer (caller's, per the `submit` contract,
            // or the slot's bounce buffer, kept until the slot completes) stays
            // valid until its CQE is reaped. The SQ has `pt_cap` entries and at
            // most `pt_cap` SQEs are outstanding, so the push cannot fail.
            let pushed = unsafe { ring.submission().push(&sqe) };
            debug_assert!(pushed.is_ok());
            if pushed.is_err() {
                return false;
            }
            self.pt_hw += 1;
            s.outstanding += 1;
        }
    }

    fn issue_or_backlog(&mut self, si: u32) {
        if !self.issue_pt(si) {
            let s = &mut self.slots[si as usize];
            if !s.in_backlog {
                s.in_backlog = true;
                self.backlog.push_back(si);
            }
        }
    }

    /// Start a passthrough phase over `regions`.
    fn start_phase(&mut self, si: u32, phase: Phase, regions: &[Region]) {
        let s = &mut self.slots[si as usize];
        s.phase = phase;
        s.nregions = regions.len();
        s.regions[..regions.len()].copy_from_slice(regions);
        s.cur_region = 0;
        s.cur_off = 0;
        self.issue_or_backlog(si);
    }

    /// Set up an unaligned passthrough write once its range lock is held.
    fn start_rmw(&mut self, si: u32) {
        let s = &self.slots[si as usize];
        let lba = self.shared.devs[s.dev].lba_bytes as u64;
        let (a0, a1, edges) = rmw_plan(s.offset, s.len as u64, lba);
        let bounce = self.take_bounce((a1 - a0) as usize, lba as usize);
        let base = bounce.as_ptr();
        let s = &mut self.slots[si as usize];
        s.span_off = a0;
        s.bounce = Some(bounce);
        let mut regions = [NO_REGION; 2];
        let mut n = 0;
        for e in edges.into_iter().flatten() {
            regions[n] = Region {
                dev_off: e,
                // SAFETY: `e - a0 + lba <= a1 - a0`, within the bounce buffer.
                mem: unsafe { base.add((e - a0) as usize) },
                len: lba,
            };
            n += 1;
        }
        if n == 0 {
            // Only the memory was misaligned: nothing to read first.
            self.merge_and_write(si);
        } else {
            self.start_phase(si, Phase::RmwRead, &regions[..n]);
        }
    }

    /// Copy the caller's data into the bounce span and write the span.
    fn merge_and_write(&mut self, si: u32) {
        let s = &mut self.slots[si as usize];
        let lba = self.shared.devs[s.dev].lba_bytes as u64;
        let bounce = s.bounce.as_ref().expect("rmw bounce").as_ptr();
        let span_len = round_up(s.offset + s.len as u64, lba) - s.span_off;
        // SAFETY: the caller's buffer is valid for `len` bytes (submit
        // contract); the bounce buffer holds the span, which contains
        // [offset, offset + len); the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(s.buf, bounce.add((s.offset - s.span_off) as usize), s.len as usize);
        }
        let r = Region {
            dev_off: s.span_off,
            mem: bounce,
            len: span_len,
        };
        self.start_phase(si, Phase::Write, &[r]);
    }

    fn finish(&mut self, si: u32) {
        let s = &mut self.slots[si as usize];
        let d = &self.shared.devs[s.dev];
        let result = match s.err {
            Some(e) => Err(e),
            None => Ok(if s.phase == Phase::Fd { s.bytes } else { s.len }),
        };
        let mut done = IoDone {
            tag: s.tag,
            result,
            eof: false,
            committed: Stable::Unstable,
        };
        match s.op {
            IoOp::Read => {
                if let Ok(n) = result {
                    done.eof = s.offset + n as u64 >= d.size_bytes || n < s.len;
                }
            }
            IoOp::Write(stable) => {
                if result.is_ok() {
                    if s.durable {
                        done.committed = stable;
                    }
                    d.mtime_ns.fetch_max(now_ns(), Ordering::Relaxed);
                }
            }
            IoOp::Flush | IoOp::FlushData => {}
        }
        if let Some(r) = s.range.take() {
            self.shared.unlock_range(r);
        }
        let bounce = s.bounce.take();
        *s = Slot::default();
        if let Some(b) = bounce {
            self.give_bounce(b);
        }
        self.free.push(si);
        self.ready.push_back(done);
    }

    /// All SQEs of the slot's current passthrough phase completed.
    fn phase_done(&mut self, si: u32) {
        let s = &mut self.slots[si as usize];
        if s.err.is_some() {
            return self.finish(si);
        }
        if self.draining {
            // Dropped with I/O in flight: nobody will see the result, and the
            // caller's buffer must not be touched any more.
            s.err = Some(FsError::Io);
            return self.finish(si);
        }
        match s.phase {
            Phase::Read => {
                if let Some(b) = &s.bounce {
                    // SAFETY: the bounce span covers [offset, offset + len) and
                    // was filled by the read; the caller's buffer is valid for
                    // `len` bytes (submit contract).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            b.as_ptr().add((s.offset - s.span_off) as usize),
                            s.buf,
                            s.len as usize,
                        );
                    }
                }
                self.finish(si)
            }
            Phase::RmwRead => self.merge_and_write(si),
            _ => self.finish(si),
        }
    }

    fn on_pt_cqe(&mut self, si: u32, res: i32) {
        self.pt_hw -= 1;
        let Some(s) = self.slots.get_mut(si as usize) else {
            return;
        };
        s.outstanding -= 1;
        if res != 0 && s.err.is_none() {
            s.err = Some(if res < 0 {
                FsError::from_errno(-res)
            } else {
                // An NVMe status code (status field of the completion).
                tracing::warn!(status = res, dev = s.dev, "nvme: command failed");
                FsError::Io
            });
        }
        if s.err.is_some() {
            // Stop issuing the rest of this phase.
            s.cur_region = s.nregions.max(1);
        }
        let all_issued = if s.phase == Phase::Flush {
            s.cur_region > 0
        } else {
            s.cur_region >= s.nregions
        };
        if s.outstanding == 0 && all_issued && !s.in_backlog {
            self.phase_done(si);
        }
    }

    fn on_fd_cqe(&mut self, si: u32, res: i32) {
        self.fd_hw -= 1;
        let Some(s) = self.slots.get_mut(si as usize) else {
            return;
        };
        s.outstanding -= 1;
        if res < 0 {
            s.err = Some(FsError::from_errno(-res));
        } else {
            s.bytes = res as u32;
        }
        self.finish(si);
    }

    fn retry_waiting(&mut self) {
        while let Some(&si) = self.backlog.front() {
            if !self.issue_pt(si) {
                break;
            }
            self.backlog.pop_front();
            let s = &mut self.slots[si as usize];
            s.in_backlog = false;
            if s.outstanding == 0 {
                // Everything completed while waiting (an error cut it short).
                self.phase_done(si);
            }
        }
        let n = self.lock_wait.len();
        for _ in 0..n {
            let Some(si) = self.lock_wait.pop_front() else { break };
            let r = self.slots[si as usize].range.expect("waiting slot has a range");
            if self.shared.try_lock_range(r) {
                self.start_rmw(si);
            } else {
                self.lock_wait.push_back(si);
            }
        }
    }

    /// Hand queued SQEs to the kernel; on an IOPOLL ring also poll the device
    /// once. Never waits.
    fn enter(&mut self) {
        if let Some(ring) = &mut self.pt {
            let queued = !ring.submission().is_empty();
            if queued || (self.pt_iopoll && self.pt_hw > 0) {
                // EAGAIN/EBUSY/EINTR: the SQEs stay queued for the next poll.
                let _ = ring.submit();
            }
        }
        if let Some(ring) = &mut self.fd {
            if !ring.submission().is_empty() {
                let _ = ring.submit();
            }
        }
    }

    fn reap(&mut self) {
        let mut batch = [(0u64, 0i32); CQE_BATCH];
        loop {
            let mut k = 0;
            if let Some(ring) = &mut self.pt {
                for cqe in ring.completion() {
                    batch[k] = (cqe.user_data(), cqe.result());
                    k += 1;
                    if k == CQE_BATCH {
                        break;
                    }
                }
            }
            for &(ud, res) in &batch[..k] {
                self.on_pt_cqe(ud as u32, res);
            }
            let mut j = 0;
            if let Some(ring) = &mut self.fd {
                for cqe in ring.completion() {
                    batch[j] = (cqe.user_data(), cqe.result());
                    j += 1;
                    if j == CQE_BATCH {
                        break;
                    }
                }
            }
            for &(ud, res) in &batch[..j] {
                self.on_fd_cqe(ud as u32, res);
            }
            if k < CQE_BATCH && j < CQE_BATCH {
                break;
            }
        }
    }

    fn pump(&mut self) {
        self.retry_waiting();
        self.enter();
        self.reap();
        // Phase changes and freed ring space may have queued more work.
        self.retry_waiting();
        let queued = self.pt.as_mut().is_some_and(|r| !r.submission().is_empty())
            || self.fd.as_mut().is_some_and(|r| !r.submission().is_empty());
        if queued {
            self.enter();
        }
    }

    fn submit_fd(&mut self, si: u32, io: &IoDesc, len: u32) -> FsResult<()> {
        let d = &self.shared.devs[self.slots[si as usize].dev];
        let DevIo::Fd { direct, buffered } = &d.io else {
            unreachable!("descriptor slot on a passthrough device")
        };
        let lba = d.lba_bytes as u64;
        let aligned = io.offset % lba == 0 && len as u64 % lba == 0 && (io.buf as usize as u64) % lba == 0;
        let fd: RawFd = match direct {
            Some(f) if aligned => f.as_raw_fd(),
            _ => buffered.as_raw_fd(),
        };
        let s = &mut self.slots[si as usize];
        let sqe = match io.op {
            IoOp::Read => opcode::Read::new(types::Fd(fd), io.buf, len).offset(io.offset).build(),
            IoOp::Write(stable) => {
                let flags = match stable {
                    Stable::Unstable => 0,
                    Stable::DataSync => libc::RWF_DSYNC,
                    Stable::FileSync => libc::RWF_SYNC,
                };
                s.durable = stable != Stable::Unstable;
                opcode::Write::new(types::Fd(fd), io.buf, len)
                    .offset(io.offset)
                    .rw_flags(flags)
                    .build()
            }
            IoOp::Flush | IoOp::FlushData => opcode::Fsync::new(types::Fd(buffered.as_raw_fd())).build(),
        };
        s.phase = Phase::Fd;
        s.outstanding = 1;
        let ring = self.fd.as_mut().expect("descriptor ring");
        // SAFETY: the buffer is the caller's, valid until the completion is
        // reaped (submit contract). The ring has `depth` entries and each of
        // the at most `depth` slots has at most one SQE outstanding.
        let pushed = unsafe { ring.submission().push(&sqe.user_data(si as u64)) };
        if pushed.is_err() {
            return Err(FsError::Jukebox);
        }
        self.fd_hw += 1;
        Ok(())
    }
}

pub(super) fn aligned_to(offset: u64, len: u64, buf: *mut u8, lba: u64) -> bool {
    offset % lba == 0 && len % lba == 0 && (buf as usize as u64) % lba == 0
}

impl IoChannel for NvmeChannel {
    /// Errors found before queuing (bad handle, the root, a write past the
    /// capacity, a null buffer) are returned here and produce no completion.
    /// Runs on the channel's core.
    unsafe fn submit(&mut self, io: IoDesc) -> FsResult<()> {
        if self.in_flight >= self.slots.len() {
            return Err(FsError::Jukebox);
        }
        let di = match decode_fh(&self.shared, &io.fh)? {
            Node::Root => return Err(FsError::IsDir),
            Node::File(i) => i,
        };
        let d = &self.shared.devs[di];
        let size = d.size_bytes;
        let lba = d.lba_bytes as u64;
        let is_pt = matches!(d.io, DevIo::Passthrough { .. });
        let mut len = io.len;
        match io.op {
            IoOp::Read => {
                if len > 0 && io.buf.is_null() {
                    return Err(FsError::Inval);
                }
                if io.offset >= size || len == 0 {
                    self.complete_now(IoDone {
                        tag: io.tag,
                        result: Ok(0),
                        eof: io.offset >= size,
                        committed: Stable::Unstable,
                    });
                    return Ok(());
                }
                len = (len as u64).min(size - io.offset) as u32;
            }
            IoOp::Write(stable) => {
                if len > 0 && io.buf.is_null() {
                    return Err(FsError::Inval);
                }
                match io.offset.checked_add(len as u64) {
                    Some(end) if end <= size => {}
                    _ => return Err(FsError::FBig),
                }
                if len == 0 {
                    self.complete_now(IoDone {
                        tag: io.tag,
                        result: Ok(0),
                        eof: false,
                        committed: stable,
                    });
                    return Ok(());
                }
            }
            IoOp::Flush | IoOp::FlushData => {}
        }
        let Some(si) = self.free.pop() else {
            return Err(FsError::Jukebox);
        };
        {
            let s = &mut self.slots[si as usize];
            *s = Slot {
                tag: io.tag,
                dev: di,
                op: io.op,
                offset: io.offset,
                buf: io.buf,
                len,
                ..Slot::default()
            };
        }
        if !is_pt {
            if let Err(e) = self.submit_fd(si, &io, len) {
                self.slots[si as usize] = Slot::default();
                self.free.push(si);
                return Err(e);
            }
            self.in_flight += 1;
            return Ok(());
        }
        self.in_flight += 1;
        match io.op {
            IoOp::Flush | IoOp::FlushData => {
                self.slots[si as usize].phase = Phase::Flush;
                self.issue_or_backlog(si);
            }
            IoOp::Read => {
                if aligned_to(io.offset, len as u64, io.buf, lba) {
                    let r = Region {
                        dev_off: io.offset,
                        mem: io.buf,
                        len: len as u64,
                    };
                    self.start_phase(si, Phase::Read, &[r]);
                } else {
                    let (a0, a1, _) = rmw_plan(io.offset, len as u64, lba);
                    let bounce = self.take_bounce((a1 - a0) as usize, lba as usize);
                    let r = Region {
                        dev_off: a0,
                        mem: bounce.as_ptr(),
                        len: a1 - a0,
                    };
                    let s = &mut self.slots[si as usize];
                    s.span_off = a0;
                    s.bounce = Some(bounce);
                    self.start_phase(si, Phase::Read, &[r]);
                }
            }
            IoOp::Write(stable) => {
                self.slots[si as usize].durable = stable != Stable::Unstable;
                if aligned_to(io.offset, len as u64, io.buf, lba) {
                    let r = Region {
                        dev_off: io.offset,
                        mem: io.buf,
                        len: len as u64,
                    };
                    self.start_phase(si, Phase::Write, &[r]);
                } else {
                    let (a0, a1, edges) = rmw_plan(io.offset, len as u64, lba);
                    if edges.iter().all(Option::is_none) {
                        // Whole LBAs from a misaligned buffer: no lock needed.
                        self.start_rmw(si);
                    } else {
                        let r = RangeLock {
                            dev: di,
                            start: a0,
                            end: a1,
                        };
                        self.slots[si as usize].range = Some(r);
                        if self.shared.try_lock_range(r) {
                            self.start_rmw(si);
                        } else {
                            self.slots[si as usize].phase = Phase::Locking;
                            self.lock_wait.push_back(si);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs on the channel's core; never blocks (one non-blocking
    /// `io_uring_enter` per ring with work queued, or with I/O outstanding on
    /// an IOPOLL ring).
    fn poll(&mut self, out: &mut [IoDone]) -> usize {
        if self.in_flight == 0 || out.is_empty() {
            return 0;
        }
        if self.ready.len() < out.len() {
            self.pump();
        }
        let mut n = 0;
        while n < out.len() {
            let Some(d) = self.ready.pop_front() else { break };
            out[n] = d;
            n += 1;
            self.in_flight -= 1;
        }
        n
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Device or kernel I/O: yes.
    fn completes_later(&self) -> bool {
        true
    }
}

impl Drop for NvmeChannel {
    /// Waits (blocking) until the kernel is done with every buffer it was
    /// given, so that bounce buffers are not freed under a DMA.
    fn drop(&mut self) {
        self.draining = true;
        // Never reached the device.
        while let Some(si) = self.lock_wait.pop_front() {
            let s = &mut self.slots[si as usize];
            s.range = None;
            s.err = Some(FsError::Io);
            self.finish(si);
        }
        while let Some(si) = self.backlog.pop_front() {
            let s = &mut self.slots[si as usize];
            s.in_backlog = false;
            s.err.get_or_insert(FsError::Io);
            s.cur_region = s.nregions.max(1);
            if s.outstanding == 0 {
                self.finish(si);
            }
        }
        let mut failures = 0;
        while self.pt_hw > 0 || self.fd_hw > 0 {
            let mut ok = true;
            if self.pt_hw > 0 {
                if let Some(r) = &mut self.pt {
                    ok &= r.submit_and_wait(1).is_ok();
                }
            }
            if self.fd_hw > 0 {
                if let Some(r) = &mut self.fd {
                    ok &= r.submit_and_wait(1).is_ok();
                }
            }
            self.reap();
            if !ok {
                failures += 1;
                if failures > 1000 {
                    // The kernel may still own them: leak rather than free.
                    for s in &mut self.slots {
                        if let Some(b) = s.bounce.take() {
                            std::mem::forget(b);
                        }
                    }
                    break;
                }
            }
        }
    }
}
