//! The helper pool: metadata procedures of backends whose metadata calls
//! may wait for a disk ([`Backend::metadata_blocks`]: `uring`'s
//! `open_by_handle_at`, `fstat`, `getdents64`, `fsync` of a `sync` export,
//! ...) run on a few helper threads, not on the core.
//!
//! A core that gets such a Call, and may defer it, copies the Call (its RPC
//! header and arguments, at most [`super::MAX_ASSEMBLED_CALL_BYTES`]) into a
//! job, defers the reply ([`Deferred::submit_to_pool`]) and goes on serving
//! other Calls. A helper runs the procedure exactly as the core would (the
//! same [`nfs3::call`], with a core state of its own and no channels), and
//! posts the results to the core's [`Outbox`]; the core's next
//! `poll_deferred` takes them ([`CoreOffload::poll`]), the engine resumes the
//! Call, and the service copies the results into the reply head
//! ([`results`]). The core keeps polling while it holds deferred Calls (the
//! engine's poller reports itself busy), so no wake-up is needed.
//!
//! A non-idempotent Call keeps its duplicate request cache entry in progress
//! while it is on the pool, so a retransmit that comes meanwhile is dropped;
//! the entry is completed when the Call is resumed (or cancelled).
//!
//! An NFSv4 COMPOUND that changes the namespace or attributes (CREATE,
//! REMOVE, RENAME, LINK, SETATTR, OPEN that may create) or makes an NFSv4.2
//! system call (ALLOCATE, DEALLOCATE, COPY, SEEK) and does no data
//! I/O runs on the pool whole ([`wanted_v4`]): the helper runs
//! [`crate::nfs4::call`] over a copy of the Call, SEQUENCE and the session
//! slot's reply cache included, and the core copies the reply it built.
//! One that also does data I/O runs on the core and sends each such
//! operation here alone ([`CoreOffload::submit_op4`], [`crate::nfs4::pooled`]).
//!
//! MOUNT's MNT runs here too (it looks its path up in the backend). READ,
//! WRITE and COMMIT are not offloaded (their data goes through the core's
//! channel, deferred), but the first one of a file the core's channel has
//! not open yet is: the pool opens the file ([`Backend::open_for_io`]), the
//! core adopts it ([`IoChannel::adopt`]) and runs the Call itself. Not
//! offloaded: NULL, the other MOUNT procedures, Calls that may not be
//! deferred (TCP), and GETATTR of a file the core's channel has open,
//! answered from that descriptor ([`IoChannel::getattr_cached`]).
//!
//! [`Backend::metadata_blocks`]: crate::backend::Backend::metadata_blocks
//! [`IoChannel::getattr_cached`]: crate::backend::IoChannel::getattr_cached
//! [`IoChannel::adopt`]: crate::backend::IoChannel::adopt

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use dataplane::service::{DeferToken, ReplyBuilder};
use proto::nfs3 as p;
use proto::rpc::CallHeader;
use proto::xdr::Reader;

use super::defer::Deferred;
use super::export::split_fh;
use super::{credential, nfs3, Call, CoreState, Fail, NfsShared, NfsStats, REPLY_HEADER_BYTES};
use crate::backend::{Backend, FileHandle, FsResult, OpenedFile};

/// Helper threads per process (started on the first offloaded Call).
pub const HELPER_THREADS: usize = 2;

/// A procedure's results, computed on a helper thread.
#[derive(Debug)]
pub(crate) struct Finished {
    token: DeferToken,
    res: Result<usize, Fail>,
    /// The results after the RPC reply header (`res`'s length when `Ok`).
    bytes: Vec<u8>,
    /// DDP-eligible items (offset from the head's start, length): READLINK's
    /// path.
    items: Vec<(usize, usize)>,
    /// An open for the core's channel ([`CoreOffload::submit_open`]): the
    /// backend's index, the handle and what was opened. The Call then runs
    /// on the core, not from `bytes`.
    pub opened: Option<(usize, FileHandle, FsResult<Option<OpenedFile>>)>,
    /// One operation of a COMPOUND suspended on the core
    /// ([`crate::nfs4::pooled`]): its result. The Call then goes on on the
    /// core, not from `bytes`.
    op4: Option<Box<crate::nfs4::pooled::OpDone>>,
}

