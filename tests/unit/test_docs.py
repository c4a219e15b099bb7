"""The README a newcomer reads in ten minutes, and the docs it points to: at most 150 lines, its two
set-up-and-go commands the ones CI runs (.ci/run runs the README's test command in a fresh clone), and
every relative link of README.md and docs/*.md naming a file and heading that exist."""
import re
from pathlib import Path

import pytest
import yaml
from bench_scripts import script

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _setup_commands() -> list[str]:
    """The command lines of the README's '## Set up and go' code block."""
    block = README.split("## Set up and go", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_the_readme_fits_on_a_newcomers_screen():
    assert len(README.splitlines()) <= 150


def test_the_readme_test_command_is_what_ci_runs():
    install, test = _setup_commands()[0].rsplit(" && ", 1), _setup_commands()[1].rsplit(" && ", 1)
    assert install[1] == ".venv/bin/rackplan"  # the main job on the embedded defaults
    assert install[0] == test[0]  # the same install
    assert test[1] == ".venv/bin/python -m pytest tests"
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m venv")]
    assert ci == [_setup_commands()[1]]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_heading_that_exist(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked here (no network)
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in _anchors(dest), f"{page.name}: {target}"


def _current():
    """benchmarks/current.py as a module (benchmarks/ is no package)."""
    return script("current.py")


def test_current_md_is_what_headline_yaml_renders_and_each_figure_is_in_its_results_section():
    cur = _current()
    entries = cur.load(cur.HEADLINE.read_text(), cur.log_sections())
    assert cur.CURRENT.read_text() == cur.render(entries), "run python benchmarks/current.py"
    assert len(entries) == cur.CURRENT.read_text().count("\n| ") - 1  # one row each, below the header row


@pytest.mark.parametrize("edit, field", [
    (lambda e: e.update(evidence=["a figure nobody logged"]), "evidence not in its section"),
    (lambda e: e.update(section="2099-01-01 no such section"), "section"),
    (lambda e: e.pop("command"), "field command missing"),
])
def test_a_headline_entry_that_does_not_hold_is_one_line_naming_it(edit, field):
    cur = _current()
    entries = yaml.safe_load(cur.HEADLINE.read_text())
    edit(entries[0])
    with pytest.raises(cur.HeadlineError, match=f"entry {entries[0]['id']}: {field}"):
        cur.load(yaml.safe_dump(entries), cur.log_sections())


def test_the_investigations_index_names_every_script_and_a_results_section_that_exists():
    cur = _current()
    index = (ROOT / "benchmarks" / "investigations" / "README.md").read_text()
    rows = [line.split(" | ") for line in index.splitlines() if line.startswith("| `")]
    listed = [row[0].removeprefix("| `").removesuffix("`") for row in rows]
    assert sorted(listed) == sorted(p.name for p in (ROOT / "benchmarks" / "investigations").glob("*.py"))
    secs = cur.log_sections()
    for row in rows:
        assert row[-1].removesuffix(" |") in secs, f"{row[0]}: no results section {row[-1]!r}"


def test_the_results_log_index_is_current_and_each_archived_month_holds_only_its_own_sections():
    cur = _current()
    results = cur.RESULTS.read_text()
    assert cur.with_index(results) == results, "run python benchmarks/current.py"
    for path in sorted(cur.ARCHIVE.glob("*.md")):
        titles = list(cur.sections(path.read_text()))
        assert titles and all(t.startswith(path.stem + "-") for t in titles), path.name
        assert not set(titles) & set(cur.sections(results)), f"{path.name}: a section also in RESULTS.md"


def test_a_headline_entry_may_cite_an_archived_section():
    cur = _current()
    title = "2026-11-30: imbalance tables sampled lazily per grid point"
    assert title not in cur.sections(cur.RESULTS.read_text())
    entry = yaml.safe_load(cur.HEADLINE.read_text())[0]
    entry.update(section=title, evidence=[cur.log_sections()[title].strip().splitlines()[0]])
    assert cur.load(yaml.safe_dump([entry]), cur.log_sections())[0]["section"] == title


def test_archive_moves_a_months_sections_verbatim_and_indexes_them(tmp_path, monkeypatch):
    cur = _current()
    monkeypatch.setattr(cur, "RESULTS", tmp_path / "RESULTS.md")
    monkeypatch.setattr(cur, "ARCHIVE", tmp_path / "results")
    a, b, c = "## 2026-11-30: a\n\nA.\n\n", "## 2026-12-01: b\n\nB.\n\n", "## 2026-11-30 \u2014 c\n\nC.\n"
    cur.RESULTS.write_text("# Results log\n\n## Current figures\n\nF.\n\n" + a + b + c)
    assert cur.archive("2026-11") == 2
    assert (tmp_path / "results" / "2026-11.md").read_text().endswith(a + c)
    assert cur.RESULTS.read_text() == "# Results log\n\n## Current figures\n\nF.\n\n" + cur.index() + b
    assert cur.index().endswith("- 2026-11: [results/2026-11.md](results/2026-11.md)\n  - 2026-11-30: a\n"
                                "  - 2026-11-30 \u2014 c\n\n")
    assert cur.archive("2026-11") == 0 and set(cur.log_sections()) == {"Current figures", cur.INDEX,
                                                                        "2026-12-01: b", "2026-11-30: a",
                                                                        "2026-11-30 \u2014 c"}
