"""Issue 36, causes 3 and 8: outputs that cannot be written, and outputs behind a symbolic link.

A full and a read-only file system are real tmpfs mounts (root only; elsewhere these tests are
skipped with the reason): every writing command refuses them before any work, in one line naming
the folder and the errno's meaning, exit 2; `execute` before any rank starts. A disk that fills
while the set is written is one line naming the user's path, never a temporary's. An output given
as a symbolic link is written through it: the link stays, its target is replaced.
"""
import errno
import os
import subprocess
from pathlib import Path

import pytest
from conftest import main_in

from rackplan import outputs

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
A2A = str(ROOT / "calibration/data/deepep_h800_a2a.csv")
PLAN = ["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
        "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "1", "--quiet", "--sim-requests", "8"]
COMMANDS = {  # command -> argv writing to {out}: a file (plan, calibrate) or a folder (deploy, execute)
    "plan": PLAN + ["--out", "{out}/plan.yaml"],
    "plan --report": PLAN + ["--out", "plan.yaml", "--report", "{out}/report"],
    "deploy": ["deploy", "--plan", "v41-flash-gb300-nvl72", "--out", "{out}/launch"],
    "calibrate": ["calibrate", "--a2a-table", A2A, "--hardware", "h800", "--out", "{out}/fit.yaml"],
    "calibrate --microbench": ["calibrate", "--microbench", "--out-hardware", "{out}/hw.yaml"],
    "execute": ["execute", "--plan", "tiny-cpu", "--steps", "1", "--warmup", "0", "--out", "{out}/run"],
}


def _mount(folder: Path, size: str, *opts: str) -> None:
    """A tmpfs of `size` at `folder`, or skip: only root may mount (CI and the dev container run as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; these cases run where the tests run as root")
    folder.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}",) + opts), "tmpfs", str(folder)],
                         capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"mount -t tmpfs refused here (a container without CAP_SYS_ADMIN?): {res.stderr.strip()}")


def _fill(folder: Path) -> None:
    with open(folder / "fill", "wb", buffering=0) as fh:  # unbuffered: nothing left to flush at close
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.fixture
def mounted(tmp_path):
    """Mounts made by the test, unmounted afterwards (lazily: a failed test may hold a file open)."""
    made = []

    def mount(name: str, size: str, *opts: str) -> Path:
        _mount(tmp_path / name, size, *opts)
        made.append(tmp_path / name)
        return tmp_path / name

    yield mount
    for m in made:
        subprocess.run(["umount", "-l", str(m)], check=False)


@pytest.fixture(params=["full", "read-only"])
def storage(request, mounted):
    """(folder, the errno's meaning the refusal must name) of a full or a read-only file system."""
    if request.param == "full":
        folder = mounted("full", "256k")
        _fill(folder)
        return folder, os.strerror(errno.ENOSPC)
    return mounted("ro", "256k", "ro"), os.strerror(errno.EROFS)


def _in(folder: Path, argv: list[str], capsys) -> tuple[int, str]:
    code = main_in(folder, argv)
    return code, capsys.readouterr().err.strip()


def _entries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_unwritable_output_is_refused_before_any_work(tmp_path, storage, command, capsys, monkeypatch):
    folder, meaning = storage
    import rackplan.executor.launch as launch

    def no_rank(*_a, **_k):
        raise AssertionError("a rank started although the output cannot be written")

    monkeypatch.setattr(launch, "launch", no_rank)  # a tripwire: execute must refuse before its ranks start
    monkeypatch.setenv("RACKPLAN_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    before = _entries(folder)
    code, err = _in(work, [a.replace("{out}", str(folder)) for a in COMMANDS[command]], capsys)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("rackplan: error:"), err
    assert str(folder) in err and meaning in err, err
    assert _entries(folder) == before and _entries(work) == []


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_disk_filling_while_written_names_the_user_s_path(mounted, kind):
    folder = mounted("small", "2m")
    with pytest.raises(outputs.WriteError) as info:
        with outputs.Outputs() as out:
            if kind == "file":
                out.file(folder / "big.bin").write_bytes(b"\0" * (3 << 20))
            else:
                (out.folder(folder / "run") / "big.bin").write_bytes(b"\0" * (3 << 20))
    shown = folder / "big.bin" if kind == "file" else folder / "run"  # a write to an open file names no file
    assert str(info.value) == f"{shown}: cannot write ({os.strerror(errno.ENOSPC)}); nothing written"
    assert info.value.exit_code == 2 and _entries(folder) == []  # no temporary left


def test_dangling_link_into_a_read_only_file_system_is_refused(tmp_path, mounted, capsys):
    ro = mounted("ro", "256k", "ro")
    (tmp_path / "plan.yaml").symlink_to(ro / "plan.yaml")
    code, err = _in(tmp_path, PLAN + ["--out", "plan.yaml"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and os.strerror(errno.EROFS) in err, err
    assert (tmp_path / "plan.yaml").is_symlink()


LINKED = {  # command -> (argv writing to the link `out`, a file the target holds afterwards)
    "plan": (PLAN + ["--out", "out"], "."),
    "deploy": (["deploy", "--plan", "v41-flash-gb300-nvl72", "--out", "out"], "router.sh"),
    "calibrate": (["calibrate", "--a2a-table", A2A, "--hardware", "h800", "--out", "out"], "."),
    "execute": (["execute", "--plan", "tiny-cpu", "--steps", "1", "--warmup", "0", "--out", "out", "--force"],
                "measurements.jsonl"),
}


@pytest.mark.parametrize("dangling", [False, True], ids=["to an earlier output", "dangling"])
@pytest.mark.parametrize("command", sorted(LINKED))
def test_output_behind_a_link_updates_its_target(tmp_path, command, dangling, capsys, monkeypatch):
    monkeypatch.setenv("RACKPLAN_CACHE_DIR", str(tmp_path / "cache"))
    argv, inside = LINKED[command]
    shared = tmp_path / "shared" / "current"
    if not dangling:  # an earlier output at the target: a stale file (plan, calibrate) or folder (deploy, execute)
        if inside == ".":
            shared.parent.mkdir()
            shared.write_text("stale\n")
        else:
            if command == "deploy":  # an earlier launch folder (rackplan's marker in it)
                assert _in(tmp_path, argv[:-1] + [str(shared)], capsys)[0] == 0
            shared.mkdir(parents=True, exist_ok=True)
            (shared / "stale.txt").write_text("stale\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "out").symlink_to(shared)
    code, err = _in(work, argv, capsys)
    assert code == 0, err
    assert (work / "out").is_symlink() and os.readlink(work / "out") == str(shared)  # the link is kept
    assert (shared / inside).exists() and "stale" not in (shared / inside).read_text(errors="replace")[:5]
    assert not (shared / "stale.txt").exists()
    assert [p.name for p in work.iterdir()] == ["out"] and not [p for p in shared.parent.iterdir()
                                                               if p.name.startswith(".")]


TOO_LONG = "x" * 300 + ".yaml"  # over NAME_MAX (255) of every Linux file system


@pytest.mark.parametrize("argv", [["simulate", "--plan", TOO_LONG], PLAN + ["--out", TOO_LONG],
                                  ["deploy", "--plan", "v41-flash-gb300-nvl72", "--out", TOO_LONG]],
                         ids=["input", "plan --out", "deploy --out"])
def test_os_error_about_a_named_path_is_one_line(tmp_path, argv, capsys):
    code, err = _in(tmp_path, argv, capsys)
    assert code == 2 and err == f"rackplan: error: {TOO_LONG}: {os.strerror(errno.ENAMETOOLONG)}", err
    assert _entries(tmp_path) == []
