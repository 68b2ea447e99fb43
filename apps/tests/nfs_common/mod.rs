//! Shared pieces of the NFS service tests: a configuration builder, the
//! backends under test, a client-side XDR encoder and reply decoder written
//! from RFC 1813 (independent of the server's code), typed NFSv3 and MOUNT
//! operations over any [`Transport`], and two transports: [`Direct`] (calls
//! handed to `NfsService` as one contiguous message, as the TCP server does)
//! and [`Engine`] (a requester and the responder engine on the sim or shm
//! fabric).
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use dataplane::requester::{CallId, CallOutcome, LinkState, Requester, RequesterConfig};
use dataplane::responder::{Responder, ResponderConfig};
use dataplane::service::{CallView, ReplyBuilder, Service};
use dataplane::sim::{SimConfig, SimFabric, SimNetwork};
use dataplane::{ConnId, Fabric};
use mempool::pool::{ClassId, Mempool, PoolPlan};
use mempool::region::{Region, RegionConfig};
use proto::header::Limits;
use proto::negotiate::VersionRange;
use proto::nfs3::{FILE_SYNC, UNSTABLE};
use proto::plan::{Piece, ReplyNeeds};
use proto::rpc::{self, AcceptedReply, AuthSysParms, RejectedReply, ReplyBody};
use proto::ulb::{DdpItem, Nfs3Binding, UpperLayerBinding};
use proto::xdr::{Reader, Writer};
use rpcrdma_apps::backend::{mem::MemBackend, Backend, CreateHow, SetAttr, SetTime, Time};
use rpcrdma_apps::config::Config;
use rpcrdma_apps::nfs::{NfsService, NfsShared};

pub const NFS: u32 = 100_003;
pub const MOUNT: u32 = 100_005;
pub const MIB: usize = 1 << 20;

// ---------------------------------------------------------------------------
// Configuration and backends
// ---------------------------------------------------------------------------

/// One export of a test configuration.
#[derive(Clone, Debug)]
pub struct Ex {
    pub path: &'static str,
    pub backend: &'static str,
    pub clients: Vec<&'static str>,
    pub read_only: bool,
    pub root_squash: bool,
    pub allow_auth_none: bool,
}

impl Ex {
    /// Read-write, root squashed, AUTH_SYS only, open to 127.0.0.0/8.
    pub fn new(path: &'static str, backend: &'static str) -> Ex {
        Ex {
            path,
            backend,
            clients: vec!["127.0.0.0/8"],
            read_only: false,
            root_squash: true,
            allow_auth_none: false,
        }
    }
}

pub const ANON: u32 = 65534;

/// A valid `cores.json` with `backends` (all `mem`; the objects passed to
/// `NfsShared::new` decide what they really are), `exports`, and a data pool
/// of `data_bytes` buffers.
pub fn config(backends: &[&str], exports: &[Ex], data_bytes: u32) -> Config {
    let b: Vec<serde_json::Value> = backends
        .iter()
        .map(|n| serde_json::json!({ "name": n, "type": "mem", "size_bytes": 1 << 24 }))
        .collect();
    let e: Vec<serde_json::Value> = exports
        .iter()
        .map(|x| {
            serde_json::json!({
                "path": x.path, "backend": x.backend, "clients": x.clients,
                "read_only": x.read_only, "root_squash": x.root_squash,
                "allow_auth_none": x.allow_auth_none,
            })
        })
        .collect();
    let v = serde_json::json!({
        "cores": [{ "cpu": 0, "role": "io" }],
        "listeners": { "fabric": [{ "address": "127.0.0.1", "port": 20049, "versions": [1, 2] }],
                       "nfs_tcp_port": 2049, "mount_tcp_port": 20048 },
        "fabric": { "provider": "sim" },
        "pools": [
            // 16 cached + 2 x 128 credits: one connection at full credits
            // (docs/CONFIG.md, "Capacity").
            { "name": "recv", "usage": "receive", "buffer_size_bytes": 4096, "count": 272,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "send", "usage": "send", "buffer_size_bytes": 8192, "count": 256,
              "page_size": "4K", "per_core_cache": 16 },
            { "name": "data", "usage": "data", "buffer_size_bytes": data_bytes, "count": 16,
              "page_size": "4K", "per_core_cache": 4 }
        ],
        "backends": b,
        "exports": e,
    });
    Config::from_json_value(&v).expect("test configuration")
}

/// Which backend a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mem,
    Uring,
}

/// A backend under test and what keeps its storage alive.
pub struct Store {
    pub kind: Kind,
    pub backend: Arc<dyn Backend>,
    pub dir: Option<TempDir>,
}

/// A directory removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "rpcrdma-nfs-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh backend of `kind` named `name`.
pub fn store(kind: Kind, name: &str) -> Store {
    match kind {
        Kind::Mem => Store {
            kind,
            backend: Arc::new(MemBackend::new(name, 64 << 20).unwrap()),
            dir: None,
        },
        Kind::Uring => {
            let dir = TempDir::new(name);
            let backend = open_uring(name, &dir.0);
            Store {
                kind,
                backend,
                dir: Some(dir),
            }
        }
    }
}

/// Open (or reopen) a `uring` backend on `dir`.
pub fn open_uring(name: &str, dir: &std::path::Path) -> Arc<dyn Backend> {
    Arc::new(rpcrdma_apps::backend::uring::UringBackend::open(name, dir, 64, false).unwrap())
}

/// The backends every test runs against.
pub const KINDS: [Kind; 2] = [Kind::Mem, Kind::Uring];

/// `NfsShared` over `stores` (named b0, b1, ...) with `exports`.
pub fn shared(stores: &[&Store], exports: &[Ex], data_bytes: u32) -> Arc<NfsShared> {
    let names: Vec<String> = (0..stores.len()).map(|i| format!("b{i}")).collect();
    let name_refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let cfg = config(&name_refs, exports, data_bytes);
    let list = stores.iter().zip(names).map(|(s, n)| (n, s.backend.clone())).collect();
    NfsShared::new(&cfg, list).unwrap()
}

// ---------------------------------------------------------------------------
// Client-side XDR
// ---------------------------------------------------------------------------

/// Credentials a test call carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    None,
    Sys {
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
    },
    /// Any flavor and body, as given.
    Raw {
        flavor: u32,
        body: Vec<u8>,
    },
}

impl Auth {
    pub fn sys(uid: u32, gid: u32) -> Auth {
        Auth::Sys { uid, gid, gids: vec![] }
    }
    pub fn root() -> Auth {
        Auth::sys(0, 0)
    }
}

/// An XDR encoder into a growing buffer.
#[derive(Clone, Debug, Default)]
pub struct Enc {
    pub b: Vec<u8>,
}

