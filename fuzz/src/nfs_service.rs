//! The NFS gateway's service on peer input: whole RPC Calls through
//! `rpcrdma_apps::nfs::NfsService` over a fresh `mem` backend, and the
//! argument decoders of `rpcrdma_apps::nfs::xdr` on arbitrary bytes.
//!
//! Input: a mode byte, then up to [`MAX_CALLS`] Calls, each a big-endian
//! `u16` length and that many bytes. The mode byte picks the peer address
//! (inside or outside the export's network, or unknown), whether a data
//! buffer is given and its size, and the head buffer size. Inside a Call,
//! the 8 bytes `00 00 00 04 'F' 'H' '0' n` are replaced by the NFS handle
//! `n` of a small pre-built tree (0: the root, 1: a file with data, 2: a
//! directory, 3: a symlink), because backend handles carry a random
//! instance number the fuzzer could never guess.
//!
//! Invariants: nothing panics; a Call is dropped only if its RPC header does
//! not decode; a reply's head fits its buffer, is whole XDR words, and starts
//! with a reply header carrying the Call's XID; a data item fits the data
//! buffer; DDP items lie inside the reply; the data hint never exceeds the
//! READ limit. The decoders: whatever decodes borrows from inside the input.
//!
//! Called from the fuzzing thread only.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use dataplane::service::{CallView, ReplyBuilder, Service};
use dataplane::ConnId;
use proto::plan::Piece;
use proto::rpc;
use proto::xdr::Reader;
use rpcrdma_apps::backend::mem::MemBackend;
use rpcrdma_apps::backend::{Backend, CreateHow, Owner, SetAttr, FH_MAX_BYTES};
use rpcrdma_apps::config::Config;
use rpcrdma_apps::nfs::xdr::{
    diropargs3, sattr3, AccessArgs, CommitArgs, CreateArgs, LinkArgs, MkdirArgs, MknodArgs, ReaddirArgs, RenameArgs,
    SetattrArgs, SymlinkArgs, WriteHead,
};
use rpcrdma_apps::nfs::{NfsService, NfsShared};

/// Calls per input.
pub const MAX_CALLS: usize = 8;
/// The handle placeholder: an `nfs_fh3` of length 4 holding `FH0` and an index.
pub const FH_MARK: [u8; 7] = [0, 0, 0, 4, b'F', b'H', b'0'];

/// The configuration (parsed once): one export `/e` of backend `m`, open to 10.0.0.0/8,
/// AUTH_NONE allowed, no root squash; 64 KiB data buffers.
fn config() -> Config {
    const JSON: &str = r#"{
        "cores": [{ "cpu": 0, "role": "io" }],
        "listeners": { "fabric": [{ "address": "127.0.0.1", "port": 20049, "versions": [1, 2] }],
                       "nfs_tcp_port": 2049, "mount_tcp_port": 20048 },
        "fabric": { "provider": "sim" },
        "pools": [
            { "name": "r", "usage": "receive", "buffer_size_bytes": 4096, "count": 256,
              "page_size": "4K", "per_core_cache": 0 },
            { "name": "s", "usage": "send", "buffer_size_bytes": 8192, "count": 16,
              "page_size": "4K", "per_core_cache": 0 },
            { "name": "d", "usage": "data", "buffer_size_bytes": 65536, "count": 4,
              "page_size": "4K", "per_core_cache": 0 }
        ],
        "backends": [{ "name": "m", "type": "mem", "size_bytes": 262144 }],
        "exports": [{ "path": "/e", "backend": "m", "clients": ["10.0.0.0/8"],
                      "root_squash": false, "allow_auth_none": true }]
    }"#;
    static CFG: OnceLock<Config> = OnceLock::new();
    CFG.get_or_init(|| Config::from_json_str(JSON).expect("fuzz configuration"))
        .clone()
}

