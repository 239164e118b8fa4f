"""The known-failures file of opcheck (tests/opinfo_known_failures.txt): its format, and how a
sweep's results are checked against it."""
import sys

from .opcompare import DTYPES

# How a known failure fails: the test checks that a listed entry still fails that way.
FAILURE_KINDS = {
    "cpu": "runs on the CPU (the fallback), with the right values",
    "values": "runs, but a result (value, dtype, shape, gradient) differs from the CPU's",
    "raises": "raises on tpu (or times out, or crashes the process) where the CPU does not",
}


def failure_kind(r):
    """The FAILURE_KINDS key a result belongs to; None for a native pass or a skip."""
    if r["status"] == "fallback":
        return "cpu"
    if r["status"] != "fail":
        return None
    return "values" if r["error"].startswith("AssertionError") else "raises"


def parse_known_failures(text, path="<known failures>"):
    """({(op, dtype, kind): (why, reason, line)}, [problem, ...]) from a known-failures file.

    One entry a line, `op dtype kind why | reason`: op as `entry_name` names it, dtype one of
    DTYPES or `*` (every dtype; a line naming the dtype takes precedence), kind forward or
    grad, why one of FAILURE_KINDS. Blank lines and `#` comments are ignored. A malformed line
    or a second line for the same (op, dtype, kind) is a problem; the first line stands."""
    known, problems = {}, []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, sep, reason = line.partition("|")
        fields = head.split()
        if not sep or len(fields) != 4 or not reason.strip():
            problems.append(f"{path}:{n}: expected 'op dtype kind why | reason', got {line!r}")
            continue
        op, dtype, kind, why = fields
        if dtype != "*" and dtype not in DTYPES:
            problems.append(f"{path}:{n}: unknown dtype {dtype!r} (one of {', '.join(DTYPES)} or *)")
        elif kind not in ("forward", "grad"):
            problems.append(f"{path}:{n}: kind must be forward or grad, got {kind!r}")
        elif why not in FAILURE_KINDS:
            problems.append(f"{path}:{n}: the kind of failure must be one of {', '.join(FAILURE_KINDS)}, got {why!r}")
        elif (op, dtype, kind) in known:
            problems.append(f"{path}:{n}: {op} {dtype} {kind} is already listed on line {known[op, dtype, kind][2]}")
        else:
            known[op, dtype, kind] = (why, reason.strip(), n)
    return known, problems


def load_known_failures(path):
    """The entries of a known-failures file (see parse_known_failures); raises on any problem."""
    with open(path) as f:
        known, problems = parse_known_failures(f.read(), path)
    if problems:
        raise ValueError("\n".join(problems))
    return known


def known_entry(known, r):
    """(why, reason) of the line that lists result `r`, or None."""
    for dtype in (r["dtype"], "*"):
        entry = known.get((r["op"], dtype, r["kind"]))
        if entry:
            return entry[:2]
    return None


def known_mismatch(known, r):
    """None when `r` agrees with the known-failures list; otherwise what differs."""
    entry, kind = known_entry(known, r), failure_kind(r)
    detail = r["error"] or "ran on the CPU: " + ", ".join(r["fallback_ops"])
    if entry is None:
        return f"{kind}: {detail}" if kind else None
    if kind is None:
        return "now passes natively: remove it from the known failures" if r["status"] == "native" else None
    if kind != entry[0]:
        return f"listed as {entry[0]} ({entry[1]}), now {kind}: {detail}"
    return None


def check_known(results, known, path, file=sys.stdout):
    """Prints entries that fail without a line in the known failures, listed entries that now
    pass, and listed entries that now fail another way. Returns how many there are."""
    count = 0
    for r in results:
        mismatch = known_mismatch(known, r)
        if mismatch:
            count += 1
            print(f"{r['op']} {r['dtype']} {r['kind']}: {mismatch} ({path})", file=file)
    print(f"{count} entries differ from {path}", file=file)
    return count
