"""Accuracy benchmark: every published deployment in benchmarks/cases/ predicted side by side with
its published figure, per profile, with the error statistics the cost-model work is judged by.

Cases (one YAML per source, schema in rackplan/accuracy/cases.py) come from shared/reference/public_cases.md,
public_case_sglang_96xH100.md, public_cases_2.yaml and the new models' sources (issue 43). Expressible cases
are simulated (sim.simulator.simulate_specs) or, for per-phase figures measured with the other phase
unlimited, priced as one step of the tested instance; inexpressible ones are listed with the feature they
need (`--all` still runs those that carry a plan, outside the error summary).

Run:  rackplan accuracy [--profile datasheet --profile configs/profiles/X.yaml]
      [--case ID ...] [--cases DIR] [--all] [--seed 0] [--json] [--out DIR] [--write-bands [FILE]]
      (or `python benchmarks/accuracy.py ...`, the same command)
`--profile default` prices each case with its hardware's `default_profile` (when its hardware YAML
names one); without --profile: datasheet, plus `default` when any case's hardware names one.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rackplan.accuracy_band import BANDS_PATH
from rackplan.specs import HardwareSpec, Profile, SpecError, load_hardware, load_profile

from .cases import CASES_DIR, Case, load_cases, profile_applies
from .predict import predict
from .report import Outcome, print_tables, summarise, to_json, write_outputs
from .stats import band_entries, profile_sources

DEFAULT = "default"  # --profile keyword: each case's hardware default profile


def build_parser(prog: str = "accuracy.py") -> argparse.ArgumentParser:
    """The stand-alone parser (benchmarks/accuracy.py); `rackplan accuracy` adds the same arguments."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's arguments (rackplan/cli.py's subcommand interface)."""
    p.add_argument("--profile", action="append", metavar="P",
                   help="profile name or YAML path, repeatable; 'default' = each case hardware's "
                        "default_profile (default: datasheet, plus 'default' when a hardware names one)")
    p.add_argument("--case", action="append", metavar="ID",
                   help="only cases whose id contains ID or whose group (case file name) is ID; repeatable")
    p.add_argument("--cases", type=Path, default=CASES_DIR, metavar="DIR",
                   help="folder of case YAML files (default: benchmarks/cases)")
    p.add_argument("--all", action="store_true",
                   help="also run inexpressible cases that carry a plan (shown apart, not in the summary)")
    p.add_argument("--seed", type=int, default=0, help="simulation seed (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    p.add_argument("--out", type=Path, metavar="DIR", help="also write DIR/accuracy.csv and DIR/accuracy.png")
    p.add_argument("--write-bands", nargs="?", const=BANDS_PATH, type=Path, metavar="FILE",
                   help="write the error bands every headline carries (default: %(const)s, shipped as package "
                        "data): all cases, datasheet and hardware-default profiles; not with --case / --profile")


class Profiles:
    """Resolves a --profile label to the Profile that prices a case on its hardware (cached)."""

    def __init__(self):
        self._cache: dict[str, Profile] = {}

    def _load(self, name: str) -> Profile:
        if name not in self._cache:
            self._cache[name] = load_profile(name)
        return self._cache[name]

    def for_case(self, label: str, hw: HardwareSpec) -> tuple[Profile | None, str]:
        """(profile, "") or (None, why it does not apply)."""
        name = label
        if label == DEFAULT:
            name = getattr(hw, "default_profile", None)
            if not name:
                return None, f"{hw.name} names no default_profile"
        prof = self._load(name)
        if not profile_applies(prof, hw):
            return None, f"profile {prof.name} was fitted on {prof.hardware}, the case runs on {hw.name}"
        return prof, ""

    def seen_sources(self, label: str, hws: list[HardwareSpec]) -> dict[str, list[str]]:
        """Case sources the profile(s) behind `label` derived parameters from (over the cases' hardware)."""
        seen: dict[str, list[str]] = {}
        for hw in hws:
            prof, _ = self.for_case(label, hw)
            for src, params in (profile_sources(prof) if prof else {}).items():
                seen.setdefault(src, [])
                seen[src] += [p for p in params if p not in seen[src]]
        return seen

    def label(self, label: str) -> str:
        return "hardware default" if label == DEFAULT else self._load(label).name


def select(cases: list[Case], patterns: list[str] | None) -> list[Case]:
    """Cases to report: all of them (inexpressible ones listed), filtered by --case."""
    if patterns:
        cases = [c for c in cases if any(p in c.id or p == c.group for p in patterns)]
        if not cases:
            raise SpecError("", "--case", "an id or group of benchmarks/cases/*.yaml", ",".join(patterns))
    return cases


def default_labels(cases: list[Case]) -> list[str]:
    hws = {c.hardware for c in cases if c.runnable}
    named = any(getattr(load_hardware(h), "default_profile", None) for h in hws)
    return ["datasheet"] + ([DEFAULT] if named else [])


def run_cases(cases: list[Case], labels: list[str], seed: int, run_all: bool = False,
              num_requests: int | None = None, progress: bool = False) -> dict[str, dict[str, Outcome]]:
    """Predict every runnable case (expressible ones, or all with run_all) under every profile label."""
    todo = [c for c in cases if c.runnable and (c.expressible or run_all)]
    profiles = Profiles()
    results: dict[str, dict[str, Outcome]] = {}
    bar = _progress(progress, len(todo) * len(labels))
    for c in todo:
        hw = load_hardware(c.hardware)
        results[c.id] = {}
        for lab in labels:
            prof, why = profiles.for_case(lab, hw)
            results[c.id][profiles.label(lab)] = _one(c, prof, why, seed, num_requests)
            bar(c.id)
    bar(None)
    return results


def _one(case: Case, prof: Profile | None, why: str, seed: int, num_requests: int | None) -> Outcome:
    if prof is None:
        return Outcome(skipped=why)
    try:
        return Outcome(predicted=float(predict(case, prof, seed, num_requests)), profile=prof.name)
    except (SpecError, RuntimeError) as exc:  # a layout that does not fit, a run that cannot finish
        return Outcome(error=str(exc), profile=prof.name)


def _progress(enabled: bool, total: int):
    """A rich progress bar on stderr; returns tick(case_id), tick(None) closes it."""
    if not enabled or total == 0:
        return lambda _cid: None
    from rich.console import Console
    from rich.progress import Progress

    prog = Progress(console=Console(stderr=True), transient=True)
    task = prog.add_task("predicting", total=total)
    prog.start()

    def tick(cid):
        if cid is None:
            prog.stop()
        else:
            prog.update(task, advance=1, description=cid)
    return tick


def bands_document(cases: list[Case], results, seed: int) -> dict:
    """The bands table with its provenance: the command, the commit it ran on (and whether the tree
    had changes), the date."""
    import datetime
    import subprocess

    root = Path(__file__).resolve().parents[2]
    git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout.strip()  # noqa: E731
    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--", "benchmarks", "sim", "rackplan", "configs",
                     ":(exclude)rackplan/data"))
    seed_arg = f" --seed {seed}" if seed else ""
    return {"command": f"python benchmarks/accuracy.py --write-bands{seed_arg}",
            "commit": commit + (" (with uncommitted changes)" if dirty else ""),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "statistic": "typical_error = median |predicted / published - 1| over the expressible figures of "
                         "benchmarks/cases priced by the profile; phase '*' / hardware '*' pool them",
            "bands": band_entries(cases, results)}


