"""rackplan: plan, simulate and prove MoE serving layouts on GPU racks.

Subpackages (installed from the checkout's top-level folders): `rackplan.specs` (the shared
vocabulary: models, hardware, layouts, plans, workloads, profiles), `rackplan.sim` (cost models,
simulator, planner), `rackplan.executor` (the torch.distributed executor), `rackplan.calibration`
(fits and validation) and `rackplan.configs` (the embedded YAML specs).
"""
__version__ = "0.1.0"
