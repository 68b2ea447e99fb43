//! Upper-Layer Bindings (RFC 8166 section 6) and the NFSv3 binding (RFC 8267).
//!
//! A ULB says which XDR data items of an RPC program are *DDP-eligible*, i.e. may
//! be removed from the Payload stream and moved in a Read or Write chunk, and how
//! large a reply can get. Position-Zero Read chunks and Reply chunks may carry
//! anything (RFC 8166 section 3.5.3); only DDP-eligible items go in ordinary Read
//! and Write chunks.
//!
//! The trait is object-safe and allocation-free: locators write into caller slices.

use crate::error::DecodeError;

/// A DDP-eligible data item located in an *unreduced* Payload stream.
///
/// `offset` is the byte offset of the item's first data byte (after any XDR length
/// word, which stays in the Payload stream per RFC 8166 section 3.4.4.1) from the
/// start of the RPC message; `len` is the item's encoded length without XDR
/// roundup padding. The padding (`xdr::pad_len(len)` bytes) follows in the
/// unreduced stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DdpItem {
    pub offset: u32,
    pub len: u32,
}

/// An Upper-Layer Binding: the DDP rules of one RPC program.
///
/// Implementations may be called from any core.
pub trait UpperLayerBinding: Send + Sync {
    /// The RPC program number this binding describes.
    fn program(&self) -> u32;

    /// Whether `version` of the program is covered by this binding.
    fn supports_version(&self, version: u32) -> bool;

    /// Locate the DDP-eligible items in an encoded, unreduced RPC **Call** message
    /// (`call` starts at the RPC XID). Writes at most `out.len()` items in stream
    /// order and returns how many. Calls of procedures without DDP-eligible
    /// arguments return `Ok(0)`.
    fn call_items(&self, call: &[u8], out: &mut [DdpItem]) -> Result<usize, DecodeError>;

    /// Locate the DDP-eligible items in an encoded, unreduced RPC **Reply** message
    /// (`reply` starts at the RPC XID) to a call of `(version, procedure)`.
    fn reply_items(
        &self,
        version: u32,
        procedure: u32,
        reply: &[u8],
        out: &mut [DdpItem],
    ) -> Result<usize, DecodeError>;

    /// For a call of `(version, procedure)`, the largest DDP-eligible result item
    /// the reply can carry, so a requester knows to provision a Write chunk and how
    /// large (RFC 8166 section 3.4.6). `None` if the procedure has no DDP-eligible
    /// result.
    fn reply_ddp_max(&self, version: u32, procedure: u32) -> Option<u32>;

    /// Upper bound on the size of a reply to `(version, procedure)` **after**
    /// reduction, used to decide whether a Reply chunk is needed
    /// (RFC 8166 section 6.2).
    fn max_reply_size(&self, version: u32, procedure: u32) -> u32;
}

// ---------------------------------------------------------------------------
// The NFS version 3 binding (RFC 8267 section 4)
// ---------------------------------------------------------------------------

use crate::error::DecodeErrorKind;
use crate::nfs3::{
    self, DataAt, Read3Res, Readlink3Res, Symlink3Args, Write3Args, NFSPROC3_READ, NFSPROC3_READDIR,
    NFSPROC3_READDIRPLUS, NFSPROC3_READLINK, NFSPROC3_SYMLINK, NFSPROC3_WRITE, NFS_PROGRAM, NFS_V3,
};
use crate::rpc::{AcceptedReply, CallHeader, ReplyBody, ReplyHeader, REPLY_HEADER_MAX_BYTES, RPCSEC_GSS};
use crate::xdr::Reader;

/// Default bound on READ and WRITE data (1 MiB, the Linux server's maximum).
pub const NFS3_DEFAULT_MAX_IO_BYTES: u32 = 1 << 20;
/// Default bound on READDIR / READDIRPLUS results (64 KiB).
pub const NFS3_DEFAULT_MAX_DIR_REPLY_BYTES: u32 = 64 * 1024;

