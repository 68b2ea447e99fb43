//! The shm connection-manager messages (one `SOCK_SEQPACKET` message each).
//!
//! ```text
//! header   magic u32 | version u16 | type u16                    (8 bytes)
//! REQ/ACCEPT  (the sender's inbound rings and registered regions)
//!          pd_len u8 | pad [3] | private data [56] | ring_cap u32 |
//!          file_len u64 | nregions u16 | pad u16                  (76 bytes)
//!          nregions x { id u16 | pad u16 | rkey u32 | len u64 }   (16 bytes each)
//!          descriptors: [ring file, region 0, region 1, ...]
//! REJECT   pd_len u8 | pad [3] | private data [56]
//! RTU      (nothing: "ready to use", the active side mapped everything)
//! ```
//!
//! All integers little-endian. The active side sends REQ, the passive side
//! answers ACCEPT or REJECT (carrying private data as an RDMA-CM REP/REJ does,
//! RFC 8797 section 5.1), and the active side confirms with RTU.
//!
//! Decoding treats the peer as hostile: exact lengths, bounded counts, no
//! allocation beyond [`MAX_REGIONS`] entries, no panics.

use crate::fabric::{PrivateData, MAX_PRIVATE_DATA};

/// "RSHM".
pub const MAGIC: u32 = u32::from_le_bytes(*b"RSHM");
/// Protocol version.
pub const VERSION: u16 = 1;
/// Most regions one side may export (each is one descriptor in the message).
pub const MAX_REGIONS: usize = 128;

const HEADER_LEN: usize = 8;
const PD_BLOCK: usize = 4 + MAX_PRIVATE_DATA;
const HELLO_FIXED: usize = PD_BLOCK + 4 + 8 + 4;
const REGION_LEN: usize = 16;
/// Largest message.
pub const MAX_MSG_LEN: usize = HEADER_LEN + HELLO_FIXED + MAX_REGIONS * REGION_LEN;

const _: () = assert!(MAX_REGIONS < super::sock::MAX_FDS);
const _: () = assert!(MAX_PRIVATE_DATA <= u8::MAX as usize);
const _: () = assert!(MAX_MSG_LEN == 8 + 76 + 128 * 16);

const T_REQ: u16 = 1;
const T_ACCEPT: u16 = 2;
const T_REJECT: u16 = 3;
const T_RTU: u16 = 4;

/// One exported region: its id (the low 16 bits of its rkey), rkey and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    pub id: u16,
    pub rkey: u32,
    pub len: u64,
}

/// The body of REQ and ACCEPT: what the sender exports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub private_data: PrivateData,
    /// Capacity of the sender's inbound rings (power of two).
    pub ring_cap: u32,
    /// Length of the sender's ring file.
    pub file_len: u64,
    pub regions: Vec<RegionInfo>,
}

/// A connection-manager message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    Req(Hello),
    Accept(Hello),
    Reject(PrivateData),
    Rtu,
}

/// Why a peer's message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message too short or of the wrong length")]
    Length,
    #[error("bad magic or version")]
    Magic,
    #[error("unknown message type {0}")]
    Type(u16),
    #[error("private data length {0} exceeds the maximum")]
    PrivateData(u8),
    #[error("{0} regions exceed the maximum")]
    TooManyRegions(u16),
    #[error("region entry {0} is invalid (zero length, rkey not matching id, or duplicate id)")]
    Region(u16),
}

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Bounds-checked little-endian reads over a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> Result<[u8; N], WireError> {
        let end = at.checked_add(N).ok_or(WireError::Length)?;
        let s = self.0.get(at..end).ok_or(WireError::Length)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&self, at: usize) -> Result<u8, WireError> {
        self.0.get(at).copied().ok_or(WireError::Length)
    }
    fn u16(&self, at: usize) -> Result<u16, WireError> {
        self.bytes::<2>(at).map(u16::from_le_bytes)
    }
    fn u32(&self, at: usize) -> Result<u32, WireError> {
        self.bytes::<4>(at).map(u32::from_le_bytes)
    }
    fn u64(&self, at: usize) -> Result<u64, WireError> {
        self.bytes::<8>(at).map(u64::from_le_bytes)
    }
}

