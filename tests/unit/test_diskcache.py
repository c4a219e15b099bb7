"""rackplan/diskcache.py and its start-up users: parsed YAML texts and the package's code version,
read back from the cache folder exactly as first computed."""
import hashlib
import marshal
from pathlib import Path

import pytest

import rackplan
import rackplan.configs
import rackplan.sim
from rackplan import diskcache
from rackplan.specs import SpecError, reading
from rackplan.specs.reading import PARSE_CACHE_MIN, parse_yaml

pytestmark = pytest.mark.unit

# a text past the cache threshold: a mapping of rows, a float only the module's float rule reads, a
# YAML merge, a nested list, a NaN
LONG = ("rows:\n" + "".join(f"  - {{name: r{i}, x: {i}e-3, ok: true, pair: [{i}, {i}.5]}}\n" for i in range(200))
        + "base: &b {k: 1}\nmerged:\n  <<: *b\n  j: 2\nnan: .nan\n")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(diskcache.CACHE_ENV, str(tmp_path))
    return tmp_path


def _entries(folder: Path, kind: str) -> list[Path]:
    return sorted((folder / kind).glob("*")) if (folder / kind).is_dir() else []


def test_a_parsed_text_is_read_back_as_parsed(cache):
    assert len(LONG) >= PARSE_CACHE_MIN
    first = parse_yaml(LONG, "f.yaml")
    (path,) = _entries(cache, "yaml")
    assert marshal.loads(path.read_bytes()).keys() == first.keys()
    second = parse_yaml(LONG, "f.yaml")
    assert repr(second) == repr(first)  # (repr: the NaN compares unequal to itself)
    assert second["rows"][3] == {"name": "r3", "x": 0.003, "ok": True, "pair": [3, 3.5]}
    assert second["merged"] == {"k": 1, "j": 2}
    # the file is what is read: a different value planted there comes back (so the hit path is the one tested)
    path.write_bytes(marshal.dumps({"planted": 1}))
    assert parse_yaml(LONG, "f.yaml") == {"planted": 1}
    # each loader has its own entry
    parse_yaml(LONG, "f.yaml", shipped=True)
    assert len(_entries(cache, "yaml")) == 2


def test_a_corrupt_entry_is_parsed_again_and_replaced(cache):
    first = parse_yaml(LONG)
    (path,) = _entries(cache, "yaml")
    path.write_bytes(b"\x00not marshal")
    assert repr(parse_yaml(LONG)) == repr(first)
    assert repr(marshal.loads(path.read_bytes())) == repr(first)


def test_refusals_and_short_texts_are_never_cached(cache):
    bad = LONG + "rows: 1\n"  # a duplicate key
    for _ in range(2):
        with pytest.raises(SpecError, match="'rows' repeated"):
            parse_yaml(bad, "f.yaml")
    assert parse_yaml("a: 1\n") == {"a": 1}
    assert _entries(cache, "yaml") == []
    # a value marshal cannot write (a YAML timestamp) is parsed each time, not cached
    dated = LONG + "when: 2026-12-07\n"
    assert str(parse_yaml(dated)["when"]) == "2026-12-07"
    assert _entries(cache, "yaml") == []


def test_without_a_cache_folder_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv(diskcache.CACHE_ENV, "off")
    assert reading._parsed_entry(LONG, False) is None
    assert repr(parse_yaml(LONG)) == repr(parse_yaml(LONG))


def _full_hash() -> str:
    """The code version by its definition: every .py and .yaml file of the three packages, read and hashed."""
    h = hashlib.sha256()
    for pkg in (rackplan, rackplan.sim, rackplan.configs):
        root = Path(pkg.__file__).parent
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".yaml") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def test_code_version_is_the_hash_of_the_files_and_is_remembered_by_their_stamps(cache, monkeypatch):
    assert diskcache.code_version() == _full_hash()
    (path,) = _entries(cache, "code-version")
    assert path.read_text() == _full_hash()
    path.write_text("f" * 64)  # remembered: the files are not read again while their stamps are the same
    assert diskcache.code_version() == "f" * 64
    monkeypatch.setenv(diskcache.CACHE_ENV, "off")
    assert diskcache.code_version() == _full_hash()


def _tiny_request(gpus=4):
    from rackplan.sim.search import planner
    from rackplan.specs import SLO, load_hardware, load_model, load_profile, load_workload

    return planner.Request(load_model("tiny-moe"), load_hardware("cpu-local"), load_profile("datasheet"),
                           load_workload("tiny-chat"), gpus, SLO(1.0, 0.2), "tiny-moe", "cpu-local", "tiny-chat",
                           simulate=False, workers=1)


def test_the_planner_pricing_is_read_back_as_priced_and_keyed_by_its_inputs(cache, monkeypatch):
    import pickle

    from rackplan.sim.search import planner

    def units(priced):  # each priced unit's pickle: every figure, bit for bit
        return [(k, pickle.dumps(u)) for k, u in priced]

    first = planner.price_all(_tiny_request())
    assert any(u is not None for _, u in first)
    (path,) = _entries(cache, "priced")
    assert [pickle.dumps(u) for u in pickle.loads(path.read_bytes())] == [p for _, p in units(first)]
    assert units(planner.price_all(_tiny_request())) == units(first)
    # the file is what is read: a value planted there comes back (so the hit path is the one tested)
    path.write_bytes(pickle.dumps(["planted"] * len(first)))
    assert {u for _, u in planner.price_all(_tiny_request())} == {"planted"}
    # another input (the GPU budget changes the shapes) is another entry; a corrupt one is priced again
    planner.price_all(_tiny_request(gpus=2))
    assert len(_entries(cache, "priced")) == 2
    path.write_bytes(b"\x00not a pickle")
    assert units(planner.price_all(_tiny_request())) == units(first)
    # another code version is another entry
    monkeypatch.setattr(diskcache, "code_version", lambda: "0" * 64)
    planner.price_all(_tiny_request())
    assert len(_entries(cache, "priced")) == 3
    # no cache folder: priced, nothing written
    monkeypatch.setenv(diskcache.CACHE_ENV, "off")
    assert units(planner.price_all(_tiny_request(gpus=3)))
    monkeypatch.setenv(diskcache.CACHE_ENV, str(cache))
    assert len(_entries(cache, "priced")) == 3
