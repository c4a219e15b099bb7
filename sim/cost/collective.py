"""Tensor-parallel all-reduce inside one NVLink domain (the op TP attention and TP MoE need).

A ring all-reduce sends and receives 2 (n-1)/n of the message per GPU; the link fraction it reaches
over message size is the profile's `allreduce.tp<n>` curve (measured vLLM custom all-reduce in the
op-database profiles, else a datasheet curve: efficiency.allreduce), so small messages pay the
latency the curve carries. The step pricer (sim/cost/layer.py) and calibration price it here.
"""
from __future__ import annotations

from rackplan.specs import HardwareSpec, Profile

from . import efficiency


def ring_bytes(nbytes, num_gpus: int):
    """Bytes each GPU sends (and receives) in a ring all-reduce of an `nbytes` tensor."""
    return 2.0 * (num_gpus - 1) / num_gpus * nbytes


def allreduce_seconds(hw: HardwareSpec, prof: Profile, nbytes, num_gpus: int):
    """Seconds of one all-reduce of `nbytes` (the tensor's size) over `num_gpus` GPUs (array-friendly)."""
    if num_gpus <= 1:
        return 0.0 * nbytes
    return ring_bytes(nbytes, num_gpus) / (hw.scaleup_bw * efficiency.allreduce(prof, num_gpus, nbytes)) \
        + prof.op_fixed_s
