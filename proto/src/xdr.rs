//! XDR (RFC 4506) primitives: a zero-copy [`Reader`] over `&[u8]` and a [`Writer`]
//! into a caller-supplied `&mut [u8]`.
//!
//! Rules enforced here (RFC 4506 sections 3, 4.9-4.11):
//! - every item is a multiple of four bytes; variable-length opaque data and strings
//!   carry a 4-byte length and are padded with zero bytes to a multiple of four;
//! - every length read from the wire is checked against a caller-supplied bound
//!   *and* against the bytes actually present before it is used, so no decoder ever
//!   slices out of range or allocates from a peer-controlled count.
//!
//! Neither type allocates. Both may be used from any core.

use crate::error::{DecodeError, DecodeErrorKind, EncodeError};

/// XDR pads variable-length items to this alignment (RFC 4506 section 3).
pub const XDR_UNIT: usize = 4;

/// Round `len` up to a multiple of four (RFC 4506 section 4.10).
#[inline]
pub const fn roundup(len: usize) -> usize {
    (len + 3) & !3
}

/// Number of zero bytes XDR appends after `len` bytes of opaque data.
#[inline]
pub const fn pad_len(len: usize) -> usize {
    roundup(len) - len
}

/// A bounds-checked XDR decoder over a borrowed buffer.
///
/// Every accessor checks the remaining length once and returns
/// [`DecodeErrorKind::Truncated`] naming the field; on error the cursor does not
/// move. Offsets in errors are relative to the start of the buffer given to
/// [`Reader::new`] plus the `base` given to [`Reader::with_base`].
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    pub const fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0, base: 0 }
    }

    /// A reader whose reported offsets start at `base` (for decoding a slice taken
    /// from a larger message).
    #[inline]
    pub const fn with_base(buf: &'a [u8], base: usize) -> Self {
        Self { buf, pos: 0, base }
    }

    /// Current position, relative to the start of this reader's buffer.
    #[inline]
    pub const fn pos(&self) -> usize {
        self.pos
    }

    /// Current position as reported in errors (base + pos).
    #[inline]
    pub const fn offset(&self) -> usize {
        self.base + self.pos
    }

    #[inline]
    pub const fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The undecoded rest of the buffer.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The whole underlying buffer.
    #[inline]
    pub const fn buffer(&self) -> &'a [u8] {
        self.buf
    }

    #[inline]
    pub fn error(&self, kind: DecodeErrorKind, field: &'static str) -> DecodeError {
        DecodeError::new(kind, field, self.offset())
    }

    /// Take `n` raw bytes (no padding applied).
    #[inline(always)]
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.error(DecodeErrorKind::Truncated, field));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Skip `n` raw bytes.
    #[inline]
    pub fn skip(&mut self, n: usize, field: &'static str) -> Result<(), DecodeError> {
        self.bytes(n, field).map(|_| ())
    }

    #[inline(always)]
    pub fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let b = self.bytes(4, field)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        self.u32(field).map(|v| v as i32)
    }

    /// Peek at the next word without consuming it.
    #[inline]
    pub fn peek_u32(&self, field: &'static str) -> Result<u32, DecodeError> {
        self.clone().u32(field)
    }

    #[inline(always)]
    pub fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let b = self.bytes(8, field)?;
        Ok(u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    /// XDR boolean: 0 or 1, anything else is a bad discriminant.
    #[inline]
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        let at = self.offset();
        match self.u32(field)? {
            0 => Ok(false),
            1 => Ok(true),
            v => {
                self.pos -= 4;
                Err(DecodeError::new(
                    DecodeErrorKind::BadDiscriminant { value: v },
                    field,
                    at,
                ))
            }
        }
    }

    /// Fixed-length opaque of `len` bytes plus its padding (RFC 4506 section 4.9).
    #[inline]
    pub fn opaque_fixed(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let padded = roundup(len);
        if padded > self.remaining() {
            return Err(self.error(DecodeErrorKind::Truncated, field));
        }
        let out = &self.buf[self.pos..self.pos + len];
        self.pos += padded;
        Ok(out)
    }

    /// Variable-length opaque `opaque<max>` (RFC 4506 section 4.10): the length is
    /// checked against `max` and against the buffer before any byte is touched.
    #[inline]
    pub fn opaque_var(&mut self, max: u32, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let len = self.u32(field)?;
        if len > max {
            self.pos = start;
            return Err(self.error(DecodeErrorKind::TooLong { len, max }, field));
        }
        match self.opaque_fixed(len as usize, field) {
            Ok(b) => Ok(b),
            Err(e) => {
                self.pos = start;
                Err(e)
            }
        }
    }

    /// `string<max>`: like opaque, the bytes are returned undecoded (XDR strings
    /// are ASCII by convention but the wire does not guarantee it).
    #[inline]
    pub fn string(&mut self, max: u32, field: &'static str) -> Result<&'a [u8], DecodeError> {
        self.opaque_var(max, field)
    }

    /// An array count `<max>`: checked against `max` and against the bytes left
    /// assuming each element takes at least `min_elem_len` bytes, so a peer cannot
    /// make a caller loop over a count the buffer cannot hold.
    #[inline]
    pub fn count(&mut self, max: u32, min_elem_len: usize, field: &'static str) -> Result<u32, DecodeError> {
        let start = self.pos;
        let n = self.u32(field)?;
        if n > max {
            self.pos = start;
            return Err(self.error(DecodeErrorKind::TooLong { len: n, max }, field));
        }
        if (n as usize).saturating_mul(min_elem_len) > self.remaining() {
            self.pos = start;
            return Err(self.error(DecodeErrorKind::Truncated, field));
        }
        Ok(n)
    }
}

