//! Execution: the service run on the Call's view (zero copy), deferral,
//! direct placement into the requester's Write chunk, and the choice of the
//! reply's form ([`ReplyForm`]; RFC 8166 s3.5). Owning core only.

use super::*;

impl<'p, F: Fabric, S: Service> Responder<'p, F, S> {
    /// Run the service on the Call and plan its reply (`Execute`), after
    /// taking the reply buffers it needs (`NeedReplyBufs`), or resume a
    /// deferred one (`Resume`). When the service asks for no data buffer
    /// and the slot already holds its send and head buffers (the steady
    /// state), the Call's view is built once, for the hint and the service.
    #[inline]
    pub(super) fn step_execute(&mut self, i: u32) -> Step {
        let p = self.step_parts(i);
        let (r, conns, bufs, service, fabric, stages) = (p.r, p.conns, p.bufs, p.service, p.fabric, p.stages);
        let resuming = r.state == ReqState::Resume;
        let chunk_area = r.chunk_buf.map_or(&[][..], |b| bufs.bytes(b));
        if r.state == ReqState::Execute {
            let Some(mut view) = call_view(r, conns, chunk_area) else {
                return self.control(i, Control::ErrorV1(header::V1Error::Chunk));
            };
            // The RPC message's XID must be the transport header's
            // (RFC 8166 s4.1: rdma_xid is the XID of the RPC message it
            // conveys). An inline one was checked at decode; a Long Call's
            // message arrives by RDMA Read, so it is checked here, before
            // the service sees it: a mismatch is a header that cannot be
            // parsed (ERR_CHUNK, s4.5; RDMA2_ERR_BAD_XDR, draft s5.3.3).
            let long = r.hdr.as_ref().is_some_and(|h| matches!(h.body, Body::NoMsg { .. }));
            if long && view.head().get(..4) != Some(&r.xid.to_be_bytes()[..]) {
                let ctl = if r.vers == RPCRDMA_VERSION_2 {
                    Control::ErrorV2(header::V2Error::BadXdr)
                } else {
                    Control::ErrorV1(header::V1Error::Chunk)
                };
                return self.control(i, ctl);
            }
            let hint = service.reply_data_hint(&view);
            if hint == 0 && r.send_buf.is_some() && r.head_buf.is_some() {
                let ran = run_service(service, fabric, bufs, conns, stages, r, i, &mut view, false);
                return self.after_service(i, ran);
            }
            r.data_hint = hint.min(u32::MAX as usize) as u32;
            r.state = ReqState::NeedReplyBufs;
        }
        // Reply buffers: a send buffer (transport header + inline reply), a head
        // buffer, and a data buffer when the service asks for one.
        if !r.take_reply_bufs(bufs) {
            return self.wait(i, Queue::ReplyBufs);
        }
        let r = &*r;
        let Some(mut view) = call_view(r, conns, chunk_area) else {
            return self.control(i, Control::ErrorV1(header::V1Error::Chunk));
        };
        let ran = run_service(service, fabric, bufs, conns, stages, r, i, &mut view, resuming);
        self.after_service(i, ran)
    }

