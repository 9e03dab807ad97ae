"""The model and settings of the memory-side dimension tests (HSDP ``zero_replicas``, ``optimizer_states``,
``optimizer_offload_fraction``: test_optimizer_states, test_memory, test_data_parallel, test_offload,
test_legality, test_framework_rules, test_space, test_export, test_service_proto).

The model of every hand-worked case: 4 layers, h = 1024, MLP 4096 (not gated), 8 heads (MHA):
P = 4h² + 2hf + 2h = 4·1048576 + 2·1024·4096 + 2048 = 12 584 960 parameters per layer.
"""

from __future__ import annotations

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, choice_costs
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.spec import Plan, PlanSpec, Spec
from parplan.solver.space import enumerate_choices
from parplan.frameworks.loader import validate_spec

P_LAYER = 12_584_960  # parameters of one layer of MODEL (worked in the module docstring)
MODEL = dict(name="m", num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
             vocab_size=32000, gated_mlp=False)
# line rates, no latency, nothing hidden: every DP term is its bytes over its link's bandwidth
PLAIN = dict(intra_node_bandwidth_efficiency=1.0, inter_node_bandwidth_efficiency=1.0, include_latency=False,
             dp_comm_overlap=0.0, zero_microbatch_comm_overlap=0.0, hierarchical_collectives=False)
NV = 360e9  # H100 NVLink reduce-scatter / all-gather bus bandwidth prior (costmodel/spec/hardware.py NVLINK_BUSBW_GBPS)
NV_AR = 470e9  # H100 NVLink all-reduce with NVLS (the same table); both were the 450 GB/s line rate before issue 19
NET = 50e9  # H100 NIC per GPU per direction


def spec(gpus: int = 8, assumptions: dict | None = None, search: dict | None = None, framework="any",
         gbs: int = 16) -> Spec:
    data = dict(model=MODEL, training=dict(seq_len=2048, global_batch_size=gbs),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus), assumptions={**PLAIN, **(assumptions or {})},
                search=search or {})
    if framework is not None:
        data["framework"] = framework
    return validate_spec(data)


def costs(spec: Spec, **choice):
    c = Choice(**{"tp": 1, "cp": 1, "pp": 1, "dp": spec.cluster.num_gpus, "num_microbatches": 1,
                  "micro_batch_size": 16 // spec.cluster.num_gpus or 1, **choice})
    a = resolve_assumptions(spec.assumptions)
    return choice_costs(spec, c, resolve_gpu(spec.cluster), a)


def space(spec: Spec):
    a = resolve_assumptions(spec.assumptions)
    return enumerate_choices(spec, resolve_gpu(spec.cluster), a).choices


def plan(spec: Spec, **kw) -> Plan:
    return evaluate(spec, PlanSpec(**kw)).plan
