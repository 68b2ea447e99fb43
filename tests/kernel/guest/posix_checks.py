#!/usr/bin/env python3
"""tests/kernel/guest/posix_checks.py DIR — POSIX permission, set-id,
sticky-bit, hard link and rename cases run through an NFS mount by non-root
users (issue 21 item 6), each against what a local Linux file system does.

Runs as root: sets each case up as root, then acts in a child process that
took the case's uid, gid and supplementary groups (the NFS client sends them
as its AUTH_SYS credential). DIR must be empty, on the mount, and the export
must not squash root. Prints one line per case, "PASS NAME" or
"FAIL NAME: got ..., want ...", for compare_posix.py to hold the servers'
results side by side. Exit status 0 whatever the results.
"""
import errno
import os
import pickle
import stat
import sys

W = sys.argv[1]
U1, U2, G1, G2, SHARED = 1101, 1102, 1101, 1102, 1234


def as_user(uid, gid, groups, fn):
    """Run fn() in a child as uid/gid/groups; its value, or "E<NAME>" for an
    OSError."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(groups)
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            try:
                out = fn()
            except OSError as e:
                out = "E" + errno.errorcode.get(e.errno, str(e.errno))
            data = pickle.dumps(out)
        except Exception as e:  # noqa: BLE001 - reported as the result
            data = pickle.dumps("exception %r" % e)
        os.write(w, data)
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    return pickle.loads(b"".join(chunks)) if chunks else "no result"


def u1(fn, groups=()):
    return as_user(U1, G1, list(groups), fn)


def u2(fn, groups=()):
    return as_user(U2, G2, list(groups), fn)


def p(*names):
    return os.path.join(W, *names)


def mode(path):
    return oct(stat.S_IMODE(os.lstat(path).st_mode))


def owner(path):
    st = os.lstat(path)
    return (st.st_uid, st.st_gid)


def root_file(name, m, data=b"data\n", uid=0, gid=0):
    path = p(name)
    with open(path, "wb") as f:
        f.write(data)
    os.chown(path, uid, gid)
    os.chmod(path, m)
    return path


def root_dir(name, m, uid=0, gid=0):
    path = p(name)
    os.mkdir(path)
    os.chown(path, uid, gid)
    os.chmod(path, m)
    return path


def read(path):
    def f():
        with open(path, "rb") as fh:
            return fh.read()
    return f


def append(path, data=b"more\n"):
    def f():
        with open(path, "ab") as fh:
            fh.write(data)
        return "ok"
    return f


def touch(path):
    def f():
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.close(fd)
        return "ok"
    return f


def call(fn, *a):
    def f():
        fn(*a)
        return "ok"
    return f


RESULTS = []


def case(name, got, want):
    line = ("PASS %s" % name) if got == want else ("FAIL %s: got %r, want %r" % (name, got, want))
    RESULTS.append(line)
    print(line, flush=True)


def run(name, fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - one case's set-up failed
        case(name, "set-up failed: %r" % e, "set-up")


# ---- permission bits
def perm_read_denied():
    f = root_file("secret", 0o600)
    case("perm: others may not read a 0600 file", u1(read(f)), "EEACCES")


def perm_write_denied():
    f = root_file("ro", 0o644)
    case("perm: others may not write a 0644 file", u1(append(f)), "EEACCES")
    case("perm: access(W_OK) says so", u1(lambda: os.access(f, os.W_OK)), False)
    case("perm: others may read it", u1(read(f)), b"data\n")


def perm_group():
    f = root_file("grp", 0o640, gid=SHARED)
    case("perm: a supplementary group grants group read", u1(read(f), groups=[SHARED]), b"data\n")
    case("perm: outside the group no read", u1(read(f)), "EEACCES")
    g = root_file("grp-deny", 0o604, gid=SHARED)
    case("perm: the group triple applies, not the others' (0604)", u1(read(g), groups=[SHARED]), "EEACCES")


def perm_dirs():
    d = root_dir("locked", 0o700)
    root_file("locked/inner", 0o644)
    case("perm: no search in a 0700 directory", u1(lambda: os.stat(os.path.join(d, "inner")) and "ok"), "EEACCES")
    case("perm: no listing of a 0700 directory", u1(lambda: os.listdir(d)), "EEACCES")
    r = root_dir("readonly", 0o755)
    root_file("readonly/victim", 0o666)
    case("perm: no create in a 0755 directory of another", u1(touch(os.path.join(r, "new"))), "EEACCES")
    case("perm: no mkdir in it", u1(call(os.mkdir, os.path.join(r, "newdir"))), "EEACCES")
    case("perm: no unlink in it", u1(call(os.unlink, os.path.join(r, "victim"))), "EEACCES")


# ---- owners and modes
def ownership():
    f = root_file("roots", 0o666)
    case("chmod: by a non-owner is EPERM", u1(call(os.chmod, f, 0o777)), "EEPERM")
    case("chown: to oneself by a non-root user is EPERM", u1(call(os.chown, f, U1, -1)), "EEPERM")
    mine = p("mine")
    u1(touch(mine))
    case("create: the new file is the caller's", owner(mine), (U1, G1))
    case("chown: giving one's file away is EPERM", u1(call(os.chown, mine, U2, -1)), "EEPERM")
    case("chgrp: to a group one is not in is EPERM", u1(call(os.chown, mine, -1, G2)), "EEPERM")
    case("chgrp: to a supplementary group is allowed", u1(call(os.chown, mine, -1, SHARED), groups=[SHARED]), "ok")
    case("utimes: explicit times on another's writable file is EPERM", u1(call(os.utime, f, (1, 1))), "EEPERM")
    case("utimes: now on another's writable file is allowed", u1(call(os.utime, f, None)), "ok")


# ---- set-id bits
def setid_write():
    f = root_file("suid-w", 0o6777)
    u1(append(f))
    case("set-id: a non-owner's write clears S_ISUID and S_ISGID", mode(f), "0o777")
    g = root_file("sgid-noexec", 0o2666, gid=SHARED)
    u1(append(g), groups=[SHARED])
    case("set-id: S_ISGID without group x stays after a group member's write", mode(g), "0o2666")
    r = root_file("suid-root", 0o6777)
    with open(r, "ab") as fh:
        fh.write(b"root\n")
    case("set-id: root's write keeps them", mode(r), "0o6777")


def setid_truncate():
    f = root_file("suid-t", 0o6777)
    u1(call(os.truncate, f, 1))
    case("set-id: a non-owner's truncate clears them", mode(f), "0o777")


def setid_chown():
    f = root_file("suid-c", 0o6755)
    os.chown(f, U1, -1)
    case("set-id: chown clears S_ISUID and S_ISGID (group x)", mode(f), "0o755")
    d = root_dir("sgid-dir-c", 0o2755)
    os.chown(d, U1, -1)
    case("set-id: chown of a directory keeps S_ISGID", mode(d), "0o2755")


def setid_chmod():
    f = p("g-s")
    u1(touch(f))
    os.chown(f, -1, SHARED)
    case("set-id: chmod g+s by an owner outside the group succeeds", u1(call(os.chmod, f, 0o2755)), "ok")
    case("set-id: ... and S_ISGID is dropped", mode(f), "0o755")
    case("set-id: a member's chmod g+s keeps it", u1(call(os.chmod, f, 0o2755), groups=[SHARED]), "ok")
    case("set-id: ... S_ISGID set", mode(f), "0o2755")


def setgid_dirs():
    d = root_dir("sgid-dir", 0o2777, gid=SHARED)
    sub = os.path.join(d, "sub")
    f = os.path.join(d, "file")
    u1(call(os.mkdir, sub, 0o755))
    u1(touch(f))
    case("set-gid dir: a new directory takes its group", owner(sub), (U1, SHARED))
    case("set-gid dir: a new directory keeps S_ISGID", bool(os.lstat(sub).st_mode & stat.S_ISGID), True)
    case("set-gid dir: a new file takes its group", owner(f), (U1, SHARED))


# ---- sticky directories
def sticky():
    d = root_dir("sticky", 0o1777)
    a = os.path.join(d, "a")
    b = os.path.join(d, "b")
    u1(touch(a))
    u2(touch(b))
    case("sticky: removing another's file is EPERM", u2(call(os.unlink, a)), "EEPERM")
    case("sticky: renaming another's file is EPERM", u2(call(os.rename, a, os.path.join(d, "stolen"))), "EEPERM")
    case("sticky: renaming over another's file is EPERM", u2(call(os.rename, b, a)), "EEPERM")
    case("sticky: the owner removes their own", u2(call(os.unlink, b)), "ok")
    u1(call(os.mkdir, os.path.join(d, "adir")))
    case("sticky: removing another's directory is EPERM", u2(call(os.rmdir, os.path.join(d, "adir"))), "EEPERM")
    case("sticky: the directory's owner (root) may remove", call(os.unlink, a)(), "ok")
    e = root_dir("sticky-owned", 0o1777, uid=U2, gid=G2)
    c = os.path.join(e, "c")
    u1(touch(c))
    case("sticky: the directory's owner may remove others' files", u2(call(os.unlink, c)), "ok")


# ---- hard links
def links():
    theirs = root_file("link-theirs", 0o644)
    open_ = root_file("link-open", 0o666)
    suid = root_file("link-suid", 0o4666)
    case("link: to another's read-only file is EPERM (protected_hardlinks)",
         u1(call(os.link, theirs, p("l1"))), "EEPERM")
    case("link: to another's set-user-ID file is EPERM", u1(call(os.link, suid, p("l2"))), "EEPERM")
    case("link: to another's read-write file is allowed", u1(call(os.link, open_, p("l3"))), "ok")
    mine = p("link-mine")
    u1(touch(mine))
    os.chmod(mine, 0o400)
    case("link: to one's own file is allowed", u1(call(os.link, mine, p("l4"))), "ok")
    r = root_dir("link-ro", 0o755)
    case("link: into a directory one may not write is EACCES",
         u1(call(os.link, mine, os.path.join(r, "l5"))), "EEACCES")
    case("link: the link count", os.lstat(mine).st_nlink, 2)


# ---- rename
def renames():
    a = root_dir("ren-a", 0o777)
    b = root_dir("ren-b", 0o777)
    ro = root_dir("ren-ro", 0o755)
    root_dir("ren-a/sub", 0o555)
    case("rename: moving a directory one may not write to another parent is EACCES",
         u1(call(os.rename, os.path.join(a, "sub"), os.path.join(b, "sub"))), "EEACCES")
    case("rename: renaming it within its parent is allowed",
         u1(call(os.rename, os.path.join(a, "sub"), os.path.join(a, "sub2"))), "ok")
    f = os.path.join(a, "f")
    u1(touch(f))
    case("rename: into a directory one may not write is EACCES",
         u1(call(os.rename, f, os.path.join(ro, "f"))), "EEACCES")
    root_file("ren-ro/g", 0o666)
    case("rename: out of a directory one may not write is EACCES",
         u1(call(os.rename, os.path.join(ro, "g"), os.path.join(a, "g"))), "EEACCES")
    case("rename: one's own file across writable directories",
         u1(call(os.rename, f, os.path.join(b, "f"))), "ok")


for name, fn in [
    ("perm-read", perm_read_denied),
    ("perm-write", perm_write_denied),
    ("perm-group", perm_group),
    ("perm-dirs", perm_dirs),
    ("ownership", ownership),
    ("setid-write", setid_write),
    ("setid-truncate", setid_truncate),
    ("setid-chown", setid_chown),
    ("setid-chmod", setid_chmod),
    ("setgid-dirs", setgid_dirs),
    ("sticky", sticky),
    ("links", links),
    ("renames", renames),
]:
    run(name, fn)
