"""A chat endpoint's template tokens (Workload.chat_template): the engine prefills them with each prompt and
serves the shared leading blocks from its prefix cache, while the input-token figures count the prompt alone.
Expected values derived by hand in the comments."""
import dataclasses

import numpy as np
import pytest

from rackplan.sim.simulator import simulate_specs
from rackplan.sim.workload import make_requests
from rackplan.specs import SpecError, load_hardware, load_model, load_plan, load_profile, load_workload
from rackplan.specs.fields import from_dict, to_dict
from rackplan.specs.scenario import Scenario
from rackplan.specs.workload import Arrival, ChatTemplate, LengthDist, Workload

pytestmark = pytest.mark.unit
SRC = "test: a hand count"


def _wl(isl: int, template: ChatTemplate | None, hit: float = 0.0) -> Workload:
    return dataclasses.replace(load_workload("tiny-chat"), arrival=Arrival("concurrency", concurrency=8),
                               isl=LengthDist("fixed", value=isl), osl=LengthDist("fixed", value=4),
                               num_requests=64, prefix_hit_rate=hit, chat_template=template)


def test_the_engine_prompt_carries_the_template_and_its_cached_blocks():
    # gpt-oss on vLLM v0.10.2's chat endpoint: 128 + 69 = 197 tokens prefilled, of them 66 shared leading
    # template tokens -> floor(66 / 16) x 16 = 64 served from the prefix cache: 197 - 64 = 133 computed
    reqs = make_requests(_wl(128, ChatTemplate(69, SRC, cached=64)))
    assert set(reqs.isl.tolist()) == {197} and set(reqs.cached.tolist()) == {64}
    # with a flat hit rate on the prompt: floor(100 x 0.5) = 50 cached + 0 template blocks; 100 + 5 prefilled
    reqs = make_requests(_wl(100, ChatTemplate(5, SRC), hit=0.5))
    assert set(reqs.isl.tolist()) == {105} and set(reqs.cached.tolist()) == {50}
    # none: the prompt as drawn
    reqs = make_requests(_wl(128, None))
    assert set(reqs.isl.tolist()) == {128} and set(reqs.cached.tolist()) == {0}


def _run(wl: Workload):
    plan = load_plan("tiny-cpu")
    sc = Scenario(plan, load_model(plan.model), load_hardware(plan.hardware), wl, load_profile("cpu-local"))
    return simulate_specs(sc, seed=0)


def test_the_engine_runs_the_templated_prompt_and_the_figures_count_the_prompt():
    # 96 prompt tokens + a 32-token template (none cached) run exactly as 128-token prompts without one: the
    # same steps, the same output tokens and latencies; the input figures count 96 of each 128 (x 0.75)
    plain, chat = _run(_wl(128, None)), _run(_wl(96, ChatTemplate(32, SRC)))
    assert np.array_equal(plain.ttft_s, chat.ttft_s) and np.array_equal(plain.e2e_s, chat.e2e_s)
    p, c = plain.metrics, chat.metrics
    assert c["output_tps_per_gpu"] == p["output_tps_per_gpu"]
    assert c["prefill_tps_per_gpu"] == p["prefill_tps_per_gpu"]  # the engine's computed prompt tokens
    assert c["input_tokens"] == 64 * 96 and p["input_tokens"] == 64 * 128
    assert c["input_tps_per_gpu"] == pytest.approx(p["input_tps_per_gpu"] * 96 / 128, rel=1e-12)
    # 16 of the 32 template tokens cached: 96 + 32 - 16 = 112 computed a request, the figures still count 96
    cached = _run(_wl(96, ChatTemplate(32, SRC, cached=16))).metrics
    assert cached["input_tokens"] == 64 * 96
    assert cached["prefill_tps_per_gpu"] / cached["input_tps_per_gpu"] == pytest.approx(112 / 96, rel=1e-12)


def test_the_field_loads_round_trips_and_bad_values_name_it():
    data = {"name": "w", "arrival": {"kind": "concurrency", "concurrency": 1}, "isl": {"kind": "fixed", "value": 8},
            "osl": {"kind": "fixed", "value": 1}, "chat_template": {"tokens": 5, "source": "x"}}
    wl = from_dict(Workload, data)
    assert wl.template_tokens == 5 and to_dict(wl)["chat_template"] == {"tokens": 5, "source": "x", "cached": 0}
    assert "chat_template" not in to_dict(dataclasses.replace(wl, chat_template=None))  # old hashes unchanged
    with pytest.raises(SpecError, match="chat_template.cached"):
        ChatTemplate(5, SRC, cached=6)
    with pytest.raises(SpecError, match="chat_template.tokens"):
        ChatTemplate(0, SRC)
    with pytest.raises(SpecError, match="chat_template.source"):
        ChatTemplate(5, " ")
