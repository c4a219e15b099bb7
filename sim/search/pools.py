"""Which decode pool sizes a disaggregated deployment family tries: computed, not enumerated.

A family is one prefill shape, one decode shape and one max batch; its deployments differ in the
pool sizes (n_p prefill, n_d decode instances), with n_p rate-matched to n_d: ceil(n_d * ratio)
or one less, ratio = decode rate / prefill rate per instance. Within a budget of EXACT_GPUS every
n_d is tried. Beyond it the per-GPU figures depend on the pools' sizes only through
(a) the rounding of n_p, which matters in proportion to 1 / n_p, and (b) queueing terms that
shrink as the pools grow; so a larger family tries:
- every n_d up to DENSE (small pools, where rounding and queueing matter most);
- a geometric grid from DENSE with step 1 / DENSE (relative change of the per-instance load
  between neighbours under 1 / DENSE);
- the denominators of the best rational approximations of the ratio (continued-fraction
  convergents and the last semiconvergent within the budget) and their largest multiple in the
  budget: the n_d whose matched n_p wastes least;
- the TOP_WINDOW largest n_d whose pools fit the budget (the fullest deployments).
That is O(DENSE log(budget)) sizes per family instead of O(budget), so plan time grows with the
logarithm of --gpus (benchmarks/search_speed.py --scale).
"""
from __future__ import annotations

import math
from collections.abc import Iterator

EXACT_GPUS = 576  # budgets up to eight NVL72 racks try every n_d (the embedded scenarios plan as they always did)
DENSE = 16  # beyond, every n_d up to DENSE, then a geometric grid of step 1 / DENSE
TOP_WINDOW = 8  # ... and the largest n_d that fit the budget
CF_TERMS = 40  # continued-fraction terms at most (float ratios run out of precision well before)


def largest_decode_pool(g_p: int, g_d: int, ratio: float, num_gpus: int) -> int:
    """Largest n_d whose rate-matched pools (n_p = max(1, ceil(n_d * ratio) - 1) at the least) fit
    `num_gpus`; 0 when none does."""
    hi = (num_gpus - g_p) // g_d
    n = min(hi, int((num_gpus + g_p) / (g_d + ratio * g_p)) + 1)  # least prefill >= n_d * ratio - 1
    while n >= 1 and _least_prefill(n, ratio) * g_p + n * g_d > num_gpus:
        n -= 1
    return max(n, 0)


def _least_prefill(n_d: int, ratio: float) -> int:
    match = max(1, math.ceil(n_d * ratio))
    return max(1, match - 1)


def approximation_denominators(ratio: float, limit: int) -> set[int]:
    """Denominators q <= limit of the convergents of `ratio` and of the best semiconvergent past
    the last convergent within `limit`: the q whose q * ratio lies nearest an integer (above or
    below) among all smaller q."""
    out: set[int] = set()
    k2, k1 = 1, 0  # denominators k_{n-2}, k_{n-1} (k_{-2} = 1, k_{-1} = 0)
    x = ratio
    for _ in range(CF_TERMS):
        a = math.floor(x)
        k = a * k1 + k2
        if k > limit:  # the last semiconvergent t * k_{n-1} + k_{n-2} within the limit
            if k1:
                out.add((limit - k2) // k1 * k1 + k2)
            break
        out.add(k)
        k2, k1 = k1, k
        frac = x - a
        if frac < 1e-12:
            break
        x = 1.0 / frac
    return {d for d in out if 1 <= d <= limit}


def decode_pool_counts(g_p: int, g_d: int, ratio: float, num_gpus: int) -> Iterator[int]:
    """The n_d a family tries (ascending), per the module docstring."""
    top = largest_decode_pool(g_p, g_d, ratio, num_gpus)
    if num_gpus <= EXACT_GPUS or top <= DENSE + TOP_WINDOW:  # (no larger n_d fits: least prefill grows with it)
        yield from range(1, top + 1)
        return
    sizes = set(range(1, DENSE + 1)) | set(range(max(1, top - TOP_WINDOW + 1), top + 1))
    n = float(DENSE)
    while n < top:
        sizes.add(int(n))
        n *= 1.0 + 1.0 / DENSE
    for q in approximation_denominators(ratio, top):
        sizes.update((q, (top // q) * q))
    yield from sorted(s for s in sizes if 1 <= s <= top)
