//! NFSv3, MOUNT v3 and portmap v2 messages, requester side (RFC 1813, RFC 1833
//! section 3 for portmap's GETPORT). Encoders write a whole RPC Call into a
//! caller buffer and return its length; decoders take a Reply and never panic
//! on malformed input (the server is a peer like any other). Pure; any thread.

use proto::nfs3::{
    self, FATTR3_BYTES, MOUNTPROC3_MNT, MOUNTPROC3_UMNT, MOUNT_PROGRAM, MOUNT_V3, NFS3_OK, NFS3_WRITEVERFSIZE,
    NFSPROC3_CREATE, NFSPROC3_GETATTR, NFSPROC3_LOOKUP, NFSPROC3_NULL, NFSPROC3_READ, NFSPROC3_WRITE, NFS_PROGRAM,
    NFS_V3, WCC_ATTR_BYTES,
};
use proto::rpc::{self, AcceptedReply, AuthSysParms, CallHeader, OpaqueAuth, ReplyBody, AUTH_NONE, AUTH_SYS};
use proto::xdr::{roundup, Reader, Writer};
use proto::{DecodeError, EncodeError};

/// Portmap program, version 2, GETPORT (RFC 1833 section 3).
pub const PMAP_PROGRAM: u32 = 100_000;
pub const PMAP_V2: u32 = 2;
pub const PMAPPROC_GETPORT: u32 = 3;
/// `IPPROTO_TCP` as portmap names it.
pub const IPPROTO_TCP: u32 = 6;

/// `createmode3` UNCHECKED.
pub const UNCHECKED: u32 = 0;
/// `ftype3` NF3REG.
pub const NF3REG: u32 = 1;

/// Why a reply was not what the call wanted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("malformed reply: {0}")]
    Decode(#[from] DecodeError),
    #[error("reply XID {got:#x} does not match the call's {want:#x}")]
    Xid { got: u32, want: u32 },
    #[error("RPC not accepted: {0}")]
    Rpc(String),
    #[error("nfsstat3 {0}")]
    Nfs(u32),
    #[error("mountstat3 {0}")]
    Mount(u32),
    #[error("{0}")]
    Bad(&'static str),
}

/// An RPC credential: flavor and encoded body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cred {
    pub flavor: u32,
    pub body: Vec<u8>,
}

impl Cred {
    /// AUTH_NONE.
    pub fn none() -> Self {
        Cred {
            flavor: AUTH_NONE,
            body: Vec::new(),
        }
    }

    /// AUTH_SYS with `uid`, `gid` and `gid` as the only supplementary group
    /// (the kernel's nfsd refuses AUTH_NONE for everything but NULL).
    pub fn sys(machine: &str, uid: u32, gid: u32) -> Result<Self, EncodeError> {
        let name = &machine.as_bytes()[..machine.len().min(rpc::AUTH_SYS_MAX_MACHINENAME as usize)];
        let p = AuthSysParms::new(0, name, uid, gid, &[gid])?;
        let mut body = vec![0u8; p.encoded_len()];
        let mut w = Writer::new(&mut body);
        p.encode(&mut w)?;
        Ok(Cred { flavor: AUTH_SYS, body })
    }

    fn auth(&self) -> OpaqueAuth<'_> {
        OpaqueAuth {
            flavor: self.flavor,
            body: &self.body,
        }
    }
}

/// This host's name for AUTH_SYS (`perf` when unknown). Start-up.
pub fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "perf".into())
}

fn header(w: &mut Writer<'_>, xid: u32, prog: u32, vers: u32, proc_: u32, cred: &Cred) -> Result<(), EncodeError> {
    rpc::encode_call_header(
        w,
        &CallHeader::new(xid, prog, vers, proc_, cred.auth(), OpaqueAuth::NONE),
    )
}

/// A call with no arguments (NULL of any program).
pub fn encode_null(out: &mut [u8], xid: u32, prog: u32, vers: u32, cred: &Cred) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, prog, vers, NFSPROC3_NULL, cred)?;
    Ok(w.len())
}

