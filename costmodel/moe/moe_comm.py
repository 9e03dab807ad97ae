"""MoE expert-parallel communication choices: FP8 dispatch and the EP all-to-all overlap (search dimensions).

**FP8 dispatch** (``Plan.moe_fp8_dispatch``): the dispatched tokens travel as FP8 (1 byte per element)
with one fp32 scale per 128 elements; the combine stays BF16 (2 bytes). Sources: DeepSeek-V3 report
(arXiv 2412.19437) §3.3.2 ("we quantize the activation before MoE up-projections into FP8 and then apply
dispatch components ... the combine components ... retained in BF16") and its 1x128 tile-wise activation
scales (§3.3.1); deepseek-ai/DeepEP@dd758caf451848bd150e1046af3d0a73e5fff38d ``deep_ep/buffers/legacy.py:342``
(``dispatch``: ``x`` is BF16 ``[num_tokens, hidden]`` or the FP8 pair, ``torch.float8_e4m3fn`` ``[num_tokens,
hidden]`` with fp32 scales ``[num_tokens, hidden // 128]``) and ``tests/legacy/test_internode.py:239``
(``fp8_factor = (1 + 4 / 128) / 2``, the FP8 dispatch's bytes against BF16's). So ``1 + 4/128 = 1.03125``
bytes per element;
Megatron-Core's MXFP8 wire format (one E8M0 byte per 32 elements,
NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553 megatron/core/transformer/transformer_config.py:997
``moe_dispatch_fwd_dtype: 'bf16' | 'mxfp8'``) carries the same ``1 + 1/32``. Off, the dispatch costs
``assumptions.ep_dispatch_bytes`` per element (today's knob).

**EP all-to-all overlap** (``Plan.moe_a2a_overlap``): Megatron-Core's ``--overlap-moe-expert-parallel-comm``
co-schedules one micro-batch's forward with another's backward, layer by layer, so that "EP A2A in forward
step is hidden by the attention/mlp computation in the backward step, and vice versa" (same commit,
megatron/core/pipeline_parallel/combined_1f1b.py ``combined_1f1b_schedule_for_no_pipelining``) -- the
pairing of DualPipe's F&B chunk, so what stays exposed is what the paired compute cannot cover
(costmodel/schedules/paired_overlap.py ``same_chunk_exposed_s``; its warm-up forwards and cool-down backwards run alone,
``combined_1f1b_exposed_s``). Off, ``assumptions.ep_comm_overlap``.
The overlapped schedules (DualPipe, DualPipeV, this flag) pay for it: the dispatch/combine kernels hold SMs
(:func:`sm_fraction`: the dispatcher's SMs over the GPU's; DeepSeek-V3 §3.2.2: 20 of the H800's 132) while they
run, which slows the MoE layers' compute beside them (:func:`reserved_sm_time_s`); the other schedules run the
all-to-all between computations and slow nothing.
Its memory: with virtual pipeline stages Megatron "schedule[s] one extra micro-batch forward step before
the 1f1b stages" (megatron/core/pipeline_parallel/schedules.py:966-970: ``num_warmup_microbatches + 1``);
with pp 1 the combined schedule runs micro-batch i+1's forward beside micro-batch i's backward (combined_1f1b.py,
phases 1..n-1) layer by layer, layer j's forward beside layer L-1-j's backward
(megatron/core/models/common/model_chunk_schedule_plan.py@core_v0.15.3, the ``overlapped_layers`` loop): as the
backward frees micro-batch i's layers from the top the forward fills micro-batch i+1's from the bottom, so a stage
holds one micro-batch and one layer (the layer: stage_extras.stage_workspace), not two micro-batches.
Requirements (transformer_config.py:3002-3046): ``pipeline_model_parallel_size > 1`` needs
``virtual_pipeline_model_parallel_size`` (parplan: pp 1 or schedule interleaved), expert parallelism > 1,
no full recomputation, at most one MTP layer, PyTorch >= 2.6. Introduced for pp 1 in ae1c8829 (2025-08-01,
first in core_v0.14.0) and for interleaved pipelines in d7bf5aaa (2025-08-26, first in core_v0.15.0).
"""

from __future__ import annotations

from parplan.costmodel.schedules.schedule import Schedule

FP8_DISPATCH_BYTES_PER_ELEMENT = 1.0 + 4.0 / 128  # FP8 e4m3 payload + one fp32 scale per 128 elements (DeepEP)
COMBINE_BYTES_PER_ELEMENT = 2.0  # the combine stays BF16


