"""benchmarks/CURRENT.md: every headline figure with its command, commit and date, from one small file.

The figures are not re-measured here: each was measured by its command and logged in a dated section
of the results log: benchmarks/RESULTS.md holds the current month's sections, benchmarks/results/YYYY-MM.md
each earlier month's, moved there verbatim (`--archive`), and RESULTS.md's head indexes them.
benchmarks/headline.yaml names, per figure, that section and text copied verbatim from it (`evidence`);
this script checks that the evidence is in its section, wherever the section now is, and renders the table.
The commit and date of a figure are those of the commit that added its evidence to RESULTS.md, where every
section is first logged (`--stamp` asks git for entries that lack them).

    python benchmarks/current.py            # write benchmarks/CURRENT.md and RESULTS.md's index
    python benchmarks/current.py --check    # exit 1 when either is not what the files render
    python benchmarks/current.py --stamp    # fill missing commit / date from git, then write
    python benchmarks/current.py --archive 2026-11   # move a month's sections to results/2026-11.md
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
HEADLINE, RESULTS, CURRENT = HERE / "headline.yaml", HERE / "RESULTS.md", HERE / "CURRENT.md"
ARCHIVE = HERE / "results"  # earlier months' sections, one file a month: YYYY-MM.md
INDEX = "Index by month"  # the heading of RESULTS.md's index of the results log
MONTH = re.compile(r"^## (\d{4}-\d{2})-\d{2}\b")  # a dated section's heading -> its month
FIELDS = ("id", "what", "figure", "source", "command", "section", "evidence")  # required in every entry
STAMP = ("commit", "date")  # filled by --stamp


class HeadlineError(Exception):
    """An entry of headline.yaml that does not hold: one line naming the entry and the field."""


def sections(results: str) -> dict[str, str]:
    """A results file's `## ` sections: heading (without the hashes) -> its text up to the next `## `."""
    parts = re.split(r"^## (.+)$", results, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def log_sections() -> dict[str, str]:
    """Every section of the results log: RESULTS.md's and each archived month's (benchmarks/results/)."""
    out = sections(RESULTS.read_text())
    for path in sorted(ARCHIVE.glob("*.md")):
        out.update(sections(path.read_text()))
    return out


def chunks(results: str) -> tuple[str, list[str]]:
    """(the text before the first `## ` heading, each section verbatim from its heading line on)."""
    parts = re.split(r"^(?=## )", results, flags=re.M)
    return parts[0], parts[1:]


def index() -> str:
    """RESULTS.md's index section: each archived month's file with its section titles, in log order."""
    lines = [f"## {INDEX}", "",
             "The current month's sections are below, in the order they were logged; each earlier month's are in",
             "`benchmarks/results/YYYY-MM.md`, moved there verbatim once the month is over",
             "(`python benchmarks/current.py --archive YYYY-MM`). Headline figures (`headline.yaml`) may cite a",
             "section of any of them.", "",
             "- the current month: this file, the sections below"]
    for path in sorted(ARCHIVE.glob("*.md"), reverse=True):
        lines.append(f"- {path.stem}: [results/{path.name}](results/{path.name})")
        lines += [f"  - {title}" for title in sections(path.read_text())]
    return "\n".join(lines) + "\n\n"


def with_index(results: str) -> str:
    """RESULTS.md's text with its index section rendered afresh, right after the first section (the
    current figures)."""
    head, secs = chunks(results)
    secs = [c for c in secs if not c.startswith(f"## {INDEX}\n")]
    secs.insert(min(1, len(secs)), index())
    return head + "".join(secs)


def archive(month: str) -> int:
    """Moves RESULTS.md's sections dated `month` (YYYY-MM) to the end of results/`month`.md, verbatim and in
    order, and renders the index again. Returns the number of sections moved."""
    head, secs = chunks(RESULTS.read_text())
    dated = [(m := MONTH.match(c)) is not None and m.group(1) == month for c in secs]
    if any(dated):
        ARCHIVE.mkdir(exist_ok=True)
        path = ARCHIVE / f"{month}.md"
        text = path.read_text() if path.exists() else (
            f"# Results log, {month}\n\nThe sections of benchmarks/RESULTS.md dated {month}, moved here verbatim "
            "(`python benchmarks/current.py --archive`);\nRESULTS.md's head indexes them.\n\n")
        path.write_text(text + "".join(c for c, d in zip(secs, dated) if d))
        RESULTS.write_text(with_index(head + "".join(c for c, d in zip(secs, dated) if not d)))
    return sum(dated)


def load(text: str, secs: dict[str, str], stamped: bool = True) -> list[dict]:
    """The entries of headline.yaml, each checked against the results log's sections `secs` (log_sections);
    `stamped`: commit and date required."""
    try:
        entries = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise HeadlineError(f"headline.yaml: not YAML: {' '.join(str(err).split())}") from None
    seen = set()
    if not isinstance(entries, list):
        raise HeadlineError("headline.yaml: a list of entries expected")
    for e in entries:
        name = e.get("id", "?") if isinstance(e, dict) else "?"
        for f in FIELDS + (STAMP if stamped else ()):
            if not isinstance(e, dict) or not e.get(f):
                raise HeadlineError(f"headline.yaml: entry {name}: field {f} missing")
        if name in seen:
            raise HeadlineError(f"headline.yaml: entry {name}: id given twice")
        seen.add(name)
        if e["section"] not in secs:
            raise HeadlineError(f"headline.yaml: entry {name}: section is no '## ' heading of the results log")
        for ev in e["evidence"]:
            if ev not in secs[e["section"]]:
                raise HeadlineError(f"headline.yaml: entry {name}: evidence not in its section: {ev!r}")
    return entries


def render(entries: list[dict]) -> str:
    """CURRENT.md's text."""
    rows = [f"| {e['what']} | **{e['figure']}** | {e['source']} | `{e['command']}` | {e['commit']} | {e['date']} "
            f"| {e['section']} |" for e in entries]
    return "\n".join([
        "# Current headline figures",
        "",
        "Generated by `python benchmarks/current.py` from `benchmarks/headline.yaml`; do not edit by hand.",
        "Each figure was measured by its command and logged, with its reading and caveats, in the named",
        "section of [RESULTS.md](RESULTS.md); commit and date are those of the commit that logged it.",
        "",
        "| what | figure | kind | command | commit | date | RESULTS.md section |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True).stdout


def first_commit(entry: dict) -> tuple[str, str]:
    """(short hash, date) of the oldest commit whose RESULTS.md holds the entry's evidence in its section
    (the commit that logged the figure there; the same text may sit in an older section too)."""
    rel = RESULTS.relative_to(Path(_git("rev-parse", "--show-toplevel").strip()))
    evidence = entry["evidence"][0]
    for line in _git("log", "--reverse", "--format=%h %cs", "-S", evidence, "--", str(RESULTS)).splitlines():
        commit, date = line.split()
        text = sections(_git("show", f"{commit}:{rel}")).get(entry["section"], "")
        if all(ev in text for ev in entry["evidence"]):
            return commit, date
    raise HeadlineError(f"headline.yaml: entry {entry['id']}: no commit logged its evidence in its section "
                        "(not committed yet?)")


def stamp(text: str, entries: list[dict]) -> str:
    """headline.yaml's text with `commit` and `date` added after the evidence of entries that lack them
    (a text edit, so the file's comments stay)."""
    for e in entries:
        if e.get("commit") and e.get("date"):
            continue
        commit, date = first_commit(e)
        block = re.search(rf"^- id: {re.escape(e['id'])}\n(?:  .*\n)*?  evidence: .*\n", text, flags=re.M)
        text = text[:block.end()] + f"  commit: {commit}\n  date: '{date}'\n" + text[block.end():]
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if CURRENT.md or RESULTS.md's index is out of date; write nothing")
    p.add_argument("--stamp", action="store_true", help="fill missing commit / date from git first")
    p.add_argument("--archive", metavar="YYYY-MM", help="move that month's sections of RESULTS.md to results/")
    args = p.parse_args(argv)
    if args.archive is not None:
        if not re.fullmatch(r"\d{4}-\d{2}", args.archive):
            print(f"--archive: a month YYYY-MM expected, got {args.archive!r}", file=sys.stderr)
            return 2
        print(f"moved {archive(args.archive)} sections to {ARCHIVE / (args.archive + '.md')}")
    text, secs = HEADLINE.read_text(), log_sections()
    try:
        if args.stamp:
            text = stamp(text, load(text, secs, stamped=False))
            HEADLINE.write_text(text)
        want = render(load(text, secs))
    except HeadlineError as err:
        print(err, file=sys.stderr)
        return 2
    results = RESULTS.read_text()
    indexed = with_index(results)
    if args.check:
        stale = [name for name, ok in (("CURRENT.md", CURRENT.exists() and CURRENT.read_text() == want),
                                       ("RESULTS.md's index", indexed == results)) if not ok]
        print(f"{' and '.join(stale)} out of date: run python benchmarks/current.py" if stale
              else "CURRENT.md and RESULTS.md's index are up to date")
        return 1 if stale else 0
    CURRENT.write_text(want)
    if indexed != results:
        RESULTS.write_text(indexed)
    print(f"wrote {CURRENT}" + (f" and the index of {RESULTS}" if indexed != results else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
