"""What a stage holds or spends besides its layers: the first stage's embedding, the last stage's LM head,
logits and multi-token prediction modules, the stage-boundary p2p and buffers, and the per-stage working set
(the pieces of :func:`parplan.costmodel.evaluation.choice.choice_costs` after the layers; sources by piece below).
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.communication.context_parallel import CpComm
from parplan.costmodel.evaluation.activations import Activations
from parplan.costmodel.evaluation.choice_context import ChoiceContext
from parplan.costmodel.evaluation.gemm_rates import GemmRates
from parplan.costmodel.evaluation.layer_costs import LayerCost, dense_layer_params_gpu, moe_params_gpu
from parplan.costmodel.schedules.paired_overlap import paired_pass_share
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule


@dataclass(frozen=True)
class Mtp:
    """The last stage's multi-token prediction modules, per micro-batch (times) or resident (bytes)."""

    time_s: float
    flops: float
    bytes: float
    dp_s: float


NO_MTP = Mtp(0.0, 0.0, 0.0, 0.0)


def mtp_costs(ctx: ChoiceContext, rates: GemmRates, dense: LayerCost, moe: LayerCost | None, head_s: float,
              last_stage_inflight: float) -> Mtp:
    """Multi-token prediction on the last stage (DeepSeek-V3 §2.2; its §3.2.3 puts the MTP modules with the
    output head): per module the 2h -> h projection, one transformer layer and the shared head again, with their
    logits. Its time is all reported as the last stage's compute (the stage-affine interface has no per-stage
    communication slot); its activations are held for the last stage's in-flight micro-batches
    (``last_stage_inflight``: a DualPipe rank weighs each of its two stages' activations by 1/2)."""
    n_mtp = ctx.m.num_mtp_layers
    if not n_mtp:
        return NO_MTP
    a, c, arch, dp, h = ctx.a, ctx.c, ctx.arch, ctx.dp, ctx.h
    dense_grp = ctx.comm.dense_group
    mtp_layer = moe if (arch.mtp_layer_is_moe and moe is not None) else dense
    proj_gpu = 2 * h * h / c.tp
    proj_s = ctx.tokens_gpu * 6 * 2 * h * h * rates.spf([(1.0, ctx.M, 2 * h, h / c.tp)])
    mtp_act = mtp_layer.act_bytes + ctx.tokens_tp_group * 2 * (2 * h) / (c.tp if ctx.sp else 1)
    return Mtp(
        time_s=n_mtp * (mtp_layer.time_s + proj_s + head_s),
        flops=n_mtp * ctx.tokens_gpu * arch.mtp_flops(ctx.seq, a.attention_flops_causal_fraction),
        bytes=n_mtp * (mtp_layer.states_bytes + dp.states(arch.mtp_module_params / c.tp, dense_grp)
                       + dp.fp8_weight_cache(proj_gpu) + last_stage_inflight * mtp_act),
        dp_s=n_mtp * (mtp_layer.dp_s + dp.dp_exposed([(proj_gpu, dense_grp)], proj_s)),
    )


def end_stage_costs(ctx: ChoiceContext, rates: GemmRates, dense: LayerCost, moe: LayerCost | None,
                    last_stage_inflight: float) -> dict[str, float]:
    """First / last stage extras (the ``ChoiceCosts`` fields ``first_extra_*``, ``last_extra_*``, ``logits_bytes``,
    ``retained_output_bytes``): the embedding on the first stage, the LM head, its logits (fp32, vocabulary-sharded
    by TP; seed 003) and the MTP modules on the last; the textbook spread of both over the layers
    (``spread_embedding_evenly``) leaves them none here."""
    a, c, m, arch, dp, comm = ctx.a, ctx.c, ctx.m, ctx.arch, ctx.dp, ctx.comm
    dense_grp = comm.dense_group
    emb_gpu = arch.embedding_params / c.tp
    head_gpu = arch.head_params / c.tp
    if m.tie_embeddings and c.pp > 1:
        head_gpu += arch.embedding_params / c.tp  # the last stage keeps its own copy for the output layer
    if a.spread_embedding_evenly:
        first_params = last_params = 0.0  # textbook: folded into the per-layer weights (choice._spread_embedding)
    else:
        first_params, last_params = emb_gpu, head_gpu
    head_flops = ctx.tokens_gpu * arch.head_flops
    head_s = head_flops * rates.spf_bf16([(1.0, ctx.M, ctx.h, m.vocab_size / c.tp)])  # BF16 under FP8 (§3.3.1)
    logit_elements = ctx.tokens_tp_group * m.vocab_size / c.tp  # per micro-batch, vocabulary-sharded by TP
    logits = logit_elements * a.logits_bytes_per_element
    mtp = mtp_costs(ctx, rates, dense, moe, head_s, last_stage_inflight)
    if m.num_mtp_layers:
        logits *= 1 + m.num_mtp_layers
    return dict(
        first_extra_time_s=comm.exposed(first_params * dp.zero_comm_per_param(dense_grp),
                                        a.zero_microbatch_comm_overlap, 0.0),
        last_extra_time_s=head_s + mtp.time_s + comm.exposed(last_params * dp.zero_comm_per_param(dense_grp),
                                                             a.zero_microbatch_comm_overlap, head_s),
        last_extra_compute_s=head_s + mtp.time_s,
        first_extra_bytes=dp.states(first_params, dense_grp),
        last_extra_bytes=dp.states(last_params, dense_grp) + mtp.bytes,
        logits_bytes=logits,
        retained_output_bytes=torch_pipelining_bytes(c, a, ctx.seq, ctx.h, m.vocab_size)[1],  # bf16 outputs
        first_extra_dp_s=dp.dp_exposed([(first_params, dense_grp)], 0.0),
        last_extra_dp_s=dp.dp_exposed([(last_params, dense_grp)], head_s) + mtp.dp_s,
        first_extra_flops=0.0,
        last_extra_flops=head_flops + mtp.flops,
    )