/// The Upper-Layer Binding of NFS version 3 to RPC-over-RDMA (RFC 8267 section 4).
///
/// DDP-eligible items (RFC 8267 section 4; all other NFSv3 data items are
/// not DDP-eligible):
///
/// | procedure | direction | item |
/// |---|---|---|
/// | WRITE | call | `WRITE3args.data` (opaque file data) |
/// | SYMLINK | call | `SYMLINK3args.symlink.symlink_data` (the pathname) |
/// | READ | reply | `READ3resok.data` (opaque file data) |
/// | READLINK | reply | `READLINK3resok.data` (the pathname) |
///
/// Calls and replies of other programs and versions carry no DDP-eligible items
/// under this binding, so the locators report none for them.
///
/// RPCSEC_GSS: with the integrity or privacy service the arguments and results
/// are wrapped (RFC 2203 section 5.3.2), so their items cannot be moved
/// separately; [`call_items`](UpperLayerBinding::call_items) reports no items
/// unless the credential is RPCSEC_GSS_DATA with service none. A reply alone does
/// not say which service the call used, so
/// [`reply_items`](UpperLayerBinding::reply_items) reports no items for any reply
/// whose verifier is RPCSEC_GSS (the data then travels inline or in a Reply
/// chunk, which is always allowed).
///
/// Limits (peer input above them is refused with `TooLong`, naming the field):
/// READ/WRITE data up to `max_io_bytes`, paths up to `max_path_bytes`. The struct
/// is plain configuration and may be shared by every core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nfs3Binding {
    /// Largest READ or WRITE data item (the negotiated rsize/wsize bound).
    pub max_io_bytes: u32,
    /// Largest SYMLINK / READLINK pathname; defaults to [`nfs3::NFS3_MAXPATHLEN`].
    pub max_path_bytes: u32,
    /// Bound on READDIR / READDIRPLUS results used by
    /// [`max_reply_size`](UpperLayerBinding::max_reply_size): it must be at least
    /// the largest `count` / `maxcount` the requesters send.
    pub max_dir_reply_bytes: u32,
    /// Extra bytes added to every [`max_reply_size`](UpperLayerBinding::max_reply_size)
    /// for result wrapping this binding does not model (RPCSEC_GSS integrity or
    /// privacy); 0 by default.
    pub auth_slack_bytes: u32,
}

impl Default for Nfs3Binding {
    fn default() -> Self {
        Self::new(NFS3_DEFAULT_MAX_IO_BYTES)
    }
}

impl Nfs3Binding {
    /// A binding with READ/WRITE data bounded by `max_io_bytes` and the defaults
    /// for everything else.
    pub const fn new(max_io_bytes: u32) -> Self {
        Self {
            max_io_bytes,
            max_path_bytes: nfs3::NFS3_MAXPATHLEN,
            max_dir_reply_bytes: NFS3_DEFAULT_MAX_DIR_REPLY_BYTES,
            auth_slack_bytes: 0,
        }
    }

    /// Same binding with a different READDIR/READDIRPLUS results bound.
    pub const fn with_max_dir_reply_bytes(mut self, n: u32) -> Self {
        self.max_dir_reply_bytes = n;
        self
    }

    /// Same binding with a different pathname bound.
    pub const fn with_max_path_bytes(mut self, n: u32) -> Self {
        self.max_path_bytes = n;
        self
    }

    /// Same binding with a different per-reply slack for wrapped results.
    pub const fn with_auth_slack_bytes(mut self, n: u32) -> Self {
        self.auth_slack_bytes = n;
        self
    }
}

/// Store one located item in `out` (if there is room).
fn put_item(item: DataAt<'_>, field: &'static str, out: &mut [DdpItem]) -> Result<usize, DecodeError> {
    let offset = u32::try_from(item.offset)
        .map_err(|_| DecodeError::new(DecodeErrorKind::Invalid { value: u32::MAX }, field, item.offset))?;
    // The length was bounded by a u32 limit when it was decoded.
    let len = item.data.len() as u32;
    match out.first_mut() {
        Some(slot) => {
            *slot = DdpItem { offset, len };
            Ok(1)
        }
        None => Ok(0),
    }
}

impl UpperLayerBinding for Nfs3Binding {
    fn program(&self) -> u32 {
        NFS_PROGRAM
    }

    fn supports_version(&self, version: u32) -> bool {
        version == NFS_V3
    }

