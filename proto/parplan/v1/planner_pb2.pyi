from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Schedule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_UNSPECIFIED: _ClassVar[Schedule]
    SCHEDULE_1F1B: _ClassVar[Schedule]
    SCHEDULE_INTERLEAVED: _ClassVar[Schedule]
    SCHEDULE_ZB_H1: _ClassVar[Schedule]
    SCHEDULE_DUALPIPE: _ClassVar[Schedule]
    SCHEDULE_DUALPIPEV: _ClassVar[Schedule]

class Recompute(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECOMPUTE_UNSPECIFIED: _ClassVar[Recompute]
    RECOMPUTE_NONE: _ClassVar[Recompute]
    RECOMPUTE_SELECTIVE: _ClassVar[Recompute]
    RECOMPUTE_FULL: _ClassVar[Recompute]

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    PRECISION_BF16: _ClassVar[Precision]
    PRECISION_FP8: _ClassVar[Precision]

class Objective(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OBJECTIVE_UNSPECIFIED: _ClassVar[Objective]
    OBJECTIVE_MAX_THROUGHPUT: _ClassVar[Objective]
    OBJECTIVE_MIN_MEMORY: _ClassVar[Objective]
    OBJECTIVE_MIN_GPUS: _ClassVar[Objective]

class AssumptionPreset(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ASSUMPTION_PRESET_UNSPECIFIED: _ClassVar[AssumptionPreset]
    ASSUMPTION_PRESET_DEFAULT: _ClassVar[AssumptionPreset]
    ASSUMPTION_PRESET_TEXTBOOK: _ClassVar[AssumptionPreset]

class Method(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METHOD_UNSPECIFIED: _ClassVar[Method]
    METHOD_CPSAT: _ClassVar[Method]
    METHOD_EXHAUSTIVE: _ClassVar[Method]

class ParetoAxis(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PARETO_AXIS_UNSPECIFIED: _ClassVar[ParetoAxis]
    PARETO_AXIS_MEMORY: _ClassVar[ParetoAxis]
    PARETO_AXIS_GPUS: _ClassVar[ParetoAxis]

class PlanStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAN_STATUS_UNSPECIFIED: _ClassVar[PlanStatus]
    PLAN_STATUS_OPTIMAL: _ClassVar[PlanStatus]
    PLAN_STATUS_FEASIBLE: _ClassVar[PlanStatus]
    PLAN_STATUS_INFEASIBLE: _ClassVar[PlanStatus]
    PLAN_STATUS_UNKNOWN: _ClassVar[PlanStatus]

class Framework(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FRAMEWORK_UNSPECIFIED: _ClassVar[Framework]
    FRAMEWORK_MEGATRON_CORE: _ClassVar[Framework]
    FRAMEWORK_MEGATRON_BRIDGE: _ClassVar[Framework]
    FRAMEWORK_TORCHTITAN: _ClassVar[Framework]
    FRAMEWORK_DEEPSPEED: _ClassVar[Framework]
    FRAMEWORK_ANY: _ClassVar[Framework]
    FRAMEWORK_MEGATRON_LM: _ClassVar[Framework]
    FRAMEWORK_LLM_FOUNDRY: _ClassVar[Framework]

class RankBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RANK_BY_UNSPECIFIED: _ClassVar[RankBy]
    RANK_BY_POINT: _ClassVar[RankBy]
    RANK_BY_UPPER: _ClassVar[RankBy]

class StageSplit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STAGE_SPLIT_UNSPECIFIED: _ClassVar[StageSplit]
    STAGE_SPLIT_PER_STAGE: _ClassVar[StageSplit]
    STAGE_SPLIT_FIRST_LAST: _ClassVar[StageSplit]
    STAGE_SPLIT_EVEN: _ClassVar[StageSplit]

class CpCommType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CP_COMM_TYPE_UNSPECIFIED: _ClassVar[CpCommType]
    CP_COMM_TYPE_P2P: _ClassVar[CpCommType]
    CP_COMM_TYPE_A2A: _ClassVar[CpCommType]
    CP_COMM_TYPE_ALLGATHER: _ClassVar[CpCommType]
    CP_COMM_TYPE_A2A_P2P: _ClassVar[CpCommType]

class MoeDispatcher(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MOE_DISPATCHER_UNSPECIFIED: _ClassVar[MoeDispatcher]
    MOE_DISPATCHER_ALLTOALL: _ClassVar[MoeDispatcher]
    MOE_DISPATCHER_ALLGATHER: _ClassVar[MoeDispatcher]
    MOE_DISPATCHER_FLEX: _ClassVar[MoeDispatcher]

class MoeDispatcherBackend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MOE_DISPATCHER_BACKEND_UNSPECIFIED: _ClassVar[MoeDispatcherBackend]
    MOE_DISPATCHER_BACKEND_DEEPEP: _ClassVar[MoeDispatcherBackend]
    MOE_DISPATCHER_BACKEND_HYBRIDEP: _ClassVar[MoeDispatcherBackend]
SCHEDULE_UNSPECIFIED: Schedule
SCHEDULE_1F1B: Schedule
SCHEDULE_INTERLEAVED: Schedule
SCHEDULE_ZB_H1: Schedule
SCHEDULE_DUALPIPE: Schedule
SCHEDULE_DUALPIPEV: Schedule
RECOMPUTE_UNSPECIFIED: Recompute
RECOMPUTE_NONE: Recompute
RECOMPUTE_SELECTIVE: Recompute
RECOMPUTE_FULL: Recompute
PRECISION_UNSPECIFIED: Precision
PRECISION_BF16: Precision
PRECISION_FP8: Precision
OBJECTIVE_UNSPECIFIED: Objective
OBJECTIVE_MAX_THROUGHPUT: Objective
OBJECTIVE_MIN_MEMORY: Objective
OBJECTIVE_MIN_GPUS: Objective
ASSUMPTION_PRESET_UNSPECIFIED: AssumptionPreset
ASSUMPTION_PRESET_DEFAULT: AssumptionPreset
ASSUMPTION_PRESET_TEXTBOOK: AssumptionPreset
METHOD_UNSPECIFIED: Method
METHOD_CPSAT: Method
METHOD_EXHAUSTIVE: Method
PARETO_AXIS_UNSPECIFIED: ParetoAxis
PARETO_AXIS_MEMORY: ParetoAxis
PARETO_AXIS_GPUS: ParetoAxis
PLAN_STATUS_UNSPECIFIED: PlanStatus
PLAN_STATUS_OPTIMAL: PlanStatus
PLAN_STATUS_FEASIBLE: PlanStatus
PLAN_STATUS_INFEASIBLE: PlanStatus
PLAN_STATUS_UNKNOWN: PlanStatus
FRAMEWORK_UNSPECIFIED: Framework
FRAMEWORK_MEGATRON_CORE: Framework
FRAMEWORK_MEGATRON_BRIDGE: Framework
FRAMEWORK_TORCHTITAN: Framework
FRAMEWORK_DEEPSPEED: Framework
FRAMEWORK_ANY: Framework
FRAMEWORK_MEGATRON_LM: Framework
FRAMEWORK_LLM_FOUNDRY: Framework
RANK_BY_UNSPECIFIED: RankBy
RANK_BY_POINT: RankBy
RANK_BY_UPPER: RankBy
STAGE_SPLIT_UNSPECIFIED: StageSplit
STAGE_SPLIT_PER_STAGE: StageSplit
STAGE_SPLIT_FIRST_LAST: StageSplit
STAGE_SPLIT_EVEN: StageSplit
CP_COMM_TYPE_UNSPECIFIED: CpCommType
CP_COMM_TYPE_P2P: CpCommType
CP_COMM_TYPE_A2A: CpCommType
CP_COMM_TYPE_ALLGATHER: CpCommType
CP_COMM_TYPE_A2A_P2P: CpCommType
MOE_DISPATCHER_UNSPECIFIED: MoeDispatcher
MOE_DISPATCHER_ALLTOALL: MoeDispatcher
MOE_DISPATCHER_ALLGATHER: MoeDispatcher
MOE_DISPATCHER_FLEX: MoeDispatcher
MOE_DISPATCHER_BACKEND_UNSPECIFIED: MoeDispatcherBackend
MOE_DISPATCHER_BACKEND_DEEPEP: MoeDispatcherBackend
MOE_DISPATCHER_BACKEND_HYBRIDEP: MoeDispatcherBackend

class Spec(_message.Message):
    __slots__ = ("model", "training", "cluster", "search", "assumptions", "objective", "target_step_time_s", "target_tokens_per_s", "plan", "framework")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    ASSUMPTIONS_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    TARGET_STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    search: SearchSpec
    assumptions: AssumptionsSpec
    objective: Objective
    target_step_time_s: float
    target_tokens_per_s: float
    plan: PlanSpec
    framework: FrameworkChoice
    def __init__(self, model: _Optional[_Union[ModelSpec, _Mapping]] = ..., training: _Optional[_Union[TrainingSpec, _Mapping]] = ..., cluster: _Optional[_Union[ClusterSpec, _Mapping]] = ..., search: _Optional[_Union[SearchSpec, _Mapping]] = ..., assumptions: _Optional[_Union[AssumptionsSpec, _Mapping]] = ..., objective: _Optional[_Union[Objective, str]] = ..., target_step_time_s: _Optional[float] = ..., target_tokens_per_s: _Optional[float] = ..., plan: _Optional[_Union[PlanSpec, _Mapping]] = ..., framework: _Optional[_Union[FrameworkChoice, _Mapping]] = ...) -> None: ...

class FrameworkChoice(_message.Message):
    __slots__ = ("name", "spec")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    name: Framework
    spec: FrameworkSpec
    def __init__(self, name: _Optional[_Union[Framework, str]] = ..., spec: _Optional[_Union[FrameworkSpec, _Mapping]] = ...) -> None: ...

class FrameworkSpec(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: Framework
    version: str
    def __init__(self, name: _Optional[_Union[Framework, str]] = ..., version: _Optional[str] = ...) -> None: ...

class MoESpec(_message.Message):
    __slots__ = ("num_experts", "top_k", "expert_ffn_hidden_size", "num_shared_experts", "shared_expert_ffn_hidden_size", "first_dense_layers", "max_nodes_per_token", "dispatcher", "dispatcher_backend", "capacity_factor", "dispatcher_sms", "activation_clamp", "expert_bias")
    NUM_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    EXPERT_FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_SHARED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    SHARED_EXPERT_FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    FIRST_DENSE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DISPATCHER_FIELD_NUMBER: _ClassVar[int]
    DISPATCHER_BACKEND_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FACTOR_FIELD_NUMBER: _ClassVar[int]
    DISPATCHER_SMS_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_CLAMP_FIELD_NUMBER: _ClassVar[int]
    EXPERT_BIAS_FIELD_NUMBER: _ClassVar[int]
    num_experts: int
    top_k: int
    expert_ffn_hidden_size: int
    num_shared_experts: int
    shared_expert_ffn_hidden_size: int
    first_dense_layers: int
    max_nodes_per_token: int
    dispatcher: MoeDispatcher
    dispatcher_backend: MoeDispatcherBackend
    capacity_factor: float
    dispatcher_sms: int
    activation_clamp: float
    expert_bias: bool
    def __init__(self, num_experts: _Optional[int] = ..., top_k: _Optional[int] = ..., expert_ffn_hidden_size: _Optional[int] = ..., num_shared_experts: _Optional[int] = ..., shared_expert_ffn_hidden_size: _Optional[int] = ..., first_dense_layers: _Optional[int] = ..., max_nodes_per_token: _Optional[int] = ..., dispatcher: _Optional[_Union[MoeDispatcher, str]] = ..., dispatcher_backend: _Optional[_Union[MoeDispatcherBackend, str]] = ..., capacity_factor: _Optional[float] = ..., dispatcher_sms: _Optional[int] = ..., activation_clamp: _Optional[float] = ..., expert_bias: _Optional[bool] = ...) -> None: ...

class MLASpec(_message.Message):
    __slots__ = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    Q_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    KV_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    QK_NOPE_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    QK_ROPE_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    V_HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    def __init__(self, q_lora_rank: _Optional[int] = ..., kv_lora_rank: _Optional[int] = ..., qk_nope_head_dim: _Optional[int] = ..., qk_rope_head_dim: _Optional[int] = ..., v_head_dim: _Optional[int] = ...) -> None: ...

class AttentionSpec(_message.Message):
    __slots__ = ("sliding_window", "full_attention_every", "sinks")
    SLIDING_WINDOW_FIELD_NUMBER: _ClassVar[int]
    FULL_ATTENTION_EVERY_FIELD_NUMBER: _ClassVar[int]
    SINKS_FIELD_NUMBER: _ClassVar[int]
    sliding_window: int
    full_attention_every: int
    sinks: bool
    def __init__(self, sliding_window: _Optional[int] = ..., full_attention_every: _Optional[int] = ..., sinks: _Optional[bool] = ...) -> None: ...

class ModelSpec(_message.Message):
    __slots__ = ("name", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "vocab_size", "gated_mlp", "tie_embeddings", "moe", "mla", "num_mtp_layers", "preset", "hf_config_json", "attention")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    FFN_HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_ATTENTION_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    GATED_MLP_FIELD_NUMBER: _ClassVar[int]
    TIE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MOE_FIELD_NUMBER: _ClassVar[int]
    MLA_FIELD_NUMBER: _ClassVar[int]
    NUM_MTP_LAYERS_FIELD_NUMBER: _ClassVar[int]
    PRESET_FIELD_NUMBER: _ClassVar[int]
    HF_CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    gated_mlp: bool
    tie_embeddings: bool
    moe: MoESpec
    mla: MLASpec
    num_mtp_layers: int
    preset: str
    hf_config_json: str
    attention: AttentionSpec
    def __init__(self, name: _Optional[str] = ..., num_layers: _Optional[int] = ..., hidden_size: _Optional[int] = ..., ffn_hidden_size: _Optional[int] = ..., num_attention_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., vocab_size: _Optional[int] = ..., gated_mlp: _Optional[bool] = ..., tie_embeddings: _Optional[bool] = ..., moe: _Optional[_Union[MoESpec, _Mapping]] = ..., mla: _Optional[_Union[MLASpec, _Mapping]] = ..., num_mtp_layers: _Optional[int] = ..., preset: _Optional[str] = ..., hf_config_json: _Optional[str] = ..., attention: _Optional[_Union[AttentionSpec, _Mapping]] = ...) -> None: ...

class TrainingSpec(_message.Message):
    __slots__ = ("seq_len", "global_batch_size", "precision")
    SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    seq_len: int
    global_batch_size: int
    precision: Precision
    def __init__(self, seq_len: _Optional[int] = ..., global_batch_size: _Optional[int] = ..., precision: _Optional[_Union[Precision, str]] = ...) -> None: ...

class ClusterSpec(_message.Message):
    __slots__ = ("gpu", "num_gpus", "gpus_per_node", "memory_gib", "peak_bf16_tflops", "peak_fp8_tflops", "nvlink_domain_size", "intra_node_bandwidth_gbps", "inter_node_bandwidth_gbps", "intra_node_latency_us", "inter_node_latency_us", "pools", "inter_pool_bandwidth_gbps")
    GPU_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    PEAK_BF16_TFLOPS_FIELD_NUMBER: _ClassVar[int]
    PEAK_FP8_TFLOPS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_SIZE_FIELD_NUMBER: _ClassVar[int]
    INTRA_NODE_BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    INTRA_NODE_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    INTER_POOL_BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    num_gpus: int
    gpus_per_node: int
    memory_gib: float
    peak_bf16_tflops: float
    peak_fp8_tflops: float
    nvlink_domain_size: int
    intra_node_bandwidth_gbps: float
    inter_node_bandwidth_gbps: float
    intra_node_latency_us: float
    inter_node_latency_us: float
    pools: _containers.RepeatedCompositeFieldContainer[PoolSpec]
    inter_pool_bandwidth_gbps: float
    def __init__(self, gpu: _Optional[str] = ..., num_gpus: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., memory_gib: _Optional[float] = ..., peak_bf16_tflops: _Optional[float] = ..., peak_fp8_tflops: _Optional[float] = ..., nvlink_domain_size: _Optional[int] = ..., intra_node_bandwidth_gbps: _Optional[float] = ..., inter_node_bandwidth_gbps: _Optional[float] = ..., intra_node_latency_us: _Optional[float] = ..., inter_node_latency_us: _Optional[float] = ..., pools: _Optional[_Iterable[_Union[PoolSpec, _Mapping]]] = ..., inter_pool_bandwidth_gbps: _Optional[float] = ...) -> None: ...

class PoolSpec(_message.Message):
    __slots__ = ("gpu", "num_gpus", "gpus_per_node", "memory_gib", "peak_bf16_tflops", "peak_fp8_tflops", "nvlink_domain_size", "intra_node_bandwidth_gbps", "inter_node_bandwidth_gbps", "intra_node_latency_us", "inter_node_latency_us")
    GPU_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    PEAK_BF16_TFLOPS_FIELD_NUMBER: _ClassVar[int]
    PEAK_FP8_TFLOPS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_DOMAIN_SIZE_FIELD_NUMBER: _ClassVar[int]
    INTRA_NODE_BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_BANDWIDTH_GBPS_FIELD_NUMBER: _ClassVar[int]
    INTRA_NODE_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    INTER_NODE_LATENCY_US_FIELD_NUMBER: _ClassVar[int]
    gpu: str
    num_gpus: int
    gpus_per_node: int
    memory_gib: float
    peak_bf16_tflops: float
    peak_fp8_tflops: float
    nvlink_domain_size: int
    intra_node_bandwidth_gbps: float
    inter_node_bandwidth_gbps: float
    intra_node_latency_us: float
    inter_node_latency_us: float
    def __init__(self, gpu: _Optional[str] = ..., num_gpus: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., memory_gib: _Optional[float] = ..., peak_bf16_tflops: _Optional[float] = ..., peak_fp8_tflops: _Optional[float] = ..., nvlink_domain_size: _Optional[int] = ..., intra_node_bandwidth_gbps: _Optional[float] = ..., inter_node_bandwidth_gbps: _Optional[float] = ..., intra_node_latency_us: _Optional[float] = ..., inter_node_latency_us: _Optional[float] = ...) -> None: ...

class SearchSpec(_message.Message):
    __slots__ = ("tp", "cp", "pp", "ep", "etp", "dp", "micro_batch_size", "vpp", "schedules", "uneven_stages", "zero_stages", "recompute", "uniform_recompute", "sequence_parallel", "max_num_gpus", "stage_split", "cp_comm_types", "zero_replicas", "optimizer_states", "optimizer_offload_fractions", "moe_fp8_dispatch", "moe_a2a_overlap", "activation_offload_layers", "memory_margin_gib", "memory_band", "rank_by")
    TP_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    ETP_FIELD_NUMBER: _ClassVar[int]
    DP_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    VPP_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    UNEVEN_STAGES_FIELD_NUMBER: _ClassVar[int]
    ZERO_STAGES_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    UNIFORM_RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    STAGE_SPLIT_FIELD_NUMBER: _ClassVar[int]
    CP_COMM_TYPES_FIELD_NUMBER: _ClassVar[int]
    ZERO_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_STATES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_OFFLOAD_FRACTIONS_FIELD_NUMBER: _ClassVar[int]
    MOE_FP8_DISPATCH_FIELD_NUMBER: _ClassVar[int]
    MOE_A2A_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_OFFLOAD_LAYERS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MARGIN_GIB_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BAND_FIELD_NUMBER: _ClassVar[int]
    RANK_BY_FIELD_NUMBER: _ClassVar[int]
    tp: _containers.RepeatedScalarFieldContainer[int]
    cp: _containers.RepeatedScalarFieldContainer[int]
    pp: _containers.RepeatedScalarFieldContainer[int]
    ep: _containers.RepeatedScalarFieldContainer[int]
    etp: _containers.RepeatedScalarFieldContainer[int]
    dp: _containers.RepeatedScalarFieldContainer[int]
    micro_batch_size: _containers.RepeatedScalarFieldContainer[int]
    vpp: _containers.RepeatedScalarFieldContainer[int]
    schedules: _containers.RepeatedScalarFieldContainer[Schedule]
    uneven_stages: bool
    zero_stages: _containers.RepeatedScalarFieldContainer[int]
    recompute: _containers.RepeatedScalarFieldContainer[Recompute]
    uniform_recompute: bool
    sequence_parallel: _containers.RepeatedScalarFieldContainer[bool]
    max_num_gpus: int
    stage_split: StageSplit
    cp_comm_types: _containers.RepeatedScalarFieldContainer[CpCommType]
    zero_replicas: _containers.RepeatedScalarFieldContainer[int]
    optimizer_states: _containers.RepeatedScalarFieldContainer[str]
    optimizer_offload_fractions: _containers.RepeatedScalarFieldContainer[float]
    moe_fp8_dispatch: _containers.RepeatedScalarFieldContainer[bool]
    moe_a2a_overlap: _containers.RepeatedScalarFieldContainer[bool]
    activation_offload_layers: _containers.RepeatedScalarFieldContainer[int]
    memory_margin_gib: float
    memory_band: bool
    rank_by: RankBy
    def __init__(self, tp: _Optional[_Iterable[int]] = ..., cp: _Optional[_Iterable[int]] = ..., pp: _Optional[_Iterable[int]] = ..., ep: _Optional[_Iterable[int]] = ..., etp: _Optional[_Iterable[int]] = ..., dp: _Optional[_Iterable[int]] = ..., micro_batch_size: _Optional[_Iterable[int]] = ..., vpp: _Optional[_Iterable[int]] = ..., schedules: _Optional[_Iterable[_Union[Schedule, str]]] = ..., uneven_stages: _Optional[bool] = ..., zero_stages: _Optional[_Iterable[int]] = ..., recompute: _Optional[_Iterable[_Union[Recompute, str]]] = ..., uniform_recompute: _Optional[bool] = ..., sequence_parallel: _Optional[_Iterable[bool]] = ..., max_num_gpus: _Optional[int] = ..., stage_split: _Optional[_Union[StageSplit, str]] = ..., cp_comm_types: _Optional[_Iterable[_Union[CpCommType, str]]] = ..., zero_replicas: _Optional[_Iterable[int]] = ..., optimizer_states: _Optional[_Iterable[str]] = ..., optimizer_offload_fractions: _Optional[_Iterable[float]] = ..., moe_fp8_dispatch: _Optional[_Iterable[bool]] = ..., moe_a2a_overlap: _Optional[_Iterable[bool]] = ..., activation_offload_layers: _Optional[_Iterable[int]] = ..., memory_margin_gib: _Optional[float] = ..., memory_band: _Optional[bool] = ..., rank_by: _Optional[_Union[RankBy, str]] = ...) -> None: ...

class ScalarValue(_message.Message):
    __slots__ = ("number_value", "integer_value", "bool_value", "string_value", "null_value")
    NUMBER_VALUE_FIELD_NUMBER: _ClassVar[int]
    INTEGER_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    number_value: float
    integer_value: int
    bool_value: bool
    string_value: str
    null_value: _struct_pb2.NullValue
    def __init__(self, number_value: _Optional[float] = ..., integer_value: _Optional[int] = ..., bool_value: _Optional[bool] = ..., string_value: _Optional[str] = ..., null_value: _Optional[_Union[_struct_pb2.NullValue, str]] = ...) -> None: ...

class AssumptionsSpec(_message.Message):
    __slots__ = ("preset", "overrides")
    class OverridesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ScalarValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ScalarValue, _Mapping]] = ...) -> None: ...
    PRESET_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    preset: AssumptionPreset
    overrides: _containers.MessageMap[str, ScalarValue]
    def __init__(self, preset: _Optional[_Union[AssumptionPreset, str]] = ..., overrides: _Optional[_Mapping[str, ScalarValue]] = ...) -> None: ...

class PlanSpec(_message.Message):
    __slots__ = ("tp", "cp", "pp", "dp", "ep", "etp", "micro_batch_size", "num_microbatches", "vpp", "schedule", "stage_layers", "recompute", "recompute_layers", "zero_stage", "sequence_parallel", "pipeline_layout", "cp_comm_type", "zero_replicas", "optimizer_states", "optimizer_offload_fraction", "moe_fp8_dispatch", "moe_a2a_overlap", "activation_offload_layers", "stage_pools")
    TP_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    DP_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    ETP_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_MICROBATCHES_FIELD_NUMBER: _ClassVar[int]
    VPP_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    STAGE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    ZERO_STAGE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    CP_COMM_TYPE_FIELD_NUMBER: _ClassVar[int]
    ZERO_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_STATES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_OFFLOAD_FRACTION_FIELD_NUMBER: _ClassVar[int]
    MOE_FP8_DISPATCH_FIELD_NUMBER: _ClassVar[int]
    MOE_A2A_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_OFFLOAD_LAYERS_FIELD_NUMBER: _ClassVar[int]
    STAGE_POOLS_FIELD_NUMBER: _ClassVar[int]
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    etp: int
    micro_batch_size: int
    num_microbatches: int
    vpp: int
    schedule: Schedule
    stage_layers: _containers.RepeatedScalarFieldContainer[int]
    recompute: Recompute
    recompute_layers: _containers.RepeatedScalarFieldContainer[int]
    zero_stage: int
    sequence_parallel: bool
    pipeline_layout: PipelineLayout
    cp_comm_type: CpCommType
    zero_replicas: int
    optimizer_states: str
    optimizer_offload_fraction: float
    moe_fp8_dispatch: bool
    moe_a2a_overlap: bool
    activation_offload_layers: int
    stage_pools: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, tp: _Optional[int] = ..., cp: _Optional[int] = ..., pp: _Optional[int] = ..., dp: _Optional[int] = ..., ep: _Optional[int] = ..., etp: _Optional[int] = ..., micro_batch_size: _Optional[int] = ..., num_microbatches: _Optional[int] = ..., vpp: _Optional[int] = ..., schedule: _Optional[_Union[Schedule, str]] = ..., stage_layers: _Optional[_Iterable[int]] = ..., recompute: _Optional[_Union[Recompute, str]] = ..., recompute_layers: _Optional[_Iterable[int]] = ..., zero_stage: _Optional[int] = ..., sequence_parallel: _Optional[bool] = ..., pipeline_layout: _Optional[_Union[PipelineLayout, _Mapping]] = ..., cp_comm_type: _Optional[_Union[CpCommType, str]] = ..., zero_replicas: _Optional[int] = ..., optimizer_states: _Optional[str] = ..., optimizer_offload_fraction: _Optional[float] = ..., moe_fp8_dispatch: _Optional[bool] = ..., moe_a2a_overlap: _Optional[bool] = ..., activation_offload_layers: _Optional[int] = ..., stage_pools: _Optional[_Iterable[int]] = ...) -> None: ...

class PipelineLayout(_message.Message):
    __slots__ = ("megatron", "layers", "decoder_layers")
    MEGATRON_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    DECODER_LAYERS_FIELD_NUMBER: _ClassVar[int]
    megatron: str
    layers: PipelineLayoutLayers
    decoder_layers: PipelineLayoutDecoderLayers
    def __init__(self, megatron: _Optional[str] = ..., layers: _Optional[_Union[PipelineLayoutLayers, _Mapping]] = ..., decoder_layers: _Optional[_Union[PipelineLayoutDecoderLayers, _Mapping]] = ...) -> None: ...

class PipelineLayoutLayers(_message.Message):
    __slots__ = ("stages",)
    STAGES_FIELD_NUMBER: _ClassVar[int]
    stages: _containers.RepeatedCompositeFieldContainer[PipelineStageLayers]
    def __init__(self, stages: _Optional[_Iterable[_Union[PipelineStageLayers, _Mapping]]] = ...) -> None: ...

class PipelineStageLayers(_message.Message):
    __slots__ = ("layers",)
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    layers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, layers: _Optional[_Iterable[str]] = ...) -> None: ...

class PipelineLayoutDecoderLayers(_message.Message):
    __slots__ = ("stages",)
    STAGES_FIELD_NUMBER: _ClassVar[int]
    stages: _containers.RepeatedCompositeFieldContainer[PipelineStageDecoderLayers]
    def __init__(self, stages: _Optional[_Iterable[_Union[PipelineStageDecoderLayers, _Mapping]]] = ...) -> None: ...

class PipelineStageDecoderLayers(_message.Message):
    __slots__ = ("chunk_layers",)
    CHUNK_LAYERS_FIELD_NUMBER: _ClassVar[int]
    chunk_layers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, chunk_layers: _Optional[_Iterable[int]] = ...) -> None: ...

class SolverParameters(_message.Message):
    __slots__ = ("method", "time_limit_s", "workers", "deterministic", "seed")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_S_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    method: Method
    time_limit_s: float
    workers: int
    deterministic: bool
    seed: int
    def __init__(self, method: _Optional[_Union[Method, str]] = ..., time_limit_s: _Optional[float] = ..., workers: _Optional[int] = ..., deterministic: _Optional[bool] = ..., seed: _Optional[int] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("tp", "cp", "pp", "dp", "num_gpus", "ep", "etp", "micro_batch_size", "num_microbatches", "vpp", "schedule", "stage_layers", "recompute", "recompute_layers", "zero_stage", "sequence_parallel", "pipeline_layout", "cp_comm_type", "zero_replicas", "optimizer_states", "optimizer_offload_fraction", "moe_fp8_dispatch", "moe_a2a_overlap", "activation_offload_layers", "stage_pools")
    TP_FIELD_NUMBER: _ClassVar[int]
    CP_FIELD_NUMBER: _ClassVar[int]
    PP_FIELD_NUMBER: _ClassVar[int]
    DP_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    EP_FIELD_NUMBER: _ClassVar[int]
    ETP_FIELD_NUMBER: _ClassVar[int]
    MICRO_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_MICROBATCHES_FIELD_NUMBER: _ClassVar[int]
    VPP_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    STAGE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    ZERO_STAGE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_PARALLEL_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    CP_COMM_TYPE_FIELD_NUMBER: _ClassVar[int]
    ZERO_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_STATES_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_OFFLOAD_FRACTION_FIELD_NUMBER: _ClassVar[int]
    MOE_FP8_DISPATCH_FIELD_NUMBER: _ClassVar[int]
    MOE_A2A_OVERLAP_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_OFFLOAD_LAYERS_FIELD_NUMBER: _ClassVar[int]
    STAGE_POOLS_FIELD_NUMBER: _ClassVar[int]
    tp: int
    cp: int
    pp: int
    dp: int
    num_gpus: int
    ep: int
    etp: int
    micro_batch_size: int
    num_microbatches: int
    vpp: int
    schedule: Schedule
    stage_layers: _containers.RepeatedScalarFieldContainer[int]
    recompute: Recompute
    recompute_layers: _containers.RepeatedScalarFieldContainer[int]
    zero_stage: int
    sequence_parallel: bool
    pipeline_layout: PipelineLayoutDecoderLayers
    cp_comm_type: CpCommType
    zero_replicas: int
    optimizer_states: str
    optimizer_offload_fraction: float
    moe_fp8_dispatch: bool
    moe_a2a_overlap: bool
    activation_offload_layers: int
    stage_pools: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, tp: _Optional[int] = ..., cp: _Optional[int] = ..., pp: _Optional[int] = ..., dp: _Optional[int] = ..., num_gpus: _Optional[int] = ..., ep: _Optional[int] = ..., etp: _Optional[int] = ..., micro_batch_size: _Optional[int] = ..., num_microbatches: _Optional[int] = ..., vpp: _Optional[int] = ..., schedule: _Optional[_Union[Schedule, str]] = ..., stage_layers: _Optional[_Iterable[int]] = ..., recompute: _Optional[_Union[Recompute, str]] = ..., recompute_layers: _Optional[_Iterable[int]] = ..., zero_stage: _Optional[int] = ..., sequence_parallel: _Optional[bool] = ..., pipeline_layout: _Optional[_Union[PipelineLayoutDecoderLayers, _Mapping]] = ..., cp_comm_type: _Optional[_Union[CpCommType, str]] = ..., zero_replicas: _Optional[int] = ..., optimizer_states: _Optional[str] = ..., optimizer_offload_fraction: _Optional[float] = ..., moe_fp8_dispatch: _Optional[bool] = ..., moe_a2a_overlap: _Optional[bool] = ..., activation_offload_layers: _Optional[int] = ..., stage_pools: _Optional[_Iterable[int]] = ...) -> None: ...

class Metrics(_message.Message):
    __slots__ = ("step_time_s", "mfu", "tokens_per_s", "peak_memory_gib", "stage_memory_gib", "breakdown_s", "hfu", "model_tflops_per_gpu", "usable_memory_gib", "fits", "memory_outside_ledger_gib", "step_order_step_s")
    class BreakdownSEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class MemoryOutsideLedgerGibEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    MFU_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    STAGE_MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_S_FIELD_NUMBER: _ClassVar[int]
    HFU_FIELD_NUMBER: _ClassVar[int]
    MODEL_TFLOPS_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    USABLE_MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_OUTSIDE_LEDGER_GIB_FIELD_NUMBER: _ClassVar[int]
    STEP_ORDER_STEP_S_FIELD_NUMBER: _ClassVar[int]
    step_time_s: float
    mfu: float
    tokens_per_s: float
    peak_memory_gib: float
    stage_memory_gib: _containers.RepeatedScalarFieldContainer[float]
    breakdown_s: _containers.ScalarMap[str, float]
    hfu: float
    model_tflops_per_gpu: float
    usable_memory_gib: float
    fits: bool
    memory_outside_ledger_gib: _containers.ScalarMap[str, float]
    step_order_step_s: float
    def __init__(self, step_time_s: _Optional[float] = ..., mfu: _Optional[float] = ..., tokens_per_s: _Optional[float] = ..., peak_memory_gib: _Optional[float] = ..., stage_memory_gib: _Optional[_Iterable[float]] = ..., breakdown_s: _Optional[_Mapping[str, float]] = ..., hfu: _Optional[float] = ..., model_tflops_per_gpu: _Optional[float] = ..., usable_memory_gib: _Optional[float] = ..., fits: _Optional[bool] = ..., memory_outside_ledger_gib: _Optional[_Mapping[str, float]] = ..., step_order_step_s: _Optional[float] = ...) -> None: ...

class StageReport(_message.Message):
    __slots__ = ("index", "layers", "dense_layers", "moe_layers", "recomputed_layers", "inflight_microbatches", "time_per_microbatch_s", "compute_s", "recompute_s", "tp_s", "cp_s", "ep_s", "pp_s", "zero_s", "dp_s", "model_states_gib", "activations_gib", "logits_gib", "workspace_gib", "pipeline_buffers_gib", "memory_gib", "headroom_gib", "runtime_buffers_gib")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    DENSE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    MOE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTED_LAYERS_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_MICROBATCHES_FIELD_NUMBER: _ClassVar[int]
    TIME_PER_MICROBATCH_S_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    TP_S_FIELD_NUMBER: _ClassVar[int]
    CP_S_FIELD_NUMBER: _ClassVar[int]
    EP_S_FIELD_NUMBER: _ClassVar[int]
    PP_S_FIELD_NUMBER: _ClassVar[int]
    ZERO_S_FIELD_NUMBER: _ClassVar[int]
    DP_S_FIELD_NUMBER: _ClassVar[int]
    MODEL_STATES_GIB_FIELD_NUMBER: _ClassVar[int]
    ACTIVATIONS_GIB_FIELD_NUMBER: _ClassVar[int]
    LOGITS_GIB_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_GIB_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_BUFFERS_GIB_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_GIB_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_BUFFERS_GIB_FIELD_NUMBER: _ClassVar[int]
    index: int
    layers: int
    dense_layers: int
    moe_layers: int
    recomputed_layers: int
    inflight_microbatches: float
    time_per_microbatch_s: float
    compute_s: float
    recompute_s: float
    tp_s: float
    cp_s: float
    ep_s: float
    pp_s: float
    zero_s: float
    dp_s: float
    model_states_gib: float
    activations_gib: float
    logits_gib: float
    workspace_gib: float
    pipeline_buffers_gib: float
    memory_gib: float
    headroom_gib: float
    runtime_buffers_gib: float
    def __init__(self, index: _Optional[int] = ..., layers: _Optional[int] = ..., dense_layers: _Optional[int] = ..., moe_layers: _Optional[int] = ..., recomputed_layers: _Optional[int] = ..., inflight_microbatches: _Optional[float] = ..., time_per_microbatch_s: _Optional[float] = ..., compute_s: _Optional[float] = ..., recompute_s: _Optional[float] = ..., tp_s: _Optional[float] = ..., cp_s: _Optional[float] = ..., ep_s: _Optional[float] = ..., pp_s: _Optional[float] = ..., zero_s: _Optional[float] = ..., dp_s: _Optional[float] = ..., model_states_gib: _Optional[float] = ..., activations_gib: _Optional[float] = ..., logits_gib: _Optional[float] = ..., workspace_gib: _Optional[float] = ..., pipeline_buffers_gib: _Optional[float] = ..., memory_gib: _Optional[float] = ..., headroom_gib: _Optional[float] = ..., runtime_buffers_gib: _Optional[float] = ...) -> None: ...

class Evaluation(_message.Message):
    __slots__ = ("plan", "metrics", "stages", "violations", "runs_on", "band")
    PLAN_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    RUNS_ON_FIELD_NUMBER: _ClassVar[int]
    BAND_FIELD_NUMBER: _ClassVar[int]
    plan: Plan
    metrics: Metrics
    stages: _containers.RepeatedCompositeFieldContainer[StageReport]
    violations: _containers.RepeatedScalarFieldContainer[str]
    runs_on: _containers.RepeatedScalarFieldContainer[Framework]
    band: PredictionBand
    def __init__(self, plan: _Optional[_Union[Plan, _Mapping]] = ..., metrics: _Optional[_Union[Metrics, _Mapping]] = ..., stages: _Optional[_Iterable[_Union[StageReport, _Mapping]]] = ..., violations: _Optional[_Iterable[str]] = ..., runs_on: _Optional[_Iterable[_Union[Framework, str]]] = ..., band: _Optional[_Union[PredictionBand, _Mapping]] = ...) -> None: ...

class PredictionBand(_message.Message):
    __slots__ = ("step_time_s_low", "step_time_s_high", "peak_memory_gib_low", "peak_memory_gib_high", "ties_best")
    STEP_TIME_S_LOW_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_HIGH_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_GIB_LOW_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_GIB_HIGH_FIELD_NUMBER: _ClassVar[int]
    TIES_BEST_FIELD_NUMBER: _ClassVar[int]
    step_time_s_low: float
    step_time_s_high: float
    peak_memory_gib_low: float
    peak_memory_gib_high: float
    ties_best: bool
    def __init__(self, step_time_s_low: _Optional[float] = ..., step_time_s_high: _Optional[float] = ..., peak_memory_gib_low: _Optional[float] = ..., peak_memory_gib_high: _Optional[float] = ..., ties_best: _Optional[bool] = ...) -> None: ...

class StepTimeBin(_message.Message):
    __slots__ = ("exposed_share_max", "ratio_low", "ratio_high", "rows")
    EXPOSED_SHARE_MAX_FIELD_NUMBER: _ClassVar[int]
    RATIO_LOW_FIELD_NUMBER: _ClassVar[int]
    RATIO_HIGH_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    exposed_share_max: float
    ratio_low: float
    ratio_high: float
    rows: int
    def __init__(self, exposed_share_max: _Optional[float] = ..., ratio_low: _Optional[float] = ..., ratio_high: _Optional[float] = ..., rows: _Optional[int] = ...) -> None: ...

class BandSource(_message.Message):
    __slots__ = ("calibration", "data", "rows", "memory_rows", "quantiles", "step_time_bins", "peak_memory_ratio", "rank_by")
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ROWS_FIELD_NUMBER: _ClassVar[int]
    QUANTILES_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_BINS_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_RATIO_FIELD_NUMBER: _ClassVar[int]
    RANK_BY_FIELD_NUMBER: _ClassVar[int]
    calibration: str
    data: str
    rows: int
    memory_rows: int
    quantiles: _containers.RepeatedScalarFieldContainer[float]
    step_time_bins: _containers.RepeatedCompositeFieldContainer[StepTimeBin]
    peak_memory_ratio: _containers.RepeatedScalarFieldContainer[float]
    rank_by: RankBy
    def __init__(self, calibration: _Optional[str] = ..., data: _Optional[str] = ..., rows: _Optional[int] = ..., memory_rows: _Optional[int] = ..., quantiles: _Optional[_Iterable[float]] = ..., step_time_bins: _Optional[_Iterable[_Union[StepTimeBin, _Mapping]]] = ..., peak_memory_ratio: _Optional[_Iterable[float]] = ..., rank_by: _Optional[_Union[RankBy, str]] = ...) -> None: ...

class Relaxation(_message.Message):
    __slots__ = ("requirement", "change", "patch", "plan")
    class PatchEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ScalarValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ScalarValue, _Mapping]] = ...) -> None: ...
    REQUIREMENT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    requirement: str
    change: str
    patch: _containers.MessageMap[str, ScalarValue]
    plan: Evaluation
    def __init__(self, requirement: _Optional[str] = ..., change: _Optional[str] = ..., patch: _Optional[_Mapping[str, ScalarValue]] = ..., plan: _Optional[_Union[Evaluation, _Mapping]] = ...) -> None: ...

