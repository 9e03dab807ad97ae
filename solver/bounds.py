"""Per-choice lower bounds on the objective: from the choice alone (cheap) and from a continuous relaxation.

Quick bound: every stage's mean share of the model FLOPs at the fastest rate the assumptions allow, times
(m + bubble); memory: the mean stage's weights, gradients and optimizer states.

Layer bound (:func:`layer_bound`, the search's next bound once a plan is known): every layer's compute, TP and EP
time at the least bubble, shared by the choices of one :func:`layer_key` and at most the mean-unit bound
(table_builder.mean_unit_bound), which adds the CP, ZeRO, p2p and stage-extra terms.

Relaxation bound of a table (:func:`relaxed_bound`): a unit with ``l`` layers needs at least
``r ≥ (σ·l + c - cap)/ρ`` recomputed layers to fit (σ bytes per layer, ρ saved per recomputed layer), so its
time is at least ``a·l + d + κ·max(0, σ·l + c - cap)`` with κ the cheapest recompute time per byte saved, plus
the least all-to-all a DualPipe rank of at least ``l`` layers leaves exposed. The slowest unit is at least the
least τ at which the units' largest integer layer counts add up to the model's layers, and the units' summed
time at least every layer's time without recompute. Relaxing the grid, shared counts and the split within a
DualPipe rank only lowers the bound, so a choice whose bound exceeds a known plan's U cannot beat it.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Optional

import numpy as np

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.moe import moe_comm
from parplan.costmodel.evaluation.choice import Choice, bubble_factor, effective_zero_stage, pipeline_buffer_counts
from parplan.costmodel.spec.hardware import GPU
from parplan.costmodel.memory.memory import model_state_bytes
from parplan.costmodel.spec.optimizer_states import optimizer_state_bytes
from parplan.costmodel.communication.mesh import layer_world_key
from parplan.costmodel.evaluation.moe_layer import lone_share_key
from parplan.costmodel.schedules.paired_overlap import combined_1f1b_key
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import Spec
from parplan.costmodel.evaluation.stage_extras import torch_pipelining_bytes
from parplan.solver.deadline import check
from parplan.solver.tables import KIB, NS, Scale, StageTable, schedule_units

def relaxed_bound(t: StageTable, cap_kib: int) -> float:
    """A lower bound of the table's least U under ``cap_kib`` (inf where no split can fit; module docstring):
    :func:`relaxation_parts` weighed by the table's M (:func:`objective_of_parts`)."""
    parts = relaxation_parts(t, cap_kib)
    return float("inf") if parts is None else objective_of_parts(t.M, parts)


RelaxationParts = tuple[float, float, float]  # (τ, S·summed time, W·DP time): the bound less its M·τ term


def objective_of_parts(M: int, parts: RelaxationParts) -> float:
    """The relaxation's bound of a table of weight ``M`` from its parts (:func:`_objective_parts`: U = M·τ + S·Σ +
    W·dp - 1, the terms added in that order)."""
    tau, summed, dp = parts
    return float(M) * tau + summed + dp - 1.0


