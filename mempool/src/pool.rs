//! Fixed-size buffer pools carved from [`Region`]s, with per-core caches.
//!
//! # Shape
//!
//! A [`Mempool`] has up to [`MAX_CLASSES`] size classes. Each class owns one
//! region (region id == class index) cut into `count` buffers of `stride`
//! bytes; a buffer is named by the `Copy` handle [`BufRef`] `{ region, class,
//! index }`, and its bytes live at `region base + index * stride`. A fabric
//! turns a handle into an address and a registered key with two array
//! indexings ([`Mempool::segment`]), never a lookup or a registration.
//!
//! Free buffers of a class sit in a shared [`Ring`] of indices. Each core
//! puts a [`PoolCache`] in front of it (owned by that core, `!Sync`, no
//! atomic read-modify-write on the fast path); the cache refills from and
//! flushes to the ring in bulk.
//!
//! # Sizing
//!
//! Pools are sized from their holders' worst cases: every component that
//! holds buffers declares its worst case in a [`PoolPlan`]
//! (`plan.reserve("receive", class, count)`), and a class gets
//! `sum(reservations) + cores * cache_size` buffers (the second term covers
//! buffers parked in per-core caches). [`Mempool::new`] checks the relations
//! (capacity >= sum, cores * cache_size <= count, ...) and returns
//! [`MempoolError::InvalidPlan`] rather than starting with a pool that can
//! starve a holder.
//!
//! # Exhaustion
//!
//! Exhaustion is a value: [`PoolCache::get_bulk`] returns a short count,
//! [`PoolCache::get`] returns `None`, and the cache's and pool's exhaustion
//! counters go up. The caller turns that into back-pressure. Nothing on the
//! hot path panics or allocates.
//!
//! # Aliasing rule
//!
//! **Only the holder of a buffer touches its bytes.** A buffer is held from
//! the moment a `get` hands it out until it is put back; handles are `Copy`,
//! so the rule is a contract, stated on the `unsafe` functions that rely on
//! it ([`Mempool::bytes`], [`Mempool::bytes_mut`], [`Buf::from_raw`],
//! [`PoolCache::put_bulk`]). The safe path is [`Buf`], an owning, non-`Copy`
//! token with `&[u8]`/`&mut [u8]` accessors, obtained from
//! [`PoolCache::get`] and consumed by [`PoolCache::put`]. When memory is
//! shared with a peer process or a NIC, the same rule extends to them: the
//! holder hands the bytes to the device and takes them back on completion.
//!
//! # Debug canaries
//!
//! In debug builds (`debug_assertions`):
//! * a per-buffer "handed out" bitmap catches double free: putting a buffer
//!   that is not handed out returns [`BufError::DoubleFree`] and the buffer
//!   is not freed again;
//! * [`GUARD_BYTES`] bytes of [`GUARD_PATTERN`] after each buffer are
//!   checked on put; a damaged guard returns [`BufError::Overrun`] (the
//!   buffer is still freed and its guard restored).
//!
//! Release builds skip both (bounds checks on handles stay).

use core::cell::Cell;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{BufError, MempoolError};
use crate::region::{hugepage_counts, Region, RegionBacking, RegionConfig, RegionWarning};
use crate::ring::{self, Ring};

/// Cache line size assumed for buffer alignment.
pub const CACHE_LINE: usize = 64;
/// Most size classes one pool can have (class ids are `u8`).
pub const MAX_CLASSES: usize = 16;
/// Largest buffer size of a class (buffer lengths travel as `u32` in RDMA
/// segments).
pub const MAX_BUF_SIZE: usize = 1 << 30;
/// Most buffers in one class (the free ring's capacity limit).
pub const MAX_BUFS_PER_CLASS: usize = ring::MAX_CAPACITY;
/// Guard bytes after each buffer: 64 in debug builds, 0 in release builds.
pub const GUARD_BYTES: usize = if cfg!(debug_assertions) { 64 } else { 0 };
/// Byte value of guard bytes.
pub const GUARD_PATTERN: u8 = 0xA5;

/// Default inline threshold of RPC-over-RDMA version 1 (RFC 8166, Section
/// 3.3.3): the smallest receive buffer a peer must support.
pub const INLINE_RECV_SIZE_V1: usize = 1024;
/// Default receive buffer size of RPC-over-RDMA version 2
/// (draft-cel-nfsv4-rpcrdma-version-two-09, Section 4.2.1).
pub const INLINE_RECV_SIZE_V2: usize = 4096;
/// Buffer size of the 4 KiB class.
pub const CLASS_4K: usize = 4 << 10;
/// Buffer size of the 64 KiB class.
pub const CLASS_64K: usize = 64 << 10;
/// Buffer size of the 1 MiB class.
pub const CLASS_1M: usize = 1 << 20;

const _: () = assert!(MAX_CLASSES <= u8::MAX as usize + 1);
const _: () = assert!(MAX_CLASSES <= u16::MAX as usize + 1); // region id == class
const _: () = assert!(MAX_BUF_SIZE <= u32::MAX as usize);
const _: () = assert!(MAX_BUFS_PER_CLASS <= u32::MAX as usize + 1);
const _: () = assert!(GUARD_BYTES % CACHE_LINE == 0);
const _: () = assert!(CACHE_LINE.is_power_of_two());
const _: () = assert!(INLINE_RECV_SIZE_V1 < INLINE_RECV_SIZE_V2);
const _: () = assert!(INLINE_RECV_SIZE_V1 % CACHE_LINE == 0 && INLINE_RECV_SIZE_V2 % CACHE_LINE == 0);
const _: () = assert!(CLASS_4K < CLASS_64K && CLASS_64K < CLASS_1M && CLASS_1M <= MAX_BUF_SIZE);
// Buffers of the standard classes stay page-aligned in release builds.
const _: () = assert!(CLASS_4K % crate::region::NORMAL_PAGE == 0);

/// Handle of one pool buffer. `Copy`; holding one is a claim on the
/// buffer's bytes only while the holder rule says so (see module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufRef {
    /// Region id (index into [`Mempool::regions`] and [`Registration`]).
    pub region: u16,
    /// Size class index.
    pub class: u8,
    /// Buffer index within the class.
    pub index: u32,
}

