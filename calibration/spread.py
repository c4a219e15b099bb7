"""Step-time spread from measured steps: how far one step's time lies from its price.

Serving-mode steps, where the measurements have at least MIN_STEPS of a kind (a serving run beside the
sweep): r = log(step_s / the fitted profile's price of that step), less the median of r over the kind;
the series in step order gives the correlation. Otherwise the sweep's steps, as follows.

The fit prices a shape's median step (calibration/samples.py: the median over each run's median); the
steps behind it scatter about it. Per step kind (prefill, decode), over the fit set's sweep shapes:

    r = log(step_s / median step_s of its shape, over every run of that shape)
    sd = (q90(r) - q10(r)) / (2 x 1.2816)       the log-normal sd that puts p10 and p90 where measured
    corr = Pearson correlation of r_t and r_(t+1), consecutive steps of one run of one shape

The quantile form of sd reads the spread the latency gates read (p90 over p50) and a rare stall does not
blow it up. Residuals about the median over all runs keep the run-to-run offsets (the load a run met):
they show as correlation between consecutive steps, as a slow minute does in serving. The simulator draws
each step as price x exp(AR(1) with this sd and corr) (sim/step_spread.py). Serving-mode steps (every
one a shape of its own) have no median to scatter about and are not read.
"""
from __future__ import annotations

import numpy as np

from .fit import _sig
from .samples import StepSample, shape_groups

Z90 = 1.2815516  # standard normal 90th percentile
MIN_STEPS = 10  # steps of a kind (in shapes with >= 2 steps) before its sd is given
MIN_PAIRS = 10  # consecutive step pairs before its correlation is given (else 0: independent steps)


def residuals(raw: list[StepSample]) -> dict[str, list[tuple[int, tuple, int, float]]]:
    """Per kind: (run, shape, step, log(step_s / its shape's median)) of every sweep step in a shape with
    at least two steps."""
    out: dict[str, list] = {"prefill": [], "decode": []}
    for key, group in shape_groups([s for s in raw if not s.serve]).items():
        if len(group) < 2:
            continue
        med = float(np.median([s.step_s for s in group]))
        out[group[0].role] += [(s.run, key, s.steps[0], float(np.log(s.step_s / med))) for s in group]
    return out


def serving_residuals(raw: list[StepSample], price) -> dict[str, list[tuple[int, tuple, int, float]]]:
    """Per kind: (run, ("serve", kind), step, log(step_s / price(step)) less its median over the kind) of every
    serving-mode step; `price(sample)` is the fitted profile's seconds for it (the median removed: the spread
    is about the price, what the price misses is the fit's error, validate's to report)."""
    out: dict[str, list] = {"prefill": [], "decode": []}
    for s in raw:
        if s.serve:
            out[s.role].append((s.run, ("serve", s.role), s.steps[0], float(np.log(s.step_s / price(s)))))
    for kind, rows in out.items():
        med = float(np.median([x for *_, x in rows])) if rows else 0.0
        out[kind] = [(run, key, step, x - med) for run, key, step, x in rows]
    return out


def step_spread(raw: list[StepSample], price=None) -> tuple[dict[str, float], dict[str, float], dict[str, dict]]:
    """(sd per kind, lag-1 correlation per kind, what each came from) of the steps `raw`: a kind's serving-mode
    steps where there are MIN_STEPS of them and `price` (sample -> fitted seconds) is given (serving is what
    the spread describes: the sweep runs one instance at a time, each run after the cores quieten), else
    its sweep steps."""
    sd, corr, info = {}, {}, {}
    served = serving_residuals(raw, price) if price is not None else {}
    for kind, rows in residuals(raw).items():
        source = "serving" if len(served.get(kind, ())) >= MIN_STEPS else "sweep"
        rows = served[kind] if source == "serving" else rows
        if len(rows) < MIN_STEPS:
            continue
        r = np.array([x for *_, x in rows])
        q10, q90 = np.percentile(r, [10, 90])
        sd[kind] = _sig(max((q90 - q10) / (2 * Z90), 0.0))
        a, b = _pairs(rows)
        c = float(np.corrcoef(a, b)[0, 1]) if len(a) >= MIN_PAIRS and np.std(a) > 0 and np.std(b) > 0 else 0.0
        if c > 0:
            corr[kind] = _sig(min(c, 0.95))
        info[kind] = {"source": source, "steps": len(rows), "pairs": len(a), "p10_p50_p90": [_sig(v) for v in
                                                                              np.percentile(r, [10, 50, 90])]}
    return sd, corr, info


def _pairs(rows: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """(r_t, r_t+1) over consecutive steps (step numbers one apart) of one run of one shape."""
    seen = {(run, key, step): x for run, key, step, x in rows}
    a = [(x, seen[(run, key, step + 1)]) for (run, key, step), x in seen.items() if (run, key, step + 1) in seen]
    return np.array([p for p, _ in a]), np.array([q for _, q in a])