    /// What follows the service's `handle_call` or `resume` of request `i`
    /// (`res`; `deferred`: it deferred the reply; `shape`: the reply it
    /// built; `window`: the data item went into the requester's Write chunk,
    /// [`data_window`]): hold a deferred Call, drop a dropped one, or plan
    /// the reply.
    ///
    /// Called on the request's core only.
    #[inline(always)]
    pub(super) fn after_service(&mut self, i: u32, ran: Ran) -> Step {
        let Ran {
            res,
            deferred,
            shape,
            window,
        } = ran;
        let p = self.step_parts(i);
        let (r, bufs, deferred_calls, stats, send_size) = (p.r, p.bufs, p.deferred, p.stats, p.send_size);
        // A deferral stands even beside an error: the service may have I/O
        // in flight into this Call's buffers, which must stay held until it
        // reports the Call (it can drop it then, from `resume`).
        if deferred && window.is_some() {
            // The service promised not to (`fills_data_in_call`): the window
            // cannot outlive this step.
            debug_assert!(false, "a service that fills data in the call deferred one");
            self.stats.dropped += 1;
            self.drop_call(i, true);
            return Step::Wait;
        }
        if deferred {
            stats.deferred += 1;
            *deferred_calls += 1;
            r.state = ReqState::Deferred;
            return Step::Wait;
        }
        match res {
            Ok(()) => {}
            Err(ServiceError::Drop) => {
                stats.unanswered_service_drop += 1;
                r.replied = true;
                self.drop_call(i, true);
                return Step::Wait;
            }
            // Run again later, in arrival order, keeping its buffers
            // (`NeedReplyBufs` takes none it holds).
            Err(ServiceError::Busy) => {
                stats.backend_waits += 1;
                r.state = ReqState::NeedReplyBufs;
                return self.wait(i, Queue::Backend);
            }
            // Answered with the transport's error (RFC 8166 s4.5; draft
            // s5.3.3), which returns the credit: never silence.
            Err(ServiceError::Reject) => {
                stats.service_rejected += 1;
                let ctl = if r.vers == RPCRDMA_VERSION_2 {
                    Control::ErrorV2(header::V2Error::System)
                } else {
                    Control::ErrorV1(header::V1Error::Chunk)
                };
                return self.control(i, ctl);
            }
        }
        let send_max = r.inline_max;
        let vers = r.vers;
        // A chunk-free Call whose whole reply fits inline: nothing to plan
        // (no Write chunk to fill, no Reply chunk), so `step_send` writes the
        // one-step Short header and the reply after it. This is the Short
        // plan `plan_reply` would make (RFC 8166 s3.5.2; draft s4.3.2):
        // header, then the reply with its DDP items left inline.
        if r.chunk_free && short_reply_fits(vers, &shape, send_max.min(send_size)) {
            r.shape = shape;
            r.form = ReplyForm::Short;
            r.sq_need = 1;
            r.state = ReqState::NeedSendSlots;
            return Step::Continue;
        }
        // Plan the reply against the Call's Write list and Reply chunk.
        let Some(chunks) = r.hdr.as_ref().and_then(|h| h.chunks()) else {
            return self.control(i, Control::ErrorV1(header::V1Error::Chunk));
        };
        // The READ shape: one Write chunk of one segment and a reply with one
        // non-empty DDP item that fits it, the rest inline. This is the
        // Short plan `plan_reply` would make (one RDMA Write, then the Send;
        // RFC 8166 s3.4.6, s3.5.2), without planning and write-op walks.
        if let Some(seg) = chunks.one_write_segment() {
            let inline_max = send_max.min(send_size);
            let fits = plan::one_write_short_reply(shape.stream_len() as usize, shape.items(), seg, vers, inline_max);
            if fits.is_some() && shape.items().first().is_some_and(|it| it.len > 0) {
                // In place when the chunk's one item is the data item, which
                // the service wrote at the window's start.
                let in_place =
                    window.is_some() && shape.items().len() == 1 && shape.items()[0].offset == shape.head_len;
                if !in_place {
                    copy_back(bufs, r, window, shape.data_len);
                }
                r.shape = shape;
                r.form = ReplyForm::OneWrite { seg, placed: in_place };
                r.sq_need = if in_place { 1 } else { 2 };
                r.state = ReqState::NeedSendSlots;
                return Step::Continue;
            }
        }
        // Any other plan reads the data item from the data buffer.
        copy_back(bufs, r, window, shape.data_len);
        match plan::plan_reply(shape.stream_len() as usize, shape.items(), chunks, vers, send_max) {
            Ok(p) => {
                let n_writes = p.write_ops(chunks).count() as u32;
                r.shape = shape;
                r.form = ReplyForm::Planned(p);
                r.sq_need = n_writes + 1;
                r.state = ReqState::NeedSendSlots;
                Step::Continue
            }
            Err(e) => {
                let ctl = if vers == RPCRDMA_VERSION_2 {
                    Control::ErrorV2(e.v2())
                } else {
                    Control::ErrorV1(e.v1())
                };
                self.control(i, ctl)
            }
        }
    }
}

/// What the service made of a Call ([`run_service`]): its result, whether
/// it deferred the reply, the reply it built, and the window its data item
/// went into ([`data_window`]), if any.
pub(super) struct Ran {
    res: Result<(), ServiceError>,
    deferred: bool,
    shape: ReplyShape,
    window: Option<(std::ptr::NonNull<u8>, usize)>,
}