def dispatch_bytes_per_element(fp8_dispatch: bool, knob_bytes: float) -> float:
    """Bytes per dispatched element: FP8 with its per-128 scales, else the ``ep_dispatch_bytes`` knob."""
    return FP8_DISPATCH_BYTES_PER_ELEMENT if fp8_dispatch else knob_bytes


def overlaps_all_to_all(schedule: Schedule, a2a_overlap: bool) -> bool:
    """The schedule hides the EP all-to-all behind a paired chunk's compute: DualPipe, DualPipeV, or
    Megatron-Core's combined 1F1B (``plan.moe_a2a_overlap``); only these reserve SMs for it."""
    return schedule.paired or a2a_overlap


# DeepEP Buffer.num_sms (deepseek-ai/DeepEP@ebfe47e deep_ep/buffer.py:30), Megatron-Core's default for its flex dispatcher
DEFAULT_DISPATCHER_SMS = 20
REFERENCE_SM_COUNT = 132  # the H800's, for a GPU whose SM count the catalog does not hold


def sm_fraction(a, gpu, moe) -> float:
    """Share of the SMs an overlapped schedule reserves for dispatch/combine: the ``ep_comm_sm_fraction`` knob
    where set; else the dispatcher's SMs (``moe.dispatcher_sms``, default 20: DeepEP's and DeepSeek-V3's §3.2.2)
    over the GPU's (``gpu.sm_count``, costmodel/spec/hardware.py SM_COUNT; 132 where unknown): 20/132 on H800 and H100,
    20/148 on B200, Megatron-Bridge's HybridEP recipes' 32 (perf_recipes/_common.py:88-89 at 067f987d) 32/132."""
    if a.ep_comm_sm_fraction is not None:
        return a.ep_comm_sm_fraction
    sms = moe.dispatcher_sms or DEFAULT_DISPATCHER_SMS
    total = gpu.sm_count or REFERENCE_SM_COUNT
    return min(sms / total, 0.99)


def reserved_sm_time_s(compute_s: float, comm_s: float, fraction: float) -> float:
    """Extra compute time of a layer whose ``compute_s`` (on every SM) runs beside ``comm_s`` of dispatch/combine
    kernels that hold ``fraction`` of the SMs while they run.

    The SMs are held for a kernel's duration, not for the step: DeepEP's high-throughput kernels launch
    ``config.num_sms`` blocks on the communication stream (deepseek-ai/DeepEP@ebfe47e csrc/deep_ep.cpp:477,
    ``Buffer.num_sms = 20`` at deep_ep/buffer.py:30, DeepSeek-V3 §3.2.2's 20 SMs) and free them when the transfer
    ends. So the compute runs on 1 - x of the SMs for the ``comm_s`` beside it and on all of them after:
    C + x·A when the compute outlasts the communication ((1 - x)·A <= C), else C/(1 - x) - C (the compute runs
    entirely beside it): x·min(A, C/(1 - x))."""
    if fraction <= 0 or compute_s <= 0:
        return 0.0
    return fraction * min(comm_s, compute_s / (1.0 - fraction))


def a2a_overlap_violations(c, num_mtp_layers: int, is_moe: bool) -> list[str]:
    """Megatron-Core's requirements of --overlap-moe-expert-parallel-comm (transformer_config.py:3002-3046)."""
    if not c.moe_a2a_overlap:
        return []
    out = []
    if not is_moe or c.ep <= 1:
        out.append("moe_a2a_overlap needs expert parallelism (ep > 1)")
    if c.pp > 1 and c.schedule is not Schedule.INTERLEAVED:
        out.append(f"moe_a2a_overlap with pp > 1 needs schedule interleaved (virtual pipeline stages; got "
                   f"{c.schedule})")
    if c.recompute == "full":
        out.append("moe_a2a_overlap cannot run with full recomputation")
    if num_mtp_layers > 1:
        out.append(f"moe_a2a_overlap supports at most one MTP layer (model has {num_mtp_layers})")
    return out


def fp8_dispatch_violations(c, precision: str, is_moe: bool) -> list[str]:
    """FP8 dispatch feeds FP8 expert GEMMs (DeepSeek-V3 §3.3.2; Megatron's MXFP8 payload is consumed by the
    grouped GEMM directly): it needs FP8 training and something to dispatch."""
    if not c.moe_fp8_dispatch:
        return []
    out = []
    if not is_moe or c.ep <= 1:
        out.append("moe_fp8_dispatch needs expert parallelism (ep > 1)")
    if precision != "fp8":
        out.append("moe_fp8_dispatch needs training.precision fp8 (the FP8 tokens feed FP8 expert GEMMs)")
    return out
