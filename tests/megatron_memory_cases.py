"""Configurations compared against Megatron-LM's theoretical memory formula, and the comparison itself.

Shared by ``tests/costmodel/memory/test_megatron_memory.py`` and ``benchmarks/megatron_memory.py``. Each case is built
twice: as Megatron ``args`` for the oracle in :mod:`megatron_theoretical_memory`, and as our
:class:`Spec` + plan (default assumptions preset, ``recompute: selective``, ``sequence_parallel: true``,
Megatron's distributed optimizer -> ``zero_stage: 1`` over DP (cp = 1), none -> ``zero_stage: 0``).
Both sides see the same padded vocabulary. We compare stage 0 of our ledger (the stage Megatron's
formula describes): model states, activations (+ logits when stage 0 is also the last stage, since
Megatron's pp = 1 term includes them), and their sum -- never the usable-memory figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tests.megatron_theoretical_memory import (
    NUM_BYTES_IN_MEGABYTE,
    MegatronArgs,
    activation_bytes_per_layer,
    megatron_sequence_parallel,
    pad_vocab_size,
    report_theoretical_memory,
)

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import choice_costs
from parplan.costmodel.evaluation.evaluate import evaluate, plan_choice, resolve_plan
from parplan.costmodel.spec.hardware import GIB, resolve_gpu
from parplan.costmodel.spec.spec import Spec
from parplan.frameworks.loader import validate_spec

MB_PER_GIB = GIB / NUM_BYTES_IN_MEGABYTE


@dataclass(frozen=True)
class Case:
    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: Optional[int]  # None: MHA
    vocab_size: int  # tokenizer size before Megatron's padding
    swiglu: bool
    tied: bool
    normalization: str
    seq_length: int
    micro_batch_size: int
    tp: int
    pp: int
    dp: int
    num_microbatches: int
    vpp: Optional[int] = None
    distributed_optimizer: bool = True
    num_experts: Optional[int] = None  # MoE: every layer routed, expert width = ffn_hidden_size, EP 1, ETP = TP
    top_k: int = 2

    @property
    def activations_comparable(self) -> bool:
        """Megatron's activation formula has no MoE term (it reads ffn_hidden_size only)."""
        return self.num_experts is None

    @property
    def padded_vocab(self) -> int:
        return pad_vocab_size(self.vocab_size, self.tp)

    @property
    def gqa(self) -> bool:
        return self.num_kv_heads is not None and self.num_kv_heads != self.num_attention_heads

    @property
    def parallel(self) -> str:
        s = f"TP{self.tp} PP{self.pp}"
        if self.vpp:
            s += f" VPP{self.vpp}"
        s += f" DP{self.dp}"
        s += " DO" if self.distributed_optimizer else " no-DO"
        return s


GPT3_175B = dict(num_layers=96, hidden_size=12288, ffn_hidden_size=49152, num_attention_heads=96, num_kv_heads=None,
                 vocab_size=50257, swiglu=False, tied=True, normalization="LayerNorm", seq_length=2048)
GPT_22B = dict(num_layers=48, hidden_size=6144, ffn_hidden_size=24576, num_attention_heads=64, num_kv_heads=None,
               vocab_size=50257, swiglu=False, tied=True, normalization="LayerNorm", seq_length=2048)
LLAMA3_8B = dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8,
                 vocab_size=128256, swiglu=True, tied=False, normalization="RMSNorm", seq_length=8192)
LLAMA3_70B = dict(num_layers=80, hidden_size=8192, ffn_hidden_size=28672, num_attention_heads=64, num_kv_heads=8,
                  vocab_size=128256, swiglu=True, tied=False, normalization="RMSNorm", seq_length=8192)
MIXTRAL_8X7B = dict(num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_kv_heads=8,
                    vocab_size=32000, swiglu=True, tied=False, normalization="RMSNorm", seq_length=4096,
                    num_experts=8, top_k=2)
LLAMA2_13B = dict(num_layers=40, hidden_size=5120, ffn_hidden_size=13824, num_attention_heads=40, num_kv_heads=None,
                  vocab_size=32000, swiglu=True, tied=False, normalization="RMSNorm", seq_length=4096)

