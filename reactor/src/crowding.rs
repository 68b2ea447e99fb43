//! The crowded-CPU move: a pinned core whose CPU other threads crowd while
//! another CPU of the process sits idle is pinned to that CPU instead.
//!
//! Why: a pinned core that spins between Calls shares its CPU with whatever
//! else the scheduler puts there. When that is the client that waits for
//! the core's replies (a benchmark or an application on the same host, or,
//! in the Soft-RoCE guest of `tests/kernel/`, `fio` and the completion
//! work of the kernel's NFS client), every Call's work runs on one CPU in
//! turn while another CPU idles, and a queue-depth-1 client runs at half
//! speed (docs/BENCHMARKS.md, "Pinned or floating cores"). Letting every
//! core float all the time escapes that but costs elsewhere; the kernel
//! does not move the client either (it wakes where its completions run,
//! next to the core). So the core moves, only when the crowding is seen,
//! and stays pinned where it went.
//!
//! What is seen, per window of [`CrowdRule::window`] (from the kernel's
//! scheduler statistics, `sched_info`): the core's thread waited to run
//! (it was runnable while something else ran) for at least
//! [`CrowdRule::wait_min`] of the window, and some other CPU of the
//! process ran tasks for at most [`CrowdRule::idle_run_max`] of it. After
//! [`CrowdRule::windows`] such windows in a row the core is pinned to the
//! idlest such CPU, preferring one that is no other core's. A move that
//! comes within [`CrowdRule::calm`] of the core's last one needs twice as
//! many windows as that one did (at most `windows << MAX_BACKOFF_SHIFT`),
//! so that a client that follows the core cannot make it move on every
//! window. A core that is never crowded never moves: on a server whose
//! core CPUs are kept for the cores, nothing happens.
//!
//! [`CrowdWatch`] is the decision, sans IO (samples in, [`Action`]s out);
//! `spawn_watch` is the helper thread that reads the statistics from
//! `/proc` and applies the actions with `sched_setaffinity`. Neither runs
//! on a core thread.

use std::collections::VecDeque;
use std::time::Duration;

use crate::affinity::set_thread_cpus;

/// Moves in quick succession double the windows needed at most this many
/// times.
pub const MAX_BACKOFF_SHIFT: u32 = 3;

/// When a core counts as crowded, and how moves back off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrowdRule {
    /// Sampling window.
    pub window: Duration,
    /// Share of a window the core's thread must have waited to run.
    pub wait_min: f64,
    /// Share of a window another CPU may have run tasks and still count as
    /// idle.
    pub idle_run_max: f64,
    /// Crowded windows in a row before the core moves.
    pub windows: u32,
    /// Moves of one core further apart than this need only `windows`.
    pub calm: Duration,
}

impl Default for CrowdRule {
    /// 100 ms windows; waited ≥ 20 % with another CPU running ≤ 30 %, two
    /// windows in a row; 10 s calm. From the probe in docs/BENCHMARKS.md
    /// ("The crowded-CPU move"): with the client on the core's CPU the core
    /// waited 21-31 % of each window and the other CPU ran 18-24 %; with
    /// the client elsewhere the core waited 7-17 % and the other CPU ran
    /// 41-63 %.
    fn default() -> Self {
        CrowdRule {
            window: Duration::from_millis(100),
            wait_min: 0.2,
            idle_run_max: 0.3,
            windows: 2,
            calm: Duration::from_secs(10),
        }
    }
}

/// One reading of the cumulative counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    /// When it was read (any monotonic clock, nanoseconds).
    pub at_ns: u64,
    /// Per CPU of the process: `(cpu, time tasks ran on it, ns)`.
    pub cpu_run_ns: Vec<(usize, u64)>,
    /// Per watched core, in the order given to [`CrowdWatch::new`]: the
    /// time its thread has waited to run, ns; `None` when it could not be
    /// read (the core's thread has exited).
    pub core_wait_ns: Vec<Option<u64>>,
}

/// What the watcher must do to a core's thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    /// Index of the core among those watched.
    pub core: usize,
    /// The CPU to pin it to from now on.
    pub cpu: usize,
}

#[derive(Debug, Clone)]
struct CoreState {
    home: usize,
    hits: u32,
    /// A move within `calm` of the last needs `windows << shift` windows.
    shift: u32,
    last_move_ns: Option<u64>,
    moves: u64,
}