/// NFSv3 GETATTR.
pub fn encode_getattr(out: &mut [u8], xid: u32, cred: &Cred, fh: &[u8]) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, NFS_PROGRAM, NFS_V3, NFSPROC3_GETATTR, cred)?;
    w.put_opaque_var(fh)?;
    Ok(w.len())
}

/// NFSv3 LOOKUP of `name` in `dir`.
pub fn encode_lookup(out: &mut [u8], xid: u32, cred: &Cred, dir: &[u8], name: &str) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, NFS_PROGRAM, NFS_V3, NFSPROC3_LOOKUP, cred)?;
    w.put_opaque_var(dir)?;
    w.put_opaque_var(name.as_bytes())?;
    Ok(w.len())
}

/// NFSv3 CREATE, UNCHECKED (an existing file is kept), with `mode` set.
pub fn encode_create(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    dir: &[u8],
    name: &str,
    mode: u32,
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, NFS_PROGRAM, NFS_V3, NFSPROC3_CREATE, cred)?;
    w.put_opaque_var(dir)?;
    w.put_opaque_var(name.as_bytes())?;
    w.put_u32(UNCHECKED)?;
    // sattr3: mode set; uid, gid, size unset; atime, mtime DONT_CHANGE.
    for v in [1, mode, 0, 0, 0, nfs3::DONT_CHANGE, nfs3::DONT_CHANGE] {
        w.put_u32(v)?;
    }
    Ok(w.len())
}

/// NFSv3 READ.
pub fn encode_read(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    fh: &[u8],
    offset: u64,
    count: u32,
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, NFS_PROGRAM, NFS_V3, NFSPROC3_READ, cred)?;
    w.put_opaque_var(fh)?;
    w.put_u64(offset)?;
    w.put_u32(count)?;
    Ok(w.len())
}

/// NFSv3 COMMIT of the whole file (offset 0, count 0).
pub fn encode_commit(out: &mut [u8], xid: u32, cred: &Cred, fh: &[u8]) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, NFS_PROGRAM, NFS_V3, nfs3::NFSPROC3_COMMIT, cred)?;
    w.put_opaque_var(fh)?;
    w.put_u64(0)?;
    w.put_u32(0)?;
    Ok(w.len())
}

/// A COMMIT reply: NFS3_OK (its `wcc_data` and verifier are not checked).
pub fn parse_commit(reply: &[u8], xid: Option<u32>) -> Result<(), ReplyError> {
    let at = rpc_results(reply, xid)?;
    let mut r = Reader::new(&reply[at..]);
    match status(&mut r)? {
        NFS3_OK => Ok(()),
        s => Err(ReplyError::Nfs(s)),
    }
}

/// NFSv3 WRITE up to the data's length word: returns where the `count` data
/// bytes go. The caller writes (or leaves) the data there; the Call is
/// [`write_call_len`] bytes long. The XDR padding after the data is zeroed.
#[allow(clippy::too_many_arguments)]
pub fn encode_write_head(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    fh: &[u8],
    offset: u64,
    count: u32,
    stable: u32,
) -> Result<usize, EncodeError> {
    let at = {
        let mut w = Writer::new(out);
        header(&mut w, xid, NFS_PROGRAM, NFS_V3, NFSPROC3_WRITE, cred)?;
        w.put_opaque_var(fh)?;
        w.put_u64(offset)?;
        w.put_u32(count)?;
        w.put_u32(stable)?;
        w.put_u32(count)?;
        w.len()
    };
    let end = write_call_len(at, count);
    let pad = out
        .get_mut(at + count as usize..end)
        .ok_or(EncodeError::BufferTooSmall { needed: end })?;
    pad.fill(0);
    Ok(at)
}

/// Length of a WRITE Call whose data starts at `data_at`.
pub const fn write_call_len(data_at: usize, count: u32) -> usize {
    data_at + roundup(count as usize)
}

/// MOUNT v3 MNT of `path`.
pub fn encode_mnt(out: &mut [u8], xid: u32, cred: &Cred, path: &str) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT, cred)?;
    w.put_opaque_var(path.as_bytes())?;
    Ok(w.len())
}

/// MOUNT v3 UMNT of `path`.
pub fn encode_umnt(out: &mut [u8], xid: u32, cred: &Cred, path: &str) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_UMNT, cred)?;
    w.put_opaque_var(path.as_bytes())?;
    Ok(w.len())
}