CASES: list[Case] = [
    # Narayanan et al. 2021 / Korthikanti et al. 2022 GPT-3 175B: TP8 PP8 on 1024 GPUs, batch 1536.
    Case("GPT-3 175B", **GPT3_175B, micro_batch_size=1, tp=8, pp=8, dp=16, num_microbatches=96),
    # Korthikanti et al. 2022 22B: TP8, micro-batch 4; DP4 without the distributed optimizer (ZeRO-0).
    Case("GPT 22B", **GPT_22B, micro_batch_size=4, tp=8, pp=1, dp=4, num_microbatches=8,
         distributed_optimizer=False),
    # Llama-3 8B on one node (TP1 -> Megatron turns SP off and takes its no-SP branch) and TP2.
    Case("Llama-3 8B", **LLAMA3_8B, micro_batch_size=1, tp=1, pp=1, dp=8, num_microbatches=16),
    Case("Llama-3 8B", **LLAMA3_8B, micro_batch_size=1, tp=2, pp=1, dp=4, num_microbatches=32),
    # Llama-3 70B on 128 GPUs: 1F1B TP8 PP4, and interleaved TP4 PP8 with 5 chunks of 2 layers.
    Case("Llama-3 70B", **LLAMA3_70B, micro_batch_size=1, tp=8, pp=4, dp=4, num_microbatches=32),
    Case("Llama-3 70B", **LLAMA3_70B, micro_batch_size=1, tp=4, pp=8, vpp=5, dp=4, num_microbatches=32),
    # MHA + SwiGLU, PP2 without the distributed optimizer.
    Case("Llama-2 13B", **LLAMA2_13B, micro_batch_size=2, tp=2, pp=2, dp=2, num_microbatches=16,
         distributed_optimizer=False),
    # MoE: weights only (Megatron's formula divides experts by TP and ignores EP, so EP = 1, ETP = TP).
    Case("Mixtral 8x7B", **MIXTRAL_8X7B, micro_batch_size=1, tp=8, pp=4, dp=4, num_microbatches=16),
]


def megatron_args(case: Case) -> MegatronArgs:
    return MegatronArgs(
        num_layers=case.num_layers,
        hidden_size=case.hidden_size,
        ffn_hidden_size=case.ffn_hidden_size,
        num_attention_heads=case.num_attention_heads,
        group_query_attention=case.gqa,
        num_query_groups=case.num_kv_heads if case.gqa else None,
        seq_length=case.seq_length,
        micro_batch_size=case.micro_batch_size,
        padded_vocab_size=case.padded_vocab,
        swiglu=case.swiglu,
        normalization=case.normalization,
        untie_embeddings_and_output_weights=not case.tied,
        tensor_model_parallel_size=case.tp,
        pipeline_model_parallel_size=case.pp,
        virtual_pipeline_model_parallel_size=case.vpp,
        data_parallel_size=case.dp,
        use_distributed_optimizer=case.distributed_optimizer,
        sequence_parallel=megatron_sequence_parallel(True, case.tp),
        recompute_granularity="selective",
        num_experts=case.num_experts,
        moe_ffn_hidden_size=case.ffn_hidden_size if case.num_experts else None,
    )


def our_spec(case: Case, **assumption_overrides) -> Spec:
    return validate_spec({
        "model": {
            "name": case.name,
            "num_layers": case.num_layers,
            "hidden_size": case.hidden_size,
            "ffn_hidden_size": case.ffn_hidden_size,
            "num_attention_heads": case.num_attention_heads,
            "num_kv_heads": case.num_kv_heads,
            "vocab_size": case.padded_vocab,
            "gated_mlp": case.swiglu,
            "tie_embeddings": case.tied,
            **({"moe": {"num_experts": case.num_experts, "top_k": case.top_k,
                        "expert_ffn_hidden_size": case.ffn_hidden_size}} if case.num_experts else {}),
        },
        "training": {"seq_len": case.seq_length,
                     "global_batch_size": case.dp * case.micro_batch_size * case.num_microbatches},
        "cluster": {"gpu": "H100", "num_gpus": case.tp * case.pp * case.dp},
        "assumptions": {"preset": "default", **assumption_overrides},
        "plan": {
            "tp": case.tp, "pp": case.pp, "dp": case.dp, "cp": 1,
            "micro_batch_size": case.micro_batch_size, "num_microbatches": case.num_microbatches,
            "vpp": case.vpp or 1, "schedule": "interleaved" if case.vpp else "1f1b",
            "recompute": "selective", "sequence_parallel": True,
            "zero_stage": 1 if case.distributed_optimizer else 0,
            **({"etp": case.tp} if case.num_experts else {}),
        },
    })


