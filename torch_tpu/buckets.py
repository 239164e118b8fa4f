"""The bucket policy: the one place that says to which size a varying dim is padded.

A dim that varies (Dynamo's symbolic sizes: torch.compile(dynamic=True), mark_dynamic, or a
dim seen with a second size) is held in a buffer whose extent is its bucket, so one program
serves every size of a bucket. TORCH_TPU_BUCKETS chooses the policy:

  unset, "1", "default"  multiples of 8 up to 64, then four steps per power of two:
                         8, 16, ..., 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, ...
                         Below 64 a bucket wastes fewer than 8 elements; above it, less than a
                         quarter of the size (n <= bucket < 1.25 n). Multiples of 8 keep a
                         TPU's (8, 128) tiles whole on the sublane dim at every bucket.
  "pow2"                 the next power of two, at least 8 (waste below 100%).
  "mult:K"               the next multiple of K ("mult:128": a lane multiple).
  "8,16,48,..."          an explicit, increasing list; a size above its largest stays exact.
  "0", "off", "exact"    no buckets: every size is its own program (as before buckets).
"""
import functools
import os

_OFF = ("0", "off", "exact", "false", "no")


def _default(n):
    if n <= 64:
        return max(8, -(-n // 8) * 8)
    top = 1 << (n - 1).bit_length()  # the next power of two >= n
    step = top // 8  # quarter steps of the power below: (top/2) * (1 + k/4)
    return -(-n // step) * step


def _pow2(n):
    return max(8, 1 << (max(n, 1) - 1).bit_length())


@functools.lru_cache(maxsize=16)
def _parse(spec):
    """The policy function of a TORCH_TPU_BUCKETS value, or None for "off"."""
    s = spec.strip().lower()
    if s in _OFF:
        return None
    if s in ("", "1", "default", "on"):
        return _default
    if s == "pow2":
        return _pow2
    if s.startswith("mult:"):
        try:
            k = int(s[5:])
        except ValueError:
            k = 0
        if k <= 0:
            raise ValueError(f"TORCH_TPU_BUCKETS={spec!r}: mult:K needs a positive integer K")
        return lambda n: max(k, -(-n // k) * k)
    try:
        sizes = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(a >= b for a, b in zip(sizes, sizes[1:])) or sizes[0] <= 0:
        raise ValueError(f"TORCH_TPU_BUCKETS={spec!r}: expected 'default', 'pow2', 'mult:K', an increasing list "
                         "of positive sizes ('8,16,64'), or '0'/'off'")
    return lambda n: next((b for b in sizes if b >= n), n)


def spec():
    return os.environ.get("TORCH_TPU_BUCKETS", "default")


def enabled():
    """Whether varying dims are bucketed (TORCH_TPU_BUCKETS is not "0"/"off")."""
    return _parse(spec()) is not None


def bucket(n):
    """The extent a dim of logical size `n` is held in: n <= bucket(n). With buckets off, n."""
    n = int(n)
    policy = _parse(spec())
    if policy is None or n <= 0:
        return n
    b = int(policy(n))
    assert b >= n, (spec(), n, b)
    return b


def waste(n):
    """The fraction of a dim of size n that is padding: (bucket(n) - n) / bucket(n)."""
    b = bucket(n)
    return (b - n) / b if b else 0.0