/// Portmap v2 GETPORT of `(prog, vers, prot)`, AUTH_NONE.
pub fn encode_getport(out: &mut [u8], xid: u32, prog: u32, vers: u32, prot: u32) -> Result<usize, EncodeError> {
    let mut w = Writer::new(out);
    header(&mut w, xid, PMAP_PROGRAM, PMAP_V2, PMAPPROC_GETPORT, &Cred::none())?;
    for v in [prog, vers, prot, 0] {
        w.put_u32(v)?;
    }
    Ok(w.len())
}

/// Check a Reply's RPC header: MSG_ACCEPTED / SUCCESS, and (when `want_xid`
/// is given) the XID. Returns the offset of the results.
pub fn rpc_results(reply: &[u8], want_xid: Option<u32>) -> Result<usize, ReplyError> {
    let (h, at) = rpc::decode_reply(reply)?;
    if let Some(want) = want_xid {
        if h.xid != want {
            return Err(ReplyError::Xid { got: h.xid, want });
        }
    }
    match h.body {
        ReplyBody::Accepted {
            data: AcceptedReply::Success,
            ..
        } => Ok(at),
        ReplyBody::Accepted { data, .. } => Err(ReplyError::Rpc(format!("{data:?}"))),
        ReplyBody::Denied(d) => Err(ReplyError::Rpc(format!("denied: {d:?}"))),
    }
}

/// What perf needs of `fattr3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fattr {
    pub ftype: u32,
    pub size: u64,
}

fn fattr3(r: &mut Reader<'_>) -> Result<Fattr, DecodeError> {
    let b = r.bytes(FATTR3_BYTES, "fattr3")?;
    let ftype = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&b[20..28]);
    Ok(Fattr {
        ftype,
        size: u64::from_be_bytes(s),
    })
}

fn post_op_attr(r: &mut Reader<'_>, field: &'static str) -> Result<Option<Fattr>, DecodeError> {
    if r.bool(field)? {
        Ok(Some(fattr3(r)?))
    } else {
        Ok(None)
    }
}

fn skip_wcc_data(r: &mut Reader<'_>) -> Result<(), DecodeError> {
    if r.bool("before")? {
        r.skip(WCC_ATTR_BYTES, "before")?;
    }
    post_op_attr(r, "after").map(|_| ())
}

fn status(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    r.u32("status")
}

/// GETATTR results: the attributes.
pub fn parse_getattr(reply: &[u8], xid: Option<u32>) -> Result<Fattr, ReplyError> {
    let at = rpc_results(reply, xid)?;
    let mut r = Reader::with_base(&reply[at..], at);
    match status(&mut r)? {
        NFS3_OK => Ok(fattr3(&mut r)?),
        s => Err(ReplyError::Nfs(s)),
    }
}

/// LOOKUP results: the handle and, when present, its attributes.
pub fn parse_lookup(reply: &[u8], xid: Option<u32>) -> Result<(Vec<u8>, Option<Fattr>), ReplyError> {
    let at = rpc_results(reply, xid)?;
    let mut r = Reader::with_base(&reply[at..], at);
    match status(&mut r)? {
        NFS3_OK => {
            let fh = nfs3::nfs_fh3(&mut r, "object")?.to_vec();
            let attr = post_op_attr(&mut r, "obj_attributes")?;
            post_op_attr(&mut r, "dir_attributes")?;
            Ok((fh, attr))
        }
        s => Err(ReplyError::Nfs(s)),
    }
}

/// CREATE results: the new handle when the server returned one.
pub fn parse_create(reply: &[u8], xid: Option<u32>) -> Result<Option<Vec<u8>>, ReplyError> {
    let at = rpc_results(reply, xid)?;
    let mut r = Reader::with_base(&reply[at..], at);
    match status(&mut r)? {
        NFS3_OK => {
            let fh = if r.bool("handle_follows")? {
                Some(nfs3::nfs_fh3(&mut r, "obj")?.to_vec())
            } else {
                None
            };
            post_op_attr(&mut r, "obj_attributes")?;
            skip_wcc_data(&mut r)?;
            Ok(fh)
        }
        s => Err(ReplyError::Nfs(s)),
    }
}