@dataclass(frozen=True)
class Row:
    case: Case
    meg_states_gib: float
    meg_act_gib: float
    meg_total_gib: float
    our_states_gib: float
    our_act_gib: float  # stored layer activations of stage 0 (all in-flight micro-batches)
    our_logits_gib: float  # fp32 logits, only when stage 0 is also the last stage
    our_total_gib: float
    meg_layer_bytes: float  # per layer per micro-batch on one GPU (Megatron's per-layer term / TP)
    our_layer_bytes: float

    @property
    def our_act_total_gib(self) -> float:
        return self.our_act_gib + self.our_logits_gib

    @staticmethod
    def pct(ours: float, theirs: float) -> float:
        return 100.0 * (ours - theirs) / theirs

    @property
    def states_pct(self) -> float:
        return self.pct(self.our_states_gib, self.meg_states_gib)

    @property
    def act_pct(self) -> float:
        return self.pct(self.our_act_total_gib, self.meg_act_gib)

    @property
    def total_pct(self) -> float:
        return self.pct(self.our_total_gib, self.meg_total_gib)

    @property
    def layer_pct(self) -> float:
        return self.pct(self.our_layer_bytes, self.meg_layer_bytes)


def compare(case: Case, **assumption_overrides) -> Row:
    args = megatron_args(case)
    w_mb, a_mb, t_mb = report_theoretical_memory(args, num_microbatches=case.num_microbatches)
    spec = our_spec(case, **assumption_overrides)
    ev = evaluate(spec)
    s0 = ev.stages[0]
    a = resolve_assumptions(spec.assumptions)
    costs = choice_costs(spec, plan_choice(resolve_plan(spec, spec.plan)), resolve_gpu(spec.cluster), a)
    if args.sequence_parallel:
        meg_layer = activation_bytes_per_layer(args) / case.tp
    else:  # Megatron's no-SP branch: 10 + 24/t, times its 5 % overhead
        meg_layer = case.seq_length * case.micro_batch_size * case.hidden_size * (10 + 24 / case.tp) * 1.05
    return Row(
        case=case,
        meg_states_gib=w_mb / MB_PER_GIB,
        meg_act_gib=a_mb / MB_PER_GIB,
        meg_total_gib=t_mb / MB_PER_GIB,
        our_states_gib=s0.model_states_gib,
        our_act_gib=s0.activations_gib,
        our_logits_gib=s0.logits_gib,
        our_total_gib=s0.memory_gib - s0.runtime_buffers_gib,  # the tensor ledger: Megatron counts no NCCL/TE buffers
        meg_layer_bytes=meg_layer,
        our_layer_bytes=(costs.moe or costs.dense).act_bytes if case.num_experts else costs.dense.act_bytes,
    )


