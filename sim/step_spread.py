"""Step-time variance: a step runs its price times a seeded log-normal factor, from measurement.

A measured step's time scatters about its median shape's (neighbours on the cores, the allocator,
the OS); the profile's `step_time_spread` gives, per step kind, the sd of log(step / price) and
`step_time_corr` the lag-1 correlation of consecutive steps' log deviations (a slowdown lasts
several steps), both fitted by `rackplan calibrate` (calibration/spread.py). The factor of step t
is exp(x_t), with x an AR(1) series in log space:

    x_t = corr x_{t-1} + sqrt(1 - corr^2) sd z_t,   z_t ~ N(0, 1), x_0 ~ N(0, sd^2)

so every step's factor is log-normal with median 1 (the price is a median: calibration fits
medians of steps) and log-sd `sd`, whatever `corr`. Draws come from their own seeded stream per
step pricer, so turning the spread on leaves every other draw (routing imbalance) unchanged.
"""
from __future__ import annotations

import math

import numpy as np

from rackplan.specs import Profile

SPREAD_SEED = 0x5EED5  # salt of the spread's streams (apart from the routing-imbalance draws)
BLOCK = 4096  # normals drawn at a time


class StepSpread:
    """Per step kind, the AR(1) log-deviation series of one pricer's steps."""

    def __init__(self, sd: dict[str, float], corr: dict[str, float], entropy: int):
        rng = np.random.default_rng([SPREAD_SEED, entropy])
        self._kinds = {k: _Series(sd.get(k, 0.0), corr.get(k, 0.0), rng) for k in ("prefill", "decode")}
        self.prefill, self.decode = self._kinds["prefill"].factor, self._kinds["decode"].factor

    @classmethod
    def of(cls, prof: Profile, rng: np.random.Generator | None) -> "StepSpread | None":
        """The spread of `prof` for a pricer drawing from `rng` (seeded from its state, which this does not
        advance); None where the profile has none or the pricer draws nothing (prices at the mean)."""
        if rng is None or not any(prof.step_time_spread.values()):
            return None
        return cls(prof.step_time_spread, prof.step_time_corr, int(rng.bit_generator.state["state"]["state"]))


class _Series:
    """One kind's AR(1) series; `factor()` is the next step's multiplier (1.0 without a spread)."""

    def __init__(self, sd: float, corr: float, rng: np.random.Generator):
        self.sd, self.corr, self.rng = sd, corr, rng
        self.innov = sd * math.sqrt(1.0 - corr * corr)  # sd of each step's fresh part
        self.x: float | None = None
        self._z: list[float] = []

    def factor(self) -> float:
        if not self.sd:
            return 1.0
        if not self._z:
            self._z = self.rng.standard_normal(BLOCK).tolist()
        z = self._z.pop()
        self.x = self.sd * z if self.x is None else self.corr * self.x + self.innov * z
        return math.exp(self.x)
