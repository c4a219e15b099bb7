"""Robust curve fitting on relative error: the one least-squares helper every fit goes through.

Times span orders of magnitude (microsecond launches, millisecond GEMMs), so residuals are
relative, `predicted / measured - 1`, and the loss is soft-L1 so a few outliers (a noisy step on a
shared machine) do not drag the fit. `minimax=True` then polishes the worst point, for reference
tables where the target is "within X% at every listed point".
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy.optimize import least_squares, minimize

from rackplan.specs import SpecError


def check_points(measured: np.ndarray, num_params: int, where: str, what: str) -> np.ndarray:
    """Finite, positive measured seconds, and at least one point per fitted parameter."""
    y = np.asarray(measured, float).reshape(-1)
    if len(y) < num_params:
        raise SpecError(where, what, f"at least {num_params} points to fit {num_params} parameters", len(y))
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        bad = y[~(np.isfinite(y) & (y > 0))][0]
        raise SpecError(where, what, "finite, positive measured seconds", float(bad))
    return y


def fit_relative(predict: Callable[[np.ndarray], np.ndarray], x0: Sequence[float], lower: Sequence[float],
                 upper: Sequence[float], measured, where: str, what: str, minimax: bool = False,
                 f_scale: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Fit parameters `p` so that predict(p) matches `measured`; returns (p, relative errors).

    predict: p [P] -> seconds [N]; bounds are per parameter. Raises SpecError on too few or bad points.
    """
    y = check_points(measured, len(x0), where, what)
    lo, hi = np.asarray(lower, float), np.asarray(upper, float)
    x0 = np.clip(np.asarray(x0, float), lo, hi)

    def resid(p):
        return np.asarray(predict(p), float) / y - 1.0

    res = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=f_scale, x_scale="jac")
    p = res.x
    if minimax:
        p = _minimax(resid, p, lo, hi)
    return p, resid(p)


def _minimax(resid, p0: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Minimise the worst relative error (Nelder-Mead in scaled, clipped coordinates)."""
    scale = np.where(np.abs(p0) > 0, np.abs(p0), 1.0)

    def worst(z):
        return float(np.max(np.abs(resid(np.clip(z * scale, lo, hi)))))

    best = p0 / scale
    for _ in range(3):  # restarts: Nelder-Mead stalls on the kinks of a max()
        r = minimize(worst, best, method="Nelder-Mead",
                     options={"xatol": 1e-7, "fatol": 1e-9, "maxiter": 3000 * len(p0)})
        if r.fun <= worst(best):
            best = r.x
    p = np.clip(best * scale, lo, hi)
    return p if worst(p / scale) <= worst(p0 / scale) else p0


def mape(predicted, measured) -> float:
    """Mean absolute percentage error, in percent."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    return float(np.mean(np.abs(p / m - 1.0)) * 100.0)
