//! What a kernel client's NFSv4.1 READ COMPOUND (SEQUENCE, PUTFH, READ)
//! costs the core beside an NFSv3 READ of the same file (issue 22, the
//! qd-1 fio READ row): heap allocations inside the service, counted by a
//! global allocator that counts only while the service runs on this
//! thread.
//!
//! - `nfs4_read_compound_allocates_no_more_than_a_v3_read`: 200 READs of
//!   4 KiB of a file the core has open, each version, on `mem`; the
//!   COMPOUND allocates nothing per Call (the issue's "no allocation per
//!   Call"), as NFSv3's READ.

mod nfs4_common;
mod nfs_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use dataplane::service::{CallView, ReplyBuilder, Service};
use dataplane::ConnId;
use nfs4_common::*;
use nfs_common::*;
use proto::nfs4::*;
use proto::plan::Piece;
use proto::xdr::Reader;
use rpcrdma_apps::nfs::{NfsService, NfsShared};

/// The system allocator, counting the allocations made on a thread while
/// its `COUNTING` flag is set.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn counted() {
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` unchanged; the count is a
// side effect that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        counted();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        counted();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        counted();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// [`Direct`] with the service's part of each round trip (the data hint
/// and the Call) counted.
struct Counted {
    svc: NfsService,
    head: Vec<u8>,
    data: Vec<u8>,
    /// Allocations inside the service over the last round trip.
    last: u64,
}

impl Counted {
    fn new(sh: &std::sync::Arc<NfsShared>) -> Counted {
        Counted {
            svc: NfsService::new(sh.clone(), 0).unwrap(),
            head: vec![0; 8192],
            data: vec![0; MIB],
            last: 0,
        }
    }
}

impl Transport for Counted {
    fn roundtrip(&mut self, call: &[u8]) -> Option<Vec<u8>> {
        let piece = [Piece::Inline {
            start: 0,
            len: call.len() as u32,
        }];
        let xid = Reader::new(call).u32("xid").unwrap_or(0);
        let view = CallView::contiguous(ConnId(0), Some("127.0.0.1".parse().unwrap()), 1, xid, call, &piece);
        let a0 = ALLOCS.load(Ordering::Relaxed);
        COUNTING.with(|c| c.set(true));
        let hint = self.svc.reply_data_hint(&view);
        let mut rb = ReplyBuilder::new(&mut self.head, (hint > 0).then_some(&mut self.data[..]));
        let res = self.svc.handle_call(&view, &mut rb);
        COUNTING.with(|c| c.set(false));
        self.last = ALLOCS.load(Ordering::Relaxed) - a0;
        let shape = rb.finish();
        res.ok()?;
        let mut out = self.head[..shape.head_len as usize].to_vec();
        if shape.has_data {
            out.extend_from_slice(&self.data[..shape.data_len as usize]);
            out.resize(out.len() + shape.pad() as usize, 0);
        }
        Some(out)
    }
}

impl V4Transport for Counted {
    fn rt(&mut self, call: &[u8], _read_max: Option<u32>) -> Option<Vec<u8>> {
        self.roundtrip(call)
    }
}

#[test]
fn nfs4_read_compound_allocates_no_more_than_a_v3_read() {
    const READS: u64 = 200;
    let s = store(Kind::Mem, "b0");
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let cfg = config(&["b0"], &[ex], MIB as u32);
    let sh = NfsShared::new(&cfg, vec![("b0".into(), s.backend.clone())]).unwrap();
    let mut c = V4::new(Counted::new(&sh), "fio");
    c.setup(8);
    let dir = c.walk("/export").unwrap();
    let (sid, fh) = c
        .open(&dir, open("fio.dat", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
        .unwrap();
    // The count sees the service's allocations: OPEN keeps the open
    // owner's bytes (the one operation documented to allocate).
    assert!(c.t.last > 0, "OPEN allocated nothing: the count is not counting");
    let data = pattern(7, 64 * 1024);
    c.write(&fh, &sid, 0, FILE_SYNC4, &data).unwrap();
    // Warm: the core's channel opens the file, the slot's buffers exist.
    assert_eq!(c.read(&fh, &sid, 0, 4096).unwrap().1, data[..4096]);

    let mut v3 = Client::new(Counted::new(&sh));
    v3.auth = Auth::root();
    let root = v3.mnt("/export").unwrap().0;
    let v3fh = v3.lookup(&root, b"fio.dat").unwrap().0;
    assert_eq!(v3.read(&v3fh, 0, 4096).unwrap().0, data[..4096]);

    let (mut a3, mut a4) = (0, 0);
    for i in 0..READS {
        let off = (i % 16) * 4096;
        let want = &data[off as usize..off as usize + 4096];
        assert_eq!(v3.read(&v3fh, off, 4096).unwrap().0, want, "v3 READ {i}");
        a3 += v3.t.last;
        assert_eq!(c.read(&fh, &sid, off, 4096).unwrap().1, want, "v4.1 READ {i}");
        a4 += c.t.last;
    }
    assert_eq!(
        (a4, a3),
        (0, 0),
        "heap allocations in the service over {READS} READs of 4 KiB (NFSv4.1 COMPOUND, NFSv3)"
    );
}
