"""Per-choice lower bounds on the objective, from a continuous relaxation of the stage problem.

For one choice, stage s with l layers needs at least ``r ≥ (σ·l + c - cap)/ρ`` recomputed layers to fit
(σ bytes per layer, ρ bytes saved per recomputed layer), so its time is at least the convex function
``g_s(l) = a·l + d + κ·max(0, σ·l + c - cap)`` with κ the cheapest recompute time per byte saved.
The slowest stage is at least the smallest τ for which the stages' largest layer counts with
``g_s(l) ≤ τ`` still add up to the model's layers (bisection on τ, vectorized over choices).
Relaxing integrality, the minimum of one layer per stage and the coupling of DualPipe ranks only
lowers the bound, so rows whose bound exceeds a known plan can be discarded without loss.
"""

from __future__ import annotations

import numpy as np

from parplan.costmodel.architecture import Architecture
from parplan.costmodel.assumptions import Assumptions
from parplan.costmodel.choice import Choice, bubble_factor, effective_zero_stage
from parplan.costmodel.hardware import GPU
from parplan.costmodel.memory import model_state_bytes
from parplan.costmodel.spec import Spec
from parplan.solver.tables import D, KIB, NS, Row

_VAR_L = {"F": "lf", "M": "lm", "L": "ll", "R0": None, "RM": None}