impl BufRef {
    /// Packs the handle into 56 bits of a `u64` (e.g. an RDMA work request
    /// id): `region << 40 | class << 32 | index`.
    #[inline]
    pub const fn to_u64(self) -> u64 {
        (self.region as u64) << 40 | (self.class as u64) << 32 | self.index as u64
    }

    /// Inverse of [`BufRef::to_u64`]; `None` if bits above 56 are set.
    /// The result is only a handle; the pool validates it on use.
    #[inline]
    pub const fn from_u64(v: u64) -> Option<BufRef> {
        if v >> 56 != 0 {
            return None;
        }
        Some(BufRef {
            region: (v >> 40) as u16,
            class: (v >> 32) as u8,
            index: v as u32,
        })
    }
}

/// Index of a size class in a [`PoolPlan`] / [`Mempool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassId(u8);

impl ClassId {
    /// Class id from a raw index (e.g. [`BufRef::class`]); pools and plans
    /// check it on use.
    #[inline]
    pub const fn new(index: u8) -> ClassId {
        ClassId(index)
    }

    /// The class index.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The class id as stored in [`BufRef::class`].
    #[inline]
    pub const fn get(self) -> u8 {
        self.0
    }
}

/// One size class as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSpec {
    /// Name for reports.
    pub name: &'static str,
    /// Usable bytes per buffer.
    pub buf_size: usize,
    /// Most buffers one per-core cache may park (0 = no cache: every get
    /// and put goes to the shared ring).
    pub cache_size: u32,
    /// Explicit buffer count; `None` = derived from reservations.
    pub count_override: Option<u64>,
}

/// A holder's declared worst case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// Who holds the buffers (e.g. "receive", "send", "ddp-read").
    pub holder: &'static str,
    /// Class reserved from.
    pub class: ClassId,
    /// Most buffers the holder can hold at once, summed over all cores.
    pub count: u64,
}

/// Start-up plan of a pool: size classes, holders' worst cases, cores.
/// Build it at start-up, then pass it to [`Mempool::new`].
#[derive(Debug, Clone, Default)]
pub struct PoolPlan {
    cores: usize,
    classes: Vec<ClassSpec>,
    reservations: Vec<Reservation>,
}

impl PoolPlan {
    /// Empty plan for `cores` per-core caches per class.
    pub fn new(cores: usize) -> PoolPlan {
        PoolPlan {
            cores,
            classes: Vec::new(),
            reservations: Vec::new(),
        }
    }

    /// Adds a size class. Errors when [`MAX_CLASSES`] are already defined;
    /// sizes are checked by [`PoolPlan::validate`].
    pub fn add_class(&mut self, name: &'static str, buf_size: usize, cache_size: u32) -> Result<ClassId, MempoolError> {
        if self.classes.len() >= MAX_CLASSES {
            return Err(MempoolError::InvalidPlan(format!(
                "more than {MAX_CLASSES} size classes"
            )));
        }
        let id = ClassId(self.classes.len() as u8);
        self.classes.push(ClassSpec {
            name,
            buf_size,
            cache_size,
            count_override: None,
        });
        Ok(id)
    }

    /// Declares that `holder` may hold up to `count` buffers of `class` at
    /// once (its worst case, all cores together). Checked by `validate`.
    pub fn reserve(&mut self, holder: &'static str, class: ClassId, count: u64) -> &mut Self {
        self.reservations.push(Reservation { holder, class, count });
        self
    }

    /// Fixes the buffer count of `class` instead of deriving it. `validate`
    /// then checks that it covers the reservations and the caches.
    pub fn set_count(&mut self, class: ClassId, count: u64) -> &mut Self {
        if let Some(c) = self.classes.get_mut(class.index()) {
            c.count_override = Some(count);
        }
        self
    }

    /// Number of per-core caches per class.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// The classes, indexed by [`ClassId::index`].
    pub fn classes(&self) -> &[ClassSpec] {
        &self.classes
    }

    /// All reservations, in declaration order.
    pub fn reservations(&self) -> &[Reservation] {
        &self.reservations
    }

    /// Sum of the holders' worst cases for `class` (saturating).
    pub fn reserved(&self, class: ClassId) -> u64 {
        self.reservations
            .iter()
            .filter(|r| r.class == class)
            .fold(0u64, |acc, r| acc.saturating_add(r.count))
    }

    /// Buffers parked in caches at most: `cores * cache_size` (saturating).
    pub fn cache_headroom(&self, class: ClassId) -> u64 {
        self.classes
            .get(class.index())
            .map_or(0, |c| (self.cores as u64).saturating_mul(u64::from(c.cache_size)))
    }

    /// Buffer count of `class`: the override if set, else
    /// `reserved + cache_headroom`.
    pub fn count(&self, class: ClassId) -> u64 {
        match self.classes.get(class.index()) {
            Some(ClassSpec {
                count_override: Some(n),
                ..
            }) => *n,
            Some(_) => self.reserved(class).saturating_add(self.cache_headroom(class)),
            None => 0,
        }
    }

    /// Checks every relation the pool relies on; the error names the class
    /// and the numbers.
    pub fn validate(&self) -> Result<(), MempoolError> {
        let bad = |msg: String| Err(MempoolError::InvalidPlan(msg));
        if self.cores == 0 {
            return bad("cores must be at least 1".into());
        }
        if self.classes.is_empty() {
            return bad("no size classes".into());
        }
        for r in &self.reservations {
            if r.class.index() >= self.classes.len() {
                return bad(format!(
                    "holder {:?} reserves from unknown class {}",
                    r.holder, r.class.0
                ));
            }
        }
        for (i, c) in self.classes.iter().enumerate() {
            let id = ClassId(i as u8);
            if c.buf_size == 0 || c.buf_size > MAX_BUF_SIZE {
                return bad(format!(
                    "class {:?}: buffer size {} not in 1..={MAX_BUF_SIZE}",
                    c.name, c.buf_size
                ));
            }
            let count = self.count(id);
            let reserved = self.reserved(id);
            let headroom = self.cache_headroom(id);
            if count == 0 {
                return bad(format!("class {:?}: no buffers (no reservations)", c.name));
            }
            if count > MAX_BUFS_PER_CLASS as u64 {
                return bad(format!(
                    "class {:?}: {count} buffers exceed {MAX_BUFS_PER_CLASS}",
                    c.name
                ));
            }
            if count < reserved {
                return bad(format!(
                    "class {:?}: capacity {count} < holders' worst case {reserved}",
                    c.name
                ));
            }
            if headroom > count {
                return bad(format!(
                    "class {:?}: caches ({} cores x {}) exceed capacity {count}",
                    c.name, self.cores, c.cache_size
                ));
            }
            if stride_of(c.buf_size)
                .and_then(|s| s.checked_mul(count as usize))
                .is_none()
            {
                return bad(format!("class {:?}: region size overflows", c.name));
            }
        }
        Ok(())
    }
}

