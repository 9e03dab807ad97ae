"""The small dense and MoE models of the DualPipeV, FP8-dispatch and all-to-all-overlap tests (test_dualpipev,
test_moe_comm, test_table_builder, test_service_proto) and their spec in the research space (``framework: any``)."""

from __future__ import annotations

from parplan.costmodel.spec.spec import Spec
from parplan.frameworks.loader import validate_spec

DENSE = dict(name="d", num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8, vocab_size=32000)
MOE = dict(DENSE, name="m", moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, first_dense_layers=1))


def spec(model=DENSE, gpus=8, precision="bf16", gbs=32, **extra) -> Spec:
    return validate_spec(dict(model=model, training=dict(seq_len=2048, global_batch_size=gbs, precision=precision),
                              cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus),
                              **{"framework": "any", **extra}))  # the research space (DualPipe, ZB-H1)