/// Run the service on request `r` (slot `i`, holding its send and head
/// buffers, and its data buffer when it asked for one): `handle_call`, or
/// `resume` when `resuming`, with `view`, into a reply built in the head
/// buffer and the data buffer, or straight into the requester's Write
/// chunk when the provider maps it and the service fills data within the
/// call ([`data_window`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn run_service<F: Fabric, S: Service>(
    service: &mut S,
    fabric: &mut F,
    bufs: &mut EngineBufs<'_>,
    conns: &Slab<Option<Conn>>,
    stages: &mut StageTimer,
    r: &Request<'_>,
    i: u32,
    view: &mut CallView<'_>,
    resuming: bool,
) -> Ran {
    let token = defer_token(i, r.gen);
    view.token = Some(token);
    let head = r.head_buf.expect("head").bytes_mut();
    let head_room = head.len() - HEAD_PAD_BYTES;
    let data = r.data_buf.map(|b| bufs.bytes_mut(b));
    // The data item straight into the requester's Write chunk, where the
    // provider maps it and the service fills it before returning.
    let window = match &data {
        Some(d) if !resuming && service.fills_data_in_call() => data_window(fabric, conns, r, d.len()),
        _ => None,
    };
    let data = match window {
        // SAFETY: `data_window` checked `len` bytes at `p` to be inside a
        // region of the peer's mapped here, which stays mapped until this
        // core next calls into the fabric (`Fabric::remote_window`); the
        // slice and the window live in this step only (here and in
        // `after_service`), before any such call. The peer gave that memory
        // to this Call's reply (its Write chunk), as it does for an RDMA
        // Write, and does not touch it until the Reply.
        Some((p, len)) => Some(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) }),
        None => data,
    };
    let mut rb = ReplyBuilder::new(&mut head[..head_room], data);
    stages.lap(LAP_SERVICE_START, r.t0);
    let res = if resuming {
        service.resume(token, view, &mut rb)
    } else {
        service.handle_call(view, &mut rb)
    };
    stages.lap(LAP_SERVICE_DONE, r.t0);
    let deferred = rb.is_deferred();
    Ran {
        res,
        deferred,
        shape: rb.finish(),
        window,
    }
}

/// The requester's memory behind the Call's single Write chunk, as the data
/// buffer's stand-in (`len` = the data hint, at most the data buffer's
/// `cap`), when the provider maps it here ([`Fabric::remote_window`]) and the
/// chunk has room for all of it.
pub(super) fn data_window<F: Fabric>(
    fabric: &mut F,
    conns: &Slab<Option<Conn>>,
    r: &Request,
    cap: usize,
) -> Option<(std::ptr::NonNull<u8>, usize)> {
    let seg = r.hdr.as_ref()?.chunks()?.one_write_segment()?;
    let len = (r.data_hint as usize).min(cap);
    if len == 0 || (seg.length as usize) < len {
        return None;
    }
    let c = conns.get(r.conn)?.as_ref()?;
    fabric.remote_window(c.id, &seg, len as u32).map(|p| (p, len))
}

/// The data item the service wrote into a window, copied into the Call's
/// data buffer for a reply that does not go out in that Write chunk alone
/// (nothing without a window).
pub(super) fn copy_back(
    bufs: &mut EngineBufs<'_>,
    r: &Request,
    window: Option<(std::ptr::NonNull<u8>, usize)>,
    data_len: u32,
) {
    let (Some((p, len)), Some(b)) = (window, r.data_buf) else {
        return;
    };
    let n = (data_len as usize).min(len);
    // SAFETY: as where the window was made (`run_service`, whose result
    // `step_execute` hands to `after_service`, the only caller): still the
    // same step, no fabric call since, `n <= len` bytes at `p` in the peer's
    // mapped memory.
    let src = unsafe { std::slice::from_raw_parts(p.as_ptr(), n) };
    if let Some(dst) = bufs.bytes_mut(b).get_mut(..n) {
        dst.copy_from_slice(src);
    }
}

/// Whether the reply `shape` to a chunk-free Call of version `vers` goes as
/// the one-step Short reply: header and whole reply within `inline_max`
/// bytes, its DDP items left inline. That is the Short plan `plan_reply`
/// would make against empty chunk lists (RFC 8166 s3.5.2; draft s4.3.2).
#[inline]
pub(super) fn short_reply_fits(vers: u32, shape: &ReplyShape, inline_max: u32) -> bool {
    plan::chunk_free_header_len(vers).is_some_and(|hdr_len| {
        let len = shape.stream_len();
        hdr_len as u64 + len <= u64::from(inline_max) && plan::items_valid(shape.items(), len)
    })
}