impl fmt::Display for PoolPlan {
    /// A table of classes and their holders, for start-up logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.classes.iter().enumerate() {
            let id = ClassId(i as u8);
            writeln!(
                f,
                "class {i} {:?}: {} bytes x {} buffers (reserved {}, cache headroom {} = {} cores x {})",
                c.name,
                c.buf_size,
                self.count(id),
                self.reserved(id),
                self.cache_headroom(id),
                self.cores,
                c.cache_size
            )?;
            for r in self.reservations.iter().filter(|r| r.class == id) {
                writeln!(f, "  {:<16} {}", r.holder, r.count)?;
            }
        }
        Ok(())
    }
}

/// Stride of a buffer of `buf_size` usable bytes: room for the guard, rounded
/// up to a cache line.
fn stride_of(buf_size: usize) -> Option<usize> {
    let raw = buf_size.checked_add(GUARD_BYTES)?;
    raw.checked_add(CACHE_LINE - 1).map(|v| v & !(CACHE_LINE - 1))
}

/// Per-region keys from one fabric device's memory registration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Keys {
    /// Local key (used in local scatter/gather entries).
    pub lkey: u32,
    /// Remote key / steering tag (advertised to peers in RDMA segments,
    /// RFC 8166 Section 3.4.3).
    pub rkey: u32,
}

/// Keys of every region for one fabric device, indexed by region id. Made
/// once at start-up by [`Mempool::register_all`]; the keys are persistent
/// (they live as long as the process), so the hot path never registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    keys: Box<[Keys]>,
}

impl Registration {
    /// Keys of `region` (an array index), `None` for an unknown region.
    /// Any thread.
    #[inline]
    pub fn keys(&self, region: u16) -> Option<Keys> {
        self.keys.get(usize::from(region)).copied()
    }

    /// Number of regions covered.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no region is covered.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// Where a buffer is, for building a scatter/gather entry or an RDMA segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Virtual address of the buffer's first byte in this process.
    pub addr: u64,
    /// Usable length of the buffer.
    pub len: u32,
    /// Region id.
    pub region: u16,
    /// Byte offset of the buffer in its region.
    pub offset: u64,
    /// Keys of the region for the device of the [`Registration`] used.
    pub keys: Keys,
}

/// Static description of one class of a live pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassInfo {
    /// Name from the plan.
    pub name: &'static str,
    /// Class id.
    pub class: ClassId,
    /// Region holding the buffers.
    pub region: u16,
    /// Usable bytes per buffer.
    pub buf_size: usize,
    /// Distance between buffers (buffer + guard, cache-line rounded).
    pub stride: usize,
    /// Number of buffers.
    pub count: u32,
    /// Per-core cache size.
    pub cache_size: u32,
}

/// Snapshot of a class's counters. Exact when no core is inside a pool
/// call; a snapshot otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Buffers in the class.
    pub total: u32,
    /// Buffers in the shared free ring.
    pub free_in_ring: u64,
    /// Buffers parked in per-core caches.
    pub cached: u64,
    /// Buffers handed out and not yet put back (all cores).
    pub in_use: u64,
    /// Most buffers ever outside the shared ring (handed out or cached),
    /// sampled after every refill from the ring.
    pub taken_high_water: u64,
    /// Number of get calls, all caches, that came back short.
    pub exhausted: u64,
}

/// One cache's counters (owned by its core; see [`PoolCache::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Buffers handed out by this cache.
    pub gets: u64,
    /// Buffers put back through this cache.
    pub puts: u64,
    /// `gets - puts`: buffers this core took and has not returned here. May
    /// be negative when buffers taken on one core are freed on another.
    pub in_use: i64,
    /// Highest `in_use` seen.
    pub high_water: i64,
    /// Get calls that came back short.
    pub exhausted: u64,
    /// Buffers parked in the cache now.
    pub cached: u32,
    /// Refills from the shared ring.
    pub refills: u64,
    /// Flushes to the shared ring.
    pub flushes: u64,
}

/// A cache's published counters, written by its owning core with plain
/// (Relaxed) stores and read by anyone for [`Mempool::stats`].
#[repr(align(128))]
#[derive(Default)]
struct CacheSlot {
    claimed: AtomicBool,
    gets: AtomicU64,
    puts: AtomicU64,
    cached: AtomicU64,
    exhausted: AtomicU64,
}

struct ClassPool {
    info: ClassInfo,
    base: NonNull<u8>,
    free: Ring<u32>,
    slots: Box<[CacheSlot]>,
    taken_high_water: AtomicU64,
    /// Debug builds: bit `i` set while buffer `i` is handed out.
    #[cfg(debug_assertions)]
    handed_out: Box<[AtomicU64]>,
}

impl ClassPool {
    /// Pointer to buffer `index`'s first byte.
    ///
    /// # Safety
    /// `index < count`.
    #[inline]
    unsafe fn buf_ptr(&self, index: u32) -> *mut u8 {
        // SAFETY: index < count (caller) and count * stride <= region len
        // (checked in Mempool::new), so the offset stays in the mapping.
        unsafe { self.base.as_ptr().add(index as usize * self.info.stride) }
    }

    #[inline]
    fn owns(&self, b: BufRef) -> bool {
        b.class == self.info.class.0 && b.region == self.info.region && b.index < self.info.count
    }

