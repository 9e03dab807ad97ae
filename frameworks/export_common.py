"""What every exporter shares: the :class:`Export` result, :class:`ExportError`, plan facts and comment headers.

The registry and the overview of targets are in frameworks/export.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from parplan.costmodel.evaluation.evaluate import PlanError, plan_choice
from parplan.costmodel.evaluation.legality import stage_violations
from parplan.costmodel.evaluation.pools import capacity_violations, check_stage_pools
from parplan.costmodel.spec.spec import Plan, Spec


class ExportError(PlanError):
    """The plan does not belong to the spec (GPU count, layer count, batch), so there is nothing to export."""


@dataclass(frozen=True)
class Export:
    """One exported file: its text, the name to save it under, and what the target could not express."""

    target: str
    text: str
    filename: str
    warnings: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------- shared facts


def check_global_batch(spec: Spec, plan: Plan) -> None:
    """The plan's micro-batch size × count × DP must be the spec's global batch."""
    gbs = global_batch_size(plan)
    if gbs != spec.training.global_batch_size:
        raise ExportError(f"plan: micro_batch_size·num_microbatches·dp = {gbs} but training.global_batch_size = "
                          f"{spec.training.global_batch_size}")


def check_plan_matches_spec(spec: Spec, plan: Plan) -> None:
    """The plan must describe this spec's job: same GPU count, layer count and global batch."""
    if plan.num_gpus != spec.cluster.num_gpus:
        raise ExportError(f"plan: tp·cp·pp·dp = {plan.num_gpus} but cluster.num_gpus = {spec.cluster.num_gpus}")
    why = stage_violations(spec, plan_choice(plan), list(plan.stage_layers), list(plan.recompute_layers),
                           plan.pipeline_layout)  # the evaluator's stage rules (equal chunks or the layout)
    if why:
        raise ExportError("plan: " + "; ".join(why))
    check_global_batch(spec, plan)


def check_pool_plan_matches_spec(spec: Spec, plan: Plan) -> None:
    """A plan on several ``cluster.pools``: ``stage_pools`` well formed (one pool per stage, a pool schedule),
    each pool giving its stages at most its GPUs (idle GPUs allowed, costmodel/evaluation/pools.py), the stage rules and the
    global batch as :func:`check_plan_matches_spec` checks them."""
    if plan.stage_pools is None:
        raise ExportError(f"plan.stage_pools: a plan on {len(spec.cluster.pools)} cluster.pools names the pool of "
                          f"each of its {plan.pp} stages")
    c = plan_choice(plan)
    why = check_stage_pools(spec, c, list(plan.stage_pools)) or capacity_violations(spec, c, list(plan.stage_pools))
    why = why or stage_violations(spec, c, list(plan.stage_layers), list(plan.recompute_layers), plan.pipeline_layout)
    if why:
        raise ExportError("plan: " + "; ".join(why))
    check_global_batch(spec, plan)


def cluster_words(spec: Spec) -> str:
    """``64 x H100-SXM-80GB``, or on several pools ``8 x H100-SXM-80GB + 8 x A100-SXM-80GB``."""
    pools = spec.cluster.pools
    if pools is not None and len(pools) > 1:
        return " + ".join(f"{p.num_gpus} x {p.gpu}" for p in pools)
    return f"{spec.cluster.num_gpus} x {spec.cluster.gpu}"


def global_batch_size(plan: Plan) -> int:
    """Sequences per optimizer step: micro-batch × micro-batches per step × data-parallel replicas."""
    return plan.micro_batch_size * plan.num_microbatches * plan.dp


def plan_summary_line(plan: Plan) -> str:
    """One line naming every plan field (a comment at the top of each export)."""
    return (f"tp={plan.tp} cp={plan.cp} pp={plan.pp} dp={plan.dp} ep={plan.ep} etp={plan.etp} "
            f"micro_batch_size={plan.micro_batch_size} num_microbatches={plan.num_microbatches} vpp={plan.vpp} "
            f"schedule={plan.schedule} stage_layers={plan.stage_layers} recompute={plan.recompute} "
            f"recompute_layers={plan.recompute_layers} zero_stage={plan.zero_stage} "
            f"sequence_parallel={str(plan.sequence_parallel).lower()}"
            + (f" stage_pools={plan.stage_pools}" if plan.stage_pools is not None else ""))


