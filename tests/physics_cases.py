"""The published models the cost-model physics tests work by hand (test_bubble, test_collectives, test_moe_comm,
test_layer_costs, test_architecture, test_context_parallel, test_memory, test_evaluate): Llama-3 70B and
DeepSeek-V3 (config.json), a spec of either on H100 (BF16) or H800 (FP8), the costs of a choice."""

from __future__ import annotations

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.spec import Spec
from parplan.frameworks.loader import validate_spec

LLAMA70B = dict(name="llama3-70b", num_layers=80, hidden_size=8192, ffn_hidden_size=28672, num_attention_heads=64,
                num_kv_heads=8, vocab_size=128256)
DSV3_MLA = dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
DSV3 = dict(name="deepseek-v3", num_layers=61, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
            vocab_size=129280, mla=DSV3_MLA,
            moe=dict(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, num_shared_experts=1, first_dense_layers=3))


# GPT-OSS 120B (openai/gpt-oss-120b config.json): 36 layers, hidden 2880, 64 heads / 8 KV heads of 64, sliding window
# 128 on every other layer (Megatron-Bridge 067f987d models/gpt_oss/gpt_oss_bridge.py:86-88), 128 experts top-4
# with biases and their GLU clamped at 7.0 (config.json swiglu_limit; gpt_oss_bridge.py:62, :83)
GPT_OSS = dict(name="gpt-oss-120b", num_layers=36, hidden_size=2880, ffn_hidden_size=2880, num_attention_heads=64,
               num_kv_heads=8, head_dim=64, vocab_size=201088,
               moe=dict(num_experts=128, top_k=4, expert_ffn_hidden_size=2880, activation_clamp=7.0, expert_bias=True),
               attention=dict(sliding_window=128, full_attention_every=2, sinks=True))


def spec(model: dict, gpus: int, seq: int = 4096, gbs: int = 1024, precision: str = "bf16", **assumptions) -> Spec:
    return validate_spec(dict(model=model, training=dict(seq_len=seq, global_batch_size=gbs, precision=precision),
                              cluster=dict(gpu="H100-SXM-80GB" if precision == "bf16" else "H800", num_gpus=gpus),
                              assumptions=assumptions))


def costs(spec: Spec, choice: Choice):
    return choice_costs(spec, choice, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions))


def dsv3(**assumptions):
    """DeepSeek-V3 on 2048 H800s in FP8 and its published choice: DualPipe over PP 16, EP 64, DeepSeek's selective
    recompute."""
    choice = Choice(tp=1, cp=1, pp=16, dp=128, ep=64, micro_batch_size=1, num_microbatches=120, schedule=Schedule.DUALPIPE,
                    recompute="selective", zero_stage=1, sequence_parallel=False)
    return spec(DSV3, 2048, seq=4096, gbs=15360, precision="fp8", **assumptions), choice