/// Where one core's finished jobs wait for it. Helpers push, the core
/// drains.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    done: Mutex<Vec<Finished>>,
    /// Entries in `done` (read without the lock on the core's poll).
    count: AtomicUsize,
}

struct Job {
    outbox: Arc<Outbox>,
    token: DeferToken,
    work: Work,
}

enum Work {
    /// Run the Call's procedure.
    Call {
        shared: Arc<NfsShared>,
        /// The Call: its RPC header, then its arguments.
        msg: Vec<u8>,
        peer: Option<IpAddr>,
        /// The reply head's capacity on the core (READDIR fills up to it).
        head_cap: usize,
    },
    /// Run one operation of an NFSv4 COMPOUND ([`crate::nfs4::pooled`]).
    Op4 {
        shared: Arc<NfsShared>,
        /// The Call's RPC header (for its credential), then the operation.
        msg: Vec<u8>,
        peer: Option<IpAddr>,
        /// Room for the operation's result.
        room: usize,
        state: Box<crate::nfs4::pooled::OpState>,
    },
    /// Open a file for the core's channel of backend `index`.
    Open {
        backend: Arc<dyn Backend>,
        index: usize,
        fh: FileHandle,
    },
}

struct Inner {
    queue: Mutex<VecDeque<Job>>,
    cv: Condvar,
    stop: AtomicBool,
}

