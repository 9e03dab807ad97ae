"""Per-choice lower bounds on the objective: from the choice alone (cheap) and from a continuous relaxation.

Quick bound: every stage's mean share of the model FLOPs at the fastest rate the assumptions allow, times
(m + bubble); memory: the mean stage's weights, gradients and optimizer states.

Relaxation bound of a table (:func:`relaxed_bound`): a unit with ``l`` layers needs at least
``r ≥ (σ·l + c - cap)/ρ`` recomputed layers to fit (σ bytes per layer, ρ saved per recomputed layer), so its
time is at least the convex ``a·l + d + κ·max(0, σ·l + c - cap)`` with κ the cheapest recompute time per byte
saved. The slowest unit is at least the least τ at which the units' largest (fractional) layer counts add up
to the model's layers, and the units' summed time at least every layer's time without recompute. Relaxing integrality, the grid, shared counts and the split within a DualPipe rank only
lowers the bound, so a choice whose bound exceeds a known plan's U cannot beat it.
"""

from __future__ import annotations

import numpy as np

from parplan.costmodel.architecture import Architecture
from parplan.costmodel.assumptions import Assumptions
from parplan.costmodel.choice import Choice, bubble_factor, effective_zero_stage
from parplan.costmodel.hardware import GPU
from parplan.costmodel.memory import model_state_bytes
from parplan.costmodel.optimizer_states import optimizer_state_bytes
from parplan.costmodel.spec import Spec
from parplan.solver.deadline import check
from parplan.solver.tables import KIB, StageTable, schedule_units

# breakpoints × units evaluated at once by relaxed_bound (a few float arrays of this many entries: 2 MiB each);
# larger tables bisect over the breakpoints instead, one row at a time
DENSE_BOUND_ENTRIES = 1 << 18


def relaxed_bound(t: StageTable, cap_kib: int) -> float:
    """A lower bound of the table's least U under ``cap_kib`` (inf where no split can fit).

    Each unit's largest fractional layer count at a slowest-unit time τ is piecewise linear in τ (no
    recompute needed, then recompute at the cheapest rate κ, then capped where everything is recomputed or at
    the model's layers), so the least τ whose counts add up to the layers is found exactly from the pieces'
    breakpoints: the count sum is evaluated at every breakpoint and interpolated inside the bracketing piece.
    Tables with more than :data:`DENSE_BOUND_ENTRIES` breakpoint × unit entries find the bracketing breakpoint by
    bisection (the sum is nondecreasing in τ), evaluating one breakpoint at a time: O(units) memory, the same
    rows and so the same bound; the call's deadline and cancellation are checked at every step.
    """
    a = np.maximum(t.t_layer.astype(float), 1e-9)
    d = t.t_const.astype(float)
    sig = t.m_layer.astype(float)
    lo = t.layers_min.astype(float)
    L = float(t.num_layers)
    room = cap_kib - t.m_const.astype(float)
    s = t.m_saved.astype(float)
    rho = t.t_recompute.astype(float)
    if t.choice.recompute == "full" and not t.recompute_all:
        with np.errstate(divide="ignore", invalid="ignore"):
            kappa = np.where(s > 0, rho / np.where(s > 0, s, 1), np.inf)
        s_max = s.copy()
        if t.k_dense and t.m_saved_dense > 0:
            kappa[0] = min(kappa[0], t.t_recompute_dense / t.m_saved_dense)
            s_max[0] = max(s_max[0], float(t.m_saved_dense))
    else:
        kappa = np.full(len(a), np.inf)
        s_max = np.zeros(len(a))
    if ((sig - s_max) * lo > room).any():  # not even the least layers fit, all recomputed
        return float("inf")
    with np.errstate(divide="ignore", invalid="ignore"):
        l_mem0 = np.where(sig > 0, room / np.where(sig > 0, sig, 1), np.inf)  # fits without recompute up to here
        l_full = np.where(sig > s_max, room / np.where(sig > s_max, sig - s_max, 1), np.inf)
    fin = np.isfinite(kappa)
    kap = np.where(fin, kappa, 0.0)
    l_cap = np.minimum(np.where(fin, l_full, np.minimum(l_mem0, l_full)), L)

    def time_at(l: np.ndarray) -> np.ndarray:
        return a * l + d + kap * np.maximum(0.0, sig * l - room)

    def layers_at(tau: np.ndarray) -> np.ndarray:  # tau: (B,) -> (B, n)
        tt = tau[:, None]
        l_a = (tt - d) / a
        l_b = (tt - d + kap * room) / (a + kap * sig)
        l = np.where(l_a <= l_mem0, l_a, np.where(fin, l_b, l_mem0))
        return np.clip(l, 0.0, l_cap)

    tau_lo = float(time_at(lo).max())
    marks = [time_at(np.clip(l_mem0, 0.0, l_cap)), time_at(l_cap)]
    bps = np.unique(np.concatenate([np.array([tau_lo])] + [m[np.isfinite(m)] for m in marks]))
    bps = bps[bps >= tau_lo]
    bracket = _first_bracket(bps, layers_at, L)
    if bracket is None:
        return float("inf")  # every unit capped below the model's layers
    j, s0, s1 = bracket
    if j == 0:
        tau = float(bps[0])
    else:
        t0, t1 = float(bps[j - 1]), float(bps[j])
        tau = t0 + (t1 - t0) * (L - s0) / (s1 - s0) if s1 > s0 else t1
    tau = max(float(np.floor(tau * (1 - 1e-12))) - 1.0, float(t.lb_time))
    dp_mean = (float(t.dp_layer[0]) * L + float(t.dp_const.sum())) / t.num_units
    dp_lb = max(dp_mean, float((t.dp_layer * t.layers_min + t.dp_const).max()))
    # Σ_u time_u (the uneven-stage bubble's term): at least its value without recompute
    return float(t.M) * tau + float(t.S) * t.base_time_sum + float(t.scale.weight) * float(np.floor(dp_lb)) - 1.0


