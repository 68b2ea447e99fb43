//! Alignment for direct and passthrough I/O: a zeroed buffer with a chosen
//! alignment (bounce and Identify buffers), and the LBA arithmetic of
//! unaligned requests (the span to read, the edge LBAs a write must merge).

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;

/// A zeroed heap buffer with a chosen alignment (bounce and Identify buffers).
pub(super) struct AlignedBuf {
    pub(super) ptr: NonNull<u8>,
    pub(super) layout: Layout,
}

// SAFETY: the buffer is plain owned memory; moving it between threads is fine.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub(super) fn new(len: usize, align: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), align).expect("bounce layout");
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, layout }
    }
    pub(super) fn capacity(&self) -> usize {
        self.layout.size()
    }
    pub(super) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid and initialised (zeroed) for `layout.size()` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.layout.size())
    }
}

pub(super) fn round_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// The LBA span of an unaligned request and the partial edge LBAs a write
/// must read first. Returns `(span_start, span_end, edges)`; each edge is the
/// device offset of one LBA, relative placement in the span being
/// `edge - span_start`.
pub(super) fn rmw_plan(offset: u64, len: u64, lba: u64) -> (u64, u64, [Option<u64>; 2]) {
    let a0 = offset / lba * lba;
    let end = offset + len;
    let a1 = round_up(end, lba);
    let head = offset % lba != 0;
    let tail = end % lba != 0;
    let mut edges = [None, None];
    if a1 - a0 == lba {
        if head || tail {
            edges[0] = Some(a0);
        }
    } else {
        if head {
            edges[0] = Some(a0);
        }
        if tail {
            edges[1] = Some(a1 - lba);
        }
    }
    (a0, a1, edges)
}
