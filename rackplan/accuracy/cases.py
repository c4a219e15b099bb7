"""Published deployments as benchmark cases (benchmarks/cases/*.yaml), and how each is predicted.

A case file holds one source's cases: `source` (URL), `reference` (the file under
shared/reference it was transcribed from) and `cases`, each a mapping loaded into `Case` (unknown
or mistyped keys are a SpecError naming the field). A case says what was published (`published`,
`unit`, `mark`: text | chart | derived, with `formula` for derived figures), what the figure
measures (`metric`: quantity, tokens input/output/total, over which GPUs), and how we predict it:

- method `simulate`: the real simulator (sim.simulator.simulate_specs) runs `plan` + `workload`,
  `num_requests` requests with the run's seed; the metric is read off its SimResult.
- method `prefill_step` / `decode_step`: for figures measured on one instance with the other phase
  given unlimited resources (SGLang's and DeepSeek's per-phase tests), the cost model's step time
  of `instance` (a Layout) at `tokens_per_rank` prompt tokens of the workload's (fixed) ISL, or at
  `batch_per_rank` sequences of `context_tokens` KV each; throughput = tokens per step / seconds.
  A step case's workload is read for its ISL and routing skew only (a decode step needs none:
  without one, routing is uniform).
- `ratio`: the published figure is a ratio of two runs (e.g. TBO on / off); `numerator` and
  `denominator` are overrides deep-merged into the case (`instance`, `plan`, `workload` or the
  step fields) before each side is predicted; a side's `whatif` ({key: value}) applies what-if
  keys of `rackplan whatif --set` (sim/search/whatif.py, e.g. host.prepare_scale) to its specs.

`expressible: false` cases name the feature today's model or spec lacks in `missing`; they keep a
plan where one can be written, so `accuracy.py --all` can still run them for information.
`model_overrides` are deep-merged into the model YAML (e.g. NVFP4 expert weights of a checkpoint).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from rackplan.specs import (
    HardwareSpec,
    Layout,
    ModelSpec,
    Plan,
    Profile,
    Scenario,
    SpecError,
    Workload,
    from_dict,
    load_hardware,
    read_yaml,
    resolve_path,
)
from rackplan.specs.fields import check

CASES_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "cases"  # a source checkout's
SEATS_DEFAULT = Layout.__dataclass_fields__["max_batch_per_rank"].default  # a layout that sets none
Phase = Literal["prefill", "decode", "single-user", "kernel"]
PHASES: tuple[str, ...] = ("prefill", "decode", "single-user", "kernel")
Quantity = Literal["throughput", "step_s", "op_s_per_layer", "tpot_p50_s", "tps_per_user"]


@dataclass(frozen=True)
class Metric:
    """What a published figure measures."""

    quantity: Quantity
    tokens: Optional[Literal["input", "output", "total"]] = None  # throughput: which tokens count
    pool: Literal["all", "prefill", "decode", "instance"] = "all"  # whose GPUs divide the tokens/s
    op: Optional[str] = None  # op_s_per_layer: an op name of rackplan.specs.ops, or several joined by +
    definition: str = ""  # the source's own words for the figure

    def __post_init__(self):
        check(self.quantity != "throughput" or self.tokens is not None, "metric.tokens",
              "input, output or total for a throughput")
        check(self.quantity != "op_s_per_layer" or self.op is not None, "metric.op", "an op name")

    @property
    def higher_is_better(self) -> bool:
        """Throughputs and speed-ups: a higher prediction is optimistic; times: a lower one is."""
        return self.quantity in ("throughput", "tps_per_user")


@dataclass(frozen=True)
class Ratio:
    """Published figure = value(numerator overrides) / value(denominator overrides)."""

    numerator: dict[str, Any]
    denominator: dict[str, Any]


@dataclass(frozen=True)
class Case:
    id: str
    description: str
    published: float
    unit: str
    mark: Literal["text", "chart", "derived"]
    metric: Metric
    expressible: bool
    method: Literal["simulate", "prefill_step", "decode_step", "none"] = "none"
    model: str = ""
    hardware: str = ""
    missing: str = ""  # the feature an inexpressible case needs
    formula: str = ""  # derived figures: the arithmetic on published numbers
    source: str = ""  # defaults to the file's source
    group: str = ""  # the case file's stem (filled on load)
    reference: str = ""  # the shared/reference file it was transcribed from (defaults to the file's)
    phase_of: Optional[Phase] = None  # which phase the figure measures, when `phase` cannot derive it
    model_overrides: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)  # simulate: Plan fields without name/model/hardware
    workload: dict[str, Any] = field(default_factory=dict)  # Workload fields
    instance: dict[str, Any] = field(default_factory=dict)  # step methods: Layout fields
    tokens_per_rank: Optional[int] = None  # prefill_step
    batch_per_rank: Optional[int] = None  # decode_step
    context_tokens: Optional[int] = None  # decode_step: KV tokens per sequence
    ratio: Optional[Ratio] = None
    num_requests: Optional[int] = None  # simulate: requests (see requests_note for why this many)
    requests_note: str = ""
    assumptions: tuple[str, ...] = ()  # choices the source does not publish
    notes: str = ""

    def __post_init__(self):
        check(self.published > 0, "published", "a positive number", self.published)
        check(self.mark != "derived" or bool(self.formula), "formula", "the arithmetic of a derived figure")
        if not self.expressible:
            check(bool(self.missing), "missing", "the feature this case needs (expressible: false)")
            return
        check(self.method != "none", "method", "simulate, prefill_step or decode_step for an expressible case")
        check(bool(self.model) and bool(self.hardware), "model", "model and hardware names")
        if self.method == "simulate":
            check(bool(self.plan) and bool(self.workload), "plan", "a plan and a workload for method simulate")
            check(self.num_requests is not None and bool(self.requests_note), "num_requests",
                  "a request count and requests_note saying why it reaches steady state")
        else:
            check(bool(self.instance), "instance", "a Layout for a step method")
        if self.method == "prefill_step":
            check(self.tokens_per_rank is not None, "tokens_per_rank", "prompt tokens per rank per step")
            check(bool(self.workload), "workload", "a workload with the prompt length for prefill_step")
        if self.method == "decode_step":
            check(self.batch_per_rank is not None and self.context_tokens is not None, "batch_per_rank",
                  "batch_per_rank and context_tokens for decode_step")

    @property
    def phase(self) -> str:
        """What the figure measures: a kernel (one op), one user, prefill or decode. Simulated runs
        count as prefill when their tokens are input or the output is one token, single-user at
        concurrency 1, decode otherwise (a mixed run's output tok/s is set by its decode steps)."""
        if self.phase_of:
            return self.phase_of
        if self.metric.quantity == "op_s_per_layer":
            return "kernel"
        arrival = self.workload.get("arrival", {})
        if self.metric.quantity == "tps_per_user" or arrival.get("concurrency") == 1 and self.method == "simulate":
            return "single-user"
        if self.method in ("prefill_step", "decode_step"):
            return self.method.split("_")[0]
        osl = self.workload.get("osl", {})
        one_token = osl.get("kind") == "fixed" and osl.get("value") == 1
        return "prefill" if self.metric.tokens == "input" or one_token else "decode"

    @property
    def batch_per_rank_regime(self) -> Optional[float]:
        """Sequences per DP rank the figure ran at (decode and single-user figures; None for the rest):
        the decode step's batch, or a simulated run's concurrency over its DP ranks, capped by the seats."""
        if self.phase not in ("decode", "single-user"):
            return None
        if self.method == "decode_step":
            return float(self.batch_per_rank)
        conc = self.workload.get("arrival", {}).get("concurrency")
        lays = self.plan.get("decode") or self.plan.get("aggregated") or []
        if conc is None or not lays:
            return None
        ranks = sum(lay.get("dp", 1) * lay.get("replicas", 1) for lay in lays)
        seats = min(lay.get("max_batch_per_rank", SEATS_DEFAULT) for lay in lays)
        return float(min(conc / ranks, seats))

    @property
    def speculates(self) -> bool:
        """Runs speculative decoding (a layout of the plan or the instance names `speculation`)."""
        pools = ("prefill", "decode", "aggregated")
        lays = [self.instance] + [lay for pool in pools for lay in self.plan.get(pool, [])]
        return any(lay.get("speculation") for lay in lays)

    @property
    def runnable(self) -> bool:
        """Has what a prediction needs (inexpressible cases may still carry a plan)."""
        if self.method == "none" or not self.model or not self.hardware:
            return False
        return bool(self.plan and self.workload) if self.method == "simulate" else bool(self.instance)


@dataclass(frozen=True)
class CaseSide:
    """One side of a case, resolved into specs: a scenario without its profile (`scenario`), and the instance
    and step shape a stepped case prices."""

    model: ModelSpec
    hw: HardwareSpec
    workload: Optional[Workload]
    plan: Optional[Plan]
    instance: Optional[Layout]
    tokens_per_rank: Optional[int]
    batch_per_rank: Optional[int]
    context_tokens: Optional[int]
    whatif: tuple[tuple[str, Any], ...] = ()  # `rackplan whatif` keys applied to this side

    def scenario(self, prof: Profile) -> Scenario:
        """The side's specs priced with `prof`."""
        return Scenario(self.plan, self.model, self.hw, self.workload, prof)


def deep_merge(base: dict, over: dict) -> dict:
    """`base` with `over` merged in: mappings recursively, lists of named mappings (e.g. a model's
    `attention.kv` components) item by item by `name`, everything else replaced."""
    out = copy.deepcopy(base)
    for key, val in over.items():
        if isinstance(val, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], val)
        elif _named_items(val) and _named_items(out.get(key)):
            out[key] = _merge_named(out[key], val)
        else:
            out[key] = copy.deepcopy(val)
    return out