fn put_pd(b: &mut [u8], at: usize, pd: &PrivateData) {
    let bytes = pd.as_bytes();
    b[at] = bytes.len() as u8;
    b[at + 4..at + 4 + bytes.len()].copy_from_slice(bytes);
}

fn get_pd(r: &Reader<'_>, at: usize) -> Result<PrivateData, WireError> {
    let len = r.u8(at)?;
    if len as usize > MAX_PRIVATE_DATA {
        return Err(WireError::PrivateData(len));
    }
    let start = at + 4;
    let s = r.0.get(start..start + len as usize).ok_or(WireError::Length)?;
    Ok(PrivateData::new(s))
}

/// Encode `msg` into `buf`; returns the length. Panics only if the caller built
/// a `Hello` with more than [`MAX_REGIONS`] regions (a local bug).
pub fn encode(msg: &Msg, buf: &mut [u8; MAX_MSG_LEN]) -> usize {
    buf.fill(0);
    put_u32(buf, 0, MAGIC);
    put_u16(buf, 4, VERSION);
    let (ty, len) = match msg {
        Msg::Req(h) | Msg::Accept(h) => {
            assert!(h.regions.len() <= MAX_REGIONS, "too many regions to export");
            let b = HEADER_LEN;
            put_pd(buf, b, &h.private_data);
            put_u32(buf, b + PD_BLOCK, h.ring_cap);
            put_u64(buf, b + PD_BLOCK + 4, h.file_len);
            put_u16(buf, b + PD_BLOCK + 12, h.regions.len() as u16);
            let mut at = HEADER_LEN + HELLO_FIXED;
            for r in &h.regions {
                put_u16(buf, at, r.id);
                put_u32(buf, at + 4, r.rkey);
                put_u64(buf, at + 8, r.len);
                at += REGION_LEN;
            }
            (if matches!(msg, Msg::Req(_)) { T_REQ } else { T_ACCEPT }, at)
        }
        Msg::Reject(pd) => {
            put_pd(buf, HEADER_LEN, pd);
            (T_REJECT, HEADER_LEN + PD_BLOCK)
        }
        Msg::Rtu => (T_RTU, HEADER_LEN),
    };
    put_u16(buf, 6, ty);
    len
}