    /// Debug: mark as handed out; the pool must never hand out a buffer twice.
    #[inline]
    fn mark_out(&self, _index: u32) {
        #[cfg(debug_assertions)]
        {
            let (w, bit) = (_index as usize / 64, 1u64 << (_index % 64));
            // Relaxed: the bitmap only detects misuse; ownership of the
            // buffer is transferred by the ring's Release/Acquire pairs.
            let prev = self.handed_out[w].fetch_or(bit, Ordering::Relaxed);
            debug_assert!(prev & bit == 0, "pool handed out buffer {_index} twice");
        }
    }

    /// Checks the debug canaries of buffer `b` (which `owns`) being put back.
    #[inline]
    fn check_put(&self, _b: BufRef) -> Result<(), BufError> {
        #[cfg(debug_assertions)]
        {
            let (w, bit) = (_b.index as usize / 64, 1u64 << (_b.index % 64));
            // Relaxed: see mark_out.
            let prev = self.handed_out[w].fetch_and(!bit, Ordering::Relaxed);
            if prev & bit == 0 {
                return Err(BufError::DoubleFree(_b));
            }
            // SAFETY: index < count (owns); the guard bytes [buf_size,
            // buf_size + GUARD_BYTES) lie inside this buffer's stride and
            // belong to the holder, who is the caller putting it back; we
            // cleared the handed-out bit, so a racing double free returns
            // above without touching them.
            let guard =
                unsafe { core::slice::from_raw_parts_mut(self.buf_ptr(_b.index).add(self.info.buf_size), GUARD_BYTES) };
            if guard.iter().any(|&g| g != GUARD_PATTERN) {
                guard.fill(GUARD_PATTERN);
                return Err(BufError::Overrun(_b));
            }
        }
        Ok(())
    }
}

/// A set of buffer pools, one per size class, each in its own region.
/// Create once at start-up ([`Mempool::new`]); share by reference across
/// cores (it is `Sync`); each core then claims a [`PoolCache`] per class.
pub struct Mempool {
    regions: Box<[Arc<Region>]>,
    classes: Box<[ClassPool]>,
    cores: usize,
}

// SAFETY: the only non-auto-Send/Sync fields are the classes' base pointers
// into regions owned by this same `Mempool`. The pool itself dereferences
// them only for guard bytes (debug builds), under the holder rule, and the
// free lists and counters are atomics / the `Sync` ring.
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

impl fmt::Debug for Mempool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mempool")
            .field("regions", &self.regions)
            .field("classes", &self.classes.iter().map(|c| c.info).collect::<Vec<_>>())
            .field("cores", &self.cores)
            .finish()
    }
}

