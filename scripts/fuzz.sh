#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Fuzz every decoder with cargo-fuzz/libFuzzer (see docs/FUZZING.md):
#   1. installs cargo-fuzz if it is missing (cargo install cargo-fuzz --locked);
#   2. builds the targets of fuzz/ (RUSTC_BOOTSTRAP=1: libFuzzer's instrumentation
#      flags are nightly-only and only stable Rust is installed);
#   3. copies the committed seeds fuzz/seeds/<target>/ into fuzz/corpus/<target>/
#      (git-ignored; it keeps growing across runs);
#   4. runs each target for SECONDS_PER_TARGET seconds (default 60) with
#      -max_total_time, one after the other;
#   5. prints a summary table with each target's executions (libFuzzer's final
#      stat::number_of_executed_units, or its "#N DONE" line).
# Exits 1 if any target found a crash (the input is under fuzz/artifacts/<target>/),
# 2 on a usage error.
#
# Environment: FUZZ_SANITIZER (address|none..., default address),
# CARGO_FUZZ_VERSION (installed when missing, default 0.13.2).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

usage() {
    echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]" >&2
    exit 2
}

seconds=60
if [ $# -gt 0 ]; then
    case "$1" in
    -h | --help) usage ;;
    *[!0-9]* | '') usage ;;
    *) seconds=$1; shift ;;
    esac
fi
[ "$seconds" -gt 0 ] || usage

export RUSTC_BOOTSTRAP=1
sanitizer=${FUZZ_SANITIZER:-address}

bash "$root/scripts/build-deps.sh"
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz ${CARGO_FUZZ_VERSION:-0.13.2}"
    cargo install cargo-fuzz --locked --version "${CARGO_FUZZ_VERSION:-0.13.2}"
fi

cd "$root/fuzz"
mapfile -t all_targets < <(cargo fuzz list)
if [ $# -gt 0 ]; then
    targets=("$@")
    for t in "${targets[@]}"; do
        found=0
        for a in "${all_targets[@]}"; do [ "$a" = "$t" ] && found=1; done
        if [ $found = 0 ]; then
            echo "fuzz.sh: unknown target '$t' (targets: ${all_targets[*]})" >&2
            exit 2
        fi
    done
else
    targets=("${all_targets[@]}")
fi

echo "== building ${#targets[@]} fuzz targets (sanitizer: $sanitizer)"
if [ ${#targets[@]} -eq ${#all_targets[@]} ]; then
    cargo fuzz build -O --sanitizer "$sanitizer"
else
    for t in "${targets[@]}"; do
        cargo fuzz build -O --sanitizer "$sanitizer" "$t"
    done
fi

logs="$root/fuzz/target/fuzz-logs"
mkdir -p "$logs"
declare -A execs rate corpus status
failed=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    if [ -d "seeds/$t" ]; then
        cp -f "seeds/$t"/* "corpus/$t/" 2>/dev/null || true
    fi
    log="$logs/$t.log"
    echo "== $t: ${seconds}s (log: ${log#"$root"/})"
    set +e
    cargo fuzz run -O --sanitizer "$sanitizer" "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 -timeout=10 >"$log" 2>&1
    rc=$?
    set -e
    n=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
    if [ -z "$n" ]; then
        n=$(sed -n 's/^#\([0-9]*\)[[:space:]]*DONE.*/\1/p' "$log" | tail -1)
    fi
    execs[$t]=${n:-?}
    rate[$t]=$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\).*/\1/p' "$log" | tail -1)
    corpus[$t]=$(find "corpus/$t" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        status[$t]=ok
    else
        failed=1
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        status[$t]="CRASH (exit $rc) ${artifact:+$artifact}"
        echo "   $t failed; from its log:"
        grep -E -A3 'panicked at|ERROR: (AddressSanitizer|libFuzzer)|SUMMARY:|Test unit written' "$log" |
            head -40 | sed 's/^/   | /' || tail -30 "$log" | sed 's/^/   | /'
    fi
done

echo
echo "== fuzz summary (${seconds}s per target, sanitizer $sanitizer)"
printf '%-16s %14s %10s %8s  %s\n' target executions exec/s corpus status
for t in "${targets[@]}"; do
    printf '%-16s %14s %10s %8s  %s\n' "$t" "${execs[$t]}" "${rate[$t]:-?}" "${corpus[$t]}" "${status[$t]}"
done
if [ $failed -ne 0 ]; then
    echo "fuzz.sh: a target crashed; reproduce with: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <artifact>" >&2
    exit 1
fi