def _named_items(val) -> bool:
    return isinstance(val, list) and bool(val) and all(isinstance(v, dict) and "name" in v for v in val)


def _merge_named(base: list, over: list) -> list:
    """Items of `over` merged into the `base` items of the same name (unknown names appended)."""
    out = [copy.deepcopy(b) for b in base]
    index = {b["name"]: i for i, b in enumerate(out)}
    for item in over:
        if item["name"] in index:
            out[index[item["name"]]] = deep_merge(out[index[item["name"]]], item)
        else:
            out.append(copy.deepcopy(item))
    return out


def load_model_variant(name: str, overrides: dict, where: str) -> ModelSpec:
    """The embedded (or path) model with `overrides` merged into its YAML, validated as a ModelSpec."""
    path = resolve_path("models", name)
    return from_dict(ModelSpec, deep_merge(read_yaml(path), overrides), f"{where} (model {path.name})")


def resolve(case: Case, overrides: dict | None = None) -> "CaseSide":
    """Specs for one side of `case` (`overrides` from a ratio side)."""
    where = f"case {case.id}"
    data = deep_merge({"plan": case.plan, "workload": case.workload, "instance": case.instance,
                       "tokens_per_rank": case.tokens_per_rank, "batch_per_rank": case.batch_per_rank,
                       "context_tokens": case.context_tokens, "whatif": {}}, overrides or {})
    model = load_model_variant(case.model, case.model_overrides, where)
    hw = load_hardware(case.hardware)
    wl = from_dict(Workload, {"name": case.id, **data["workload"]}, where, "workload.") if data["workload"] else None
    plan = None
    if data["plan"]:
        plan = from_dict(Plan, {"name": case.id, "model": case.model, "hardware": case.hardware, **data["plan"]},
                         where, "plan.")
    inst = from_dict(Layout, data["instance"], where, "instance.") if data["instance"] else None
    return CaseSide(model, hw, wl, plan, inst, data["tokens_per_rank"], data["batch_per_rank"],
                    data["context_tokens"], tuple(data["whatif"].items()))


