"""The GPU kit: one call on one lent H100 or H200 (no network there) that installs the project offline,
measures the executor's kernels and per-rank replays at DeepSeek-V3 / V4.1 shapes, validates the
shipped profile of that GPU against the replays and packs everything into at most 8 files.

    bash executor/gpukit/run.sh               # on the GPU machine (see docs/gpu_kit.md)
    python -m rackplan.executor.gpukit --rehearse --out DIR   # the same stages on CPU, tiny shapes

Modules: plans (replay plans that pass execute's own checks), kernels (the kernel sweep), compare
(measured vs the profile's prices), archive (the <= 8 result files), __main__ (the stages).
"""