/// The helper threads of one [`NfsShared`].
pub(crate) struct HelperPool {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Helpers started (0 when no thread could be spawned: nothing is
    /// offloaded then).
    running: usize,
}

impl std::fmt::Debug for HelperPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelperPool").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing holds these locks across a panic-prone call: the data stays
    // consistent, so a poisoned lock is used.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HelperPool {
    /// Start [`HELPER_THREADS`] threads. Any thread: each helper first moves
    /// itself to `cpus`' set, off the io cores' CPUs (a core that starts the
    /// pool would otherwise hand it its own pinning, and a helper's fsync
    /// would pre-empt the reactor there).
    pub fn start(cpus: crate::cpus::OffCores) -> HelperPool {
        let inner = Arc::new(Inner {
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let threads = (0..HELPER_THREADS)
            .filter_map(|i| {
                let inner = inner.clone();
                let cpus = cpus.clone();
                std::thread::Builder::new()
                    .name(format!("nfs-helper-{i}"))
                    .spawn(move || {
                        cpus.apply();
                        helper(&inner)
                    })
                    .ok()
            })
            .collect::<Vec<_>>();
        HelperPool {
            inner,
            running: threads.len(),
            threads: Mutex::new(threads),
        }
    }

    /// Whether any helper runs.
    pub fn is_running(&self) -> bool {
        self.running > 0
    }

    fn push(&self, job: Job) {
        lock(&self.inner.queue).push_back(job);
        self.inner.cv.notify_one();
    }
}

impl Drop for HelperPool {
    /// Stop the helpers once the queue is empty and join them (not the one
    /// running this drop, if it is a helper: it exits on its own).
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.cv.notify_all();
        let me = std::thread::current().id();
        for t in lock(&self.threads).drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

fn helper(inner: &Inner) {
    let mut st = CoreState {
        core: usize::MAX,
        channels: Vec::new(),
        dir: nfs3::DirScratch::default(),
        stats: NfsStats::default(),
        deferred: Deferred::new(),
        offload: CoreOffload::default(),
        v4: crate::nfs4::Nfs4Stats::default(),
        v4_suspended: Default::default(),
        delegwait: Default::default(),
    };
    loop {
        let job = {
            let mut q = lock(&inner.queue);
            loop {
                if let Some(j) = q.pop_front() {
                    break j;
                }
                if inner.stop.load(Ordering::Acquire) {
                    return;
                }
                q = inner.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        let outbox = job.outbox.clone();
        let f = match job.work {
            Work::Call {
                shared,
                msg,
                peer,
                head_cap,
            } => run(&shared, job.token, &msg, peer, head_cap, &mut st),
            Work::Op4 {
                shared,
                msg,
                peer,
                room,
                state,
            } => Finished {
                token: job.token,
                res: Ok(0),
                bytes: Vec::new(),
                items: Vec::new(),
                opened: None,
                op4: Some(Box::new(run_op4(&shared, &msg, peer, room, *state, &mut st))),
            },
            Work::Open { backend, index, fh } => Finished {
                token: job.token,
                res: Ok(0),
                bytes: Vec::new(),
                items: Vec::new(),
                opened: Some((index, fh, backend.open_for_io(&fh))),
                op4: None,
            },
        };
        let mut done = lock(&outbox.done);
        done.push(f);
        outbox.count.store(done.len(), Ordering::Release);
    }
}

/// Run one job's procedure (NFS, or MOUNT) as the core would.
fn run(
    shared: &Arc<NfsShared>,
    token: DeferToken,
    msg: &[u8],
    peer: Option<IpAddr>,
    head_cap: usize,
    st: &mut CoreState,
) -> Finished {
    let mut head = vec![0u8; head_cap];
    let (res, items) = {
        let mut rb = ReplyBuilder::new(&mut head, None);
        let res = match CallHeader::decode(msg) {
            Ok((hdr, at)) if hdr.vers == proto::nfs4::NFS_V4 => match credential(&hdr) {
                Ok(cred) => v4(shared, msg, peer, st, &mut rb, hdr.xid, at, cred),
                Err(why) => Err(Fail::Auth(why)),
            },
            Ok((hdr, at)) => match credential(&hdr) {
                Ok(cred) => {
                    let c = Call {
                        proc_: hdr.proc_,
                        cred,
                        peer,
                        args: msg.get(at..).unwrap_or(&[]),
                        tail: None,
                        token: None,
                    };
                    if hdr.prog == p::MOUNT_PROGRAM {
                        super::mount::call(shared, &c, &mut rb, REPLY_HEADER_BYTES)
                    } else {
                        nfs3::call(shared, st, &c, &mut rb, REPLY_HEADER_BYTES)
                    }
                }
                Err(why) => Err(Fail::Auth(why)),
            },
            Err(_) => Err(Fail::Garbage),
        };
        if let Ok(n) = res {
            rb.set_head_len(REPLY_HEADER_BYTES + n);
        }
        let items = rb
            .finish()
            .items
            .iter()
            .map(|d| (d.offset as usize, d.len as usize))
            .collect();
        (res, items)
    };
    let bytes = match res {
        Ok(n) => head
            .get(REPLY_HEADER_BYTES..REPLY_HEADER_BYTES + n)
            .unwrap_or(&[])
            .to_vec(),
        Err(_) => Vec::new(),
    };
    Finished {
        token,
        res,
        bytes,
        items,
        opened: None,
        op4: None,
    }
}

/// Run the one NFSv4 operation of `msg` (the Call's RPC header, then the
/// operation) with the COMPOUND's `state`.
fn run_op4(
    shared: &NfsShared,
    msg: &[u8],
    peer: Option<IpAddr>,
    room: usize,
    state: crate::nfs4::pooled::OpState,
    st: &mut CoreState,
) -> crate::nfs4::pooled::OpDone {
    let cred = CallHeader::decode(msg)
        .ok()
        .and_then(|(hdr, at)| Some((credential(&hdr).ok()?, at)));
    match cred {
        Some((cred, at)) => {
            crate::nfs4::pooled::run_on_helper(shared, st, cred, peer, msg.get(at..).unwrap_or(&[]), room, state)
        }
        // The core decoded both already: it cannot fail here.
        None => crate::nfs4::pooled::OpDone {
            status: proto::nfs4::NFS4ERR_SERVERFAULT,
            body: Vec::new(),
            items: Vec::new(),
            state,
        },
    }
}

/// Run an NFSv4 COMPOUND whole, as the core would without a defer token;
/// its results after the RPC reply header.
#[allow(clippy::too_many_arguments)]
fn v4(
    shared: &Arc<NfsShared>,
    msg: &[u8],
    peer: Option<IpAddr>,
    st: &mut CoreState,
    rb: &mut ReplyBuilder<'_>,
    xid: u32,
    at: usize,
    cred: super::auth::Cred<'_>,
) -> Result<usize, Fail> {
    let piece = [proto::plan::Piece::Inline {
        start: 0,
        len: msg.len() as u32,
    }];
    let view = dataplane::service::CallView::contiguous(dataplane::fabric::ConnId(0), peer, 1, xid, msg, &piece);
    let mut scratch = Vec::new();
    crate::nfs4::call(shared, st, &mut scratch, &view, xid, at, cred, rb).map_err(|_| Fail::System)?;
    // Only a SUCCESS reply header is the core's to write back.
    let mut ok = [0u8; REPLY_HEADER_BYTES];
    let n = rb.head_len();
    match proto::rpc::encode_success_reply_none(xid, &mut ok) {
        Some(REPLY_HEADER_BYTES) if n >= REPLY_HEADER_BYTES && rb.head_mut()[..REPLY_HEADER_BYTES] == ok => {
            Ok(n - REPLY_HEADER_BYTES)
        }
        _ => Err(Fail::System),
    }
}

/// Whether the NFSv4 COMPOUND of `view` (arguments at `at` of its one
/// piece) runs on the helper pool: the engine lets this core defer it, it
/// changes the namespace or attributes (CREATE, REMOVE, RENAME, LINK,
/// SETATTR, OPEN that may create) or makes an NFSv4.2 system call
/// (ALLOCATE, DEALLOCATE, COPY, SEEK), it does no data I/O (READ, WRITE,
/// COMMIT go through the core's channel, deferred), and the first PUTFH
/// names an export whose backend's metadata calls block (no PUTFH: any
/// such backend).
pub(crate) fn wanted_v4(sh: &NfsShared, st: &CoreState, view: &dataplane::service::CallView<'_>, at: usize) -> bool {
    use proto::nfs4::args::{CompoundArgs, Op, OpDecoder};
    if view.defer_token().is_none()
        || !st.deferred.has_room()
        || view.slices().nth(1).is_some()
        || !sh.backends.iter().any(|(_, b)| b.metadata_blocks())
    {
        return false;
    }
    let Some(args) = view.head().get(at..) else {
        return false;
    };
    let mut r = Reader::new(args);
    let Ok(ca) = CompoundArgs::decode(&mut r) else {
        return false;
    };
    let mut d = OpDecoder::new(r, ca.numops, None, &[]);
    let (mut changes, mut first_fh) = (false, None);
    while let Some(Ok(op)) = d.next_op() {
        match op {
            Op::Read { .. } | Op::Write { .. } | Op::Commit { .. } => return false,
            Op::Create { .. } | Op::Remove(_) | Op::Rename { .. } | Op::Link(_) | Op::Setattr { .. } => changes = true,
            Op::Open { create: Some(_), .. } => changes = true,
            // NFSv4.2's ALLOCATE, DEALLOCATE, COPY and SEEK are system calls
            // on the backend (fallocate, copy_file_range, lseek), not I/O
            // through the core's channel.
            Op::Allocate { .. } | Op::Deallocate { .. } | Op::Copy { .. } | Op::Seek { .. } => changes = true,
            Op::Putfh(b) if first_fh.is_none() => first_fh = Some(b),
            _ => {}
        }
    }
    if !changes || !sh.helpers().is_running() {
        return false;
    }
    match first_fh.map(|b| crate::nfs4::fh::decode(sh, b)) {
        Some(Ok(crate::nfs4::fh::Fh::Real { ex, .. })) => sh.backends[sh.exports[ex].backend].1.metadata_blocks(),
        Some(_) => false,
        None => sh.backends.iter().any(|(_, b)| b.metadata_blocks()),
    }
}

/// One core's side of the pool.
#[derive(Debug, Default)]
pub(crate) struct CoreOffload {
    outbox: Arc<Outbox>,
    /// Finished jobs taken from the outbox, until their Calls resume.
    ready: Vec<Finished>,
    /// Duplicate request cache entries of Calls on the pool.
    drc_slots: Vec<(DeferToken, u32)>,
    /// The results of the Call being resumed.
    pub resuming: Option<Finished>,
    /// The Call being resumed after an open on the pool.
    pub opened_for: Option<DeferToken>,
}

/// Whether the Call `c` runs on the helper pool: a metadata procedure on a
/// backend whose metadata calls may block, that the engine lets this core
/// defer. Decided from the first handle of the arguments (every procedure
/// offloaded starts with one; RENAME and LINK must stay in one export).
pub(crate) fn wanted(sh: &NfsShared, st: &mut CoreState, prog: u32, c: &Call<'_>) -> bool {
    if prog == p::MOUNT_PROGRAM {
        // MNT looks the path up in the backend; the other MOUNT procedures
        // touch only the gateway's own tables.
        return c.proc_ == p::MOUNTPROC3_MNT
            && c.token.is_some()
            && st.deferred.has_room()
            && sh.backends.iter().any(|(_, b)| b.metadata_blocks())
            && sh.helpers().is_running();
    }
    let metadata = matches!(
        c.proc_,
        p::NFSPROC3_GETATTR..=p::NFSPROC3_READLINK | p::NFSPROC3_CREATE..=p::NFSPROC3_PATHCONF
    );
    if c.token.is_none() || !metadata || !st.deferred.has_room() {
        return false;
    }
    let Ok(fh) = p::nfs_fh3(&mut Reader::new(c.args), "object") else {
        return false;
    };
    let Ok((id, bfh)) = split_fh(fh) else {
        return false;
    };
    let Some(ex) = sh.export_by_id(id) else {
        return false;
    };
    let bi = sh.exports[ex].backend;
    if !sh.backends[bi].1.metadata_blocks() || !sh.helpers().is_running() {
        return false;
    }
    // The attributes of a file this core has open cost one fstat.
    if c.proc_ == p::NFSPROC3_GETATTR {
        if let Some(Some(Ok(_))) = st.channels.get_mut(bi).map(|ch| ch.getattr_cached(&bfh)) {
            return false;
        }
    }
    true
}

impl Finished {
    pub fn token(&self) -> DeferToken {
        self.token
    }
}

impl CoreOffload {
    /// Hand the Call (`hdr`: its RPC header bytes, `args` its arguments) to
    /// the pool under `token`; `drc_slot` is its cache entry, kept in
    /// progress until it resumes. The caller defers the reply.
    #[allow(clippy::too_many_arguments)]
    pub fn submit(
        &mut self,
        shared: &Arc<NfsShared>,
        token: DeferToken,
        hdr: &[u8],
        args: &[u8],
        peer: Option<IpAddr>,
        head_cap: usize,
        drc_slot: Option<u32>,
    ) {
        let mut msg = Vec::with_capacity(hdr.len() + args.len());
        msg.extend_from_slice(hdr);
        msg.extend_from_slice(args);
        if let Some(s) = drc_slot {
            self.drc_slots.push((token, s));
        }
        shared.helpers().push(Job {
            outbox: self.outbox.clone(),
            token,
            work: Work::Call {
                shared: shared.clone(),
                msg,
                peer,
                head_cap,
            },
        });
    }

    /// Hand one operation of an NFSv4 COMPOUND (`op`: its number and
    /// arguments; `hdr` the Call's RPC header) to the pool under `token`,
    /// with the COMPOUND's `state` and `room` bytes for its result. The
    /// caller suspends the COMPOUND and defers the reply.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_op4(
        &mut self,
        shared: &Arc<NfsShared>,
        token: DeferToken,
        hdr: &[u8],
        op: &[u8],
        peer: Option<IpAddr>,
        room: usize,
        state: crate::nfs4::pooled::OpState,
    ) {
        let mut msg = Vec::with_capacity(hdr.len() + op.len());
        msg.extend_from_slice(hdr);
        msg.extend_from_slice(op);
        shared.helpers().push(Job {
            outbox: self.outbox.clone(),
            token,
            work: Work::Op4 {
                shared: shared.clone(),
                msg,
                peer,
                room,
                state: Box::new(state),
            },
        });
    }

    /// The result of the operation the pool ran for the Call with `token`,
    /// if it is being resumed ([`CoreOffload::submit_op4`]).
    pub fn resumed_op4_for(&mut self, token: Option<DeferToken>) -> Option<crate::nfs4::pooled::OpDone> {
        match (&self.resuming, token) {
            (Some(f), Some(t)) if f.token == t && f.op4.is_some() => self.resuming.take()?.op4.map(|b| *b),
            _ => None,
        }
    }

    /// Open `fh` on the pool for this core's channel of backend `index`
    /// (its first I/O of the file), under `token`. The caller defers the
    /// reply; when the Call resumes, the core adopts the file
    /// ([`CoreOffload::take_opened`]) and runs the procedure itself.
    pub fn submit_open(&mut self, sh: &NfsShared, token: DeferToken, index: usize, fh: FileHandle) {
        sh.helpers().push(Job {
            outbox: self.outbox.clone(),
            token,
            work: Work::Open {
                backend: sh.backends[index].1.clone(),
                index,
                fh,
            },
        });
    }

    /// Whether the Call with `token` already had its file opened on the
    /// pool (it resumes now): it does not go back for another open, also
    /// when that open failed (the channel then meets the error itself).
    pub fn was_opened(&mut self, token: Option<DeferToken>) -> bool {
        token.is_some() && self.opened_for == token
    }

    /// Take the pool's finished jobs and mark their Calls ready.
    pub fn poll(&mut self, deferred: &mut Deferred) {
        if self.outbox.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let got: Vec<Finished> = {
            let mut done = lock(&self.outbox.done);
            self.outbox.count.store(0, Ordering::Release);
            std::mem::take(&mut *done)
        };
        for f in got {
            deferred.pool_done(f.token);
            self.ready.push(f);
        }
    }

    /// Whether `token` is a Call the pool finished; if so its results go to
    /// [`CoreOffload::resuming`].
    pub fn begin_resume(&mut self, token: DeferToken) -> bool {
        match self.ready.iter().position(|f| f.token == token) {
            Some(i) => {
                self.resuming = Some(self.ready.swap_remove(i));
                true
            }
            None => false,
        }
    }

    /// The results of the Call with `token`, if it is being resumed.
    pub fn resumed_for(&mut self, token: Option<DeferToken>) -> Option<Finished> {
        match (&self.resuming, token) {
            (Some(f), Some(t)) if f.token == t && f.op4.is_none() => self.resuming.take(),
            _ => None,
        }
    }

    /// The duplicate request cache entry of the Call with `token`.
    pub fn take_drc_slot(&mut self, token: DeferToken) -> Option<u32> {
        let i = self.drc_slots.iter().position(|(t, _)| *t == token)?;
        Some(self.drc_slots.swap_remove(i).1)
    }

    /// Forget the Call with `token` (its connection went away); returns its
    /// cache entry.
    pub fn cancel(&mut self, token: DeferToken) -> Option<u32> {
        self.ready.retain(|f| f.token != token);
        self.take_drc_slot(token)
    }
}

/// Write a finished job's results at `base` of the reply head; returns what
/// the procedure returned.
pub(crate) fn results(f: Finished, reply: &mut ReplyBuilder<'_>, base: usize) -> Result<usize, Fail> {
    let head = reply.head_mut();
    let dst = head.get_mut(base..base + f.bytes.len()).ok_or(Fail::System)?;
    dst.copy_from_slice(&f.bytes);
    for (offset, len) in f.items {
        // As in READLINK: when the item table is full the item stays inline.
        let _ = reply.add_head_item(offset, len);
    }
    f.res
}
