"""Cost models: pure functions of (batch on one rank, layout, model, hardware, profile) -> seconds,
with an op-by-op breakdown. See roofline.py for how one op is priced."""