/// The decision, fed [`Sample`]s by [`CrowdWatch::handle_sample`] and
/// drained with [`CrowdWatch::poll_action`]. Sans IO; used by one thread.
#[derive(Debug, Clone)]
pub struct CrowdWatch {
    rule: CrowdRule,
    cores: Vec<CoreState>,
    prev: Option<Sample>,
    out: VecDeque<Action>,
}

impl CrowdWatch {
    /// Watches cores pinned to `homes` (one CPU each) under `rule`.
    pub fn new(rule: CrowdRule, homes: &[usize]) -> Self {
        CrowdWatch {
            rule,
            cores: homes
                .iter()
                .map(|&home| CoreState {
                    home,
                    hits: 0,
                    shift: 0,
                    last_move_ns: None,
                    moves: 0,
                })
                .collect(),
            prev: None,
            out: VecDeque::new(),
        }
    }

    /// Moves core `core` has made so far.
    pub fn moves(&self, core: usize) -> u64 {
        self.cores[core].moves
    }

    /// The CPU core `core` is pinned to now.
    pub fn home(&self, core: usize) -> usize {
        self.cores[core].home
    }

    /// Takes the next action, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.out.pop_front()
    }

    /// Feeds one reading. The first only sets the baseline; so does one
    /// whose clock did not advance, or whose shape (CPUs, cores) differs
    /// from the previous one (and then every core's run of crowded windows
    /// starts again).
    pub fn handle_sample(&mut self, s: Sample) {
        let Some(prev) = self.prev.take() else {
            self.prev = Some(s);
            return;
        };
        let now = s.at_ns;
        let window_ns = now.saturating_sub(prev.at_ns);
        let same_shape = s.core_wait_ns.len() == self.cores.len()
            && prev.core_wait_ns.len() == self.cores.len()
            && s.cpu_run_ns.len() == prev.cpu_run_ns.len()
            && s.cpu_run_ns.iter().zip(&prev.cpu_run_ns).all(|(a, b)| a.0 == b.0);
        if window_ns == 0 || !same_shape {
            for c in &mut self.cores {
                c.hits = 0;
            }
            self.prev = Some(s);
            return;
        }
        let share = |d: u64| d as f64 / window_ns as f64;
        let rule = self.rule;
        let calm_ns = u64::try_from(rule.calm.as_nanos()).unwrap_or(u64::MAX);
        // CPU run shares of this window; counters that went backwards are
        // no reading (as busy).
        let runs: Vec<(usize, f64)> = s
            .cpu_run_ns
            .iter()
            .zip(&prev.cpu_run_ns)
            .map(|((cpu, a), (_, b))| (*cpu, if a >= b { share(a - b) } else { f64::INFINITY }))
            .collect();
        for i in 0..self.cores.len() {
            let waited = match (s.core_wait_ns[i], prev.core_wait_ns[i]) {
                // A counter that went backwards (a new thread) is no reading.
                (Some(a), Some(b)) if a >= b => share(a - b),
                _ => {
                    self.cores[i].hits = 0;
                    continue;
                }
            };
            let home = self.cores[i].home;
            // The idlest other CPU, one that is no other core's first.
            let target = runs
                .iter()
                .filter(|(cpu, run)| *cpu != home && *run <= rule.idle_run_max)
                .min_by(|a, b| {
                    let taken = |cpu: usize| self.cores.iter().any(|c| c.home == cpu);
                    (taken(a.0), a.1)
                        .partial_cmp(&(taken(b.0), b.1))
                        .unwrap_or(std::cmp::Ordering::Equal)
                })
                .map(|(cpu, _)| *cpu);
            let c = &mut self.cores[i];
            match target {
                Some(_) if waited >= rule.wait_min => c.hits += 1,
                _ => c.hits = 0,
            }
            let quick = c.last_move_ns.is_some_and(|t| now.saturating_sub(t) < calm_ns);
            let needed = rule.windows.max(1) << if quick { c.shift } else { 0 };
            let Some(cpu) = target.filter(|_| c.hits >= needed) else {
                continue;
            };
            c.shift = if quick { (c.shift + 1).min(MAX_BACKOFF_SHIFT) } else { 1 };
            c.home = cpu;
            c.hits = 0;
            c.last_move_ns = Some(now);
            c.moves += 1;
            self.out.push_back(Action { core: i, cpu });
        }
        self.prev = Some(s);
    }
}

