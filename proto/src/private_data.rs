//! RDMA-CM Private Data for RPC-over-RDMA (RFC 8797).
//!
//! When an RDMA connection is set up through a Connection Manager, both peers may put
//! an 8-byte message in the CM Private Data field advertising their inline sizes and
//! whether they accept remote invalidation (RFC 8797 section 4):
//!
//! ```text
//!  byte 0..4   Format Identifier 0xf6ab0e18 (network byte order)
//!  byte 4      Version (1)
//!  byte 5      7 reserved bits (most significant) | R (least significant bit)
//!  byte 6      Send Size    = send bytes / 1024 - 1
//!  byte 7      Receive Size = receive bytes / 1024 - 1
//! ```
//!
//! The figure in section 4 numbers bits from the most significant end of each
//! 32-bit word, so R, bit 15 of the second word, is the lowest bit of byte 5
//! (section 5.1 calls it "bit 15 of the Flags field").
//!
//! Exchanging Private Data is optional. A peer that sends nothing recognisable is
//! treated as having sent the defaults (section 5.1), so [`decode`] never fails: it
//! reports whether a message was found and otherwise hands back
//! [`PrivateData::default`].
//!
//! Everything here is pure and may be called from any core.

use crate::error::EncodeError;

/// The RPC-over-RDMA version 1 CM Private Data Format Identifier (RFC 8797
/// section 4, IANA registry of section 8).
pub const FORMAT_IDENTIFIER: u32 = 0xf6ab_0e18;

/// The only message format version defined (RFC 8797 section 4): exactly eight
/// octets with the layout above.
pub const FORMAT_VERSION: u8 = 1;

/// Length of a version 1 Private Data message in bytes.
pub const ENCODED_LEN_BYTES: usize = 8;

/// Inline sizes are advertised in units of this many bytes (RFC 8797 section 4.2).
pub const SIZE_UNIT_BYTES: u32 = 1024;

/// Smallest representable inline size: the RPC-over-RDMA version 1 minimum inline
/// threshold (RFC 8797 section 4.2, RFC 8166 section 3.3.3). Encoded as 0.
pub const MIN_SIZE_BYTES: u32 = 1024;

/// Largest representable inline size (RFC 8797 section 4.2). Encoded as 255.
pub const MAX_SIZE_BYTES: u32 = 262_144;

/// Mask of the R (remote invalidation) bit within byte 5 (RFC 8797 section 4).
const R_BIT: u8 = 0x01;

/// Byte offsets of the fields inside the 8-byte message.
const VERSION_AT: usize = 4;
const FLAGS_AT: usize = 5;
const SEND_SIZE_AT: usize = 6;
const RECEIVE_SIZE_AT: usize = 7;

const _: () = assert!(MIN_SIZE_BYTES == SIZE_UNIT_BYTES);
const _: () = assert!(MAX_SIZE_BYTES == (u8::MAX as u32 + 1) * SIZE_UNIT_BYTES);
const _: () = assert!(RECEIVE_SIZE_AT + 1 == ENCODED_LEN_BYTES);

/// The content of an RFC 8797 Private Data message, with sizes in bytes.
///
/// Values built by hand may hold sizes the wire cannot carry; [`PrivateData::encode`]
/// normalises them (see [`encode_size`]) and [`PrivateData::normalized`] shows what
/// the peer will see.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrivateData {
    /// Message format version; only [`FORMAT_VERSION`] is defined.
    pub version: u8,
    /// R: the sender supports remote invalidation (RFC 8797 sections 3.2, 4.1).
    pub remote_invalidation: bool,
    /// Largest message this peer will transmit in one RDMA Send.
    pub send_size_bytes: u32,
    /// Largest message this peer can accept in one RDMA Receive.
    pub receive_size_bytes: u32,
}

impl Default for PrivateData {
    /// What a peer must assume when no Private Data was received (RFC 8797 section
    /// 5.1): R clear and both Size fields zero, i.e. 1024 bytes each way.
    fn default() -> Self {
        Self {
            version: FORMAT_VERSION,
            remote_invalidation: false,
            send_size_bytes: MIN_SIZE_BYTES,
            receive_size_bytes: MIN_SIZE_BYTES,
        }
    }
}