    /// WRITE: `data`; SYMLINK: `symlink_data`; otherwise none. The RPC header is
    /// always decoded, so a malformed header is an error even for procedures
    /// without items.
    fn call_items(&self, call: &[u8], out: &mut [DdpItem]) -> Result<usize, DecodeError> {
        let mut r = Reader::new(call);
        let hdr = CallHeader::decode_from(&mut r)?;
        if hdr.prog != NFS_PROGRAM || hdr.vers != NFS_V3 {
            return Ok(0);
        }
        if let Some(gss) = hdr.rpcsec_gss() {
            if !gss?.args_unwrapped() {
                return Ok(0);
            }
        }
        match hdr.proc_ {
            NFSPROC3_WRITE => {
                let a = Write3Args::decode(&mut r, self.max_io_bytes)?;
                put_item(a.data, "data", out)
            }
            NFSPROC3_SYMLINK => {
                let a = Symlink3Args::decode(&mut r, self.max_path_bytes)?;
                put_item(a.symlink_data, "symlink_data", out)
            }
            _ => Ok(0),
        }
    }

    /// READ: `data` of READ3resok; READLINK: `data` of READLINK3resok. Replies
    /// that are not MSG_ACCEPTED / SUCCESS with NFS3_OK carry no item.
    fn reply_items(
        &self,
        version: u32,
        procedure: u32,
        reply: &[u8],
        out: &mut [DdpItem],
    ) -> Result<usize, DecodeError> {
        if version != NFS_V3 || (procedure != NFSPROC3_READ && procedure != NFSPROC3_READLINK) {
            return Ok(0);
        }
        let mut r = Reader::new(reply);
        let hdr = ReplyHeader::decode_from(&mut r)?;
        match hdr.body {
            ReplyBody::Accepted {
                verf,
                data: AcceptedReply::Success,
            } if verf.flavor != RPCSEC_GSS => {}
            _ => return Ok(0),
        }
        if procedure == NFSPROC3_READ {
            match Read3Res::decode(&mut r, self.max_io_bytes)?.ok {
                Some(ok) => put_item(ok.data, "data", out),
                None => Ok(0),
            }
        } else {
            match Readlink3Res::decode(&mut r, self.max_path_bytes)?.data {
                Some(d) => put_item(d, "data", out),
                None => Ok(0),
            }
        }
    }

    /// READ: `max_io_bytes`; READLINK: `max_path_bytes`; otherwise `None`.
    fn reply_ddp_max(&self, version: u32, procedure: u32) -> Option<u32> {
        if version != NFS_V3 {
            return None;
        }
        match procedure {
            NFSPROC3_READ => Some(self.max_io_bytes),
            NFSPROC3_READLINK => Some(self.max_path_bytes),
            _ => None,
        }
    }

