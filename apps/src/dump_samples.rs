#![forbid(unsafe_code)]
//! Hand-written sample messages, one per header type (and RFC 8797 Private Data).
//!
//! They are written word by word from the grammars (RFC 8166 section 4.1;
//! draft-cel-nfsv4-rpcrdma-version-two-09 sections 5 and 6; RFC 8797 section 4),
//! not produced by our encoder, so tests that decode them check the decoder against
//! the specs rather than against itself. The same bytes are committed as
//! `apps/samples/<file>` (for the quick start) and as fuzzing seeds; the test
//! `apps/tests/samples.rs` checks that the committed files match and rewrites them
//! when run with `RPCRDMA_WRITE_SAMPLES=1`.
//!
//! Pure data; may be called from any thread.

/// One sample message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// File name under `apps/samples/`.
    pub file: &'static str,
    /// One line saying what it is.
    pub about: &'static str,
    /// The message bytes.
    pub bytes: Vec<u8>,
    /// Whether this is RFC 8797 Private Data rather than a transport header.
    pub private_data: bool,
}

/// Big-endian XDR words to bytes.
pub fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// NFS program number (RFC 1813).
const NFS_PROGRAM: u32 = 100_003;

/// An ONC RPC CALL header with AUTH_NONE credential and verifier (RFC 5531
/// section 9), for NFSv3 procedure `proc_`, followed by `args`.
pub fn rpc_call(xid: u32, proc_: u32, args: &[u32]) -> Vec<u32> {
    let mut w = vec![xid, 0, 2, NFS_PROGRAM, 3, proc_, 0, 0, 0, 0];
    w.extend_from_slice(args);
    w
}

/// An ONC RPC accepted, successful REPLY with an AUTH_NONE verifier (RFC 5531
/// section 9), followed by `results`.
pub fn rpc_reply(xid: u32, results: &[u32]) -> Vec<u32> {
    let mut w = vec![xid, 1, 0, 0, 0, 0];
    w.extend_from_slice(results);
    w
}

fn cat(parts: &[&[u32]]) -> Vec<u8> {
    words(&parts.concat())
}

/// XIDs of the samples (distinct, so a mix-up shows).
pub const XID_V1_MSG_WRITE: u32 = 0x2a00_0001;
pub const XID_V1_MSG_READ: u32 = 0x2a00_0002;
pub const XID_V1_NOMSG: u32 = 0x2a00_0003;
pub const XID_V1_MSGP: u32 = 0x2a00_0004;
pub const XID_V1_DONE: u32 = 0x2a00_0005;
pub const XID_V1_ERR: u32 = 0x2a00_0006;
pub const XID_V2_MSG: u32 = 0x2b00_0001;
pub const XID_V2_REPLY: u32 = 0x2b00_0002;
pub const XID_V2_NOMSG: u32 = 0x2b00_0003;
pub const XID_V2_CONNPROP: u32 = 0x2b00_0004;
pub const XID_V2_ERR: u32 = 0x2b00_0005;

