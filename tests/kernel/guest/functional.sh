#!/usr/bin/env bash
# tests/kernel/guest/functional.sh SRC TAG — the functional workload of the
# kernel-interop test, run in the guest against one NFSv3-over-RDMA server.
#
#   SRC  the mount source, e.g. 10.0.2.15:/export
#   TAG  a name for the server in the check lines ("kernel", "ours")
#
# Mounts SRC with the kernel client (proto=rdma, port 20049, MOUNT found
# through rpcbind: no mountport/mountproto), checks showmount -e and rpcinfo,
# asserts that the mount uses the RDMA transport, then: create / list /
# rename / remove of files and directories, symbolic and hard links, setattr
# (chmod, chown, truncate, mtime), exclusive create, error codes, a
# $BIG_MIB MiB write with a SHA-256 read back after a remount, and concurrent
# writers (separate files and disjoint regions of one file) checked after a
# remount. Leaves SRC unmounted. Checks go through lib.sh (ok / not ok).
# Env: BIG_MIB (256), OUT, MOUNT_PORT.
set -uo pipefail
. "$(dirname "$0")/lib.sh"

SRC=$1
TAG=$2
MP=/mnt/$TAG
BIG_MIB=${BIG_MIB:-256}
SCRATCH=/tmp/func-$TAG
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" "$OUT/$TAG"
t_all=$(now)

note "$TAG: functional workload on $SRC"
rm -f "$OUT/$TAG/steps.txt"
step mount
if ! nfs_mount "$SRC" "$MP"; then
    flunk "$TAG: mount -t nfs -o vers=3,proto=rdma,port=20049 $SRC (no mountport/mountproto)"
    dmesg | tail -20
    exit 1
fi
pass "$TAG: mount -t nfs -o vers=3,proto=rdma,port=20049 $SRC (no mountport/mountproto)"
# showmount asks rpcbind for MOUNT v1 over TCP, then EXPORT
check_eq "$TAG: showmount -e ${SRC%%:*} lists ${SRC#*:}" \
    "$(timeout 30 showmount -e "${SRC%%:*}" 2>&1 | awk -v p="${SRC#*:}" '$1 == p { print $1 }')" "${SRC#*:}"
check "$TAG: rpcinfo -p ${SRC%%:*} lists MOUNT v3 over TCP" \
    sh -c "timeout 30 rpcinfo -p ${SRC%%:*} | awk '\$1 == 100005 && \$2 == 3 && \$3 == \"tcp\"' | grep -q ."
check_eq "$TAG: /proc/self/mountstats transport of $MP" "$(mount_xprt "$MP")" rdma
check "$TAG: /proc/mounts lists $MP with proto=rdma" grep -q " $MP nfs .*proto=rdma" /proc/mounts
grep " $MP " /proc/mounts

W=$MP/kinterop
rm -rf "$W" 2>/dev/null
check "$TAG: mkdir of the work directory" mkdir "$W"
cd "$W" || exit 1

# ---- create, read, list
step small-files
printf 'hello\n' > f1
check_eq "$TAG: create + write + read back a small file" "$(cat f1)" hello
check_eq "$TAG: size of the small file" "$(stat -c %s f1)" 6
check_eq "$TAG: type of a new file" "$(stat -c %F f1)" "regular file"
check "$TAG: df (FSSTAT) reports a non-zero size" test "$(df -k --output=size "$MP" | tail -1)" -gt 0
check_fails "$TAG: opening a missing file fails" cat "$W/no-such-file"
check_eq "$TAG: the missing file's error is ENOENT" \
    "$(python3 -c 'import os,sys
try: os.stat(sys.argv[1])
except FileNotFoundError: print("ENOENT")' "$W/no-such-file")" ENOENT

step creates-and-listing
t=$(now)
NLIST=${NLIST:-100} # at least 43
mkdir many
python3 - "$W/many" "$NLIST" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    # long names so that the listing needs several READDIRPLUS replies
    with open(os.path.join(d, "entry-%05d-%s" % (i, "x" * 60)), "w") as f:
        f.write(str(i))
PY
# ls -f: the server's READDIRPLUS order, unsorted, so that a repeated entry shows
# shellcheck disable=SC2010
check_eq "$TAG: ls of a directory with $NLIST new files lists each once" \
    "$(ls -f many | grep -c '^entry-')/$(ls -f many | grep '^entry-' | sort -u | wc -l)" "$NLIST/$NLIST"
check_eq "$TAG: ls lists exactly the names created" \
    "$(ls many | sha256sum | cut -c1-16)" \
    "$(for i in $(seq 0 $((NLIST - 1))); do printf 'entry-%05d-%s\n' "$i" "$(printf 'x%.0s' $(seq 60))"; done | sort | sha256sum | cut -c1-16)"
check_eq "$TAG: content of a listed file" "$(cat many/entry-00042-*)" 42
note "$TAG: $NLIST creates + listings: $(elapsed "$t") s"

# ---- directories
step directories
check "$TAG: mkdir -p of nested directories" mkdir -p d1/d2/d3
check "$TAG: nested directory exists" test -d d1/d2/d3
check_fails "$TAG: mkdir of an existing directory fails" mkdir d1
check_eq "$TAG: the error is EEXIST" "$(python3 -c 'import os,sys
try: os.mkdir(sys.argv[1])
except FileExistsError: print("EEXIST")' "$W/d1")" EEXIST
check_eq "$TAG: link count of a directory with one subdirectory" "$(stat -c %h d1)" 3
check_fails "$TAG: rmdir of a non-empty directory fails" rmdir d1/d2

# ---- rename
step rename
mv f1 f1.renamed
check "$TAG: rename: the old name is gone" test ! -e f1
check_eq "$TAG: rename: the new name has the content" "$(cat f1.renamed)" hello
mv f1.renamed d1/d2/
check_eq "$TAG: rename into another directory" "$(cat d1/d2/f1.renamed)" hello
mv d1 d1r
check "$TAG: rename of a directory" test -d d1r/d2/d3 -a ! -e d1
check_eq "$TAG: a file under the renamed directory" "$(cat d1r/d2/f1.renamed)" hello
printf 'first\n' > ra
printf 'second\n' > rb
mv -f ra rb
check_eq "$TAG: rename over an existing file replaces it" "$(cat rb)/$(test -e ra && echo ra-left || echo ra-gone)" first/ra-gone

# ---- exclusive create
step exclusive-create
check_fails "$TAG: exclusive create of an existing name fails" \
    python3 -c 'import os,sys; os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY)' "$W/rb"
check "$TAG: exclusive create of a new name succeeds" \
    python3 -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))' "$W/excl"