def pipeline_boundary(ctx: ChoiceContext) -> tuple[float, float]:
    """(p2p seconds per micro-batch, stage-boundary tensor bytes): each model chunk of a rank sends its
    boundary activation both ways (seed 003: act_bytes / tp each way), minus the hidden share; the boundary
    tensor is what ``torch.distributed.pipelining`` buffers (sequence-sharded under SP; 0 for Megatron's runtime,
    ChoiceCosts.pipeline_buffer_bytes)."""
    a, c = ctx.a, ctx.c
    tokens_tp_group, h = ctx.tokens_tp_group, ctx.h
    Lp = ctx.comm.links["pp"]
    p2p_bytes = tokens_tp_group * h * 2 / c.tp  # seed 003: act_bytes / tp each way
    p2p = 0.0
    if c.pp > 1:
        units = PipelineUnits.of(c)
        chunks = units.chunks_per_stage  # model chunks per rank, each sends both ways
        # DualPipe / DualPipeV: hidden in the F&B steps (DeepSeek-V3 §3.2.1), the fitted share of every schedule in the
        # lone chunks of the fill and drain (paired_overlap.paired_pass_share); DualPipe's own share where set
        hidden = a.pp_comm_overlap
        if units.schedule is Schedule.DUALPIPE and a.dualpipe_pp_comm_overlap is not None:
            hidden = a.dualpipe_pp_comm_overlap
        elif units.schedule.paired:
            paired = paired_pass_share(units.schedule, c.pp, c.num_microbatches)
            hidden = paired + (1.0 - paired) * a.pp_comm_overlap
        p2p = 2 * chunks * (Lp.latency_s + p2p_bytes / Lp.bandwidth_Bps) * (1 - hidden)
    return p2p, torch_pipelining_bytes(c, a, ctx.seq, h, ctx.m.vocab_size)[0]


def torch_pipelining_bytes(c, a, seq_len: int, hidden_size: int, vocab_size: int) -> tuple[float, float]:
    """(stage-boundary tensor, last-stage output) of one micro-batch that ``torch.distributed.pipelining`` buffers
    (ChoiceCosts.pipeline_buffer_bytes): the bf16 b·s·h activation of the TP group, sequence-sharded under SP, and
    the bf16 logits, vocabulary-sharded by TP; (0, 0) for Megatron's runtime or without PP. Read by
    :func:`pipeline_boundary`, :func:`end_stage_costs` and the solver's quick memory bound (solver/bounds.py)."""
    if not (c.pp > 1 and a.pipeline_runtime == "torch"):
        return 0.0, 0.0
    tokens_tp_group = c.micro_batch_size * (seq_len // c.cp)  # ChoiceContext.of's
    logit_elements = tokens_tp_group * vocab_size / c.tp  # end_stage_costs'
    return tokens_tp_group * hidden_size * 2 / (c.tp if c.sequence_parallel_on else 1), logit_elements * 2


def stage_workspace(ctx: ChoiceContext, acts: Activations, cp: CpComm) -> tuple[float, float]:
    """(workspace, recompute workspace) bytes: the per-stage working set, held once whatever the layer count: the
    activation gradients of the layer running its backward, a fully recomputed layer's activations regenerated for
    its backward (only on a stage that recomputes a layer,
    ChoiceCosts.stage_workspace_bytes), the CP all-gather's gathered K,V, and ZeRO-3's gathered weights and
    unreduced gradients."""
    a, c = ctx.a, ctx.c
    workspace = recompute_workspace = 0.0
    if c.recompute == "full" and not acts.per_op_sac:
        recompute_workspace = a.recompute_workspace_layers * acts.full_layer_bytes
    elif acts.per_op_sac:  # every layer checkpoints per op: the regenerated layer is always there
        workspace += a.recompute_workspace_layers * acts.full_layer_bytes
    workspace += cp.workspace_bytes  # CP all-gather: the gathered K,V (and dK,dV) of the layer in flight
    # the activation gradients alive during one layer's backward (Assumptions.backward_gradient_workspace_layers)
    workspace += a.backward_gradient_workspace_layers * acts.full_layer_bytes
    if c.moe_a2a_overlap:
        # Megatron-Core's combined 1F1B runs the next micro-batch's layer i forward beside the previous one's layer
        # L-1-i backward (megatron/core/models/common/model_chunk_schedule_plan.py@core_v0.15.3, the
        # overlapped_layers loop): at most one layer's stored activations more than the in-flight count
        per_token = acts.moe_per_token if ctx.m.moe is not None else acts.dense_per_token
        workspace += ctx.tokens_tp_group * (per_token + acts.stored_gathered)
    if ctx.zero == 3:
        dense_params_gpu = dense_layer_params_gpu(ctx)
        if ctx.m.moe is None:
            layer_params_gpu = dense_params_gpu
        else:
            nonexpert_gpu, expert_gpu = moe_params_gpu(ctx)
            layer_params_gpu = max(dense_params_gpu, nonexpert_gpu + expert_gpu)
        workspace += a.zero3_unsharded_layers * layer_params_gpu * (a.weight_bytes + a.grad_bytes)
    return workspace, recompute_workspace
