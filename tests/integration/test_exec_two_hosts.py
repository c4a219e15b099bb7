"""torchrun across two "hosts": two torchrun invocations with --nnodes 2 on 127.0.0.1 (one rank each, gloo,
tiny-moe). Serving is sized by the job's world (2 ranks), not this host's devices, and a world that does not
match the plan is refused before any rank starts."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(tmp: Path, args: list[str], nnodes: int = 2) -> list[subprocess.CompletedProcess]:
    port = _port()
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    for node in range(nnodes):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--node-rank", str(node),
               "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
               "-m", "rackplan.cli", "execute", *args, "--out", str(tmp / f"node{node}")]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp,
                                      env=env))
    out = []
    for p in procs:
        so, se = p.communicate(timeout=600)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "measurements.jsonl").read_text().splitlines()]


def test_benchmark_and_serving_across_two_nodes(tmp_path):
    bench = _two_nodes(tmp_path / "bench", ["--plan", "tiny-cpu", "--device", "cpu", "--steps", "2"])
    assert all(r.returncode == 0 for r in bench), [r.stderr[-2000:] for r in bench]
    recs = _records(tmp_path / "bench" / "node0")
    assert {r["rank"] for r in recs} == {0, 1} and {r["world_size"] for r in recs} == {2}
    assert not (tmp_path / "bench" / "node1").exists()  # rank 0 writes the run
    serve = _two_nodes(tmp_path / "serve", ["--plan", "tiny-cpu", "--device", "cpu", "--workload", "tiny-chat",
                                            "--requests", "4"])
    assert all(r.returncode == 0 for r in serve), [r.stderr[-2000:] for r in serve]
    reqs = [r for r in _records(tmp_path / "serve" / "node0") if r["op"] == "request"]
    assert len(reqs) == 4


def test_serving_world_that_misses_the_plan_is_refused(tmp_path):
    """tiny-cpu serves on 2 ranks; a 3-host job is refused on every host before its rank starts, naming
    WORLD_SIZE."""
    res = _two_nodes(tmp_path, ["--plan", "tiny-cpu", "--device", "cpu", "--workload", "tiny-chat",
                                "--requests", "2"], nnodes=3)
    assert all(r.returncode != 0 for r in res)
    assert all("WORLD_SIZE" in r.stderr for r in res), [r.stderr[-1500:] for r in res]
