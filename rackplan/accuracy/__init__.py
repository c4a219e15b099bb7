"""The accuracy benchmark: published deployments (benchmarks/cases/*.yaml) predicted by the simulator and
the cost model, and the error statistics the cost model is judged by.

cases.py: the case schema and loader; predict.py: one case under one profile; stats.py: medians per
source / hardware / phase / set, leave-one-source-out and the error bands; report.py: tables, JSON,
CSV and chart; command.py: `rackplan accuracy` (and benchmarks/accuracy.py).
"""
