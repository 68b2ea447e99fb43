//! Hot-path benches of the wire engine (criterion, `harness = false`).
//!
//! 1. `decode_call/v1|v2`: a responder receiving an NFSv3 READ call — the
//!    transport header (RDMA_MSG with one Write chunk) with `header::decode`, the
//!    ONC RPC call header (AUTH_SYS) with `rpc::decode_call`, and `READ3args`.
//! 2. `plan_reply/v1|v2`: the responder's reply to it — a READ reply carrying
//!    4 KiB of data reduced into the Write chunk: `plan::plan_reply`, the RDMA
//!    Write list from `write_ops`, and `plan::encode_reply_header`.
//!
//! Run: `cargo bench -p rpcrdma-proto --bench proto -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use proto::header::{decode, Limits, Segment};
use proto::nfs3::{Read3Args, NFSPROC3_READ, NFS_PROGRAM, NFS_V3};
use proto::plan::{
    encode_call_header, encode_reply_header, plan_call, plan_reply, CallParams, ReplyHeaderOut, ReplyNeeds,
};
use proto::rpc::{self, CallHeader, OpaqueAuth, AUTH_SYS};
use proto::ulb::DdpItem;
use proto::xdr::{Reader, Writer};

const XID: u32 = 0x5a5a_0001;
const READ_BYTES: u32 = 4096;

/// The Send a Linux-like client makes for an NFSv3 READ of 4 KiB: RDMA_MSG,
/// one Write chunk of one segment, then the call (AUTH_SYS, 32-byte handle).
fn read_call_send(vers: u32) -> Vec<u8> {
    let mut cred = [0u8; 64];
    let cred_len = {
        let mut w = Writer::new(&mut cred);
        w.put_u32(0x6000_0001).unwrap(); // stamp
        w.put_opaque_var(b"client1").unwrap(); // machinename
        w.put_u32(1000).unwrap(); // uid
        w.put_u32(1000).unwrap(); // gid
        w.put_u32(2).unwrap(); // gids<16>
        w.put_u32(1000).unwrap();
        w.put_u32(27).unwrap();
        w.len()
    };
    let mut call = vec![0u8; 256];
    let n = {
        let mut w = Writer::new(&mut call);
        let hdr = CallHeader::new(
            XID,
            NFS_PROGRAM,
            NFS_V3,
            NFSPROC3_READ,
            OpaqueAuth {
                flavor: AUTH_SYS,
                body: &cred[..cred_len],
            },
            OpaqueAuth::NONE,
        );
        rpc::encode_call_header(&mut w, &hdr).unwrap();
        w.put_opaque_var(&[0xf0; 32]).unwrap(); // nfs_fh3
        w.put_u64(1 << 20).unwrap(); // offset
        w.put_u32(READ_BYTES).unwrap(); // count
        w.len()
    };
    call.truncate(n);
    let needs = ReplyNeeds::new(&[READ_BYTES], 200).unwrap();
    let plan = plan_call(call.len(), &[], &needs, &CallParams::new(vers)).unwrap();
    let wseg = [Segment {
        handle: 0x1234,
        length: READ_BYTES,
        offset: 0x7f00_dead_0000,
    }];
    let mut send = vec![0u8; 1024];
    let hl = encode_call_header(&plan, XID, 32, 0, &[], &[&wseg], None, &mut send).unwrap();
    send.truncate(hl);
    send.extend_from_slice(&call);
    send
}

/// Decode everything the responder needs from the Send: returns the handle
/// length, offset and count so nothing is optimised away.
#[inline(never)]
fn decode_read_call(send: &[u8]) -> (usize, u64, u32, usize) {
    let h = decode(send, &Limits::DEFAULT).unwrap();
    let payload = h.payload().unwrap();
    let (call, args_at) = rpc::decode_call(payload).unwrap();
    debug_assert_eq!(call.proc_, NFSPROC3_READ);
    let mut r = Reader::with_base(&payload[args_at..], args_at);
    let a = Read3Args::decode(&mut r).unwrap();
    (a.file.len(), a.offset, a.count, h.chunks().unwrap().writes.len())
}

/// Reply stream layout for READ3resok with 4 KiB: RPC accepted reply header
/// (24 bytes), status, post_op_attr with attributes (4 + 84), count, eof, the
/// data length word, then the data.
const REPLY_DATA_OFFSET: u32 = 24 + 4 + 88 + 12;
const REPLY_LEN: usize = REPLY_DATA_OFFSET as usize + READ_BYTES as usize;

fn bench(c: &mut Criterion) {
    for vers in [1u32, 2] {
        let send = read_call_send(vers);
        c.bench_function(&format!("decode_call/v{vers}"), |b| {
            b.iter(|| decode_read_call(black_box(&send)))
        });

        let h = decode(&send, &Limits::DEFAULT).unwrap();
        let call = *h.chunks().unwrap();
        let items = [DdpItem {
            offset: REPLY_DATA_OFFSET,
            len: READ_BYTES,
        }];
        let mut out = [0u8; 256];
        c.bench_function(&format!("plan_reply/v{vers}"), |b| {
            b.iter(|| {
                let p = plan_reply(black_box(REPLY_LEN), black_box(&items), black_box(&call), vers, 4096).unwrap();
                let mut wrote = 0u32;
                for op in p.write_ops(&call) {
                    wrote += black_box(op).target.length;
                }
                let n = encode_reply_header(ReplyHeaderOut::Planned { plan: &p, call: &call }, XID, 32, 0, &mut out)
                    .unwrap();
                black_box(&out);
                (wrote, n)
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
