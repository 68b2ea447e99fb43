//! The transport engine, both roles, over the deterministic sim fabric.
//!
//! Every seed runs a random mix of the chunk patterns the Linux client sends
//! (inline, Read list, Write list, Reply chunk, Read list + Reply chunk is covered
//! by ECHO large with a padded reply, Position-Zero Read chunk) against a
//! responder, checks every reply byte for byte, then tears everything down and
//! checks that every pool buffer came back. Failures print the seed
//! (`SIM_SEED=<n>` reruns one; `SIM_SEEDS=<k>` runs more).

mod engine_common;

use std::sync::OnceLock;

use dataplane::requester::{CallId, LinkState, Requester};
use dataplane::responder::Responder;
use dataplane::sim::{self, SimConfig, SimNetwork};
use engine_common::*;
use proto::negotiate::VersionRange;

const CREDITS: u32 = 8;
const MAX_CONNS: u32 = 2;

/// One pool per test (tests run in parallel; a pool's per-core cache slots are
/// claimed by one engine at a time), reused across that test's seeds so that a
/// buffer leaked by one seed is caught.
fn pools_for(test: usize) -> &'static Pools {
    static P: [OnceLock<Pools>; 4] = [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
    P[test].get_or_init(|| pools(1024, CREDITS, MAX_CONNS))
}

/// Tiny deterministic generator for the workload (the sim has its own).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn workload(seed: u64, n: usize) -> Vec<Expect> {
    let mut g = Lcg(seed ^ 0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|k| {
            let salt = (seed as u32).wrapping_add(k as u32);
            let e = |proc_, arg, big_n, b| Expect { proc_, arg, big_n, b };
            match g.below(11) {
                0 => e(P_NULL, vec![], 0, 0),
                // Short: fits inline both ways.
                1 => e(P_ECHO, pattern(salt, g.below(200) as usize), 0, 0),
                // Read chunk + Write chunk, lengths not multiples of four.
                2 | 3 => e(P_ECHO, pattern(salt, 1024 + g.below(20_000) as usize), 0, 0),
                // Long reply through the Reply chunk.
                4 => e(P_BIG, vec![], 1100 + g.below(6000) as u32, 0),
                // Long call through a Position-Zero Read chunk.
                5 => e(P_SUM, pattern(salt, 1100 + g.below(9000) as usize), 0, 0),
                // Read list + Reply chunk.
                6 => e(
                    P_RDLONG,
                    pattern(salt, 1024 + g.below(9000) as usize),
                    1100 + g.below(3000) as u32,
                    0,
                ),
                // Several Write chunks (the Linux client never sends this).
                7 => e(P_TWO, vec![], 1 + g.below(3000) as u32, g.below(3000) as u32),
                // Write list + Reply chunk (nor this).
                8 => e(P_WRLONG, vec![], 1 + g.below(3000) as u32, 1100 + g.below(2500) as u32),
                // One Write chunk with more reply inline after its item (the
                // READ shape with a tail).
                9 => e(
                    P_WRTAIL,
                    vec![],
                    1 + g.below(3000) as u32,
                    g.below(WRTAIL_MAX_TAIL as u64 - 12) as u32,
                ),
                _ => e(P_BIG, vec![], g.below(400) as u32, 0),
            }
        })
        .collect()
}

/// Run one seed: `client` versions against `server` versions.
/// Pattern counts over a test's seeds.
#[derive(Default, Debug)]
struct Seen {
    short: u64,
    chunked: u64,
    long_calls: u64,
    write_chunk_replies: u64,
    long_replies: u64,
    inline_replies: u64,
    write_and_long: u64,
}

impl Seen {
    fn assert_all(&self) {
        assert!(self.short > 0 && self.chunked > 0 && self.long_calls > 0, "{self:?}");
        assert!(
            self.write_chunk_replies > 0 && self.long_replies > 0 && self.inline_replies > 0,
            "{self:?}"
        );
        assert!(self.write_and_long > 0, "{self:?}");
    }
}

