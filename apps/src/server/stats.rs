//! Live statistics of a running target (`rpcrdma-target stats`).
//!
//! - [`ProcStats`]: per-procedure counters (Calls answered, errors, bytes in
//!   and out) and sampled service latency of one [`crate::nfs::NfsService`],
//!   kept by the core that runs it (plain integers, no atomics).
//! - [`Published`]: a seqlock snapshot of one io core's counters (engine,
//!   live state, NFS service, reply cache, procedures, latency buckets). The
//!   core writes it from its poller ([`Publisher`]), at most every
//!   [`PUBLISH_BUSY`] while busy and once soon after it goes idle; readers
//!   retry while a write is in progress and never make the core wait. A
//!   publication stores the words before the procedure rows and only the
//!   rows whose counts changed since the last one ([`ProcStats::gen`]):
//!   the whole snapshot is 10,012 words, one changed row 384.
//! - [`StatsServer`]: a thread (not a reactor core) serving a local Unix
//!   socket: a client writes one request line (`stats`) and reads one JSON
//!   document ([`snapshot_json`]). Nothing else is offered: the socket has no
//!   operation that changes the target.
//! - [`render_table`]: the one-shot table of `rpcrdma-target stats`.
//!
//! Latency is the service's: from the Call handed to the NFS service to its
//! reply built (deferred READs and WRITEs: to their resumption after the
//! backend I/O), one Call in [`LAT_SAMPLE_EVERY`] timed. Over RDMA a second
//! histogram per procedure (`reply_posted`) times one Call in
//! [`LAT_SAMPLE_EVERY`] from the engine's poll that delivered it to its
//! reply posted: the service's time plus the Call's wait on the core
//! behind other work (other Calls of the same batch, their RDMA Read copies
//! on shm, backend submissions) and the reply's posting.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use dataplane::responder::{HeldBuffers, ResponderStats};
use mempool::pool::{ClassId, Mempool};

use crate::nfs::drc::DrcStats;
use crate::nfs::NfsStats;
use crate::server::tcp::TcpStats;

/// NFSv3 procedures (RFC 1813), then MOUNT v3 procedures, then NFSv4's
/// two (RFC 8881 s16: NULL and COMPOUND, whose operations
/// [`crate::nfs4::Nfs4Stats`] counts).
pub const PROC_NAMES: [&str; 30] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
    "MNT.NULL",
    "MNT.MNT",
    "MNT.DUMP",
    "MNT.UMNT",
    "MNT.UMNTALL",
    "MNT.EXPORT",
    "NFS4.NULL",
    "NFS4.COMPOUND",
];
/// Rows of [`ProcStats`].
pub const PROCS: usize = PROC_NAMES.len();
const NFS_PROCS: usize = 22;
/// MOUNT v3 procedures (RFC 1813 appendix I).
const MOUNT_PROCS: usize = 6;
/// The first NFSv4 row.
const NFS4_ROW: usize = NFS_PROCS + MOUNT_PROCS;
/// Latency buckets: four per power of two of nanoseconds (2^0 .. 2^40 ns).
pub const LAT_BUCKETS: usize = 41 * 4;
/// One Call in this many is timed.
pub const LAT_SAMPLE_EVERY: u32 = 8;
/// Most timed deferred Calls remembered at once (more go untimed).
const MAX_TIMED_DEFERRED: usize = 64;

/// The bucket of `ns`: octave `b` (2^b <= ns < 2^(b+1)) split in four.
pub fn lat_bucket(ns: u64) -> usize {
    let v = ns.max(1);
    let b = 63 - v.leading_zeros() as usize;
    let sub = if b >= 2 { ((v >> (b - 2)) & 3) as usize } else { 0 };
    (b * 4 + sub).min(LAT_BUCKETS - 1)
}

/// The highest value of bucket `i`, in nanoseconds.
pub fn lat_bucket_high_ns(i: usize) -> u64 {
    let (b, sub) = (i / 4, (i % 4) as u64);
    if b < 2 {
        return (1u64 << (b + 1)) - 1;
    }
    let step = 1u64 << (b - 2);
    (1u64 << b) + (sub + 1) * step - 1
}

/// Per-procedure counters of one service. Owned by the thread that runs
/// the service.
#[derive(Clone, Debug)]
pub struct ProcStats {
    /// Per row: Calls answered, of them errors (an RPC error, or an NFS or
    /// MOUNT status other than OK), Call bytes, reply bytes (data included).
    pub counts: [[u64; 4]; PROCS],
    /// Per row: sampled service latency.
    pub lat: Box<[[u64; LAT_BUCKETS]; PROCS]>,
    /// Per row: sampled time from the engine's poll that delivered the
    /// Call to its reply posted ([`dataplane::service::Service::reply_posted`]):
    /// the service latency plus the Call's wait on the core before the
    /// service took it and the reply's posting. RDMA engines only.
    pub posted: Box<[[u64; LAT_BUCKETS]; PROCS]>,
    /// Per row: bumped whenever its counts or histograms change, so that a
    /// publication copies only the rows that changed ([`Publisher`]).
    pub gen: [u32; PROCS],
    tick: u32,
    epoch: Instant,
    /// Timed deferred Calls: (token, start ns).
    deferred: Vec<(u64, u64)>,
}

impl Default for ProcStats {
    fn default() -> Self {
        ProcStats {
            counts: [[0; 4]; PROCS],
            lat: Box::new([[0; LAT_BUCKETS]; PROCS]),
            posted: Box::new([[0; LAT_BUCKETS]; PROCS]),
            gen: [0; PROCS],
            tick: 0,
            epoch: Instant::now(),
            deferred: Vec::with_capacity(MAX_TIMED_DEFERRED),
        }
    }
}

