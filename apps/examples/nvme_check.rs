//! `nvme_check`: run the `nvme` backend against a real NVMe namespace (a VM's
//! emulated one: `tests/nvme/run.sh`). Destroys the namespace's data.
//!
//! Usage: `nvme_check [--iopoll yes|no] /dev/ngXnY /dev/nvmeXnY`
//!
//! 1. reads the whole namespace through passthrough into a model;
//! 2. passthrough: fixed cases (1 byte to 1 MiB, aligned and not, at the
//!    edges of the namespace), concurrent unaligned writes sharing LBAs (the
//!    read-modify-write lock), random batches of writes and reads in flight
//!    together, every read checked against the model, flush;
//! 3. O_DIRECT on the block device: the whole namespace equals the model
//!    (what passthrough wrote is on the media), then the same workload;
//! 4. passthrough again: the whole namespace equals the model;
//! 5. the char device with passthrough off (block device underneath).
//!
//! Phase 1 also checks what `df` and `cp` onto the device file see: FSSTAT,
//! FSINFO's features, SETATTR truncation (issue 21 item 11).
//!
//! Prints `nvme_check: PASS ...` last when everything held; exits 1 otherwise.
//! `--iopoll yes|no` also checks whether the passthrough ring polls the device
//! (`yes` on a kernel whose passthrough polling is unsafe: that it does not).

use std::alloc::{self, Layout};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use rpcrdma_apps::backend::nvme::{IoMode, NvmeBackend, NvmeChannel};
use rpcrdma_apps::backend::{
    flush_sync, Backend, FileHandle, FsError, IoChannel, IoDesc, IoDone, IoOp, SetAttr, Stable,
};

const QUEUE_DEPTH: u32 = 32;
const BATCH: usize = 8;
const MAX_IO: usize = 1 << 20;

/// 4096-aligned scratch memory: `BATCH` slots of `MAX_IO` + 8 KiB.
struct Arena {
    ptr: *mut u8,
    layout: Layout,
}