def _first_bracket(bps: np.ndarray, layers_at, num_layers: float) -> tuple[int, float, float] | None:
    """The first breakpoint j whose units' count sum reaches ``num_layers``, with the sums at j - 1 (0 at j = 0)
    and at j; None where none does. Every breakpoint at once for small tables (the common case); past
    :data:`DENSE_BOUND_ENTRIES` the same j by bisection (the count sum is nondecreasing in τ), O(units) memory,
    checking the call's deadline and cancellation at every step."""
    enough = num_layers - 1e-9
    if len(bps) * layers_at(bps[:1]).shape[1] <= DENSE_BOUND_ENTRIES:
        sums = layers_at(bps).sum(axis=1)
        ok = np.nonzero(sums >= enough)[0]
        if len(ok) == 0:
            return None
        j = int(ok[0])
        return j, (float(sums[j - 1]) if j else 0.0), float(sums[j])

    def sum_at(i: int) -> float:
        check()
        return float(layers_at(bps[i:i + 1]).sum(axis=1)[0])
    last = sum_at(len(bps) - 1)
    if not last >= enough:
        return None
    low, s_low = 0, sum_at(0)
    if s_low >= enough:
        return 0, 0.0, s_low
    high, s_high = len(bps) - 1, last
    while high - low > 1:  # sums[low] < L ≤ sums[high]
        mid = (low + high) // 2
        s_mid = sum_at(mid)
        if s_mid >= enough:
            high, s_high = mid, s_mid
        else:
            low, s_low = mid, s_mid
    return high, s_low, s_high


def quick_bounds(spec: Spec, choices: list[Choice], gpu: GPU, a: Assumptions,
                 arch: Architecture) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds computed from a choice alone, before its coefficient table is built.

    Step time (seconds): every stage's mean share of the model FLOPs at the fastest rate the assumptions
    allow, times (m + bubble); no communication, no recomputation. Memory (KiB): the mean stage's weights,
    gradients and optimizer states (no activations). Both are lower bounds of the full model's values.
    """
    if not choices:
        return np.zeros(0), np.zeros(0)
    seq = spec.training.seq_len
    peak = gpu.peak_tflops(spec.training.precision) * 1e12
    effs = [a.matmul_efficiency]
    if spec.training.precision == "fp8" and a.fp8_matmul_efficiency is not None:
        effs = [a.fp8_matmul_efficiency]
    rates = [peak * e for e in effs]
    if a.attention_efficiency is not None:
        rates.append(gpu.peak_bf16_tflops * 1e12 * a.attention_efficiency)
    fastest = max(rates)
    flops_token = arch.model_flops_per_token(seq, a.attention_flops_causal_fraction)
    expert_total = arch.num_moe_layers * arch.expert_params_per_layer
    other_total = arch.total_params - expert_total
    step_lb_s = np.empty(len(choices))
    mem = np.empty(len(choices))
    for i, c in enumerate(choices):
        if i % 1024 == 0:
            check()
        tokens_gpu = c.micro_batch_size * (seq // c.cp) / c.tp
        t_mean_s = tokens_gpu * flops_token / fastest / c.pp
        step_lb_s[i] = (c.num_microbatches + bubble_factor(c, a)) * t_mean_s * (1 - 1e-9)
        g_dense = c.dense_shard  # HSDP: the shard group (the whole DP·CP group when zero_replicas is 1)
        g_expert = c.expert_shard
        zero = effective_zero_stage(c.zero_stage, c.pp, a)
        o = optimizer_state_bytes(c.optimizer_states, a.optimizer_bytes)
        f = c.optimizer_offload_fraction
        states = (model_state_bytes(other_total / c.tp / c.pp, zero, g_dense, a.weight_bytes,
                                    a.grad_bytes, o, f, a.zero3_resident_weight_bytes)
                  + model_state_bytes(expert_total / (c.ep * c.etp) / c.pp, zero, g_expert,
                                      a.weight_bytes, a.grad_bytes, o, f, a.zero3_resident_weight_bytes))
        states *= schedule_units(c.schedule, c.pp).stages_per_unit  # a DualPipe rank holds two stages
        mem[i] = np.floor(states * (1 - 1e-9) / KIB)
    return step_lb_s, mem