/// A fresh service over a small tree; returns it and the NFS handles of the
/// root, a file, a directory and a symlink.
pub(crate) fn setup() -> (NfsService, Vec<Vec<u8>>) {
    let b = Arc::new(MemBackend::new("m", 256 * 1024).expect("mem backend"));
    let root = b.root();
    let owner = Owner { uid: 1000, gid: 1000 };
    let open = SetAttr {
        mode: Some(0o777),
        ..SetAttr::default()
    };
    let _ = b.setattr(&root, &open);
    let (file, _) = b
        .create(&root, b"file", CreateHow::Unchecked(open), owner)
        .expect("file");
    let (dir, _) = b.mkdir(&root, b"dir", &open, owner).expect("dir");
    let (link, _) = b
        .symlink(&root, b"link", b"file", &SetAttr::default(), owner)
        .expect("link");
    let shared = NfsShared::new(&config(), vec![("m".into(), b.clone() as Arc<dyn Backend>)]).expect("shared");
    let svc = NfsService::new(shared.clone(), 0).expect("service");
    // Some file data, through the service's own path would need a Call; the
    // backend channel is simplest.
    let mut ch = b.open_channel(0).expect("channel");
    let _ = rpcrdma_apps::backend::write_sync(&mut *ch, &file, 0, &[0x5a; 10_000], Default::default());
    let ex = &shared.exports()[0];
    let handles = [root, file, dir, link]
        .iter()
        .map(|h| {
            let mut out = [0u8; FH_MAX_BYTES];
            let n = ex.encode_fh(h, &mut out).expect("handle fits");
            out[..n].to_vec()
        })
        .collect();
    (svc, handles)
}

/// Replace every handle placeholder in `call` by the handle it names.
pub(crate) fn substitute(call: &[u8], handles: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(call.len() + 64);
    let mut i = 0;
    while i < call.len() {
        if call[i..].starts_with(&FH_MARK) && i + 8 <= call.len() {
            let h = &handles[usize::from(call[i + 7]) % handles.len()];
            out.extend_from_slice(&(h.len() as u32).to_be_bytes());
            out.extend_from_slice(h);
            out.resize(out.len() + (4 - h.len() % 4) % 4, 0);
            i += 8;
        } else {
            out.push(call[i]);
            i += 1;
        }
    }
    out
}

/// Run one Call and check the reply's invariants; `head` and `data` are the
/// reply buffers (their lengths are the capacities given to the service).
pub(crate) fn one_call(svc: &mut NfsService, msg: &[u8], peer: Option<IpAddr>, head: &mut [u8], data: &mut [u8]) {
    let (head_cap, data_cap) = (head.len(), data.len());
    let piece = [Piece::Inline {
        start: 0,
        len: msg.len() as u32,
    }];
    let view = CallView::contiguous(ConnId(0), peer, 1, 0, msg, &piece);
    let hint = svc.reply_data_hint(&view);
    assert!(
        hint <= svc.shared().max_io_bytes() as usize,
        "data hint over the READ limit"
    );
    let mut rb = ReplyBuilder::new(head, (data_cap > 0).then_some(data));
    let res = svc.handle_call(&view, &mut rb);
    let shape = rb.finish();
    match res {
        Err(_) => {
            // Dropped: only when no RPC call header can be read.
            let ok_header = matches!(rpc::peek_msg(msg), Ok((_, rpc::CALL))) && msg.len() >= rpc::CALL_FIXED_BYTES;
            assert!(
                !ok_header || rpc::decode_call(msg).is_err() || head_cap < rpc::REPLY_HEADER_MIN_BYTES + 8,
                "a call with a good header was dropped"
            );
        }
        Ok(()) => {
            let n = shape.head_len as usize;
            assert!(n <= head_cap, "head overflow");
            assert_eq!(n % 4, 0, "head is not whole XDR words");
            let (h, _) = rpc::decode_reply(&head[..n]).expect("reply header decodes");
            let xid = Reader::new(msg).u32("xid").expect("xid");
            assert_eq!(h.xid, xid, "reply XID");
            if shape.has_data {
                assert!(shape.data_len as usize <= data_cap, "data item over the buffer");
            }
            let end = shape.stream_len();
            for it in shape.items() {
                assert!(
                    u64::from(it.offset) + u64::from(it.len) <= end,
                    "DDP item outside the reply"
                );
            }
        }
    }
}

/// The argument decoders on arbitrary bytes: what decodes lies inside.
fn decoders(data: &[u8]) {
    let inside = |s: &[u8]| {
        let (a, b) = (data.as_ptr() as usize, s.as_ptr() as usize);
        s.is_empty() || (b >= a && b + s.len() <= a + data.len())
    };
    let r = || Reader::new(data);
    if let Ok(a) = diropargs3(&mut r()) {
        assert!(inside(a.dir) && inside(a.name));
    }
    let _ = sattr3(&mut r());
    if let Ok(a) = SetattrArgs::decode(&mut r()) {
        assert!(inside(a.object));
    }
    if let Ok(a) = AccessArgs::decode(&mut r()) {
        assert!(inside(a.object));
    }
    if let Ok(a) = WriteHead::decode(&mut r()) {
        assert!(inside(a.file) && a.stable <= 2);
    }
    if let Ok(a) = CreateArgs::decode(&mut r()) {
        assert!(inside(a.where_.name));
    }
    let _ = MkdirArgs::decode(&mut r());
    if let Ok(a) = SymlinkArgs::decode(&mut r()) {
        assert!(inside(a.target) && a.target.len() <= 4096);
    }
    let _ = MknodArgs::decode(&mut r());
    if let Ok(a) = RenameArgs::decode(&mut r()) {
        assert!(inside(a.from.name) && inside(a.to.name));
    }
    let _ = LinkArgs::decode(&mut r());
    let _ = ReaddirArgs::decode(&mut r(), false);
    let _ = ReaddirArgs::decode(&mut r(), true);
    let _ = CommitArgs::decode(&mut r());
}

