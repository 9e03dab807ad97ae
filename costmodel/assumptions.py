"""Every assumption of the cost model: a named knob with a default, a source, and presets.

A spec's ``assumptions:`` section names a preset (``default`` or ``textbook``) and may override any
knob by name; an unknown name is an error. ``textbook`` adopts the conventions of seed 003's
``parallel_plan.py`` (its table is reproduced by the tests).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model


class Assumptions(BaseModel):
    """Resolved knobs. Field descriptions state the default's source."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # ---- memory ledger (bytes per parameter: seed 000 §1, Megatron theoretical_memory_usage.py)
    weight_bytes: float = Field(2.0, ge=0, description="bf16 working copy of the weights")
    grad_bytes: float = Field(4.0, ge=0, description="gradient buffer; Megatron accumulates main_grad in fp32 (4); seed 000 counts bf16 (2)")
    optimizer_bytes: float = Field(12.0, ge=0, description="fp32 master weights + Adam m and v (4+4+4), seed 000")
    activation_sbh_coefficient: Optional[float] = Field(
        None, ge=0, description="bytes per s*b*h per layer (before /TP); None: itemized from the architecture "
        "(GQA, gated MLP, flash attention), Korthikanti et al. 2022 Table 2 style; textbook: 34")
    recomputed_layer_sbh_coefficient: float = Field(2.0, ge=0, description="a fully recomputed layer keeps its bf16 input: 2*s*b*h (Korthikanti 2022 §4)")
    flash_attention: bool = Field(True, description="attention scores are never stored (FlashAttention); False adds Korthikanti's 5·a·s/h term, which selective recompute removes")
    dropout_masks: bool = Field(False, description="count 1-byte dropout masks (GPT-3 style); Llama-style models use no dropout")
    logits_bytes_per_element: float = Field(4.0, ge=0, description="fp32 logits s*b*V/TP kept on the last stage (seed 003: 8K x 128K x 4 B = 4 GB); textbook: ignored (0)")
    spread_embedding_evenly: bool = Field(False, description="textbook: weights spread evenly over stages instead of embedding on the first and LM head on the last stage")
    memory_usable_fraction: float = Field(0.95, gt=0, le=1, description="share of HBM usable by tensors (fragmentation); textbook 0.9")
    memory_reserve_gib: float = Field(2.0, ge=0, description="CUDA context, NCCL and workspace buffers per GPU")
    memory_from_nominal_gb: bool = Field(False, description="textbook: read '80 GB' as 80e9 bytes")

    # ---- compute
    matmul_efficiency: float = Field(0.6, gt=0, le=1, description="achieved share of dense peak for layer compute (seed 003: EFF = 0.6)")
    fp8_matmul_efficiency: Optional[float] = Field(0.4, gt=0, le=1, description="achieved share of the FP8 peak for linear layers under FP8 training (casts and scaling included): 0.4 of FP8 peak is 1.33x the BF16 default, the 1.3-1.5x end-to-end FP8 speed-ups of the NeMo 24.07 and torchtitan rows (published-runs.md); None: matmul_efficiency")
    attention_efficiency: Optional[float] = Field(0.33, gt=0, le=1, description="achieved share of the BF16 peak in the attention core (QKᵀ, AV), which runs in BF16 even under FP8 training; FlashAttention-2/3 reach roughly 35-60 % on H100 (Shah et al. 2024, FlashAttention-3 §4); None: matmul_efficiency (textbook)")
    attention_flops_causal_fraction: float = Field(0.5, gt=0, le=1, description="causal masking halves the score/context FLOPs (seed 003: 6*s*h per token per layer)")
    backward_to_forward_ratio: float = Field(2.0, gt=0, description="B = 2F for matmuls (seed 000 bubble example: F=1, B=2)")
    moe_load_imbalance: float = Field(1.1, ge=1, description="busiest expert rank over the mean (seed 003 exercise: 1.1-1.3)")

    # ---- communication (alpha-beta, seed 001 §2.3)
    include_latency: bool = Field(True, description="alpha term of the alpha-beta model; textbook: bandwidth only")
    intra_node_bandwidth_efficiency: float = Field(0.8, gt=0, le=1, description="achieved bus bandwidth over NVLink link rate")
    inter_node_bandwidth_efficiency: float = Field(0.8, gt=0, le=1, description="achieved bus bandwidth over NIC line rate")
    tp_comm_overlap: float = Field(0.0, ge=0, le=1, description="share of TP comm hidden (Megatron --tp-comm-overlap); seed 003: none")
    cp_comm_overlaps_attention: bool = Field(True, description="ring KV exchange overlapped with attention compute (seed 003)")
    overlap_limited_by_compute: bool = Field(True, description="hidden DP/ZeRO traffic cannot exceed the compute it hides behind (per layer: the backward of the last micro-batch for per-step traffic, the layer's fwd+bwd for ZeRO-2/3); textbook: fixed fractions")
    dp_comm_overlap: float = Field(0.8, ge=0, le=1, description="share of DP grad reduce / param gather hidden behind backward (seed 003: 80 %)")
    zero_microbatch_comm_overlap: float = Field(0.8, ge=0, le=1, description="share hidden of the per-micro-batch traffic of ZeRO-2 (gradient reduce-scatter) and ZeRO-3 (parameter all-gathers + reduce-scatter)")
    pp_comm_overlap: float = Field(0.5, ge=0, le=1, description="share of stage-boundary p2p hidden (seed 003: half)")
    ep_comm_overlap: float = Field(0.0, ge=0, le=1, description="share of EP all-to-all hidden without DualPipe")
    ep_comm_overlap_dualpipe: float = Field(0.9, ge=0, le=1, description="share hidden under DualPipe's paired chunks (DeepSeek-V3 §3.2.1)")
    ep_dispatch_bytes: float = Field(2.0, gt=0, description="bytes per element of dispatched tokens (DeepSeek-V3 dispatches FP8: 1)")
    grad_reduce_bytes: float = Field(4.0, gt=0, description="bytes per gradient element in the DP reduce-scatter/all-reduce; Megatron reduces fp32 main grads under bf16; seed 003: 2")
    cp_kv_sharded_by_tp: bool = Field(True, description="each TP rank exchanges only its own KV heads in the CP ring; seed 003 sends the whole K,V row per GPU")
    recompute_repeats_comm: bool = Field(True, description="full recompute repeats the forward TP/CP comm; textbook: not counted")
    tp_requires_nvlink: bool = Field(True, description="TP groups must sit inside one NVLink domain (seed 003: tp <= NODE)")

    # ---- pipeline
    zb_weight_grad_fraction: float = Field(0.5, ge=0, le=1, description="W / B for zero-bubble schedules (ZB paper: W ~ B/2)")
    dualpipe_chunk_overlap: float = Field(1.0, ge=0, le=1, description="share of F hidden in an overlapped F&B chunk: F&B = B + (1-x) F")

    # ---- context parallel
    min_tokens_per_cp_rank: int = Field(1024, ge=1, description="smallest sequence shard per CP rank; textbook 4096 (seed 003 MIN_CP_CHUNK)")


PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "textbook": {
        "grad_bytes": 2.0,
        "activation_sbh_coefficient": 34.0,
        "recomputed_layer_sbh_coefficient": 2.0,
        "logits_bytes_per_element": 0.0,
        "spread_embedding_evenly": True,
        "memory_usable_fraction": 0.9,
        "memory_reserve_gib": 0.0,
        "memory_from_nominal_gb": True,
        "matmul_efficiency": 0.6,
        "attention_efficiency": None,
        "fp8_matmul_efficiency": None,
        "overlap_limited_by_compute": False,
        "moe_load_imbalance": 1.0,
        "include_latency": False,
        "intra_node_bandwidth_efficiency": 1.0,
        "inter_node_bandwidth_efficiency": 1.0,
        "tp_comm_overlap": 0.0,
        "cp_comm_overlaps_attention": True,
        "dp_comm_overlap": 0.8,
        "pp_comm_overlap": 0.5,
        "recompute_repeats_comm": False,
        "grad_reduce_bytes": 2.0,
        "cp_kv_sharded_by_tp": False,
        "min_tokens_per_cp_rank": 4096,
    },
}

KNOBS: tuple[str, ...] = tuple(Assumptions.model_fields)

AssumptionsSpec = create_model(  # the spec's ``assumptions:`` section: a preset plus optional overrides
    "AssumptionsSpec",
    __config__=ConfigDict(extra="forbid", strict=True, frozen=True),
    preset=(Literal[tuple(PRESETS)], "default"),
    **{name: (Optional[field.annotation], None) for name, field in Assumptions.model_fields.items()},
)


def resolve_assumptions(section: Any = None) -> Assumptions:
    """Preset values, then the section's overrides, validated field by field."""
    if section is None:
        section = AssumptionsSpec()
    elif isinstance(section, dict):
        section = AssumptionsSpec.model_validate(section)
    overrides = {k: v for k, v in section.model_dump(exclude={"preset"}).items() if v is not None}
    values = {**PRESETS[section.preset], **overrides}
    return Assumptions.model_validate(values)


def describe_knobs() -> list[tuple[str, Any, str]]:
    """(name, default, description) for every knob: the README table is generated from this."""
    return [(name, f.default, f.description or "") for name, f in Assumptions.model_fields.items()]


__all__ = ["Assumptions", "AssumptionsSpec", "PRESETS", "KNOBS", "resolve_assumptions", "describe_knobs", "ValidationError"]
