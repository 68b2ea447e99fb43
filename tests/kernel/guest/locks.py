#!/usr/bin/env python3
"""tests/kernel/guest/locks.py FILE — two processes' fcntl (POSIX) and flock
locks on FILE, for tests/kernel/guest/nfs4.sh (issue 22): run once on a local
file system and once on the NFS mount, the two must agree, and each case must
give what POSIX and flock(2) say.

A child process (the "holder") takes and drops locks when the parent tells
it to over a pipe; the parent (the "other process") then tries its own:
a non-blocking attempt against a conflicting lock fails (EAGAIN, EACCES or
EWOULDBLOCK: "conflict"), a blocking one succeeds once the holder lets go,
byte ranges that do not overlap do not conflict, two read (shared) locks do
not conflict, closing the holder's descriptor drops its POSIX locks.

Prints one line per case: "CASE RESULT EXPECTED" (RESULT may be "error:..."
when the call failed otherwise); the caller compares RESULT with EXPECTED.
"""
import errno
import fcntl
import os
import struct
import sys
import time

PATH = sys.argv[1]
CONFLICT = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
# the blocking cases: the holder lets go after RELEASE_S; the waiter must
# get the lock after that and within WAIT_LIMIT_S (the Linux NFSv4 client,
# with no lock callback, polls a denied blocking lock from 1 s up to 30 s)
RELEASE_S = 1.0
WAIT_LIMIT_S = 40.0


def posix(fd, kind, start, length, wait=False):
    """fcntl F_SETLK(W): kind "w", "r" or "u"."""
    cmd = {"w": fcntl.LOCK_EX, "r": fcntl.LOCK_SH, "u": fcntl.LOCK_UN}[kind]
    if not wait and kind != "u":
        cmd |= fcntl.LOCK_NB
    fcntl.lockf(fd, cmd, length, start, os.SEEK_SET)


def bsd(fd, kind, wait=False):
    """flock(2): kind "ex", "sh" or "un"."""
    cmd = {"ex": fcntl.LOCK_EX, "sh": fcntl.LOCK_SH, "un": fcntl.LOCK_UN}[kind]
    if not wait and kind != "un":
        cmd |= fcntl.LOCK_NB
    fcntl.flock(fd, cmd)


def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return "conflict" if e.errno in CONFLICT else "error:" + errno.errorcode.get(e.errno, str(e.errno))


def holder(cmd_r, res_w):
    """The child: one command per line, one answer per command."""
    fd = os.open(PATH, os.O_RDWR)
    rd = os.fdopen(cmd_r, "r")
    for line in rd:
        w = line.split()
        if w[0] == "exit":
            break
        try:
            if w[0] == "posix":
                posix(fd, w[1], int(w[2]), int(w[3]))
            elif w[0] == "flock":
                bsd(fd, w[1])
            elif w[0] == "close":
                os.close(fd)
                fd = os.open(PATH, os.O_RDWR)
            answer = "ok"
        except OSError as e:
            answer = "error:" + errno.errorcode.get(e.errno, str(e.errno))
        if len(w) > 1 and w[-1] == "later":
            # answer first, then let go after RELEASE_S
            os.write(res_w, (answer + "\n").encode())
            time.sleep(RELEASE_S)
            try:
                if w[0] == "posix":
                    posix(fd, "u", int(w[2]), int(w[3]))
                else:
                    bsd(fd, "un")
            except OSError:
                pass
            continue
        os.write(res_w, (answer + "\n").encode())
    os.close(fd)
    os._exit(0)