/// Every sample, in a fixed order.
pub fn all() -> Vec<Sample> {
    let s = |file, about, bytes| Sample {
        file,
        about,
        bytes,
        private_data: false,
    };
    // NFSv3 READ arguments: fhandle3 (8 bytes), offset (u64), count.
    let read_args = [8, 0xdead_beef, 0x0000_0001, 0, 0, 8192];
    // NFSv3 WRITE arguments up to the data: fhandle3, offset, count, stable, data length.
    let write_args = [8, 0xdead_beef, 0x0000_0001, 0, 0, 6000, 2, 6000];
    vec![
        s(
            "v1-msg-write-chunk.bin",
            "RDMA_MSG: NFSv3 READ call, one Write chunk of two segments, no Reply chunk",
            cat(&[
                &[XID_V1_MSG_WRITE, 1, 32, 0], // xid, vers 1, credits, RDMA_MSG
                &[0],                          // Read list: empty
                &[1, 2, 0x1001, 4096, 0x7f00, 0x1000, 0x1002, 4096, 0x7f00, 0x2000], // Write chunk
                &[0],                          // end of Write list
                &[0],                          // no Reply chunk
                &rpc_call(XID_V1_MSG_WRITE, 6, &read_args),
            ]),
        ),
        s(
            "v1-msg-read-chunk.bin",
            "RDMA_MSG: NFSv3 WRITE call whose data is a Read chunk of two segments at position 72",
            cat(&[
                &[XID_V1_MSG_READ, 1, 16, 0],
                &[1, 72, 0x3001, 4096, 0, 0x10_0000], // Read segment 1
                &[1, 72, 0x3002, 1904, 0, 0x20_0000], // Read segment 2, same chunk
                &[0],                                 // end of Read list
                &[0],                                 // Write list: empty
                &[0],                                 // no Reply chunk
                &rpc_call(XID_V1_MSG_READ, 7, &write_args),
            ]),
        ),
        s(
            "v1-nomsg-pzrc.bin",
            "RDMA_NOMSG: Position-Zero Read chunk carrying the call, and a Reply chunk",
            cat(&[
                &[XID_V1_NOMSG, 1, 8, 1],        // RDMA_NOMSG
                &[1, 0, 0x2001, 2048, 0x1, 0x0], // PZRC segment
                &[0],
                &[0],
                &[1, 1, 0x2002, 4096, 0x2, 0x0], // Reply chunk, one segment
            ]),
        ),
        s(
            "v1-msgp.bin",
            "RDMA_MSGP (deprecated): align 64, thresh 1024, NFSv3 NULL call",
            cat(&[
                &[XID_V1_MSGP, 1, 4, 2, 64, 1024],
                &[0, 0, 0],
                &rpc_call(XID_V1_MSGP, 0, &[]),
            ]),
        ),
        s("v1-done.bin", "RDMA_DONE", words(&[XID_V1_DONE, 1, 0, 3])),
        s(
            "v1-err-vers.bin",
            "RDMA_ERROR ERR_VERS: sender supports versions 1 to 2",
            words(&[XID_V1_ERR, 1, 0, 4, 1, 1, 2]),
        ),
        s(
            "v1-err-chunk.bin",
            "RDMA_ERROR ERR_CHUNK",
            words(&[XID_V1_ERR, 1, 0, 4, 2]),
        ),
        s(
            "v2-msg.bin",
            "RDMA2_MSG: NFSv3 WRITE call, inv_handle 0x77, Read chunk at position 72, Reply chunk",
            cat(&[
                &[XID_V2_MSG, 2, 64, 0, 0, 0x77], // xid, vers 2, credits, htype, flags, inv_handle
                &[1, 72, 0x4001, 6000, 0, 0x30_0000],
                &[0],
                &[0],
                &[1, 1, 0x4002, 1024, 0, 0x40_0000],
                &rpc_call(XID_V2_MSG, 7, &write_args),
            ]),
        ),
        s(
            "v2-msg-reply.bin",
            "RDMA2_MSG with RPCRDMA2_F_RESPONSE: NFSv3 NULL reply",
            cat(&[
                &[XID_V2_REPLY, 2, 64, 0, 1, 0],
                &[0, 0, 0],
                &rpc_reply(XID_V2_REPLY, &[]),
            ]),
        ),
        s(
            "v2-nomsg.bin",
            "RDMA2_NOMSG: Position-Zero Read chunk of two segments and one Write chunk",
            cat(&[
                &[XID_V2_NOMSG, 2, 64, 1, 0, 0],
                &[1, 0, 0x5001, 4096, 0, 0x1000, 1, 0, 0x5002, 100, 0, 0x2000],
                &[0],
                &[1, 1, 0x5003, 65536, 0, 0x3000],
                &[0],
                &[0],
            ]),
        ),
        s(
            "v2-connprop.bin",
            "RDMA2_CONNPROP: RBSIZ 8192, BRS RDMA2_RVREQSUP_GENL, unknown property 99 = \"abcde\"",
            words(&[
                XID_V2_CONNPROP,
                2,
                0,
                5,
                0,
                3,
                1,
                4,
                8192,
                2,
                4,
                2,
                99,
                5,
                0x6162_6364,
                0x6500_0000,
            ]),
        ),
        s(
            "v2-error.bin",
            "RDMA2_ERROR RDMA2_ERR_WRITE_RESOURCE: chunk 1 needs 4096 bytes",
            words(&[XID_V2_ERR, 2, 1, 4, 1, 7, 1, 4096]),
        ),
        s(
            "v2-err-vers.bin",
            "RDMA2_ERROR RDMA2_ERR_VERS: sender supports versions 1 to 2",
            words(&[XID_V2_ERR, 2, 1, 4, 1, 1, 1, 2]),
        ),
        Sample {
            file: "private-data.bin",
            about: "RFC 8797 Private Data: R set, send 4096 bytes, receive 8192 bytes",
            bytes: vec![0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x07],
            private_data: true,
        },
    ]
}

/// The sample stored as `file`.
pub fn by_file(file: &str) -> Option<Sample> {
    all().into_iter().find(|s| s.file == file)
}
