"""tests/kernel/guest/tshark_common.py — what the tshark scripts' analyses
share: the rows of tshark_lib.sh's field file, the malformed-frame and
expert-error checks, and the check lines (lib.sh's format, appended to
checks.txt)."""
import collections

PI_ERROR = 0x800000  # epan/proto.h expert severity


def vals(s):
    """The values of one field (tshark joins several with commas)."""
    return [v for v in s.split(",") if v != ""]


class Capture:
    """The frames of FIELDS: `rows` yields (number, source IP, the middle
    fields), noting malformed frames and expert-info errors."""

    def __init__(self, fields, n):
        self.fields, self.n = fields, n
        self.frames = 0
        self.malformed, self.errors = [], []

    def rows(self):
        for line in open(self.fields):
            f = (line.rstrip("\n").split("\t") + [""] * (self.n + 4))[: self.n + 4]
            num, src, mid, malf, sev = f[0], f[1], f[2:-2], f[-2], f[-1]
            self.frames += 1
            if malf:
                self.malformed.append(num)
            if any(int(s) >= PI_ERROR for s in vals(sev)):
                self.errors.append(num)
            yield num, src, mid


class Results:
    def __init__(self, tag, checks):
        self.tag, self.checks, self.lines = tag, checks, []

    def check(self, ok, what):
        self.lines.append(("ok - " if ok else "not ok - ") + "%s: %s" % (self.tag, what))

    def frames(self, cap):
        """No malformed frame, none with an expert-info error."""
        for what, bad in (("malformed frames", cap.malformed), ("frames with expert-info errors", cap.errors)):
            self.check(not bad, "%s (%d)%s" % (what, len(bad), (": frames " + " ".join(bad[:10])) if bad else ""))

    def answered(self, calls, answered):
        missing = sorted(calls - answered)
        self.check(not missing, "RPC calls without a dissected reply (%d of %d calls)%s"
                   % (len(missing), len(calls), (": xids " + " ".join(missing[:5])) if missing else ""))

    def write(self):
        with open(self.checks, "a") as f:
            for r in self.lines:
                print(r)
                f.write(r + "\n")


Counter = collections.Counter
