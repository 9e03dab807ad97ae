"""The context of one choice's costs: what every piece of them reads (the spec, the choice, the GPU, the
assumptions, the architecture, the token counts, the choice's :class:`~parplan.costmodel.communication.comm.Comm`
and :class:`~parplan.costmodel.communication.data_parallel.DataParallel`), and the busiest EP rank's routed load.

Token counts: seed 003 (``s = seq // cp`` tokens of a sequence on a CP rank); GEMM rates at the training precision's
peak: :mod:`parplan.costmodel.compute.efficiency`; the busiest EP rank: :mod:`parplan.costmodel.moe.moe_dispatch`.
The pieces that read it: :mod:`gemm_rates`, :mod:`activations`, :mod:`layer_comm`, :mod:`layer_costs`,
:mod:`moe_layer`, :mod:`stage_extras`.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.compute.efficiency import hbm_bandwidth_gbps, max_linear_efficiency
from parplan.costmodel.communication.comm import Comm
from parplan.costmodel.communication.data_parallel import DataParallel
from parplan.costmodel.moe import moe_dispatch
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.spec.degrees import Choice
from parplan.costmodel.spec.hardware import GPU
from parplan.costmodel.spec.spec import ModelSpec, Spec


@dataclass(frozen=True)
class ChoiceContext:
    """What every piece of one choice's costs reads."""

    spec: Spec
    c: Choice
    gpu: GPU
    a: Assumptions
    arch: Architecture
    m: ModelSpec
    h: int  # hidden size
    seq: int  # sequence length
    domain: int  # NVLink domain size
    precision: str
    peak: float  # FLOP/s at the training precision's peak
    rate: float  # FLOP/s of large GEMMs at the training precision
    zero: int  # the ZeRO stage paid (effective_zero_stage)
    s_rank: int  # tokens of one sequence on a CP rank (seed 003: s = seq // cp)
    tokens_tp_group: int  # tokens a TP group processes per micro-batch
    tokens_gpu: float  # per-GPU share of token-FLOPs
    M: float  # GEMM rows: with or without SP, each TP rank multiplies every token
    sp: bool  # sequence parallelism on
    fwd_share: float  # F / (F + B)
    hbm_Bps: float
    comm: Comm
    dp: DataParallel

    @staticmethod
    def of(spec: Spec, c: Choice, gpu: GPU, a: Assumptions, arch: Architecture, domain: int,
           zero: int, memo: dict | None = None) -> "ChoiceContext":
        """``memo``: as :meth:`GemmRates.of`'s, shared with :meth:`Comm.of` (the links of equal degrees); it also keeps
        the rates no choice moves (:func:`_rates`: the memo is one spec's, GPU's and assumptions')."""
        rates = memo.get(_RATES) if memo is not None else None
        if rates is None:
            rates = _rates(spec.training.precision, gpu, a)
            if memo is not None:
                memo[_RATES] = rates
        peak, rate, fwd_share, hbm_Bps = rates
        seq = spec.training.seq_len
        s_rank = seq // c.cp
        tokens_tp_group = c.micro_batch_size * s_rank
        comm = Comm.of(c, gpu, a, domain, memo)
        out = object.__new__(ChoiceContext)  # its fields set at once (the frozen dataclass's __init__ sets one by one)
        out.__dict__.update(
            spec=spec, c=c, gpu=gpu, a=a, arch=arch, m=spec.model, h=spec.model.hidden_size, seq=seq, domain=domain,
            precision=spec.training.precision, peak=peak, rate=rate, zero=zero, s_rank=s_rank,
            tokens_tp_group=tokens_tp_group, tokens_gpu=tokens_tp_group / c.tp, M=float(tokens_tp_group),
            sp=c.sequence_parallel_on, fwd_share=fwd_share, hbm_Bps=hbm_Bps, comm=comm,
            dp=DataParallel.of(spec, gpu, a, comm, zero, fwd_share))
        return out

    def recompute_comm(self, tp_fwd_s: float, cp_fwd_s: float, ep_s: float) -> tuple[float, float, float]:
        """The forward communication a fully recomputed layer repeats: its forward TP collectives, the CP
        attention communication's forward part, half of the all-to-all."""
        if not self.a.recompute_repeats_comm:
            return (0.0, 0.0, 0.0)
        return (tp_fwd_s, cp_fwd_s, ep_s / 2)


_RATES = ("ChoiceContext", "rates")  # ChoiceContext.of's memo key of :func:`_rates`


def _rates(precision: str, gpu: GPU, a: Assumptions) -> tuple[float, float, float, float]:
    """(the precision's peak FLOP/s, its large GEMMs' rate, F / (F + B), the HBM bandwidth in B/s): the fields of a
    :class:`ChoiceContext` that read the GPU and the assumptions alone."""
    peak = gpu.peak_tflops(precision) * 1e12
    rate = peak * max_linear_efficiency(a, gpu, precision)  # large GEMMs, at the training precision's peak
    return peak, rate, 1.0 / (1.0 + a.backward_to_forward_ratio), hbm_bandwidth_gbps(gpu, a) * 1e9


def moe_busiest_load(ctx: ChoiceContext) -> float:
    """The busiest EP rank's routed tokens over the mean (costmodel/moe/moe_dispatch.py busiest_rank_load: 1 at EP 1,
    growing as √(ln ep), at most the capacity factor)."""
    return moe_dispatch.busiest_load(ctx.c.ep, ctx.a, ctx.m.moe)
