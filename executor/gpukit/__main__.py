"""Run the GPU kit: every stage in order, the results repacked into the call's returned files after each.

    python -m rackplan.executor.gpukit --out DIR [--hardware h100-sxm|h200-sxm] [--budget S]
    python -m rackplan.executor.gpukit --out DIR --rehearse     # CPU, tiny shapes, TRITON_INTERPRET=1

Stages: env (versions, the device, nvidia-smi), kernels (kernels.py), plans (plans.py: the replays that
pass execute's checks on this GPU), one `rackplan execute` replay per plan, `rackplan validate` of each
against the GPU's shipped profile (<hardware>-vllm), compare (compare.py -> summary.md). Without a CUDA
device (and without --rehearse) it refuses with exit 3 before doing anything. Each stage runs as a
subprocess under a timeout cut from --budget, so one that hangs costs its share and the rest still run;
exit 1 when any stage failed. DIR gets summary.md and results.tgz (archive.py); run.sh adds kit.log.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rackplan.args import positive_float, positive_int

from . import archive, compare, plans

GPUS = {"H200": "h200-sxm", "H100": "h100-sxm"}  # device-name substring -> the shipped hardware spec
STAGE_S = {"kernels": 200, "replay": 100, "validate": 45}  # longest share of each stage (seconds)


def detect_hardware() -> str | None:
    """The hardware spec of CUDA device 0 by its name, None when no shipped spec matches."""
    import torch
    name = torch.cuda.get_device_name(0)
    return next((hw for key, hw in GPUS.items() if key in name), None)


class Kit:
    def __init__(self, args):
        self.args, self.out = args, Path(args.out)
        self.results = Path(tempfile.mkdtemp(prefix="gpukit-")) / "results"
        self.results.mkdir()
        self.t0 = time.monotonic()
        self.stages: list[tuple[str, str, float]] = []  # (stage, outcome, seconds)
        self.device = "cpu" if args.rehearse else "cuda"
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.validations: dict[str, Path] = {}

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.t0)

    def run(self, stage: str, cmd: list[str], share: float, stdout: Path | None = None,
            env: dict | None = None) -> bool:
        """One stage as a subprocess, its output in results/<stage>.log (stdout in `stdout` when given),
        under min(share, budget left)."""
        limit = min(share, self.left() - 20)  # 20 s kept for the last compare and pack
        log = self.results / f"{stage}.log"
        if limit < 5:
            self._done(stage, "skipped: out of time", 0.0)
            return False
        t = time.monotonic()
        print(f"+ [{stage}] {shlex.join(cmd)}  (limit {limit:.0f} s)", flush=True)
        with log.open("w") as fh, (stdout.open("w") if stdout else fh) as so:
            try:
                rc = subprocess.run(cmd, stdout=so, stderr=fh, env=dict(self.env, **(env or {})),
                                    timeout=limit).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        outcome = "ok" if rc == 0 else f"FAILED ({rc}): see {log.name}"
        self._done(stage, outcome, time.monotonic() - t)
        return rc == 0

    def _done(self, stage: str, outcome: str, seconds: float) -> None:
        self.stages.append((stage, outcome, seconds))
        print(f"=== [{stage}] {outcome} ({seconds:.0f} s; {time.monotonic() - self.t0:.0f} s in)", flush=True)
        self.pack()

    def summary(self) -> str:
        a = self.args
        head = [f"# GPU kit {'rehearsal (CPU, tiny shapes)' if a.rehearse else 'run'} on {a.hardware}", "",
                "| stage | outcome | seconds |", "| --- | --- | ---: |"]
        head += [f"| {s} | {o} | {t:.0f} |" for s, o, t in self.stages]
        body = compare.table(self.results / "kernels.jsonl", self.validations, a.hardware, f"{a.hardware}-vllm")
        return "\n".join(head) + "\n\n" + body

    def pack(self) -> None:
        try:
            archive.pack(self.results, self.out, self.summary())
        except Exception as exc:  # noqa: BLE001 - a failed pack is reported; the next stage repacks
            print(f"gpukit: packing failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def main(self) -> int:
        py, a = sys.executable, self.args
        self.info()
        kern = [py, "-m", "rackplan.executor.gpukit.kernels", "--out", str(self.results / "kernels.jsonl"),
                "--device", self.device, "--hardware", a.hardware] + (["--tiny"] if a.rehearse else [])
        # the rehearsal runs the Triton kernels in the interpreter; its replays take the torch paths (the
        # interpreter would make their steps minutes long; the kernel stage already checks the kernels there)
        ok = self.run("kernels", kern, STAGE_S["kernels"], env={"TRITON_INTERPRET": "1"} if a.rehearse else None)
        t = time.monotonic()
        replays, refused = plans.plan_replays(a.hardware, self.results / "plans", self.device, a.steps, a.rehearse)
        (self.results / "plans.txt").write_text("".join(f"{r.name}: {r.note}\n  rackplan execute "
                                                        f"{shlex.join(r.args)}\n" for r in replays)
                                                + "".join(f"refused {line}\n" for line in refused))
        self._done("plans", f"ok: {', '.join(r.name for r in replays)} ({len(refused)} smaller DEP sizes refused)",
                   time.monotonic() - t)
        vdir = self.results / "validate"
        vdir.mkdir()
        for r in replays:
            if not self.run(f"replay-{r.name}", [py, "-m", "rackplan.cli", "execute", *r.args], STAGE_S["replay"]):
                ok = False
                continue
            dest = vdir / f"{r.name}.json"
            cmd = [py, "-m", "rackplan.cli", "validate", "--plan", str(r.plan), "--measurements",
                   r.args[r.args.index("--out") + 1], "--profile", f"{a.hardware}-vllm", "--json"]
            if self.run(f"validate-{r.name}", cmd, STAGE_S["validate"], stdout=dest):
                self.validations[r.name] = dest
            else:
                ok = False
        self._done("compare", "ok", 0.0)
        (self.results / "summary.md").write_text(self.summary())
        self.pack()
        print(f"gpukit: done in {time.monotonic() - self.t0:.0f} s -> {self.out}", flush=True)
        return 0 if ok and len(self.validations) == len(replays) else 1

    def info(self) -> None:
        import torch
        lines = [f"python {sys.version.split()[0]}", f"torch {torch.__version__} (cuda {torch.version.cuda})"]
        try:
            import triton
            lines.append(f"triton {triton.__version__}")
        except ImportError:
            lines.append("triton: not installed")
        if self.device == "cuda":
            p = torch.cuda.get_device_properties(0)
            lines.append(f"device {p.name}, {p.total_memory / 1e9:.1f} GB, {p.multi_processor_count} SMs, "
                         f"shared memory per block (opt-in) {getattr(p, 'shared_memory_per_block_optin', '?')} B")
            smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
            lines.append(smi.stdout)
        else:
            lines.append(f"rehearsal on CPU ({os.cpu_count()} cores), hardware priced as {self.args.hardware}")
        (self.results / "env.txt").write_text("\n".join(lines) + "\n")
        print("\n".join(lines[:4]), flush=True)
        self._done("env", "ok", 0.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rackplan.executor.gpukit", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the returned files (the device call's $OUT)")
    ap.add_argument("--hardware", choices=sorted(GPUS.values()),
                    help="the GPU's hardware spec (default: from the device's name; rehearsal: h100-sxm)")
    ap.add_argument("--rehearse", action="store_true", help="CPU rehearsal: every stage, tiny shapes")
    ap.add_argument("--budget", type=positive_float, default=540.0, help="seconds for all stages (default 540)")
    ap.add_argument("--steps", type=positive_int, help="timed steps per replay instance (default 5; rehearsal 2)")
    args = ap.parse_args(argv)
    args.steps = args.steps or (2 if args.rehearse else 5)
    if not args.rehearse:
        import torch
        if not torch.cuda.is_available():
            print("gpukit: no CUDA device here (torch sees none): nothing run; --rehearse runs the CPU rehearsal",
                  file=sys.stderr)
            return 3
        found = detect_hardware()
        if args.hardware is None and found is None:
            print(f"gpukit: device {torch.cuda.get_device_name(0)!r} is none of {', '.join(GPUS)}: pass --hardware",
                  file=sys.stderr)
            return 2
        args.hardware = args.hardware or found
    args.hardware = args.hardware or "h100-sxm"
    return Kit(args).main()


if __name__ == "__main__":
    raise SystemExit(main())