/// An XDR encoder into a caller-supplied buffer. Never allocates; running out of
/// room is [`EncodeError::BufferTooSmall`].
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    #[inline]
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes written so far.
    #[inline]
    pub const fn len(&self) -> usize {
        self.pos
    }

    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.pos == 0
    }

    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes written so far.
    #[inline]
    pub fn written(&self) -> &[u8] {
        &self.buf[..self.pos]
    }

    /// Consume the writer, returning the written prefix of the buffer.
    #[inline]
    pub fn into_written(self) -> &'a mut [u8] {
        &mut self.buf[..self.pos]
    }

    #[inline(always)]
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], EncodeError> {
        if n > self.remaining() {
            return Err(EncodeError::BufferTooSmall { needed: self.pos + n });
        }
        let s = &mut self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline(always)]
    pub fn put_u32(&mut self, v: u32) -> Result<(), EncodeError> {
        self.reserve(4)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }

    #[inline]
    pub fn put_i32(&mut self, v: i32) -> Result<(), EncodeError> {
        self.put_u32(v as u32)
    }

    #[inline(always)]
    pub fn put_u64(&mut self, v: u64) -> Result<(), EncodeError> {
        self.reserve(8)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }

    #[inline]
    pub fn put_bool(&mut self, v: bool) -> Result<(), EncodeError> {
        self.put_u32(v as u32)
    }

    /// Raw bytes, no length and no padding.
    #[inline]
    pub fn put_bytes(&mut self, b: &[u8]) -> Result<(), EncodeError> {
        self.reserve(b.len())?.copy_from_slice(b);
        Ok(())
    }

    /// Several words at once, with one bounds check. On error nothing is
    /// written (unlike the same words put one by one, which stop at the
    /// first that does not fit).
    #[inline(always)]
    pub fn put_u32s<const N: usize>(&mut self, words: [u32; N]) -> Result<(), EncodeError> {
        let s = self.reserve(4 * N)?;
        for (d, v) in s.chunks_exact_mut(4).zip(words) {
            d.copy_from_slice(&v.to_be_bytes());
        }
        Ok(())
    }

    /// Fixed-length opaque: the bytes then zero padding to a multiple of four.
    #[inline]
    pub fn put_opaque_fixed(&mut self, b: &[u8]) -> Result<(), EncodeError> {
        let padded = roundup(b.len());
        let s = self.reserve(padded)?;
        if padded > b.len() {
            // Zero the last word; the bytes overwrite all of it but the padding.
            s[padded - 4..].copy_from_slice(&[0; 4]);
        }
        if !b.is_empty() {
            s[..b.len()].copy_from_slice(b);
        }
        Ok(())
    }

    /// Variable-length opaque: length word, bytes, zero padding.
    #[inline]
    pub fn put_opaque_var(&mut self, b: &[u8]) -> Result<(), EncodeError> {
        let len = u32::try_from(b.len()).map_err(|_| EncodeError::Unrepresentable { field: "opaque" })?;
        if 4 + roundup(b.len()) > self.remaining() {
            return Err(EncodeError::BufferTooSmall {
                needed: self.pos + 4 + roundup(b.len()),
            });
        }
        self.put_u32(len)?;
        self.put_opaque_fixed(b)
    }

    /// Overwrite a word already written at byte offset `at` (for back-patching
    /// counts and lengths).
    #[inline]
    pub fn patch_u32(&mut self, at: usize, v: u32) -> Result<(), EncodeError> {
        if at + 4 > self.pos {
            return Err(EncodeError::BufferTooSmall { needed: at + 4 });
        }
        self.buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundup_and_pad() {
        assert_eq!(roundup(0), 0);
        assert_eq!(roundup(1), 4);
        assert_eq!(roundup(4), 4);
        assert_eq!(roundup(5), 8);
        assert_eq!(pad_len(5), 3);
        assert_eq!(pad_len(8), 0);
    }

    #[test]
    fn reader_words_and_truncation() {
        let buf = [0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 2, 0xff];
        let mut r = Reader::new(&buf);
        assert_eq!(r.u32("a").unwrap(), 7);
        assert_eq!(r.u64("b").unwrap(), (1u64 << 32) | 2);
        let e = r.u32("c").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::Truncated);
        assert_eq!(e.field, "c");
        assert_eq!(e.offset, 12);
        assert_eq!(r.pos(), 12, "a failed read must not move the cursor");
    }

    #[test]
    fn opaque_var_bounds() {
        // length 5, "hello", 3 pad bytes
        let buf = [0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o', 0, 0, 0];
        assert_eq!(Reader::new(&buf).opaque_var(5, "o").unwrap(), b"hello");
        let e = Reader::new(&buf).opaque_var(4, "o").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 5, max: 4 });
        // padding missing
        let e = Reader::new(&buf[..10]).opaque_var(16, "o").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::Truncated);
        // a huge length never allocates or slices out of range
        let huge = [0xff, 0xff, 0xff, 0xff];
        let e = Reader::new(&huge).opaque_var(u32::MAX, "o").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::Truncated);
    }

    #[test]
    fn bool_and_count() {
        let e = Reader::new(&[0, 0, 0, 2]).bool("b").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::BadDiscriminant { value: 2 });
        let mut buf = [0u8; 12];
        buf[3] = 3; // count 3 but only 8 bytes follow
        let e = Reader::new(&buf).count(10, 4, "n").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::Truncated);
        buf[3] = 2;
        assert_eq!(Reader::new(&buf).count(10, 4, "n").unwrap(), 2);
        let e = Reader::new(&buf).count(1, 4, "n").unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 2, max: 1 });
    }

    #[test]
    fn put_u32s_writes_all_or_nothing() {
        let mut buf = [0xaau8; 12];
        let mut w = Writer::new(&mut buf);
        w.put_u32s([1, 2]).unwrap();
        assert_eq!(
            w.put_u32s([3, 4]),
            Err(EncodeError::BufferTooSmall { needed: 16 }),
            "two words do not fit in the four bytes left"
        );
        assert_eq!(w.len(), 8);
        w.put_u32s([0x0102_0304]).unwrap();
        assert_eq!(buf, [0, 0, 0, 1, 0, 0, 0, 2, 1, 2, 3, 4]);
    }

    #[test]
    fn opaque_fixed_pads_with_zeros_whatever_the_buffer_held() {
        for len in 0..9usize {
            let data: Vec<u8> = (1..=len as u8).collect();
            let mut buf = [0xaau8; 16];
            let mut w = Writer::new(&mut buf);
            w.put_opaque_fixed(&data).unwrap();
            assert_eq!(w.len(), roundup(len));
            assert_eq!(&buf[..len], &data[..]);
            assert!(buf[len..roundup(len)].iter().all(|&b| b == 0), "padding of {len}");
            assert!(buf[roundup(len)..].iter().all(|&b| b == 0xaa), "nothing past {len}");
        }
    }

    #[test]
    fn writer_roundtrip_and_overflow() {
        let mut buf = [0xaau8; 16];
        let mut w = Writer::new(&mut buf);
        w.put_u32(1).unwrap();
        w.put_opaque_var(b"abcde").unwrap();
        assert_eq!(w.len(), 16);
        assert_eq!(w.put_u32(9), Err(EncodeError::BufferTooSmall { needed: 20 }));
        let mut r = Reader::new(&buf);
        assert_eq!(r.u32("x").unwrap(), 1);
        assert_eq!(r.opaque_var(8, "o").unwrap(), b"abcde");
        assert_eq!(&buf[13..16], &[0, 0, 0], "padding is zero");
    }
}