/// Encode an inline size for the Send Size / Receive Size fields (RFC 8797 section
/// 4.2: `bytes / 1024 - 1`).
///
/// Sizes that are not a multiple of 1024 are rounded **down**, and sizes above
/// [`MAX_SIZE_BYTES`] are clamped to it: advertising less than one really has is
/// always safe, since the peer then sends or expects smaller messages. Sizes below
/// [`MIN_SIZE_BYTES`] are raised to 1024, the floor every RPC-over-RDMA endpoint
/// must support anyway (RFC 8166 section 3.3.3); an endpoint with smaller buffers
/// cannot interoperate at all, so callers should not configure one.
pub const fn encode_size(bytes: u32) -> u8 {
    let clamped = if bytes < MIN_SIZE_BYTES {
        MIN_SIZE_BYTES
    } else if bytes > MAX_SIZE_BYTES {
        MAX_SIZE_BYTES
    } else {
        bytes
    };
    // clamped / 1024 is in 1..=256, so the result is in 0..=255.
    (clamped / SIZE_UNIT_BYTES - 1) as u8
}

/// Decode a Send Size / Receive Size field into bytes (RFC 8797 section 4.2:
/// `(value + 1) * 1024`). The result is in `1024..=262144`.
pub const fn decode_size(encoded: u8) -> u32 {
    (encoded as u32 + 1) * SIZE_UNIT_BYTES
}

impl PrivateData {
    /// Private Data advertising the given capabilities, with sizes normalised as
    /// [`encode_size`] describes.
    pub const fn new(remote_invalidation: bool, send_size_bytes: u32, receive_size_bytes: u32) -> Self {
        Self {
            version: FORMAT_VERSION,
            remote_invalidation,
            send_size_bytes: decode_size(encode_size(send_size_bytes)),
            receive_size_bytes: decode_size(encode_size(receive_size_bytes)),
        }
    }

    /// The value the peer decodes after [`PrivateData::encode`]: sizes rounded
    /// down to a multiple of 1024 and clamped into `1024..=262144`.
    pub const fn normalized(&self) -> Self {
        Self {
            version: self.version,
            remote_invalidation: self.remote_invalidation,
            send_size_bytes: decode_size(encode_size(self.send_size_bytes)),
            receive_size_bytes: decode_size(encode_size(self.receive_size_bytes)),
        }
    }

    /// Write the 8-byte message at the start of `out` and return its length.
    ///
    /// Reserved bits are written as zero (RFC 8797 section 4). Sizes are normalised
    /// by [`encode_size`] (rounded down, clamped), never rejected.
    ///
    /// # Errors
    /// [`EncodeError::BufferTooSmall`] if `out` is shorter than 8 bytes;
    /// [`EncodeError::Unrepresentable`] (field `"version"`) if `version` is not
    /// [`FORMAT_VERSION`], the only layout this encoder knows.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        if self.version != FORMAT_VERSION {
            return Err(EncodeError::Unrepresentable { field: "version" });
        }
        let Some(dst) = out.get_mut(..ENCODED_LEN_BYTES) else {
            return Err(EncodeError::BufferTooSmall {
                needed: ENCODED_LEN_BYTES,
            });
        };
        dst[..VERSION_AT].copy_from_slice(&FORMAT_IDENTIFIER.to_be_bytes());
        dst[VERSION_AT] = self.version;
        dst[FLAGS_AT] = if self.remote_invalidation { R_BIT } else { 0 };
        dst[SEND_SIZE_AT] = encode_size(self.send_size_bytes);
        dst[RECEIVE_SIZE_AT] = encode_size(self.receive_size_bytes);
        Ok(ENCODED_LEN_BYTES)
    }

    /// The 8-byte message as an array (same rules as [`PrivateData::encode`]).
    pub fn to_bytes(&self) -> Result<[u8; ENCODED_LEN_BYTES], EncodeError> {
        let mut out = [0u8; ENCODED_LEN_BYTES];
        self.encode(&mut out)?;
        Ok(out)
    }
}

/// The result of searching received CM Private Data (see [`decode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParsedPrivateData {
    offset: Option<usize>,
    data: PrivateData,
}

impl ParsedPrivateData {
    /// No (recognisable) Private Data: the section 5.1 defaults apply.
    pub const ABSENT: Self = Self {
        offset: None,
        data: PrivateData {
            version: FORMAT_VERSION,
            remote_invalidation: false,
            send_size_bytes: MIN_SIZE_BYTES,
            receive_size_bytes: MIN_SIZE_BYTES,
        },
    };

    /// Whether a valid RFC 8797 message was found.
    pub const fn present(&self) -> bool {
        self.offset.is_some()
    }