/// The row of a Call from its RPC header (program at bytes 12..16, version
/// at 16..20, procedure at 20..24, RFC 5531 s9), `None` for anything else.
pub fn proc_row(call_head: &[u8]) -> Option<usize> {
    let w = |i: usize| {
        call_head
            .get(i..i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (prog, vers, proc_) = (w(12)?, w(16)?, w(20)? as usize);
    match prog {
        proto::nfs3::NFS_PROGRAM if vers == proto::nfs4::NFS_V4 => {
            (proc_ < PROCS - NFS4_ROW).then_some(NFS4_ROW + proc_)
        }
        proto::nfs3::NFS_PROGRAM if proc_ < NFS_PROCS => Some(proc_),
        proto::nfs3::MOUNT_PROGRAM if proc_ < MOUNT_PROCS => Some(NFS_PROCS + proc_),
        _ => None,
    }
}

/// Whether a built reply reports an error: denied, an accept status other
/// than SUCCESS, or (procedures other than NULL) a status word other than 0
/// right after the AUTH_NONE verifier (RFC 5531 s9; RFC 1813 and its MOUNT
/// appendix put the status first).
pub fn reply_is_error(row: usize, reply_head: &[u8]) -> bool {
    let w = |i: usize| {
        reply_head
            .get(i..i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    if w(8) != Some(0) || w(20) != Some(0) {
        return true;
    }
    // NULL, and every MOUNT procedure but MNT, return no status; COMPOUND
    // puts its status first as NFSv3's procedures do.
    let mount = (NFS_PROCS..NFS4_ROW).contains(&row);
    let no_status = row == 0 || row == NFS4_ROW || (mount && row != NFS_PROCS + 1);
    !no_status && w(24).is_some_and(|s| s != 0)
}

/// Nanoseconds from `epoch` to now on the reactor's clock
/// ([`reactor::clock::now`]: no system call per read where the OS clock
/// has no vDSO path, as in the emulated guests of `tests/kernel/`).
#[inline]
fn ns_since(epoch: Instant) -> u64 {
    reactor::clock::now().saturating_duration_since(epoch).as_nanos() as u64
}

impl ProcStats {
    /// A Call of `row` starts: its start time when this one is timed.
    #[inline]
    pub fn start(&mut self) -> Option<u64> {
        self.tick = self.tick.wrapping_add(1);
        self.tick.is_multiple_of(LAT_SAMPLE_EVERY).then(|| ns_since(self.epoch))
    }

    /// A Call of `row` was answered (not deferred).
    #[inline]
    pub fn answered(&mut self, row: usize, error: bool, bytes_in: u64, bytes_out: u64, t0: Option<u64>) {
        let Some(c) = self.counts.get_mut(row) else { return };
        self.gen[row] = self.gen[row].wrapping_add(1);
        c[0] += 1;
        c[1] += u64::from(error);
        c[2] += bytes_in;
        c[3] += bytes_out;
        if let Some(t0) = t0 {
            let ns = ns_since(self.epoch).saturating_sub(t0);
            self.lat[row][lat_bucket(ns)] += 1;
        }
    }

    /// A timed Call was deferred under `token`: remember its start.
    pub fn deferred(&mut self, token: u64, t0: Option<u64>) {
        if let Some(t0) = t0 {
            if self.deferred.len() < MAX_TIMED_DEFERRED {
                self.deferred.push((token, t0));
            }
        }
    }

    /// A timed Call of `row` had its reply posted `ns` after the poll that
    /// delivered it.
    #[inline]
    pub fn posted(&mut self, row: usize, ns: u64) {
        if let Some(h) = self.posted.get_mut(row) {
            h[lat_bucket(ns)] += 1;
            self.gen[row] = self.gen[row].wrapping_add(1);
        }
    }

    /// The start of a timed deferred Call, forgotten.
    pub fn resumed(&mut self, token: u64) -> Option<u64> {
        let k = self.deferred.iter().position(|(t, _)| *t == token)?;
        Some(self.deferred.swap_remove(k).1)
    }
}

// ---------------------------------------------------------------------------
// The published layout of one core
// ---------------------------------------------------------------------------

/// Engine counters ([`ResponderStats`]), in layout order.
pub const ENGINE_KEYS: [&str; 26] = [
    "calls",
    "replies",
    "call_errors",
    "error_replies",
    "service_rejected",
    "dropped",
    "credit_overruns",
    "conns_accepted",
    "conns_rejected",
    "conns_closed",
    "deferred",
    "chunk_buf_waits",
    "backend_waits",
    "recv_refill_stalls",
    "grants_ahead_of_receives",
    "rdma_reads",
    "rdma_writes",
    "writes_placed",
    "replies_inline",
    "replies_write_chunks",
    "replies_long",
    "sends_with_invalidate",
    "unanswered_conn_lost",
    "unanswered_service_drop",
    "unanswered_other",
    "wc_errors",
];

fn engine_words(s: &ResponderStats) -> [u64; 26] {
    [
        s.calls,
        s.replies,
        s.call_errors,
        s.error_replies,
        s.service_rejected,
        s.dropped,
        s.credit_overruns,
        s.conns_accepted,
        s.conns_rejected,
        s.conns_closed,
        s.deferred,
        s.chunk_buf_waits,
        s.backend_waits,
        s.recv_refill_stalls,
        s.grants_ahead_of_receives,
        s.rdma_reads,
        s.rdma_writes,
        s.writes_placed,
        s.replies_inline,
        s.replies_write_chunks,
        s.replies_long,
        s.sends_with_invalidate,
        s.unanswered_conn_lost,
        s.unanswered_service_drop,
        s.unanswered_other,
        s.wc_errors,
    ]
}

/// The core's state now (gauges, not counters).
pub const LIVE_KEYS: [&str; 9] = [
    "connections",
    "in_flight",
    "deferred_now",
    "credits_granted",
    "srq_posted",
    "held_recv",
    "held_send",
    "held_data",
    "held_requests",
];

/// The NFS service's counters and its reply cache's.
pub const NFS_KEYS: [&str; 16] = [
    "rpc_errors",
    "garbage_args",
    "auth_errors",
    "dropped",
    "deferred_reads",
    "deferred_writes",
    "deferred_max",
    "deferred_commits",
    "deferred_flushes",
    "offloaded",
    "offloaded_opens",
    "drc_replays",
    "drc_in_progress_drops",
    "drc_inserts",
    "drc_evictions",
    "drc_uncached",
];

fn nfs_words(s: &NfsStats, d: &DrcStats) -> [u64; 16] {
    [
        s.rpc_errors,
        s.garbage_args,
        s.auth_errors,
        s.dropped,
        s.deferred_reads,
        s.deferred_writes,
        s.deferred_max,
        s.deferred_commits,
        s.deferred_flushes,
        s.offloaded,
        s.offloaded_opens,
        d.hits,
        d.in_progress_drops,
        d.inserts,
        d.evictions,
        d.uncached,
    ]
}

const OFF_ENGINE: usize = 1;
const OFF_LIVE: usize = OFF_ENGINE + ENGINE_KEYS.len();
const OFF_NFS: usize = OFF_LIVE + LIVE_KEYS.len();
const OFF_PROCS: usize = OFF_NFS + NFS_KEYS.len();
const OFF_LAT: usize = OFF_PROCS + PROCS * 4;
const OFF_POSTED: usize = OFF_LAT + PROCS * LAT_BUCKETS;
/// Words of one core's snapshot: the publication time (ns since the
/// target started), then the sections above.
pub const WORDS: usize = OFF_POSTED + PROCS * LAT_BUCKETS;

/// What a core's poller gathers to publish.
#[derive(Debug)]
pub struct CoreView<'a> {
    pub engine: &'a ResponderStats,
    pub connections: u64,
    pub in_flight: u64,
    pub deferred_now: u64,
    pub credits_granted: u64,
    pub held: HeldBuffers,
    pub nfs: &'a NfsStats,
    pub drc: &'a DrcStats,
    pub procs: &'a ProcStats,
}

/// Fill `out` (of [`WORDS`]) from `v`, stamped `now_ns`.
pub fn encode(v: &CoreView<'_>, now_ns: u64, out: &mut [u64]) {
    encode_head(v, now_ns, out);
    for r in 0..PROCS {
        encode_row(v.procs, r, out);
    }
}

/// The words of [`encode`] before the procedure rows (`..OFF_PROCS`).
fn encode_head(v: &CoreView<'_>, now_ns: u64, out: &mut [u64]) {
    debug_assert_eq!(out.len(), WORDS);
    out[0] = now_ns;
    out[OFF_ENGINE..OFF_LIVE].copy_from_slice(&engine_words(v.engine));
    let h = &v.held;
    out[OFF_LIVE..OFF_NFS].copy_from_slice(&[
        v.connections,
        v.in_flight,
        v.deferred_now,
        v.credits_granted,
        u64::from(h.srq_posted),
        u64::from(h.recv),
        u64::from(h.send),
        u64::from(h.data),
        u64::from(h.requests),
    ]);
    out[OFF_NFS..OFF_PROCS].copy_from_slice(&nfs_words(v.nfs, v.drc));
}

/// The word ranges of procedure row `r`: counts, latency buckets,
/// reply-posted buckets.
fn row_ranges(r: usize) -> [std::ops::Range<usize>; 3] {
    [
        OFF_PROCS + r * 4..OFF_PROCS + r * 4 + 4,
        OFF_LAT + r * LAT_BUCKETS..OFF_LAT + (r + 1) * LAT_BUCKETS,
        OFF_POSTED + r * LAT_BUCKETS..OFF_POSTED + (r + 1) * LAT_BUCKETS,
    ]
}

/// Row `r` of [`encode`].
fn encode_row(p: &ProcStats, r: usize, out: &mut [u64]) {
    let [c, l, q] = row_ranges(r);
    out[c].copy_from_slice(&p.counts[r]);
    out[l].copy_from_slice(&p.lat[r]);
    out[q].copy_from_slice(&p.posted[r]);
}

/// A seqlock over one core's snapshot: one writer (the core), any number of
/// readers, none of which the writer waits for.
#[derive(Debug)]
pub struct Published {
    core: usize,
    seq: AtomicU64,
    words: Box<[AtomicU64]>,
    /// Words stored by all writes so far (what a publication costs).
    stored: AtomicU64,
}

impl Published {
    pub fn new(core: usize) -> Self {
        Published {
            core,
            seq: AtomicU64::new(0),
            words: (0..WORDS).map(|_| AtomicU64::new(0)).collect(),
            stored: AtomicU64::new(0),
        }
    }

    pub fn core(&self) -> usize {
        self.core
    }

    /// Words stored by every write so far. Any thread.
    pub fn words_stored(&self) -> u64 {
        self.stored.load(Ordering::Relaxed)
    }

    /// Publish `src`. The owning core only (one writer).
    pub fn write(&self, src: &[u64]) {
        self.write_ranges(src, std::iter::once(0..src.len().min(WORDS)));
    }

    /// Publish the words of `src` in `ranges`; the others keep what the
    /// last writes left (the words that did not change). The owning core
    /// only (one writer).
    pub fn write_ranges(&self, src: &[u64], ranges: impl Iterator<Item = std::ops::Range<usize>>) {
        let s = self.seq.load(Ordering::Relaxed);
        // Odd: a write is in progress. The Release fence orders this store
        // before the word stores below for a reader that sees any of them.
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let mut n = 0;
        for r in ranges {
            n += r.len() as u64;
            for (w, v) in self.words[r.clone()].iter().zip(&src[r]) {
                w.store(*v, Ordering::Relaxed);
            }
        }
        // Only the writer updates it; readers of the count need no order.
        self.stored
            .store(self.stored.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        // Release: a reader that loads the even value sees every word;
        // pairs with the Acquire load in `read`.
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// A consistent copy into `dst`, or `false` when every try met a write
    /// in progress. Any thread; never blocks the writer.
    pub fn read(&self, dst: &mut [u64]) -> bool {
        for _ in 0..1000 {
            // Acquire: pairs with the writer's final Release store.
            let s1 = self.seq.load(Ordering::Acquire);
            if !s1.is_multiple_of(2) {
                std::hint::spin_loop();
                continue;
            }
            for (d, w) in dst.iter_mut().zip(self.words.iter()) {
                *d = w.load(Ordering::Relaxed);
            }
            // Acquire fence: the word loads happen before the re-check.
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return true;
            }
        }
        false
    }
}

/// Publish at most this often while the core is busy.
pub const PUBLISH_BUSY: Duration = Duration::from_millis(100);
/// After the core goes idle with changes unpublished, publish once this
/// long after the previous publication.
pub const PUBLISH_IDLE: Duration = Duration::from_millis(2);
/// Busy polls between looks at the clock.
const POLLS_PER_CLOCK_LOOK: u32 = 256;

/// When a core publishes. Owned by the core's poller.
#[derive(Debug)]
pub struct Publisher {
    pub cell: Arc<Published>,
    epoch: Instant,
    last_ns: u64,
    polls: u32,
    dirty: bool,
    buf: Vec<u64>,
    /// Each procedure row's [`ProcStats::gen`] when it was last published
    /// (`None`: never; the first publication copies every row).
    row_gen: Option<[u32; PROCS]>,
}

impl Publisher {
    pub fn new(cell: Arc<Published>, epoch: Instant) -> Self {
        Publisher {
            cell,
            epoch,
            last_ns: 0,
            polls: 0,
            dirty: true,
            buf: vec![0; WORDS],
            row_gen: None,
        }
    }

    /// After a poll that did work (`busy`) or none: whether to publish now.
    #[inline]
    pub fn due(&mut self, busy: bool) -> Option<u64> {
        if busy {
            self.dirty = true;
            self.polls = self.polls.wrapping_add(1);
            if !self.polls.is_multiple_of(POLLS_PER_CLOCK_LOOK) {
                return None;
            }
        } else if !self.dirty {
            return None;
        }
        let now = ns_since(self.epoch);
        let gap = if busy { PUBLISH_BUSY } else { PUBLISH_IDLE };
        (now.saturating_sub(self.last_ns) >= gap.as_nanos() as u64 || self.last_ns == 0).then_some(now)
    }

    /// Before the core blocks (`spin_then_wait`): what changed since the
    /// last copy is due now, whatever the gap, so a reader never sees counts
    /// older than the core's last work while it sleeps.
    pub fn due_before_sleep(&mut self) -> Option<u64> {
        self.dirty.then(|| ns_since(self.epoch))
    }

    /// Publish `v` stamped `now_ns` (from [`Publisher::due`]): the words
    /// before the procedure rows, and the rows that changed since the last
    /// publication. A row is 332 words (two latency histograms), and a
    /// core publishes up to every [`PUBLISH_IDLE`] between Calls: copying
    /// all 30 rows each time was work on the core's path to its next Call.
    pub fn publish(&mut self, v: &CoreView<'_>, now_ns: u64) {
        encode_head(v, now_ns, &mut self.buf);
        let last = self.row_gen;
        let gen = v.procs.gen;
        let changed = |r: &usize| last.is_none_or(|l| l[*r] != gen[*r]);
        for r in (0..PROCS).filter(changed) {
            encode_row(v.procs, r, &mut self.buf);
        }
        let rows = (0..PROCS).filter(changed).flat_map(row_ranges);
        self.cell
            .write_ranges(&self.buf, std::iter::once(0..OFF_PROCS).chain(rows));
        self.row_gen = Some(gen);
        self.last_ns = now_ns;
        self.dirty = false;
    }
}

// ---------------------------------------------------------------------------
// The JSON document
// ---------------------------------------------------------------------------

/// Latency percentiles of a row's buckets, in microseconds.
pub(crate) fn percentiles(b: &[u64]) -> Value {
    let n: u64 = b.iter().sum();
    let q = |p: f64| -> f64 {
        if n == 0 {
            return 0.0;
        }
        let want = ((p * n as f64).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, c) in b.iter().enumerate() {
            acc += c;
            if acc >= want {
                return (lat_bucket_high_ns(i) as f64 / 1000.0 * 100.0).round() / 100.0;
            }
        }
        0.0
    };
    json!({ "samples": n, "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999), "max": q(1.0) })
}

/// A row's non-empty latency buckets as `[highest ns, count]` pairs, so a
/// reader can take the percentiles of the Calls between two snapshots
/// (`scripts/commit-interference.sh` does).
fn buckets(b: &[u64]) -> Value {
    Value::Array(
        b.iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| json!([lat_bucket_high_ns(i), c]))
            .collect(),
    )
}

fn keyed(keys: &[&str], words: &[u64]) -> Value {
    let mut m = Map::new();
    for (k, v) in keys.iter().zip(words) {
        m.insert((*k).to_string(), json!(v));
    }
    Value::Object(m)
}

/// One core's (or the total's) section from its words.
fn core_section(w: &[u64], now_ns: u64) -> Value {
    let procs: Vec<Value> = (0..PROCS)
        .filter(|&r| w[OFF_PROCS + r * 4] > 0)
        .map(|r| {
            let c = &w[OFF_PROCS + r * 4..OFF_PROCS + r * 4 + 4];
            let posted = &w[OFF_POSTED + r * LAT_BUCKETS..OFF_POSTED + (r + 1) * LAT_BUCKETS];
            json!({
                "name": PROC_NAMES[r],
                "calls": c[0],
                "errors": c[1],
                "bytes_in": c[2],
                "bytes_out": c[3],
                "latency_us": percentiles(&w[OFF_LAT + r * LAT_BUCKETS..OFF_LAT + (r + 1) * LAT_BUCKETS]),
                "latency_buckets": buckets(&w[OFF_LAT + r * LAT_BUCKETS..OFF_LAT + (r + 1) * LAT_BUCKETS]),
                "reply_posted_us": percentiles(posted),
                "reply_posted_buckets": buckets(posted),
            })
        })
        .collect();
    json!({
        "age_ms": now_ns.saturating_sub(w[0]) / 1_000_000,
        "engine": keyed(&ENGINE_KEYS, &w[OFF_ENGINE..OFF_LIVE]),
        "live": keyed(&LIVE_KEYS, &w[OFF_LIVE..OFF_NFS]),
        "nfs": keyed(&NFS_KEYS, &w[OFF_NFS..OFF_PROCS]),
        "procs": procs,
    })
}

/// What the stats thread reads besides the cores.
#[derive(Debug, Clone)]
pub struct Sources {
    pub cores: Arc<Mutex<Vec<Arc<Published>>>>,
    pub pool: Option<(&'static Mempool, Vec<(&'static str, ClassId)>)>,
    pub tcp: Vec<(std::net::SocketAddr, Arc<TcpStats>)>,
    pub epoch: Instant,
    /// The services' shared state, for the "nfs4" section (delegations,
    /// recalls, callbacks).
    pub nfs: Option<Arc<crate::nfs::NfsShared>>,
    /// The reactor, for where each core runs now (its CPU and crowded-CPU
    /// moves, `reactor::crowding`).
    pub reactor: Option<reactor::ReactorHandle>,
}

/// The JSON document the socket serves. Stats thread.
pub fn snapshot_json(src: &Sources) -> Value {
    let now_ns = src.epoch.elapsed().as_nanos() as u64;
    let cells: Vec<Arc<Published>> = src.cores.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut total = vec![0u64; WORDS];
    let mut cores = Vec::new();
    let mut buf = vec![0u64; WORDS];
    // `deferred_max` is a maximum, not a sum.
    const DEFERRED_MAX: usize = OFF_NFS + 6;
    let mut deferred_max = 0;
    let mut crowd_moves = 0u64;
    for c in &cells {
        if !c.read(&mut buf) || buf[0] == 0 {
            continue;
        }
        let mut sec = core_section(&buf, now_ns);
        sec["core"] = json!(c.core());
        if let Some(p) = src.reactor.as_ref().and_then(|r| r.placement(c.core())) {
            sec["cpu"] = json!(p.cpu);
            sec["cpu_at_start"] = json!(p.cpu_at_start);
            sec["crowd_moves"] = json!(p.crowd_moves);
            crowd_moves += p.crowd_moves;
        }
        cores.push(sec);
        for (t, v) in total.iter_mut().zip(&buf).skip(1) {
            *t += v;
        }
        total[0] = total[0].max(buf[0]);
        deferred_max = deferred_max.max(buf[DEFERRED_MAX]);
    }
    total[DEFERRED_MAX] = deferred_max;
    let pools: Vec<Value> = src
        .pool
        .iter()
        .flat_map(|(p, classes)| classes.iter().map(move |(n, id)| (*p, *n, *id)))
        .filter_map(|(p, name, id)| {
            let s = p.stats(id)?;
            Some(json!({
                "name": name,
                "total": s.total,
                "in_use": s.in_use,
                "cached": s.cached,
                "high_water": s.taken_high_water,
                "exhausted": s.exhausted,
            }))
        })
        .collect();
    let tcp: Vec<Value> = src
        .tcp
        .iter()
        .map(|(a, s)| {
            let c = s.snapshot();
            json!({
                "addr": a.to_string(),
                "calls": c.calls,
                "conns_accepted": c.conns_accepted,
                "conns_refused": c.conns_refused,
                "conns_evicted": c.conns_evicted,
                "idle_timeouts": c.idle_timeouts,
                "record_timeouts": c.record_timeouts,
                "write_timeouts": c.write_timeouts,
                "bad_records": c.bad_records,
            })
        })
        .collect();
    let mut total_sec = core_section(&total, now_ns.max(total[0]));
    if src.reactor.is_some() {
        total_sec["crowd_moves"] = json!(crowd_moves);
    }
    json!({
        "version": 1,
        "pid": std::process::id(),
        "uptime_s": (now_ns as f64 / 1e9 * 1000.0).round() / 1000.0,
        "latency_sample_every": LAT_SAMPLE_EVERY,
        "cores": cores,
        "total": total_sec,
        "pools": pools,
        "tcp": tcp,
        "nfs4": src.nfs.as_ref().map(|n| n.v4().stats_json()),
    })
}

// ---------------------------------------------------------------------------
// The socket
// ---------------------------------------------------------------------------

/// The one request the socket answers.
pub const REQUEST: &str = "stats";
/// Longest request line read.
const MAX_REQUEST_BYTES: u64 = 64;

/// The socket path when the configuration names none: under `/run/rpcrdma`
/// for root, else `$XDG_RUNTIME_DIR/rpcrdma` (or `/tmp/rpcrdma-<uid>`),
/// named after the NFS TCP port, which no two running targets share.
pub fn default_socket_path(nfs_tcp_port: u16) -> PathBuf {
    // SAFETY: getuid has no failure and no memory effects.
    let uid = unsafe { libc::getuid() };
    let dir = if uid == 0 {
        PathBuf::from("/run/rpcrdma")
    } else if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        PathBuf::from(d).join("rpcrdma")
    } else {
        PathBuf::from(format!("/tmp/rpcrdma-{uid}"))
    };
    dir.join(format!("stats-{nfs_tcp_port}.sock"))
}

/// The socket of a configuration: `listeners.stats_socket`, or the default.
pub fn socket_path(cfg: &crate::config::Config) -> PathBuf {
    match &cfg.listeners.stats_socket {
        Some(p) => PathBuf::from(p),
        None => default_socket_path(cfg.listeners.nfs_tcp_port),
    }
}

/// The thread serving the socket.
#[derive(Debug)]
pub struct StatsServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StatsServer {
    /// Bind `path` (owner-only permissions; a stale socket nobody answers
    /// is replaced, a live one is an error) and serve from a new thread.
    pub fn start(path: &Path, src: Sources) -> std::io::Result<StatsServer> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("{} is served by another process", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("stats".into())
            .spawn(move || serve(listener, src, &stop2))?;
        Ok(StatsServer {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop serving and remove the socket.
    pub fn stop(&mut self) {
        // Release: pairs with the Acquire load in `serve`.
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(listener: UnixListener, src: Sources, stop: &AtomicBool) {
    // Off the io cores' CPUs (a reader polling the socket must not take
    // time from a reactor).
    if let Some(n) = &src.nfs {
        n.off_cores().apply();
    }
    // Acquire: pairs with the Release store in `StatsServer::stop`.
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((s, _)) => {
                if let Err(e) = answer(s, &src) {
                    tracing::debug!(error = %e, "stats request");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut p = libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&listener),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; the stop flag is looked at
                // every 100 ms.
                unsafe { libc::poll(&mut p, 1, 100) };
            }
            Err(e) => {
                tracing::warn!(error = %e, "stats socket accept");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Read one request line (bounded, with a timeout) and answer it.
fn answer(s: UnixStream, src: &Sources) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut line = String::new();
    BufReader::new(std::io::Read::take(&s, MAX_REQUEST_BYTES)).read_line(&mut line)?;
    let doc = if line.trim() == REQUEST {
        snapshot_json(src)
    } else {
        json!({ "error": format!("unknown request; the only one is {REQUEST:?}") })
    };
    let mut w = &s;
    w.write_all(doc.to_string().as_bytes())?;
    w.write_all(b"\n")
}

/// Ask the target at `path` for its statistics. Client side.
pub fn query(path: &Path) -> std::io::Result<Value> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("{REQUEST}\n").as_bytes())?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut s, &mut text)?;
    serde_json::from_str(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The human table of a document; with `prev` (the previous document and
/// the seconds between them, `--watch`) Calls per second are shown too.
pub fn render_table(doc: &Value, prev: Option<(&Value, f64)>) -> String {
    let mut out = format!(
        "rpcrdma-target pid {} up {:.1}s (latency: 1 Call in {} timed, service time)\n",
        u(&doc["pid"]),
        doc["uptime_s"].as_f64().unwrap_or(0.0),
        u(&doc["latency_sample_every"])
    );
    let rate = |path: &[&str], now: u64| -> String {
        match prev {
            Some((p, dt)) if dt > 0.0 => {
                let mut v = p;
                for k in path {
                    v = &v[*k];
                }
                format!("{:.0}/s", now.saturating_sub(u(v)) as f64 / dt)
            }
            _ => "-".into(),
        }
    };
    out += &format!(
        "{:>5} {:>4} {:>5} {:>10} {:>9} {:>7} {:>6} {:>6} {:>8} {:>9} {:>7} {:>7} {:>7} {:>8} {:>8}\n",
        "core",
        "cpu",
        "moves",
        "calls",
        "rate",
        "errors",
        "conns",
        "inflt",
        "credits",
        "held r/s/d",
        "defer",
        "replays",
        "rejected",
        "bufwaits",
        "age_ms"
    );
    let cores = doc["cores"].as_array().cloned().unwrap_or_default();
    let mut rows: Vec<(String, &Value)> = cores.iter().map(|c| (u(&c["core"]).to_string(), c)).collect();
    rows.push(("total".into(), &doc["total"]));
    for (name, c) in rows {
        let (e, l, n) = (&c["engine"], &c["live"], &c["nfs"]);
        let prev_path: Vec<&str> = if name == "total" {
            vec!["total", "engine", "calls"]
        } else {
            vec![]
        };
        let r = if name == "total" {
            rate(&prev_path, u(&e["calls"]))
        } else {
            let idx = cores
                .iter()
                .position(|x| u(&x["core"]).to_string() == name)
                .unwrap_or(0);
            match prev {
                Some((p, dt)) if dt > 0.0 => format!(
                    "{:.0}/s",
                    u(&e["calls"]).saturating_sub(u(&p["cores"][idx]["engine"]["calls"])) as f64 / dt
                ),
                _ => "-".into(),
            }
        };
        // where the core runs now and its crowded-CPU moves (absent: "-")
        let cpu = c["cpu"].as_u64().map_or_else(|| "-".to_string(), |v| v.to_string());
        let moves = c["crowd_moves"]
            .as_u64()
            .map_or_else(|| "-".to_string(), |v| v.to_string());
        out += &format!(
            "{:>5} {:>4} {:>5} {:>10} {:>9} {:>7} {:>6} {:>6} {:>8} {:>9} {:>7} {:>7} {:>7} {:>8} {:>8}\n",
            name,
            cpu,
            moves,
            u(&e["calls"]),
            r,
            u(&e["call_errors"]) + u(&n["rpc_errors"]),
            u(&l["connections"]),
            u(&l["in_flight"]),
            u(&l["credits_granted"]),
            format!("{}/{}/{}", u(&l["held_recv"]), u(&l["held_send"]), u(&l["held_data"])),
            u(&l["deferred_now"]),
            u(&n["drc_replays"]),
            u(&e["conns_rejected"]),
            u(&e["chunk_buf_waits"]) + u(&e["backend_waits"]),
            u(&c["age_ms"]),
        );
    }
    out += &format!(
        "\n{:<12} {:>10} {:>9} {:>7} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8}\n",
        "procedure", "calls", "rate", "errors", "MB in", "MB out", "p50 us", "p90 us", "p99 us", "max us"
    );
    for p in doc["total"]["procs"].as_array().cloned().unwrap_or_default() {
        let name = p["name"].as_str().unwrap_or("?").to_string();
        let r = match prev {
            Some((pv, dt)) if dt > 0.0 => {
                let before = pv["total"]["procs"]
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x["name"] == p["name"]))
                    .map_or(0, |x| u(&x["calls"]));
                format!("{:.0}/s", u(&p["calls"]).saturating_sub(before) as f64 / dt)
            }
            _ => "-".into(),
        };
        let l = &p["latency_us"];
        out += &format!(
            "{:<12} {:>10} {:>9} {:>7} {:>10.1} {:>10.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}\n",
            name,
            u(&p["calls"]),
            r,
            u(&p["errors"]),
            u(&p["bytes_in"]) as f64 / 1e6,
            u(&p["bytes_out"]) as f64 / 1e6,
            l["p50"].as_f64().unwrap_or(0.0),
            l["p90"].as_f64().unwrap_or(0.0),
            l["p99"].as_f64().unwrap_or(0.0),
            l["max"].as_f64().unwrap_or(0.0),
        );
    }
    out += &format!(
        "\n{:<10} {:>8} {:>8} {:>8} {:>10} {:>9}\n",
        "pool", "total", "in_use", "cached", "high_water", "exhausted"
    );
    for p in doc["pools"].as_array().cloned().unwrap_or_default() {
        out += &format!(
            "{:<10} {:>8} {:>8} {:>8} {:>10} {:>9}\n",
            p["name"].as_str().unwrap_or("?"),
            u(&p["total"]),
            u(&p["in_use"]),
            u(&p["cached"]),
            u(&p["high_water"]),
            u(&p["exhausted"]),
        );
    }
    for t in doc["tcp"].as_array().cloned().unwrap_or_default() {
        out += &format!(
            "tcp {}: calls={} accepted={} refused={} evicted={} timeouts={} bad_records={}\n",
            t["addr"].as_str().unwrap_or("?"),
            u(&t["calls"]),
            u(&t["conns_accepted"]),
            u(&t["conns_refused"]),
            u(&t["conns_evicted"]),
            u(&t["idle_timeouts"]) + u(&t["record_timeouts"]) + u(&t["write_timeouts"]),
            u(&t["bad_records"]),
        );
    }
    let v4 = &doc["nfs4"];
    if v4.is_object() {
        out += &format!(
            "nfs4: delegations held={} (write {}) granted={} (write {}) recalls={} returned={} revoked={} recall->return p50={}us p99={}us\n",
            u(&v4["delegations_held"]),
            u(&v4["write_delegations_held"]),
            u(&v4["delegations_granted"]),
            u(&v4["write_delegations_granted"]),
            u(&v4["recalls"]),
            u(&v4["returned_after_recall"]),
            u(&v4["revoked"]),
            v4["recall_to_return_us"]["p50"].as_f64().unwrap_or(0.0),
            v4["recall_to_return_us"]["p99"].as_f64().unwrap_or(0.0),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_and_order() {
        let mut last = 0;
        for ns in [1u64, 2, 3, 4, 5, 7, 8, 100, 1000, 1_000_000, 1 << 39, u64::MAX] {
            let b = lat_bucket(ns);
            assert!(b >= last, "{ns}");
            last = b;
            if ns < 1 << 40 {
                assert!(
                    lat_bucket_high_ns(b) >= ns,
                    "{ns} in bucket {b} high {}",
                    lat_bucket_high_ns(b)
                );
            }
            if b > 0 {
                assert!(lat_bucket_high_ns(b - 1) < ns, "{ns}");
            }
        }
        // Within a quarter octave.
        assert!(lat_bucket_high_ns(lat_bucket(10_000)) <= 12_500);
    }

    #[test]
    fn seqlock_copies_what_was_written() {
        let p = Published::new(3);
        let mut a = vec![0u64; WORDS];
        assert!(p.read(&mut a));
        assert!(a.iter().all(|&x| x == 0));
        let src: Vec<u64> = (0..WORDS as u64).collect();
        p.write(&src);
        assert!(p.read(&mut a));
        assert_eq!(a, src);
        // A reader racing a writer never sees a mix of two writes.
        let p = Arc::new(Published::new(0));
        let w = p.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let writer = std::thread::spawn(move || {
            let mut k = 1u64;
            while !s2.load(Ordering::Relaxed) {
                w.write(&vec![k; WORDS]);
                k += 1;
                // A core publishes between polls, not back to back: leave
                // the reader a gap now and then, as a loaded machine may
                // otherwise preempt the writer only inside its writes.
                if k.is_multiple_of(16) {
                    std::thread::yield_now();
                }
            }
        });
        let mut seen = 0;
        let mut tries = 0;
        let t0 = std::time::Instant::now();
        while tries < 200 || (seen == 0 && t0.elapsed() < std::time::Duration::from_secs(10)) {
            tries += 1;
            if p.read(&mut a) {
                assert!(a.iter().all(|&x| x == a[0]), "torn read");
                seen += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        assert!(seen > 0);
    }

    #[test]
    fn rows_and_errors_from_headers() {
        let mut call = vec![0u8; 40];
        call[12..16].copy_from_slice(&proto::nfs3::NFS_PROGRAM.to_be_bytes());
        call[20..24].copy_from_slice(&6u32.to_be_bytes());
        assert_eq!(proc_row(&call), Some(6));
        call[12..16].copy_from_slice(&proto::nfs3::MOUNT_PROGRAM.to_be_bytes());
        call[20..24].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(proc_row(&call), Some(23));
        call[20..24].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(proc_row(&call), None);
        assert_eq!(proc_row(&call[..10]), None);
        // NFSv4: its own rows, not NFSv3's NULL and GETATTR.
        call[12..16].copy_from_slice(&proto::nfs3::NFS_PROGRAM.to_be_bytes());
        call[16..20].copy_from_slice(&proto::nfs4::NFS_V4.to_be_bytes());
        call[20..24].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(PROC_NAMES[proc_row(&call).unwrap()], "NFS4.COMPOUND");
        call[20..24].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(PROC_NAMES[proc_row(&call).unwrap()], "NFS4.NULL");
        call[20..24].copy_from_slice(&2u32.to_be_bytes());
        assert_eq!(proc_row(&call), None);
        let mut reply = vec![0u8; 28];
        assert!(!reply_is_error(6, &reply));
        reply[24..28].copy_from_slice(&2u32.to_be_bytes());
        assert!(reply_is_error(6, &reply));
        assert!(!reply_is_error(0, &reply), "NULL has no status");
        reply[24..28].fill(0);
        reply[20..24].copy_from_slice(&5u32.to_be_bytes());
        assert!(reply_is_error(0, &reply), "GARBAGE_ARGS");
        reply[20..24].fill(0);
        reply[24..28].copy_from_slice(&10008u32.to_be_bytes());
        assert!(reply_is_error(NFS4_ROW + 1, &reply), "a COMPOUND's status");
        assert!(!reply_is_error(NFS4_ROW, &reply), "NFSv4 NULL has no status");
    }

    /// A publication copies the rows that changed since the last one, not
    /// all 30 (each two histograms of 164 buckets): what a reader gets is
    /// still the whole snapshot.
    #[test]
    fn publish_stores_only_the_rows_that_changed() {
        let (engine, nfs, drc) = (ResponderStats::default(), NfsStats::default(), DrcStats::default());
        let view = |ps: &ProcStats, f: &mut dyn FnMut(&CoreView<'_>)| {
            f(&CoreView {
                engine: &engine,
                connections: 1,
                in_flight: 0,
                deferred_now: 0,
                credits_granted: 8,
                held: HeldBuffers::default(),
                nfs: &nfs,
                drc: &drc,
                procs: ps,
            })
        };
        let cell = Arc::new(Published::new(0));
        let mut p = Publisher::new(cell.clone(), Instant::now());
        let mut ps = ProcStats::default();
        ps.answered(1, false, 100, 100, None);
        view(&ps, &mut |v| p.publish(v, 10));
        assert_eq!(
            cell.words_stored(),
            WORDS as u64,
            "the first publication copies everything"
        );
        // One READ answered and timed: its row only.
        ps.answered(6, false, 120, 4096, Some(0));
        ps.posted(6, 30_000);
        view(&ps, &mut |v| p.publish(v, 20));
        let one_row = (OFF_PROCS + 4 + 2 * LAT_BUCKETS) as u64;
        assert_eq!(cell.words_stored(), WORDS as u64 + one_row);
        // Nothing changed: the words before the rows.
        view(&ps, &mut |v| p.publish(v, 30));
        assert_eq!(cell.words_stored(), WORDS as u64 + one_row + OFF_PROCS as u64);
        // What a reader sees is the whole snapshot.
        let (mut got, mut want) = (vec![0u64; WORDS], vec![0u64; WORDS]);
        assert!(cell.read(&mut got));
        view(&ps, &mut |v| encode(v, 30, &mut want));
        assert_eq!(got, want);
    }

    #[test]
    fn reply_posted_times_are_published_in_their_row() {
        let mut ps = ProcStats::default();
        ps.posted(6, 40_000);
        ps.posted(6, 50_000);
        ps.posted(PROCS, 1); // no such row: ignored
        ps.answered(6, false, 100, 4096, None);
        let (engine, nfs, drc) = (ResponderStats::default(), NfsStats::default(), DrcStats::default());
        let v = CoreView {
            engine: &engine,
            connections: 0,
            in_flight: 0,
            deferred_now: 0,
            credits_granted: 0,
            held: HeldBuffers::default(),
            nfs: &nfs,
            drc: &drc,
            procs: &ps,
        };
        let mut w = vec![0u64; WORDS];
        encode(&v, 1, &mut w);
        let sec = core_section(&w, 1);
        let read = &sec["procs"][0];
        assert_eq!(read["name"], "READ", "{sec}");
        assert_eq!(read["reply_posted_us"]["samples"], 2, "{read}");
        let p99 = read["reply_posted_us"]["p99"].as_f64().unwrap();
        assert!((50.0..=63.0).contains(&p99), "{read}");
        // The service's own histogram is another: nothing timed there.
        assert_eq!(read["latency_us"]["samples"], 0, "{read}");
        let b = read["reply_posted_buckets"].as_array().unwrap();
        assert_eq!(b.iter().map(|x| x[1].as_u64().unwrap()).sum::<u64>(), 2);
    }

    #[test]
    fn percentiles_of_buckets() {
        let mut ps = ProcStats::default();
        for k in 0..100u64 {
            ps.lat[6][lat_bucket(1000 * (k + 1))] += 1;
        }
        let v = percentiles(&ps.lat[6]);
        assert_eq!(v["samples"], 100);
        let p50 = v["p50"].as_f64().unwrap();
        assert!((50.0..=63.0).contains(&p50), "{v}");
        assert!(v["max"].as_f64().unwrap() >= 100.0);
        // The raw buckets: non-empty ones only, ascending, counts summing to
        // the samples, each value within its bucket's bound.
        let b = buckets(&ps.lat[6]);
        let b = b.as_array().unwrap();
        let total: u64 = b.iter().map(|x| x[1].as_u64().unwrap()).sum();
        assert_eq!(total, 100);
        let highs: Vec<u64> = b.iter().map(|x| x[0].as_u64().unwrap()).collect();
        assert!(highs.windows(2).all(|w| w[0] < w[1]), "{highs:?}");
        assert!(highs[0] >= 1000 && *highs.last().unwrap() >= 100_000, "{highs:?}");
        assert!(b.iter().all(|x| x[1].as_u64().unwrap() > 0));
    }
}