impl Mempool {
    /// Validates `plan`, creates one region per class (hugepages or the
    /// fallback, see [`crate::region`]), and fills the free rings. Start-up
    /// only; any thread. Check [`Mempool::warning`] afterwards and log it.
    pub fn new(plan: &PoolPlan, cfg: &RegionConfig) -> Result<Mempool, MempoolError> {
        plan.validate()?;
        let mut regions = Vec::with_capacity(plan.classes.len());
        let mut classes = Vec::with_capacity(plan.classes.len());
        for (i, spec) in plan.classes.iter().enumerate() {
            let class = ClassId(i as u8);
            // validate() bounded both: count <= MAX_BUFS_PER_CLASS <= 2^32,
            // stride * count does not overflow.
            let count = plan.count(class) as usize;
            let stride = stride_of(spec.buf_size).unwrap_or(usize::MAX);
            let region = Region::create(i as u16, stride * count, cfg)?;
            if region.len() < stride * count {
                return Err(MempoolError::InvalidRegionLength {
                    len: region.len(),
                    reason: "region shorter than its buffers",
                });
            }
            let free = Ring::<u32>::new(count.next_power_of_two())?;
            let info = ClassInfo {
                name: spec.name,
                class,
                region: i as u16,
                buf_size: spec.buf_size,
                stride,
                count: count as u32,
                cache_size: spec.cache_size,
            };
            let pool = ClassPool {
                info,
                base: NonNull::new(region.as_ptr()).ok_or(MempoolError::InvalidRegionLength {
                    len: region.len(),
                    reason: "null mapping",
                })?,
                free,
                slots: (0..plan.cores).map(|_| CacheSlot::default()).collect(),
                taken_high_water: AtomicU64::new(0),
                #[cfg(debug_assertions)]
                handed_out: (0..count.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            };
            let mut batch = [0u32; 256];
            let mut next = 0usize;
            while next < count {
                let k = batch.len().min(count - next);
                for (j, slot) in batch[..k].iter_mut().enumerate() {
                    *slot = (next + j) as u32;
                }
                let n = pool.free.enqueue_burst(&batch[..k]);
                debug_assert_eq!(n, k, "free ring smaller than count");
                next += n;
                if n == 0 {
                    break;
                }
            }
            if cfg!(debug_assertions) {
                for index in 0..count as u32 {
                    // SAFETY: index < count; no buffer is handed out yet, so
                    // the pool owns every guard.
                    unsafe {
                        core::ptr::write_bytes(pool.buf_ptr(index).add(spec.buf_size), GUARD_PATTERN, GUARD_BYTES);
                    }
                }
            }
            regions.push(Arc::new(region));
            classes.push(pool);
        }
        Ok(Mempool {
            regions: regions.into_boxed_slice(),
            classes: classes.into_boxed_slice(),
            cores: plan.cores,
        })
    }

    /// The regions, indexed by region id. Shared (`Arc`) so that a fabric
    /// provider can keep a region's mapping alive for as long as it may touch
    /// its memory (the shm and sim providers copy through it).
    pub fn regions(&self) -> &[Arc<Region>] {
        &self.regions
    }

    /// Region `id`, if any.
    pub fn region(&self, id: u16) -> Option<&Region> {
        self.regions.get(usize::from(id)).map(|r| &**r)
    }

    /// Number of classes.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// Number of per-core cache slots per class.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// Description of `class`, if it exists. Any thread.
    pub fn class_info(&self, class: ClassId) -> Option<ClassInfo> {
        self.classes.get(class.index()).map(|c| c.info)
    }

    /// One message summarising every region warning (hugepage fallback,
    /// mlock failure), or `None`. Log it once at start-up.
    pub fn warning(&self) -> Option<String> {
        let mut fallback = None;
        let mut fallback_regions = 0usize;
        let mut huge_bytes = 0usize;
        let mut mlock = None;
        let mut mlock_regions = 0usize;
        for r in self.regions.iter() {
            huge_bytes += r.len();
            for w in r.warnings() {
                match w {
                    RegionWarning::HugepageFallback { .. } => {
                        fallback_regions += 1;
                        fallback.get_or_insert_with(|| w.to_string());
                    }
                    RegionWarning::MlockFailed { .. } => {
                        mlock_regions += 1;
                        mlock.get_or_insert_with(|| w.to_string());
                    }
                }
            }
        }
        let mut parts = Vec::new();
        if let Some(text) = fallback {
            let page = match self.regions.iter().find_map(|r| {
                r.warnings().iter().find_map(|w| match w {
                    RegionWarning::HugepageFallback { page_size, .. } => Some(page_size.bytes()),
                    _ => None,
                })
            }) {
                Some(p) => p,
                None => crate::region::HUGEPAGE_2M,
            };
            let needed = huge_bytes.div_ceil(page);
            let meminfo = match hugepage_counts() {
                Some((total, free, _)) => {
                    format!(" (/proc/meminfo: HugePages_Total={total}, HugePages_Free={free})")
                }
                None => String::new(),
            };
            parts.push(format!(
                "{fallback_regions} of {} regions: {text}; this pool needs {needed} hugepages of {} MiB{meminfo}",
                self.regions.len(),
                page >> 20
            ));
        }
        if let Some(text) = mlock {
            parts.push(format!("{mlock_regions} of {} regions: {text}", self.regions.len()));
        }
        if parts.is_empty() {
            None
        } else {
            Some(format!("mempool: {}", parts.join("; ")))
        }
    }

    /// True when every region is hugepage-backed.
    pub fn all_hugepages(&self) -> bool {
        self.regions
            .iter()
            .all(|r| matches!(r.backing(), RegionBacking::HugeTlb { .. }))
    }

    /// Runs `f` once per region (e.g. a fabric device's memory
    /// registration) and returns the keys as a table indexed by region id.
    /// Call once per device at start-up; the first error aborts.
    pub fn register_all<E>(&self, mut f: impl FnMut(&Region) -> Result<Keys, E>) -> Result<Registration, E> {
        let mut keys = Vec::with_capacity(self.regions.len());
        for r in self.regions.iter() {
            keys.push(f(r)?);
        }
        Ok(Registration {
            keys: keys.into_boxed_slice(),
        })
    }

    #[inline]
    fn class_of(&self, b: BufRef) -> Option<&ClassPool> {
        let c = self.classes.get(usize::from(b.class))?;
        c.owns(b).then_some(c)
    }

    /// Byte offset of `b` in its region, `None` for a handle that is not
    /// this pool's. Any thread.
    #[inline]
    pub fn offset(&self, b: BufRef) -> Option<usize> {
        self.class_of(b).map(|c| b.index as usize * c.info.stride)
    }

    /// Raw pointer and usable length of `b`'s bytes (for handing to a device
    /// or a peer), `None` for a foreign handle. Any thread. Dereferencing is
    /// subject to the holder rule.
    #[inline]
    pub fn buf_ptr(&self, b: BufRef) -> Option<(NonNull<u8>, usize)> {
        let c = self.class_of(b)?;
        // SAFETY: class_of checked index < count.
        let p = unsafe { c.buf_ptr(b.index) };
        NonNull::new(p).map(|p| (p, c.info.buf_size))
    }

    /// Address, length, offset and keys of `b` for a work request: two
    /// array indexings, no lookup. `None` for a foreign handle or a region
    /// missing from `reg`. Any thread.
    #[inline]
    pub fn segment(&self, reg: &Registration, b: BufRef) -> Option<Segment> {
        let c = self.class_of(b)?;
        let keys = reg.keys(b.region)?;
        let offset = b.index as usize * c.info.stride;
        Some(Segment {
            addr: c.base.as_ptr() as u64 + offset as u64,
            len: c.info.buf_size as u32,
            region: b.region,
            offset: offset as u64,
            keys,
        })
    }

    /// The bytes of `b`, `None` for a foreign handle.
    ///
    /// # Safety
    /// The caller must hold `b` (it was handed out by a get and not yet put
    /// back) or act for its holder, and nobody may write the buffer for the
    /// lifetime of the returned slice.
    #[inline]
    pub unsafe fn bytes(&self, b: BufRef) -> Option<&[u8]> {
        let (p, len) = self.buf_ptr(b)?;
        // SAFETY: [p, p + len) is inside our live mapping; the caller
        // guarantees no concurrent writer (holder rule).
        Some(unsafe { core::slice::from_raw_parts(p.as_ptr(), len) })
    }

    /// The bytes of `b`, mutable; `None` for a foreign handle.
    ///
    /// # Safety
    /// The caller must hold `b`, and no other reference to the buffer's
    /// bytes (from this or another call, or a [`Buf`]) may exist for the
    /// lifetime of the returned slice.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub unsafe fn bytes_mut(&self, b: BufRef) -> Option<&mut [u8]> {
        let (p, len) = self.buf_ptr(b)?;
        // SAFETY: inside our live mapping; exclusivity is the caller's
        // contract (holder rule).
        Some(unsafe { core::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }

    /// Counters of `class`. Any thread; see [`PoolStats`] for exactness.
    pub fn stats(&self, class: ClassId) -> Option<PoolStats> {
        let c = self.classes.get(class.index())?;
        let (mut gets, mut puts, mut cached, mut exhausted) = (0u64, 0u64, 0u64, 0u64);
        for s in c.slots.iter() {
            // Relaxed: statistics; each value is a plain counter.
            gets += s.gets.load(Ordering::Relaxed);
            puts += s.puts.load(Ordering::Relaxed);
            cached += s.cached.load(Ordering::Relaxed);
            exhausted += s.exhausted.load(Ordering::Relaxed);
        }
        Some(PoolStats {
            total: c.info.count,
            free_in_ring: c.free.len() as u64,
            cached,
            in_use: gets.saturating_sub(puts),
            // Relaxed: statistic.
            taken_high_water: c.taken_high_water.load(Ordering::Relaxed),
            exhausted,
        })
    }

    /// Claims the cache of `class` for core `core` (one cache per pair at a
    /// time). The cache is `Send`, so it can be made here and moved to its
    /// core's thread; from then on only that thread uses it. Start-up only.
    pub fn cache(&self, class: ClassId, core: usize) -> Result<PoolCache<'_>, MempoolError> {
        let c = self
            .classes
            .get(class.index())
            .ok_or(MempoolError::UnknownClass(class.0))?;
        let slot = c.slots.get(core).ok_or(MempoolError::CacheSlot {
            class: class.0,
            core,
            reason: "out of range",
        })?;
        // Acquire pairs with the Release store of `false` in PoolCache's
        // Drop, so the counters the previous owner published are visible.
        if slot
            .claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(MempoolError::CacheSlot {
                class: class.0,
                core,
                reason: "already claimed",
            });
        }
        // Relaxed: ordered by the Acquire claim above.
        let gets = slot.gets.load(Ordering::Relaxed);
        let puts = slot.puts.load(Ordering::Relaxed);
        let exhausted = slot.exhausted.load(Ordering::Relaxed);
        let in_use = gets as i64 - puts as i64;
        Ok(PoolCache {
            pool: self,
            class: c,
            slot,
            objs: vec![0u32; c.info.cache_size as usize].into_boxed_slice(),
            len: 0,
            stats: CacheStats {
                gets,
                puts,
                in_use,
                high_water: in_use,
                exhausted,
                ..CacheStats::default()
            },
            _not_sync: PhantomData,
        })
    }