    /// The largest reduced reply: the largest RPC reply header
    /// ([`REPLY_HEADER_MAX_BYTES`], a 400-byte verifier) plus the procedure's
    /// largest results after reduction ([`nfs3::max_result_bytes`]: every
    /// optional attribute present, 64-byte handles; for READ and READLINK only
    /// the data item's length word stays inline), plus `auth_slack_bytes`.
    /// READDIR and READDIRPLUS use `max_dir_reply_bytes`. Other versions and
    /// unknown procedures get the header alone (PROG_MISMATCH / PROC_UNAVAIL).
    ///
    /// The bound errs high on purpose: an overestimate only makes the requester
    /// provision a Reply chunk it may not need (a Long Reply where a Short one
    /// would do), whereas an underestimate can leave the responder with a reply
    /// that fits no reply resource, which RFC 8166 section 4.5 turns into an
    /// RDMA_ERROR instead of an answer.
    fn max_reply_size(&self, version: u32, procedure: u32) -> u32 {
        let results = if version != NFS_V3 {
            0
        } else {
            match procedure {
                NFSPROC3_READDIR | NFSPROC3_READDIRPLUS => self.max_dir_reply_bytes as usize,
                p => nfs3::max_result_bytes(p).unwrap_or(0),
            }
        };
        let total = (REPLY_HEADER_MAX_BYTES + results) as u64 + u64::from(self.auth_slack_bytes);
        u32::try_from(total).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::*;
    use crate::rpc::{self, encode_call_header, AuthSysParms, OpaqueAuth};
    use crate::xdr::{roundup, Writer};

    const B: Nfs3Binding = Nfs3Binding::new(NFS3_DEFAULT_MAX_IO_BYTES);

    /// NFSv3 WRITE call, AUTH_SYS, 8-byte handle, 5 bytes of data. Offsets by hand:
    /// 24 fixed header words, cred flavor at 24, cred length at 28, 36-byte body
    /// at 32..68, verf at 68..76, file handle length at 76, handle at 80..88,
    /// offset at 88..96, count at 96, stable at 100, data length at 104, data at
    /// 108..113, 3 pad bytes, end at 116.
    fn write_call() -> Vec<u8> {
        let v = [
            &[0x00, 0x00, 0x00, 0x2a][..],                     // 0: xid 42
            &[0, 0, 0, 0],                                     // 4: CALL
            &[0, 0, 0, 2],                                     // 8: rpcvers
            &[0x00, 0x01, 0x86, 0xa3],                         // 12: prog 100003
            &[0, 0, 0, 3],                                     // 16: vers 3
            &[0, 0, 0, 7],                                     // 20: proc WRITE
            &[0, 0, 0, 1],                                     // 24: cred AUTH_SYS
            &[0, 0, 0, 36],                                    // 28: cred length
            &[0, 0, 0, 0],                                     // 32: stamp
            &[0, 0, 0, 4, b'h', b'o', b's', b't'],             // 36: machinename
            &[0, 0, 0, 0],                                     // 44: uid 0
            &[0, 0, 0, 0],                                     // 48: gid 0
            &[0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3], // 52: gids [1,2,3]
            &[0, 0, 0, 0, 0, 0, 0, 0],                         // 68: verf AUTH_NONE
            &[0, 0, 0, 8],                                     // 76: fh length
            &[1, 2, 3, 4, 5, 6, 7, 8],                         // 80: fh
            &[0, 0, 0, 1, 0, 0, 0, 0],                         // 88: offset 2^32
            &[0, 0, 0, 5],                                     // 96: count
            &[0, 0, 0, 2],                                     // 100: FILE_SYNC
            &[0, 0, 0, 5],                                     // 104: data length
            &[b'h', b'e', b'l', b'l', b'o', 0, 0, 0],          // 108: data + pad
        ]
        .concat();
        assert_eq!(v.len(), 116);
        v
    }

    /// READ reply, AUTH_NONE verifier, attributes present, 6 data bytes: header
    /// 0..24, status at 24, attributes_follow at 28, fattr3 at 32..116, count at
    /// 116, eof at 120, data length at 124, data at 128..134, 2 pad, end 136.
    fn read_reply() -> Vec<u8> {
        let mut fattr = [0u8; 84];
        fattr[3] = 1; // NF3REG
        fattr[6..8].copy_from_slice(&0o644u16.to_be_bytes()); // mode
        let v = [
            &[0, 0, 0, 0x2b][..],                        // 0: xid 43
            &[0, 0, 0, 1],                               // 4: REPLY
            &[0, 0, 0, 0],                               // 8: MSG_ACCEPTED
            &[0, 0, 0, 0, 0, 0, 0, 0],                   // 12: verf AUTH_NONE
            &[0, 0, 0, 0],                               // 20: SUCCESS
            &[0, 0, 0, 0],                               // 24: NFS3_OK
            &[0, 0, 0, 1],                               // 28: attributes follow
            &fattr,                                      // 32: fattr3
            &[0, 0, 0, 6],                               // 116: count
            &[0, 0, 0, 1],                               // 120: eof
            &[0, 0, 0, 6],                               // 124: data length
            &[b'a', b'b', b'c', b'd', b'e', b'f', 0, 0], // 128: data + pad
        ]
        .concat();
        assert_eq!(v.len(), 136);
        v
    }

    /// SYMLINK call, AUTH_NONE, every kind of sattr3 arm: header 0..40, dir handle
    /// length at 40, handle 44..48, name length at 48, "lnk"+pad 52..56, mode set
    /// 56..64, uid not set 64..68, gid set 68..76, size set 76..88, atime
    /// SET_TO_CLIENT_TIME 88..100, mtime SET_TO_SERVER_TIME 100..104, path
    /// length at 104, path 108..115, 1 pad, end 116.
    fn symlink_call() -> Vec<u8> {
        let v = [
            &[0, 0, 0, 0x2c][..],                           // 0: xid 44
            &[0, 0, 0, 0],                                  // 4: CALL
            &[0, 0, 0, 2],                                  // 8: rpcvers
            &[0x00, 0x01, 0x86, 0xa3],                      // 12: prog
            &[0, 0, 0, 3],                                  // 16: vers
            &[0, 0, 0, 10],                                 // 20: SYMLINK
            &[0, 0, 0, 0, 0, 0, 0, 0],                      // 24: cred AUTH_NONE
            &[0, 0, 0, 0, 0, 0, 0, 0],                      // 32: verf AUTH_NONE
            &[0, 0, 0, 4, 9, 9, 9, 9],                      // 40: dir
            &[0, 0, 0, 3, b'l', b'n', b'k', 0],             // 48: name
            &[0, 0, 0, 1, 0, 0, 0x01, 0xff],                // 56: mode set 0777
            &[0, 0, 0, 0],                                  // 64: uid not set
            &[0, 0, 0, 1, 0, 0, 0, 50],                     // 68: gid set 50
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],          // 76: size set 0
            &[0, 0, 0, 2, 0x5f, 0, 0, 0, 0, 0, 0, 7],       // 88: atime client time
            &[0, 0, 0, 1],                                  // 100: mtime server time
            &[0, 0, 0, 7],                                  // 104: path length
            &[b'/', b'a', b'/', b'b', b'/', b'c', b'd', 0], // 108: path + pad
        ]
        .concat();
        assert_eq!(v.len(), 116);
        v
    }