impl Enc {
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.b.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.b.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u32(v as u32)
    }
    /// Variable-length opaque / string: length, bytes, zero padding.
    pub fn opaque(&mut self, d: &[u8]) -> &mut Self {
        self.u32(d.len() as u32);
        self.fixed(d)
    }
    /// Fixed-length opaque: bytes, zero padding.
    pub fn fixed(&mut self, d: &[u8]) -> &mut Self {
        self.b.extend_from_slice(d);
        self.b.resize(self.b.len() + (4 - d.len() % 4) % 4, 0);
        self
    }
    fn time(&mut self, t: SetTime) -> &mut Self {
        match t {
            SetTime::DontChange => self.u32(0),
            SetTime::ServerTime => self.u32(1),
            SetTime::Client(Time { secs, nsecs }) => self.u32(2).u32(secs).u32(nsecs),
        }
    }
    /// `sattr3`.
    pub fn sattr(&mut self, s: &SetAttr) -> &mut Self {
        for v in [s.mode, s.uid, s.gid] {
            match v {
                Some(x) => self.u32(1).u32(x),
                None => self.u32(0),
            };
        }
        match s.size {
            Some(x) => self.u32(1).u64(x),
            None => self.u32(0),
        };
        self.time(s.atime).time(s.mtime)
    }
    /// `diropargs3`.
    pub fn dirop(&mut self, dir: &[u8], name: &[u8]) -> &mut Self {
        self.opaque(dir).opaque(name)
    }
}

/// An RPC call header (RFC 5531 section 9).
pub fn call_header(xid: u32, prog: u32, vers: u32, proc_: u32, auth: &Auth) -> Enc {
    let mut e = Enc::default();
    e.u32(xid).u32(0).u32(2).u32(prog).u32(vers).u32(proc_);
    match auth {
        Auth::None => {
            e.u32(0).u32(0);
        }
        Auth::Sys { uid, gid, gids } => {
            let p = AuthSysParms::new(0x1234, b"testhost", *uid, *gid, gids).unwrap();
            let mut body = [0u8; 512];
            let mut w = Writer::new(&mut body);
            p.encode(&mut w).unwrap();
            let n = w.len();
            e.u32(1).opaque(&body[..n]);
        }
        Auth::Raw { flavor, body } => {
            e.u32(*flavor).opaque(body);
        }
    }
    e.u32(0).u32(0);
    e
}

/// How an RPC call was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcStat {
    Success,
    ProgUnavail,
    ProgMismatch(u32, u32),
    ProcUnavail,
    GarbageArgs,
    SystemErr,
    RpcMismatch(u32, u32),
    AuthError(u32),
}

/// A decoded reply: its XID, RPC status and results.
#[derive(Clone, Debug)]
pub struct Reply {
    pub xid: u32,
    pub stat: RpcStat,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn parse(bytes: &[u8]) -> Reply {
        let (h, at) = rpc::decode_reply(bytes).unwrap_or_else(|e| panic!("bad reply ({} bytes): {e}", bytes.len()));
        let stat = match h.body {
            ReplyBody::Accepted { data, .. } => match data {
                AcceptedReply::Success => RpcStat::Success,
                AcceptedReply::ProgUnavail => RpcStat::ProgUnavail,
                AcceptedReply::ProgMismatch { low, high } => RpcStat::ProgMismatch(low, high),
                AcceptedReply::ProcUnavail => RpcStat::ProcUnavail,
                AcceptedReply::GarbageArgs => RpcStat::GarbageArgs,
                AcceptedReply::SystemErr => RpcStat::SystemErr,
            },
            ReplyBody::Denied(RejectedReply::RpcMismatch { low, high }) => RpcStat::RpcMismatch(low, high),
            ReplyBody::Denied(RejectedReply::AuthError(s)) => RpcStat::AuthError(s.as_u32()),
        };
        Reply {
            xid: h.xid,
            stat,
            body: bytes[at..].to_vec(),
        }
    }

    /// The results decoder; panics unless the call succeeded at the RPC level.
    pub fn dec(&self) -> Dec<'_> {
        assert_eq!(self.stat, RpcStat::Success, "RPC-level failure");
        Dec {
            r: Reader::new(&self.body),
        }
    }
}

/// `fattr3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Fattr {
    pub ftype: u32,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub used: u64,
    pub rdev: (u32, u32),
    pub fsid: u64,
    pub fileid: u64,
    pub atime: (u32, u32),
    pub mtime: (u32, u32),
    pub ctime: (u32, u32),
}

/// `wcc_attr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WccAttr {
    pub size: u64,
    pub mtime: (u32, u32),
    pub ctime: (u32, u32),
}

/// A results decoder; every accessor panics on malformed results.
#[derive(Debug)]
pub struct Dec<'a> {
    pub r: Reader<'a>,
}

impl Dec<'_> {
    pub fn u32(&mut self) -> u32 {
        self.r.u32("u32").unwrap()
    }
    pub fn u64(&mut self) -> u64 {
        self.r.u64("u64").unwrap()
    }
    pub fn bool(&mut self) -> bool {
        self.r.bool("bool").unwrap()
    }
    pub fn opaque(&mut self) -> Vec<u8> {
        self.r.opaque_var(u32::MAX, "opaque").unwrap().to_vec()
    }
    pub fn fixed(&mut self, n: usize) -> Vec<u8> {
        self.r.opaque_fixed(n, "fixed").unwrap().to_vec()
    }
    fn time(&mut self) -> (u32, u32) {
        (self.u32(), self.u32())
    }
    pub fn fattr(&mut self) -> Fattr {
        Fattr {
            ftype: self.u32(),
            mode: self.u32(),
            nlink: self.u32(),
            uid: self.u32(),
            gid: self.u32(),
            size: self.u64(),
            used: self.u64(),
            rdev: (self.u32(), self.u32()),
            fsid: self.u64(),
            fileid: self.u64(),
            atime: self.time(),
            mtime: self.time(),
            ctime: self.time(),
        }
    }
    pub fn post_op_attr(&mut self) -> Option<Fattr> {
        self.bool().then(|| self.fattr())
    }
    pub fn pre_op_attr(&mut self) -> Option<WccAttr> {
        self.bool().then(|| WccAttr {
            size: self.u64(),
            mtime: self.time(),
            ctime: self.time(),
        })
    }
    pub fn wcc(&mut self) -> (Option<WccAttr>, Option<Fattr>) {
        (self.pre_op_attr(), self.post_op_attr())
    }
    pub fn post_op_fh(&mut self) -> Option<Vec<u8>> {
        self.bool().then(|| self.opaque())
    }
    /// Everything was consumed.
    pub fn end(&self) {
        assert_eq!(self.r.remaining(), 0, "trailing bytes in the results");
    }
}

// ---------------------------------------------------------------------------
// Transports
// ---------------------------------------------------------------------------

