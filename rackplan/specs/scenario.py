"""A scenario: the five specs one simulation, what-if study or accuracy case is priced with, as one value."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .hardware import HardwareSpec
from .layout import Plan
from .model import ModelSpec
from .profile import Profile
from .workload import Workload


@dataclass(frozen=True)
class Scenario:
    """A plan serving a workload: the model, hardware and cost profile it is priced with. Frozen: a change
    (a what-if key, sim/search/whatif.py) is a dataclasses.replace, so every spec's checks apply.
    `plan` and `workload` may be None where a study prices steps without them (whatif.step_split)."""

    plan: Optional[Plan]
    model: ModelSpec
    hw: HardwareSpec
    workload: Optional[Workload]
    profile: Profile
