"""Precision-aware optimizer states: bytes per parameter of the master weights and the two Adam moments.

A choice's ``optimizer_states`` is ``None`` (the assumptions' ``optimizer_bytes``, 12 by default: today's
ledger) or a string ``"MAIN/EXP_AVG/EXP_AVG_SQ"`` naming the dtypes of Megatron-Core's precision-aware
optimizer (``--use-precision-aware-optimizer --main-params-dtype MAIN --exp-avg-dtype EXP_AVG
--exp-avg-sq-dtype EXP_AVG_SQ``; Megatron-LM d98e8a64 megatron/training/arguments.py:3666-3685: main params
fp32 | fp16, each moment fp32 | fp16 | bf16 | fp8), e.g. ``"fp32/bf16/bf16"``.

Bytes (:func:`optimizer_state_bytes`): a moment takes its dtype's size (fp8 1, fp16/bf16 2, fp32 4). An fp32
master weight takes 2 bytes, not 4: with the precision-aware optimizer Transformer Engine's FusedAdam keeps
only the 16 low bits of the fp32 master beside the bf16 parameter that holds its 16 high bits
(``store_param_remainders``, default True; megatron/core/optimizer/optimizer_config.py:192-195, passed to
FusedAdam in megatron/core/optimizer/__init__.py:587-588, applied with bf16 parameters in
distrib_optimizer.py:1008). An fp16 master is a separate 2-byte copy. So ``"fp32/fp32/fp32"`` is 10 bytes
(the non-precision-aware default keeps 4 + 4 + 4 = 12), ``"fp32/bf16/bf16"`` 6, ``"fp16/fp8/fp8"`` 4.

The main-gradient dtype (``--main-grads-dtype``) is not part of this choice: it is the assumptions'
``grad_bytes`` / ``grad_reduce_bytes``. Scaling factors of fp8 moments (one per tensor) are not counted.
"""

from __future__ import annotations

from typing import Literal, Optional

DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0}
MAIN_PARAMS_DTYPES = ("fp32", "fp16")  # Megatron-LM arguments.py:3673 --main-params-dtype choices
MOMENT_DTYPES = ("fp32", "fp16", "bf16", "fp8")  # arguments.py:3675/3680 --exp-avg(-sq)-dtype choices
FP32_MASTER_REMAINDER_BYTES = 2.0  # store_param_remainders: the 16 bits the bf16 parameter does not hold

OPTIMIZER_STATE_NAMES: tuple[str, ...] = tuple(
    f"{main}/{m1}/{m2}" for main in MAIN_PARAMS_DTYPES for m1 in MOMENT_DTYPES for m2 in MOMENT_DTYPES)
OptimizerStates = Literal[OPTIMIZER_STATE_NAMES]  # type: ignore[valid-type]


def split_states(name: str) -> tuple[str, str, str]:
    """``"fp32/bf16/fp8"`` -> ``("fp32", "bf16", "fp8")`` (main params, exp_avg, exp_avg_sq)."""
    main, m1, m2 = name.split("/")
    return main, m1, m2


def optimizer_state_bytes(states: Optional[str], default_bytes: float) -> float:
    """Optimizer bytes per parameter (master weight + exp_avg + exp_avg_sq); ``None``: ``default_bytes``."""
    if states is None:
        return default_bytes
    main, m1, m2 = split_states(states)
    master = FP32_MASTER_REMAINDER_BYTES if main == "fp32" else DTYPE_BYTES[main]
    return master + DTYPE_BYTES[m1] + DTYPE_BYTES[m2]