def relaxation_parts(t: StageTable, cap_kib: int) -> Optional[RelaxationParts]:
    """:func:`relaxed_bound`'s terms but its weight M (None where no split can fit): τ and the summed and DP terms
    read the table's per-unit coefficients, S, W and lb_time, never M, so the tables of choices that differ only in M
    share them (solver/shared_bounds.py).

    Unit time at integer count l is at least the nondecreasing ``T_u(l) = a·l + d + κ·max(0, σ·l + c - cap) +
    e_u(l)`` up to the count that fits all recomputed, ``e_u(l) = min_{l' ≥ l} t_pair[u, l']`` (DualPipe's least
    exposure; 0 elsewhere); the slowest unit takes at least the least τ whose counts ``max{l : T_u(l) ≤ τ}`` sum to
    the layers (bisection over integer τ, O(units) memory without an exposure table, the deadline checked each
    step). The summed time: every layer without recompute plus each unit's least exposure; DP: the mean unit's."""
    n, L = t.num_units, t.num_layers
    a = np.maximum(t.t_layer.astype(float), 1e-9)
    d = t.t_const.astype(float)
    sig = t.m_layer.astype(float)
    room = cap_kib - t.m_const.astype(float)
    s = t.m_saved.astype(float)
    rho = t.t_recompute.astype(float)
    # every division below is by a value np.where made positive: no error state to set (np.errstate costs ~5 us)
    kappa, s_max = _recompute_rates(t, s, rho)
    lo = t.layers_min.astype(np.int64)
    if ((sig - s_max) * lo > room).any():  # not even the least layers fit, all recomputed
        return None
    l_mem0 = np.where(sig > 0, room / np.where(sig > 0, sig, 1), np.inf)  # fits without recompute up to here
    l_full = np.where(sig > s_max, room / np.where(sig > s_max, sig - s_max, 1), np.inf)
    fin = np.isfinite(kappa)
    kap = np.where(fin, kappa, 0.0)
    most = np.floor(np.minimum(np.where(fin, l_full, np.minimum(l_mem0, l_full)), L) + 1e-9).astype(np.int64)

    def time_at(l: np.ndarray) -> np.ndarray:  # l: (n,) or (n, k), one row per unit
        col = (slice(None),) + (None,) * (np.ndim(l) - 1)
        return a[col] * l + d[col] + kap[col] * np.maximum(0.0, sig[col] * l - room[col])

    exposed = least_exposure = None
    if t.t_pair is not None:  # T_u over every count (the exposure table is this size already)
        e = np.minimum.accumulate(t.t_pair[:, ::-1].astype(float), axis=1)[:, ::-1]
        counts = np.broadcast_to(np.arange(L + 1, dtype=float), (n, L + 1))
        exposed = np.where(counts <= most[:, None], time_at(counts) + e, np.inf)
        least_exposure = e[np.arange(n), np.clip(lo, 0, L)]

    def unit_time(l: np.ndarray) -> np.ndarray:
        out = time_at(l.astype(float))
        return out if exposed is None else exposed[np.arange(n), np.clip(l, 0, L)]

    layers_at = _layer_counts(a, d, sig, room, kap, fin, l_mem0, most, exposed)

    tau_lo = float(unit_time(lo).max())
    tau_hi = float(np.ceil(unit_time(most).max()))
    if not np.isfinite(tau_hi) or layers_at(np.array([tau_hi]))[0] < L:
        return None  # every unit capped below the model's layers
    low = float(np.floor(tau_lo)) - 1.0  # layers_at(tau_hi) ≥ L; low falls short or is below τ_lo
    if exposed is not None:  # the counts reach L at the (L + n)-th least entry (each row counts from l = 0)
        kth = float(np.partition(exposed.ravel(), L + n - 1)[L + n - 1])
        high = max(float(np.ceil(kth)), float(np.ceil(tau_lo)), low + 1.0)
    else:
        guess = _integer_guess(time_at, most, L, tau_lo)
        high = least_integer_reaching(lambda tau: (tau >= tau_lo) & (layers_at(tau) >= L), low, tau_hi, guess)
    tau = max(float(np.floor(high * (1 - 1e-12))) - 1.0, float(t.lb_time))
    return _objective_parts(t, tau, least_exposure)


def _recompute_rates(t: StageTable, s: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(κ, s_max) per unit: the least time a KiB saved by recompute costs (a whole layer's recompute time over its
    saving; unit 0's dense layers where they save at a lower rate) and the most KiB one recomputed layer saves; inf
    and 0 where the table recomputes no whole layer (``s``, ``rho``: the per-layer saving and recompute time)."""
    n = t.num_units
    if t.choice.recompute == "full" and not t.recompute_all:
        kappa = np.where(s > 0, rho / np.where(s > 0, s, 1), np.inf)
        s_max = s.copy()
        if t.k_dense and t.m_saved_dense > 0:
            kappa[0] = min(kappa[0], t.t_recompute_dense / t.m_saved_dense)
            s_max[0] = max(s_max[0], float(t.m_saved_dense))
        return kappa, s_max
    return np.full(n, np.inf), np.zeros(n)


def _objective_parts(t: StageTable, tau: float, least_exposure: Optional[np.ndarray]) -> RelaxationParts:
    """The lower bound of U when the slowest unit takes at least ``tau``, in parts (:func:`objective_of_parts`): the
    summed time every layer without recompute plus each unit's least exposure (``least_exposure``; None without an
    exposure table), the DP time the mean unit's or the largest least one, less one unit for rounding (module
    docstring)."""
    n, L = t.num_units, t.num_layers
    dp_mean = (float(t.dp_layer[0]) * L + float(t.dp_const.sum())) / n
    dp_lb = max(dp_mean, float((t.dp_layer * t.layers_min + t.dp_const).max()))
    time_sum = float(t.base_time_sum)
    if least_exposure is not None and t.S > 0:
        time_sum += float(np.floor(least_exposure.sum()))
    return tau, float(t.S) * time_sum, float(t.scale.weight) * float(np.floor(dp_lb))


def _integer_guess(time_at, most: np.ndarray, k: int, tau_lo: float) -> Optional[float]:
    """relaxed_bound's guess of its integer search's answer: the ceiling of :func:`_kth_least_threshold`, at least
    ``tau_lo``'s (None where the threshold is not formed)."""
    kth = _kth_least_threshold(time_at, most, k)
    return None if kth is None else max(np.ceil(kth), np.ceil(tau_lo))