    /// Claims the caches of every class for `core`. Start-up only.
    pub fn core_caches(&self, core: usize) -> Result<CoreCaches<'_>, MempoolError> {
        let caches = (0..self.classes.len())
            .map(|i| self.cache(ClassId(i as u8), core))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(CoreCaches {
            caches: caches.into_boxed_slice(),
        })
    }
}

/// An owned buffer: the safe way to touch buffer bytes. Not `Copy`, not
/// `Clone`; get it from [`PoolCache::get`], give it back with
/// [`PoolCache::put`]. Dropping a `Buf` does not free it (the holder keeps
/// counting as in use); convert with [`Buf::into_raw`] to pass the handle
/// to a device.
#[must_use = "a dropped Buf is not returned to its pool"]
pub struct Buf<'p> {
    pool: &'p Mempool,
    buf: BufRef,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a `Buf` is the unique holder of its bytes (holder rule), so moving
// it to another thread moves that exclusive access.
unsafe impl Send for Buf<'_> {}
// SAFETY: `&Buf` only gives `&[u8]`; mutation needs `&mut Buf`.
unsafe impl Sync for Buf<'_> {}

impl fmt::Debug for Buf<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf")
            .field("buf", &self.buf)
            .field("len", &self.len)
            .finish()
    }
}

impl<'p> Buf<'p> {
    /// Rebuilds an owned buffer from a handle, `None` for a foreign handle.
    ///
    /// # Safety
    /// The caller must hold `b` and give up every other claim on its bytes
    /// (no other `Buf`, slice or device access) while the `Buf` lives.
    pub unsafe fn from_raw(pool: &'p Mempool, b: BufRef) -> Option<Buf<'p>> {
        let (ptr, len) = pool.buf_ptr(b)?;
        Some(Buf { pool, buf: b, ptr, len })
    }

    /// Gives up the owned view, keeping the buffer held under its handle.
    #[inline]
    pub fn into_raw(self) -> BufRef {
        self.buf
    }

    /// The handle.
    #[inline]
    pub fn buf_ref(&self) -> BufRef {
        self.buf
    }

    /// Usable length (the class's buffer size).
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: [ptr, ptr + len) is inside the pool's mapping, which lives
        // as long as 'p; this Buf is the unique holder, and `&self` forbids
        // mutation through it meanwhile.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// One core's cache in front of one class's shared free ring.
///
/// Owned by one core: `Send` (create at start-up, move to the core) but
/// `!Sync`, and every method takes `&mut self`, so the fast path is plain
/// loads and stores — no atomic read-modify-write. Counters are published
/// to the pool with Relaxed stores. Dropping the cache flushes its parked
/// buffers back to the ring and releases the slot.
///
/// ```compile_fail
/// fn is_sync<T: Sync>() {}
/// is_sync::<mempool::pool::PoolCache<'static>>(); // a cache is never shared
/// ```
pub struct PoolCache<'p> {
    pool: &'p Mempool,
    class: &'p ClassPool,
    slot: &'p CacheSlot,
    /// Parked free indices; `objs[..len]` are valid.
    objs: Box<[u32]>,
    len: usize,
    stats: CacheStats,
    _not_sync: PhantomData<Cell<()>>,
}

impl fmt::Debug for PoolCache<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolCache")
            .field("class", &self.class.info.name)
            .field("len", &self.len)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<'p> PoolCache<'p> {
    /// The class this cache serves.
    #[inline]
    pub fn class(&self) -> ClassInfo {
        self.class.info
    }

    /// The pool.
    #[inline]
    pub fn pool(&self) -> &'p Mempool {
        self.pool
    }

