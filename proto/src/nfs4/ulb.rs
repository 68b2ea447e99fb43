//! The NFSv4 Upper-Layer Binding (RFC 8267 section 6) as far as a requester
//! needs it to send a COMPOUND: which argument items are DDP-eligible.
//!
//! | operation | direction | item | RFC 8267 |
//! |---|---|---|---|
//! | WRITE | call | `data` | s6.1 |
//! | READ | reply | `data` | s6.1 |
//! | READLINK | reply | `link` | s6.1 |
//!
//! Everything else travels inline or in a Position-Zero Read chunk / Reply
//! chunk. On the responder the NFS service marks the reply's items itself
//! (it builds the reply), so no reply walker is needed there.

use super::args::{CompoundArgs, Op, OpDecoder};
use super::{NFSPROC4_COMPOUND, NFS_V4};
use crate::nfs3::NFS_PROGRAM;
use crate::rpc::CallHeader;
use crate::ulb::DdpItem;
use crate::xdr::Reader;

/// The DDP-eligible items (WRITE data) of an encoded NFSv4 COMPOUND Call,
/// in stream order: offsets from the start of `call` (the XID). Writes at
/// most `out.len()` and returns how many; a Call of another program,
/// version or procedure has none. Stops at the first operation that does
/// not decode (the server stops there too).
pub fn call_items(call: &[u8], out: &mut [DdpItem]) -> usize {
    let mut r = Reader::new(call);
    let Ok(h) = CallHeader::decode_from(&mut r) else {
        return 0;
    };
    if (h.prog, h.vers, h.proc_) != (NFS_PROGRAM, NFS_V4, NFSPROC4_COMPOUND) {
        return 0;
    }
    let Ok(c) = CompoundArgs::decode(&mut r) else {
        return 0;
    };
    let mut d = OpDecoder::new(r, c.numops, None, &[]);
    let mut n = 0;
    while let Some(Ok(op)) = d.next_op() {
        if let Op::Write { data, .. } = op {
            let Some(slot) = out.get_mut(n) else { break };
            // `data` borrows `call`: its offset is the pointer difference.
            let offset = data.as_ptr() as usize - call.as_ptr() as usize;
            *slot = DdpItem {
                offset: offset as u32,
                len: data.len() as u32,
            };
            n += 1;
        }
    }
    n
}
