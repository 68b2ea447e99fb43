#!/usr/bin/env bash
# tests/kernel/guest/floor.sh — the fabric floor: perftest ib_send_lat and
# ib_read_lat over rxe0 in this guest (server in the background, client to
# $VMLAB_IP, connection set up with rdma_cm), at 2 bytes and 4 KiB.
# Writes $OUT/floor/<tool>-<size>.txt and checks that each run gave finite
# latencies. Under emulation perftest's first run after boot sometimes
# reports "inf" (its cycles-per-microsecond estimate failed); such a run is
# repeated once.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

D=$OUT/floor
mkdir -p "$D"
ITERS=${FLOOR_ITERS:-2000}
port=18515
for tool in ib_send_lat ib_read_lat; do
    for size in 2 4096; do
        for attempt in 1 2; do
            port=$((port + 1))
            t=$(now)
            timeout 60 "$tool" -d rxe0 -R -F -s "$size" -n "$ITERS" -p "$port" >"$D/$tool-$size.server.txt" 2>&1 &
            spid=$!
            sleep 1
            rc=0
            timeout 60 "$tool" -d rxe0 -R -F -s "$size" -n "$ITERS" -p "$port" "$VMLAB_IP" \
                >"$D/$tool-$size.txt" 2>&1 || rc=$?
            wait "$spid" || true
            # the result row: #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
            row=$(awk -v s="$size" '$1 == s && NF >= 9 && $2 ~ /^[0-9]+$/ { print; exit }' "$D/$tool-$size.txt")
            p50=$(echo "$row" | awk '{print $5}')
            p99=$(echo "$row" | awk '{print $8}')
            finite=no
            [[ $p50 =~ ^[0-9]+(\.[0-9]+)?$ ]] && [[ $p99 =~ ^[0-9]+(\.[0-9]+)?$ ]] && finite=yes
            [ $rc = 0 ] && [ $finite = yes ] && break
            note "$tool $size B attempt $attempt: exit $rc, row '$row'"
        done
        if [ $rc = 0 ] && [ $finite = yes ]; then
            pass "floor: $tool $size B: t_typical $p50 us, p99 $p99 us ($(elapsed "$t") s)"
        else
            flunk "floor: $tool $size B (exit $rc, row '$row'): $(tail -3 "$D/$tool-$size.txt" | tr '\n' ' ')"
        fi
    done
done
