"""report.html in a real browser: headless Chromium loads it from disk (no network), logs no console error,
and its charts drew (the screenshot has coloured marks in as many separate bands as the page has charts).

Needs a `chromium` (or `chromium-browser` / `google-chrome`) on PATH: `apt-get install -y chromium`;
skipped with that reason where there is none. Screenshots are kept as test artefacts in
out/test-artifacts/ (or $RACKPLAN_TEST_ARTIFACTS): report-<name>.png, and the DOM Chromium built,
report-<name>.dom.html.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rackplan.cli import main

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
ARTIFACTS = Path(os.environ.get("RACKPLAN_TEST_ARTIFACTS", ROOT / "out" / "test-artifacts"))
WIDTH = 1100
# console lines Chromium logs at error level for the page (a script error, a failed load)
CONSOLE_ERROR = re.compile(r"Uncaught|CONSOLE\(\d+\).*(error|Error)|ERR_[A-Z_]+|Failed to load")


def _chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--enable-logging=stderr", "--v=0", "--hide-scrollbars", f"--user-data-dir={cwd / 'profile'}"]
    return subprocess.run([BROWSER, *flags, *args], capture_output=True, text=True, cwd=cwd)


def _coloured_bands(png: Path) -> int:
    """Separate horizontal bands of the screenshot holding coloured (not grey) pixels: the charts' marks.
    Text and frames are black or grey; a band ends at 10 rows without colour."""
    import matplotlib.image as mpimg

    img = mpimg.imread(png)[..., :3]  # [rows, cols, rgb] in 0..1
    colour = (img.max(axis=2) - img.min(axis=2)) > 0.25  # saturated pixels
    rows = colour.sum(axis=1) >= 3  # [rows]
    bands, gap, inside = 0, 0, False
    for r in rows:
        if r and not inside:
            bands, inside = bands + 1, True
        gap = 0 if r else gap + 1
        if inside and gap >= 10:
            inside = False
    return bands


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    assert main(["simulate", "--requests", "2000", "--report", str(d / "seed.html")]) == 0  # the seed plan
    assert main(["plan", "--model", "tiny-moe", "--hardware", "cpu-local", "--gpus", "4", "--workload", "tiny-chat",
                 "--ttft-p90", "1s", "--tpot-p90", "200ms", "--workers", "1", "--quiet", "--out", str(d / "p.yaml"),
                 "--report", str(d / "plan")]) == 0
    assert main(["whatif", "--plan", "tiny-cpu", "--set", "cpu.overhead_scale=0.5,1", "--num-requests", "200",
                 "--workers", "1", "--out", str(d / "whatif")]) == 0
    return {"seed": d / "seed.html", "plan": d / "plan" / "report.html", "whatif": d / "whatif" / "report.html"}


@pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH (apt-get install -y chromium): report.html is "
                    "checked in a browser only where one is installed")
@pytest.mark.parametrize("name,charts", [("seed", 4), ("plan", 2), ("whatif", 2)])
def test_report_renders_in_chromium(reports, tmp_path, name, charts):
    page = reports[name]
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    dom = _chromium("--dump-dom", page.as_uri(), cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') >= charts
    assert "<title>" in dom.stdout  # hover labels
    shot = tmp_path / "shot.png"
    run = _chromium(f"--screenshot={shot}", f"--window-size={WIDTH},{400 * (charts + 2)}", page.as_uri(), cwd=tmp_path)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    errors = [line for line in (dom.stderr + run.stderr).splitlines() if CONSOLE_ERROR.search(line)]
    assert not errors, errors
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / f"report-{name}.png")
    (ARTIFACTS / f"report-{name}.dom.html").write_text(dom.stdout)
    assert _coloured_bands(shot) >= charts  # every chart drew its marks
