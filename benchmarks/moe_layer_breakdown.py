#!/usr/bin/env python3
"""One MoE layer's time, term by term, as the cost model prices it, beside hand values with their sources (issue 19).

    python benchmarks/moe_layer_breakdown.py [--out benchmarks/results/moe_layer_breakdown.txt]

For four rows -- DeepSeek-V3 as published (``deepseek-v3-production-2048xh800``, in the fit), Qwen3-30B-A3B on 16
H100, GPT-OSS 120B on 64 H100 and Qwen3-30B-A3B on 8 B200 (``data/heldout-runs.yaml``, never fitted) -- it rebuilds the row's choice under
the committed calibration (benchmarks/fit.py ``prepare_cases``, the row's assumption overrides applied) and splits
the MoE layer's :class:`~parplan.costmodel.evaluation.layer_costs.LayerCost` of one micro-batch on one GPU into the terms
``costmodel/evaluation/moe_layer.py moe_layer_cost`` adds: every GEMM with its (M, K, N) on this GPU, the efficiency the
shape gives (share of the precision's dense peak, ``costmodel/compute/efficiency.py``) and its FLOPs; the router (BF16);
the routed experts at the busiest EP rank's load and M_e = ep·tokens·k/E rows per local expert; the attention core;
the memory-bound elementwise traffic; the FP8 transposes; the SMs an overlapped schedule reserves; selective
recompute; the all-to-all and the TP collectives. The terms' sum is checked against ``compute_s``. Forward and
backward: the model splits every compute term F : B = 1 : ``backward_to_forward_ratio`` (``fwd_share``), the
all-to-all half and half.

Hand values (fwd+bwd, ms), only where a public figure exists:

* DeepSeek-V3's GEMMs: deepseek-ai/DeepGEMM@55ab91f README "Performance" (H800 SXM5, NVCC 12.8), which lists exactly
  DeepSeek-V3's shapes at M = 4096: normal GEMMs N x K = 2112 x 7168 (the fused q/kv down-projections, 1536 + 576)
  1009 TFLOPS, 24576 x 1536 (q up) 1125, 32768 x 512 (kv up) 751, 7168 x 16384 (output projection) 1426, 4096 x
  7168 (shared expert gate+up) 1265, 7168 x 2048 (shared down) 1168; grouped contiguous layout, 4 groups x 8192 rows
  (EP64: 256/64 local experts, 64·4096·8/256 rows each) 4096 x 7168 1346 and 7168 x 2048 1214. Forward figures; the
  backward's two GEMMs per forward GEMM are taken at the same rate (the README publishes forward shapes only).
* Attention core: Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608) Fig. 5-6, H100 SXM5, head dim 128,
  sequence 4k, cuDNN (Transformer Engine's fused attention): causal forward 518 TFLOPS/s, backward 499 TFLOPS/s
  counted as 2.5 x the forward's FLOPs (FlashAttention's backward recomputes QKᵀ: five GEMMs to the forward's two).
  Used for head dim 128 (Qwen3) and MLA's 192/128 (no public MLA training figure); not for GPT-OSS (head dim 64,
  sinks, 128-token windows: no matching figure).
* All-to-all: deepseek-ai/DeepEP@ebfe47e README (H800, CX7 400 Gb/s, "the DeepSeek-V3/R1 pretraining setting
  (4096 tokens per batch, 7168 hidden, top-4 groups, top-8 experts, FP8 dispatching and BF16 combining)"): internode
  EP64 dispatch 46 GB/s, combine 45 GB/s RDMA, at the model's remote nodes per token (costmodel/moe/moe_dispatch.py).
* SM reservation: DeepSeek-V3 §3.2.2, 20 of 132 SMs, held while the dispatch/combine kernels run
  (costmodel/moe/moe_comm.py reserved_sm_time_s) beside the hand GEMMs and attention and the hand all-to-all.
* Host / launch time: the model has no such term; none is published for these runs.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.fit import RESULTS, _git_commit, fit_rows, prepare_cases  # noqa: E402
from benchmarks.runs import compare, load_runs  # noqa: E402
from parplan.costmodel.moe import moe_comm  # noqa: E402
from parplan.costmodel.spec.assumptions import resolve_assumptions  # noqa: E402
from parplan.costmodel.evaluation.choice import layer_pieces, layer_times  # noqa: E402
from parplan.costmodel.compute.efficiency import max_linear_efficiency  # noqa: E402
from parplan.costmodel.evaluation.evaluate import plan_choice  # noqa: E402
from parplan.costmodel.compute.fp8_transpose import transpose_seconds  # noqa: E402
from parplan.costmodel.moe.expert_elementwise import expert_elementwise_bytes  # noqa: E402
from parplan.costmodel.evaluation.choice_context import moe_busiest_load  # noqa: E402
from parplan.costmodel.schedules.schedule import Schedule  # noqa: E402

HELDOUT = ROOT / "benchmarks" / "data" / "heldout-runs.yaml"
OUT = RESULTS / "moe_layer_breakdown.txt"
DSV3 = "deepseek-v3-production-2048xh800"
ROWS = (DSV3, "bridge260401-h100-qwen3-30b-a3b-16gpu-fp8", "bridge260401-h100-gptoss-120b-64gpu-bf16",
        "bridge260401-b200-qwen3-30b-a3b-8gpu-mxfp8", "bridge260401-b200-gptoss-120b-64gpu-bf16")  # B200: 4x the tokens per launch

# DeepGEMM@55ab91f README, H800 SXM5, forward TFLOPS at M = 4096 (normal) / 4 groups x 8192 (contiguous grouped)
DEEPGEMM_TFLOPS = {"q_down": 1009.0, "kv_down": 1009.0, "q_up": 1125.0, "kv_up": 751.0, "o_proj": 1426.0,
                   "shared_up": 1265.0, "shared_down": 1168.0, "expert_up": 1346.0, "expert_down": 1214.0}
# FlashAttention-3 paper Fig. 5-6, H100 SXM5, head dim 128, seq 4k, cuDNN: causal forward / backward TFLOPS/s
CUDNN_ATTN_FWD_TFLOPS, CUDNN_ATTN_BWD_TFLOPS, FA_BWD_FLOPS_PER_FWD = 518.0, 499.0, 2.5
DEEPEP_DISPATCH_GBPS, DEEPEP_COMBINE_GBPS = 46.0, 45.0  # DeepEP@ebfe47e README, internode EP64
DSV3_RESERVED_SMS = 20 / 132  # DeepSeek-V3 §3.2.2


@dataclass
class Term:
    name: str
    shape: str  # "M x K x N" on this GPU, or what the term reads
    tflop: float  # fwd+bwd FLOPs on this GPU, TFLOP (0: not a FLOP term)
    eff: float  # share of the precision's dense peak (0: not a GEMM)
    model_ms: float  # fwd+bwd
    fwd_ms: float
    hand_ms: float | None = None
    hand_src: str = ""

    @property
    def bwd_ms(self) -> float:
        return self.model_ms - self.fwd_ms


def _case(row_id: str):
    rows = [r for r in fit_rows() + list(load_runs(HELDOUT)) if r["id"] == row_id]
    cases, skipped = prepare_cases(rows[:1])
    if not cases:
        raise SystemExit(f"{row_id}: not expressible ({skipped})")
    case = cases[0]
    a = resolve_assumptions(None)
    return case, (a.model_copy(update=case.overrides) if case.overrides else a), rows[0]


def _gemm_names(arch, n_attn: int, shared: bool) -> list[str]:
    names = (["q_down", "q_up", "kv_down", "kv_up", "o_proj"] if arch.spec.mla is not None and n_attn == 5
             else ["q_proj", "kv_down", "kv_up", "o_proj"] if arch.spec.mla is not None else ["qkv", "o_proj"])
    return names + (["shared_up", "shared_down"] if shared else [])


def linear_terms(ctx, rates) -> list[Term]:
    """The GEMMs of ``moe_layer_cost`` one by one: the non-expert group's FLOPs shared out by weight (the model's
    FLOP-weighted mean over the group, so the per-GEMM times add up to the group's), the router, the experts."""
    c, m, arch, h, M, moe = ctx.c, ctx.m, ctx.arch, ctx.h, ctx.M, ctx.m.moe
    up, f_e, f_s, tok, fwd = rates.up, moe.expert_ffn_hidden_size, arch.shared_expert_ffn, ctx.tokens_gpu, ctx.fwd_share
    shared = [(up * h * f_s * moe.num_shared_experts, M, h, up * f_s / c.tp),
              (h * f_s * moe.num_shared_experts, M, f_s / c.tp, h)] if moe.num_shared_experts else []
    nonexpert = rates.attn_gemms + shared
    router_flops = 6.0 * h * moe.num_experts
    group_flops = tok * (arch.moe_layer_dense_linear_flops - router_flops)
    total_w = sum(g[0] for g in nonexpert)
    out = []
    for name, g in zip(_gemm_names(arch, len(rates.attn_gemms), bool(shared)), nonexpert):
        flops = group_flops * g[0] / total_w
        spf = rates.spf([g])
        out.append(Term(name, _shape(g), flops / 1e12, 1 / (spf * ctx.peak), 1e3 * flops * spf, 1e3 * flops * spf * fwd))
    spf_r = rates.spf_bf16([(1.0, M, h, moe.num_experts)])
    rf = tok * router_flops
    out.append(Term("router (BF16)", _shape((0, M, h, moe.num_experts)), rf / 1e12,
                    1 / (spf_r * ctx.gpu.peak_bf16_tflops * 1e12), 1e3 * rf * spf_r, 1e3 * rf * spf_r * fwd))
    M_e = max(1.0, M * c.ep * c.etp / c.tp * moe.top_k / moe.num_experts)
    busiest = moe_busiest_load(ctx)
    experts = [("expert_up", (up * h * f_e, M_e, h, up * f_e / c.etp)), ("expert_down", (h * f_e, M_e, f_e / c.etp, h))]
    for name, g in experts:
        flops = tok * arch.moe_layer_expert_flops * busiest * g[0] / (sum(x[1][0] for x in experts))
        spf = rates.spf([g])
        local = moe.num_experts // c.ep
        out.append(Term(f"{name} ({local} local x M_e, busiest x{busiest:.3f})", _shape(g), flops / 1e12,
                        1 / (spf * ctx.peak), 1e3 * flops * spf, 1e3 * flops * spf * fwd))
    return out