/// Parses `/proc/schedstat` (versions 15 and later): per `cpuN` line, the
/// time tasks ran on it (its 7th counter, `rq_cpu_time`, ns). CPUs not in
/// `cpus` are left out; the result follows `cpus`' order. `None` if the
/// text has no `cpuN` line for one of `cpus` or an unknown version.
pub fn parse_schedstat(text: &str, cpus: &[usize]) -> Option<Vec<(usize, u64)>> {
    let mut version_ok = false;
    let mut out: Vec<Option<u64>> = vec![None; cpus.len()];
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        match f.next() {
            Some("version") => {
                version_ok = f.next().and_then(|v| v.parse::<u32>().ok()).is_some_and(|v| v >= 15);
            }
            Some(name) if name.starts_with("cpu") => {
                let Ok(cpu) = name[3..].parse::<usize>() else { continue };
                let Some(slot) = cpus.iter().position(|&c| c == cpu) else {
                    continue;
                };
                // yld_count, legacy, sched_count, sched_goidle, ttwu_count,
                // ttwu_local, rq_cpu_time
                out[slot] = f.nth(6).and_then(|v| v.parse::<u64>().ok());
            }
            _ => {}
        }
    }
    if !version_ok {
        return None;
    }
    cpus.iter().zip(out).map(|(&c, v)| v.map(|v| (c, v))).collect()
}

/// Parses a thread's `schedstat` (`run_ns wait_ns timeslices`): the time
/// it waited to run, ns.
pub fn parse_thread_schedstat(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// A watched core thread: its kernel thread id and its own CPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watched {
    pub(crate) tid: libc::pid_t,
    pub(crate) home: usize,
}

/// Reads the cumulative counters from `/proc` (or a tree laid out like
/// it, for tests). Each reading opens the files again: a few system calls
/// per window on the watcher thread, none on a core. Any non-core thread.
struct ProcReader {
    root: std::path::PathBuf,
    tids: Vec<libc::pid_t>,
    cpus: Vec<usize>,
    buf: String,
}

impl ProcReader {
    /// Fails when `root/schedstat` has no per-CPU run times for `cpus` (a
    /// kernel without `sched_info`, or a sandbox), so that this is found
    /// at start rather than on every window.
    fn open(root: &std::path::Path, cores: &[Watched], cpus: &[usize]) -> std::io::Result<ProcReader> {
        let mut r = ProcReader {
            root: root.to_path_buf(),
            tids: cores.iter().map(|c| c.tid).collect(),
            cpus: cpus.to_vec(),
            buf: String::with_capacity(16 << 10),
        };
        let path = root.join("schedstat");
        r.read(&path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        r.read_cpus().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("no per-CPU run times in {}", root.join("schedstat").display()),
            )
        })?;
        Ok(r)
    }

    fn read(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Read;
        self.buf.clear();
        std::fs::File::open(path)?.read_to_string(&mut self.buf)?;
        Ok(())
    }

    fn read_cpus(&mut self) -> Option<Vec<(usize, u64)>> {
        self.read(&self.root.join("schedstat")).ok()?;
        parse_schedstat(&self.buf, &self.cpus)
    }

    /// The sample, and each core thread's run time (ns; 0 when unread).
    /// `None` when `schedstat` cannot be read or parsed this time.
    fn sample(&mut self, at_ns: u64) -> Option<(Sample, Vec<u64>)> {
        let cpu_run_ns = self.read_cpus()?;
        let mut waits = Vec::with_capacity(self.tids.len());
        let mut runs = Vec::with_capacity(self.tids.len());
        for i in 0..self.tids.len() {
            let path = self.root.join(format!("self/task/{}/schedstat", self.tids[i]));
            let read = self.read(&path).ok().and_then(|()| {
                let run = self.buf.split_ascii_whitespace().next()?.parse::<u64>().ok()?;
                Some((run, parse_thread_schedstat(&self.buf)?))
            });
            runs.push(read.map_or(0, |r| r.0));
            waits.push(read.map(|r| r.1));
        }
        Some((
            Sample {
                at_ns,
                cpu_run_ns,
                core_wait_ns: waits,
            },
            runs,
        ))
    }
}

