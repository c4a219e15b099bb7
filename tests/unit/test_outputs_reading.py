"""rackplan/specs/reading.py and rackplan/outputs.py: the one reading layer and the atomic output sets."""
import pytest

from rackplan.outputs import Outputs, prepare_folder, write_spec
from rackplan.specs import SpecError, load_profile
from rackplan.specs.reading import number, parse_json, parse_yaml, read_csv, read_jsonl

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text,needle", [
    ("a: 1\na: 2\n", "'a' repeated at line 2"),
    ("x: " + "[" * 100 + "]" * 100, "nesting"),
    ("a: [1,\n", "line"),
])
def test_yaml_refusals(text, needle):
    with pytest.raises(SpecError, match=needle):
        parse_yaml(text, "f.yaml")


def test_yaml_merge_keys_are_not_duplicates():
    assert parse_yaml("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n")["other"] == {"x": 1, "y": 2}


@pytest.mark.parametrize("text,needle", [
    ('{"a": 1, "a": 2}', "'a' repeated"),
    ('{"a": {"b": [1, NaN]}}', "field 'a.b\\[1\\]'"),
    ('{"a": 1e999}', "field 'a'"),
    ('{"a": Infinity, "b": [', "well-formed JSON"),
    ("[" * 5000 + "]" * 5000, "nesting"),
])
def test_json_refusals(text, needle):
    with pytest.raises(SpecError, match=needle):
        parse_json(text, "f.json")


def test_json_keeps_non_finite_where_allowed():
    assert parse_json('{"request_rate": Infinity}', finite=False)["request_rate"] == float("inf")


def test_jsonl_and_csv_name_the_line(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b'{"x": 1}\n\n[1]\n')
    with pytest.raises(SpecError, match="a.jsonl:3"):
        list(read_jsonl(tmp_path / "a.jsonl"))
    (tmp_path / "b.csv").write_bytes(b"# source\nx,y\n1,2\n")
    assert list(read_csv(tmp_path / "b.csv", comments=True)) == [(f"{tmp_path / 'b.csv'}:2", ["x", "y"]),
                                                                  (f"{tmp_path / 'b.csv'}:3", ["1", "2"])]
    (tmp_path / "b.csv").write_bytes(b"# source\nx,y\n1,2\n\xff\xfe,3\n")
    with pytest.raises(SpecError, match="b.csv:4: field '.encoding.': expected UTF-8"):
        list(read_csv(tmp_path / "b.csv", comments=True))


@pytest.mark.parametrize("value,kw,ok", [
    ("3", {"lo": 1, "integer": True}, 3), (2.5, {"lo": 0, "lo_open": True}, 2.5), ("nan", {}, None),
    ("1e999", {}, None), (True, {}, None), (0, {"lo": 0, "lo_open": True}, None), (7, {"hi": 5}, None),
    (2.5, {"integer": True}, None), ("many", {}, None),
])
def test_number_ranges(value, kw, ok):
    if ok is None:
        with pytest.raises(SpecError, match="field 'f'"):
            number(value, "w", "f", **kw)
    else:
        assert number(value, "w", "f", **kw) == ok


def test_output_set_is_all_or_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with Outputs() as out:
            (out.folder(tmp_path / "rep") / "a.txt").write_text("a")
            out.file(tmp_path / "p.yaml").write_text("p")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []  # nothing, not even a temporary
    with Outputs() as out:
        (out.folder(tmp_path / "rep") / "a.txt").write_text("a")
        out.file(tmp_path / "p.yaml").write_text("p")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml", "rep"]


def test_folder_with_other_files_keeps_them_and_earlier_runs_need_force(tmp_path):
    (tmp_path / "plan.yaml").write_text("mine")
    with Outputs() as out:
        (out.folder(tmp_path) / "measurements.jsonl").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measurements.jsonl", "plan.yaml"]
    with pytest.raises(SpecError, match="--force"):
        prepare_folder(tmp_path, "--out", owned=("measurements.jsonl",))
    prepare_folder(tmp_path, "--out", force=True, owned=("measurements.jsonl",))
    with Outputs() as out:
        (out.folder(tmp_path, replace=True) / "measurements.jsonl").write_text("newer")
    assert [p.name for p in tmp_path.iterdir()] == ["measurements.jsonl"]  # --force replaced the folder


def test_a_profile_is_loaded_back_before_it_lands(tmp_path):
    import dataclasses

    prof = load_profile("datasheet")
    write_spec(prof, tmp_path / "ok.yaml", "profiles")
    assert load_profile(tmp_path / "ok.yaml") == prof
    bad = dataclasses.replace(prof, a2a=prof.a2a[:1])  # misses kernel x link pairs: would not load
    with pytest.raises(SpecError, match="does not load back"):
        write_spec(bad, tmp_path / "bad.yaml", "profiles")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.yaml"]


def test_terminated_survives_being_rebuilt_from_its_args():
    from rackplan.interrupts import Terminated

    exc = Terminated(15)
    again = type(exc)(*exc.args)  # SimPy re-raises an exception from inside a process this way
    assert isinstance(again, KeyboardInterrupt) and again.exit_code == 143 and str(again) == "SIGTERM"