def _shape(g) -> str:
    return f"{g[1]:.0f} x {g[2]:.0f} x {g[3]:.0f}"


def other_terms(ctx, rates, acts, lin_s: float, sync_s: float) -> list[Term]:
    """Attention core, elementwise traffic, FP8 transposes, the reserved SMs, selective recompute and the dispatcher's
    host sync (``sync_s``: LayerTimes.host_sync_s, forward only) (compute), as ``moe_layer_cost`` adds them."""
    c, a, arch, moe, fwd, tok = ctx.c, ctx.a, ctx.arch, ctx.m.moe, ctx.fwd_share, ctx.tokens_gpu
    attn_flops = tok * arch.attention_core_flops(ctx.seq, a.attention_flops_causal_fraction)
    attn_eff = attn_flops / rates.attn_core_s / (ctx.gpu.peak_bf16_tflops * 1e12)
    traffic = rates.traffic_s(acts.moe_traffic_per_token)
    up, f_e, h = rates.up, moe.expert_ffn_hidden_size, ctx.h
    M_e = max(1.0, ctx.M * c.ep * c.etp / c.tp * moe.top_k / moe.num_experts)
    rows = M_e * moe.num_experts / c.ep * moe_busiest_load(ctx)
    shared = [(0, ctx.M, h, up * arch.shared_expert_ffn / c.tp), (0, ctx.M, arch.shared_expert_ffn / c.tp, h)] \
        if moe.num_shared_experts else []
    transposes = transpose_seconds(a, ctx.gpu, ctx.precision, ctx.hbm_Bps, rates.attn_gemms + shared
                                   + [(0, rows, h, up * f_e / c.etp), (0, rows, f_e / c.etp, h)])
    eager = expert_elementwise_bytes(a, moe, rows, up * f_e / c.etp, h, acts.moe_act_recomputed) / ctx.hbm_Bps
    before = lin_s + rates.attn_core_s + traffic + transposes + eager
    reserved = moe_comm.sm_fraction(a, ctx.gpu, ctx.m.moe) if c.ep > 1 and moe_comm.overlaps_all_to_all(c.schedule, c.moe_a2a_overlap) else 0.0
    sm_s = moe_comm.reserved_sm_time_s(before, 2 * ctx.comm.all_to_all_s(tok * h, moe), reserved)
    t = [Term("attention core (BF16)", f"s {ctx.seq}, d_qk+d_v {(arch.q_dim + arch.o_dim) / ctx.m.num_attention_heads:.0f}",
              attn_flops / 1e12, attn_eff, 1e3 * rates.attn_core_s, 1e3 * rates.attn_core_s * fwd),
         Term("elementwise traffic", f"{acts.moe_traffic_per_token / 1e3:.0f} kB/token x {a.activation_traffic_passes:.2f} passes",
              0, 0, 1e3 * traffic, 1e3 * traffic * fwd),
         Term("FP8 transposes", "M(K+N) bytes per GEMM", 0, 0, 1e3 * transposes, 1e3 * transposes * fwd),
         Term("reserved SMs", f"{reserved:.3f} of the SMs", 0, 0, 1e3 * sm_s, 1e3 * sm_s * fwd),
         Term("selective recompute", c.recompute, 0, 0, 1e3 * acts.selective_s, 1e3 * acts.selective_s),
         Term("dispatcher host sync", f"{moe.dispatcher}: GPU idle after the sync", 0, 0, 1e3 * sync_s, 1e3 * sync_s)]
    if moe.activation_clamp is not None or moe.expert_bias:  # GPT-OSS under Megatron-Core (expert_elementwise.py)
        t.insert(3, Term("expert clamp + bias kernels", f"clamp {moe.activation_clamp}, bias "
                         f"{str(moe.expert_bias).lower()}", 0, 0, 1e3 * eager, 1e3 * eager * fwd))
    return t


