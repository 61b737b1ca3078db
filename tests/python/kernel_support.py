"""Which linear kernels (EngineConfig.linear_kernel) run on this machine, asked of the engine itself.

A kernel runs when forcing it loads: the engine checks the dtype, the device, the CPU features under any
PYLOOKAHEAD_CPU_ISA cap, and the load-time row-invariance probe. Tests parametrize over these instead of
reading /proc/cpuinfo, so the same test proves every kernel a machine (or a capped run) has.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pylookahead import Model

# In the order `auto` tries them.
ALL_KERNELS = ("bf16-avx512", "avx2", "onednn", "generic", "aten")


@cache
def kernels_here(model_dir: Path, dtype: str) -> list[str]:
    runs = []
    for kernel in ALL_KERNELS:
        try:
            Model(model_dir, dtype=dtype, linear_kernel=kernel)
        except ValueError:
            continue
        runs.append(kernel)
    return runs