def _kth_least_threshold(time_at, most: np.ndarray, k: int) -> Optional[float]:
    """The ``k``-th least of the unit times ``T_u(l)``, ``1 ≤ l ≤ most_u``: the least τ at which the units' counts
    ``max{l : T_u(l) ≤ τ}`` add up to ``k``, in exact arithmetic (relaxed_bound's guess of its search's answer, which
    the search then checks on the counts themselves). None where the units × counts array would pass
    :data:`GUESS_MAX_ELEMENTS` (relaxed_bound keeps O(units) memory: a 10**6-layer spec's 262,144 units would need
    33 GiB): the search then runs without a guess, to the same answer."""
    top = int(most.max())
    if top < 1 or k > top * len(most):
        return float("inf")
    if top * len(most) > GUESS_MAX_ELEMENTS:
        return None
    counts = np.broadcast_to(np.arange(1, top + 1, dtype=float), (len(most), top))
    times = np.where(counts <= most[:, None], time_at(counts), np.inf).ravel()
    return float(np.partition(times, k - 1)[k - 1])


def _layer_counts(a, d, sig, room, kap, fin, l_mem0, most, exposed):
    """relaxed_bound's ``layers_at``: Σ_u max{l ≤ most_u : T_u(l) ≤ τ} at each τ of a 1-D array (the deadline checked
    each call), its per-unit columns formed once (the same floats as formed on every call)."""
    n = len(a)
    d_col, a_col, l_mem0_col, most_col = d[:, None], a[:, None], l_mem0[:, None], most[:, None]
    kr_col, slope_col, fin_col = (kap * room)[:, None], (a + kap * sig)[:, None], fin[:, None]
    all_fin = bool(fin.all())

    def layers_at(tau: np.ndarray) -> np.ndarray:
        check()
        width = len(tau) * (1 if exposed is None else exposed.shape[1])
        step = max(1, LAYER_COUNT_CHUNK_ELEMENTS // max(1, width))
        total = np.zeros(len(tau))
        for lo in range(0, n, step):  # rows in chunks: each temporary at most the chunk's size, the sums exact
            rows = slice(lo, lo + step)
            if exposed is not None:
                total += (exposed[rows, :, None] <= tau).sum(axis=(0, 1))
                continue
            rel = tau - d_col[rows]
            l_a = rel / a_col[rows]
            l_b = (rel + kr_col[rows]) / slope_col[rows]
            frac = np.where(l_a <= l_mem0_col[rows], l_a,
                            l_b if all_fin else np.where(fin_col[rows], l_b, l_mem0_col[rows]))
            total += np.minimum(np.floor(frac + 1e-9), most_col[rows]).sum(axis=0)
        return total - n if exposed is not None else total

    return layers_at


# layers_at's temporaries hold at most this many entries (1 MiB of float64) whatever the number of units: the
# counts are integers (exact in float64 below 2**53), so summing them chunk by chunk gives the same floats
LAYER_COUNT_CHUNK_ELEMENTS = 1 << 17
GUESS_MAX_ELEMENTS = 1 << 20  # relaxed_bound's guess: at most 8 MiB of float64 unit times


SEARCH_POINTS = 64  # τ values least_integer_reaching tries at once: each round narrows the interval 64-fold
_STEPS = np.arange(1, SEARCH_POINTS, dtype=float)
_FIRST = np.ones(1, dtype=bool)


def least_integer_reaching(reached, low: float, high: float, guess: float | None = None) -> float:
    """The least integer τ in (low, high] at which the nondecreasing predicate ``reached`` (element-wise over an
    array of τ) holds, given that it holds at ``high``: a search over integers that tries :data:`SEARCH_POINTS` of
    them per round (the answer of a bisection, in a few NumPy calls instead of one per halving). ``guess``: an
    integer the answer likely is, tried first with the one below it (the same answer, whatever the guess)."""
    if guess is not None and low < guess < high:
        below, at = reached(np.array([guess - 1.0, guess]))
        if at and (not below or guess - 1.0 <= low):
            return guess
        if below and guess - 1.0 > low:
            high = guess - 1.0
        elif not at:
            low = guess
    while high - low > 1.0:
        points = np.floor(low + (high - low) * _STEPS / SEARCH_POINTS)  # nondecreasing: np.unique is the
        points = points[np.concatenate((_FIRST, points[1:] != points[:-1]))]  # first of each run
        points = points[(points > low) & (points < high)]
        if not len(points):
            points = np.arange(low + 1.0, high)
        ok = reached(points)
        j = int(np.argmax(ok)) if ok.any() else len(points)
        low, high = (points[j - 1] if j else low), (points[j] if j < len(points) else high)
    return high


def fastest_flops_per_s(spec: Spec, gpu: GPU, a: Assumptions) -> float:
    """The fastest rate any FLOP of the model runs at under the assumptions: the GEMM rate of the training
    precision, or the attention core's where that is higher (quick_bounds prices every FLOP at it)."""
    peak = gpu.peak_tflops(spec.training.precision) * 1e12
    effs = [a.matmul_efficiency]
    if spec.training.precision == "fp8" and a.fp8_matmul_efficiency is not None:
        effs = [a.fp8_matmul_efficiency]
    rates = [peak * e for e in effs]
    if a.attention_efficiency is not None:
        rates.append(gpu.peak_bf16_tflops * 1e12 * a.attention_efficiency)
    return max(rates)


def quick_bounds(spec: Spec, choices: list[Choice], gpu: GPU, a: Assumptions, arch: Architecture,
                 factors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds computed from a choice alone, before its coefficient table is built.

    Step time (seconds): every stage's mean share of the model FLOPs at the fastest rate the assumptions
    allow, times (m + bubble); no communication, no recomputation. Memory (KiB): the mean stage's weights,
    gradients and optimizer states (no activations). Both are lower bounds of the full model's values.
    ``factors``: each choice's m + bubble_factor (Problem.build's ``quick_factor``), computed here if not given.
    Array arithmetic over every choice in the order the scalar formulas apply it (the same floats: IEEE operations
    are element-wise), the model states by ``memory.model_state_bytes`` over the choices of one ZeRO stage, optimizer
    state dtype and offload share."""
    if not choices:
        return np.zeros(0), np.zeros(0)
    check()
    seq = spec.training.seq_len
    fastest = fastest_flops_per_s(spec, gpu, a)
    flops_token = arch.model_flops_per_token(seq, a.attention_flops_causal_fraction)
    expert_total = arch.num_moe_layers * arch.expert_params_per_layer
    other_total = arch.total_params - expert_total
    if factors is None:
        factors = np.array([c.num_microbatches + bubble_factor(c, a) for c in choices])
    tp, cp, pp, ep, etp, mbs, zero, g_dense, g_expert = _shard_columns(choices, a)
    tokens_gpu = mbs * (seq // cp) / tp
    t_mean_s = tokens_gpu * flops_token / fastest / pp
    step_lb_s = factors * t_mean_s * (1 - 1e-9)
    dense_params, expert_params = other_total / tp / pp, expert_total / (ep * etp) / pp  # a stage's, on one GPU
    units: dict = {}  # schedule_units' stages_per_unit by (schedule, pp): a DualPipe rank holds two stages
    per_unit = np.array([units[k] if k in units else units.setdefault(k, schedule_units(*k).stages_per_unit)
                         for k in map(_SCHEDULE_PP, choices)])
    group_ids: dict = {}  # (optimizer state dtypes, offload share) -> id
    group = np.array([group_ids.setdefault(k, len(group_ids)) for k in map(_OPTIMIZER, choices)])
    states = np.empty(len(choices))
    for (opt_states, f), g in group_ids.items():
        o = optimizer_state_bytes(opt_states, a.optimizer_bytes)
        for z in sorted(set(zero[group == g].tolist())):  # np.unique's stages (np.unique imports numpy.ma: 10-20 ms)
            sel = (group == g) & (zero == z)
            states[sel] = (model_state_bytes(dense_params[sel], int(z), g_dense[sel], a.weight_bytes, a.grad_bytes,
                                             o, f, a.zero3_resident_weight_bytes)
                           + model_state_bytes(expert_params[sel], int(z), g_expert[sel], a.weight_bytes,
                                               a.grad_bytes, o, f, a.zero3_resident_weight_bytes))
    states *= per_unit
    mean_buffers, most_buffers = pipeline_buffer_floors(spec, choices, a)
    states = np.maximum(states + mean_buffers, most_buffers)
    check()
    return step_lb_s, np.floor(states * (1 - 1e-9) / KIB)


_DEGREES = operator.attrgetter("tp", "cp", "pp", "dp", "ep", "etp", "micro_batch_size", "zero_stage", "zero_replicas")
_SCHEDULE_PP = operator.attrgetter("schedule", "pp")
_OPTIMIZER = operator.attrgetter("optimizer_states", "optimizer_offload_fraction")
_LAYER_FIELDS = operator.itemgetter("tp", "cp", "micro_batch_size", "sequence_parallel", "ep", "etp", "cp_comm_type",
                                    "recompute")  # layer_key's plain fields, one C call


def _shard_columns(choices: list[Choice], a: Assumptions) -> tuple[np.ndarray, ...]:
    """(tp, cp, pp, ep, etp, micro-batch size, ZeRO stage paid, dense shard, expert shard) per choice, int64 arrays:
    effective_zero_stage and Choice.dense_shard / expert_shard themselves, asked once per distinct tuple of the
    degrees they read (a few hundred among DeepSeek-V3's 116k choices), each choice's row taken by its tuple's index."""
    rows, table, ids = {}, [], []  # rows: each tuple's row of table, in the order first seen; ids: each choice's
    for key, c in zip(map(_DEGREES, choices), choices):
        if (j := rows.get(key)) is None:
            j = rows[key] = len(table)
            table.append((c.tp, c.cp, c.pp, c.ep, c.etp, c.micro_batch_size,
                          effective_zero_stage(c.zero_stage, c.pp, a), c.dense_shard, c.expert_shard))
        ids.append(j)
    return tuple(np.array(table, dtype=np.int64).reshape(-1, 9)[np.array(ids, dtype=np.intp)].T)


def pipeline_buffer_floors(spec: Spec, choices: list[Choice], a: Assumptions) -> tuple[np.ndarray, np.ndarray]:
    """Per choice, (the mean unit's, the largest unit's) pipeline-runtime buffers in bytes
    (ChoiceCosts.pipeline_buffer_bytes: the stage-boundary tensors and last-stage outputs that
    ``torch.distributed.pipelining`` holds): constants of a unit's memory beside its layers' states, so the mean
    unit's states plus the first, and the second alone, are at most the peak. Zeros under Megatron's runtime."""
    mean, most = np.zeros(len(choices)), np.zeros(len(choices))
    if a.pipeline_runtime != "torch":
        return mean, most
    seq, h, vocab = spec.training.seq_len, spec.model.hidden_size, spec.model.vocab_size
    counts: dict[tuple, list] = {}  # by all that costmodel.evaluation.choice.pipeline_buffer_counts reads of a choice
    floors: dict[tuple, tuple[float, float]] = {}  # by those and all that torch_pipelining_bytes reads
    for j, c in enumerate(choices):
        if c.pp == 1:
            continue
        key = (c.schedule, c.pp, c.vpp, c.num_microbatches, c.moe_a2a_overlap)
        full = key + (c.micro_batch_size, c.cp, c.tp, c.sequence_parallel_on)
        floor = floors.get(full)
        if floor is None:
            held = counts.get(key)
            if held is None:  # per unit: (boundary tensors, outputs) over its stages' chunks
                held = counts[key] = [[x for s in stages for x in pipeline_buffer_counts(c, s)]
                                      for stages in schedule_units(c.schedule, c.pp).stage_pairs]
            io, retained = torch_pipelining_bytes(c, a, seq, h, vocab)
            unit_bytes = [sum(n * io + r * retained for n, r in unit) for unit in held]
            floor = floors[full] = (sum(unit_bytes) / len(unit_bytes) * (1 - 1e-9), max(unit_bytes) * (1 - 1e-9))
        mean[j], most[j] = floor
    return mean, most


# ---- the layer bound: between the quick bound and the mean-unit bound (Problem.layer_bound)
def layer_key(c: Choice, domain: int) -> tuple | None:
    """The Choice fields that fix a layer's compute, TP and EP times (``LayerCost.compute_s``, ``tp_s``, ``ep_s`` of
    the dense and the MoE layer; costmodel/evaluation/layer_costs.py, costmodel/evaluation/moe_layer.py): the token
    counts (tp, cp, micro-batch size), SP, the GEMM and all-to-all shapes (ep, etp), the CP comm type (the attention
    kernel's sequence), the recompute granularity (selective recompute's extra time), the schedule as moe_layer_cost
    reads it (paired; hiding the all-to-all), the FP8 dispatch, and the links' tiers (mesh.layer_world_key); under
    combined 1F1B (moe_a2a_overlap) also the share of lone passes that the PP degree, virtual stages and micro-batch
    count set (costmodel/schedules/paired_overlap.py combined_1f1b_lone_share: moe_layer.py reads those three only
    through it, so the choices of one share have one layer time whatever the three: moe_layer.lone_share_key; of
    Mixtral 8x7B / 64 H100's 8,764 overlapped keys by the three, 942 remain by the share). Otherwise not the DP,
    ZeRO, PP or micro-batch count, which the layer's ZeRO/DP, state and stage terms read. None under activation
    offload, whose post-pass changes the compute time by the stage (costmodel/evaluation/activation_offload.py).
    tests/solver/test_layer_bound.py checks the times equal across choices and GPU counts of one key."""
    return None if c.activation_offload_layers else (
        *_LAYER_FIELDS(c.__dict__), *_schedule_terms(c.schedule, c.moe_a2a_overlap), c.moe_a2a_overlap, c.moe_fp8_dispatch,
        layer_world_key(c.num_gpus, domain, c.tp, c.cp, c.ep, c.etp), lone_share_key(combined_1f1b_key(c)))


@functools.lru_cache(maxsize=None)
def _schedule_terms(schedule: Schedule, a2a_overlap: bool) -> tuple[bool, bool]:
    """(paired, hides the all-to-all) of a schedule as moe_layer_cost reads them (:func:`layer_key`'s)."""
    return schedule.paired, moe_comm.overlaps_all_to_all(schedule, a2a_overlap)


def layer_sum_s(dense, moe, num_layers: int, k_dense_model: int) -> float:
    """Every layer's compute, TP and EP time without recompute, per micro-batch (seconds): the part of the
    mean-unit bound's layer sum (table_builder.mean_unit_bound) that :func:`layer_key` fixes, summed as it sums them. The
    terms it leaves out (CP and ZeRO time, the p2p, the stage extras) are non-negative, and floating-point sums and
    products of non-negative terms are monotone, so this is at most that sum. ``dense``, ``moe``: the layers'
    LayerCosts or their layer_costs.LayerTimes (the same three terms: costmodel.evaluation.choice.layer_times); ``moe`` None
    for a dense model."""
    main, k = (moe, k_dense_model) if moe is not None else (dense, 0)
    return k * (dense.compute_s + dense.tp_s + dense.ep_s) + (num_layers - k) * (main.compute_s + main.tp_s + main.ep_s)


def layer_bound(layer_s: float, pp: int, factor: float, units: int, num_layers: int, scale: Scale) -> float:
    """A lower bound of ``Problem.mean_bound`` (``weight·lb_time``, table_builder.mean_unit_bound) from
    :func:`layer_sum_s` alone. Time: ``lb_time = max(0, round(mean·NS/unit) - 2L - 4p)`` with ``mean ≥
    layer_s/p``. Weight: ``M + S·units = round(W(m + w_max)) + units·round(W·w_sum·stages_per_unit) ≥ W(m + β) -
    (1 + units)/2``, as ``w_max + p·w_sum = β`` (schedule.stage_bubble_weights, units·stages_per_unit = p) and β
    is least at ``weight_grad_share`` 1 (``factor`` = m + that β, the quick bound's; schedule.bubble_beta)."""
    t = math.floor(layer_s / pp * NS / scale.time_unit_ns * (1 - 1e-9)) - 1 - 2 * num_layers - 4 * pp
    w = scale.weight * factor * (1 - 1e-12) - (1 + units)
    return float(max(0, t)) * max(0.0, w)


def layer_bounds(layer_s: np.ndarray, pp: np.ndarray, factor: np.ndarray, units: np.ndarray, num_layers: int,
                 scale: Scale) -> np.ndarray:
    """:func:`layer_bound` on arrays, its operations in its order (integers exact in float64): the same floats."""
    t = np.floor(layer_s / pp * NS / scale.time_unit_ns * (1 - 1e-9)) - 1 - 2 * num_layers - 4 * pp
    w = scale.weight * factor * (1 - 1e-12) - (1 + units)
    return np.maximum(0.0, t) * np.maximum(0.0, w)