def comm_terms(ctx, moe_cost) -> list[Term]:
    """The all-to-all (dispatch + combine, fwd+bwd, none hidden), what the layer leaves exposed, TP/ETP, host."""
    c = ctx.c
    a2a = 2 * ctx.comm.all_to_all_s(ctx.tokens_gpu * ctx.h, ctx.m.moe)
    paired = Schedule(c.schedule).paired
    exposed = "priced per rank (paired schedule)" if paired else f"{1e3 * moe_cost.ep_s:.2f} ms exposed"
    return [Term("all-to-all (dispatch+combine)", f"{ctx.m.moe.dispatcher}; {exposed}", 0, 0, 1e3 * a2a, 1e3 * a2a / 2),
            Term("TP / ETP collectives", f"tp {c.tp} etp {c.etp}", 0, 0, 1e3 * moe_cost.tp_s, 1e3 * moe_cost.tp_s / 2),
            Term("host / launch", "but the dispatcher's sync (compute): not modelled", 0, 0, 0.0, 0.0)]


def hand_values(row_id: str, ctx, terms: list[Term]) -> None:
    """Fill ``hand_ms`` / ``hand_src`` where a public figure exists (module docstring)."""
    by = {t.name.split(" (")[0]: t for t in terms}
    if row_id == DSV3:
        for name, tflops in DEEPGEMM_TFLOPS.items():
            t = by.get(name)
            if t is not None:
                t.hand_ms, t.hand_src = 1e3 * t.tflop / tflops, f"DeepGEMM@55ab91f {tflops:.0f} TFLOPS"
        for name in ("expert_up", "expert_down"):  # DeepGEMM's figure is for the mean load: no busiest-rank factor
            t = by[name]
            t.hand_ms /= moe_busiest_load(ctx)
            t.hand_src += ", mean load"
    if ctx.gpu.generation == "hopper" and ctx.m.attention is None:
        t = by["attention core"]
        fwd_tflop = t.tflop * ctx.fwd_share
        t.hand_ms = 1e3 * (fwd_tflop / CUDNN_ATTN_FWD_TFLOPS + FA_BWD_FLOPS_PER_FWD * fwd_tflop / CUDNN_ATTN_BWD_TFLOPS)
        t.hand_src = "FA3 paper Fig. 5-6 cuDNN 518 / 499 TFLOPS/s, bwd 2.5x fwd FLOPs"
    if row_id == DSV3:
        a2a = by["all-to-all"]
        moe = ctx.m.moe
        from parplan.costmodel.moe.moe_dispatch import expected_remote_nodes
        nodes = expected_remote_nodes(moe.num_experts, moe.top_k, ctx.c.ep // 8, moe.max_nodes_per_token)
        per_token = nodes * ctx.h * ctx.tokens_gpu
        a2a.hand_ms = 2e3 * per_token * (1.03125 / (DEEPEP_DISPATCH_GBPS * 1e9) + 2.0 / (DEEPEP_COMBINE_GBPS * 1e9))
        a2a.hand_src = f"DeepEP@ebfe47e 46/45 GB/s, {nodes:.2f} remote nodes, FP8 dispatch"
        hand_compute = sum(t.hand_ms or 0.0 for t in terms if t.tflop and t.hand_ms)
        sm = by["reserved SMs"]
        sm.hand_ms = moe_comm.reserved_sm_time_s(hand_compute, a2a.hand_ms, DSV3_RESERVED_SMS)
        sm.hand_src = "§3.2.2 20/132 SMs beside the hand all-to-all"


def breakdown(row_id: str) -> tuple[list[str], dict]:
    case, a, row = _case(row_id)
    c = plan_choice(case.plan)
    ctx, rates, acts, _lc, _dense, moe_cost = layer_pieces(case.spec, c, case.gpu, a, case.arch)
    lin = linear_terms(ctx, rates)
    lin_s = sum(t.model_ms for t in lin) / 1e3
    sync_s = layer_times(case.spec, c, case.gpu, a, case.arch)[1].host_sync_s
    compute = lin + other_terms(ctx, rates, acts, lin_s, sync_s)
    total_s = sum(t.model_ms for t in compute) / 1e3
    assert abs(total_s - moe_cost.compute_s) <= 1e-9 * moe_cost.compute_s, (total_s, moe_cost.compute_s)
    comm = comm_terms(ctx, moe_cost)
    terms = compute + comm
    hand_values(row_id, ctx, terms)
    out = compare(row)
    lines = [f"{row_id}: {out['plan_summary']}; {case.gpu.name} {ctx.precision}, {ctx.tokens_gpu:.0f} tokens per "
             f"micro-batch on this GPU; predicted {out['ratio']:.3f} x the published throughput",
             f"  {'term':44s} {'M x K x N / what':34s} {'TFLOP':>6s} {'eff':>5s} {'fwd ms':>7s} {'bwd ms':>7s} "
             f"{'model ms':>8s} {'hand ms':>7s}  hand source"]
    for t in terms:
        hand = f"{t.hand_ms:7.2f}" if t.hand_ms is not None else "      -"
        lines.append(f"  {t.name:44s} {t.shape:34s} {t.tflop:6.3f} {t.eff:5.2f} {t.fwd_ms:7.2f} {t.bwd_ms:7.2f} "
                     f"{t.model_ms:8.2f} {hand}  {t.hand_src}")
    lin_hand = [t for t in compute if t.hand_ms is not None]
    lines.append(f"  {'compute (sum, = LayerCost.compute_s)':44s} {'':34s} {sum(t.tflop for t in compute):6.3f} "
                 f"{'':5s} {sum(t.fwd_ms for t in compute):7.2f} {sum(t.bwd_ms for t in compute):7.2f} "
                 f"{1e3 * total_s:8.2f}")
    a2a = comm[0].model_ms
    lines.append(f"  all-to-all : compute {a2a / (1e3 * total_s):.2f} (forward {a2a / 2 / sum(t.fwd_ms for t in compute):.2f})")
    if lin_hand:
        covered = sum(t.model_ms for t in lin_hand)
        hand = sum(t.hand_ms for t in lin_hand)
        lines.append(f"  terms with a hand value: model {covered:.2f} ms, hand {hand:.2f} ms ({covered / hand:.2f} x)")
    pub_step = out["step_time_s"] * out["ratio"]
    per = case.spec.model.num_layers / c.pp * c.num_microbatches
    gap_ms = 1e3 * (pub_step - out["step_time_s"]) / per
    lines.append(f"  step: predicted {out['step_time_s']:.2f} s, published {pub_step:.2f} s: {gap_ms:+.2f} ms per layer "
                 f"and micro-batch ({per:.0f} layer-micro-batches per stage, bubble ignored), "
                 f"{gap_ms * 4096 / ctx.tokens_gpu:+.2f} ms per 4096 tokens")
    return lines, {"compute_ms": 1e3 * total_s, "a2a_ms": a2a}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help=f"also write the report here (e.g. {OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    cmd = "python benchmarks/moe_layer_breakdown.py" + (f" --out {args.out}" if args.out else "")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    lines = [f"# Command: {cmd}", f"# Date: {date} (commit {_git_commit()} + working tree)", "",
             "One MoE layer, one micro-batch, one GPU, committed calibration (costmodel/evaluation/layer_costs.py moe_layer_cost).",
             "eff: share of the precision's dense peak (router and attention: of the BF16 peak). fwd/bwd: the model's",
             "F : B = 1 : 2 split of every compute term; the all-to-all half and half. hand: module docstring sources.", ""]
    for row_id in ROWS:
        lines += breakdown(row_id)[0] + [""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
