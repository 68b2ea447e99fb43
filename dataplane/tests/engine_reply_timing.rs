//! Arrival-to-reply timing (`Service::reply_timing_every`,
//! `Service::reply_posted`; issue 21 item 5): the engine times a Call from
//! the poll that delivered it to its reply posted, so the time includes the
//! Call's wait behind work the core did before the service took it, which a
//! service's own timer (from `handle_call`) cannot see.
//!
//! Over the deterministic sim fabric: a slow Call and a fast one delivered
//! in one batch; the fast one's reported time must include the slow one's
//! service. And one Call in `every` is reported, with the tag its reply
//! carried.

mod engine_common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dataplane::requester::Requester;
use dataplane::responder::Responder;
use dataplane::service::{CallView, ReplyBuilder, Service, ServiceError};
use dataplane::sim::{SimConfig, SimFabric, SimNetwork};
use engine_common::*;
use proto::negotiate::VersionRange;

const CREDITS: u32 = 8;
/// The slow Call's service time.
const SLOW: Duration = Duration::from_millis(5);

fn pools_for(test: usize) -> &'static Pools {
    static P: [OnceLock<Pools>; 2] = [OnceLock::new(), OnceLock::new()];
    P[test].get_or_init(|| pools(1024, CREDITS, 1))
}

/// The test program's service; ECHO spins for [`SLOW`] first. Every reply
/// is tagged with its procedure plus one.
struct Timed {
    inner: TestService,
    every: u32,
    /// (tag, ns) per `reply_posted`.
    posted: Vec<(u16, u64)>,
    /// The longest `handle_call` of a NULL, measured here.
    null_service_max: Duration,
}

fn proc_of(call: &CallView<'_>) -> u32 {
    let h = call.head();
    u32::from_be_bytes([h[20], h[21], h[22], h[23]])
}

impl Service for Timed {
    fn reply_data_hint(&mut self, call: &CallView<'_>) -> usize {
        self.inner.reply_data_hint(call)
    }

    fn handle_call(&mut self, call: &CallView<'_>, reply: &mut ReplyBuilder<'_>) -> Result<(), ServiceError> {
        let t = Instant::now();
        let p = proc_of(call);
        if p == P_ECHO {
            while t.elapsed() < SLOW {
                std::hint::spin_loop();
            }
        }
        reply.set_stat_tag(p as u16 + 1);
        let r = self.inner.handle_call(call, reply);
        if p == P_NULL {
            self.null_service_max = self.null_service_max.max(t.elapsed());
        }
        r
    }

    fn reply_timing_every(&self) -> u32 {
        self.every
    }

    fn reply_posted(&mut self, tag: u16, ns: u64) {
        self.posted.push((tag, ns));
    }
}

fn null() -> Expect {
    Expect {
        proc_: P_NULL,
        arg: vec![],
        big_n: 0,
        b: 0,
    }
}

fn echo() -> Expect {
    Expect {
        proc_: P_ECHO,
        arg: pattern(7, 64),
        big_n: 0,
        b: 0,
    }
}

type Pair = (
    Requester<'static, SimFabric>,
    Responder<'static, SimFabric, Timed>,
    SimNetwork,
);

fn setup(test: usize, every: u32) -> Pair {
    let p = pools_for(test);
    let net = SimNetwork::new(SimConfig::with_seed(11));
    let srv = Responder::new(
        responder_cfg(p, VersionRange::ALL, CREDITS, 1),
        net.endpoint(),
        Timed {
            inner: TestService::default(),
            every,
            posted: Vec::new(),
            null_service_max: Duration::ZERO,
        },
        p.pool,
        &p.regions,
        0,
        Some("srv"),
    )
    .unwrap();
    let cli = sim_requester(p, &net, CREDITS);
    (cli, srv, net)
}

/// Run `calls` to completion, `batch` submitted at a time with the
/// network stepped until all of them reached the server before it polls.
fn run(
    cli: &mut Requester<'static, SimFabric>,
    srv: &mut Responder<'static, SimFabric, Timed>,
    net: &SimNetwork,
    calls: &[Expect],
) {
    sim_until_ready(cli, srv, net);
    let mut turns = 0;
    let mut ids = Vec::new();
    for e in calls {
        assert!(cli.can_submit(), "no credit for {} calls", calls.len());
        ids.push(submit(cli, e).unwrap());
    }
    cli.poll();
    // Every Call is in the server's receive queue before it polls once.
    for _ in 0..64 {
        net.step();
    }
    let mut done = 0;
    while done < ids.len() {
        srv.poll();
        cli.poll();
        while let Some(c) = cli.poll_completion() {
            outcome_ok(c.outcome).unwrap();
            cli.release(c.id);
            done += 1;
        }
        net.step();
        turns += 1;
        assert!(turns < 200_000, "stuck: {done} of {} done", ids.len());
    }
}

/// One Call at a time until the connection's credits are granted (the
/// first reply grants them); what it timed is forgotten.
fn warm_up(cli: &mut Requester<'static, SimFabric>, srv: &mut Responder<'static, SimFabric, Timed>, net: &SimNetwork) {
    for _ in 0..3 {
        run(cli, srv, net, &[null()]);
    }
    srv.service().posted.clear();
}

#[test]
fn reply_timing_counts_the_wait_behind_a_slow_call_of_the_same_batch() {
    let (mut cli, mut srv, net) = setup(0, 1);
    warm_up(&mut cli, &mut srv, &net);
    srv.service().null_service_max = Duration::ZERO;
    run(&mut cli, &mut srv, &net, &[echo(), null()]);
    let svc = srv.service();
    let posted = svc.posted.clone();
    let of = |p: u32| {
        posted
            .iter()
            .find(|(t, _)| *t == p as u16 + 1)
            .map(|&(_, ns)| Duration::from_nanos(ns))
    };
    assert_eq!(posted.len(), 2, "{posted:?}");
    let (echo_t, null_t) = (of(P_ECHO).expect("ECHO timed"), of(P_NULL).expect("NULL timed"));
    assert!(echo_t >= SLOW, "ECHO {echo_t:?}");
    // The NULL's own service is short; its time from arrival includes the
    // ECHO's service, which ran before it in the same batch.
    assert!(
        svc.null_service_max < SLOW / 2,
        "NULL served in {:?}",
        svc.null_service_max
    );
    assert!(null_t >= SLOW, "NULL {null_t:?}: its wait behind the ECHO is missing");
    let _ = srv.shutdown(100_000);
    cli.shutdown(10_000);
}

#[test]
fn reply_timing_reports_one_call_in_every_with_its_tag() {
    let (mut cli, mut srv, net) = setup(1, 4);
    warm_up(&mut cli, &mut srv, &net);
    let calls: Vec<Expect> = (0..6).map(|_| null()).collect();
    for _ in 0..6 {
        run(&mut cli, &mut srv, &net, &calls);
    }
    let posted = &srv.service().posted;
    assert_eq!(posted.len(), 36 / 4, "{posted:?}");
    assert!(posted
        .iter()
        .all(|&(t, ns)| t == P_NULL as u16 + 1 && ns < 1_000_000_000));
    let _ = srv.shutdown(100_000);
    cli.shutdown(10_000);
}