check_eq "$TAG: mode of the exclusively created file" "$(stat -c %a excl)" 600

# ---- symbolic links
step symlinks
printf 'target data\n' > tgt
ln -s tgt sl
check_eq "$TAG: readlink of a new symlink" "$(readlink sl)" tgt
check_eq "$TAG: type of a symlink" "$(stat -c %F sl)" "symbolic link"
check_eq "$TAG: reading through a symlink" "$(cat sl)" "target data"
ln -s "no-such-target-$(printf 'y%.0s' $(seq 100))" dangling
check "$TAG: a dangling symlink is a link that does not resolve" test -L dangling -a ! -e dangling
check_eq "$TAG: readlink of a long dangling target" "$(readlink dangling | wc -c)" 116

# ---- hard links
step hard-links
printf 'linked\n' > hf
ln hf hl
check_eq "$TAG: link count after ln" "$(stat -c %h hf)" 2
check_eq "$TAG: both names have one file id" "$(stat -c %i hl)" "$(stat -c %i hf)"
printf 'changed\n' >> hl
check_eq "$TAG: a write through one name reads back through the other" "$(tail -1 hf)" changed
rm hf
check_eq "$TAG: content after removing the first name" "$(tr '\n' ' ' <hl)" "linked changed "
check_eq "$TAG: link count after removing the first name" "$(stat -c %h hl)" 1
check_fails "$TAG: hard link to a directory is refused" ln d1r d1r-link

# ---- setattr
step setattr
printf 'hello\n' > sa
chmod 640 sa
check_eq "$TAG: chmod 640" "$(stat -c %a sa)" 640
chown 1234:5678 sa
check_eq "$TAG: chown 1234:5678 (no root squash)" "$(stat -c %u:%g sa)" 1234:5678
truncate -s 100000 sa
check_eq "$TAG: truncate grows the file" "$(stat -c %s sa)" 100000
check "$TAG: the grown part reads as zeros" cmp -s <(tail -c +7 sa) <(head -c 99994 /dev/zero)
truncate -s 3 sa
check_eq "$TAG: truncate shrinks the file" "$(cat sa)" hel
touch -m -d '2001-02-03 04:05:06 UTC' sa
check_eq "$TAG: set mtime" "$(stat -c %Y sa)" 981173106
touch -a -d '2002-03-04 05:06:07 UTC' sa
check_eq "$TAG: set atime" "$(stat -c %X sa)" 1015218367

# ---- remove
step remove
rm rb
check "$TAG: rm removes a file" test ! -e rb
rm -r many
check "$TAG: rm -r of the $NLIST-file directory" test ! -e many
rmdir d1r/d2/d3
check "$TAG: rmdir of an empty directory" test ! -e d1r/d2/d3