/// The `nfs_service` target.
pub fn check_nfs_service(data: &[u8]) {
    decoders(data);
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    let peer: Option<IpAddr> = match mode & 3 {
        0 | 1 => Some("10.1.2.3".parse().expect("ip")),
        2 => Some("192.0.2.1".parse().expect("ip")),
        _ => None,
    };
    let data_cap = match (mode >> 2) & 3 {
        0 => 0,
        1 => 100,
        _ => 65_536,
    };
    let head_cap = if mode & 0x10 != 0 { 256 } else { 8192 };
    let (mut svc, handles) = setup();
    let mut head = vec![0u8; head_cap];
    let mut data = vec![0u8; data_cap];
    for _ in 0..MAX_CALLS {
        if rest.len() < 2 {
            break;
        }
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let call = substitute(&rest[2..2 + n], &handles);
        rest = &rest[2 + n..];
        one_call(&mut svc, &call, peer, &mut head, &mut data);
    }
}

/// Seeds: one input per procedure family, built from a small encoder.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    fn w(v: &mut Vec<u8>, x: u32) {
        v.extend_from_slice(&x.to_be_bytes());
    }
    fn opaque(v: &mut Vec<u8>, d: &[u8]) {
        w(v, d.len() as u32);
        v.extend_from_slice(d);
        v.resize(v.len() + (4 - d.len() % 4) % 4, 0);
    }
    fn fh(v: &mut Vec<u8>, n: u8) {
        v.extend_from_slice(&FH_MARK);
        v.push(n);
    }
    fn call(xid: u32, prog: u32, proc_: u32, sys: bool, args: &dyn Fn(&mut Vec<u8>)) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [xid, 0, 2, prog, 3, proc_] {
            w(&mut v, x);
        }
        if sys {
            // AUTH_SYS: stamp, machinename "fz", uid 1000, gid 1000, no gids.
            w(&mut v, 1);
            w(&mut v, 24);
            for x in [0, 2] {
                w(&mut v, x);
            }
            v.extend_from_slice(b"fz\0\0");
            for x in [1000, 1000, 0] {
                w(&mut v, x);
            }
        } else {
            w(&mut v, 0);
            w(&mut v, 0);
        }
        w(&mut v, 0);
        w(&mut v, 0);
        args(&mut v);
        v
    }
    let no_sattr = |v: &mut Vec<u8>| {
        for _ in 0..6 {
            w(v, 0);
        }
    };
    let nfs = |p: u32, a: &dyn Fn(&mut Vec<u8>)| call(p + 1, 100_003, p, true, a);
    let calls: Vec<(&'static str, Vec<Vec<u8>>)> = vec![
        (
            "null-and-mount",
            vec![
                call(1, 100_003, 0, false, &|_| {}),
                call(2, 100_005, 1, true, &|v| opaque(v, b"/e")),
                call(3, 100_005, 2, false, &|_| {}),
                call(4, 100_005, 5, false, &|_| {}),
            ],
        ),
        (
            "attrs",
            vec![
                nfs(1, &|v| fh(v, 1)),
                nfs(2, &|v| {
                    fh(v, 1);
                    w(v, 1);
                    w(v, 0o600);
                    for _ in 0..5 {
                        w(v, 0);
                    }
                    w(v, 0);
                }),
                nfs(4, &|v| {
                    fh(v, 2);
                    w(v, 0x3f);
                }),
            ],
        ),
        (
            "lookup-readlink",
            vec![
                nfs(3, &|v| {
                    fh(v, 0);
                    opaque(v, b"file");
                }),
                nfs(5, &|v| fh(v, 3)),
            ],
        ),
        (
            "read-write-commit",
            vec![
                nfs(7, &|v| {
                    fh(v, 1);
                    w(v, 0);
                    w(v, 100);
                    w(v, 5);
                    w(v, 2);
                    opaque(v, b"hello");
                }),
                nfs(6, &|v| {
                    fh(v, 1);
                    w(v, 0);
                    w(v, 0);
                    w(v, 4096);
                }),
                nfs(21, &|v| {
                    fh(v, 1);
                    w(v, 0);
                    w(v, 0);
                    w(v, 0);
                }),
            ],
        ),
        (
            "create-family",
            vec![
                nfs(8, &|v| {
                    fh(v, 2);
                    opaque(v, b"new");
                    w(v, 1);
                    no_sattr(v);
                }),
                nfs(9, &|v| {
                    fh(v, 2);
                    opaque(v, b"sub");
                    no_sattr(v);
                }),
                nfs(10, &|v| {
                    fh(v, 2);
                    opaque(v, b"sl");
                    no_sattr(v);
                    opaque(v, b"target");
                }),
                nfs(11, &|v| {
                    fh(v, 2);
                    opaque(v, b"fifo");
                    w(v, 7);
                    no_sattr(v);
                }),
            ],
        ),
        (
            "remove-rename-link",
            vec![
                nfs(15, &|v| {
                    fh(v, 1);
                    fh(v, 2);
                    opaque(v, b"hard");
                }),
                nfs(14, &|v| {
                    fh(v, 2);
                    opaque(v, b"hard");
                    fh(v, 0);
                    opaque(v, b"moved");
                }),
                nfs(12, &|v| {
                    fh(v, 0);
                    opaque(v, b"moved");
                }),
                nfs(13, &|v| {
                    fh(v, 0);
                    opaque(v, b"dir");
                }),
            ],
        ),
        (
            "readdir",
            vec![
                nfs(16, &|v| {
                    fh(v, 0);
                    for x in [0, 0, 0, 0, 1024] {
                        w(v, x);
                    }
                }),
                nfs(17, &|v| {
                    fh(v, 0);
                    for x in [0, 0, 0, 0, 1024, 4096] {
                        w(v, x);
                    }
                }),
            ],
        ),
        (
            "fs",
            vec![nfs(18, &|v| fh(v, 0)), nfs(19, &|v| fh(v, 0)), nfs(20, &|v| fh(v, 0))],
        ),
    ];
    calls
        .into_iter()
        .map(|(name, cs)| {
            let mut input = vec![0x08u8];
            for c in cs {
                input.extend_from_slice(&(c.len() as u16).to_be_bytes());
                input.extend_from_slice(&c);
            }
            (name, input)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join("nfs_service")
    }

    /// The committed seeds are what [`seeds`] builds (RPCRDMA_WRITE_SEEDS=1
    /// rewrites them).
    #[test]
    fn nfs_service_seeds_are_current() {
        let write = std::env::var("RPCRDMA_WRITE_SEEDS").is_ok();
        for (name, bytes) in seeds() {
            let path = dir().join(name);
            if write {
                std::fs::create_dir_all(dir()).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            } else {
                let on_disk = std::fs::read(&path).unwrap_or_default();
                assert_eq!(
                    on_disk,
                    bytes,
                    "{} is stale: RPCRDMA_WRITE_SEEDS=1 cargo test",
                    path.display()
                );
            }
        }
    }

    /// Every seed, every truncation, and every mode byte.
    #[test]
    fn nfs_service_seeds() {
        let mut n = 0;
        for e in std::fs::read_dir(dir()).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            for mode in [0u8, 2, 3, 0x08, 0x14, 0x1c] {
                let mut v = data.clone();
                v[0] = mode;
                check_nfs_service(&v);
            }
            for cut in (0..data.len()).step_by(7) {
                check_nfs_service(&data[..cut]);
            }
            n += 1;
        }
        assert!(n >= 8, "seeds missing");
    }

    /// The seeds reach the procedures: run through a service with an allowed
    /// peer, each succeeds at the RPC level.
    #[test]
    fn seeds_are_answered_with_success() {
        for (name, input) in seeds() {
            let (mut svc, handles) = setup();
            let mut rest = &input[1..];
            while rest.len() >= 2 {
                let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
                let call = substitute(&rest[2..2 + n], &handles);
                rest = &rest[2 + n..];
                let piece = [Piece::Inline {
                    start: 0,
                    len: call.len() as u32,
                }];
                let view = CallView::contiguous(ConnId(0), Some("10.0.0.1".parse().unwrap()), 1, 0, &call, &piece);
                let mut head = vec![0u8; 8192];
                let mut data = vec![0u8; 65_536];
                let mut rb = ReplyBuilder::new(&mut head, Some(&mut data[..]));
                svc.handle_call(&view, &mut rb).unwrap();
                let n = rb.finish().head_len as usize;
                let (h, _) = rpc::decode_reply(&head[..n]).unwrap();
                assert!(h.is_success(), "{name}: {h:?}");
            }
        }
    }
}