    /// READLINK reply with an 8-byte verifier of flavor AUTH_SHORT, no
    /// attributes: header 0..32 (verf flavor 12, length 16, body 20..28,
    /// accept_stat 28), status 32, attributes_follow 36, path length 40, path
    /// 44..53, 3 pad, end 56.
    fn readlink_reply() -> Vec<u8> {
        let v = [
            &[0, 0, 0, 0x2d][..],                                             // 0: xid 45
            &[0, 0, 0, 1],                                                    // 4: REPLY
            &[0, 0, 0, 0],                                                    // 8: MSG_ACCEPTED
            &[0, 0, 0, 2, 0, 0, 0, 8],                                        // 12: verf AUTH_SHORT, 8 bytes
            &[1, 2, 3, 4, 5, 6, 7, 8],                                        // 20: verf body
            &[0, 0, 0, 0],                                                    // 28: SUCCESS
            &[0, 0, 0, 0],                                                    // 32: NFS3_OK
            &[0, 0, 0, 0],                                                    // 36: no attributes
            &[0, 0, 0, 9],                                                    // 40: path length
            &[b'.', b'.', b'/', b't', b'a', b'r', b'g', b'e', b't', 0, 0, 0], // 44
        ]
        .concat();
        assert_eq!(v.len(), 56);
        v
    }

    fn one_call(b: &Nfs3Binding, call: &[u8]) -> Result<Option<DdpItem>, DecodeError> {
        let mut out = [DdpItem::default(); 2];
        let n = b.call_items(call, &mut out)?;
        assert!(n <= 1);
        Ok((n == 1).then_some(out[0]))
    }

    fn one_reply(b: &Nfs3Binding, p: u32, reply: &[u8]) -> Result<Option<DdpItem>, DecodeError> {
        let mut out = [DdpItem::default(); 2];
        let n = b.reply_items(NFS_V3, p, reply, &mut out)?;
        assert!(n <= 1);
        Ok((n == 1).then_some(out[0]))
    }