    /// Byte offset of the Format Identifier in the searched buffer, if found.
    pub const fn offset(&self) -> Option<usize> {
        self.offset
    }

    /// The peer's advertised values, or the defaults when none were found.
    pub const fn data(&self) -> PrivateData {
        self.data
    }
}

/// Search received CM Private Data for an RFC 8797 message (section 5.2).
///
/// The Format Identifier may start at any byte offset (no alignment). The first
/// occurrence whose Version byte is [`FORMAT_VERSION`] and whose eight bytes lie
/// entirely within `buf` is taken; an occurrence with another version or cut short
/// by the end of the buffer is skipped and the search continues after it. When
/// nothing qualifies the result is [`ParsedPrivateData::ABSENT`], whose data are
/// the section 5.1 defaults: absent or unknown Private Data is never an error.
/// Reserved bits are ignored (section 4).
///
/// Runs in `O(buf.len())`, does not allocate and cannot panic.
pub fn decode(buf: &[u8]) -> ParsedPrivateData {
    let id = FORMAT_IDENTIFIER.to_be_bytes();
    for (offset, window) in buf.windows(id.len()).enumerate() {
        if window != id {
            continue;
        }
        // A match that does not fit, or has an unknown version, is skipped.
        let Some(msg) = buf.get(offset..offset + ENCODED_LEN_BYTES) else {
            continue;
        };
        if msg[VERSION_AT] != FORMAT_VERSION {
            continue;
        }
        return ParsedPrivateData {
            offset: Some(offset),
            data: PrivateData {
                version: msg[VERSION_AT],
                remote_invalidation: msg[FLAGS_AT] & R_BIT != 0,
                send_size_bytes: decode_size(msg[SEND_SIZE_AT]),
                receive_size_bytes: decode_size(msg[RECEIVE_SIZE_AT]),
            },
        };
    }
    ParsedPrivateData::ABSENT
}

/// The client-to-server inline threshold (RFC 8797 section 4.2): the smaller of
/// the client's send size and the server's advertised receive size.
pub const fn client_to_server_threshold_bytes(client: &PrivateData, server: &PrivateData) -> u32 {
    min_u32(client.send_size_bytes, server.receive_size_bytes)
}

/// The server-to-client inline threshold (RFC 8797 section 4.2): the smaller of
/// the server's send size and the client's advertised receive size.
pub const fn server_to_client_threshold_bytes(server: &PrivateData, client: &PrivateData) -> u32 {
    min_u32(server.send_size_bytes, client.receive_size_bytes)
}

/// Whether the responder may use RDMA Send with Invalidate for Replies (RFC 8797
/// section 4.1): only when both peers set R. Pass the peer's value from
/// [`decode`], which is R-clear when the peer sent nothing.
pub const fn remote_invalidation_allowed(local: &PrivateData, peer: &PrivateData) -> bool {
    local.remote_invalidation && peer.remote_invalidation
}