/// READ results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOk<'a> {
    pub count: u32,
    pub eof: bool,
    pub data: &'a [u8],
}

/// READ results from a (reduced) reply: the data is Write chunk 0 when the
/// responder put it there (`chunk` non-empty), otherwise inline after its
/// length word. `max` bounds the data length.
pub fn parse_read<'a>(
    reduced: &'a [u8],
    chunk: Option<&'a [u8]>,
    xid: Option<u32>,
    max: u32,
) -> Result<ReadOk<'a>, ReplyError> {
    let at = rpc_results(reduced, xid)?;
    let mut r = Reader::with_base(&reduced[at..], at);
    let st = status(&mut r)?;
    post_op_attr(&mut r, "file_attributes")?;
    if st != NFS3_OK {
        return Err(ReplyError::Nfs(st));
    }
    let count = r.u32("count")?;
    let eof = r.bool("eof")?;
    let data = match chunk.filter(|c| !c.is_empty()) {
        Some(c) => {
            let len = r.u32("data")?;
            if len as usize != c.len() || len > max {
                return Err(ReplyError::Bad("READ data length differs from the Write chunk's"));
            }
            c
        }
        None => r.opaque_var(max, "data")?,
    };
    if data.len() != count as usize {
        return Err(ReplyError::Bad("READ count differs from the data length"));
    }
    Ok(ReadOk { count, eof, data })
}

/// WRITE results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOk {
    pub count: u32,
    pub committed: u32,
}

/// WRITE results.
pub fn parse_write(reply: &[u8], xid: Option<u32>) -> Result<WriteOk, ReplyError> {
    let at = rpc_results(reply, xid)?;
    let mut r = Reader::with_base(&reply[at..], at);
    let st = status(&mut r)?;
    skip_wcc_data(&mut r)?;
    if st != NFS3_OK {
        return Err(ReplyError::Nfs(st));
    }
    let count = r.u32("count")?;
    let committed = r.u32("committed")?;
    if committed > nfs3::FILE_SYNC {
        return Err(ReplyError::Bad("WRITE committed is not a stable_how"));
    }
    r.opaque_fixed(NFS3_WRITEVERFSIZE, "verf")?;
    Ok(WriteOk { count, committed })
}

/// MNT results: the export's root handle.
pub fn parse_mnt(reply: &[u8], xid: Option<u32>) -> Result<Vec<u8>, ReplyError> {
    let at = rpc_results(reply, xid)?;
    let mut r = Reader::with_base(&reply[at..], at);
    match r.u32("fhs_status")? {
        nfs3::MNT3_OK => {
            let fh = r.opaque_var(nfs3::FHSIZE3, "fhandle")?.to_vec();
            // auth_flavors<>: checked for shape, bounded.
            let n = r.count(64, 4, "auth_flavors")?;
            for _ in 0..n {
                r.u32("auth_flavors")?;
            }
            Ok(fh)
        }
        s => Err(ReplyError::Mount(s)),
    }
}

/// GETPORT results: the port (0 = not registered is an error).
pub fn parse_getport(reply: &[u8], xid: Option<u32>) -> Result<u16, ReplyError> {
    let at = rpc_results(reply, xid)?;
    let mut r = Reader::with_base(&reply[at..], at);
    match r.u32("port")? {
        0 => Err(ReplyError::Bad("program not registered with portmap")),
        p => u16::try_from(p).map_err(|_| ReplyError::Bad("portmap returned a port above 65535")),
    }
}

