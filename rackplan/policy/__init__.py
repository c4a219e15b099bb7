"""The serving policy: one scheduler for the simulator and the executor (pure: no clock, no SimPy,
no torch).

`Router` (route.py) sends a request to an instance of a pool; `EngineCore` (engine.py) is one
instance over its DP ranks: `add(rid)`, then per step `schedule()` -> Batch, and after the step
`finish(batch)` -> Done. The simulator (sim/prefill.py, sim/decode.py, sim/aggregated.py) waits
the batch's price; the executor (executor/serving.py, serve.py, disagg.py) runs it; calibration's
serving replay (calibration/serve_replay.py) prices the executor's ticks. Both drive these
classes, so the same arrivals give the same batches (tests/unit/test_policy_differential.py).

Where the simulator and the executor differed, the policy follows vLLM (V1 engine, DP attention):
  1. A prompt binds to one DP rank when it reaches the instance and stays there: each DP rank is
     its own engine core with its own queue, and vLLM's DP load balancer picks the core with the
     lowest 4 x waiting + running (the simulator moved a chunked prompt to whichever rank had the
     most budget left; the executor bound it at its first chunk).
  2. A rank's queue is FIFO: when its head cannot start (no seat, budget or KV blocks), the
     requests behind it on that rank wait too; other ranks go on (the executor let a full rank's
     later requests skip ahead onto others; the simulator stopped every rank).
  3. A decode instance binds a prompt's KV to a rank at hand-off (4 x waiting + running) and
     admits it from that rank's queue when its KV blocks are free (the simulator chose the rank at
     admission with a KV check; the executor at hand-off without one).
  4. Requests go to instances by the plan's router (least_loaded, round_robin, prefix_aware:
     Router), in the simulator and the executor alike (the executor's router offered request r to
     prefill instance r mod n).
  5. KV is paged: a sequence holds ceil(tokens / block) blocks of the engine's block size
     (kv.py), allocated as its prefill chunks run and as it decodes, not its whole input +
     output up front; a rank short of blocks preempts its newest running sequence, which later
     recomputes its context as prefill (vLLM V1's recompute preemption).
  6. A prefill chunk is at most what is left of the rank's token budget after its decode
     queries (1 + draft tokens per decoding sequence); decode sequences always run (a decode
     rank's budget covers its seats: vLLM would leave a decode over budget to the next step).
"""
from .engine import Batch, Chunk, Done, EngineCore
from .kv import block_tokens, blocks, capacity_blocks
from .route import ROUTERS, LoadIndex, Router, bind_rank, choose, least_loaded

__all__ = ["Batch", "Chunk", "Done", "EngineCore", "LoadIndex", "ROUTERS", "Router", "bind_rank", "block_tokens",
           "blocks", "choose", "capacity_blocks", "least_loaded"]