/// Carries one encoded Call and returns the whole (reassembled) Reply, or
/// `None` when the service dropped the Call.
pub trait Transport {
    fn roundtrip(&mut self, call: &[u8]) -> Option<Vec<u8>>;
}

/// The namespace methods of [`Backend`] forwarded to `self.inner` (kind,
/// root, attributes, lookups, creation, removal, renames, links, listing,
/// FSSTAT): for test wrappers that change only commit, sync or channels.
/// Used inside `impl Backend for Wrapper { forward_backend_namespace!(); ... }`;
/// the names it uses (`FileHandle`, `Attr`, ...) must be in scope there.
#[allow(unused_macros)]
macro_rules! forward_backend_namespace {
    () => {
        fn getattr(&self, fh: &FileHandle) -> FsResult<Attr> {
            self.inner.getattr(fh)
        }
        fn setattr_checked(
            &self,
            fh: &FileHandle,
            set: &SetAttr,
            check: &mut dyn FnMut(&Attr) -> Result<(), u32>,
        ) -> FsResult<(Attr, Result<Attr, u32>)> {
            self.inner.setattr_checked(fh, set, check)
        }
        fn change_checked(
            &self,
            dir: &FileHandle,
            change: rpcrdma_apps::backend::DirChange<'_>,
            check: &mut dyn FnMut(&rpcrdma_apps::backend::DirPre<'_>) -> Result<Owner, u32>,
        ) -> FsResult<rpcrdma_apps::backend::DirChanged> {
            self.inner.change_checked(dir, change, check)
        }
        fn lookup(&self, dir: &FileHandle, name: &[u8]) -> FsResult<(FileHandle, Attr)> {
            self.inner.lookup(dir, name)
        }
        forward_backend_plain!();
    };
}
#[allow(unused_imports)]
pub(crate) use forward_backend_namespace;

/// The I/O side of [`Backend`] forwarded to `self.inner` (`commit`,
/// `sync_all`, `open_channel`): for wrappers that change only namespace
/// calls. Used as [`forward_backend_plain`] is.
#[allow(unused_macros)]
macro_rules! forward_backend_io {
    () => {
        fn commit(&self, fh: &FileHandle) -> FsResult<()> {
            self.inner.commit(fh)
        }
        fn sync_all(&self) -> FsResult<()> {
            self.inner.sync_all()
        }
        fn open_channel(&self, core: usize) -> FsResult<Box<dyn IoChannel>> {
            self.inner.open_channel(core)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use forward_backend_io;

/// [`forward_backend_namespace`] without the calls that read attributes or
/// look names up (`getattr`, `setattr_checked`, `change_checked`,
/// `lookup`): for wrappers that change those.
#[allow(unused_macros)]
macro_rules! forward_backend_plain {
    () => {
        fn kind(&self) -> &'static str {
            self.inner.kind()
        }
        fn root(&self) -> FileHandle {
            self.inner.root()
        }
        fn setattr(&self, fh: &FileHandle, set: &SetAttr) -> FsResult<Attr> {
            self.inner.setattr(fh, set)
        }
        fn features(&self) -> rpcrdma_apps::backend::Features {
            self.inner.features()
        }
        fn readlink(&self, fh: &FileHandle, out: &mut [u8]) -> FsResult<usize> {
            self.inner.readlink(fh, out)
        }
        fn create(&self, dir: &FileHandle, name: &[u8], how: CreateHow, owner: Owner) -> FsResult<(FileHandle, Attr)> {
            self.inner.create(dir, name, how, owner)
        }
        fn mkdir(&self, dir: &FileHandle, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<(FileHandle, Attr)> {
            self.inner.mkdir(dir, name, set, owner)
        }
        fn symlink(
            &self,
            dir: &FileHandle,
            name: &[u8],
            target: &[u8],
            set: &SetAttr,
            owner: Owner,
        ) -> FsResult<(FileHandle, Attr)> {
            self.inner.symlink(dir, name, target, set, owner)
        }
        fn mknod(
            &self,
            dir: &FileHandle,
            name: &[u8],
            kind: NodeKind,
            set: &SetAttr,
            owner: Owner,
        ) -> FsResult<(FileHandle, Attr)> {
            self.inner.mknod(dir, name, kind, set, owner)
        }
        fn remove(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
            self.inner.remove(dir, name)
        }
        fn rmdir(&self, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
            self.inner.rmdir(dir, name)
        }
        fn rename(&self, from_dir: &FileHandle, from: &[u8], to_dir: &FileHandle, to: &[u8]) -> FsResult<()> {
            self.inner.rename(from_dir, from, to_dir, to)
        }
        fn link(&self, fh: &FileHandle, dir: &FileHandle, name: &[u8]) -> FsResult<()> {
            self.inner.link(fh, dir, name)
        }
        fn readdir(&self, dir: &FileHandle, cookie: u64, sink: &mut dyn FnMut(DirEntry<'_>) -> bool) -> FsResult<bool> {
            self.inner.readdir(dir, cookie, sink)
        }
        fn cookie_verifier(&self, dir: &FileHandle) -> FsResult<u64> {
            self.inner.cookie_verifier(dir)
        }
        fn fsstat(&self) -> FsResult<FsStat> {
            self.inner.fsstat()
        }
        fn allocate(&self, fh: &FileHandle, offset: u64, len: u64) -> FsResult<()> {
            self.inner.allocate(fh, offset, len)
        }
        fn deallocate(&self, fh: &FileHandle, offset: u64, len: u64) -> FsResult<()> {
            self.inner.deallocate(fh, offset, len)
        }
        fn seek(&self, fh: &FileHandle, offset: u64, data: bool) -> FsResult<Option<u64>> {
            self.inner.seek(fh, offset, data)
        }
        fn copy(&self, src: &FileHandle, src_off: u64, dst: &FileHandle, dst_off: u64, count: u64) -> FsResult<u64> {
            self.inner.copy(src, src_off, dst, dst_off, count)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use forward_backend_plain;

/// NFS or MOUNT over one TCP connection to `127.0.0.1:port`, one record
/// per message (RFC 5531 s11 record marking; replies may come in several
/// fragments).
pub struct Tcp(pub std::net::TcpStream);

impl Tcp {
    pub fn connect(port: u16) -> Tcp {
        let s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        Tcp(s)
    }
}

impl Transport for Tcp {
    fn roundtrip(&mut self, call: &[u8]) -> Option<Vec<u8>> {
        use std::io::{Read, Write};
        let mark = (0x8000_0000u32 | call.len() as u32).to_be_bytes();
        self.0.write_all(&mark).unwrap();
        self.0.write_all(call).unwrap();
        let mut out = Vec::new();
        loop {
            let mut m = [0u8; 4];
            self.0.read_exact(&mut m).ok()?;
            let w = u32::from_be_bytes(m);
            let at = out.len();
            out.resize(at + (w & 0x7fff_ffff) as usize, 0);
            self.0.read_exact(&mut out[at..]).unwrap();
            if w & 0x8000_0000 != 0 {
                return Some(out);
            }
        }
    }
}

/// Which data buffer [`Direct`] gives the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataBuf {
    /// One of this size when `reply_data_hint` asks (as the engine does).
    OnHint(usize),
    /// Always one of this size (as the TCP server does).
    Always(usize),
    /// Never.
    Never,
}

/// Calls straight into an `NfsService`, each as one contiguous message.
#[derive(Debug)]
pub struct Direct {
    pub svc: NfsService,
    pub peer: Option<IpAddr>,
    pub head_bytes: usize,
    pub data: DataBuf,
    /// Of the last reply: the hint, and its shape's DDP items (offset, len).
    pub last_hint: usize,
    pub last_items: Vec<(u32, u32)>,
    pub last_has_data: bool,
}

impl Direct {
    pub fn new(shared: &Arc<NfsShared>) -> Direct {
        Direct {
            svc: NfsService::new(shared.clone(), 0).unwrap(),
            peer: Some("127.0.0.1".parse().unwrap()),
            head_bytes: 8192,
            data: DataBuf::OnHint(MIB),
            last_hint: 0,
            last_items: vec![],
            last_has_data: false,
        }
    }
}

impl Transport for Direct {
    fn roundtrip(&mut self, call: &[u8]) -> Option<Vec<u8>> {
        let piece = [Piece::Inline {
            start: 0,
            len: call.len() as u32,
        }];
        let xid = Reader::new(call).u32("xid").unwrap_or(0);
        let view = CallView::contiguous(ConnId(0), self.peer, 1, xid, call, &piece);
        let hint = self.svc.reply_data_hint(&view);
        self.last_hint = hint;
        let mut head = vec![0u8; self.head_bytes];
        let size = match self.data {
            DataBuf::OnHint(n) if hint > 0 => n,
            DataBuf::Always(n) => n,
            _ => 0,
        };
        let mut data = vec![0u8; size];
        let mut rb = ReplyBuilder::new(&mut head, (size > 0).then_some(&mut data[..]));
        let res = self.svc.handle_call(&view, &mut rb);
        let shape = rb.finish();
        self.last_items = shape.items().iter().map(|i| (i.offset, i.len)).collect();
        self.last_has_data = shape.has_data;
        res.ok()?;
        let mut out = head[..shape.head_len as usize].to_vec();
        if shape.has_data {
            out.extend_from_slice(&data[..shape.data_len as usize]);
            out.resize(out.len() + shape.pad() as usize, 0);
        }
        assert_eq!(out.len() as u64, shape.stream_len());
        Some(out)
    }
}

// ---------------------------------------------------------------------------
// Typed client
// ---------------------------------------------------------------------------

/// A listed entry: (fileid, name, cookie, attributes, handle).
pub type Entry = (u64, Vec<u8>, u64, Option<Fattr>, Option<Vec<u8>>);

/// A directory listing.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub dir_attr: Option<Fattr>,
    pub verf: u64,
    pub entries: Vec<Entry>,
    pub eof: bool,
}

/// WRITE results.
#[derive(Clone, Debug)]
pub struct Written {
    pub wcc: (Option<WccAttr>, Option<Fattr>),
    pub count: u32,
    pub committed: u32,
    pub verf: [u8; 8],
}

/// NFSv3 and MOUNT v3 operations over a transport; each decodes the whole
/// result, so a malformed reply fails the test.
pub struct Client<T: Transport> {
    pub t: T,
    pub auth: Auth,
    pub xid: u32,
}

impl<T: Transport> Client<T> {
    pub fn new(t: T) -> Self {
        Client {
            t,
            auth: Auth::sys(1000, 1000),
            xid: 1,
        }
    }

    /// Send a raw message; the decoded reply (its XID must match).
    pub fn raw(&mut self, msg: &[u8]) -> Option<Reply> {
        let bytes = self.t.roundtrip(msg)?;
        let r = Reply::parse(&bytes);
        assert_eq!(r.xid, u32::from_be_bytes(msg[..4].try_into().unwrap()), "xid");
        Some(r)
    }

    /// A call of `prog` version `vers` with this client's credentials.
    pub fn call(&mut self, prog: u32, vers: u32, proc_: u32, args: impl FnOnce(&mut Enc)) -> Reply {
        self.xid = self.xid.wrapping_add(1);
        let mut e = call_header(self.xid, prog, vers, proc_, &self.auth);
        args(&mut e);
        self.raw(&e.b).expect("call dropped")
    }

    pub fn nfs(&mut self, proc_: u32, args: impl FnOnce(&mut Enc)) -> Reply {
        self.call(NFS, 3, proc_, args)
    }

    /// MNT: the root handle and the auth flavors.
    pub fn mnt(&mut self, path: &str) -> Result<(Vec<u8>, Vec<u32>), u32> {
        let r = self.call(MOUNT, 3, 1, |e| {
            e.opaque(path.as_bytes());
        });
        let mut d = r.dec();
        let st = d.u32();
        if st != 0 {
            d.end();
            return Err(st);
        }
        let fh = d.opaque();
        let n = d.u32();
        let flavors = (0..n).map(|_| d.u32()).collect();
        d.end();
        Ok((fh, flavors))
    }

    /// DUMP: (host, path) pairs.
    pub fn dump(&mut self) -> Vec<(String, String)> {
        let r = self.call(MOUNT, 3, 2, |_| {});
        let mut d = r.dec();
        let mut v = vec![];
        while d.bool() {
            let h = String::from_utf8(d.opaque()).unwrap();
            let p = String::from_utf8(d.opaque()).unwrap();
            v.push((h, p));
        }
        d.end();
        v
    }

    /// EXPORT: (path, groups).
    pub fn exports(&mut self) -> Vec<(String, Vec<String>)> {
        let r = self.call(MOUNT, 3, 5, |_| {});
        let mut d = r.dec();
        let mut v = vec![];
        while d.bool() {
            let p = String::from_utf8(d.opaque()).unwrap();
            let mut g = vec![];
            while d.bool() {
                g.push(String::from_utf8(d.opaque()).unwrap());
            }
            v.push((p, g));
        }
        d.end();
        v
    }

    pub fn umnt(&mut self, path: &str) {
        let r = self.call(MOUNT, 3, 3, |e| {
            e.opaque(path.as_bytes());
        });
        r.dec().end();
    }

    pub fn umntall(&mut self) {
        let r = self.call(MOUNT, 3, 4, |_| {});
        r.dec().end();
    }

    pub fn getattr(&mut self, fh: &[u8]) -> Result<Fattr, u32> {
        let r = self.nfs(1, |e| {
            e.opaque(fh);
        });
        let mut d = r.dec();
        let st = d.u32();
        let res = if st == 0 { Ok(d.fattr()) } else { Err(st) };
        d.end();
        res
    }

    /// SETATTR: status and wcc_data.
    pub fn setattr(
        &mut self,
        fh: &[u8],
        s: &SetAttr,
        guard: Option<(u32, u32)>,
    ) -> (u32, (Option<WccAttr>, Option<Fattr>)) {
        let r = self.nfs(2, |e| {
            e.opaque(fh).sattr(s);
            match guard {
                Some((a, b)) => e.u32(1).u32(a).u32(b),
                None => e.u32(0),
            };
        });
        let mut d = r.dec();
        let st = d.u32();
        let wcc = d.wcc();
        d.end();
        (st, wcc)
    }

    pub fn lookup(&mut self, dir: &[u8], name: &[u8]) -> Result<(Vec<u8>, Fattr), u32> {
        let r = self.nfs(3, |e| {
            e.dirop(dir, name);
        });
        let mut d = r.dec();
        let st = d.u32();
        let res = if st == 0 {
            let fh = d.opaque();
            let a = d.post_op_attr().expect("object attributes");
            d.post_op_attr().expect("directory attributes");
            Ok((fh, a))
        } else {
            d.post_op_attr();
            Err(st)
        };
        d.end();
        res
    }

    pub fn access(&mut self, fh: &[u8], mask: u32) -> Result<u32, u32> {
        let r = self.nfs(4, |e| {
            e.opaque(fh).u32(mask);
        });
        let mut d = r.dec();
        let st = d.u32();
        d.post_op_attr();
        let res = if st == 0 { Ok(d.u32()) } else { Err(st) };
        d.end();
        res
    }

    pub fn readlink(&mut self, fh: &[u8]) -> Result<Vec<u8>, u32> {
        let r = self.nfs(5, |e| {
            e.opaque(fh);
        });
        let mut d = r.dec();
        let st = d.u32();
        d.post_op_attr();
        let res = if st == 0 { Ok(d.opaque()) } else { Err(st) };
        d.end();
        res
    }

    /// READ: data, eof, file attributes.
    pub fn read(&mut self, fh: &[u8], off: u64, count: u32) -> Result<(Vec<u8>, bool, Fattr), u32> {
        let r = self.nfs(6, |e| {
            e.opaque(fh).u64(off).u32(count);
        });
        let mut d = r.dec();
        let st = d.u32();
        let a = d.post_op_attr();
        let res = if st == 0 {
            let n = d.u32();
            let eof = d.bool();
            let data = d.opaque();
            assert_eq!(n as usize, data.len(), "READ count and data length");
            Ok((data, eof, a.expect("file attributes")))
        } else {
            Err(st)
        };
        d.end();
        res
    }

    pub fn write(&mut self, fh: &[u8], off: u64, data: &[u8], stable: u32) -> Result<Written, u32> {
        let r = self.nfs(7, |e| {
            e.opaque(fh).u64(off).u32(data.len() as u32).u32(stable).opaque(data);
        });
        let mut d = r.dec();
        let st = d.u32();
        let wcc = d.wcc();
        let res = if st == 0 {
            let count = d.u32();
            let committed = d.u32();
            let verf = d.fixed(8).try_into().unwrap();
            Ok(Written {
                wcc,
                count,
                committed,
                verf,
            })
        } else {
            Err(st)
        };
        d.end();
        res
    }

    /// The common shape of CREATE, MKDIR, SYMLINK, MKNOD results.
    fn created(r: Reply) -> Result<(Vec<u8>, Fattr), u32> {
        let mut d = r.dec();
        let st = d.u32();
        let res = if st == 0 {
            let fh = d.post_op_fh().expect("handle");
            let a = d.post_op_attr().expect("attributes");
            let (pre, post) = d.wcc();
            assert!(pre.is_some() && post.is_some(), "dir_wcc");
            Ok((fh, a))
        } else {
            d.wcc();
            Err(st)
        };
        d.end();
        res
    }

    pub fn create(&mut self, dir: &[u8], name: &[u8], how: CreateHow) -> Result<(Vec<u8>, Fattr), u32> {
        let r = self.nfs(8, |e| {
            e.dirop(dir, name);
            match how {
                CreateHow::Unchecked(s) => e.u32(0).sattr(&s),
                CreateHow::Guarded(s) => e.u32(1).sattr(&s),
                CreateHow::Exclusive(v) => e.u32(2).fixed(&v),
            };
        });
        Self::created(r)
    }

    /// CREATE UNCHECKED with a mode.
    pub fn mkfile(&mut self, dir: &[u8], name: &str, mode: u32) -> Result<(Vec<u8>, Fattr), u32> {
        self.create(dir, name.as_bytes(), CreateHow::Unchecked(mode_attr(mode)))
    }

    pub fn mkdir(&mut self, dir: &[u8], name: &str, mode: u32) -> Result<(Vec<u8>, Fattr), u32> {
        let r = self.nfs(9, |e| {
            e.dirop(dir, name.as_bytes()).sattr(&mode_attr(mode));
        });
        Self::created(r)
    }

    pub fn symlink(&mut self, dir: &[u8], name: &str, target: &[u8]) -> Result<(Vec<u8>, Fattr), u32> {
        let r = self.nfs(10, |e| {
            e.dirop(dir, name.as_bytes()).sattr(&SetAttr::default()).opaque(target);
        });
        Self::created(r)
    }

    /// MKNOD of `ftype` (3 BLK, 4 CHR, 6 SOCK, 7 FIFO, others as given).
    pub fn mknod(&mut self, dir: &[u8], name: &str, ftype: u32, dev: (u32, u32)) -> Result<(Vec<u8>, Fattr), u32> {
        let r = self.nfs(11, |e| {
            e.dirop(dir, name.as_bytes()).u32(ftype);
            match ftype {
                3 | 4 => {
                    e.sattr(&mode_attr(0o644)).u32(dev.0).u32(dev.1);
                }
                6 | 7 => {
                    e.sattr(&mode_attr(0o644));
                }
                _ => {}
            }
        });
        Self::created(r)
    }

    fn wcc_status(r: Reply) -> u32 {
        let mut d = r.dec();
        let st = d.u32();
        let (pre, post) = d.wcc();
        if st == 0 {
            assert!(pre.is_some() && post.is_some(), "wcc_data of a success");
        }
        d.end();
        st
    }

    pub fn remove(&mut self, dir: &[u8], name: &str) -> u32 {
        let r = self.nfs(12, |e| {
            e.dirop(dir, name.as_bytes());
        });
        Self::wcc_status(r)
    }

    pub fn rmdir(&mut self, dir: &[u8], name: &str) -> u32 {
        let r = self.nfs(13, |e| {
            e.dirop(dir, name.as_bytes());
        });
        Self::wcc_status(r)
    }

    pub fn rename(&mut self, fdir: &[u8], from: &str, tdir: &[u8], to: &str) -> u32 {
        let r = self.nfs(14, |e| {
            e.dirop(fdir, from.as_bytes()).dirop(tdir, to.as_bytes());
        });
        let mut d = r.dec();
        let st = d.u32();
        d.wcc();
        d.wcc();
        d.end();
        st
    }

    pub fn link(&mut self, file: &[u8], dir: &[u8], name: &str) -> u32 {
        let r = self.nfs(15, |e| {
            e.opaque(file).dirop(dir, name.as_bytes());
        });
        let mut d = r.dec();
        let st = d.u32();
        d.post_op_attr();
        d.wcc();
        d.end();
        st
    }

    fn listing(r: Reply, plus: bool) -> Result<Listing, u32> {
        let mut d = r.dec();
        let st = d.u32();
        let dir_attr = d.post_op_attr();
        if st != 0 {
            d.end();
            return Err(st);
        }
        let mut l = Listing {
            dir_attr,
            verf: d.u64(),
            ..Listing::default()
        };
        while d.bool() {
            let id = d.u64();
            let name = d.opaque();
            let cookie = d.u64();
            let (a, h) = if plus {
                (d.post_op_attr(), d.post_op_fh())
            } else {
                (None, None)
            };
            l.entries.push((id, name, cookie, a, h));
        }
        l.eof = d.bool();
        d.end();
        Ok(l)
    }

    pub fn readdir(&mut self, dir: &[u8], cookie: u64, verf: u64, count: u32) -> Result<Listing, u32> {
        let r = self.nfs(16, |e| {
            e.opaque(dir).u64(cookie).u64(verf).u32(count);
        });
        Self::listing(r, false)
    }

    pub fn readdirplus(
        &mut self,
        dir: &[u8],
        cookie: u64,
        verf: u64,
        dircount: u32,
        maxcount: u32,
    ) -> Result<Listing, u32> {
        let r = self.nfs(17, |e| {
            e.opaque(dir).u64(cookie).u64(verf).u32(dircount).u32(maxcount);
        });
        Self::listing(r, true)
    }

    /// Every name in `dir`, by READDIR pieces of `count` bytes.
    pub fn list_all(&mut self, dir: &[u8], count: u32) -> Vec<String> {
        let (mut cookie, mut verf, mut names) = (0u64, 0u64, vec![]);
        for _ in 0..100_000 {
            let l = self.readdir(dir, cookie, verf, count).expect("readdir");
            for (_, n, c, _, _) in &l.entries {
                names.push(String::from_utf8(n.clone()).unwrap());
                cookie = *c;
            }
            verf = l.verf;
            if l.eof {
                return names;
            }
        }
        panic!("listing never ended");
    }

    /// FSSTAT: (tbytes, fbytes, abytes, tfiles, ffiles, afiles).
    pub fn fsstat(&mut self, fh: &[u8]) -> Result<[u64; 6], u32> {
        let r = self.nfs(18, |e| {
            e.opaque(fh);
        });
        let mut d = r.dec();
        let st = d.u32();
        d.post_op_attr();
        let res = if st == 0 {
            let v = [d.u64(), d.u64(), d.u64(), d.u64(), d.u64(), d.u64()];
            d.u32();
            Ok(v)
        } else {
            Err(st)
        };
        d.end();
        res
    }

    /// FSINFO: [rtmax, rtpref, rtmult, wtmax, wtpref, wtmult, dtpref], maxfilesize, properties.
    pub fn fsinfo(&mut self, fh: &[u8]) -> Result<([u32; 7], u64, u32), u32> {
        let r = self.nfs(19, |e| {
            e.opaque(fh);
        });
        let mut d = r.dec();
        let st = d.u32();
        d.post_op_attr();
        let res = if st == 0 {
            let mut v = [0u32; 7];
            for x in &mut v {
                *x = d.u32();
            }
            let max = d.u64();
            d.u32();
            d.u32();
            Ok((v, max, d.u32()))
        } else {
            Err(st)
        };
        d.end();
        res
    }

    /// PATHCONF: (linkmax, name_max, [no_trunc, chown_restricted, case_insensitive, case_preserving]).
    pub fn pathconf(&mut self, fh: &[u8]) -> Result<(u32, u32, [bool; 4]), u32> {
        let r = self.nfs(20, |e| {
            e.opaque(fh);
        });
        let mut d = r.dec();
        let st = d.u32();
        d.post_op_attr();
        let res = if st == 0 {
            Ok((d.u32(), d.u32(), [d.bool(), d.bool(), d.bool(), d.bool()]))
        } else {
            Err(st)
        };
        d.end();
        res
    }

    pub fn commit(&mut self, fh: &[u8]) -> Result<[u8; 8], u32> {
        let r = self.nfs(21, |e| {
            e.opaque(fh).u64(0).u32(0);
        });
        let mut d = r.dec();
        let st = d.u32();
        d.wcc();
        let res = if st == 0 {
            Ok(d.fixed(8).try_into().unwrap())
        } else {
            Err(st)
        };
        d.end();
        res
    }
}

pub fn mode_attr(m: u32) -> SetAttr {
    SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    }
}

/// Deterministic test data.
pub fn pattern(salt: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(salt) >> 13) as u8)
        .collect()
}

// ---------------------------------------------------------------------------
// The engine transport
// ---------------------------------------------------------------------------

/// Buffer classes for one responder and one requester (cores 0 and 1) with
/// data buffers for 1 MiB READ/WRITE plus headers.
pub struct Pools {
    pub pool: &'static Mempool,
    pub regions: Vec<Arc<Region>>,
    pub recv: ClassId,
    pub send: ClassId,
    pub data: ClassId,
}

/// Data buffers: a 1 MiB WRITE's Call (header + data) must fit one.
pub const DATA_BUF_BYTES: usize = MIB + 64 * 1024;

pub fn pools(credits: u32) -> Pools {
    pools_scaled(2, credits, 1)
}

/// The pool for `cores` cores (the classes' per-core caches) holding
/// `sets` sets of the responder's and requesters' buffers for `credits`.
fn pools_scaled(cores: usize, credits: u32, sets: u64) -> Pools {
    let mut plan = PoolPlan::new(cores);
    let recv = plan.add_class("recv", 1024, 4).unwrap();
    let send = plan.add_class("send", 8192, 4).unwrap();
    let data = plan.add_class("data", DATA_BUF_BYTES, 2).unwrap();
    let c = u64::from(credits);
    plan.reserve("responder-recv", recv, 2 * sets * c);
    plan.reserve("responder-send", send, 2 * sets * c);
    plan.reserve("responder-data", data, 2 * sets * c);
    plan.reserve("requester-recv", recv, 2 * sets * (c + 2));
    plan.reserve("requester-send", send, sets * (c + 3));
    plan.reserve("requester-data", data, 3 * sets * (c + 2));
    let cfg = RegionConfig {
        lock: false,
        ..RegionConfig::default()
    };
    let pool = Box::leak(Box::new(Mempool::new(&plan, &cfg).expect("pool")));
    let regions = pool.regions().to_vec();
    Pools {
        pool,
        regions,
        recv,
        send,
        data,
    }
}

/// As `pools`, for three cores: the responder (0) and two requesters.
pub fn pools3(credits: u32) -> Pools {
    pools_cores(3, credits)
}

/// As [`pools3`], for `cores` cores (the classes' per-core caches): a
/// requester made again after its connection was lost takes a core of its
/// own while the old one's is still claimed.
pub fn pools_cores(cores: usize, credits: u32) -> Pools {
    pools_scaled(cores, credits, 2)
}

pub fn responder_cfg(p: &Pools, credits: u32) -> ResponderConfig {
    ResponderConfig {
        versions: VersionRange::ALL,
        credits,
        max_conns: 1,
        send_depth: 64,
        max_rdma_reads: 4,
        limits: Limits::DEFAULT,
        max_read_bytes: DATA_BUF_BYTES as u64,
        recv_class: p.recv,
        send_class: p.send,
        data_class: p.data,
        remote_invalidation: false,
        backward_credits: 0,
    }
}

pub fn requester_cfg(p: &Pools, versions: VersionRange, credits: u32) -> RequesterConfig {
    RequesterConfig {
        versions,
        credits,
        send_depth: 64,
        limits: Limits::DEFAULT,
        recv_class: p.recv,
        send_class: p.send,
        data_class: p.data,
        ddp: true,
        backward_credits: 0,
        pad_read_chunks: false,
    }
}

/// Counters of how the engine carried the calls.
#[derive(Clone, Copy, Debug, Default)]
pub struct Carried {
    /// Calls whose DDP-eligible argument went in a Read chunk.
    pub read_chunk_calls: u64,
    /// Replies whose DDP-eligible result came back in a Write chunk.
    pub write_chunk_replies: u64,
}

/// A requester on some fabric, with the responder (and the sim network) it
/// talks to when they live in this thread.
pub struct Engine<F: Fabric> {
    pub cli: Requester<'static, F>,
    pub srv: Option<Responder<'static, F, NfsService>>,
    pub net: Option<SimNetwork>,
    pub binding: Nfs3Binding,
    pub carried: Carried,
}

impl<F: Fabric> Engine<F> {
    /// Run the other side once.
    pub fn pump(&mut self) {
        if let Some(s) = self.srv.as_mut() {
            s.poll();
        }
        if let Some(n) = self.net.as_ref() {
            for _ in 0..4 {
                n.step();
            }
        }
        if self.srv.is_none() && self.net.is_none() {
            std::thread::yield_now();
        }
    }

    /// Poll until the link is up (or fails).
    pub fn connect(&mut self) {
        let t0 = std::time::Instant::now();
        while self.cli.link() != LinkState::Ready {
            self.cli.poll();
            self.pump();
            assert!(
                self.cli.link() != LinkState::Failed && t0.elapsed().as_secs() < 30,
                "connect: {:?} after {:?}",
                self.cli.link(),
                t0.elapsed()
            );
        }
    }
}

/// Where a READ or READLINK reply's data item sits in the reduced reply: after
/// the RPC header, status, post_op_attr (and READ's count and eof) and the
/// data length word.
fn data_position(reduced: &[u8], proc_: u32) -> Option<u32> {
    let (h, at) = rpc::decode_reply(reduced).ok()?;
    if !h.is_success() {
        return None;
    }
    let mut r = Reader::new(reduced);
    r.skip(at, "hdr").ok()?;
    if r.u32("status").ok()? != 0 {
        return None;
    }
    if r.bool("attributes_follow").ok()? {
        r.skip(84, "fattr3").ok()?;
    }
    if proc_ == 6 {
        r.skip(8, "count, eof").ok()?;
    }
    r.skip(4, "data length").ok()?;
    Some(r.pos() as u32)
}

impl<F: Fabric> Engine<F> {
    /// Submit one RPC Call (whole message) without waiting: its DDP items
    /// travel in Read chunks and NFS READ/READLINK results come back in
    /// Write chunks, as `Nfs3Binding` says.
    pub fn submit_call(&mut self, call: &[u8]) -> CallId {
        let t0 = std::time::Instant::now();
        while !self.cli.can_submit() {
            self.cli.poll();
            self.pump();
            assert!(t0.elapsed().as_secs() < 30, "cannot submit: {:?}", self.cli.link());
        }
        let (prog, proc_) = call_prog_proc(call);
        let mut cb = self.cli.call_buf().expect("call buffer");
        cb.bytes_mut()[..call.len()].copy_from_slice(call);
        let mut items = [DdpItem::default(); 2];
        let k = self.binding.call_items(call, &mut items).unwrap_or(0);
        if k > 0 && items[0].len > 0 {
            self.carried.read_chunk_calls += 1;
        }
        let needs = if prog == NFS {
            ReplyNeeds::from_ulb(&self.binding, 3, proc_)
        } else {
            ReplyNeeds::new(&[], 8192).unwrap()
        };
        self.cli
            .submit(cb, call.len(), &items[..k], &needs)
            .map_err(|(e, _)| e)
            .expect("submit")
    }

    /// Wait for the next Call to complete; returns it and its reply,
    /// reassembled, under the XID the requester gave it.
    pub fn next_reply(&mut self, call_of: impl Fn(CallId) -> (u32, u32)) -> (CallId, Vec<u8>) {
        let t0 = std::time::Instant::now();
        let done = loop {
            self.cli.poll();
            self.pump();
            if let Some(c) = self.cli.poll_completion() {
                break c;
            }
            assert!(t0.elapsed().as_secs() < 60, "no reply: {:?}", self.cli.stats());
        };
        assert_eq!(done.outcome, CallOutcome::Reply, "transport outcome");
        let (prog, proc_) = call_of(done.id);
        let v = self.cli.reply(done.id).expect("reply view");
        let used = v.write_chunk(0).is_some_and(|d| !d.is_empty());
        let positions: Vec<u32> = if prog == NFS && (proc_ == 6 || proc_ == 5) && used {
            self.carried.write_chunk_replies += 1;
            vec![data_position(v.reduced, proc_).expect("data position")]
        } else {
            vec![]
        };
        let mut out = vec![0u8; 2 * MIB];
        let n = v.reassemble(&positions, &mut out).expect("reassemble");
        out.truncate(n);
        self.cli.release(done.id);
        assert_eq!(out.get(..4), Some(&done.xid.to_be_bytes()[..]), "reply XID");
        (done.id, out)
    }
}

/// The program and procedure of an encoded Call.
pub fn call_prog_proc(call: &[u8]) -> (u32, u32) {
    let mut r = Reader::new(call);
    r.skip(12, "xid, mtype, rpcvers").unwrap();
    let prog = r.u32("prog").unwrap();
    r.skip(4, "vers").unwrap();
    (prog, r.u32("proc").unwrap())
}

impl<F: Fabric> Transport for Engine<F> {
    fn roundtrip(&mut self, call: &[u8]) -> Option<Vec<u8>> {
        let id = self.submit_call(call);
        let pp = call_prog_proc(call);
        let (done, mut out) = self.next_reply(|_| pp);
        assert_eq!(done, id);
        // The requester gives each Call its own XID: the reply carries that
        // one; hand it back under the caller's.
        out[..4].copy_from_slice(&call[..4]);
        Some(out)
    }
}

/// A responder running `NfsService` over `fab`, listening at `addr`.
pub fn responder<F: Fabric>(
    p: &Pools,
    shared: &Arc<NfsShared>,
    fab: F,
    credits: u32,
    addr: &str,
) -> Responder<'static, F, NfsService> {
    let svc = NfsService::new(shared.clone(), 0).unwrap();
    Responder::new(responder_cfg(p, credits), fab, svc, p.pool, &p.regions, 0, Some(addr)).unwrap()
}

// ---------------------------------------------------------------------------
// The I/O scenario every transport runs
// ---------------------------------------------------------------------------

/// MOUNT, MKDIR, CREATE, LOOKUP, WRITE 1 MiB UNSTABLE and a FILE_SYNC tail,
/// COMMIT, READ it all back, SYMLINK + READLINK, READDIRPLUS, REMOVE, RMDIR;
/// every result checked. `tag` keeps names apart when several runs share a
/// backend; `verf` is the server's write verifier.
pub fn io_scenario<T: Transport>(c: &mut Client<T>, export: &str, tag: &str, verf: [u8; 8]) {
    let (root, _) = c.mnt(export).expect("MNT");
    let root_attr = c.getattr(&root).expect("GETATTR root");
    assert_eq!(root_attr.ftype, 2);
    let dname = format!("work-{tag}");
    let (dir, _) = c.mkdir(&root, &dname, 0o755).expect("MKDIR");
    assert_eq!(c.lookup(&root, dname.as_bytes()).expect("LOOKUP dir").0, dir);
    let (fh, a) = c.mkfile(&dir, "big", 0o644).expect("CREATE");
    assert_eq!((a.ftype, a.size), (1, 0));
    assert_eq!(c.lookup(&dir, b"big").expect("LOOKUP").0, fh);
    let data = pattern(42, MIB);
    let w = c.write(&fh, 0, &data, UNSTABLE).expect("WRITE 1 MiB");
    assert_eq!(w.count as usize, MIB);
    assert_eq!(w.verf, verf);
    let tail = pattern(43, 12_345);
    let w = c.write(&fh, MIB as u64, &tail, FILE_SYNC).expect("WRITE tail");
    assert_eq!((w.count, w.committed), (12_345, FILE_SYNC));
    assert_eq!(w.wcc.1.expect("post-op attributes").size, (MIB + 12_345) as u64);
    assert_eq!(c.commit(&fh).expect("COMMIT"), verf);
    let (got, eof, fa) = c.read(&fh, 0, MIB as u32).expect("READ 1 MiB");
    assert_eq!(got.len(), MIB);
    assert!(got == data, "READ data differs from what was written");
    assert!(!eof);
    assert_eq!(fa.size, (MIB + 12_345) as u64);
    let (got, eof, _) = c.read(&fh, MIB as u64, 65_536).expect("READ tail");
    assert!(got == tail && eof);
    let (got, _, _) = c.read(&fh, 1000, 100).expect("small READ");
    assert_eq!(got, &data[1000..1100]);
    let target = format!("../{dname}/big");
    let (l, _) = c.symlink(&dir, "link", target.as_bytes()).expect("SYMLINK");
    assert_eq!(c.readlink(&l).expect("READLINK"), target.as_bytes());
    // Enough entries that the READDIRPLUS reply is larger than any inline
    // threshold (a Reply chunk over RDMA).
    for i in 0..25 {
        c.mkfile(&dir, &format!("small-{i:02}"), 0o600).expect("CREATE small");
    }
    let p = c.readdirplus(&dir, 0, 0, 8192, 16_384).expect("READDIRPLUS");
    assert!(p.eof);
    let mut names: Vec<String> = p
        .entries
        .iter()
        .map(|e| String::from_utf8(e.1.clone()).unwrap())
        .collect();
    names.sort();
    let mut want: Vec<String> = [".", "..", "big", "link"].iter().map(|s| s.to_string()).collect();
    want.extend((0..25).map(|i| format!("small-{i:02}")));
    want.sort();
    assert_eq!(names, want);
    for (_, name, _, attr, handle) in &p.entries {
        if name == b"big" {
            assert_eq!(attr.expect("attributes").size, (MIB + 12_345) as u64);
            assert_eq!(handle.as_ref().expect("handle"), &fh);
        }
    }
    assert_eq!(c.remove(&dir, "big"), 0);
    assert_eq!(c.remove(&dir, "link"), 0);
    for i in 0..25 {
        assert_eq!(c.remove(&dir, &format!("small-{i:02}")), 0);
    }
    assert_eq!(c.lookup(&dir, b"big").unwrap_err(), 2);
    assert_eq!(c.rmdir(&root, &dname), 0);
    c.umnt(export);
}

/// The versions a requester offers to get RPC-over-RDMA version `v`.
pub fn versions(v: u32) -> VersionRange {
    if v == 1 {
        VersionRange::only(1).unwrap()
    } else {
        VersionRange::ALL
    }
}

/// A requester and an `NfsService` responder on one sim network (seeded),
/// connected with version `v`.
pub fn sim_engine(p: &Pools, sh: &Arc<NfsShared>, seed: u64, v: u32, credits: u32) -> Engine<SimFabric> {
    let net = SimNetwork::new(SimConfig::with_seed(seed));
    let srv = responder(p, sh, net.endpoint(), credits, "srv");
    let mut cli = Requester::new(
        requester_cfg(p, versions(v), credits),
        net.endpoint(),
        p.pool,
        &p.regions,
        1,
    )
    .unwrap();
    cli.connect("srv").unwrap();
    let mut e = Engine {
        cli,
        srv: Some(srv),
        net: Some(net),
        binding: Nfs3Binding::new(MIB as u32),
        carried: Carried::default(),
    };
    e.connect();
    assert_eq!(e.cli.version(), v);
    e
}