class Explanation(_message.Message):
    __slots__ = ("summary", "conflicting", "rejected_choices", "min_memory_needed_gib", "usable_memory_gib", "relaxations")
    class RejectedChoicesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    CONFLICTING_FIELD_NUMBER: _ClassVar[int]
    REJECTED_CHOICES_FIELD_NUMBER: _ClassVar[int]
    MIN_MEMORY_NEEDED_GIB_FIELD_NUMBER: _ClassVar[int]
    USABLE_MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    RELAXATIONS_FIELD_NUMBER: _ClassVar[int]
    summary: str
    conflicting: _containers.RepeatedScalarFieldContainer[str]
    rejected_choices: _containers.ScalarMap[str, int]
    min_memory_needed_gib: float
    usable_memory_gib: float
    relaxations: _containers.RepeatedCompositeFieldContainer[Relaxation]
    def __init__(self, summary: _Optional[str] = ..., conflicting: _Optional[_Iterable[str]] = ..., rejected_choices: _Optional[_Mapping[str, int]] = ..., min_memory_needed_gib: _Optional[float] = ..., usable_memory_gib: _Optional[float] = ..., relaxations: _Optional[_Iterable[_Union[Relaxation, _Mapping]]] = ...) -> None: ...

class SolveStats(_message.Message):
    __slots__ = ("method", "wall_time_s", "choices_total", "choices_searched", "objective_value", "best_bound", "gap", "workers", "seed", "deterministic", "ortools_version")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    CHOICES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CHOICES_SEARCHED_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_VALUE_FIELD_NUMBER: _ClassVar[int]
    BEST_BOUND_FIELD_NUMBER: _ClassVar[int]
    GAP_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    ORTOOLS_VERSION_FIELD_NUMBER: _ClassVar[int]
    method: Method
    wall_time_s: float
    choices_total: int
    choices_searched: int
    objective_value: float
    best_bound: float
    gap: float
    workers: int
    seed: int
    deterministic: bool
    ortools_version: str
    def __init__(self, method: _Optional[_Union[Method, str]] = ..., wall_time_s: _Optional[float] = ..., choices_total: _Optional[int] = ..., choices_searched: _Optional[int] = ..., objective_value: _Optional[float] = ..., best_bound: _Optional[float] = ..., gap: _Optional[float] = ..., workers: _Optional[int] = ..., seed: _Optional[int] = ..., deterministic: _Optional[bool] = ..., ortools_version: _Optional[str] = ...) -> None: ...

