"""Bandwidth-bound elementwise ops: activation quantisation (BF16 -> FP8 per token) and the
hyper-connection mixing of DeepSeek-V4's mHC (pre: 4 residual streams -> the layer input; post:
the layer output back into 4 streams).

Seconds = bytes moved / (HBM bandwidth x the profile's curve for the op) + the per-kernel fixed
time. The step pricer does not call these yet (missing ops of the cost-model physics issue);
calibration fits the curves through them.
"""
from __future__ import annotations

from rackplan.specs import DTYPE_BYTES, HardwareSpec, Profile

from . import efficiency


def quantize_bytes(rows, cols, dtype: str = "fp8"):
    """Read [rows, cols] BF16, write it in `dtype`, plus one FP32 scale per row."""
    return rows * cols * (2.0 + DTYPE_BYTES[dtype]) + rows * 4.0


def mhc_bytes(tokens, hidden: int, hc_mult: int, part: str):
    """pre: read hc_mult BF16 streams, write one; post: read the output and the streams, write the streams."""
    stream = tokens * hidden * 2.0
    return stream * (hc_mult + 1) if part == "pre" else stream * (2 * hc_mult + 1)


def stream_seconds(hw: HardwareSpec, prof: Profile, op_class: str, nbytes, rows=0.0, cols=0.0):
    """Seconds of one bandwidth-bound op of class `op_class` ("quantize.fp8", "mhc.pre") moving `nbytes`."""
    return nbytes / (hw.hbm_bw * efficiency.stream(prof, op_class, nbytes, rows, cols)) + prof.op_fixed_s