fn run(
    test: usize,
    seed: u64,
    client: VersionRange,
    server: VersionRange,
    calls: usize,
) -> Result<(u32, Seen), String> {
    let p = pools_for(test);
    let net = SimNetwork::new(SimConfig::with_seed(seed));
    let mut srv = Responder::new(
        responder_cfg(p, server, CREDITS, MAX_CONNS),
        net.endpoint(),
        TestService::default(),
        p.pool,
        &p.regions,
        0,
        Some("srv"),
    )
    .map_err(|e| e.to_string())?;
    let mut cli = Requester::new(requester_cfg(p, client, CREDITS), net.endpoint(), p.pool, &p.regions, 1)
        .map_err(|e| e.to_string())?;
    cli.connect("srv").map_err(|e| e.to_string())?;

    let work = workload(seed, calls);
    let mut next = 0usize;
    let mut done = 0usize;
    let mut inflight: Vec<(CallId, usize)> = Vec::new();
    let mut iterations = 0u64;
    while done < work.len() {
        iterations += 1;
        if iterations > 200_000 {
            return Err(format!(
                "stuck: {done}/{} done, link {:?}, {:?}",
                work.len(),
                cli.link(),
                cli.stats()
            ));
        }
        srv.poll();
        cli.poll();
        while next < work.len() && cli.can_submit() {
            let id = submit(&mut cli, &work[next])?;
            inflight.push((id, next));
            next += 1;
        }
        while let Some(c) = cli.poll_completion() {
            let pos = inflight
                .iter()
                .position(|(id, _)| *id == c.id)
                .ok_or("unknown completion")?;
            let (id, k) = inflight.swap_remove(pos);
            outcome_ok(c.outcome).map_err(|e| format!("call {k} ({:?}): {e}", work[k].proc_))?;
            check_reply(&cli, id, &work[k]).map_err(|e| format!("call {k} proc {}: {e}", work[k].proc_))?;
            cli.release(id);
            done += 1;
        }
        if cli.link() == LinkState::Failed {
            return Err(format!("link failed after {done} calls: {:?}", cli.stats()));
        }
        for _ in 0..4 {
            net.step();
        }
    }
    let vers = cli.version();
    // Tear down and account for every buffer.
    shutdown_both(&mut cli, &mut srv, || {
        let _ = net.run_until_idle(1_000_000);
    })?;
    let s = srv.stats();
    let c = cli.stats();
    let seen = Seen {
        short: c.short_calls,
        chunked: c.chunked_calls,
        long_calls: c.long_calls,
        write_chunk_replies: s.replies_write_chunks,
        long_replies: s.replies_long,
        inline_replies: s.replies_inline,
        write_and_long: s.replies_write_and_long,
    };
    if s.calls != work.len() as u64 || s.replies != work.len() as u64 {
        return Err(format!("responder counted {} calls {} replies", s.calls, s.replies));
    }
    drop(cli);
    drop(srv);
    pool_idle(p)?;
    Ok((vers, seen))
}

fn add(total: &mut Seen, s: Seen) {
    total.short += s.short;
    total.chunked += s.chunked;
    total.long_calls += s.long_calls;
    total.write_chunk_replies += s.write_chunk_replies;
    total.long_replies += s.long_replies;
    total.inline_replies += s.inline_replies;
    total.write_and_long += s.write_and_long;
}

#[test]
fn v1_every_chunk_pattern_many_seeds() {
    let mut total = Seen::default();
    sim::check_seeds(0..500, |seed| {
        let (v, s) = run(0, seed, VersionRange::only(1).unwrap(), VersionRange::ALL, 24)?;
        add(&mut total, s);
        if v != 1 {
            return Err(format!("negotiated v{v}, wanted v1"));
        }
        Ok(())
    });
    total.assert_all();
}

#[test]
fn v2_every_chunk_pattern_many_seeds() {
    let mut total = Seen::default();
    sim::check_seeds(1000..1500, |seed| {
        let (v, s) = run(1, seed, VersionRange::ALL, VersionRange::ALL, 24)?;
        add(&mut total, s);
        if v != 2 {
            return Err(format!("negotiated v{v}, wanted v2"));
        }
        Ok(())
    });
    total.assert_all();
}

#[test]
fn v2_requester_falls_back_to_v1_only_responder() {
    sim::check_seeds(2000..2200, |seed| {
        let (v, _) = run(2, seed, VersionRange::ALL, VersionRange::only(1).unwrap(), 12)?;
        if v != 1 {
            return Err(format!("negotiated v{v}, wanted fallback to v1"));
        }
        Ok(())
    });
}
