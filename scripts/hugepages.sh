#!/usr/bin/env bash
# Reserve 2 MiB hugepages for the rpcrdma data plane and mount hugetlbfs.
#
# The mempool crate maps its regions with memfd_create(MFD_HUGETLB), which
# needs reserved hugepages but no mount; the mount is for deployments that
# set RegionConfig::hugetlbfs_dir instead. Without reserved pages the
# mempool falls back to normal pages and logs one warning.
set -u

PROG=${0##*/}
DEFAULT_PAGES=512
DEFAULT_MOUNT=/dev/hugepages
SYSFS_2M=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages

usage() {
    cat <<EOF
Usage: $PROG [OPTIONS] [PAGES]

Reserve PAGES 2 MiB hugepages (default $DEFAULT_PAGES = $((DEFAULT_PAGES * 2)) MiB) and
mount hugetlbfs if it is not mounted yet.

Options:
  -m, --mount DIR   hugetlbfs mount point (default $DEFAULT_MOUNT)
      --no-mount    only reserve pages, do not mount
  -n, --dry-run     print what would be done, change nothing
  -h, --help        show this help

Needs root (or CAP_SYS_ADMIN). The reservation does not survive a reboot;
to make it permanent put "vm.nr_hugepages = PAGES" in /etc/sysctl.d/.
The kernel may reserve fewer pages than asked when memory is fragmented;
the script reports how many it got and exits 1 if it got fewer.

Exit status: 0 done, 1 could not (reason printed), 2 bad usage.
EOF
}

die() {
    echo "$PROG: $*" >&2
    exit 1
}

pages=$DEFAULT_PAGES
mount_dir=$DEFAULT_MOUNT
do_mount=1
dry_run=0

while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        -m|--mount)
            [ $# -ge 2 ] || { echo "$PROG: $1 needs a directory" >&2; exit 2; }
            mount_dir=$2; shift 2 ;;
        --mount=*) mount_dir=${1#--mount=}; shift ;;
        --no-mount) do_mount=0; shift ;;
        -n|--dry-run) dry_run=1; shift ;;
        -*) echo "$PROG: unknown option $1 (see --help)" >&2; exit 2 ;;
        *)
            case $1 in
                ''|*[!0-9]*) echo "$PROG: PAGES must be a number, got '$1'" >&2; exit 2 ;;
            esac
            pages=$1; shift ;;
    esac
done

run() {
    echo "+ $*"
    [ "$dry_run" -eq 1 ] || "$@"
}

[ "$(uname -s)" = Linux ] || die "hugepages are configured this way on Linux only"
[ -e "$SYSFS_2M" ] || die "$SYSFS_2M missing: kernel without 2 MiB hugepage support?"

current=$(cat "$SYSFS_2M")
echo "2 MiB hugepages reserved now: $current, wanted: $pages"

if [ "$dry_run" -eq 0 ] && [ "$(id -u)" -ne 0 ]; then
    die "must run as root to change $SYSFS_2M (try: sudo $0 $pages)"
fi

if [ "$current" -ne "$pages" ]; then
    if [ "$dry_run" -eq 1 ]; then
        echo "+ echo $pages > $SYSFS_2M"
    elif ! echo "$pages" > "$SYSFS_2M" 2>/dev/null; then
        # Containers usually expose /sys read-only.
        die "cannot write $SYSFS_2M (read-only /sys, e.g. in a container?); set vm.nr_hugepages=$pages on the host"
    fi
    if [ "$dry_run" -eq 0 ]; then
        got=$(cat "$SYSFS_2M")
        echo "2 MiB hugepages reserved: $got"
        if [ "$got" -lt "$pages" ]; then
            die "kernel reserved only $got of $pages pages (memory fragmented?); try earlier after boot or add hugepages=$pages to the kernel command line"
        fi
    fi
else
    echo "reservation already in place"
fi

if [ "$do_mount" -eq 1 ]; then
    if grep -qs " $mount_dir hugetlbfs " /proc/mounts; then
        echo "hugetlbfs already mounted at $mount_dir"
    else
        run mkdir -p "$mount_dir" || die "cannot create $mount_dir"
        run mount -t hugetlbfs -o pagesize=2M nodev "$mount_dir" \
            || die "mount of hugetlbfs at $mount_dir failed"
        [ "$dry_run" -eq 1 ] || echo "mounted hugetlbfs at $mount_dir"
    fi
fi

grep -E '^(HugePages_Total|HugePages_Free|Hugepagesize)' /proc/meminfo
exit 0
