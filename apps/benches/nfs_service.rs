//! The NFS service's own cost per Call, without a transport: what the
//! target's core spends between the Call handed to it and the reply built
//! (the data hint and `handle_call`, as the responder engine calls them),
//! on the `mem` backend, for the Calls of the kernel client's 4 KiB fio
//! rows:
//!
//! - `nfs_service/v3_read_4k`, `v3_write_4k`: NFSv3 READ and WRITE
//!   (FILE_SYNC) of 4 KiB;
//! - `nfs_service/v4_read_4k`: the COMPOUND a Linux NFSv4.1/4.2 client sends
//!   for a READ (SEQUENCE, PUTFH, READ);
//! - `nfs_service/v4_write_4k`: its WRITE (SEQUENCE, PUTFH, WRITE, GETATTR of
//!   change, size, time_metadata and time_modify: the client's post-write
//!   attributes when it holds no delegation).
//!
//! Each iteration encodes a new Call (untimed) and hands it to the service
//! (`serve_one`), then checks its RPC and NFS status. Instruction counts,
//! repeatable whatever the machine does: `scripts/callgrind-nfs.sh`, which
//! runs this binary under callgrind collecting only inside `serve_one`.

#[path = "../tests/nfs4_common/mod.rs"]
mod nfs4_common;
#[path = "../tests/nfs_common/mod.rs"]
mod nfs_common;

use std::sync::Arc;

use criterion::{BatchSize, Criterion};
use dataplane::service::{CallView, ReplyBuilder, Service};
use dataplane::ConnId;
use nfs4_common::*;
use nfs_common::*;
use proto::nfs4::*;
use proto::plan::Piece;
use proto::xdr::Reader;
use rpcrdma_apps::nfs::{NfsService, NfsShared};

/// The service and the buffers the engine would lend it.
struct Served {
    svc: NfsService,
    head: Vec<u8>,
    data: Vec<u8>,
    /// The client's address, as the engine gives it.
    peer: std::net::IpAddr,
}

impl Served {
    fn new(sh: &Arc<NfsShared>) -> Served {
        Served {
            svc: NfsService::new(sh.clone(), 0).unwrap(),
            head: vec![0; 8192],
            data: vec![0; MIB],
            peer: std::net::Ipv4Addr::LOCALHOST.into(),
        }
    }
}

/// One Call through the service as the responder engine runs it: the data
/// hint, a reply builder with a data buffer when the hint asks for one,
/// `handle_call`. The reply's head length (0: the service failed).
#[inline(never)]
fn serve_one(s: &mut Served, call: &[u8]) -> usize {
    let piece = [Piece::Inline {
        start: 0,
        len: call.len() as u32,
    }];
    let xid = Reader::new(call).u32("xid").unwrap_or(0);
    let view = CallView::contiguous(ConnId(0), Some(s.peer), 1, xid, call, &piece);
    let hint = s.svc.reply_data_hint(&view);
    let mut rb = ReplyBuilder::new(&mut s.head, (hint > 0).then_some(&mut s.data[..]));
    let ok = s.svc.handle_call(&view, &mut rb).is_ok();
    let shape = rb.finish();
    if ok {
        shape.head_len as usize
    } else {
        0
    }
}

impl Transport for Served {
    fn roundtrip(&mut self, call: &[u8]) -> Option<Vec<u8>> {
        let n = serve_one(self, call);
        (n > 0).then(|| self.head[..n].to_vec())
    }
}

impl V4Transport for Served {
    fn rt(&mut self, call: &[u8], _read_max: Option<u32>) -> Option<Vec<u8>> {
        self.roundtrip(call)
    }
}

/// The accept status word of a reply head and the NFS status after it
/// (AUTH_NONE verifier): 0 and 0 for a successful Call.
fn statuses(head: &[u8]) -> (u32, u32) {
    let w = |i: usize| u32::from_be_bytes(head[i..i + 4].try_into().unwrap());
    (w(20), w(24))
}

fn bench(c: &mut Criterion) {
    let s = store(Kind::Mem, "b0");
    let mut ex = Ex::new("/export", "b0");
    ex.root_squash = false;
    let sh = shared(&[&s], &[ex], MIB as u32);
    let mut v4 = V4::new(Served::new(&sh), "fio");
    v4.setup(1);
    let dir = v4.walk("/export").unwrap();
    let (sid, fh) = v4
        .open(&dir, open("fio.dat", 3, 0, b"o", Some((UNCHECKED4, 0o644, [0; 8]))))
        .unwrap();
    let data = pattern(7, 64 * 1024);
    v4.write(&fh, &sid, 0, FILE_SYNC4, &data).unwrap();
    let mut v3 = Client::new(Served::new(&sh));
    v3.auth = Auth::root();
    let root = v3.mnt("/export").unwrap().0;
    let v3fh = v3.lookup(&root, b"fio.dat").unwrap().0;
    let block = pattern(9, 4096);

    // Every Call is new (a fresh XID, the slot's next sequence id): a
    // repeated one would be answered from the reply cache or the slot.
    // Encoding is the untimed set-up of each iteration.
    let getattr_w = getattr(&[FATTR4_CHANGE, FATTR4_SIZE, FATTR4_TIME_METADATA, FATTR4_TIME_MODIFY]);
    let mut xid = 1u32 << 30;
    let mut n = 0u64;
    let mut next = |which: &str| -> Vec<u8> {
        n += 1;
        let off = (n % 16) * 4096;
        match which {
            "v3_read_4k" | "v3_write_4k" => {
                xid += 1;
                let write = which == "v3_write_4k";
                let mut e = call_header(xid, NFS, 3, if write { 7 } else { 6 }, &v3.auth);
                e.opaque(&v3fh).u64(off).u32(4096);
                if write {
                    e.u32(2).opaque(&block);
                }
                e.b
            }
            "v4_read_4k" => {
                let ops = [v4.sequence(0, false), putfh(&fh), read(&sid, off, 4096)];
                v4.encode(&ops)
            }
            _ => {
                let ops = [
                    v4.sequence(0, false),
                    putfh(&fh),
                    write(&sid, off, FILE_SYNC4, &block),
                    getattr_w.clone(),
                ];
                v4.encode(&ops)
            }
        }
    };

    let mut served = Served::new(&sh);
    let mut g = c.benchmark_group("nfs_service");
    for name in ["v3_read_4k", "v3_write_4k", "v4_read_4k", "v4_write_4k"] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || next(name),
                |call| {
                    let n = serve_one(&mut served, &call);
                    assert!(n > 0 && statuses(&served.head) == (0, 0), "{name}: the Call failed");
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion::criterion_group!(benches, bench);
criterion::criterion_main!(benches);
