"""DeepSpeed's private names and the patches eoscale applies to it (checked on deepspeed 0.19).

- `DeepSpeedZeroOptimizer_Stage3._create_fp32_partitions` is replaced process-wide, once, so that ZeRO-3 shares an
  fp32 partition as its own master copy (`share_fp32_master_partitions`);
- `deepspeed.comm.torch.build_shm_op` is stubbed on CPUs: gloo's all-reduce does the shared-memory op's job
  without compiling it (`skip_shm_op`).

DeepSpeed is the optional extra `eoscale[deepspeed]`: `import_deepspeed()` imports it (after setting the
environment it reads at import) or raises a one-line error naming the extra.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

from eoscale._compat import Checked, require_extra

CHECKED = Checked("deepspeed", "0.19", "0.20",
                  "DeepSpeedZeroOptimizer_Stage3._create_fp32_partitions and deepspeed.comm.torch.build_shm_op")


def set_environment() -> None:
    """The environment DeepSpeed reads when it is imported; set before anything may import it (jsonargparse does,
    resolving `ZeroStrategy`'s signature through Lightning's `if TYPE_CHECKING: import deepspeed`)."""
    # DeepSpeed compiles its C++/CUDA ops when first used unless they were built at install; with DS_BUILD_OPS=0
    # (scripts/setup.sh) none were, and eoscale uses none
    os.environ.setdefault("DS_BUILD_OPS", "0")
    # without a GPU, DeepSpeed picks its CPU accelerator after warning on every rank that it found none; named, it
    # picks the same one without the warning (a ZeroStrategy on CPUs is deliberate: the tests run ZeRO that way)
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def import_deepspeed() -> ModuleType:
    """`deepspeed`, imported with eoscale's environment, or `MissingExtraError` naming `eoscale[deepspeed]`."""
    set_environment()
    return require_extra("deepspeed")


def share_fp32_master_partitions() -> None:
    """Let ZeRO-3 use an fp32 parameter partition as its own master copy, as DeepSpeed means to.

    DeepSpeed's stage 3 skips the fp32 master copy when the partition already is fp32 on the optimizer's device,
    but it compares `tensor.device` with a device *name* (`"cpu"`, `"cuda:0"`), which in torch is never equal:
    every fp32 run holds a second copy of its partition (1.25/W of DDP's state instead of 1/W: benchmarks/README.md,
    strategies.json). Giving the comparison a `torch.device` while the partitions are
    made is the whole fix; mixed precision (bf16/fp16 partitions) still gets its fp32 copy, as it must.
    """
    CHECKED.require()
    import torch
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3 as Stage3

    create = Stage3._create_fp32_partitions
    if getattr(create, "eoscale_shares_fp32", False):
        return

    def create_fp32_partitions(self: Any) -> None:
        name = self.device
        self.device = torch.device(name) if isinstance(name, str) else name
        try:
            create(self)
        finally:
            self.device = name

    create_fp32_partitions.eoscale_shares_fp32 = True  # type: ignore[attr-defined]
    Stage3._create_fp32_partitions = create_fp32_partitions


def skip_shm_op() -> None:
    """On CPUs DeepSpeed's communication backend compiles a shared-memory all-reduce (a C++ op, 30 s and a compiler
    on first use); gloo's own all-reduce does the same job, so the op is not built."""
    CHECKED.require()
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # (deepspeed.comm.torch is torch)