const fn min_u32(a: u32, b: u32) -> u32 {
    if a < b {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ID: [u8; 4] = [0xf6, 0xab, 0x0e, 0x18];

    #[test]
    fn identifier_bytes_are_network_order() {
        assert_eq!(FORMAT_IDENTIFIER.to_be_bytes(), ID);
    }

    #[test]
    fn encode_r_set_4096_4096() {
        // Section 4 figure: version 1 in byte 4; R is bit 15 of the second word,
        // i.e. the least significant bit of byte 5; 4096 / 1024 - 1 = 3.
        let pd = PrivateData::new(true, 4096, 4096);
        let mut out = [0xaa; 10];
        assert_eq!(pd.encode(&mut out), Ok(8));
        assert_eq!(out[..8], [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03]);
        // Bytes past the message are untouched.
        assert_eq!(out[8..], [0xaa, 0xaa]);
    }

    #[test]
    fn encode_defaults_and_extremes() {
        assert_eq!(
            PrivateData::default().to_bytes().unwrap(),
            [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0x00]
        );
        // R clear, send 262144 (255), receive 8192 (7).
        assert_eq!(
            PrivateData::new(false, 262_144, 8192).to_bytes().unwrap(),
            [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0xff, 0x07]
        );
    }

    #[test]
    fn sizes_round_down_and_clamp() {
        assert_eq!(encode_size(1024), 0);
        assert_eq!(encode_size(2047), 0);
        assert_eq!(encode_size(2048), 1);
        assert_eq!(encode_size(5000), 3); // 4096
        assert_eq!(encode_size(262_144), 255);
        assert_eq!(encode_size(262_145), 255);
        assert_eq!(encode_size(u32::MAX), 255);
        assert_eq!(encode_size(0), 0);
        assert_eq!(encode_size(1023), 0);
        let pd = PrivateData::new(false, 5000, 1_000_000);
        assert_eq!(pd.send_size_bytes, 4096);
        assert_eq!(pd.receive_size_bytes, 262_144);
    }

    #[test]
    fn encode_errors() {
        let mut short = [0u8; 7];
        assert_eq!(
            PrivateData::default().encode(&mut short),
            Err(EncodeError::BufferTooSmall { needed: 8 })
        );
        let bad = PrivateData {
            version: 2,
            ..PrivateData::default()
        };
        assert_eq!(
            bad.encode(&mut [0u8; 8]),
            Err(EncodeError::Unrepresentable { field: "version" })
        );
    }

    #[test]
    fn decode_hand_written_vector() {
        let p = decode(&[0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x1f]);
        assert!(p.present());
        assert_eq!(p.offset(), Some(0));
        assert_eq!(
            p.data(),
            PrivateData {
                version: 1,
                remote_invalidation: true,
                send_size_bytes: 4096,
                receive_size_bytes: 32 * 1024,
            }
        );
    }

    #[test]
    fn decode_ignores_reserved_bits() {
        // Reserved bits all set, R clear.
        let p = decode(&[0xf6, 0xab, 0x0e, 0x18, 0x01, 0xfe, 0x00, 0x01]);
        assert!(p.present());
        assert!(!p.data().remote_invalidation);
        assert_eq!(p.data().receive_size_bytes, 2048);
        // Reserved bits all set, R set.
        let p = decode(&[0xf6, 0xab, 0x0e, 0x18, 0x01, 0xff, 0x00, 0x01]);
        assert!(p.data().remote_invalidation);
    }

    #[test]
    fn decode_at_odd_offsets_after_garbage() {
        for lead in [1usize, 3, 5, 7, 13] {
            let mut buf = [0u8; 32];
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(37).wrapping_add(5);
            }
            buf[lead..lead + 8].copy_from_slice(&[0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x07, 0x0f]);
            let p = decode(&buf);
            assert_eq!(p.offset(), Some(lead), "lead {lead}");
            assert_eq!(p.data(), PrivateData::new(true, 8192, 16_384));
        }
    }

    #[test]
    fn decode_partial_identifier_prefix_then_real_one() {
        // f6 ab 0e (not 18) then the real identifier right after.
        let buf = [0xf6, 0xab, 0x0e, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x01, 0x02];
        let p = decode(&buf);
        assert_eq!(p.offset(), Some(3));
        assert_eq!(p.data().send_size_bytes, 2048);
        assert_eq!(p.data().receive_size_bytes, 3072);
    }

    #[test]
    fn decode_absent_gives_defaults() {
        for buf in [
            &[][..],
            &[0u8; 3][..],
            &[0u8; 64][..],
            &[0x18, 0x0e, 0xab, 0xf6, 1, 1, 3, 3][..],
        ] {
            let p = decode(buf);
            assert!(!p.present());
            assert_eq!(p.offset(), None);
            assert_eq!(p.data(), PrivateData::default());
            assert_eq!(p, ParsedPrivateData::ABSENT);
        }
    }

    #[test]
    fn decode_truncated_after_identifier() {
        for cut in 4..8 {
            let full = [0x00, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];
            let p = decode(&full[..1 + cut]);
            assert!(!p.present(), "cut {cut}");
            assert_eq!(p.data(), PrivateData::default());
        }
    }

    #[test]
    fn decode_skips_wrong_version_then_finds_valid() {
        let buf = [
            0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x03, 0x03, // version 2: skipped
            0x99, // garbage
            0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x01, 0x00, // valid
        ];
        let p = decode(&buf);
        assert_eq!(p.offset(), Some(9));
        assert_eq!(p.data(), PrivateData::new(false, 2048, 1024));
    }

    #[test]
    fn decode_wrong_version_overlapping_next_identifier() {
        // The skipped message's own bytes contain the start of the valid one.
        let buf = [
            0xf6, 0xab, 0x0e, 0x18, 0x00, 0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x00, 0x02,
        ];
        let p = decode(&buf);
        assert_eq!(p.offset(), Some(5));
        assert_eq!(p.data(), PrivateData::new(true, 1024, 3072));
    }

    #[test]
    fn thresholds_take_the_minimum() {
        let client = PrivateData::new(true, 8192, 4096);
        let server = PrivateData::new(false, 2048, 16_384);
        assert_eq!(client_to_server_threshold_bytes(&client, &server), 8192);
        assert_eq!(server_to_client_threshold_bytes(&server, &client), 2048);
        let client = PrivateData::new(true, 65_536, 4096);
        let server = PrivateData::new(false, 65_536, 16_384);
        assert_eq!(client_to_server_threshold_bytes(&client, &server), 16_384);
        assert_eq!(server_to_client_threshold_bytes(&server, &client), 4096);
    }

    #[test]
    fn remote_invalidation_needs_both() {
        let on = PrivateData::new(true, 1024, 1024);
        let off = PrivateData::default();
        assert!(remote_invalidation_allowed(&on, &on));
        assert!(!remote_invalidation_allowed(&on, &off));
        assert!(!remote_invalidation_allowed(&off, &on));
        assert!(!remote_invalidation_allowed(&on, &decode(&[]).data()));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn round_trip(r in any::<bool>(), send in any::<u32>(), recv in any::<u32>(),
                      lead in proptest::collection::vec(any::<u8>(), 0..16),
                      tail in proptest::collection::vec(any::<u8>(), 0..16)) {
            let pd = PrivateData { version: FORMAT_VERSION, remote_invalidation: r,
                                   send_size_bytes: send, receive_size_bytes: recv };
            let mut buf = [0u8; 40];
            // Lead bytes that cannot form an identifier (0xf6 never appears), so the
            // encoded message is the first match.
            let lead_len = lead.len();
            for (d, s) in buf.iter_mut().zip(lead.iter()) {
                *d = if *s == 0xf6 { 0 } else { *s };
            }
            let n = pd.encode(&mut buf[lead_len..]).unwrap();
            prop_assert_eq!(n, 8);
            buf[lead_len + 8..lead_len + 8 + tail.len()].copy_from_slice(&tail);
            let p = decode(&buf[..lead_len + 8 + tail.len()]);
            prop_assert_eq!(p.offset(), Some(lead_len));
            let got = p.data();
            prop_assert_eq!(got, pd.normalized());
            prop_assert_eq!(got.remote_invalidation, r);
            prop_assert!(got.send_size_bytes <= send.max(MIN_SIZE_BYTES));
            prop_assert!(got.receive_size_bytes <= recv.max(MIN_SIZE_BYTES));
            prop_assert_eq!(got.send_size_bytes % SIZE_UNIT_BYTES, 0);
            prop_assert!((MIN_SIZE_BYTES..=MAX_SIZE_BYTES).contains(&got.receive_size_bytes));
            // Normalising is idempotent: a decoded value re-encodes to the same bytes.
            prop_assert_eq!(&got.to_bytes().unwrap()[..], &buf[lead_len..lead_len + 8]);
        }

        #[test]
        fn decode_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            let p = decode(&buf);
            match p.offset() {
                Some(off) => {
                    prop_assert!(off + 8 <= buf.len());
                    prop_assert_eq!(&buf[off..off + 4], &ID[..]);
                    prop_assert_eq!(buf[off + 4], FORMAT_VERSION);
                }
                None => prop_assert_eq!(p.data(), PrivateData::default()),
            }
            prop_assert!((MIN_SIZE_BYTES..=MAX_SIZE_BYTES).contains(&p.data().send_size_bytes));
        }

        #[test]
        fn decode_finds_message_planted_in_noise(
            noise in proptest::collection::vec(any::<u8>(), 0..48),
            at in 0usize..48, bytes in any::<[u8; 2]>(), flags in any::<u8>()) {
            let at = at.min(noise.len());
            let mut buf = noise.clone();
            let msg = [0xf6, 0xab, 0x0e, 0x18, 0x01, flags, bytes[0], bytes[1]];
            buf.splice(at..at, msg.iter().copied());
            let p = decode(&buf);
            // Some valid message is found at or before the planted one.
            let off = p.offset().unwrap();
            prop_assert!(off <= at);
            if off == at {
                prop_assert_eq!(p.data().remote_invalidation, flags & 1 == 1);
                prop_assert_eq!(p.data().send_size_bytes, (bytes[0] as u32 + 1) * 1024);
                prop_assert_eq!(p.data().receive_size_bytes, (bytes[1] as u32 + 1) * 1024);
            }
        }
    }
}