impl Arena {
    fn new() -> Self {
        let layout = Layout::from_size_align(BATCH * (MAX_IO + 8192), 4096).expect("layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Arena { ptr, layout }
    }
    /// Slot `i`, shifted by `mis` bytes from 4096 alignment.
    fn slot(&mut self, i: usize, mis: usize, len: usize) -> *mut u8 {
        assert!(i < BATCH && mis + len <= MAX_IO + 8192);
        // SAFETY: within the allocation (checked above).
        unsafe { self.ptr.add(i * (MAX_IO + 8192) + mis) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { alloc::dealloc(self.ptr, self.layout) }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Clone, Copy, Debug)]
struct Op {
    write: Option<Stable>,
    offset: u64,
    len: usize,
    mis: usize,
}

struct Check<'a> {
    model: &'a mut Vec<u8>,
    arena: &'a mut Arena,
    rng: Rng,
    ops: u64,
    bytes: u64,
}

fn sysfs_u64(path: &str) -> Result<u64> {
    let s = std::fs::read_to_string(path).with_context(|| format!("read {path}"))?;
    s.trim().parse().with_context(|| format!("parse {path}"))
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Submit `ops` together (each in its own arena slot), poll all to
/// completion, update the model with the writes and check the reads.
fn run_batch(ch: &mut NvmeChannel, fh: &FileHandle, size: u64, c: &mut Check<'_>, ops: &[Op]) -> Result<()> {
    assert!(ops.len() <= BATCH);
    for (i, op) in ops.iter().enumerate() {
        let p = c.arena.slot(i, op.mis, op.len);
        // SAFETY: the slot is valid for `len` bytes and only this op uses it.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, op.len) };
        match op.write {
            Some(_) => {
                for (k, b) in buf.iter_mut().enumerate() {
                    *b = (c.rng.next() as u8) ^ (k as u8);
                }
            }
            None => buf.fill(0xa5),
        }
        let io = IoDesc {
            fh: *fh,
            op: op.write.map_or(IoOp::Read, IoOp::Write),
            offset: op.offset,
            buf: p,
            len: op.len as u32,
            tag: i as u64,
        };
        // SAFETY: the arena slot stays valid and untouched until the
        // completion is reaped below.
        unsafe { ch.submit(io) }.map_err(|e| anyhow!("submit {op:?}: {e}"))?;
    }
    let mut done = vec![None; ops.len()];
    let mut out = [IoDone::default(); 4];
    let mut left = ops.len();
    let t0 = Instant::now();
    while left > 0 {
        let n = ch.poll(&mut out);
        for d in &out[..n] {
            let i = d.tag as usize;
            ensure!(i < ops.len() && done[i].is_none(), "unexpected completion {d:?}");
            done[i] = Some(*d);
            left -= 1;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "I/O did not complete in 60 s ({left} left)"
        );
    }
    ensure!(ch.in_flight() == 0, "in_flight {} after the batch", ch.in_flight());
    for (i, op) in ops.iter().enumerate() {
        let d = done[i].expect("all completed");
        let p = c.arena.slot(i, op.mis, op.len);
        // SAFETY: as above; the I/O is complete.
        let buf = unsafe { std::slice::from_raw_parts(p, op.len) };
        let n = d.result.map_err(|e| anyhow!("{op:?}: {e}"))? as usize;
        c.ops += 1;
        c.bytes += n as u64;
        let o = op.offset as usize;
        match op.write {
            Some(stable) => {
                ensure!(n == op.len, "{op:?}: wrote {n}");
                ensure!(d.committed >= stable, "{op:?}: committed {:?}", d.committed);
                c.model[o..o + n].copy_from_slice(buf);
            }
            None => {
                let want = op.len.min(size.saturating_sub(op.offset) as usize);
                ensure!(n == want, "{op:?}: read {n}, expected {want}");
                ensure!(d.eof == (op.offset + n as u64 >= size), "{op:?}: eof {}", d.eof);
                if buf[..n] != c.model[o..o + n] {
                    let at = (0..n).find(|&k| buf[k] != c.model[o + k]).unwrap_or(0);
                    bail!(
                        "{op:?}: data differs at device offset {} (got {:#04x}, expected {:#04x})",
                        o + at,
                        buf[at],
                        c.model[o + at]
                    );
                }
            }
        }
    }
    Ok(())
}

fn read_op(offset: u64, len: usize, mis: usize) -> Op {
    Op {
        write: None,
        offset,
        len,
        mis,
    }
}

fn write_op(offset: u64, len: usize, mis: usize, stable: Stable) -> Op {
    Op {
        write: Some(stable),
        offset,
        len,
        mis,
    }
}

/// Read the whole namespace (1 MiB aligned reads) and compare with, or load
/// it into, the model.
fn sweep(ch: &mut NvmeChannel, fh: &FileHandle, size: u64, c: &mut Check<'_>, load: bool) -> Result<()> {
    let mut off = 0u64;
    while off < size {
        let mut ops = Vec::new();
        while ops.len() < BATCH && off < size {
            let len = (size - off).min(MAX_IO as u64) as usize;
            ops.push(read_op(off, len, 0));
            off += len as u64;
        }
        if load {
            for (i, op) in ops.iter().enumerate() {
                let io = IoDesc {
                    fh: *fh,
                    op: IoOp::Read,
                    offset: op.offset,
                    buf: c.arena.slot(i, 0, op.len),
                    len: op.len as u32,
                    tag: i as u64,
                };
                // SAFETY: the slot stays valid until the completion below.
                unsafe { ch.submit(io) }.map_err(|e| anyhow!("submit: {e}"))?;
            }
            let mut out = [IoDone::default(); BATCH];
            let mut got = 0;
            let t0 = Instant::now();
            while got < ops.len() {
                let n = ch.poll(&mut out[got..]);
                got += n;
                ensure!(t0.elapsed() < Duration::from_secs(60), "sweep read timed out");
            }
            for d in &out[..got] {
                let op = ops[d.tag as usize];
                ensure!(d.result == Ok(op.len as u32), "sweep read {op:?}: {:?}", d.result);
                let p = c.arena.slot(d.tag as usize, 0, op.len);
                // SAFETY: complete; the slot holds `len` bytes just read.
                let buf = unsafe { std::slice::from_raw_parts(p, op.len) };
                let o = op.offset as usize;
                c.model[o..o + op.len].copy_from_slice(buf);
            }
        } else {
            run_batch(ch, fh, size, c, &ops)?;
        }
    }
    Ok(())
}

/// Fixed cases, concurrent RMW on shared LBAs, random batches, flush.
fn workload(
    ch: &mut NvmeChannel,
    fh: &FileHandle,
    size: u64,
    lba: u64,
    c: &mut Check<'_>,
    rounds: usize,
) -> Result<()> {
    let mib = MAX_IO as u64;
    let fixed: &[(u64, usize, usize)] = &[
        (0, lba as usize, 0),
        (lba, 4096, 0),
        (3 * lba + 1, 1, 0),
        (5 * lba - 1, 2, 0),
        (7 * lba + 3, lba as usize - 1, 1),
        (9 * lba, lba as usize + 1, 0),
        (mib, MAX_IO, 0),
        (3 * mib + 17, MAX_IO, 5),
        (5 * mib + 4096, 65_536 + 3, 0),
        (6 * mib, 4096, 1),
        (size - lba, lba as usize, 0),
        (size - 100, 100, 0),
        (size - 3 * lba - 7, 3 * lba as usize + 7, 2),
    ];
    let stables = [Stable::Unstable, Stable::DataSync, Stable::FileSync];
    for (i, &(off, len, mis)) in fixed.iter().enumerate() {
        let st = stables[i % 3];
        run_batch(ch, fh, size, c, &[write_op(off, len, mis, st)])?;
        run_batch(ch, fh, size, c, &[read_op(off, len, (mis + 1) % 3)])?;
        // Aligned cover of the same range (zero-copy path).
        let a0 = off / lba * lba;
        let a1 = (off + len as u64).div_ceil(lba) * lba;
        run_batch(
            ch,
            fh,
            size,
            c,
            &[read_op(a0, (a1 - a0).min(MAX_IO as u64) as usize, 0)],
        )?;
    }
    // Past the end: short with eof.
    run_batch(
        ch,
        fh,
        size,
        c,
        &[read_op(size - 10, 100, 0), read_op(size - lba, 2 * lba as usize, 0)],
    )?;
    // Unaligned writes to disjoint bytes of the same two LBAs, all in flight
    // at once: each must survive the others' read-modify-write.
    let b = 8 * mib;
    let shared = [
        write_op(b + 10, 10, 1, Stable::Unstable),
        write_op(b + 100, 10, 2, Stable::DataSync),
        write_op(b + lba - 5, 10, 3, Stable::Unstable),
        write_op(b + lba + 50, 20, 0, Stable::FileSync),
        write_op(b + 2 * lba - 1, 1, 0, Stable::Unstable),
        write_op(b + 300, 5, 0, Stable::Unstable),
    ];
    run_batch(ch, fh, size, c, &shared)?;
    run_batch(ch, fh, size, c, &[read_op(b, 2 * lba as usize, 0)])?;
    // Random batches.
    for _ in 0..rounds {
        let mut ops: Vec<Op> = Vec::new();
        let cluster = c.rng.below(4) == 0;
        let base = c.rng.below(size / lba) * lba;
        while ops.len() < BATCH {
            let len = match c.rng.below(4) {
                0 => 1 + c.rng.below(64) as usize,
                1 => lba as usize * (1 + c.rng.below(16) as usize),
                2 => 1 + c.rng.below(MAX_IO as u64) as usize,
                _ => 1 + c.rng.below(3 * lba) as usize,
            };
            let len = if cluster { len.min(lba as usize) } else { len };
            let span = size - len as u64;
            let off = if cluster {
                (base + c.rng.below(3 * lba)).min(span)
            } else if c.rng.below(2) == 0 {
                c.rng.below(span / lba) * lba
            } else {
                c.rng.below(span + 1)
            };
            let end = off + len as u64;
            if ops.iter().any(|o| off < o.offset + o.len as u64 && o.offset < end) {
                if cluster && ops.len() >= 2 {
                    break;
                }
                continue;
            }
            let mis = if c.rng.below(2) == 0 {
                0
            } else {
                c.rng.below(4096) as usize
            };
            ops.push(write_op(off, len, mis, stables[c.rng.below(3) as usize]));
        }
        run_batch(ch, fh, size, c, &ops)?;
        let reads: Vec<Op> = ops
            .iter()
            .map(|o| {
                let slack = c.rng.below(lba) as usize;
                let off = o.offset.saturating_sub(slack as u64);
                let len = (o.len + slack + c.rng.below(lba) as usize).min(MAX_IO);
                read_op(off, len, c.rng.below(3) as usize)
            })
            .collect();
        run_batch(ch, fh, size, c, &reads)?;
    }
    flush_sync(ch, fh).map_err(|e| anyhow!("flush: {e}"))?;
    Ok(())
}

struct Opened {
    be: NvmeBackend,
    ch: NvmeChannel,
    fh: FileHandle,
    size: u64,
    lba: u64,
}

fn open(dev: &Path, passthrough: bool, want: IoMode, size: u64, lba: u64) -> Result<Opened> {
    let be = NvmeBackend::open("check", &[dev.to_path_buf()], QUEUE_DEPTH, passthrough)
        .map_err(|e| anyhow!("open {}: {e}", dev.display()))?;
    let info = be.devices().remove(0);
    println!(
        "  {}: mode {:?}, nsid {}, {} bytes, lba {}, max transfer {}, iopoll {}",
        dev.display(),
        info.mode,
        info.nsid,
        info.size_bytes,
        info.lba_bytes,
        info.max_xfer_bytes,
        info.iopoll
    );
    ensure!(info.mode == want, "mode {:?}, expected {want:?}", info.mode);
    ensure!(info.size_bytes == size, "size {} (sysfs: {size})", info.size_bytes);
    ensure!(info.lba_bytes as u64 == lba, "lba {} (sysfs: {lba})", info.lba_bytes);
    let (fh, attr) = be
        .lookup(&be.root(), file_name(dev).as_bytes())
        .map_err(|e| anyhow!("lookup: {e}"))?;
    ensure!(attr.size == size, "getattr size {}", attr.size);
    let ch = be.open_nvme_channel(0).map_err(|e| anyhow!("channel: {e}"))?;
    Ok(Opened { be, ch, fh, size, lba })
}

/// What `df` and `cp` onto the device file see (issue 21 item 11): FSINFO
/// features without links, FSSTAT within the capacity, a truncation (cp opens
/// its target O_TRUNC) accepted with the size left at the capacity, growth
/// refused.
fn namespace_answers(be: &NvmeBackend, fh: &FileHandle, size: u64) -> Result<()> {
    let f = be.features();
    ensure!(
        !f.hard_links && !f.symlinks,
        "features {f:?}: no links on a fixed namespace"
    );
    let st = be.fsstat().map_err(|e| anyhow!("fsstat: {e}"))?;
    ensure!(st.total_bytes == size, "fsstat total {} != {size}", st.total_bytes);
    ensure!(
        st.free_bytes <= st.total_bytes && st.avail_bytes == st.free_bytes,
        "fsstat free {} avail {} of {}",
        st.free_bytes,
        st.avail_bytes,
        st.total_bytes
    );
    println!("  fsstat: total {} free {}", st.total_bytes, st.free_bytes);
    let set = |s| SetAttr {
        size: Some(s),
        ..Default::default()
    };
    for s in [0, 4096, size] {
        let a = be.setattr(fh, &set(s)).map_err(|e| anyhow!("setattr size {s}: {e}"))?;
        ensure!(a.size == size, "setattr size {s} left size {}", a.size);
    }
    ensure!(be.setattr(fh, &set(size + 1)) == Err(FsError::FBig), "growth refused");
    Ok(())
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut want_iopoll = None;
    if args.first().map(String::as_str) == Some("--iopoll") {
        ensure!(args.len() >= 2, "--iopoll needs yes or no");
        want_iopoll = Some(match args[1].as_str() {
            "yes" => true,
            "no" => false,
            v => bail!("--iopoll {v}: yes or no"),
        });
        args.drain(..2);
    }
    let [pt, blk] = <[String; 2]>::try_from(args)
        .map_err(|_| anyhow!("usage: nvme_check [--iopoll yes|no] /dev/ngXnY /dev/nvmeXnY"))?;
    let (pt, blk) = (PathBuf::from(pt), PathBuf::from(blk));
    let t0 = Instant::now();
    let sys = format!("/sys/block/{}", file_name(&blk));
    let size = sysfs_u64(&format!("{sys}/size"))? * 512;
    let lba = sysfs_u64(&format!("{sys}/queue/logical_block_size"))?;
    println!(
        "nvme_check: {} / {}: {size} bytes, lba {lba}",
        pt.display(),
        blk.display()
    );

    let mut model = vec![0u8; size as usize];
    let mut arena = Arena::new();
    let seed = 0x9e37_79b9_7f4a_7c15 ^ size ^ (lba << 40);
    let mut c = Check {
        model: &mut model,
        arena: &mut arena,
        rng: Rng(seed),
        ops: 0,
        bytes: 0,
    };

    println!("phase 1: passthrough on {}", pt.display());
    let mut o = open(&pt, true, IoMode::Passthrough, size, lba)?;
    let iopoll = o.ch.iopoll();
    if let Some(w) = want_iopoll {
        // A kernel whose passthrough polling is unsafe gets an interrupt
        // ring even on a device with poll queues.
        let safe = rpcrdma_apps::backend::nvme::kernel_polls_passthrough_safely();
        if w && !safe {
            println!("  passthrough polling refused on this kernel (unsafe before 6.6)");
        }
        let w = w && safe;
        ensure!(iopoll == w, "passthrough ring iopoll {iopoll}, expected {w}");
    }
    sweep(&mut o.ch, &o.fh, o.size, &mut c, true)?;
    workload(&mut o.ch, &o.fh, o.size, o.lba, &mut c, 40)?;
    o.be.commit(&o.fh).map_err(|e| anyhow!("commit: {e}"))?;
    namespace_answers(&o.be, &o.fh, size)?;
    println!("  ok: {} I/Os so far", c.ops);
    drop(o);

    println!("phase 2: O_DIRECT on {}", blk.display());
    let mut o = open(&blk, true, IoMode::Direct, size, lba)?;
    sweep(&mut o.ch, &o.fh, o.size, &mut c, false)?;
    workload(&mut o.ch, &o.fh, o.size, o.lba, &mut c, 25)?;
    o.be.sync_all().map_err(|e| anyhow!("sync_all: {e}"))?;
    println!("  ok: {} I/Os so far", c.ops);
    drop(o);

    println!("phase 3: passthrough reads back what O_DIRECT and the page cache wrote");
    let mut o = open(&pt, true, IoMode::Passthrough, size, lba)?;
    sweep(&mut o.ch, &o.fh, o.size, &mut c, false)?;
    drop(o);

    println!("phase 4: {} with passthrough off", pt.display());
    let mut o = open(&pt, false, IoMode::Direct, size, lba)?;
    let mut r = Rng(seed ^ 1);
    for _ in 0..16 {
        let off = r.below(size - 70_000);
        let ops = [read_op(off, 70_000, 1), read_op(off / lba * lba, 65_536, 0)];
        run_batch(&mut o.ch, &o.fh, o.size, &mut c, &ops)?;
    }
    drop(o);

    println!(
        "nvme_check: PASS ({}, lba {lba}, iopoll {iopoll}, {} I/Os, {} MiB, {} ms)",
        pt.display(),
        c.ops,
        c.bytes >> 20,
        t0.elapsed().as_millis()
    );
    Ok(())
}
