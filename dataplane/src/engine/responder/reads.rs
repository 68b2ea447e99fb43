//! Read chunks: a data buffer for the Call's Read chunks, and its RDMA
//! Reads posted as the connection's Read slots allow (RFC 8166 s3.4.5).
//! Owning core only.

use super::*;

impl<'p, F: Fabric, S: Service> Responder<'p, F, S> {
    #[inline(never)]
    pub(super) fn step_chunk_buf(&mut self, i: u32) -> Step {
        match self.bufs.get(Class::Data) {
            Some(b) => {
                let r = self.reqs.get_mut(i).expect("live");
                r.chunk_buf = Some(b);
                r.state = ReqState::NeedReadSlots;
                // Zero only the XDR padding after each chunk (at most 3 bytes
                // each, RFC 8166 s3.4.5.2), so chunk data plus padding is valid
                // XDR; the RDMA Reads write everything else.
                let (pieces, offs) = (r.read_plan, r.chunk_offs);
                let buf = self.bufs.bytes_mut(b);
                for p in pieces.pieces() {
                    if let proto::plan::Piece::Chunk { index, len, pad } = *p {
                        let at = offs.get(index as usize).copied().unwrap_or(0) as usize + len as usize;
                        if let Some(z) = buf.get_mut(at..at + pad as usize) {
                            z.fill(0);
                        }
                    }
                }
                Step::Continue
            }
            None => {
                self.stats.chunk_buf_waits += 1;
                self.wait(i, Queue::ChunkBuf)
            }
        }
    }

    /// Post as many of the request's RDMA Reads as the connection allows.
    #[inline(never)]
    pub(super) fn step_reads(&mut self, i: u32) -> Step {
        let Self {
            reqs,
            conns,
            fabric,
            bufs,
            cfg,
            stats,
            ..
        } = self;
        let r = reqs.get(i).expect("live");
        let Some(c) = conns.get(r.conn).and_then(Option::as_ref) else {
            return Step::Wait;
        };
        // A message can arrive before the accepting side is established (as with
        // RDMA-CM); its work waits until the provider can post.
        if c.state == ConnState::Accepting {
            self.set_state(i, ReqState::NeedReadSlots);
            return self.wait(i, Queue::ReadSlots);
        }
        debug_assert!(
            c.reads_out <= cfg.max_rdma_reads && c.sq_used <= cfg.send_depth,
            "accounting: a connection holds more Read or send-queue slots than it has"
        );
        let (conn_id, room_reads, room_sq) = (
            c.id,
            cfg.max_rdma_reads.saturating_sub(c.reads_out),
            cfg.send_depth.saturating_sub(c.sq_used),
        );
        let room = room_reads.min(room_sq);
        if room == 0 {
            self.set_state(i, ReqState::NeedReadSlots);
            return self.wait(i, Queue::ReadSlots);
        }
        let b = r.chunk_buf.expect("chunk buffer attached");
        let base = bufs.pool.offset(b).unwrap_or(0) as u64;
        let Some(chunks) = r.hdr.as_ref().and_then(|h| h.chunks()) else {
            return Step::Wait;
        };
        let wr_id = req_wr_id(i, r.gen);
        let mut posted = 0u32;
        let mut post_err = false;
        for op in r.read_plan.read_ops(&chunks.reads).skip(r.reads_posted as usize) {
            if posted == room {
                break;
            }
            let wr = SendWr::new(
                wr_id,
                SendOp::RdmaRead,
                LocalBuf {
                    region: b.region,
                    offset: base + op.dest_offset as u64,
                    len: op.segment.length,
                },
                op.segment,
            );
            if fabric.post_send(conn_id, &wr).is_err() {
                post_err = true;
                break;
            }
            posted += 1;
        }
        stats.rdma_reads += posted as u64;
        self.reads_posted_this_turn += posted;
        let rr = reqs.get_mut(i).expect("live");
        rr.reads_posted += posted;
        rr.wr_out += posted;
        let conn = rr.conn;
        let all = rr.reads_posted == rr.reads_total;
        rr.state = if all {
            ReqState::Reading
        } else {
            ReqState::NeedReadSlots
        };
        if let Some(c) = self.conn_mut(conn) {
            c.reads_out += posted;
            c.sq_used += posted;
        }
        if post_err {
            self.kill_conn(conn, true);
            return Step::Wait;
        }
        if all {
            Step::Wait // completions continue it
        } else {
            self.wait(i, Queue::ReadSlots)
        }
    }
}
