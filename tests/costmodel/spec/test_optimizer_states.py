"""Precision-aware optimizer states (costmodel/spec/optimizer_states.py): bytes per parameter of the dtypes, by hand.
"""

from __future__ import annotations

from parplan.costmodel.spec.optimizer_states import OPTIMIZER_STATE_NAMES, optimizer_state_bytes


def test_optimizer_state_bytes_by_hand():
    """Megatron-Core's precision-aware optimizer (arguments.py:3666-3685 at d98e8a64): the moments their
    dtype's size; an fp32 master weight its 16-bit remainder beside the bf16 weight (store_param_remainders,
    optimizer_config.py:192), an fp16 master a 2-byte copy."""
    assert optimizer_state_bytes(None, 12.0) == 12.0  # today's ledger: the assumptions' bytes
    assert optimizer_state_bytes("fp32/fp32/fp32", 12.0) == 2 + 4 + 4 == 10
    assert optimizer_state_bytes("fp32/bf16/bf16", 12.0) == 2 + 2 + 2 == 6
    assert optimizer_state_bytes("fp16/fp8/fp8", 12.0) == 2 + 1 + 1 == 4
    assert optimizer_state_bytes("fp32/fp16/fp8", 99.0) == 2 + 2 + 1 == 5
    assert len(OPTIMIZER_STATE_NAMES) == 2 * 4 * 4  # main {fp32, fp16} x exp_avg x exp_avg_sq {fp32, fp16, bf16, fp8}
