#!/usr/bin/env bash
# scripts/bench.sh [FILTER] — run every criterion bench of the workspace with the
# same settings, then print one table of medians (from criterion's
# target/criterion/**/new/estimates.json) to stdout and target/bench-summary.md.
#
#   WARMUP (s, default 2), MEASURE (s, default 5) set criterion's times.
# The machine is shared and noisy: compare figures taken in the same run only,
# and prefer the ratios printed at the end (engine vs floor, write vs memcpy).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build-deps.sh
filter=${1:-}
args=(--warm-up-time "${WARMUP:-2}" --measurement-time "${MEASURE:-5}")
[ -n "$filter" ] && args+=("$filter")
rm -rf target/criterion
for b in "rpcrdma-proto proto" "rpcrdma-mempool mempool" "rpcrdma-reactor reactor" "rpcrdma-dataplane shm"; do
    set -- $b
    echo "== cargo bench -p $1 --bench $2"
    cargo bench -q -p "$1" --bench "$2" -- "${args[@]}" 2>&1 | grep -E "time:|^[a-z_0-9/]+ *$|Benchmarking .*: Analyzing" | grep -v Analyzing || true
done
python3 - <<'PY' | tee target/bench-summary.md
import json, pathlib
rows = {}
for est in sorted(pathlib.Path("target/criterion").glob("**/new/estimates.json")):
    bench = est.parent.parent.relative_to("target/criterion").as_posix()
    rows[bench] = json.load(open(est))["median"]["point_estimate"]
def fmt(ns):
    return f"{ns/1e6:.3f} ms" if ns >= 1e6 else f"{ns/1e3:.2f} us" if ns >= 1e3 else f"{ns:.1f} ns"
print("| bench | median |")
print("|---|---|")
for k, v in rows.items():
    print(f"| {k} | {fmt(v)} |")
floor = rows.get("shm/pingpong_64B")
mcpy = rows.get("shm/memcpy_1MiB")
if floor:
    print()
    print("| engine over shm | median | ratio to the floor (shm/pingpong_64B) |")
    print("|---|---|---|")
    for k, v in rows.items():
        if k.startswith("engine/"):
            extra = ""
            if mcpy and "1MiB" in k:
                extra = f" (1 MiB at {mcpy / v * 100:.0f}% of memcpy bandwidth)"
            print(f"| {k} | {fmt(v)} | {v / floor:.2f}x{extra} |")
PY
# The floor and the engine's NULL interleaved batch by batch (robust to the
# host's phase changes; see `paired` in dataplane/benches/shm.rs).
if [ -z "$filter" ] || [[ "paired" == *"$filter"* ]]; then
    echo
    echo "== cargo bench -p rpcrdma-dataplane --bench shm -- paired"
    cargo bench -q -p rpcrdma-dataplane --bench shm -- paired 2>&1 | tee -a target/bench-summary.md
fi