class PlanRequest(_message.Message):
    __slots__ = ("spec", "spec_text", "solver", "top_k", "pareto_axis", "contract_json")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_TEXT_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    PARETO_AXIS_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_JSON_FIELD_NUMBER: _ClassVar[int]
    spec: Spec
    spec_text: str
    solver: SolverParameters
    top_k: int
    pareto_axis: ParetoAxis
    contract_json: bool
    def __init__(self, spec: _Optional[_Union[Spec, _Mapping]] = ..., spec_text: _Optional[str] = ..., solver: _Optional[_Union[SolverParameters, _Mapping]] = ..., top_k: _Optional[int] = ..., pareto_axis: _Optional[_Union[ParetoAxis, str]] = ..., contract_json: _Optional[bool] = ...) -> None: ...

class PlanResponse(_message.Message):
    __slots__ = ("status", "objective", "plans", "pareto", "pareto_axis", "explanation", "solver", "parameters", "timing", "admission", "completed", "memory_margin_gib", "placement", "parplan_version", "contract_json", "band_source")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    PLANS_FIELD_NUMBER: _ClassVar[int]
    PARETO_FIELD_NUMBER: _ClassVar[int]
    PARETO_AXIS_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MARGIN_GIB_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    PARPLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_JSON_FIELD_NUMBER: _ClassVar[int]
    BAND_SOURCE_FIELD_NUMBER: _ClassVar[int]
    status: PlanStatus
    objective: Objective
    plans: _containers.RepeatedCompositeFieldContainer[Evaluation]
    pareto: _containers.RepeatedCompositeFieldContainer[Evaluation]
    pareto_axis: ParetoAxis
    explanation: Explanation
    solver: SolveStats
    parameters: SolverParameters
    timing: Timing
    admission: Admission
    completed: _containers.RepeatedScalarFieldContainer[str]
    memory_margin_gib: float
    placement: _containers.RepeatedScalarFieldContainer[str]
    parplan_version: str
    contract_json: str
    band_source: BandSource
    def __init__(self, status: _Optional[_Union[PlanStatus, str]] = ..., objective: _Optional[_Union[Objective, str]] = ..., plans: _Optional[_Iterable[_Union[Evaluation, _Mapping]]] = ..., pareto: _Optional[_Iterable[_Union[Evaluation, _Mapping]]] = ..., pareto_axis: _Optional[_Union[ParetoAxis, str]] = ..., explanation: _Optional[_Union[Explanation, _Mapping]] = ..., solver: _Optional[_Union[SolveStats, _Mapping]] = ..., parameters: _Optional[_Union[SolverParameters, _Mapping]] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ..., admission: _Optional[_Union[Admission, _Mapping]] = ..., completed: _Optional[_Iterable[str]] = ..., memory_margin_gib: _Optional[float] = ..., placement: _Optional[_Iterable[str]] = ..., parplan_version: _Optional[str] = ..., contract_json: _Optional[str] = ..., band_source: _Optional[_Union[BandSource, _Mapping]] = ...) -> None: ...