    #[test]
    fn write_call_item() {
        let v = write_call();
        let item = one_call(&B, &v).unwrap().unwrap();
        assert_eq!(item, DdpItem { offset: 108, len: 5 });
        assert_eq!(&v[108..113], b"hello");
        // An empty output slice: nothing written, nothing counted.
        assert_eq!(B.call_items(&v, &mut []), Ok(0));
        // data longer than the binding allows
        let small = Nfs3Binding::new(4);
        let e = small.call_items(&v, &mut [DdpItem::default()]).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 5, max: 4 });
        assert_eq!((e.field, e.offset), ("data", 104));
    }

    #[test]
    fn symlink_call_item() {
        let v = symlink_call();
        let item = one_call(&B, &v).unwrap().unwrap();
        assert_eq!(item, DdpItem { offset: 108, len: 7 });
        assert_eq!(&v[108..115], b"/a/b/cd");
        let e = B
            .with_max_path_bytes(6)
            .call_items(&v, &mut [DdpItem::default()])
            .unwrap_err();
        assert_eq!((e.field, e.offset), ("symlink_data", 104));
        // a bad time_how in atime
        let mut bad = v.clone();
        bad[91] = 3;
        let e = one_call(&B, &bad).unwrap_err();
        assert_eq!((e.field, e.offset), ("atime", 88));
    }

    #[test]
    fn read_reply_item() {
        let v = read_reply();
        let item = one_reply(&B, NFSPROC3_READ, &v).unwrap().unwrap();
        assert_eq!(item, DdpItem { offset: 128, len: 6 });
        assert_eq!(&v[128..134], b"abcdef");
        let e = one_reply(&Nfs3Binding::new(5), NFSPROC3_READ, &v).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLong { len: 6, max: 5 });
        // READ failed: NFS3ERR_IO with the attributes still present
        let mut fail = v[..116].to_vec();
        fail[27] = NFS3ERR_IO as u8;
        assert_eq!(one_reply(&B, NFSPROC3_READ, &fail), Ok(None));
        // not SUCCESS: GARBAGE_ARGS
        let mut garbage = v[..24].to_vec();
        garbage[23] = rpc::GARBAGE_ARGS as u8;
        assert_eq!(one_reply(&B, NFSPROC3_READ, &garbage), Ok(None));
        // another version or procedure: no items, the bytes are not looked at
        let mut out = [DdpItem::default()];
        assert_eq!(B.reply_items(2, NFSPROC3_READ, &v, &mut out), Ok(0));
        assert_eq!(B.reply_items(NFS_V3, NFSPROC3_GETATTR, &v, &mut out), Ok(0));
    }

    #[test]
    fn readlink_reply_item() {
        let v = readlink_reply();
        let item = one_reply(&B, NFSPROC3_READLINK, &v).unwrap().unwrap();
        assert_eq!(item, DdpItem { offset: 44, len: 9 });
        assert_eq!(&v[44..53], b"../target");
        // the same reply with an RPCSEC_GSS verifier reports no item
        let mut gss = v.clone();
        gss[15] = rpc::RPCSEC_GSS as u8;
        assert_eq!(one_reply(&B, NFSPROC3_READLINK, &gss), Ok(None));
    }

    #[test]
    fn truncation_is_an_error_at_every_offset() {
        for (name, v) in [("write", write_call()), ("symlink", symlink_call())] {
            for n in 0..v.len() {
                assert!(one_call(&B, &v[..n]).is_err(), "{name} prefix {n}");
            }
        }
        for (p, v) in [(NFSPROC3_READ, read_reply()), (NFSPROC3_READLINK, readlink_reply())] {
            for n in 0..v.len() {
                assert!(one_reply(&B, p, &v[..n]).is_err(), "proc {p} prefix {n}");
            }
        }
    }

    #[test]
    fn calls_without_items() {
        // GETATTR
        let mut v = symlink_call()[..48].to_vec();
        v[23] = NFSPROC3_GETATTR as u8;
        assert_eq!(one_call(&B, &v), Ok(None));
        // the MOUNT program
        let mut v = write_call();
        v[15] = 0xa5;
        assert_eq!(one_call(&B, &v), Ok(None));
        // NFS version 4
        let mut v = write_call();
        v[19] = 4;
        assert_eq!(one_call(&B, &v), Ok(None));
        // but a malformed RPC header is still an error
        let mut v = write_call();
        v[11] = 3;
        assert_eq!(
            one_call(&B, &v).unwrap_err().kind,
            DecodeErrorKind::BadVersion { vers: 3 }
        );
    }

    /// A WRITE call with an RPCSEC_GSS credential of the given service.
    fn gss_write(service: u32) -> Vec<u8> {
        let w = write_call();
        let cred = [
            &[0, 0, 0, 1][..],                 // version 1
            &[0, 0, 0, 0],                     // RPCSEC_GSS_DATA
            &[0, 0, 0, 9],                     // seq_num
            &service.to_be_bytes(),            // service
            &[0, 0, 0, 4, 0xa, 0xb, 0xc, 0xd], // handle
        ]
        .concat();
        [&w[..24], &[0, 0, 0, 6], &[0, 0, 0, cred.len() as u8], &cred, &w[68..]].concat()
    }

    #[test]
    fn rpcsec_gss_calls() {
        // service none: arguments are plain; header is 24 + 8 + 24 + 8 = 64
        let v = gss_write(rpc::RPC_GSS_SVC_NONE);
        let item = one_call(&B, &v).unwrap().unwrap();
        assert_eq!(
            item,
            DdpItem {
                offset: 64 + 32,
                len: 5
            }
        );
        assert_eq!(&v[96..101], b"hello");
        // integrity and privacy wrap the arguments: no items
        for s in [rpc::RPC_GSS_SVC_INTEGRITY, rpc::RPC_GSS_SVC_PRIVACY] {
            assert_eq!(one_call(&B, &gss_write(s)), Ok(None));
        }
        let e = one_call(&B, &gss_write(7)).unwrap_err();
        assert_eq!((e.field, e.offset), ("service", 32 + 12));
    }

    #[test]
    fn limits() {
        assert_eq!(B, Nfs3Binding::default());
        assert_eq!(B.program(), 100_003);
        assert!(B.supports_version(3) && !B.supports_version(2) && !B.supports_version(4));
        assert_eq!(B.reply_ddp_max(3, NFSPROC3_READ), Some(1 << 20));
        assert_eq!(B.reply_ddp_max(3, NFSPROC3_READLINK), Some(NFS3_MAXPATHLEN));
        assert_eq!(B.reply_ddp_max(3, NFSPROC3_WRITE), None);
        assert_eq!(B.reply_ddp_max(2, NFSPROC3_READ), None);
        let hdr = rpc::REPLY_HEADER_MAX_BYTES as u32;
        assert_eq!(B.max_reply_size(3, NFSPROC3_GETATTR), hdr + 88);
        assert_eq!(B.max_reply_size(3, NFSPROC3_READ), hdr + 104);
        assert_eq!(B.max_reply_size(3, NFSPROC3_READDIRPLUS), hdr + 65536);
        assert_eq!(
            B.with_max_dir_reply_bytes(8192).max_reply_size(3, NFSPROC3_READDIR),
            hdr + 8192
        );
        assert_eq!(B.with_auth_slack_bytes(100).max_reply_size(3, NFSPROC3_NULL), hdr + 100);
        assert_eq!(B.max_reply_size(3, 99), hdr);
        assert_eq!(B.max_reply_size(4, NFSPROC3_READ), hdr);
        assert_eq!(
            B.with_max_dir_reply_bytes(u32::MAX).max_reply_size(3, NFSPROC3_READDIR),
            u32::MAX
        );
        // Every reduced reply the bound covers actually fits: the largest READ
        // reply after reduction (header with a 400-byte verifier, attributes,
        // count, eof, data length word).
        let read_reduced = rpc::REPLY_SUCCESS_HEADER_MAX_BYTES + 4 + 4 + FATTR3_BYTES + 4 + 4 + 4;
        assert!(read_reduced as u32 <= B.max_reply_size(3, NFSPROC3_READ));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// WRITE calls built with the encoder: the item is found where the
            /// data was written, whatever the credential and handle sizes.
            #[test]
            fn write_item_matches_encoder(
                name in prop::collection::vec(any::<u8>(), 0..=255),
                gids in prop::collection::vec(any::<u32>(), 0..=16),
                fh in prop::collection::vec(any::<u8>(), 0..=64),
                data in prop::collection::vec(any::<u8>(), 0..300),
            ) {
                let p = AuthSysParms::new(1, &name, 2, 3, &gids).unwrap();
                let mut body = [0u8; rpc::MAX_AUTH_BYTES as usize];
                let mut bw = Writer::new(&mut body);
                p.encode(&mut bw).unwrap();
                let n = bw.len();
                let hdr = rpc::CallHeader::new(5, NFS_PROGRAM, NFS_V3, NFSPROC3_WRITE,
                    OpaqueAuth { flavor: rpc::AUTH_SYS, body: &body[..n] }, OpaqueAuth::NONE);
                let mut msg = vec![0u8; 2048];
                let mut w = Writer::new(&mut msg);
                encode_call_header(&mut w, &hdr).unwrap();
                w.put_opaque_var(&fh).unwrap();
                w.put_u64(77).unwrap();
                w.put_u32(data.len() as u32).unwrap();
                w.put_u32(UNSTABLE).unwrap();
                let data_at = w.len() + 4;
                w.put_opaque_var(&data).unwrap();
                let end = w.len();
                prop_assert_eq!(end, data_at + roundup(data.len()));
                let mut out = [DdpItem::default()];
                prop_assert_eq!(B.call_items(&msg[..end], &mut out), Ok(1));
                prop_assert_eq!(out[0], DdpItem { offset: data_at as u32, len: data.len() as u32 });
            }
        }
    }
}
