//! The data pattern of `--verify`: byte `p` of the file is byte `p % 8`
//! (little-endian) of `mix(p / 8, salt)`, so any block's content follows from
//! its file offset and the salt alone, whichever connection wrote it last.
//! Pure; any thread.

#[inline]
fn mix(word: u64, salt: u64) -> u64 {
    // splitmix64 finaliser of the word index and the salt.
    let mut z = word
        .wrapping_add(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x632b_e59b_d9b4_e019);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[inline]
fn byte_at(pos: u64, salt: u64) -> u8 {
    mix(pos / 8, salt).to_le_bytes()[(pos % 8) as usize]
}

/// Fill `buf` with the pattern of the file bytes starting at `offset`.
pub fn fill(buf: &mut [u8], offset: u64, salt: u64) {
    let mut pos = offset;
    let mut i = 0;
    // Unaligned head.
    while i < buf.len() && !pos.is_multiple_of(8) {
        buf[i] = byte_at(pos, salt);
        i += 1;
        pos += 1;
    }
    let mut chunks = buf[i..].chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&mix(pos / 8, salt).to_le_bytes());
        pos += 8;
    }
    for b in chunks.into_remainder() {
        *b = byte_at(pos, salt);
        pos += 1;
    }
}

/// Check `buf` against the pattern at `offset`: `None` when it matches,
/// otherwise the file offset of the first wrong byte.
pub fn check(buf: &[u8], offset: u64, salt: u64) -> Option<u64> {
    let mut pos = offset;
    let mut i = 0;
    while i < buf.len() && !pos.is_multiple_of(8) {
        if buf[i] != byte_at(pos, salt) {
            return Some(pos);
        }
        i += 1;
        pos += 1;
    }
    let mut chunks = buf[i..].chunks_exact(8);
    for c in &mut chunks {
        let want = mix(pos / 8, salt).to_le_bytes();
        if c != want {
            let k = c.iter().zip(want).position(|(a, b)| *a != b).unwrap_or(0);
            return Some(pos + k as u64);
        }
        pos += 8;
    }
    for &b in chunks.remainder() {
        if b != byte_at(pos, salt) {
            return Some(pos);
        }
        pos += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check() {
        for (off, len) in [(0u64, 4096usize), (4096, 100), (3, 29), (8191, 1), (1 << 40, 64)] {
            let mut b = vec![0u8; len];
            fill(&mut b, off, 5);
            assert_eq!(check(&b, off, 5), None, "{off} {len}");
            // Another salt or offset does not match.
            assert!(check(&b, off, 6).is_some());
            if len >= 16 {
                assert!(check(&b, off + 8, 5).is_some());
            }
            let k = len / 2;
            b[k] ^= 1;
            assert_eq!(check(&b, off, 5), Some(off + k as u64));
        }
    }

    #[test]
    fn pieces_agree_with_the_whole() {
        let mut whole = vec![0u8; 100];
        fill(&mut whole, 10, 1);
        let mut part = vec![0u8; 37];
        fill(&mut part, 10 + 21, 1);
        assert_eq!(&whole[21..58], &part[..]);
        assert_eq!(check(&whole[40..], 50, 1), None);
        assert!(whole.iter().any(|&b| b != whole[0]), "pattern is not constant");
    }
}