/// What the watcher thread is given.
pub(crate) struct WatchSetup {
    /// When a core counts as crowded.
    pub(crate) rule: CrowdRule,
    /// The cores, by index.
    pub(crate) cores: Vec<Watched>,
    /// The CPUs they may move to (the process's).
    pub(crate) cpus: Vec<usize>,
    /// Where the watcher itself runs (CPUs no core is pinned to); empty:
    /// anywhere.
    pub(crate) own_cpus: Vec<usize>,
    /// Called after core `i` was pinned to `cpu`, as `moved(i, cpu)`.
    pub(crate) moved: Box<dyn Fn(usize, usize) + Send>,
    /// Set (then unpark the thread) to stop it.
    pub(crate) stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Starts the watcher thread `crowd-watch`, reading the statistics under
/// `proc_root` (`/proc`; tests give a tree of their own). It stops when
/// `stop` is set, or when a core's affinity cannot be set (its thread is
/// gone). `Err` (the reason) when the statistics cannot be read: the cores
/// then simply stay where they are. Called by the reactor's start-up, on
/// the starting thread.
pub(crate) fn spawn_watch(
    proc_root: &std::path::Path,
    setup: WatchSetup,
) -> Result<std::thread::JoinHandle<()>, std::io::Error> {
    let WatchSetup {
        rule,
        cores,
        cpus,
        own_cpus,
        moved,
        stop,
    } = setup;
    use std::sync::atomic::Ordering;
    let mut reader = ProcReader::open(proc_root, &cores, &cpus)?;
    std::thread::Builder::new().name("crowd-watch".into()).spawn(move || {
        if !own_cpus.is_empty() {
            // Off the cores' CPUs when there are such; failing that, anywhere.
            let _ = set_thread_cpus(0, &own_cpus);
        }
        let homes: Vec<usize> = cores.iter().map(|c| c.home).collect();
        let mut watch = CrowdWatch::new(rule, &homes);
        let epoch = std::time::Instant::now();
        let mut prev_runs: Option<Vec<u64>> = None;
        let busy_ns = u64::try_from(rule.window.as_nanos() / 100).unwrap_or(u64::MAX);
        // Pairs with the Release store in `Reactor::stop_watch`.
        while !stop.load(Ordering::Acquire) {
            let at_ns = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let Some((sample, runs)) = reader.sample(at_ns) else {
                // Unreadable this time: no reading, try again next window.
                std::thread::park_timeout(rule.window);
                continue;
            };
            // Every core ran under 1 % of the last window: look again in
            // ten windows rather than one (an idle target wakes 1/s).
            let quiet = prev_runs
                .as_ref()
                .is_some_and(|p| runs.iter().zip(p).all(|(r, p)| r.saturating_sub(*p) < busy_ns));
            prev_runs = Some(runs);
            watch.handle_sample(sample);
            while let Some(Action { core, cpu }) = watch.poll_action() {
                if set_thread_cpus(cores[core].tid, &[cpu]).is_err() {
                    return;
                }
                moved(core, cpu);
            }
            std::thread::park_timeout(if quiet { rule.window * 10 } else { rule.window });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affinity::thread_cpus;

    const MS: u64 = 1_000_000;

    /// Cumulative counters fed window by window.
    struct Feed {
        t_ms: u64,
        cpus: Vec<usize>,
        run_ms: Vec<u64>,
        wait_ms: u64,
    }

    impl Feed {
        /// Starts the baseline at time 0 for these CPUs.
        fn new(w: &mut CrowdWatch, cpus: &[usize]) -> Feed {
            let f = Feed {
                t_ms: 0,
                cpus: cpus.to_vec(),
                run_ms: vec![0; cpus.len()],
                wait_ms: 0,
            };
            w.handle_sample(f.sample());
            f
        }

        fn sample(&self) -> Sample {
            Sample {
                at_ns: self.t_ms * MS,
                cpu_run_ns: self.cpus.iter().zip(&self.run_ms).map(|(&c, &r)| (c, r * MS)).collect(),
                core_wait_ns: vec![Some(self.wait_ms * MS)],
            }
        }

        /// One 100 ms window: the core waited `wait` ms, CPU i ran `run[i]`
        /// ms. Returns the actions it caused.
        fn step(&mut self, w: &mut CrowdWatch, wait: u64, run: &[u64]) -> Vec<Action> {
            self.t_ms += 100;
            self.wait_ms += wait;
            for (r, d) in self.run_ms.iter_mut().zip(run) {
                *r += d;
            }
            w.handle_sample(self.sample());
            std::iter::from_fn(|| w.poll_action()).collect()
        }
    }

    fn to(cpu: usize) -> Vec<Action> {
        vec![Action { core: 0, cpu }]
    }

    #[test]
    fn crowded_core_with_an_idle_cpu_moves_there_after_two_windows_and_stays() {
        let mut w = CrowdWatch::new(CrowdRule::default(), &[1]);
        let mut f = Feed::new(&mut w, &[0, 1]);
        // the client on CPU 1 (probe figures): the core waits 25-30 %, CPU 0
        // runs 20 %
        assert_eq!(f.step(&mut w, 25, &[20, 100]), vec![]);
        assert_eq!(f.step(&mut w, 30, &[20, 100]), to(0));
        assert_eq!((w.home(0), w.moves(0)), (0, 1));
        // at home on CPU 0 now, uncrowded: it stays
        for _ in 0..50 {
            assert_eq!(f.step(&mut w, 5, &[100, 40]), vec![]);
        }
        assert_eq!((w.home(0), w.moves(0)), (0, 1));
    }

    #[test]
    fn a_core_that_waits_while_every_other_cpu_is_busy_stays_home() {
        let mut w = CrowdWatch::new(CrowdRule::default(), &[1]);
        let mut f = Feed::new(&mut w, &[0, 1]);
        // the client elsewhere (probe figures): the core waits 7-30 %, CPU
        // 0 runs 41-63 %
        for (wait, other) in [(17, 45), (30, 41), (30, 63), (25, 50), (30, 31), (7, 60)] {
            assert_eq!(f.step(&mut w, wait, &[other, 100]), vec![]);
        }
        assert_eq!(w.moves(0), 0);
    }

    #[test]
    fn an_uncrowded_core_beside_an_idle_cpu_stays_home() {
        let mut w = CrowdWatch::new(CrowdRule::default(), &[1]);
        let mut f = Feed::new(&mut w, &[0, 1]);
        for wait in [5, 19, 10, 0, 19] {
            assert_eq!(f.step(&mut w, wait, &[0, 100]), vec![]);
        }
    }

    #[test]
    fn one_crowded_window_between_quiet_ones_does_not_move() {
        let mut w = CrowdWatch::new(CrowdRule::default(), &[1]);
        let mut f = Feed::new(&mut w, &[0, 1]);
        for wait in [30, 5, 30, 5, 30] {
            assert_eq!(f.step(&mut w, wait, &[10, 100]), vec![]);
        }
    }

    /// Windows until the next move when the core's CPU stays crowded and
    /// the other one idle, wherever the core is (a client that follows it).
    fn windows_to_move(w: &mut CrowdWatch, f: &mut Feed) -> u32 {
        let mut n = 0;
        loop {
            n += 1;
            let mut run = [10, 10];
            run[w.home(0)] = 100;
            if !f.step(w, 30, &run).is_empty() {
                return n;
            }
        }
    }

    #[test]
    fn a_core_chased_from_cpu_to_cpu_moves_less_and_less_often_until_calm() {
        let mut w = CrowdWatch::new(CrowdRule::default(), &[1]);
        let mut f = Feed::new(&mut w, &[0, 1]);
        let gaps: Vec<u32> = (0..6).map(|_| windows_to_move(&mut w, &mut f)).collect();
        assert_eq!(gaps, vec![2, 4, 8, 16, 16, 16]);
        assert_eq!(w.moves(0), 6);
        assert_eq!(w.home(0), 1, "six moves: back on CPU 1");
        // calm for 10 s (100 windows): the next move needs 2 windows again
        for _ in 0..100 {
            assert_eq!(f.step(&mut w, 0, &[10, 100]), vec![]);
        }
        assert_eq!(windows_to_move(&mut w, &mut f), 2);
        assert_eq!(windows_to_move(&mut w, &mut f), 4);
    }

    #[test]
    fn the_idlest_cpu_that_is_no_other_cores_is_chosen() {
        // cores on CPUs 2 (crowded) and 1 (an idle admin core)
        let mut w = CrowdWatch::new(CrowdRule::default(), &[2, 1]);
        let sample = |t: u64, run: [u64; 4], wait: u64| Sample {
            at_ns: t * MS,
            cpu_run_ns: run.iter().enumerate().map(|(c, r)| (c, r * MS)).collect(),
            core_wait_ns: vec![Some(wait * MS), Some(0)],
        };
        w.handle_sample(sample(0, [0, 0, 0, 0], 0));
        // CPU 1 runs least but is core 1's; CPU 3 (25 %) beats CPU 0 (90 %)
        w.handle_sample(sample(100, [90, 5, 100, 25], 25));
        assert_eq!(w.poll_action(), None);
        w.handle_sample(sample(200, [180, 10, 200, 50], 50));
        assert_eq!(w.poll_action(), Some(Action { core: 0, cpu: 3 }));
        assert_eq!(w.poll_action(), None);
        // only CPU 1 idle: taken by a core, still better than crowded
        let mut w = CrowdWatch::new(CrowdRule::default(), &[2, 1]);
        w.handle_sample(sample(0, [0, 0, 0, 0], 0));
        w.handle_sample(sample(100, [90, 5, 100, 95], 25));
        w.handle_sample(sample(200, [180, 10, 200, 190], 50));
        assert_eq!(w.poll_action(), Some(Action { core: 0, cpu: 1 }));
    }

    #[test]
    fn unreadable_or_reset_counters_and_a_changed_shape_are_no_reading() {
        let mut w = CrowdWatch::new(CrowdRule::default(), &[1]);
        let mut f = Feed::new(&mut w, &[0, 1]);
        assert_eq!(f.step(&mut w, 30, &[10, 100]), vec![]);
        // the thread's counter unreadable: the run of hits starts again
        f.t_ms += 100;
        let mut gone = f.sample();
        gone.core_wait_ns[0] = None;
        w.handle_sample(gone);
        assert_eq!(f.step(&mut w, 30, &[10, 100]), vec![]);
        // a counter that went backwards (another thread)
        f.wait_ms = 1;
        assert_eq!(f.step(&mut w, 0, &[10, 100]), vec![]);
        assert_eq!(f.step(&mut w, 30, &[10, 100]), vec![]);
        // another set of CPUs: only a new baseline
        f.cpus = vec![0, 3];
        assert_eq!(f.step(&mut w, 30, &[10, 100]), vec![]);
        // the clock did not move: no reading either
        w.handle_sample(f.sample());
        assert_eq!(w.poll_action(), None);
        assert_eq!(w.moves(0), 0);
        // a CPU counter that went backwards is not idle
        f.run_ms[0] = 0;
        assert_eq!(f.step(&mut w, 30, &[0, 100]), vec![]);
        // and then two crowded windows do move it (CPU 3 ran 100 %: CPU 0)
        assert_eq!(f.step(&mut w, 30, &[10, 100]), vec![]);
        assert_eq!(f.step(&mut w, 30, &[10, 100]), to(0));
    }

    /// `(core, cpu)` moves reported by the watcher.
    type Moves = Vec<(usize, usize)>;

    /// Runs the watcher thread over a tree laid out like `/proc` that this
    /// writes every 2 ms: a thread pinned to the first allowed CPU waits
    /// `wait` of the time, the second CPU runs 10 % of it, the others
    /// 100 %. Returns the moves reported within `for_ms` and the thread's
    /// CPUs at the end; `None` on a host with one CPU.
    fn watch_a_thread(wait: f64, for_ms: u64) -> Option<(Moves, Vec<usize>)> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{mpsc, Arc};
        let cpus = thread_cpus().unwrap();
        if cpus.len() < 2 {
            return None;
        }
        let (home, idle) = (cpus[0], cpus[1]);
        let root = std::env::temp_dir().join(format!("rpcrdma-crowd-{}-{}", std::process::id(), wait));
        let _ = std::fs::remove_dir_all(&root);
        // the "core": pinned to `home`, parked until asked for its CPUs
        let (tid_tx, tid_rx) = mpsc::channel();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let core = std::thread::spawn(move || {
            set_thread_cpus(0, &[home]).unwrap();
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            while !d.load(Ordering::Acquire) {
                std::thread::park();
            }
            thread_cpus().unwrap()
        });
        let tid = tid_rx.recv().unwrap();
        let task = root.join(format!("self/task/{tid}"));
        std::fs::create_dir_all(&task).unwrap();
        let t0 = std::time::Instant::now();
        let write = |path: std::path::PathBuf, text: String| {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(tmp, path).unwrap();
        };
        let write_all = || {
            let e = t0.elapsed().as_nanos() as f64;
            let mut text = String::from("version 15\ntimestamp 1\n");
            for &c in &cpus {
                let run = if c == idle { e * 0.1 } else { e };
                text += &format!("cpu{c} 0 0 0 0 0 0 {} 0 0\n", run as u64);
            }
            write(root.join("schedstat"), text);
            write(
                task.join("schedstat"),
                format!("{} {} 5\n", (e * 0.7) as u64, (e * wait) as u64),
            );
        };
        write_all();
        let rule = CrowdRule {
            window: Duration::from_millis(10),
            ..CrowdRule::default()
        };
        let (moved_tx, moved_rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let moved_tx = std::sync::Mutex::new(moved_tx);
        let setup = WatchSetup {
            rule,
            cores: vec![Watched { tid, home }],
            cpus: cpus.clone(),
            own_cpus: vec![],
            moved: Box::new(move |core, cpu| moved_tx.lock().unwrap().send((core, cpu)).unwrap()),
            stop: stop.clone(),
        };
        let h = spawn_watch(&root, setup).unwrap();
        let mut moves = Vec::new();
        while t0.elapsed() < Duration::from_millis(for_ms) {
            write_all();
            moves.extend(moved_rx.try_iter());
            std::thread::sleep(Duration::from_millis(2));
        }
        stop.store(true, Ordering::Release);
        h.thread().unpark();
        h.join().unwrap();
        moves.extend(moved_rx.try_iter());
        done.store(true, Ordering::Release);
        core.thread().unpark();
        let now = core.join().unwrap();
        let _ = std::fs::remove_dir_all(&root);
        Some((moves, now))
    }

    #[test]
    fn the_watcher_pins_a_crowded_thread_to_the_idle_cpu() {
        let Some((moves, now)) = watch_a_thread(0.3, 1_000) else {
            eprintln!("one CPU: nothing to move to");
            return;
        };
        let cpus = thread_cpus().unwrap();
        // moved once, to the idle CPU; then it stays (the CPU it left runs
        // 100 % in the counters: no idle CPU to go to)
        assert_eq!(moves, vec![(0, cpus[1])]);
        assert_eq!(now, vec![cpus[1]]);
    }

    #[test]
    fn the_watcher_leaves_an_uncrowded_thread_alone() {
        let Some((moves, now)) = watch_a_thread(0.05, 500) else {
            return;
        };
        assert_eq!(moves, vec![]);
        assert_eq!(now, vec![thread_cpus().unwrap()[0]]);
    }

    #[test]
    fn the_watcher_is_unavailable_without_the_statistics() {
        let root = std::env::temp_dir().join(format!("rpcrdma-crowd-none-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&root);
        let start = || {
            let setup = WatchSetup {
                rule: CrowdRule::default(),
                cores: vec![],
                cpus: vec![0],
                own_cpus: vec![],
                moved: Box::new(|_, _| {}),
                stop: Default::default(),
            };
            spawn_watch(&root, setup)
        };
        // no file at all, then one without CPU 0
        assert!(start().is_err());
        std::fs::write(root.join("schedstat"), "version 15\ncpu1 0 0 0 0 0 0 1 1 1\n").unwrap();
        let r = start();
        assert!(r.unwrap_err().to_string().contains("no per-CPU run times"));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn schedstat_parsing() {
        let text = "version 15\ntimestamp 4295\n\
            cpu0 0 0 100 50 60 30 123456789 2345 77\n\
            domain0 3 1 2 3\n\
            cpu1 0 0 100 50 60 30 987654321 5432 77\n";
        assert_eq!(
            parse_schedstat(text, &[1, 0]),
            Some(vec![(1, 987_654_321), (0, 123_456_789)])
        );
        assert_eq!(parse_schedstat(text, &[0]), Some(vec![(0, 123_456_789)]));
        // a CPU with no line, an old version, no version, a short line
        assert_eq!(parse_schedstat(text, &[0, 2]), None);
        assert_eq!(parse_schedstat(&text.replace("version 15", "version 14"), &[0]), None);
        assert_eq!(parse_schedstat(&text.replace("version 15\n", ""), &[0]), None);
        assert_eq!(parse_schedstat("version 15\ncpu0 1 2 3\n", &[0]), None);
        assert_eq!(parse_thread_schedstat("1000 2500 17\n"), Some(2500));
        assert_eq!(parse_thread_schedstat("1000\n"), None);
        assert_eq!(parse_thread_schedstat("x y z"), None);
    }
}