def main():
    with open(PATH, "wb") as f:
        f.write(b"\0" * 4096)
    cmd_r, cmd_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(cmd_w)
        os.close(res_r)
        holder(cmd_r, res_w)
    os.close(cmd_r)
    os.close(res_w)
    answers = os.fdopen(res_r, "r")

    def tell(cmd):
        os.write(cmd_w, (cmd + "\n").encode())
        return answers.readline().strip()

    fd = os.open(PATH, os.O_RDWR)
    results = []

    def case(name, got, want):
        results.append((name, got, want))

    def blocking(name, f):
        t = time.monotonic()
        r = attempt(f)
        dt = time.monotonic() - t
        if r == "ok":
            r = "waited" if RELEASE_S * 0.8 <= dt <= WAIT_LIMIT_S else "ok-after-%.1fs" % dt
        case(name, r, "waited")

    # POSIX byte-range locks
    case("fcntl-holder-write-lock-0-100", tell("posix w 0 100"), "ok")
    case("fcntl-write-over-a-write-lock", attempt(lambda: posix(fd, "w", 0, 100)), "conflict")
    case("fcntl-read-inside-a-write-lock", attempt(lambda: posix(fd, "r", 50, 10)), "conflict")
    case("fcntl-write-at-the-last-byte", attempt(lambda: posix(fd, "w", 99, 1)), "conflict")
    case("fcntl-write-just-after-the-range", attempt(lambda: posix(fd, "w", 100, 100)), "ok")
    case("fcntl-unlock-own-range", attempt(lambda: posix(fd, "u", 100, 100)), "ok")
    # F_GETLK names the holder's lock
    fl = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 10, 5, 0))
    l_type, _, l_start, l_len, _ = struct.unpack("hhqqi4x", fl)
    case("fcntl-getlk-reports-the-holders-range",
         "%s:%d:%d" % ({fcntl.F_WRLCK: "W", fcntl.F_RDLCK: "R", fcntl.F_UNLCK: "U"}.get(l_type, "?"), l_start, l_len),
         "W:0:100")
    case("fcntl-holder-read-lock-200-100", tell("posix r 200 100"), "ok")
    case("fcntl-read-over-a-read-lock", attempt(lambda: posix(fd, "r", 200, 100)), "ok")
    case("fcntl-unlock-own-read-lock", attempt(lambda: posix(fd, "u", 200, 100)), "ok")
    case("fcntl-write-over-a-read-lock", attempt(lambda: posix(fd, "w", 250, 10)), "conflict")
    case("fcntl-lock-to-eof-over-a-lock", attempt(lambda: posix(fd, "w", 150, 0)), "conflict")
    case("fcntl-holder-unlocks-the-read-lock", tell("posix u 200 100"), "ok")
    case("fcntl-lock-to-eof-after-unlock", attempt(lambda: posix(fd, "w", 150, 0)), "ok")
    case("fcntl-unlock-to-eof", attempt(lambda: posix(fd, "u", 150, 0)), "ok")
    # blocking: the holder lets go of 0-100 after RELEASE_S
    case("fcntl-holder-releases-later", tell("posix w 0 100 later"), "ok")
    blocking("fcntl-blocking-write-waits-for-the-release", lambda: posix(fd, "w", 0, 100, wait=True))
    case("fcntl-unlock-after-the-wait", attempt(lambda: posix(fd, "u", 0, 100)), "ok")
    # closing any descriptor of the file drops the process's POSIX locks
    case("fcntl-holder-write-lock-again", tell("posix w 0 100"), "ok")
    case("fcntl-conflict-before-the-close", attempt(lambda: posix(fd, "w", 0, 100)), "conflict")
    case("fcntl-holder-closes-its-descriptor", tell("close"), "ok")
    case("fcntl-no-conflict-after-the-close", attempt(lambda: posix(fd, "w", 0, 100)), "ok")
    case("fcntl-unlock-after-the-close", attempt(lambda: posix(fd, "u", 0, 100)), "ok")

    # flock: whole-file locks
    case("flock-holder-exclusive", tell("flock ex"), "ok")
    case("flock-exclusive-over-exclusive", attempt(lambda: bsd(fd, "ex")), "conflict")
    case("flock-shared-over-exclusive", attempt(lambda: bsd(fd, "sh")), "conflict")
    case("flock-holder-unlocks", tell("flock un"), "ok")
    case("flock-exclusive-after-unlock", attempt(lambda: bsd(fd, "ex")), "ok")
    case("flock-unlock", attempt(lambda: bsd(fd, "un")), "ok")
    case("flock-holder-shared", tell("flock sh"), "ok")
    case("flock-shared-over-shared", attempt(lambda: bsd(fd, "sh")), "ok")
    case("flock-unlock-shared", attempt(lambda: bsd(fd, "un")), "ok")
    case("flock-exclusive-over-shared", attempt(lambda: bsd(fd, "ex")), "conflict")
    case("flock-holder-unlocks-shared", tell("flock un"), "ok")
    case("flock-holder-exclusive-releases-later", tell("flock ex later"), "ok")
    blocking("flock-blocking-exclusive-waits-for-the-release", lambda: bsd(fd, "ex", wait=True))
    case("flock-unlock-after-the-wait", attempt(lambda: bsd(fd, "un")), "ok")

    os.write(cmd_w, b"exit\n")
    os.waitpid(pid, 0)
    os.close(fd)
    for name, got, want in results:
        print(name, got, want)


main()
