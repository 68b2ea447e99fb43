//! Interrupt mode for verbs (issue 24 item 1, see `fabric::wake`): one
//! completion channel per fabric that every CQ reports to, and the RDMA-CM
//! event channel (already non-blocking). Arming acknowledges the CQ events
//! that fired (`ibv_get_cq_event` + `ibv_ack_cq_events`), then asks every CQ
//! for its next completion (`ibv_req_notify_cq`); the caller polls the CQs
//! once more before it blocks, which closes the race with a completion
//! that arrived before the request.

use std::os::fd::RawFd;

use super::*;

impl VerbsFabric {
    /// Creates the completion channel (non-blocking, so acknowledging the
    /// events that fired never waits). Start-up, before any CQ.
    pub(super) fn open_comp_channel(&mut self) -> Result<(), FabricError> {
        // SAFETY: `self.ctx` is an open context; the result is checked.
        let comp = unsafe { sys::ibv_create_comp_channel(self.ctx) };
        if comp.is_null() {
            return Err(errno("ibv_create_comp_channel"));
        }
        self.comp = comp;
        // SAFETY: `comp` is valid; `fd` is its open descriptor; fcntl takes
        // integer arguments only.
        let rc = unsafe {
            let fd = (*comp).fd;
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 {
                fl
            } else {
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK)
            }
        };
        if rc < 0 {
            return Err(errno("fcntl(O_NONBLOCK) on the completion channel"));
        }
        Ok(())
    }

    /// Acknowledges the CQ events the channel holds (a CQ cannot be
    /// destroyed with events unacknowledged; `all` before that). Only a CQ
    /// whose notification was requested can have one (`armed`), and only
    /// once a completion was added to it after the request, which a poll
    /// of it then returned (`ArmedCq::polled`): the channel is read for
    /// those alone, so arming again after a wake-up by another source (or
    /// after a re-check that found work before any completion) makes no
    /// system call that finds the channel empty. An event that fired for a
    /// completion not polled yet stays in the channel, which stays readable:
    /// the caller's wait returns at once, it polls that completion, and the
    /// next arming reads the event.
    pub(super) fn ack_cq_events(&mut self, all: bool) {
        if self.comp.is_null() {
            return;
        }
        let mut may_have_fired = if all {
            self.armed.len()
        } else {
            self.armed.iter().filter(|a| a.polled).count()
        };
        while may_have_fired > 0 && !self.armed.is_empty() {
            may_have_fired -= 1;
            let mut cq: *mut sys::ibv_cq = ptr::null_mut();
            let mut cq_ctx: *mut c_void = ptr::null_mut();
            self.counts.event_reads += 1;
            // SAFETY: `self.comp` is our channel (non-blocking: returns -1
            // when empty); the out pointers are live locals.
            if unsafe { sys::ibv_get_cq_event(self.comp, &mut cq, &mut cq_ctx) } != 0 {
                self.counts.empty_event_reads += 1;
                break;
            }
            // SAFETY: `cq` is the CQ the event was for, one of ours.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
            let cqs = &self.cqs;
            if let Some(p) = self
                .armed
                .iter()
                .position(|a| ptr::eq(if a.send { cqs[a.cq].send } else { cqs[a.cq].recv }, cq))
            {
                self.armed.swap_remove(p);
            }
        }
    }

    /// A poll of hardware CQ (`qi`, `send`) returned completions: if it is
    /// armed, its event may have fired (see [`VerbsFabric::ack_cq_events`]).
    #[inline]
    pub(super) fn note_polled(&mut self, qi: usize, send: bool) {
        if let Some(a) = self.armed.iter_mut().find(|a| a.cq == qi && a.send == send) {
            a.polled = true;
        }
    }

    /// The completion channel and the CM event channel.
    pub(super) fn do_wake_fds(&self) -> Vec<RawFd> {
        let mut v = Vec::with_capacity(2);
        if !self.comp.is_null() {
            // SAFETY: `self.comp` is our open channel.
            v.push(unsafe { (*self.comp).fd });
        }
        if !self.channel.is_null() {
            // SAFETY: `self.channel` is our open event channel.
            v.push(unsafe { (*self.channel).fd });
        }
        v
    }

    /// Post what is staged, acknowledge what fired, then request the next
    /// completion of every receive CQ, and of every send CQ when `sends` (a
    /// caller that waits for none of its send-side completions leaves them
    /// unarmed, so that a reply's Send completing after the core blocked
    /// does not wake it). A CQ still armed from an earlier call (its event
    /// not read yet: it has not fired) is not requested again.
    pub(super) fn do_arm_wakeup(&mut self, sends: bool) -> bool {
        if self.comp.is_null() || self.channel.is_null() {
            return false;
        }
        self.flush_all();
        self.ack_cq_events(false);
        for qi in 0..self.cqs.len() {
            for send in [false, true] {
                if (send && !sends) || self.armed.iter().any(|a| a.cq == qi && a.send == send) {
                    continue;
                }
                let cq = if send { self.cqs[qi].send } else { self.cqs[qi].recv };
                self.counts.notify_requests += 1;
                // SAFETY: `cq` is a live CQ of ours created on `self.comp`.
                if unsafe { sys::ibv_req_notify_cq(cq, 0) } != 0 {
                    return false;
                }
                self.armed.push(ArmedCq {
                    cq: qi,
                    send,
                    polled: false,
                });
            }
        }
        true
    }

    /// The fabric's own system-call counters (doorbell batching and
    /// interrupt mode, issue 24 item 1).
    pub fn counts(&self) -> VerbsCounts {
        self.counts
    }
}