def model_feature_warnings(spec: Spec, target: str, where: str, mtp: bool = True) -> list[str]:
    """The model features the spec has that ``target``'s file cannot carry (``where``: what defines the model
    there): a warning each, so MLA or MTP is never dropped silently (issue 24.7)."""
    m, out = spec.model, []
    if m.mla is not None:
        a = m.mla
        out.append(f"model.mla (q_lora_rank {a.q_lora_rank}, kv_lora_rank {a.kv_lora_rank}, qk_nope_head_dim "
                   f"{a.qk_nope_head_dim}, qk_rope_head_dim {a.qk_rope_head_dim}, v_head_dim {a.v_head_dim}): "
                   f"{target} takes multi-head latent attention from {where}, not from this file; use a model "
                   f"with these widths there, or the run builds a different model than planned")
    if m.attention is not None:
        a = m.attention
        out.append(f"model.attention (sliding_window {a.sliding_window}, full_attention_every "
                   f"{a.full_attention_every}, sinks {str(a.sinks).lower()}): {target} takes the attention variant "
                   f"from {where}, not from this file; use a model with this window and these sinks there")
    if m.moe is not None and (m.moe.activation_clamp is not None or m.moe.expert_bias):
        out.append(f"model.moe (activation_clamp {m.moe.activation_clamp}, expert_bias "
                   f"{str(m.moe.expert_bias).lower()}): {target} takes the experts' activation clamp and biases from "
                   f"{where}, not from this file; use a model with this clamp and these biases there")
    if m.num_mtp_layers and mtp:
        out.append(f"model.num_mtp_layers {m.num_mtp_layers}: {target} takes multi-token prediction from {where}, "
                   f"not from this file; enable {m.num_mtp_layers} MTP module(s) on the last stage there")
    return out


def model_family_words(spec: Spec) -> str:
    """The architecture the cost model prices (costmodel/compute/architecture.py), in words, for a target whose file cannot
    state it (model code, a flavour): RMSNorm, rotary position embeddings (no learned position table is counted),
    linear biases only with ``model.moe.expert_bias``, the MLP, tied or untied output weights, the attention."""
    m = spec.model
    attention = ("multi-head latent attention" if m.mla is not None else
                 f"{m.kv_heads} KV heads (GQA)" if m.kv_heads != m.num_attention_heads else "multi-head attention")
    return ", ".join(["RMSNorm", "rotary position embeddings",
                      "linear biases" if m.moe is not None and m.moe.expert_bias else "no linear biases",
                      "SwiGLU MLP" if m.gated_mlp else "GeLU MLP",
                      "tied output weights" if m.tie_embeddings else "untied output weights", attention])


def comment_block(lines: list[str], prefix: str = "# ") -> str:
    return "".join(f"{prefix}{line}\n" if line else prefix.rstrip() + "\n" for line in lines)


def header_lines(spec: Spec, plan: Plan, what: str, warnings: list[str]) -> list[str]:
    """The comment header every export starts with: what it is, the plan, the warnings."""
    lines = [f"{what} -- generated by parplan (solver-cli) for model '{spec.model.name}' on "
             f"{cluster_words(spec)}",
             f"plan: {plan_summary_line(plan)}"]
    if warnings:
        lines.append(f"WARNINGS ({len(warnings)}): what this target cannot express as planned")
        lines.extend(f"  - {w}" for w in warnings)
    else:
        lines.append("every plan field is expressed exactly")
    return lines


__all__ = ["Export", "ExportError", "check_plan_matches_spec", "check_pool_plan_matches_spec", "cluster_words",
           "global_batch_size", "model_chunk_layers",
           "plan_summary_line", "header_lines", "comment_block", "model_feature_warnings", "model_family_words"]