def write_bands(path: Path, cases: list[Case], results, seed: int) -> Path:
    import yaml

    doc = bands_document(cases, results, seed)
    rows = [f"- {yaml.safe_dump(e, default_flow_style=True, sort_keys=False, width=10**6).strip()}"
            for e in doc.pop("bands")]
    head = "# Generated by `python benchmarks/accuracy.py --write-bands`: do not edit (rackplan/accuracy_band.py)\n"
    path.write_text(head + yaml.safe_dump(doc, sort_keys=False, width=120) + "bands:\n" + "\n".join(rows) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """`python benchmarks/accuracy.py`: parse and run; returns the exit code."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Predict the selected cases under each profile, print the tables (or JSON), write what was asked;
    2 on bad input (one line), 1 when a prediction failed."""
    try:
        if args.write_bands and (args.case or args.profile or args.all):
            raise SpecError("", "--write-bands", "the whole benchmark (no --case, --profile or --all)")
        cases = select(load_cases(args.cases), args.case)
        labels_in = args.profile or default_labels(cases)
        profiles = Profiles()
        labels = [profiles.label(lab) for lab in labels_in]
        if len(set(labels)) != len(labels):
            raise SpecError("", "--profile", "distinct profiles (two share a name)", ", ".join(labels_in))
        results = run_cases(cases, labels_in, args.seed, args.all, progress=not args.json)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    hws = [load_hardware(h) for h in sorted({c.hardware for c in cases if c.runnable})]
    summaries = {lab: summarise(cases, {cid: r[lab] for cid, r in results.items() if lab in r},
                                profiles.seen_sources(lab_in, hws))
                 for lab_in, lab in zip(labels_in, labels)}
    if args.json:
        sys.stdout.write(to_json(cases, results, labels, summaries, args.seed) + "\n")
    else:
        n_expr = sum(c.expressible for c in cases)
        print_tables(cases, results, labels, summaries,
                     f"[bold]accuracy[/]: {len(cases)} public cases ({n_expr} expressible), profiles "
                     f"{', '.join(labels)}, seed {args.seed}")
    if args.out:
        for path in write_outputs(args.out, cases, results, labels):
            print(f"wrote {path}", file=sys.stderr)
    if args.write_bands:
        print(f"wrote {write_bands(args.write_bands, cases, results, args.seed)}", file=sys.stderr)
    failed = [cid for cid, r in results.items() if any(o.error for o in r.values())]
    return 1 if failed else 0