/// NULL results: none; only the RPC header is checked.
pub fn parse_null(reply: &[u8], xid: Option<u32>) -> Result<(), ReplyError> {
    rpc_results(reply, xid).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::rpc::{encode_reply_header, ReplyHeader};
    use proto::DecodeErrorKind;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    fn reply_ok(xid: u32, results: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        let mut w = Writer::new(&mut b);
        encode_reply_header(&mut w, &ReplyHeader::success(xid, OpaqueAuth::NONE)).unwrap();
        let n = w.len();
        b.truncate(n);
        b.extend_from_slice(results);
        b
    }

    fn fattr(size: u64) -> Vec<u8> {
        let mut v = words(&[NF3REG, 0o644, 1, 0, 0]);
        v.extend_from_slice(&size.to_be_bytes());
        v.extend_from_slice(&[0u8; FATTR3_BYTES - 28]);
        v
    }

    #[test]
    fn auth_sys_call_decodes_back() {
        let cred = Cred::sys("client", 1000, 100).unwrap();
        let mut b = [0u8; 512];
        let fh = [9u8; 12];
        let n = encode_read(&mut b, 77, &cred, &fh, 1 << 33, 4096).unwrap();
        let (h, at) = CallHeader::decode(&b[..n]).unwrap();
        assert_eq!(
            (h.xid, h.prog, h.vers, h.proc_),
            (77, NFS_PROGRAM, NFS_V3, NFSPROC3_READ)
        );
        let a = h.auth_sys().unwrap().unwrap();
        assert_eq!(
            (a.uid, a.gid, a.gids(), a.machinename),
            (1000, 100, &[100][..], &b"client"[..])
        );
        let args = nfs3::Read3Args::decode(&mut Reader::new(&b[at..n])).unwrap();
        assert_eq!((args.file, args.offset, args.count), (&fh[..], 1 << 33, 4096));
    }

    #[test]
    fn write_head_places_data_where_the_binding_finds_it() {
        use proto::ulb::{DdpItem, Nfs3Binding, UpperLayerBinding};
        let cred = Cred::sys("h", 0, 0).unwrap();
        let mut b = vec![0xffu8; 8192];
        let fh = [1u8; 32];
        let at = encode_write_head(&mut b, 5, &cred, &fh, 4096, 4095, nfs3::UNSTABLE).unwrap();
        b[at..at + 4095].fill(0xab);
        let n = write_call_len(at, 4095);
        assert_eq!(n, at + 4096);
        assert_eq!(b[n - 1], 0, "padding zeroed");
        let mut items = [DdpItem::default(); 2];
        let k = Nfs3Binding::new(1 << 20).call_items(&b[..n], &mut items).unwrap();
        assert_eq!(k, 1);
        assert_eq!(
            items[0],
            DdpItem {
                offset: at as u32,
                len: 4095
            }
        );
        let (_, a0) = CallHeader::decode(&b[..n]).unwrap();
        let w = nfs3::Write3Args::decode(&mut Reader::new(&b[a0..n]), 1 << 20).unwrap();
        assert_eq!((w.offset, w.count, w.stable, w.data.data.len()), (4096, 4095, 0, 4095));
        // Too small a buffer for the data: refused, not a panic.
        let mut small = [0u8; 200];
        assert!(encode_write_head(&mut small, 5, &cred, &fh, 0, 4096, 0).is_err());
    }

    #[test]
    fn lookup_create_mnt_getport_encoders() {
        let cred = Cred::sys("h", 0, 0).unwrap();
        let mut b = [0u8; 1024];
        let n = encode_lookup(&mut b, 1, &cred, &[7; 8], "perf.dat").unwrap();
        let (h, at) = CallHeader::decode(&b[..n]).unwrap();
        assert_eq!(h.proc_, NFSPROC3_LOOKUP);
        let mut r = Reader::new(&b[at..n]);
        assert_eq!(nfs3::nfs_fh3(&mut r, "dir").unwrap(), &[7; 8]);
        assert_eq!(nfs3::filename3(&mut r, "name").unwrap(), b"perf.dat");
        assert_eq!(r.remaining(), 0);

        let n = encode_create(&mut b, 2, &cred, &[7; 8], "f", 0o644).unwrap();
        let (h, at) = CallHeader::decode(&b[..n]).unwrap();
        assert_eq!(h.proc_, NFSPROC3_CREATE);
        let mut r = Reader::new(&b[at..n]);
        nfs3::nfs_fh3(&mut r, "dir").unwrap();
        nfs3::filename3(&mut r, "name").unwrap();
        assert_eq!(r.u32("how").unwrap(), UNCHECKED);
        nfs3::skip_sattr3(&mut r).unwrap();
        assert_eq!(r.remaining(), 0);

        let n = encode_mnt(&mut b, 3, &cred, "/export").unwrap();
        let (h, at) = CallHeader::decode(&b[..n]).unwrap();
        assert_eq!((h.prog, h.vers, h.proc_), (MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT));
        assert_eq!(Reader::new(&b[at..n]).string(1024, "p").unwrap(), b"/export");

        let n = encode_getport(&mut b, 4, MOUNT_PROGRAM, 3, IPPROTO_TCP).unwrap();
        let (h, at) = CallHeader::decode(&b[..n]).unwrap();
        assert_eq!(
            (h.prog, h.vers, h.proc_, h.cred.flavor),
            (PMAP_PROGRAM, 2, 3, AUTH_NONE)
        );
        assert_eq!(&b[at..n], &words(&[MOUNT_PROGRAM, 3, 6, 0])[..]);
    }

    #[test]
    fn lookup_reply_ok_and_errors() {
        let mut res = words(&[NFS3_OK, 8]);
        res.extend_from_slice(&[5u8; 8]);
        res.extend_from_slice(&words(&[1]));
        res.extend_from_slice(&fattr(12345));
        res.extend_from_slice(&words(&[0]));
        let (fh, a) = parse_lookup(&reply_ok(9, &res), Some(9)).unwrap();
        assert_eq!(fh, vec![5u8; 8]);
        assert_eq!(
            a,
            Some(Fattr {
                ftype: NF3REG,
                size: 12345
            })
        );
        // XID mismatch, NFS error, truncation at every length.
        assert!(matches!(
            parse_lookup(&reply_ok(8, &res), Some(9)),
            Err(ReplyError::Xid { .. })
        ));
        let noent = words(&[nfs3::NFS3ERR_NOENT, 0]);
        assert_eq!(
            parse_lookup(&reply_ok(9, &noent), None),
            Err(ReplyError::Nfs(nfs3::NFS3ERR_NOENT))
        );
        let full = reply_ok(9, &res);
        for k in 0..full.len() {
            assert!(parse_lookup(&full[..k], None).is_err(), "truncated at {k}");
        }
        // A 65-byte handle is refused.
        let mut big = words(&[NFS3_OK, 65]);
        big.extend_from_slice(&[0u8; 68]);
        assert!(matches!(
            parse_lookup(&reply_ok(1, &big), None),
            Err(ReplyError::Decode(DecodeError {
                kind: DecodeErrorKind::TooLong { .. },
                ..
            }))
        ));
    }

    #[test]
    fn rpc_level_refusals() {
        let mut b = vec![0u8; 64];
        let mut w = Writer::new(&mut b);
        encode_reply_header(
            &mut w,
            &ReplyHeader::accepted(3, OpaqueAuth::NONE, AcceptedReply::ProcUnavail),
        )
        .unwrap();
        let n = w.len();
        assert!(matches!(parse_null(&b[..n], Some(3)), Err(ReplyError::Rpc(_))));
        let mut w = Writer::new(&mut b);
        encode_reply_header(&mut w, &ReplyHeader::rpc_mismatch(3)).unwrap();
        let n = w.len();
        assert!(matches!(parse_null(&b[..n], Some(3)), Err(ReplyError::Rpc(_))));
        assert!(
            matches!(parse_null(&words(&[3, 0]), None), Err(ReplyError::Decode(_))),
            "a CALL is no reply"
        );
        assert_eq!(parse_null(&reply_ok(3, &[]), Some(3)), Ok(()));
    }

    #[test]
    fn read_reply_inline_and_chunked() {
        let data = [0x5au8; 6];
        // Inline: status, no attributes, count, eof, data<> with padding.
        let mut res = words(&[NFS3_OK, 0, 6, 1, 6]);
        res.extend_from_slice(&data);
        res.extend_from_slice(&[0, 0]);
        let rep = reply_ok(1, &res);
        let ok = parse_read(&rep, None, Some(1), 1 << 20).unwrap();
        assert_eq!((ok.count, ok.eof, ok.data), (6, true, &data[..]));
        // Chunked: the reduced reply ends at the length word.
        let red = reply_ok(1, &words(&[NFS3_OK, 0, 6, 0, 6]));
        let ok = parse_read(&red, Some(&data), Some(1), 1 << 20).unwrap();
        assert_eq!((ok.count, ok.eof, ok.data), (6, false, &data[..]));
        // Chunk length disagreeing with the length word, count disagreeing with data,
        // data above the limit, data missing.
        assert!(parse_read(&red, Some(&data[..5]), None, 1 << 20).is_err());
        let bad = reply_ok(1, &words(&[NFS3_OK, 0, 7, 0, 6]));
        assert!(parse_read(&bad, Some(&data), None, 1 << 20).is_err());
        assert!(parse_read(&rep, None, None, 4).is_err());
        assert!(parse_read(&red, None, None, 1 << 20).is_err());
        // Error status with attributes.
        let mut e = words(&[nfs3::NFS3ERR_IO, 1]);
        e.extend_from_slice(&fattr(0));
        assert_eq!(
            parse_read(&reply_ok(1, &e), None, None, 10),
            Err(ReplyError::Nfs(nfs3::NFS3ERR_IO))
        );
    }

    #[test]
    fn write_reply() {
        let mut res = words(&[NFS3_OK, 1]);
        res.extend_from_slice(&[0u8; WCC_ATTR_BYTES]);
        res.extend_from_slice(&words(&[1]));
        res.extend_from_slice(&fattr(4096));
        res.extend_from_slice(&words(&[4096, nfs3::FILE_SYNC, 1, 2]));
        let rep = reply_ok(4, &res);
        assert_eq!(
            parse_write(&rep, Some(4)),
            Ok(WriteOk {
                count: 4096,
                committed: nfs3::FILE_SYNC
            })
        );
        for k in 0..rep.len() {
            assert!(parse_write(&rep[..k], None).is_err());
        }
        let bad = reply_ok(4, &words(&[NFS3_OK, 0, 0, 10, 3, 0, 0]));
        assert!(parse_write(&bad, None).is_err(), "committed 3");
        let e = reply_ok(4, &words(&[nfs3::NFS3ERR_NOSPC, 0, 0]));
        assert_eq!(parse_write(&e, None), Err(ReplyError::Nfs(nfs3::NFS3ERR_NOSPC)));
    }

    #[test]
    fn create_getattr_mnt_getport_replies() {
        let mut res = words(&[NFS3_OK, 1, 4, 0xdead_beef, 0, 0, 0]);
        assert_eq!(
            parse_create(&reply_ok(1, &res), None),
            Ok(Some(0xdead_beefu32.to_be_bytes().to_vec()))
        );
        res = words(&[NFS3_OK, 0, 0, 0, 0]);
        assert_eq!(parse_create(&reply_ok(1, &res), None), Ok(None));
        let mut ga = words(&[NFS3_OK]);
        ga.extend_from_slice(&fattr(77));
        assert_eq!(parse_getattr(&reply_ok(1, &ga), None).unwrap().size, 77);

        let mut m = words(&[nfs3::MNT3_OK, 4, 0x0102_0304, 2, AUTH_SYS, AUTH_NONE]);
        assert_eq!(parse_mnt(&reply_ok(2, &m), Some(2)), Ok(vec![1, 2, 3, 4]));
        m = words(&[nfs3::MNT3ERR_ACCES]);
        assert_eq!(
            parse_mnt(&reply_ok(2, &m), None),
            Err(ReplyError::Mount(nfs3::MNT3ERR_ACCES))
        );
        m = words(&[nfs3::MNT3_OK, 4, 0, 1_000_000]);
        assert!(parse_mnt(&reply_ok(2, &m), None).is_err(), "absurd flavor count");
        m = words(&[nfs3::MNT3_OK, 65]);
        assert!(parse_mnt(&reply_ok(2, &m), None).is_err(), "handle too long");

        assert_eq!(parse_getport(&reply_ok(5, &words(&[20048])), Some(5)), Ok(20048));
        assert!(parse_getport(&reply_ok(5, &words(&[0])), None).is_err());
        assert!(parse_getport(&reply_ok(5, &words(&[70000])), None).is_err());
        assert!(parse_getport(&reply_ok(5, &[]), None).is_err());
    }
}
