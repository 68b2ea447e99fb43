# shellcheck shell=bash
# tests/kernel/guest/tshark_lib.sh — the capture set-up the tshark scripts
# (tshark.sh, tshark4.sh, tshark_cb.sh) share; sourced after lib.sh.
#
# tshark_fields PCAP TAG FIELD...: dissect PCAP once, in two passes (-2: in
# one pass tshark dissects a READ reply before joining the RDMA Write data
# that preceded it, and then flags correct replies as malformed), with
# MOUNT's TCP port 20048 as RPC and no TWAMP (a
# MOUNT from the privileged port 862, TWAMP-Control's, was taken for TWAMP
# and its reply called malformed). Writes $OUT/$TAG-tshark-fields.tsv
# (set in $FIELDS): one line per frame, the fields frame.number, ip.src,
# FIELD..., _ws.malformed, _ws.expert.severity, several values of a field
# joined by commas; one check line for tshark's exit status. Returns 1 when
# there is no capture (a failed check).
tshark_fields() {
    local pcap=$1 tag=$2 rc=0 f args=()
    shift 2
    FIELDS=$OUT/$tag-tshark-fields.tsv
    if [ ! -s "$pcap" ]; then
        flunk "$tag: capture $pcap exists"
        return 1
    fi
    for f in frame.number ip.src "$@" _ws.malformed _ws.expert.severity; do args+=(-e "$f"); done
    tshark -2 -n -r "$pcap" --disable-protocol twamp.control -d tcp.port==20048,rpc \
        -T fields -E occurrence=a -E aggregator=, "${args[@]}" >"$FIELDS" 2>"$OUT/$tag-tshark.err" || rc=$?
    check_eq "$tag: tshark $(tshark --version 2>/dev/null | head -1 | awk '{print $3}') reads the capture ($(stat -c %s "$pcap") bytes)" "$rc" 0
}