# ---- large write with checksums
step_end # making the random data is no server's time
t=$(now)
head -c "${BIG_MIB}M" /dev/urandom > "$SCRATCH/big"
sum_src=$(sha256sum < "$SCRATCH/big" | cut -d' ' -f1)
note "$TAG: ${BIG_MIB} MiB of random data in guest RAM: $(elapsed "$t") s, sha256 $sum_src"
for i in $(seq 1 4); do head -c 16M /dev/urandom > "$SCRATCH/cw$i"; done
head -c 16M /dev/urandom > "$SCRATCH/shared"
step big-write
t=$(now)
rc=0
dd if="$SCRATCH/big" of="$W/big" bs=1M conv=fsync status=none || rc=$?
write_s=$(elapsed "$t")
check_eq "$TAG: write ${BIG_MIB} MiB (dd bs=1M conv=fsync, ${write_s} s)" "$rc" 0

# ---- concurrent writers: 4 files and 4 disjoint regions of one file
# (the source files were made before the big write, off the clock)
step concurrent-writers
t=$(now)
NW=4
pids=()
for i in $(seq 1 $NW); do
    dd if="$SCRATCH/cw$i" of="$W/cw$i" bs=64k conv=fsync status=none & pids+=($!)
    dd if="$SCRATCH/shared" of="$W/shared" bs=1M skip=$(((i - 1) * 4)) seek=$(((i - 1) * 4)) count=4 \
        conv=notrunc,fsync status=none & pids+=($!)
done
bad=0
for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
check_eq "$TAG: $((NW * 2)) concurrent writers exit 0 ($(elapsed "$t") s)" "$bad" 0

cd /
step umount-remount
check "$TAG: umount (flushes and releases)" nfs_umount "$MP"
if ! nfs_mount "$SRC" "$MP"; then
    flunk "$TAG: remount of $SRC"
    exit 1
fi
pass "$TAG: remount of $SRC"
check_eq "$TAG: transport after the remount" "$(mount_xprt "$MP")" rdma

# ---- after the remount: everything comes from the server
step read-back
check_eq "$TAG: size of the ${BIG_MIB} MiB file after remount" "$(stat -c %s "$W/big")" $((BIG_MIB << 20))
t=$(now)
sum_back=$(sha256sum < "$W/big" | cut -d' ' -f1)
read_s=$(elapsed "$t")
check_eq "$TAG: sha256 of the ${BIG_MIB} MiB file read back after remount (${read_s} s)" "$sum_back" "$sum_src"
if [ "$sum_back" != "$sum_src" ]; then
    cmp "$SCRATCH/big" "$W/big" | head -3
    cmp -l "$SCRATCH/big" "$W/big" | wc -l | sed 's/^/bytes differing: /'
fi
note "$TAG: ${BIG_MIB} MiB write ${write_s} s, read ${read_s} s"
for i in $(seq 1 $NW); do
    check_eq "$TAG: concurrent writer $i's file after remount" \
        "$(sha256sum < "$W/cw$i" | cut -c1-16)" "$(sha256sum < "$SCRATCH/cw$i" | cut -c1-16)"
done
check_eq "$TAG: the file with $NW concurrent region writers after remount" \
    "$(sha256sum < "$W/shared" | cut -c1-16)" "$(sha256sum < "$SCRATCH/shared" | cut -c1-16)"
check_eq "$TAG: mode/owner/size/mtime/atime after remount" \
    "$(stat -c '%a %u:%g %s %Y %X' "$W/sa")" "640 1234:5678 3 981173106 1015218367"
check_eq "$TAG: symlink after remount" "$(readlink "$W/sl")" tgt
check_eq "$TAG: hard link count and content after remount" "$(stat -c %h "$W/hl") $(head -1 "$W/hl")" "1 linked"
check_eq "$TAG: renamed tree after remount" "$(cat "$W/d1r/d2/f1.renamed")" hello
check_eq "$TAG: directory listing after remount" "$(cd "$W" && ls | tr '\n' ' ')" \
    "big cw1 cw2 cw3 cw4 d1r dangling excl hl sa shared sl tgt "

step cleanup
rm -rf "$W"
check "$TAG: rm -r of the work directory" test ! -e "$W"
# the client's per-operation counts and times for this mount, for the logs
awk -v mp="$MP" '$1 == "device" { cur = ($5 == mp) } cur' /proc/self/mountstats >"$OUT/$TAG/mountstats.txt"
check "$TAG: final umount" nfs_umount "$MP"
step_end
rm -rf "$SCRATCH"
note "$TAG: functional workload done in $(elapsed "$t_all") s"
