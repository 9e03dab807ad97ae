"""The routed experts' elementwise kernels that run outside the fused ones: a clamped gated activation and the
second linear layer's bias, as Megatron-Core runs them for GPT-OSS (memory-bound passes at HBM bandwidth).

Megatron-LM 2a75ac12 (the Megatron-Core that Megatron-Bridge 067f987d pins), ``TEGroupedMLP.forward``
(``transformer/moe/experts.py:817-924``), with GPT-OSS's settings (``models/gpt_oss/gpt_oss_bridge.py:62-84`` at
067f987d: ``add_bias_linear``, ``bias_activation_fusion``, ``activation_func_clamp_value`` 7.0):

* **Clamp** (``fusions/fused_bias_geglu.py:424-432``): before the fused weighted GLU, ``input.chunk(2)``, a
  ``clamp`` of each half and a ``torch.cat`` run as separate kernels over the fc1 output (R rows x 2f, BF16).
  Counted in passes over that tensor (one pass: each element read or written once): forward 4 (each clamp reads
  and writes its half: 2; the cat reads and writes the whole: 2); backward 5 (each clamp's backward reads its
  gradient and its input and writes a gradient: 3 halves; the chunk's backward concatenates the two: 2). A
  recomputed ``moe_act`` (``--recompute-modules moe_act``, ``experts.py:903-909``) runs the forward's 4 again.
* **fc2 bias** (``_apply_bias``, ``experts.py:312-330``, applied at ``:924``): per expert ``t + b * p`` over the
  fc2 output's split, then ``torch.cat``. Passes over the fc2 output (R rows x h, BF16): forward 6 (``b * p``
  writes 1; the add reads 2 and writes 1; the cat reads 1 and writes 1); backward 8 (the product's backward forms
  ``grad * p`` and ``grad * b``: reads the gradient twice and writes both, 4; their reductions to the bias and to
  the routing weights read both, 2; the split's backward concatenates the experts' gradients, 2). The fc1 bias is
  inside the fused activation kernel and costs nothing here.

R is the rows on this GPU's experts (the busiest EP rank's: ``moe_layer._moe_shape_terms_of``). Each count is a
named knob (``Assumptions.clamped_glu_forward_passes`` / ``clamped_glu_backward_passes`` /
``expert_bias_passes``) so a framework that fuses these kernels can set them to 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from parplan.costmodel.spec.assumptions import Assumptions
    from parplan.costmodel.spec.spec import MoESpec

ACTIVATION_BYTES = 2.0  # the fc1 and fc2 outputs are BF16 under BF16 and FP8 recipes alike


def expert_elementwise_bytes(a: "Assumptions", moe: "MoESpec", rows: float, fc1_width: float, fc2_width: float,
                             moe_act_recomputed: bool) -> float:
    """HBM bytes the clamp and the fc2 bias move per micro-batch, forward + backward (and the clamp's forward
    again where ``moe_act`` is recomputed): ``rows`` routed rows on this GPU, ``fc1_width`` the fc1 output's
    width on this GPU (2f/ETP for a gated MLP), ``fc2_width`` the fc2 output's (h)."""
    clamp_passes = 0.0
    if moe.activation_clamp is not None:
        clamp_passes = (a.clamped_glu_forward_passes * (2 if moe_act_recomputed else 1)
                        + a.clamped_glu_backward_passes)
    bias_passes = a.expert_bias_passes if moe.expert_bias else 0.0
    return rows * ACTIVATION_BYTES * (clamp_passes * fc1_width + bias_passes * fc2_width)
