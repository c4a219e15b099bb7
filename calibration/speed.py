"""The rig's CPU speed as its ranks measured it in place, and measured seconds put at one reference speed.

Why: on the dev VM the same fixed workload's thread CPU time moves 4.9-5.5 ms <-> 7.6-10 ms between runs
minutes apart (executor/probe.py; benchmarks/RESULTS.md session 19, loop and lead): the VM itself runs slower
at times, in CPU time, so not a process taking the core. A fit over runs in different states mixes them, and a
served run in another state than the fit's misses its price by the ratio. So the speed is a measured input, as
a GPU's clock: every rank probes it in place while it runs (executor/probe.py InPlace), a run's speed is the
median of its probes (`run_probes`), and

- `normalise` (calibrate) divides each run's measured seconds by its factor = its probe / the reference probe
  (the median over the runs' probes), so the fitted profile prices the reference speed, which its provenance
  records (`speed_probe.ref_cpu_s`);
- `at_reference` (validate) puts measurements at a profile's reference speed the same way;
- `speed_factor` (a served run's probe / the profile's reference) is HardwareSpec.cpu_speed for the simulator
  that prices that run at its own speed (benchmarks/plan_to_hardware.py).

A record's seconds scale as a whole (one scalar on every CPU-bound op, as the probe measures): every timed record
but the probes themselves and the requests' timelines. Runs without probes (older measurements) are not
scaled, and a set of runs is normalised only when every run has probes (a mixed set would put the probed runs
at the median of some runs and the others at their own speed).
"""
from __future__ import annotations

import numpy as np

from .host_fit import PROBE, run_probes

UNSCALED = (PROBE, "request")  # records whose seconds are no work of the rank's model at the rig's speed


def reference(probes: dict[int, float]) -> float | None:
    """The reference probe of a set of runs: the median over the runs' probes (CPU s), None without any."""
    return float(np.median(list(probes.values()))) if probes else None


def rescaled(records: list[dict], probes: dict[int, float], ref: float) -> list[dict]:
    """`records` with each timed record of run r (`_run`) scaled by ref / probes[r] (`seconds` and `cpu_s`);
    probes, request timelines and records without seconds as they are."""
    out = []
    for r in records:
        if "seconds" not in r or r["op"] in UNSCALED:
            out.append(r)
            continue
        k = ref / probes[r.get("_run", 0)]
        out.append(dict(r, seconds=r["seconds"] * k, **({"cpu_s": r["cpu_s"] * k} if "cpu_s" in r else {})))
    return out


def probed(records: list[dict]) -> dict[int, float] | None:
    """Every run's probe (run_probes), or None unless every run of `records` has one."""
    probes = run_probes(records)
    runs = {r.get("_run", 0) for r in records}
    return probes if probes and runs <= set(probes) and min(probes.values()) > 0 else None


def normalise(records: list[dict]) -> tuple[list[dict], dict]:
    """(records at the reference speed, what was done: `ref_cpu_s` and each run's factor, or why not)."""
    probes = probed(records)
    if probes is None:
        return records, {"ref_cpu_s": None, "method": "none: a run without CPU-speed probes; seconds as measured"}
    ref = reference(probes)
    assert ref is not None
    factors = [probes[k] / ref for k in sorted(probes)]
    return rescaled(records, probes, ref), {
        "ref_cpu_s": ref, "runs": len(probes),
        "factor_min_median_max": [round(min(factors), 4), round(float(np.median(factors)), 4),
                                  round(max(factors), 4)],
        "method": "each run's seconds x ref_cpu_s / its probe (the median of its ranks' host.probe CPU seconds, "
                  "executor/probe.py; ref_cpu_s the median over the runs): the profile prices the rig at "
                  "ref_cpu_s (calibration/speed.py)"}


def profile_reference(prof) -> float | None:
    """The reference probe a profile was fitted at (provenance.speed_probe.ref_cpu_s), else None."""
    sp = (prof.provenance or {}).get("speed_probe") or {}
    ref = sp.get("ref_cpu_s") if isinstance(sp, dict) else None
    return float(ref) if ref else None


def at_reference(records: list[dict], prof) -> list[dict]:
    """`records` put at `prof`'s reference speed (validate): as measured where the profile has no reference or
    a run has no probe."""
    ref, probes = profile_reference(prof), probed(records)
    return records if ref is None or probes is None else rescaled(records, probes, ref)


def speed_factor(records: list[dict], ref: float) -> float | None:
    """A run's speed against the reference probe `ref`: the median of its probes / ref (HardwareSpec.cpu_speed
    for the simulator that prices it), None without probes."""
    cpu = [float(r.get("cpu_s", r["seconds"])) for r in records if r["op"] == PROBE and r["source"] == "measured"]
    return float(np.median(cpu)) / ref if cpu else None