def lower_bounds(rows: list[Row], num_layers: int, cap_kib: int) -> np.ndarray:
    """Lower bound of U for every row (np.inf where no split can fit in memory)."""
    R = len(rows)
    if R == 0:
        return np.zeros(0)
    a = np.zeros((R, 3)); d = np.zeros((R, 3)); sig = np.zeros((R, 3)); c = np.zeros((R, 3))  # noqa: E702
    kap = np.zeros((R, 3)); lfull = np.full((R, 3), np.inf); mult = np.zeros((R, 3))  # noqa: E702
    fixed = np.zeros(R, bool)  # pp == 1: l = L exactly
    mean_only = np.zeros(R, bool)
    M = np.array([r.M_int for r in rows], float)
    dp_lb = np.zeros(R)
    for i, r in enumerate(rows):
        p = r.choice.pp
        fixed[i] = p == 1
        full = r.choice.recompute == "full"
        dp_sum, dp_slope = 0.0, 0.0
        for j, cl in enumerate(r.classes):
            tc, mc, dpc = dict(cl.time.coef), dict(cl.memory.coef), dict(cl.dp.coef)
            if cl.name == "R0":
                # DualPipe rank 0 runs the first and last stage: time ≥ min slope · (lf + ll); its memory
                # couples both stages and is dropped from the relaxation (a valid relaxation)
                a[i, j] = min(tc.get("lf", 0), tc.get("ll", 0))
                d[i, j] = cl.time.const
                sig[i, j] = 0.0
                kap[i, j] = np.inf
                mult[i, j] = 1
                mean_only[i] = False
                continue
            lv = {"F": "lf", "M": "lm", "L": "ll", "RM": "lm"}[cl.name]
            a[i, j] = tc.get(lv, 0)
            d[i, j] = cl.time.const
            sig[i, j] = mc.get(lv, 0)
            c[i, j] = cl.memory.const
            mult[i, j] = (p - 2) if cl.name in ("M", "RM") else 1
            rvars = ("rf1", "rf2") if cl.name == "F" else ("rm",) if cl.name in ("M", "RM") else ("rl",)
            ratios, saves = [], []
            for rv in rvars:
                save = -mc.get(rv, 0)
                if full and save > 0:
                    ratios.append(tc.get(rv, 0) / save)
                    saves.append(save)
            if ratios:
                kap[i, j] = min(ratios)
                rho = max(saves) * (2 if cl.name == "RM" else 1)  # DualPipe: rm ≤ 2·lm
                lfull[i, j] = (cap_kib - c[i, j]) / (sig[i, j] - rho) if sig[i, j] > rho else np.inf
            else:
                kap[i, j] = np.inf
                lfull[i, j] = (cap_kib - c[i, j]) / sig[i, j] if sig[i, j] > 0 else np.inf
            if r.choice.schedule != "dualpipe":
                dp_slope = dpc.get(lv, 0)
                dp_sum += mult[i, j] * cl.dp.const
        if r.choice.schedule != "dualpipe":
            dp_lb[i] = max(0.0, (dp_slope * num_layers + dp_sum) / p)

    def layers_at(tau: np.ndarray) -> np.ndarray:
        t = tau[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            l_time = np.where(a > 0, (t - d) / a, np.inf)
            mem_ok = sig * l_time + c <= cap_kib
            k_fin = np.isfinite(kap)
            l_rc = np.where(k_fin, (t - d + np.where(k_fin, kap, 0) * (cap_kib - c)) / (a + np.where(k_fin, kap, 0) * sig), 
                            np.where(sig > 0, (cap_kib - c) / sig, np.inf))
            l = np.where(mem_ok, l_time, l_rc)
            l = np.minimum(l, lfull)
            l = np.where(mult > 0, np.maximum(l, 0) * mult, 0)
        return l.sum(axis=1)

    hi = np.full(R, 1.0)
    # grow an upper bracket until every finite row is feasible (or give up: infeasible rows)
    for _ in range(80):
        need = layers_at(hi) < num_layers
        if not need.any():
            break
        hi = np.where(need, hi * 2, hi)
    feasible = layers_at(hi) >= num_layers
    lo = np.zeros(R)
    for _ in range(60):
        mid = (lo + hi) / 2
        ok = layers_at(mid) >= num_layers
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    tau = lo
    # pp == 1 and DualPipe: fall back to exact-at-L / the mean bound
    for i, r in enumerate(rows):
        if mean_only[i]:
            tau[i] = r.lb_time_ns
            feasible[i] = True
        elif fixed[i] and not feasible[i]:
            pass
    out = M * np.floor(np.maximum(tau - 1e-6 * tau - 1, 0)) + D * np.floor(dp_lb * (1 - 1e-9))
    out = np.maximum(out, M * np.array([r.lb_time_ns for r in rows], float))
    return np.where(feasible, out, np.inf)


def quick_bounds(spec: Spec, choices: list[Choice], gpu: GPU, a: Assumptions,
                 arch: Architecture) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds computed from a choice alone, before its coefficient table is built.

    Time: every stage's mean share of the model FLOPs at the fastest rate the assumptions allow, times
    (m + bubble); no communication, no recomputation. Memory: the mean stage's weights, gradients and
    optimizer states (no activations). Both are lower bounds of the full model's values.
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
    U = np.empty(len(choices))
    mem = np.empty(len(choices))
    for i, c in enumerate(choices):
        tokens_gpu = c.micro_batch_size * (seq // c.cp) / c.tp
        t_mean_ns = tokens_gpu * flops_token / fastest / c.pp * NS
        factor = c.num_microbatches + bubble_factor(c, a)
        U[i] = max(0.0, np.floor(D * factor) - 1) * max(0.0, np.floor(t_mean_ns * (1 - 1e-9)) - 1)
        g_dense = c.dp * c.cp
        g_expert = max(1, (c.tp * c.cp * c.dp) // (c.ep * c.etp))
        zero = effective_zero_stage(c.zero_stage, c.pp, a)
        states = (model_state_bytes(other_total / c.tp / c.pp, zero, g_dense, a.weight_bytes,
                                    a.grad_bytes, a.optimizer_bytes)
                  + model_state_bytes(expert_total / (c.ep * c.etp) / c.pp, zero, g_expert,
                                      a.weight_bytes, a.grad_bytes, a.optimizer_bytes))
        if c.schedule == "dualpipe":
            states *= 2
        mem[i] = np.floor(states * (1 - 1e-9) / KIB)
    return U, mem
