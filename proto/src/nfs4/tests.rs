//! Byte vectors written by hand from the XDR of RFC 8881 section 18 for the
//! operations decoded, and truncation at every offset.

use super::args::*;
use super::fattr::*;
use super::*;
use crate::xdr::Reader;

/// Big-endian words and raw bytes, spelled out.
struct V(Vec<u8>);

impl V {
    fn new() -> V {
        V(Vec::new())
    }
    fn w(mut self, x: u32) -> V {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    fn h(mut self, x: u64) -> V {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    fn b(mut self, x: &[u8]) -> V {
        self.0.extend_from_slice(x);
        self
    }
    /// `opaque<>`: length, bytes, zero padding.
    fn o(self, x: &[u8]) -> V {
        let pad = (4 - x.len() % 4) % 4;
        self.w(x.len() as u32).b(x).b(&[0; 3][..pad])
    }
}

fn compound(minor: u32, ops: &[Vec<u8>]) -> Vec<u8> {
    let mut v = V::new().o(b"t").w(minor).w(ops.len() as u32);
    for o in ops {
        v = v.b(o);
    }
    v.0
}

/// Decode a COMPOUND wholly: the header and every operation's result.
fn decode_all(b: &[u8]) -> Result<(CompoundArgs<'_>, Vec<Result<Op<'_>, OpError>>), CompoundError<'_>> {
    let mut r = Reader::new(b);
    let h = CompoundArgs::decode(&mut r)?;
    let mut d = OpDecoder::new(r, h.numops, None, &[]);
    let mut ops = vec![];
    while let Some(op) = d.next_op() {
        ops.push(op);
    }
    Ok((h, ops))
}

const SID: [u8; 16] = *b"0123456789abcdef";

fn sequence() -> Vec<u8> {
    V::new().w(OP_SEQUENCE).b(&SID).w(7).w(2).w(3).w(1).0
}

#[test]
fn sequence_putfh_getattr_read() {
    let ops = [
        sequence(),
        V::new().w(OP_PUTFH).o(&[1, 2, 3, 4, 5]).0,
        V::new().w(OP_GETATTR).w(2).w(0x0010_011a).w(0x00b0_a23a).0,
        V::new().w(OP_READ).w(9).b(&[0xaa; 12]).h(4096).w(65536).0,
    ];
    let c = compound(1, &ops);
    let (h, ops) = decode_all(&c).unwrap();
    assert_eq!((h.tag, h.minorversion, h.numops), (&b"t"[..], 1, 4));
    assert_eq!(
        ops[0],
        Ok(Op::Sequence {
            sessionid: SID,
            sequenceid: 7,
            slotid: 2,
            highest_slotid: 3,
            cachethis: true
        })
    );
    assert_eq!(ops[1], Ok(Op::Putfh(&[1, 2, 3, 4, 5])));
    let Ok(Op::Getattr(bm)) = ops[2] else {
        panic!("{:?}", ops[2])
    };
    assert_eq!(bm.words, [0x0010_011a, 0x00b0_a23a, 0]);
    assert!(bm.has(FATTR4_TYPE) && bm.has(FATTR4_FSID) && bm.has(FATTR4_FILEID));
    assert!(bm.has(FATTR4_MODE) && bm.has(FATTR4_MOUNTED_ON_FILEID));
    assert_eq!(
        ops[3],
        Ok(Op::Read {
            stateid: Stateid {
                seqid: 9,
                other: [0xaa; 12]
            },
            offset: 4096,
            count: 65536
        })
    );
    assert_eq!(final_read_count(&c), Some(65536));
    // READ not last: no hint.
    let c2 = compound(1, &[ops_bytes_read(), V::new().w(OP_GETFH).0]);
    assert_eq!(final_read_count(&c2), None);
}

fn ops_bytes_read() -> Vec<u8> {
    V::new().w(OP_READ).w(0).b(&[0; 12]).h(0).w(10).0
}

#[test]
fn exchange_id_and_create_session() {
    let eid = V::new()
        .w(OP_EXCHANGE_ID)
        .b(b"verifier")
        .o(b"Linux NFSv4.1 client")
        .w(EXCHGID4_FLAG_USE_NON_PNFS | EXCHGID4_FLAG_SUPP_MOVED_REFER)
        .w(SP4_NONE)
        .w(1)
        .o(b"kernel.org")
        .o(b"Linux 6.1")
        .h(1_700_000_000)
        .w(5)
        .0;
    let cs = V::new()
        .w(OP_CREATE_SESSION)
        .h(0x1122_3344_5566_7788)
        .w(1)
        .w(CREATE_SESSION4_FLAG_CONN_BACK_CHAN)
        // fore: pad, req, resp, cached, ops, reqs, ird<1> = [0]
        .w(0)
        .w(1_049_620)
        .w(1_049_480)
        .w(3_428)
        .w(8)
        .w(64)
        .w(1)
        .w(0)
        // back: no ird
        .w(0)
        .w(4096)
        .w(4096)
        .w(0)
        .w(2)
        .w(16)
        .w(0)
        .w(0x4000_0000)
        // sec parms: AUTH_NONE, AUTH_SYS
        .w(2)
        .w(0)
        .w(1)
        .w(0)
        .o(b"host")
        .w(0)
        .w(0)
        .w(1)
        .w(10)
        .0;
    let c = compound(1, &[eid, cs]);
    let (_, ops) = decode_all(&c).unwrap();
    assert_eq!(
        ops[0],
        Ok(Op::ExchangeId {
            verifier: *b"verifier",
            ownerid: b"Linux NFSv4.1 client",
            flags: EXCHGID4_FLAG_USE_NON_PNFS | EXCHGID4_FLAG_SUPP_MOVED_REFER,
            state_protect: SP4_NONE
        })
    );
    let Ok(Op::CreateSession {
        clientid,
        sequence,
        flags,
        fore,
        back,
        cb_program,
        cb_sec,
    }) = ops[1]
    else {
        panic!("{:?}", ops[1])
    };
    // The first usable entry: AUTH_NONE.
    assert_eq!(cb_sec, Some(super::cb::CbSec::None));
    assert_eq!(
        (clientid, sequence, flags, cb_program),
        (0x1122_3344_5566_7788, 1, 2, 0x4000_0000)
    );
    assert_eq!(
        fore,
        ChannelAttrs {
            headerpadsize: 0,
            maxrequestsize: 1_049_620,
            maxresponsesize: 1_049_480,
            maxresponsesize_cached: 3_428,
            maxoperations: 8,
            maxrequests: 64,
            rdma_ird: Some(0)
        }
    );
    assert_eq!((back.maxrequests, back.rdma_ird), (16, None));
}

#[test]
fn open_create_exclusive41_and_claims() {
    let attrs = V::new()
        .w(2)
        .w(0)
        .w(1 << (FATTR4_MODE - 32))
        .o(&0o644u32.to_be_bytes())
        .0;
    let open = V::new()
        .w(OP_OPEN)
        .w(0)
        .w(OPEN4_SHARE_ACCESS_BOTH)
        .w(OPEN4_SHARE_DENY_NONE)
        .h(42)
        .o(b"open id:\x00\x01")
        .w(OPEN4_CREATE)
        .w(EXCLUSIVE4_1)
        .b(b"excl-vrf")
        .b(&attrs)
        .w(CLAIM_NULL)
        .o(b"file.txt")
        .0;
    let c = compound(
        2,
        &[open, V::new().w(OP_OPEN).w(0).w(1).w(0).h(1).o(b"o").w(0).w(CLAIM_FH).0],
    );
    let (h, ops) = decode_all(&c).unwrap();
    assert_eq!(h.minorversion, 2);
    let Ok(Op::Open {
        share_access,
        clientid,
        owner,
        create: Some(CreateHow::Exclusive41(v, f)),
        claim: Claim::Null(name),
        ..
    }) = ops[0]
    else {
        panic!("{:?}", ops[0])
    };
    assert_eq!(
        (share_access, clientid, owner, &v, name),
        (3, 42, &b"open id:\x00\x01"[..], b"excl-vrf", &b"file.txt"[..])
    );
    let s = decode_settable(&f).unwrap();
    assert_eq!(s.mode, Some(0o644));
    assert!(matches!(
        ops[1],
        Ok(Op::Open {
            create: None,
            claim: Claim::Fh,
            ..
        })
    ));
}

#[test]
fn write_inline_and_from_a_chunk() {
    let w = V::new()
        .w(OP_WRITE)
        .w(1)
        .b(&[3; 12])
        .h(8192)
        .w(FILE_SYNC4)
        .o(b"hello")
        .0;
    let g = V::new().w(OP_GETATTR).w(1).w(1 << FATTR4_SIZE).0;
    let c = compound(1, &[sequence(), w.clone(), g.clone()]);
    let (_, ops) = decode_all(&c).unwrap();
    assert!(matches!(
        ops[1],
        Ok(Op::Write {
            offset: 8192,
            stable: FILE_SYNC4,
            data: b"hello",
            ..
        })
    ));
    assert!(matches!(ops[2], Ok(Op::Getattr(_))));
    // The same COMPOUND with the data in a Read chunk: the head ends at the
    // length word, the chunk holds data and padding, the GETATTR follows.
    let head_len = c.len() - g.len() - 8;
    let head = &c[..head_len];
    let chunk = b"hello\0\0\0";
    let mut r = Reader::new(head);
    let h = CompoundArgs::decode(&mut r).unwrap();
    let g = g.as_slice();
    let mut d = OpDecoder::new(r, h.numops, Some(chunk), g);
    assert!(matches!(d.next_op(), Some(Ok(Op::Sequence { .. }))));
    assert!(matches!(d.next_op(), Some(Ok(Op::Write { data: b"hello", .. }))));
    assert!(matches!(d.next_op(), Some(Ok(Op::Getattr(_)))));
    assert_eq!(d.next_op(), None);
    // Two WRITEs, each with its data in a Read chunk (`with_pieces`): the
    // second WRITE's head is in the inline piece after the first chunk, and
    // the GETATTR after the second chunk.
    let w_head = &w[..w.len() - 8];
    let two_head = V::new().o(b"t").w(1).w(4).b(&sequence()).b(w_head).0;
    let rest: [&[u8]; 4] = [chunk, w_head, b"world\0\0\0", g];
    let mut r = Reader::new(&two_head);
    let h = CompoundArgs::decode(&mut r).unwrap();
    assert_eq!(h.numops, 4);
    let mut d = OpDecoder::with_pieces(r, h.numops, &rest);
    assert!(matches!(d.next_op(), Some(Ok(Op::Sequence { .. }))));
    assert!(matches!(d.next_op(), Some(Ok(Op::Write { data: b"hello", .. }))));
    assert!(matches!(d.next_op(), Some(Ok(Op::Write { data: b"world", .. }))));
    assert!(matches!(d.next_op(), Some(Ok(Op::Getattr(_)))));
    assert_eq!(d.next_op(), None);
    // A chunk shorter than the length word says: BADXDR.
    let mut r = Reader::new(head);
    let h = CompoundArgs::decode(&mut r).unwrap();
    let mut d = OpDecoder::new(r, h.numops, Some(b"hel"), g);
    d.next_op();
    assert_eq!(
        d.next_op(),
        Some(Err(OpError {
            op: OP_WRITE,
            status: NFS4ERR_BADXDR
        }))
    );
    assert_eq!(d.next_op(), None);
    // The ULB locates the data in the whole Call.
    let mut call = V::new().w(9).w(0).w(2).w(100_003).w(4).w(1).w(0).w(0).w(0).w(0).0;
    let at = call.len();
    call.extend_from_slice(&c);
    let mut items = [crate::ulb::DdpItem::default(); 2];
    assert_eq!(ulb::call_items(&call, &mut items), 1);
    let it = items[0];
    assert_eq!(&call[it.offset as usize..][..it.len as usize], b"hello");
    assert_eq!(it.offset as usize, at + head_len);
}

#[test]
fn bounds_give_statuses_not_panics() {
    // Minor version 0 and 3.
    for m in [0, 3] {
        assert_eq!(
            decode_all(&compound(m, &[])).unwrap_err(),
            CompoundError::Status {
                status: NFS4ERR_MINOR_VERS_MISMATCH,
                tag: b"t"
            }
        );
    }
    // Too many operations.
    let many: Vec<Vec<u8>> = (0..=MAX_OPS).map(|_| V::new().w(OP_GETFH).0).collect();
    assert!(matches!(
        decode_all(&compound(1, &many)),
        Err(CompoundError::Status {
            status: NFS4ERR_TOO_MANY_OPS,
            ..
        })
    ));
    assert_eq!(
        decode_all(&compound(1, &many[..MAX_OPS as usize])).unwrap().1.len(),
        MAX_OPS as usize
    );
    // A tag over the bound: RESOURCE with no tag.
    let long_tag = V::new().o(&[b'x'; 257]).w(1).w(0).0;
    assert_eq!(
        decode_all(&long_tag).unwrap_err(),
        CompoundError::Status {
            status: NFS4ERR_RESOURCE,
            tag: b""
        }
    );
    // A name over 255 bytes: NAMETOOLONG; the walk stops there.
    let c = compound(1, &[V::new().w(OP_LOOKUP).o(&[b'n'; 256]).0, V::new().w(OP_GETFH).0]);
    let (_, ops) = decode_all(&c).unwrap();
    assert_eq!(
        ops,
        vec![Err(OpError {
            op: OP_LOOKUP,
            status: NFS4ERR_NAMETOOLONG
        })]
    );
    // ... unless the bytes are not there: BADXDR.
    let c = compound(1, &[V::new().w(OP_LOOKUP).w(300).b(&[b'n'; 8]).0]);
    assert_eq!(
        decode_all(&c).unwrap().1,
        vec![Err(OpError {
            op: OP_LOOKUP,
            status: NFS4ERR_BADXDR
        })]
    );
    // Bitmaps: 8 words fine (extra zero), 9 too many, a bit past word 2 unknown.
    let bm = |n: u32, last: u32| {
        let mut v = V::new().w(OP_GETATTR).w(n);
        for i in 0..n {
            v = v.w(if i + 1 == n { last } else { u32::from(i == 0) });
        }
        compound(1, &[v.0])
    };
    assert!(matches!(decode_all(&bm(8, 0)).unwrap().1[0], Ok(Op::Getattr(_))));
    assert_eq!(
        decode_all(&bm(9, 0)).unwrap().1[0],
        Err(OpError {
            op: OP_GETATTR,
            status: NFS4ERR_RESOURCE
        })
    );
    assert_eq!(
        decode_all(&bm(4, 1)).unwrap().1[0],
        Err(OpError {
            op: OP_GETATTR,
            status: NFS4ERR_ATTRNOTSUPP
        })
    );
    // A handle over NFS4_FHSIZE: BADHANDLE.
    let c = compound(1, &[V::new().w(OP_PUTFH).o(&[0; 129]).0]);
    assert_eq!(
        decode_all(&c).unwrap().1[0],
        Err(OpError {
            op: OP_PUTFH,
            status: NFS4ERR_BADHANDLE
        })
    );
    // Unknown operation numbers: OP_ILLEGAL; known ones not decoded: NOTSUPP.
    for op in [0, 1, 2, 76, 10044, u32::MAX] {
        let c = compound(1, &[V::new().w(op).0]);
        let (_, ops) = decode_all(&c).unwrap();
        assert_eq!(
            ops,
            vec![Err(OpError {
                op: OP_ILLEGAL,
                status: NFS4ERR_OP_ILLEGAL
            })],
            "op {op}"
        );
    }
    for op in [OP_DELEGPURGE, OP_LAYOUTGET, OP_SETCLIENTID, OP_CLONE] {
        let c = compound(1, &[V::new().w(op).0]);
        let (_, ops) = decode_all(&c).unwrap();
        assert_eq!(
            ops,
            vec![Err(OpError {
                op,
                status: NFS4ERR_NOTSUPP
            })]
        );
    }
    // WRITE data over the bound: RESOURCE; a bad stable_how: BADXDR.
    let c = compound(1, &[V::new().w(OP_WRITE).b(&[0; 16]).h(0).w(0).w(MAX_DATA_BYTES + 1).0]);
    assert_eq!(
        decode_all(&c).unwrap().1[0],
        Err(OpError {
            op: OP_WRITE,
            status: NFS4ERR_RESOURCE
        })
    );
    let c = compound(1, &[V::new().w(OP_WRITE).b(&[0; 16]).h(0).w(3).o(b"x").0]);
    assert_eq!(
        decode_all(&c).unwrap().1[0],
        Err(OpError {
            op: OP_WRITE,
            status: NFS4ERR_BADXDR
        })
    );
    // More operations promised than present: BADXDR at the missing one.
    let mut c = compound(1, &[V::new().w(OP_GETFH).0]);
    c[15] = 2;
    let (_, ops) = decode_all(&c).unwrap();
    assert_eq!(
        ops,
        vec![
            Ok(Op::Getfh),
            Err(OpError {
                op: OP_ILLEGAL,
                status: NFS4ERR_BADXDR
            })
        ]
    );
}

#[test]
fn settable_attributes() {
    let f = |mask: &[u32], vals: Vec<u8>| {
        let v: &'static [u8] = Box::leak(vals.into_boxed_slice());
        decode_settable(&Fattr {
            mask: Bitmap::of(mask),
            vals: v,
        })
    };
    let s = f(
        &[
            FATTR4_SIZE,
            FATTR4_MODE,
            FATTR4_OWNER,
            FATTR4_OWNER_GROUP,
            FATTR4_TIME_ACCESS_SET,
            FATTR4_TIME_MODIFY_SET,
        ],
        V::new().h(10).w(0o600).o(b"1000").o(b"100").w(0).w(1).h(5).w(6).0,
    )
    .unwrap();
    assert_eq!(
        (s.size, s.mode, s.uid, s.gid),
        (Some(10), Some(0o600), Some(1000), Some(100))
    );
    assert_eq!(
        (s.atime, s.mtime),
        (Some(SetTime4::Server), Some(SetTime4::Client { secs: 5, nsecs: 6 }))
    );
    assert_eq!(f(&[FATTR4_OWNER], V::new().o(b"bob@example").0), Err(NFS4ERR_BADOWNER));
    assert_eq!(f(&[FATTR4_OWNER], V::new().o(b"99999999999").0), Err(NFS4ERR_BADOWNER));
    assert_eq!(f(&[FATTR4_TYPE], V::new().w(1).0), Err(NFS4ERR_INVAL));
    assert_eq!(f(&[FATTR4_ACL], V::new().w(0).0), Err(NFS4ERR_ATTRNOTSUPP));
    assert_eq!(
        f(&[FATTR4_SIZE], V::new().h(1).w(0).0),
        Err(NFS4ERR_BADXDR),
        "bytes left over"
    );
    assert_eq!(f(&[FATTR4_SIZE], V::new().w(1).0), Err(NFS4ERR_BADXDR), "short");
    assert_eq!(f(&[FATTR4_MODE], V::new().w(0o10000).0), Err(NFS4ERR_INVAL));
}

/// Every operation's vector cut at every offset decodes to an error or to
/// fewer operations, never a panic; whole, it decodes.
#[test]
fn truncation_at_every_offset() {
    let vectors: Vec<Vec<u8>> = vec![
        sequence(),
        V::new().w(OP_PUTFH).o(&[7; 20]).0,
        V::new().w(OP_GETATTR).w(3).w(1).w(2).w(4).0,
        ops_bytes_read(),
        V::new().w(OP_WRITE).w(1).b(&[3; 12]).h(8192).w(2).o(b"hello").0,
        V::new().w(OP_LOOKUP).o(b"name").0,
        V::new().w(OP_CREATE).w(NF4LNK).o(b"target").o(b"ln").w(0).o(&[]).0,
        V::new().w(OP_CREATE).w(NF4CHR).w(1).w(2).o(b"c").w(1).w(0).o(&[]).0,
        V::new().w(OP_RENAME).o(b"a").o(b"b").0,
        V::new().w(OP_READDIR).h(0).b(&[0; 8]).w(4096).w(8192).w(1).w(3).0,
        V::new().w(OP_SETATTR).b(&[0; 16]).w(1).w(1 << FATTR4_SIZE).o(&[0; 8]).0,
        V::new()
            .w(OP_OPEN)
            .w(0)
            .w(1)
            .w(0)
            .h(1)
            .o(b"o")
            .w(1)
            .w(GUARDED4)
            .w(0)
            .o(&[])
            .w(CLAIM_NULL)
            .o(b"f")
            .0,
        V::new().w(OP_CLOSE).w(1).b(&[1; 16]).0,
        V::new().w(OP_COMMIT).h(0).w(0).0,
        V::new().w(OP_TEST_STATEID).w(2).b(&[5; 32]).0,
        V::new().w(OP_BIND_CONN_TO_SESSION).b(&SID).w(CDFC4_FORE_OR_BOTH).w(0).0,
        V::new()
            .w(OP_EXCHANGE_ID)
            .b(&[0; 8])
            .o(b"id")
            .w(0)
            .w(SP4_MACH_CRED)
            .w(1)
            .w(1)
            .w(0)
            .w(0)
            .0,
        V::new().w(OP_DESTROY_SESSION).b(&SID).0,
        V::new().w(OP_DESTROY_CLIENTID).h(5).0,
        V::new().w(OP_RECLAIM_COMPLETE).w(0).0,
        V::new().w(OP_SECINFO_NO_NAME).w(0).0,
        V::new().w(OP_FREE_STATEID).b(&[0; 16]).0,
        V::new().w(OP_ACCESS).w(0x3f).0,
        V::new().w(OP_VERIFY).w(1).w(1 << FATTR4_SIZE).o(&[0; 8]).0,
        lock_new(),
        lock_exist(),
        V::new().w(OP_LOCKT).w(READ_LT).h(0).h(10).h(5).o(b"lo").0,
        V::new()
            .w(OP_LOCKU)
            .w(WRITE_LT)
            .w(0)
            .b(&[2; 16])
            .h(4)
            .h(NFS4_LENGTH_EOF)
            .0,
        V::new().w(OP_RELEASE_LOCKOWNER).h(5).o(b"lo").0,
        V::new().w(OP_ALLOCATE).b(&[1; 16]).h(0).h(4096).0,
        V::new().w(OP_DEALLOCATE).b(&[1; 16]).h(4096).h(8192).0,
        V::new().w(OP_SEEK).b(&[1; 16]).h(100).w(NFS4_CONTENT_HOLE).0,
        copy(&[V::new().w(NL4_NETADDR).o(b"tcp").o(b"10.0.0.1.8.1").0]),
    ];
    for v in &vectors {
        let c = compound(1, std::slice::from_ref(v));
        let (_, ops) = decode_all(&c).unwrap();
        assert!(ops[0].is_ok(), "{:?} from {v:?}", ops[0]);
        for cut in 0..c.len() {
            match decode_all(&c[..cut]) {
                Err(_) => {}
                Ok((_, ops)) => assert!(
                    ops.iter().any(|o| matches!(
                        o,
                        Err(OpError {
                            status: NFS4ERR_BADXDR,
                            ..
                        })
                    )),
                    "cut {cut} of {v:?}: {ops:?}"
                ),
            }
        }
    }
}

/// LOCK with `open_to_lock_owner4`: WRITE_LT, not a reclaim, 10 bytes at
/// 100, open stateid seqid 1 other 0x07..., lock owner (5, "lock-owner").
fn lock_new() -> Vec<u8> {
    V::new()
        .w(OP_LOCK)
        .w(WRITE_LT)
        .w(0)
        .h(100)
        .h(10)
        .w(1)
        .w(4)
        .w(1)
        .b(&[7; 12])
        .w(0)
        .h(5)
        .o(b"lock-owner")
        .0
}

/// LOCK with `exist_lock_owner4`: READW_LT, a reclaim, to the end of file.
fn lock_exist() -> Vec<u8> {
    V::new()
        .w(OP_LOCK)
        .w(READW_LT)
        .w(1)
        .h(0)
        .h(NFS4_LENGTH_EOF)
        .w(0)
        .w(3)
        .b(&[9; 12])
        .w(0)
        .0
}

/// COPY of 4096 bytes from 0 to 8192, synchronous, with `servers`.
fn copy(servers: &[Vec<u8>]) -> Vec<u8> {
    let mut v = V::new()
        .w(OP_COPY)
        .w(1)
        .b(&[1; 12])
        .w(2)
        .b(&[2; 12])
        .h(0)
        .h(8192)
        .h(4096)
        .w(0)
        .w(1)
        .w(servers.len() as u32);
    for s in servers {
        v = v.b(s);
    }
    v.0
}

#[test]
fn locks_by_hand() {
    let c = compound(1, &[lock_new(), lock_exist()]);
    let (_, ops) = decode_all(&c).unwrap();
    assert_eq!(
        ops[0],
        Ok(Op::Lock {
            locktype: WRITE_LT,
            reclaim: false,
            offset: 100,
            length: 10,
            locker: Locker::New {
                open_seqid: 4,
                open_stateid: Stateid {
                    seqid: 1,
                    other: [7; 12]
                },
                lock_seqid: 0,
                owner: LockOwner {
                    clientid: 5,
                    owner: b"lock-owner"
                },
            },
        })
    );
    assert_eq!(
        ops[1],
        Ok(Op::Lock {
            locktype: READW_LT,
            reclaim: true,
            offset: 0,
            length: NFS4_LENGTH_EOF,
            locker: Locker::Exist {
                lock_stateid: Stateid {
                    seqid: 3,
                    other: [9; 12]
                },
                lock_seqid: 0,
            },
        })
    );
    let c = compound(
        1,
        &[
            V::new().w(OP_LOCKT).w(READ_LT).h(0).h(10).h(5).o(b"lo").0,
            V::new().w(OP_LOCKU).w(WRITE_LT).w(4).b(&[2; 16]).h(4).h(6).0,
            V::new().w(OP_RELEASE_LOCKOWNER).h(5).o(b"lo").0,
        ],
    );
    let (_, ops) = decode_all(&c).unwrap();
    let owner = LockOwner {
        clientid: 5,
        owner: b"lo",
    };
    assert_eq!(
        ops,
        vec![
            Ok(Op::Lockt {
                locktype: READ_LT,
                offset: 0,
                length: 10,
                owner
            }),
            Ok(Op::Locku {
                locktype: WRITE_LT,
                seqid: 4,
                stateid: Stateid {
                    seqid: u32::from_be_bytes([2; 4]),
                    other: [2; 12]
                },
                offset: 4,
                length: 6
            }),
            Ok(Op::ReleaseLockowner(owner)),
        ]
    );
    // A lock type outside the enum is not the XDR; an owner over the
    // opaque limit is RESOURCE.
    for (bad, status) in [
        (V::new().w(OP_LOCKT).w(0).h(0).h(1).h(5).o(b"lo").0, NFS4ERR_BADXDR),
        (V::new().w(OP_LOCKT).w(5).h(0).h(1).h(5).o(b"lo").0, NFS4ERR_BADXDR),
        (
            V::new().w(OP_LOCKT).w(1).h(0).h(1).h(5).o(&[1; 1025]).0,
            NFS4ERR_RESOURCE,
        ),
        (
            V::new().w(OP_LOCK).w(1).w(0).h(0).h(1).w(2).b(&[0; 16]).w(0).0,
            NFS4ERR_BADXDR,
        ),
    ] {
        let c = compound(1, &[bad]);
        let (_, ops) = decode_all(&c).unwrap();
        assert!(
            matches!(ops[0], Err(OpError { status: s, .. }) if s == status),
            "{ops:?}"
        );
    }
}

#[test]
fn v42_operations_by_hand() {
    let c = compound(
        2,
        &[
            V::new().w(OP_ALLOCATE).b(&[1; 16]).h(0).h(4096).0,
            V::new().w(OP_DEALLOCATE).b(&[1; 16]).h(4096).h(8192).0,
            V::new().w(OP_SEEK).b(&[1; 16]).h(100).w(NFS4_CONTENT_DATA).0,
            copy(&[]),
            copy(&[
                V::new().w(NL4_NAME).o(b"server").0,
                V::new().w(NL4_URL).o(b"nfs://x/").0,
            ]),
        ],
    );
    let (h, ops) = decode_all(&c).unwrap();
    assert_eq!(h.minorversion, 2);
    let sid = Stateid {
        seqid: 0x0101_0101,
        other: [1; 12],
    };
    assert_eq!(
        ops[..3],
        [
            Ok(Op::Allocate {
                stateid: sid,
                offset: 0,
                length: 4096
            }),
            Ok(Op::Deallocate {
                stateid: sid,
                offset: 4096,
                length: 8192
            }),
            Ok(Op::Seek {
                stateid: sid,
                offset: 100,
                what: NFS4_CONTENT_DATA
            }),
        ]
    );
    let want = Op::Copy {
        src_stateid: Stateid {
            seqid: 1,
            other: [1; 12],
        },
        dst_stateid: Stateid {
            seqid: 2,
            other: [2; 12],
        },
        src_offset: 0,
        dst_offset: 8192,
        count: 4096,
        consecutive: false,
        synchronous: true,
        source_servers: 0,
    };
    assert_eq!(ops[3], Ok(want));
    match ops[4] {
        Ok(Op::Copy { source_servers, .. }) => assert_eq!(source_servers, 2),
        ref o => panic!("{o:?}"),
    }
    // An unknown data_content4: UNION_NOTSUPP; a netloc type outside the
    // enum: BADXDR; more source servers than we walk: RESOURCE.
    let seek = V::new().w(OP_SEEK).b(&[1; 16]).h(0).w(2).0;
    let c = compound(2, &[seek]);
    let (_, ops) = decode_all(&c).unwrap();
    assert_eq!(ops[0].unwrap_err().status, NFS4ERR_UNION_NOTSUPP);
    let c = compound(2, &[copy(&[V::new().w(9).0])]);
    let (_, ops) = decode_all(&c).unwrap();
    assert_eq!(ops[0].unwrap_err().status, NFS4ERR_BADXDR);
    let many: Vec<Vec<u8>> = (0..=MAX_NETLOCS).map(|_| V::new().w(NL4_NAME).o(b"s").0).collect();
    let c = compound(2, &[copy(&many)]);
    let (_, ops) = decode_all(&c).unwrap();
    assert_eq!(ops[0].unwrap_err().status, NFS4ERR_RESOURCE);
}

/// BACKCHANNEL_CTL keeps the first usable callback security (AUTH_SYS
/// here, after an RPCSEC_GSS entry it skips), DELEGRETURN its stateid,
/// OPEN's CLAIM_DELEGATE_CUR and CLAIM_DELEG_CUR_FH the delegation stateid.
#[test]
fn backchannel_ctl_delegreturn_and_deleg_claims() {
    let sid = V::new().w(1).b(&[0xab; 12]).0;
    let bc = V::new()
        .w(OP_BACKCHANNEL_CTL)
        .w(0x4000_0001)
        .w(2)
        .w(6)
        .w(1)
        .o(b"h")
        .o(b"c")
        .w(1)
        .w(77)
        .o(b"host")
        .w(0)
        .w(0)
        .w(1)
        .w(10)
        .0;
    let dr = V::new().w(OP_DELEGRETURN).b(&sid).0;
    let open = |claim: V| {
        V::new()
            .w(OP_OPEN)
            .w(0)
            .w(1)
            .w(0)
            .h(1)
            .o(b"o")
            .w(OPEN4_NOCREATE)
            .b(&claim.0)
            .0
    };
    let cur = open(V::new().w(CLAIM_DELEGATE_CUR).b(&sid).o(b"f"));
    let cur_fh = open(V::new().w(CLAIM_DELEG_CUR_FH).b(&sid));
    let c = compound(1, &[bc, dr, cur, cur_fh]);
    let (_, ops) = decode_all(&c).unwrap();
    let Ok(Op::BackchannelCtl {
        cb_program,
        cb_sec: Some(super::cb::CbSec::Sys(p)),
    }) = ops[0]
    else {
        panic!("{:?}", ops[0])
    };
    assert_eq!(
        (cb_program, p.stamp, p.machinename, p.gids()),
        (0x4000_0001, 77, &b"host"[..], &[10][..])
    );
    let want = Stateid {
        seqid: 1,
        other: [0xab; 12],
    };
    assert_eq!(ops[1], Ok(Op::Delegreturn(want)));
    assert!(
        matches!(ops[2], Ok(Op::Open { claim: Claim::DelegCur { stateid, name: Some(b"f") }, .. }) if stateid == want)
    );
    assert!(matches!(ops[3], Ok(Op::Open { claim: Claim::DelegCur { stateid, name: None }, .. }) if stateid == want));
    // Truncated at every offset: an error for the operation cut, no panic.
    for cut in 0..c.len() {
        let _ = decode_all(&c[..cut]);
    }
}

proptest::proptest! {
    /// `Bitmap::iter` (a bit scan) lists exactly the numbers `has` says are
    /// set, ascending, as a test of every position would; `and_not` clears
    /// exactly `other`'s bits.
    #[test]
    fn bitmap_iter_and_and_not_agree_with_has(a in proptest::array::uniform3(proptest::prelude::any::<u32>()),
                                              b in proptest::array::uniform3(proptest::prelude::any::<u32>())) {
        let (x, y) = (Bitmap { words: a }, Bitmap { words: b });
        let every: Vec<u32> = (0..(32 * BITMAP_WORDS) as u32).filter(|&n| x.has(n)).collect();
        proptest::prop_assert_eq!(x.iter().collect::<Vec<_>>(), every);
        let z = x.and_not(&y);
        for n in 0..(32 * BITMAP_WORDS) as u32 {
            proptest::prop_assert_eq!(z.has(n), x.has(n) && !y.has(n), "bit {}", n);
        }
    }
}

/// The COMPOUND of `ops` (minor version `minor`) followed by `trailing`
/// bytes and cut at `cut`: `final_read_count` must give what decoding every
/// operation gives.
fn hint_agrees(
    minor: u32,
    ops: &[Vec<u8>],
    trailing: &[u8],
    cut: Option<usize>,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let mut c = compound(minor, ops);
    c.extend_from_slice(trailing);
    if let Some(n) = cut {
        c.truncate(n.min(c.len()));
    }
    proptest::prop_assert_eq!(final_read_count(&c), final_read_count_by_decoding(&c), "{:02x?}", c);
    Ok(())
}

/// One operation of a three-operation COMPOUND, near the Linux client's
/// `SEQUENCE, PUTFH, READ` and off it in every field the fast path checks.
fn near_read_op(kind: u8, x: u32, fh_len: u32, pad: u8) -> Vec<u8> {
    match kind % 6 {
        // SEQUENCE, cachethis a boolean or not
        0 => V::new().w(OP_SEQUENCE).b(&[7; 16]).w(x).w(1).w(2).w(x % 3).0,
        // PUTFH of any length around NFS4_FHSIZE, padding zero or not
        1 => {
            let len = fh_len % (NFS4_FHSIZE + 8);
            let mut v = V::new().w(OP_PUTFH).w(len).b(&vec![3; len as usize]);
            let padn = (4 - len % 4) % 4;
            v = v.b(&vec![pad % 2; padn as usize]);
            v.0
        }
        2 => V::new().w(OP_READ).w(1).b(&[9; 12]).h(u64::from(x) << 3).w(x).0,
        3 => V::new().w(OP_GETFH).0,
        4 => V::new().w(x % (OP_LAST + 2)).0,
        _ => V::new().w(OP_PUTROOTFH).0,
    }
}

proptest::proptest! {
    /// `final_read_count`'s fast path for `SEQUENCE, PUTFH, READ` gives
    /// what decoding every operation gives, for that shape, shapes near it,
    /// truncated COMPOUNDs and trailing bytes.
    #[test]
    fn final_read_count_fast_path_agrees_with_the_decoder(
        kinds in proptest::array::uniform3(0u8..6),
        x in proptest::prelude::any::<u32>(),
        fh_len in 0u32..200,
        pad in 0u8..2,
        minor in 0u32..4,
        cut in proptest::option::of(0usize..200),
        trailing in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
    ) {
        // Weighted towards the exact shape: kinds 0, 1, 2 in that order.
        let ops: Vec<Vec<u8>> = kinds.iter().map(|&k| near_read_op(k, x, fh_len, pad)).collect();
        let exact: Vec<Vec<u8>> = [0u8, 1, 2].iter().map(|&k| near_read_op(k, x, fh_len, pad)).collect();
        for ops in [ops, exact] {
            hint_agrees(minor, &ops, &trailing, cut)?;
        }
    }
}

/// One operation of a four-operation COMPOUND, near the Linux client's
/// `SEQUENCE, PUTFH, WRITE, GETATTR`: the kinds of [`near_read_op`], a
/// WRITE whose `stable` and data length (`wlen`, against the `have` bytes
/// that follow it, padded) may be off, and a GETATTR.
fn near_write_op(kind: u8, x: u32, fh_len: u32, pad: u8, wlen: u32, have: u32) -> Vec<u8> {
    match kind % 8 {
        6 => {
            V::new()
                .w(OP_WRITE)
                .w(1)
                .b(&[9; 12])
                .h(u64::from(x) << 12)
                .w(x % 4)
                .w(wlen)
                .b(&vec![5; have as usize])
                .b(&vec![0; ((4 - have % 4) % 4) as usize])
                .0
        }
        7 => V::new().w(OP_GETATTR).w(2).w(x).w(!x).0,
        k => near_read_op(k, x, fh_len, pad),
    }
}

proptest::proptest! {
    /// `final_read_count`'s shortcut for `SEQUENCE, PUTFH, WRITE, X` (X not
    /// READ: `None` without decoding) gives what decoding every operation
    /// gives, for that shape, shapes near it (a READ after the WRITE, data
    /// lengths that do not match the bytes, a `stable` out of range),
    /// truncated COMPOUNDs and trailing bytes.
    #[test]
    fn final_read_count_write_shortcut_agrees_with_the_decoder(
        kinds in proptest::array::uniform4(0u8..8),
        last in 0u8..8,
        x in proptest::prelude::any::<u32>(),
        fh_len in 0u32..200,
        pad in 0u8..2,
        wlen in 0u32..24,
        have in 0u32..24,
        minor in 0u32..4,
        cut in proptest::option::of(0usize..300),
        trailing in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
    ) {
        // Mostly as many data bytes (padded) as the length says.
        let have = if have % 3 == 0 { have } else { wlen };
        let op = |k: u8| near_write_op(k, x, fh_len, pad, wlen, have);
        let ops: Vec<Vec<u8>> = kinds.iter().map(|&k| op(k)).collect();
        // Weighted towards the exact shape, with any last operation.
        let exact: Vec<Vec<u8>> = [0u8, 1, 6, last].iter().map(|&k| op(k)).collect();
        for ops in [ops, exact] {
            hint_agrees(minor, &ops, &trailing, cut)?;
        }
    }
}

/// The Linux client's WRITE COMPOUND has no READ data hint, and the same
/// COMPOUND ending in a READ instead of the GETATTR has the READ's count (the
/// shortcut leaves that one to the decoder).
#[test]
fn final_read_count_of_a_write_compound() {
    let write = near_write_op(6, 0x4000, 16, 0, 8, 8);
    let seq = near_write_op(0, 1, 16, 0, 0, 0);
    let putfh = near_write_op(1, 1, 16, 0, 0, 0);
    let c = compound(
        1,
        &[
            seq.clone(),
            putfh.clone(),
            write.clone(),
            near_write_op(7, 3, 0, 0, 0, 0),
        ],
    );
    assert_eq!(final_read_count(&c), None);
    let c = compound(1, &[seq, putfh, write, near_read_op(2, 0x4000, 0, 0)]);
    assert_eq!(final_read_count(&c), Some(0x4000));
}
