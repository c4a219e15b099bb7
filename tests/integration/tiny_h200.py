"""The tiny steady-state scenario the warm-start and continued-run tests share: DeepSeek-V3 on 16
H200 (DEP8 prefill + DEP8 decode) at 20 req/s, explicit datasheet profile, 1,000 seeded requests."""
from rackplan.specs import Arrival, Layout, LengthDist, Plan, Workload, load_hardware, load_model, load_profile

PROF = load_profile("datasheet")
MODEL = load_model("deepseek-v3")
HW = load_hardware("h200-sxm")
PLAN = Plan(name="t", model="deepseek-v3", hardware="h200-sxm", num_gpus=16,
            prefill=(Layout(role="prefill", dp=8, max_tokens_per_step=8192),),
            decode=(Layout(role="decode", dp=8, max_batch_per_rank=64),))
WL = Workload(name="w", arrival=Arrival(kind="poisson", rate=20.0), isl=LengthDist(kind="fixed", value=1024),
              osl=LengthDist(kind="lognormal", mean=400, sigma=0.6, max=4096), num_requests=1000, seed=0)
