//! Type-erased closure messages carried by the per-core rings.
//!
//! [`mempool::ring::Ring`] moves `Copy` items, so a message is a plain
//! 32-byte record: one function pointer plus three words of payload. A
//! closure of at most three words (and pointer alignment) is stored *inline*
//! in the payload — sending it does not allocate. A larger closure is moved
//! into a `Box` and the payload holds the box pointer (one allocation per
//! message, freed on the receiving core). Ownership of the closure travels
//! with the bits: exactly one copy of a `Message` is ever run or discarded;
//! every other copy (the one the ring made, a failed enqueue's original) is
//! forgotten.

use core::mem::{align_of, size_of, MaybeUninit};
use core::ptr;

/// Payload words available for an inline closure.
pub const INLINE_WORDS: usize = 3;

/// Bytes a closure may capture and still be sent without allocation.
pub const INLINE_BYTES: usize = INLINE_WORDS * size_of::<usize>();

type Payload = [MaybeUninit<usize>; INLINE_WORDS];

/// Runs (`Some(ctx)`) or drops (`None`) the closure stored in the payload.
type Invoke<C> = unsafe fn(*mut Payload, Option<&mut C>);

/// One queued closure, called with a `&mut C` (the crate's `CoreCtx`).
/// `Copy` so it can live in a [`mempool::ring::Ring`]; see the module docs
/// for the ownership rule.
pub(crate) struct Message<C> {
    invoke: Invoke<C>,
    payload: Payload,
}

impl<C> Clone for Message<C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for Message<C> {}

const _: () = assert!(size_of::<Message<()>>() == 4 * size_of::<usize>());
const _: () = assert!(align_of::<Payload>() == align_of::<usize>());

/// Whether a closure of type `F` is stored inline (no allocation).
pub const fn fits_inline<F>() -> bool {
    size_of::<F>() <= INLINE_BYTES && align_of::<F>() <= align_of::<usize>()
}

unsafe fn invoke_inline<C, F: FnOnce(&mut C)>(payload: *mut Payload, ctx: Option<&mut C>) {
    // SAFETY: the caller guarantees `payload` holds an initialised `F` written
    // by `Message::new` (size and alignment checked by `fits_inline`) that no
    // other copy has run or dropped; reading it moves ownership out.
    let f = unsafe { ptr::read(payload.cast::<F>()) };
    if let Some(ctx) = ctx {
        f(ctx);
    }
}

unsafe fn invoke_boxed<C, F: FnOnce(&mut C)>(payload: *mut Payload, ctx: Option<&mut C>) {
    // SAFETY: the caller guarantees the payload's first word is the pointer
    // written by `Message::new` from `Box::into_raw`, owned by this copy.
    let f = unsafe { Box::from_raw(ptr::read(payload.cast::<*mut F>())) };
    if let Some(ctx) = ctx {
        f(ctx);
    }
}

unsafe fn invoke_nothing<C>(_payload: *mut Payload, _ctx: Option<&mut C>) {}

impl<C> Message<C> {
    /// A message that does nothing (fills dequeue buffers).
    pub(crate) const EMPTY: Message<C> = Message {
        invoke: invoke_nothing::<C>,
        payload: [MaybeUninit::uninit(); INLINE_WORDS],
    };

    /// Wraps a closure; allocates only if it does not fit inline.
    pub(crate) fn new<F>(f: F) -> Message<C>
    where
        F: FnOnce(&mut C) + Send + 'static,
    {
        let mut payload: Payload = [MaybeUninit::uninit(); INLINE_WORDS];
        if fits_inline::<F>() {
            // SAFETY: `fits_inline` checked that `F` fits in the payload and
            // needs no more than its alignment.
            unsafe { ptr::write(payload.as_mut_ptr().cast::<F>(), f) };
            Message {
                invoke: invoke_inline::<C, F>,
                payload,
            }
        } else {
            let raw: *mut F = Box::into_raw(Box::new(f));
            // SAFETY: a pointer is one word, pointer-aligned.
            unsafe { ptr::write(payload.as_mut_ptr().cast::<*mut F>(), raw) };
            Message {
                invoke: invoke_boxed::<C, F>,
                payload,
            }
        }
    }