/// Decode one message (exact length required).
pub fn decode(b: &[u8]) -> Result<Msg, WireError> {
    let r = Reader(b);
    if r.u32(0)? != MAGIC || r.u16(4)? != VERSION {
        return Err(WireError::Magic);
    }
    let ty = r.u16(6)?;
    match ty {
        T_REQ | T_ACCEPT => {
            let h = HEADER_LEN;
            let private_data = get_pd(&r, h)?;
            let ring_cap = r.u32(h + PD_BLOCK)?;
            let file_len = r.u64(h + PD_BLOCK + 4)?;
            let n = r.u16(h + PD_BLOCK + 12)?;
            if n as usize > MAX_REGIONS {
                return Err(WireError::TooManyRegions(n));
            }
            if b.len() != HEADER_LEN + HELLO_FIXED + n as usize * REGION_LEN {
                return Err(WireError::Length);
            }
            let mut regions: Vec<RegionInfo> = Vec::with_capacity(n as usize);
            for i in 0..n as usize {
                let at = HEADER_LEN + HELLO_FIXED + i * REGION_LEN;
                let ri = RegionInfo {
                    id: r.u16(at)?,
                    rkey: r.u32(at + 4)?,
                    len: r.u64(at + 8)?,
                };
                if ri.len == 0 || (ri.rkey & 0xffff) as u16 != ri.id || regions.iter().any(|x| x.id == ri.id) {
                    return Err(WireError::Region(i as u16));
                }
                regions.push(ri);
            }
            let hello = Hello {
                private_data,
                ring_cap,
                file_len,
                regions,
            };
            Ok(if ty == T_REQ {
                Msg::Req(hello)
            } else {
                Msg::Accept(hello)
            })
        }
        T_REJECT => {
            if b.len() != HEADER_LEN + PD_BLOCK {
                return Err(WireError::Length);
            }
            Ok(Msg::Reject(get_pd(&r, HEADER_LEN)?))
        }
        T_RTU => {
            if b.len() != HEADER_LEN {
                return Err(WireError::Length);
            }
            Ok(Msg::Rtu)
        }
        t => Err(WireError::Type(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hello(n: u16) -> Hello {
        Hello {
            private_data: PrivateData::new(b"rpcrdma-v2"),
            ring_cap: 64,
            file_len: 12288,
            regions: (0..n)
                .map(|i| RegionInfo {
                    id: i * 3,
                    rkey: 0xab00_0000 | (i as u32 * 3),
                    len: 2 << 20,
                })
                .collect(),
        }
    }

    #[test]
    fn every_message_round_trips() {
        let mut buf = [0u8; MAX_MSG_LEN];
        for m in [
            Msg::Req(hello(0)),
            Msg::Req(hello(3)),
            Msg::Accept(hello(MAX_REGIONS as u16)),
            Msg::Reject(PrivateData::new(&[9; MAX_PRIVATE_DATA])),
            Msg::Reject(PrivateData::EMPTY),
            Msg::Rtu,
        ] {
            let n = encode(&m, &mut buf);
            assert_eq!(decode(&buf[..n]), Ok(m.clone()));
            // Every truncation and one byte too many are refused.
            for cut in 0..n {
                assert!(decode(&buf[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut longer = buf[..n].to_vec();
            longer.push(0);
            assert_eq!(decode(&longer), Err(WireError::Length));
        }
    }

    #[test]
    fn bad_fields_are_refused() {
        let mut buf = [0u8; MAX_MSG_LEN];
        let n = encode(&Msg::Req(hello(2)), &mut buf);
        let mut b = buf;
        b[0] ^= 1;
        assert_eq!(decode(&b[..n]), Err(WireError::Magic));
        let mut b = buf;
        b[6] = 9;
        assert_eq!(decode(&b[..n]), Err(WireError::Type(9)));
        let mut b = buf;
        b[HEADER_LEN] = 57;
        assert_eq!(decode(&b[..n]), Err(WireError::PrivateData(57)));
        let mut b = buf;
        put_u16(&mut b, HEADER_LEN + PD_BLOCK + 12, 129);
        assert_eq!(decode(&b[..n]), Err(WireError::TooManyRegions(129)));
        // Second region duplicates the first's id (rkey adjusted to match).
        let mut b = buf;
        let second = HEADER_LEN + HELLO_FIXED + REGION_LEN;
        put_u16(&mut b, second, 0);
        put_u32(&mut b, second + 4, 0xab00_0000);
        assert_eq!(decode(&b[..n]), Err(WireError::Region(1)));
        // rkey whose low bits do not name the id.
        let mut b = buf;
        put_u32(&mut b, second + 4, 0xab00_0007);
        assert_eq!(decode(&b[..n]), Err(WireError::Region(1)));
        // Zero length.
        let mut b = buf;
        put_u64(&mut b, second + 8, 0);
        assert_eq!(decode(&b[..n]), Err(WireError::Region(1)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn mutated_valid_messages_never_panic(idx in 0usize..200, val in any::<u8>(), n in 0u16..8) {
            let mut buf = [0u8; MAX_MSG_LEN];
            let len = encode(&Msg::Accept(hello(n)), &mut buf);
            buf[idx % len] = val;
            if let Ok(Msg::Accept(h)) = decode(&buf[..len]) {
                prop_assert!(h.regions.len() <= MAX_REGIONS);
            }
        }
    }
}