def load_file(path: Path) -> list[Case]:
    """The cases of one case file (SpecError naming the file and field on bad input)."""
    raw = read_yaml(path)
    for key in raw:
        if key not in ("source", "reference", "notes", "cases"):
            raise SpecError(str(path), key, "one of the known keys: source, reference, notes, cases")
    items = raw.get("cases")
    if not isinstance(items, list) or not items:
        raise SpecError(str(path), "cases", "a non-empty list of cases")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise SpecError(str(path), f"cases[{i}]", "a mapping", item)
        item = {"source": raw.get("source", ""), "reference": raw.get("reference", ""), **item, "group": path.stem}
        out.append(from_dict(Case, item, str(path), f"cases[{i}]."))
    return out


def load_cases(folder: Path = CASES_DIR) -> list[Case]:
    """Every case of every *.yaml in `folder`, in file then listed order; ids must be unique."""
    files = sorted(Path(folder).glob("*.yaml"))
    if not files:
        raise SpecError(str(folder), "--cases", "a folder holding case YAML files")
    cases = [c for p in files for c in load_file(p)]
    seen: set[str] = set()
    for c in cases:
        if c.id in seen:
            raise SpecError(str(folder), f"{c.group}: id", "ids unique across case files", c.id)
        seen.add(c.id)
    for c in cases:  # every runnable case must resolve into valid specs (both ratio sides)
        for side in ((c.ratio.numerator, c.ratio.denominator) if c.ratio else ({},)):
            if c.runnable:
                resolve(c, side)
    return cases


def profile_applies(prof: Profile, hw: HardwareSpec) -> bool:
    """A profile fitted on one hardware prices only that hardware ('*' = generic datasheet)."""
    return prof.hardware in ("*", hw.name)