    /// Runs the closure on `ctx`'s core, consuming it.
    ///
    /// # Safety
    /// `self` must be the single live copy of a message built by
    /// [`Message::new`] (or [`Message::EMPTY`]); no other copy may be run,
    /// discarded or taken afterwards.
    pub(crate) unsafe fn run(mut self, ctx: &mut C) {
        // SAFETY: forwarded from this function's contract.
        unsafe { (self.invoke)(&mut self.payload, Some(ctx)) }
    }

    /// Drops the closure without running it.
    ///
    /// # Safety
    /// Same contract as [`Message::run`].
    pub(crate) unsafe fn discard(mut self) {
        // SAFETY: forwarded from this function's contract.
        unsafe { (self.invoke)(&mut self.payload, None) }
    }

    /// Gives the closure back (after a failed enqueue).
    ///
    /// # Safety
    /// Same contract as [`Message::run`], and `self` must have been built by
    /// `Message::new::<F>` with this very `F`.
    pub(crate) unsafe fn take<F>(self) -> F
    where
        F: FnOnce(&mut C) + Send + 'static,
    {
        if fits_inline::<F>() {
            // SAFETY: built inline by `Message::new::<F>` (caller's contract).
            unsafe { ptr::read(self.payload.as_ptr().cast::<F>()) }
        } else {
            // SAFETY: built boxed by `Message::new::<F>` (caller's contract).
            let b = unsafe { Box::from_raw(ptr::read(self.payload.as_ptr().cast::<*mut F>())) };
            *b
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of_val;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Stands in for the crate's `CoreCtx`: these tests never run a message.
    struct CoreCtx;

    struct DropCount(Arc<AtomicUsize>);
    impl Drop for DropCount {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn inline_threshold() {
        let a = 1u64;
        let b = 2u64;
        let c = 3u64;
        let small = move |_: &mut CoreCtx| {
            std::hint::black_box((a, b, c));
        };
        assert_eq!(size_of_val(&small), 24);
        assert!(fits_inline_val(&small));
        let d = [0u64; 4];
        let big = move |_: &mut CoreCtx| {
            std::hint::black_box(d);
        };
        assert_eq!(size_of_val(&big), 32);
        assert!(!fits_inline_val(&big));
        let aligned = std::hint::black_box(0u128);
        let over_aligned = move |_: &mut CoreCtx| {
            std::hint::black_box(aligned);
        };
        assert_eq!(
            fits_inline_val(&over_aligned),
            align_of::<u128>() <= align_of::<usize>()
        );
    }

    fn fits_inline_val<F>(_: &F) -> bool {
        fits_inline::<F>()
    }

    #[test]
    fn discard_and_take_drop_exactly_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        // Inline: one Arc-holding struct (one word).
        let g = DropCount(drops.clone());
        let m = Message::<CoreCtx>::new(move |_: &mut CoreCtx| {
            std::hint::black_box(&g);
        });
        let copy = m; // the ring makes copies like this one
                      // SAFETY: `copy` is the only copy used from now on.
        unsafe { copy.discard() };
        assert_eq!(drops.load(Ordering::SeqCst), 1);

        // Boxed: a large capture.
        let g = DropCount(drops.clone());
        let pad = [7u64; 8];
        let m = Message::<CoreCtx>::new(move |_: &mut CoreCtx| {
            std::hint::black_box((&g, pad));
        });
        // SAFETY: single live copy, discarded once.
        unsafe { m.discard() };
        assert_eq!(drops.load(Ordering::SeqCst), 2);

        // take() hands the closure back; dropping it drops the capture.
        let g = DropCount(drops.clone());
        let pad = [7u64; 8];
        let f = move |_: &mut CoreCtx| {
            std::hint::black_box((&g, pad));
        };
        let back = roundtrip(f);
        drop(back);
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    }

    fn roundtrip<F: FnOnce(&mut CoreCtx) + Send + 'static>(f: F) -> F {
        let m = Message::<CoreCtx>::new(f);
        // SAFETY: built from exactly this closure type; single live copy.
        unsafe { m.take::<F>() }
    }
}