class Admission(_message.Message):
    __slots__ = ("queue_wait_s", "queue_length", "solver_slots", "max_queue")
    QUEUE_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SOLVER_SLOTS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue_wait_s: float
    queue_length: int
    solver_slots: int
    max_queue: int
    def __init__(self, queue_wait_s: _Optional[float] = ..., queue_length: _Optional[int] = ..., solver_slots: _Optional[int] = ..., max_queue: _Optional[int] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("wall_time_s", "search_s", "top_k_s", "frontier_s", "explanation_s")
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    SEARCH_S_FIELD_NUMBER: _ClassVar[int]
    TOP_K_S_FIELD_NUMBER: _ClassVar[int]
    FRONTIER_S_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_S_FIELD_NUMBER: _ClassVar[int]
    wall_time_s: float
    search_s: float
    top_k_s: float
    frontier_s: float
    explanation_s: float
    def __init__(self, wall_time_s: _Optional[float] = ..., search_s: _Optional[float] = ..., top_k_s: _Optional[float] = ..., frontier_s: _Optional[float] = ..., explanation_s: _Optional[float] = ...) -> None: ...

class PlanStreamRequest(_message.Message):
    __slots__ = ("spec", "spec_text", "solver", "top_k", "contract_json")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_TEXT_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_JSON_FIELD_NUMBER: _ClassVar[int]
    spec: Spec
    spec_text: str
    solver: SolverParameters
    top_k: int
    contract_json: bool
    def __init__(self, spec: _Optional[_Union[Spec, _Mapping]] = ..., spec_text: _Optional[str] = ..., solver: _Optional[_Union[SolverParameters, _Mapping]] = ..., top_k: _Optional[int] = ..., contract_json: _Optional[bool] = ...) -> None: ...

class PlanProgress(_message.Message):
    __slots__ = ("plan", "objective_value", "best_bound", "elapsed_s")
    PLAN_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_VALUE_FIELD_NUMBER: _ClassVar[int]
    BEST_BOUND_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    plan: Evaluation
    objective_value: float
    best_bound: float
    elapsed_s: float
    def __init__(self, plan: _Optional[_Union[Evaluation, _Mapping]] = ..., objective_value: _Optional[float] = ..., best_bound: _Optional[float] = ..., elapsed_s: _Optional[float] = ...) -> None: ...

class PlanStreamResponse(_message.Message):
    __slots__ = ("progress", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: PlanProgress
    result: PlanResponse
    def __init__(self, progress: _Optional[_Union[PlanProgress, _Mapping]] = ..., result: _Optional[_Union[PlanResponse, _Mapping]] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("spec", "spec_text", "plan", "contract_json")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_TEXT_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_JSON_FIELD_NUMBER: _ClassVar[int]
    spec: Spec
    spec_text: str
    plan: PlanSpec
    contract_json: bool
    def __init__(self, spec: _Optional[_Union[Spec, _Mapping]] = ..., spec_text: _Optional[str] = ..., plan: _Optional[_Union[PlanSpec, _Mapping]] = ..., contract_json: _Optional[bool] = ...) -> None: ...

class EvaluateResponse(_message.Message):
    __slots__ = ("status", "evaluation", "parplan_version", "contract_json", "band_source")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    PARPLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_JSON_FIELD_NUMBER: _ClassVar[int]
    BAND_SOURCE_FIELD_NUMBER: _ClassVar[int]
    status: PlanStatus
    evaluation: Evaluation
    parplan_version: str
    contract_json: str
    band_source: BandSource
    def __init__(self, status: _Optional[_Union[PlanStatus, str]] = ..., evaluation: _Optional[_Union[Evaluation, _Mapping]] = ..., parplan_version: _Optional[str] = ..., contract_json: _Optional[str] = ..., band_source: _Optional[_Union[BandSource, _Mapping]] = ...) -> None: ...

class ParetoRequest(_message.Message):
    __slots__ = ("spec", "spec_text", "axis", "solver", "contract_json")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_TEXT_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_JSON_FIELD_NUMBER: _ClassVar[int]
    spec: Spec
    spec_text: str
    axis: ParetoAxis
    solver: SolverParameters
    contract_json: bool
    def __init__(self, spec: _Optional[_Union[Spec, _Mapping]] = ..., spec_text: _Optional[str] = ..., axis: _Optional[_Union[ParetoAxis, str]] = ..., solver: _Optional[_Union[SolverParameters, _Mapping]] = ..., contract_json: _Optional[bool] = ...) -> None: ...

class ParetoResponse(_message.Message):
    __slots__ = ("status", "axis", "points", "solver", "parameters", "timing", "admission", "parplan_version", "contract_json", "band_source")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_FIELD_NUMBER: _ClassVar[int]
    PARPLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_JSON_FIELD_NUMBER: _ClassVar[int]
    BAND_SOURCE_FIELD_NUMBER: _ClassVar[int]
    status: PlanStatus
    axis: ParetoAxis
    points: _containers.RepeatedCompositeFieldContainer[Evaluation]
    solver: SolveStats
    parameters: SolverParameters
    timing: Timing
    admission: Admission
    parplan_version: str
    contract_json: str
    band_source: BandSource
    def __init__(self, status: _Optional[_Union[PlanStatus, str]] = ..., axis: _Optional[_Union[ParetoAxis, str]] = ..., points: _Optional[_Iterable[_Union[Evaluation, _Mapping]]] = ..., solver: _Optional[_Union[SolveStats, _Mapping]] = ..., parameters: _Optional[_Union[SolverParameters, _Mapping]] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ..., admission: _Optional[_Union[Admission, _Mapping]] = ..., parplan_version: _Optional[str] = ..., contract_json: _Optional[str] = ..., band_source: _Optional[_Union[BandSource, _Mapping]] = ...) -> None: ...

class SweepRequest(_message.Message):
    __slots__ = ("sweep_text", "engine", "jobs", "ray_address")
    SWEEP_TEXT_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    RAY_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    sweep_text: str
    engine: str
    jobs: int
    ray_address: str
    def __init__(self, sweep_text: _Optional[str] = ..., engine: _Optional[str] = ..., jobs: _Optional[int] = ..., ray_address: _Optional[str] = ...) -> None: ...

class SweepPoint(_message.Message):
    __slots__ = ("index", "key", "status", "axes", "record_json", "done", "total")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    AXES_FIELD_NUMBER: _ClassVar[int]
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    index: int
    key: str
    status: str
    axes: _struct_pb2.Struct
    record_json: str
    done: int
    total: int
    def __init__(self, index: _Optional[int] = ..., key: _Optional[str] = ..., status: _Optional[str] = ..., axes: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., record_json: _Optional[str] = ..., done: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class SweepSummary(_message.Message):
    __slots__ = ("records_jsonl", "summary_json", "points", "failed", "parplan_version")
    RECORDS_JSONL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_JSON_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    PARPLAN_VERSION_FIELD_NUMBER: _ClassVar[int]
    records_jsonl: str
    summary_json: str
    points: int
    failed: int
    parplan_version: str
    def __init__(self, records_jsonl: _Optional[str] = ..., summary_json: _Optional[str] = ..., points: _Optional[int] = ..., failed: _Optional[int] = ..., parplan_version: _Optional[str] = ...) -> None: ...

class SweepResponse(_message.Message):
    __slots__ = ("point", "summary")
    POINT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    point: SweepPoint
    summary: SweepSummary
    def __init__(self, point: _Optional[_Union[SweepPoint, _Mapping]] = ..., summary: _Optional[_Union[SweepSummary, _Mapping]] = ...) -> None: ...

class ReshardAssumptions(_message.Message):
    __slots__ = ("checkpoint_bytes_per_param", "storage_read_gbps_per_node", "peer_gbps_per_gpu", "restart_s")
    CHECKPOINT_BYTES_PER_PARAM_FIELD_NUMBER: _ClassVar[int]
    STORAGE_READ_GBPS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    PEER_GBPS_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    RESTART_S_FIELD_NUMBER: _ClassVar[int]
    checkpoint_bytes_per_param: float
    storage_read_gbps_per_node: float
    peer_gbps_per_gpu: float
    restart_s: float
    def __init__(self, checkpoint_bytes_per_param: _Optional[float] = ..., storage_read_gbps_per_node: _Optional[float] = ..., peer_gbps_per_gpu: _Optional[float] = ..., restart_s: _Optional[float] = ...) -> None: ...

class ReplanRequest(_message.Message):
    __slots__ = ("spec", "spec_text", "plan", "lost_nodes", "added_nodes", "horizon_s", "reshard", "solver", "export_text", "export_target")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SPEC_TEXT_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    LOST_NODES_FIELD_NUMBER: _ClassVar[int]
    ADDED_NODES_FIELD_NUMBER: _ClassVar[int]
    HORIZON_S_FIELD_NUMBER: _ClassVar[int]
    RESHARD_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    EXPORT_TEXT_FIELD_NUMBER: _ClassVar[int]
    EXPORT_TARGET_FIELD_NUMBER: _ClassVar[int]
    spec: Spec
    spec_text: str
    plan: PlanSpec
    lost_nodes: _containers.RepeatedScalarFieldContainer[int]
    added_nodes: int
    horizon_s: float
    reshard: ReshardAssumptions
    solver: SolverParameters
    export_text: str
    export_target: str
    def __init__(self, spec: _Optional[_Union[Spec, _Mapping]] = ..., spec_text: _Optional[str] = ..., plan: _Optional[_Union[PlanSpec, _Mapping]] = ..., lost_nodes: _Optional[_Iterable[int]] = ..., added_nodes: _Optional[int] = ..., horizon_s: _Optional[float] = ..., reshard: _Optional[_Union[ReshardAssumptions, _Mapping]] = ..., solver: _Optional[_Union[SolverParameters, _Mapping]] = ..., export_text: _Optional[str] = ..., export_target: _Optional[str] = ...) -> None: ...

class ReplanPoint(_message.Message):
    __slots__ = ("evaluation", "step_time_s", "reconfiguration_s", "resharded_bytes", "peer_bytes_per_gpu", "moved_classes", "effective_step_time_s", "keeps_layout")
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURATION_S_FIELD_NUMBER: _ClassVar[int]
    RESHARDED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEER_BYTES_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    MOVED_CLASSES_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    KEEPS_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    evaluation: Evaluation
    step_time_s: float
    reconfiguration_s: float
    resharded_bytes: float
    peer_bytes_per_gpu: float
    moved_classes: _containers.RepeatedScalarFieldContainer[str]
    effective_step_time_s: float
    keeps_layout: bool
    def __init__(self, evaluation: _Optional[_Union[Evaluation, _Mapping]] = ..., step_time_s: _Optional[float] = ..., reconfiguration_s: _Optional[float] = ..., resharded_bytes: _Optional[float] = ..., peer_bytes_per_gpu: _Optional[float] = ..., moved_classes: _Optional[_Iterable[str]] = ..., effective_step_time_s: _Optional[float] = ..., keeps_layout: _Optional[bool] = ...) -> None: ...

class ReplanResponse(_message.Message):
    __slots__ = ("status", "horizon_s", "best", "fastest", "keep", "keep_reason", "frontier", "candidates", "solver", "assumptions", "timing", "parameters", "admission")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HORIZON_S_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    FASTEST_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    KEEP_REASON_FIELD_NUMBER: _ClassVar[int]
    FRONTIER_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    ASSUMPTIONS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_FIELD_NUMBER: _ClassVar[int]
    status: PlanStatus
    horizon_s: float
    best: ReplanPoint
    fastest: ReplanPoint
    keep: ReplanPoint
    keep_reason: str
    frontier: _containers.RepeatedCompositeFieldContainer[ReplanPoint]
    candidates: int
    solver: SolveStats
    assumptions: ReshardAssumptions
    timing: Timing
    parameters: SolverParameters
    admission: Admission
    def __init__(self, status: _Optional[_Union[PlanStatus, str]] = ..., horizon_s: _Optional[float] = ..., best: _Optional[_Union[ReplanPoint, _Mapping]] = ..., fastest: _Optional[_Union[ReplanPoint, _Mapping]] = ..., keep: _Optional[_Union[ReplanPoint, _Mapping]] = ..., keep_reason: _Optional[str] = ..., frontier: _Optional[_Iterable[_Union[ReplanPoint, _Mapping]]] = ..., candidates: _Optional[int] = ..., solver: _Optional[_Union[SolveStats, _Mapping]] = ..., assumptions: _Optional[_Union[ReshardAssumptions, _Mapping]] = ..., timing: _Optional[_Union[Timing, _Mapping]] = ..., parameters: _Optional[_Union[SolverParameters, _Mapping]] = ..., admission: _Optional[_Union[Admission, _Mapping]] = ...) -> None: ...