def activation_budget(case: Case, **assumption_overrides) -> dict[str, float]:
    """Our stage-0 activations minus Megatron's, split into the named modelling differences (GiB).

    Every entry is one bullet of ``docs/megatron-memory.md``; their sum equals the actual difference
    (the tests check this to 1e-9), so no difference is unexplained.
    """
    args = megatron_args(case)
    spec = our_spec(case, **assumption_overrides)
    a = resolve_assumptions(spec.assumptions)
    ev = evaluate(spec)
    s0 = ev.stages[0]
    s, b, h, f = case.seq_length, case.micro_batch_size, case.hidden_size, case.ffn_hidden_size
    tp, pp, V = case.tp, case.pp, case.padded_vocab
    heads = case.num_attention_heads
    head_dim = h // heads
    q = heads * head_dim
    kv = (case.num_kv_heads or heads) * head_dim
    sp_path = args.sequence_parallel  # Megatron's SP + selective branch; else its no-SP branch
    rep = tp if sp_path else 1  # Megatron divides the replicated 10·h by TP only with SP
    layer_units = s0.layers * s0.inflight_microbatches  # layer-micro-batches stage 0 holds (= L · schedule factor)
    tokens = s * b
    # Megatron's schedule factor applied to the embedding terms (pp in-flight micro-batches).
    if case.vpp:
        factor = 1 + (pp - 1) / (pp * case.vpp)
    elif pp > 1:
        factor = min(1, case.num_microbatches / pp)
    else:
        factor = 1.0
    ours_mlp = (6 if case.swiglu else 4) * f
    meg_mlp = 4 * f if sp_path else 16 * h  # no-SP branch: 24/t = Q,K,V 6h + attn out 2h + MLP 16h (ffn = 4h)
    per_token = {
        "hidden-dropout masks": ((2 * h if a.dropout_masks else 0) - 2 * h) / rep,
        "Q/K/V/O widths (GQA)": (2 * q + 4 * kv + 2 * q - 8 * h) / tp,
        "MLP (gated: 3 tensors of ffn width)": (ours_mlp - meg_mlp) / tp,
        "softmax statistics (fp32 LSE)": (4 * heads if a.flash_attention else 0) / tp,
    }
    budget = {k: v * tokens * layer_units for k, v in per_token.items()}
    emb = (8 * tokens + tokens * h) * pp * factor / tp
    budget["embedding ids + dropout mask"] = -emb * (1.05 if not sp_path else 1.0)
    if pp == 1:
        meg_out = tokens * h * 4 * (1 + V / h) / tp if sp_path else (tokens * V / tp + tokens * h) * 2
        ours_out = s0.logits_gib * GIB
        budget["output layer: logits / final-norm output"] = ours_out - meg_out * (1.05 if not sp_path else 1.0)
    if not sp_path:
        layers_meg = tokens * h * (10 + 24 / tp) * case.num_layers * factor
        budget["no-SP branch 5 % overhead (on layers)"] = -0.05 * layers_meg
    return {k: v / GIB for k, v in budget.items()}


def table(rows: list[Row]) -> str:
    head = ("| # | model | parallelism | Megatron W+G+O | ours | Δ | Megatron act | ours act (+logits) | Δ "
            "| Megatron total | ours total | Δ |")
    sep = "|" + "---|" * 12
    lines = [head, sep]
    for i, r in enumerate(rows, 1):
        act = f"{r.our_act_gib:.2f}" + (f" + {r.our_logits_gib:.2f}" if r.our_logits_gib else "")
        lines.append(
            f"| {i} | {r.case.name} | {r.case.parallel} | {r.meg_states_gib:.2f} | {r.our_states_gib:.2f} "
            f"| {r.states_pct:+.1f} % | {r.meg_act_gib:.2f} | {act} | {r.act_pct:+.1f} % "
            f"| {r.meg_total_gib:.2f} | {r.our_total_gib:.2f} | {r.total_pct:+.1f} % |")
    return "\n".join(lines)


def layer_table(rows: list[Row]) -> str:
    lines = ["| # | model | parallelism | Megatron bytes/layer/µbatch | ours | Δ |", "|" + "---|" * 6]
    for i, r in enumerate(rows, 1):
        lines.append(f"| {i} | {r.case.name} | {r.case.parallel} | {r.meg_layer_bytes / 2**20:.1f} MiB "
                     f"| {r.our_layer_bytes / 2**20:.1f} MiB | {r.layer_pct:+.1f} % |")
    return "\n".join(lines)


__all__ = ["Case", "CASES", "Row", "compare", "activation_budget", "megatron_args", "our_spec", "table", "layer_table"]
