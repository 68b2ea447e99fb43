//! Model-based property test of the timer wheel: random schedules, cancels
//! and advances (including jumps longer than one wheel revolution) must fire
//! exactly the timers a simple list model says are due.

use proptest::prelude::*;
use reactor::timer::{TimerId, TimerWheel};

#[derive(Debug, Clone)]
enum Op {
    Schedule { delay: u64, period: u64 },
    Cancel(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..40, prop_oneof![3 => Just(0u64), 1 => 1u64..10])
            .prop_map(|(delay, period)| Op::Schedule { delay, period }),
        1 => (0usize..64).prop_map(Op::Cancel),
        3 => prop_oneof![3 => 0u64..5, 1 => 5u64..40].prop_map(Op::Advance),
    ]
}

struct ModelTimer {
    id: TimerId,
    due: u64,
    period: u64,
    live: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn wheel_matches_model(ops in proptest::collection::vec(op(), 1..120), slots_log2 in 0u32..4) {
        let capacity = 16;
        let mut wheel: TimerWheel<usize> = TimerWheel::new(1 << slots_log2, capacity).unwrap();
        let mut model: Vec<ModelTimer> = Vec::new();
        let mut now = 0u64;
        let mut out = Vec::new();
        for op in ops {
            match op {
                Op::Schedule { delay, period } => {
                    let live = model.iter().filter(|t| t.live).count();
                    let due = (now + delay).max(now + 1);
                    match wheel.schedule_at(now + delay, period, model.len()) {
                        Ok(id) => {
                            prop_assert!(live < capacity);
                            model.push(ModelTimer { id, due, period, live: true });
                        }
                        Err(_) => prop_assert_eq!(live, capacity),
                    }
                }
                Op::Cancel(i) => {
                    if let Some(t) = model.get_mut(i) {
                        prop_assert_eq!(wheel.cancel(t.id), t.live);
                        t.live = false;
                    }
                }
                Op::Advance(by) => {
                    now += by;
                    wheel.expire(now, &mut out);
                    let mut fired: Vec<usize> = Vec::new();
                    for (id, cb) in out.drain(..) {
                        fired.push(cb);
                        wheel.finish(id, Some(cb));
                    }
                    fired.sort_unstable();
                    let mut expected = Vec::new();
                    for (i, t) in model.iter_mut().enumerate() {
                        if t.live && t.due <= now {
                            expected.push(i);
                            if t.period > 0 {
                                t.due = now + t.period;
                            } else {
                                t.live = false;
                            }
                        }
                    }
                    prop_assert_eq!(fired, expected);
                }
            }
            prop_assert_eq!(wheel.len(), model.iter().filter(|t| t.live).count());
        }
    }
}