    /// This cache's counters. Owning core.
    #[inline]
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            cached: self.len as u32,
            ..self.stats
        }
    }

    /// Hands out up to `out.len()` buffers into the front of `out` and
    /// returns how many. A short count means the class is exhausted (the
    /// exhaustion counters go up): apply back-pressure. Owning core.
    #[must_use = "the count says how many buffers were handed out"]
    pub fn get_bulk(&mut self, out: &mut [BufRef]) -> usize {
        let want = out.len();
        let region = self.class.info.region;
        let class = self.class.info.class.0;
        let mut got = 0;
        while got < want {
            if self.len == 0 {
                if self.objs.is_empty() {
                    // No cache (cache_size 0): straight from the ring.
                    let mut tmp = [0u32; 32];
                    let k = (want - got).min(tmp.len());
                    let n = self.class.free.dequeue_burst(&mut tmp[..k]);
                    if n == 0 {
                        break;
                    }
                    self.note_taken();
                    for (dst, &index) in out[got..got + n].iter_mut().zip(&tmp[..n]) {
                        self.class.mark_out(index);
                        *dst = BufRef { region, class, index };
                    }
                    got += n;
                    continue;
                }
                if !self.refill(want - got) {
                    break;
                }
            }
            let take = (want - got).min(self.len);
            for (dst, &index) in out[got..got + take]
                .iter_mut()
                .zip(self.objs[self.len - take..self.len].iter().rev())
            {
                self.class.mark_out(index);
                *dst = BufRef { region, class, index };
            }
            self.len -= take;
            got += take;
        }
        self.account_get(got, want);
        got
    }

    /// Hands out one buffer as an owned [`Buf`]; `None` when exhausted.
    /// Owning core.
    #[inline]
    pub fn get(&mut self) -> Option<Buf<'p>> {
        let b = if self.len > 0 {
            // Fast path: pop from the cache.
            self.len -= 1;
            let index = self.objs[self.len];
            self.class.mark_out(index);
            self.account_get(1, 1);
            BufRef {
                region: self.class.info.region,
                class: self.class.info.class.0,
                index,
            }
        } else {
            let mut one = [BufRef {
                region: 0,
                class: 0,
                index: 0,
            }];
            if self.get_bulk(&mut one) == 0 {
                return None;
            }
            one[0]
        };
        // SAFETY: index < count: it came from this class's free ring.
        let ptr = unsafe { self.class.buf_ptr(b.index) };
        Some(Buf {
            pool: self.pool,
            buf: b,
            ptr: NonNull::new(ptr)?,
            len: self.class.info.buf_size,
        })
    }

    /// Returns an owned buffer. Errors as [`PoolCache::put_bulk`] (a `Buf`
    /// of another pool is `Foreign` and stays held). Owning core.
    pub fn put(&mut self, b: Buf<'p>) -> Result<(), BufError> {
        if !core::ptr::eq(b.pool, self.pool) {
            return Err(BufError::Foreign(b.buf));
        }
        let r = b.buf;
        let mut first_err = None;
        if self.accept(r, &mut first_err) {
            if self.objs.is_empty() {
                self.push_direct(&[r.index], &mut first_err);
            } else if self.len < self.objs.len() || self.flush() {
                self.objs[self.len] = r.index;
                self.len += 1;
                self.account_put(1);
            } else {
                first_err.get_or_insert(BufError::RingFull(r));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Returns buffers to the pool. Every valid handle is freed even when
    /// another one is rejected; the first rejection is returned
    /// ([`BufError::Foreign`] for a handle of another class or pool, and in
    /// debug builds [`BufError::DoubleFree`] / [`BufError::Overrun`]).
    /// Owning core.
    ///
    /// # Safety
    /// The caller must hold every buffer in `bufs` (handed out by a get of
    /// this pool and not yet put back), list each once, and drop every
    /// reference to their bytes: after this call another core may hand them
    /// out. Debug builds detect many violations; release builds do not.
    pub unsafe fn put_bulk(&mut self, bufs: &[BufRef]) -> Result<(), BufError> {
        let mut first_err = None;
        if self.objs.is_empty() {
            // No cache: batch the indices and hand them to the ring.
            let mut batch = [0u32; 32];
            let mut k = 0;
            for &b in bufs {
                if self.accept(b, &mut first_err) {
                    batch[k] = b.index;
                    k += 1;
                    if k == batch.len() {
                        self.push_direct(&batch, &mut first_err);
                        k = 0;
                    }
                }
            }
            self.push_direct(&batch[..k], &mut first_err);
        } else {
            let mut freed = 0u64;
            for &b in bufs {
                if !self.accept(b, &mut first_err) {
                    continue;
                }
                if self.len == self.objs.len() && !self.flush() {
                    first_err.get_or_insert(BufError::RingFull(b));
                    continue;
                }
                self.objs[self.len] = b.index;
                self.len += 1;
                freed += 1;
            }
            self.account_put(freed);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Validates a handle being put back and runs the debug canaries.
    /// Returns whether the buffer is to be freed; records the first error.
    #[inline(always)]
    fn accept(&self, b: BufRef, first_err: &mut Option<BufError>) -> bool {
        if !self.class.owns(b) {
            first_err.get_or_insert(BufError::Foreign(b));
            return false;
        }
        match self.class.check_put(b) {
            Ok(()) => true,
            Err(e @ BufError::Overrun(_)) => {
                // Guard restored; still free the buffer.
                first_err.get_or_insert(e);
                true
            }
            Err(e) => {
                first_err.get_or_insert(e);
                false
            }
        }
    }

    /// Cache-less put: enqueues `indices` straight into the ring.
    fn push_direct(&mut self, indices: &[u32], first_err: &mut Option<BufError>) {
        if indices.is_empty() {
            return;
        }
        let n = self.class.free.enqueue_burst(indices);
        if n < indices.len() {
            // Only after an undetected double free (release builds).
            let info = self.class.info;
            first_err.get_or_insert(BufError::RingFull(BufRef {
                region: info.region,
                class: info.class.0,
                index: indices[n],
            }));
        }
        self.stats.flushes += 1;
        self.account_put(n as u64);
    }

    #[inline]
    fn account_put(&mut self, freed: u64) {
        self.stats.puts += freed;
        self.stats.in_use -= freed as i64;
        // Relaxed: published statistics (see CacheSlot).
        self.slot.puts.store(self.stats.puts, Ordering::Relaxed);
        self.slot.cached.store(self.len as u64, Ordering::Relaxed);
    }

    /// Refills an empty, non-zero-sized cache from the ring, aiming at
    /// `need + cache_size / 2` (bounded by the cache size). Returns false
    /// when the ring is empty.
    fn refill(&mut self, need: usize) -> bool {
        let cap = self.objs.len();
        let want = need.saturating_add(cap / 2).min(cap);
        let got = self.class.free.dequeue_burst(&mut self.objs[..want]);
        if got == 0 {
            return false;
        }
        self.len = got;
        self.stats.refills += 1;
        self.note_taken();
        true
    }

    /// Samples "buffers outside the ring" after taking from the ring.
    fn note_taken(&self) {
        let taken = u64::from(self.class.info.count).saturating_sub(self.class.free.len() as u64);
        // Relaxed: statistic; fetch_max is on the refill (slow) path only.
        self.class.taken_high_water.fetch_max(taken, Ordering::Relaxed);
    }

    /// Makes room in a full, non-zero-sized cache: pushes its upper half to
    /// the ring. Returns false if the ring refused everything, which only
    /// happens after an undetected double free.
    fn flush(&mut self) -> bool {
        self.stats.flushes += 1;
        let keep = self.objs.len() / 2;
        let n = self.class.free.enqueue_burst(&self.objs[keep..self.len]);
        // Anything the ring refused stays parked (moved down after `keep`).
        let refused = self.len - keep - n;
        self.objs.copy_within(keep + n..self.len, keep);
        self.len = keep + refused;
        self.len < self.objs.len()
    }

    #[inline]
    fn account_get(&mut self, got: usize, want: usize) {
        self.stats.gets += got as u64;
        self.stats.in_use += got as i64;
        if self.stats.in_use > self.stats.high_water {
            self.stats.high_water = self.stats.in_use;
        }
        if got < want {
            self.stats.exhausted += 1;
            // Relaxed: published statistic.
            self.slot.exhausted.store(self.stats.exhausted, Ordering::Relaxed);
        }
        // Relaxed: published statistics.
        self.slot.gets.store(self.stats.gets, Ordering::Relaxed);
        self.slot.cached.store(self.len as u64, Ordering::Relaxed);
    }
}

impl Drop for PoolCache<'_> {
    fn drop(&mut self) {
        let mut off = 0;
        while off < self.len {
            let n = self.class.free.enqueue_burst(&self.objs[off..self.len]);
            if n == 0 {
                // Only after an undetected double free: the ring is full of
                // duplicates. Drop the rest rather than spin forever.
                debug_assert!(false, "free ring full while flushing a cache");
                break;
            }
            off += n;
        }
        self.len = 0;
        // Relaxed: published statistic, ordered by the Release below.
        self.slot.cached.store(0, Ordering::Relaxed);
        // Release pairs with the Acquire claim in Mempool::cache.
        self.slot.claimed.store(false, Ordering::Release);
    }
}

/// One core's caches for every class of a pool, indexed by class.
#[derive(Debug)]
pub struct CoreCaches<'p> {
    caches: Box<[PoolCache<'p>]>,
}

impl<'p> CoreCaches<'p> {
    /// The cache of `class`, `None` for an unknown class.
    #[inline]
    pub fn class(&mut self, class: ClassId) -> Option<&mut PoolCache<'p>> {
        self.caches.get_mut(class.index())
    }

    /// Returns buffers of any classes, each to its class's cache. Errors as
    /// [`PoolCache::put_bulk`].
    ///
    /// # Safety
    /// As [`PoolCache::put_bulk`].
    pub unsafe fn put_bulk(&mut self, bufs: &[BufRef]) -> Result<(), BufError> {
        let mut first_err = None;
        for &b in bufs {
            let r = match self.caches.get_mut(usize::from(b.class)) {
                // SAFETY: forwarded caller contract.
                Some(c) => unsafe { c.put_bulk(core::slice::from_ref(&b)) },
                None => Err(BufError::Foreign(b)),
            };
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bufref_u64_round_trip() {
        let b = BufRef {
            region: 0xBEEF,
            class: 7,
            index: 0xDEAD_BEEF,
        };
        assert_eq!(BufRef::from_u64(b.to_u64()), Some(b));
        assert_eq!(BufRef::from_u64(1 << 56), None);
    }

    #[test]
    fn stride_rounds_and_includes_guard() {
        assert_eq!(stride_of(1).unwrap() % CACHE_LINE, 0);
        assert!(stride_of(1000).unwrap() >= 1000 + GUARD_BYTES);
        assert_eq!(stride_of(4096).unwrap(), 4096 + GUARD_BYTES);
        assert_eq!(stride_of(usize::MAX), None);
    }

    #[test]
    fn plan_derives_count_from_holders_and_caches() {
        let mut plan = PoolPlan::new(2);
        let recv = plan.add_class("recv", 1024, 16).unwrap();
        plan.reserve("receive", recv, 100).reserve("send", recv, 28);
        assert_eq!(plan.reserved(recv), 128);
        assert_eq!(plan.cache_headroom(recv), 32);
        assert_eq!(plan.count(recv), 160);
        plan.validate().unwrap();
        assert!(plan.to_string().contains("receive"));
    }

    #[test]
    fn plan_rejects_broken_relations() {
        let mut plan = PoolPlan::new(4);
        let c = plan.add_class("c", 4096, 8).unwrap();
        plan.reserve("a", c, 10);
        plan.set_count(c, 9);
        assert!(matches!(plan.validate(), Err(MempoolError::InvalidPlan(m)) if m.contains("worst case")));
        plan.set_count(c, 20); // >= 10 reserved but 4 * 8 caches > 20
        assert!(matches!(plan.validate(), Err(MempoolError::InvalidPlan(m)) if m.contains("caches")));
        plan.set_count(c, 42);
        plan.validate().unwrap();

        let mut empty = PoolPlan::new(1);
        assert!(empty.validate().is_err());
        let z = empty.add_class("z", 0, 0).unwrap();
        empty.reserve("x", z, 1);
        assert!(empty.validate().is_err());

        let mut unknown = PoolPlan::new(1);
        let k = unknown.add_class("k", 64, 0).unwrap();
        unknown.reserve("x", k, 1).reserve("y", ClassId(3), 1);
        assert!(unknown.validate().is_err());

        let mut many = PoolPlan::new(1);
        for _ in 0..MAX_CLASSES {
            many.add_class("m", 64, 0).unwrap();
        }
        assert!(many.add_class("one too many", 64, 0).is_err());
    }
}
