"""Every assumption of the cost model: a named knob with a default, a source, and presets.

A spec's ``assumptions:`` section names a preset (``default`` or ``textbook``) and may override any
knob by name; an unknown name is an error. ``textbook`` adopts the conventions of seed 003's
``parallel_plan.py`` (its table is reproduced by the tests).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from parplan.costmodel.spec.calibration import FITTED, FIXED
from parplan.costmodel.spec.cdna3_rates import CDNA3_KNOBS
from parplan.costmodel.spec.host_floor import DENSE_LAYER_KERNELS

_CAL: dict[str, float] = {**FIXED, **FITTED}
_CDNA3 = "measured by others, not fitted: no MI300X rows (costmodel/spec/cdna3_rates.py)"
_FIT = "fitted by benchmarks/fit.py on published-runs.yaml (costmodel/spec/calibration.py)"
# ceilings: the largest per-generation value, so that the ceiling knob never binds under the default preset (the
# measured CDNA3 knobs are below them: tests/costmodel/test_fidelity.py)
_CEIL = {
    "matmul": max(v for k, v in _CAL.items() if k.startswith("matmul_efficiency_")),
    "fp8": max(v for k, v in _CAL.items() if k.startswith("fp8_matmul_efficiency_")),
    "attention": max(v for k, v in _CAL.items() if k.startswith("attention_efficiency_")),
}


class Assumptions(BaseModel):
    """Resolved knobs. Field descriptions state the default's source."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # ---- memory ledger (bytes per parameter: seed 000 §1, Megatron theoretical_memory_usage.py)
    weight_bytes: float = Field(2.0, ge=0, description="bf16 working copy of the weights")
    zero3_resident_weight_bytes: Optional[float] = Field(None, ge=0, description="bytes per weight of the shard a ZeRO-3 rank keeps between uses, besides the optimizer's fp32 master; None: weight_bytes (DeepSpeed ZeRO-3 keeps a bf16 partition beside the fp32 one); 0 for PyTorch FSDP with fp32 sharded parameters and a bf16 param_dtype: the fp32 shard is the master weight and the bf16 shard is cast just before each all-gather and freed after it (FSDP1: FlatParamHandle.post_unshard -> _free_low_precision_sharded_param, torch/distributed/fsdp/_flat_param.py; FSDP2: FSDPParam.all_gather_inputs returns sharded_param_data.to(param_dtype), torch/distributed/fsdp/_fully_shard/_fsdp_param.py); the gathered bf16 layers are the ZeRO-3 workspace")
    grad_bytes: float = Field(4.0, ge=0, description="gradient buffer; Megatron accumulates main_grad in fp32 (4); seed 000 counts bf16 (2)")
    optimizer_bytes: float = Field(12.0, ge=0, description="fp32 master weights + Adam m and v (4+4+4), seed 000")
    activation_sbh_coefficient: Optional[float] = Field(
        None, ge=0, description="bytes per s*b*h per layer (before /TP); None: itemized from the architecture "
        "(GQA, gated MLP, flash attention), Korthikanti et al. 2022 Table 2 style; textbook: 34")
    recomputed_layer_sbh_coefficient: float = Field(2.0, ge=0, description="a fully recomputed layer keeps its bf16 input: 2*s*b*h (Korthikanti 2022 §4)")
    flash_attention: bool = Field(True, description="fused attention (FlashAttention): scores never stored, causal blocks skipped; False (Megatron-LM before 2023): Korthikanti's 5·a·s/h activation term (selective recompute removes it), the whole s x s score matrix computed by batched GEMMs, and the scores moved through memory (activation_traffic_passes)")
    dropout_masks: bool = Field(False, description="count 1-byte dropout masks (GPT-3 style); Llama-style models use no dropout")
    fp8_weight_cache_bytes: float = Field(0.0, ge=0, description="FP8 training: bytes per GEMM weight of FP8 copies kept across micro-batches *beside* the BF16 weights: 2 for Transformer Engine with BF16 primary weights (it caches the FP8 weight and, for Hopper's K-major FP8 GEMMs, its transpose from the first micro-batch on); 0 (default) with FP8 primary weights (Megatron --fp8-param-gather / NeMo fp8_params: the 1-byte FP8 weight replaces the BF16 copy and its 1-byte transpose takes the byte saved) or with per-use casts (torchao Float8Linear, DeepSeek-V3's online block quantization); the FP8 runs in the data (NeMo 24.07's Llama-3 8B on TP 1) would not fit with 2; ZeRO-3 caches none")
    fp8_activation_bytes: float = Field(1.0, gt=0, description="FP8 training: bytes per element of the saved inputs of linear layers (Transformer Engine saves the FP8-cast input for the weight gradient; DeepSeek-V3 §3.3.2 caches them in FP8); 2: saved in BF16")
    logits_bytes_per_element: float = Field(4.0, ge=0, description="fp32 logits s*b*V/TP kept on the last stage (seed 003: 8K x 128K x 4 B = 4 GB); textbook: ignored (0)")
    recompute_workspace_layers: float = Field(1.0, ge=0, description="full recompute: while a recomputed layer runs its backward, its activations exist in full again; every stage holds this many layers' full activations of one micro-batch on top of the stored inputs (PyTorch/Megatron activation checkpointing); textbook 0")
    selective_recompute_policy: Literal["model", "attention", "alternate_matmuls", "deepseek_v3"] = Field("model", description="what recompute='selective' recomputes: 'model' (default): 'deepseek_v3' for a model with multi-head latent attention (what DeepSeek-V3 §3.2.3 and Megatron-Core's MLA recipes recompute: --recompute-modules mla_up_proj layernorm moe_act, NVIDIA/Megatron-LM@d98e8a64 megatron/core/transformer/transformer_config.py:560-580), else 'attention'; 'attention' (Megatron-LM --recompute-granularity selective: the attention core; with FlashAttention nothing is stored for it, so it costs nothing and saves nothing); 'alternate_matmuls' (PyTorch per-op selective checkpointing as torchtitan configures it: keep the attention kernel's and every other matmul's output, recompute the rest, and hold one layer's activations in full during its backward, costmodel/memory/memory.py); 'deepseek_v3' (DeepSeek-V3 §3.2.3/§3.3.2, Megatron-Core --recompute-modules layernorm mla_up_proj moe_act: RMSNorm outputs, MLA up-projections and the experts' SwiGLU output recomputed, SwiGLU inputs cached in FP8 under FP8 training)")
    zero3_collectives_per_layer: float = Field(3.0, ge=0, description="ZeRO-3 collectives per layer and micro-batch, each paying a ring latency (n-1)*alpha: FSDP gathers a wrapped block once for forward and once for backward and reduce-scatters it once (3); DeepSpeed ZeRO-3 before mid-2021 issued one per parameter tensor (3 x tensors per layer; DeepSpeed issue #1069, PR #1188)")
    zero3_unsharded_layers: float = Field(2.0, ge=0, description="ZeRO-3/FSDP: layers whose weights (and, in backward, gradients) are held unsharded at once: the one computing and the one prefetched (FSDP2 forward/backward prefetch, DeepSpeed stage-3 prefetch); textbook 0")
    zero_unsharded_across_microbatches_with_pp: bool = Field(True, description="ZeRO-2/3 with pipeline parallelism: a stage keeps its weights unsharded and its gradients unreduced across micro-batches and syncs once per step (PyTorch pipelining with FSDP2, as torchtitan runs it: reshard_after_forward off, gradient sync on the last micro-batch only), so it costs ZeRO-1's memory and traffic; False: gather and reduce every micro-batch; textbook False")
    sequence_parallel_saves_gathered_inputs: bool = Field(False, description="sequence parallelism as PyTorch DTensor runs it (torchtitan: SequenceParallel norms, PrepareModuleInput Shard(1) -> Replicate): the column-parallel matmuls (QKV, MLP up/gate) save their all-gathered input, 2·h bytes per token each at full sequence length instead of 1/TP of it; False: Megatron-LM re-gathers it in the backward pass (Korthikanti 2022 §4.2.2). Memory only; per-op selective checkpointing recomputes the all-gathers, so only the recomputed layer's working set holds them")
    pipeline_runtime: Literal["megatron", "torch"] = Field("megatron", description="whose pipeline runtime holds the stage-boundary buffers: 'megatron' (receives into fresh tensors and frees sent outputs, --deallocate-pipeline-outputs: nothing beyond the layers' activations); 'torch' (torch.distributed.pipelining as torchtitan runs it: receive buffers for every micro-batch's activation and gradient preallocated per model chunk, each in-flight micro-batch's output kept for its backward, and the last stage keeps every micro-batch's bf16 output until the next step)")
    spread_embedding_evenly: bool = Field(False, description="textbook: weights spread evenly over stages instead of embedding on the first and LM head on the last stage")
    memory_from_nominal_gb: bool = Field(False, description="textbook: read '80 GB' as 80e9 bytes")

    # ---- memory outside the ledger (costmodel/memory/runtime_memory.py, which cites each term's source)
    cuda_context_gib: float = Field(0.5, ge=0, description="CUDA context and the loaded kernel images of PyTorch, cuBLAS, cuDNN, NCCL and Transformer Engine, per GPU, taken from the usable memory: about 500-600 MiB on H100 with CUDA 12 (pytorch/pytorch PR #86509: a bare torch context 667 MB eager, 287 MB with CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2; a training job's libraries load on top); textbook 0")
    allocator_fragmentation: float = Field(0.05, ge=0, lt=1, description="share of the GPU's memory the PyTorch caching allocator holds in segments the ledger's tensors cannot use, without expandable_segments (the cost model's long-standing 5 %); taken from the usable memory; textbook 0.1 (seed 003: 0.9 usable)")
    expandable_segments: bool = Field(False, description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch CUDA semantics docs: segments grow in place, less fragmentation): allocator_fragmentation_expandable applies instead of allocator_fragmentation")
    allocator_fragmentation_expandable: float = Field(0.02, ge=0, lt=1, description="fragmentation share with expandable_segments (an assumption, not a measurement: PyTorch documents the reduction, not its size)")
    nccl_buffsize_mib: float = Field(4.0, ge=0, description="NCCL_BUFFSIZE: one send or receive buffer per channel and connection (NCCL environment variables docs: default 4 MiB); a stage-ledger line per communicator the plan creates (costmodel/memory/runtime_memory.py communicators); textbook 0")
    nccl_channels: int = Field(16, ge=0, description="channels of a ring communicator (TP, DP, CP all-gather, expert-DP), each with a send and a receive buffer of nccl_buffsize_mib; NCCL picks the count from the topology (NCCL_MIN_NCHANNELS/NCCL_MAX_NCHANNELS); 16: DGX H100's 8 NICs x NCCL_NCHANNELS_PER_NET_PEER 2 (an assumption; NVLink-only rings may use up to 32)")
    nccl_p2p_channels_per_peer: int = Field(2, ge=0, description="channels per peer of an all-to-all (EP) or point-to-point (PP, CP ring) communicator, each with a send and a receive buffer (NCCL_NCHANNELS_PER_NET_PEER, default 2, NCCL environment variables docs)")
    nccl_nvls_mib: float = Field(0.0, ge=0, description="NVLink SHARP (NVLS) buffers of a TP communicator where NVLS is used (NCCL_NVLS_ENABLE); 0: not counted (many Megatron recipes run with NCCL_NVLS_ENABLE=0)")
    userbuffer_count: int = Field(10, ge=0, description="Transformer Engine userbuffers for TP communication overlap (TP > 1, sequence parallel, tp_comm_overlap > 0): one buffer of (seq/cp · micro-batch) x hidden per overlapped GEMM, TE initialize_ub's 4 ring-exchange + 2 pipelined + 4 bulk methods, BF16 (the 6 all-gather ones FP8 under FP8 training), Megatron-LM d98e8a64 megatron/training/initialize.py:194-250; textbook 0")
    backward_gradient_workspace_layers: float = Field(0.0, ge=0, description="0 (not counted) until validated against measured allocations: at 0.5 the published Narayanan 2021 ZeRO-3 529.6B run on 640 A100 would no longer fit (69.3 -> 76.9 GiB) and the torchtitan 2024-12 rows move 1-4 GiB, some toward and some away from their measured peaks; activation gradients alive while one layer runs its backward, in layers' worth of that layer's activations (all of them, one micro-batch; costmodel/evaluation/stage_extras.py stage_workspace): autograd makes a gradient of each intermediate the shape of the intermediate and frees it once consumed, so at the widest point of a gated MLP's backward the gradients of the gate and up outputs and of their product are alive at once (3·f per token against a Llama-shaped layer's about 6·f: 0.5); not in Korthikanti 2022's stored-activation count, which the ledger follows, yet at the peak (the first stage's first backward) it is there; the measured B200 allocations run 2-9 % above the ledger without it (issue 38); textbook 0")
    te_cublas_workspaces: int = Field(5, ge=0, description="Transformer Engine cuBLAS workspaces (32 MiB each on Hopper and newer, 4 MiB on Ampere: get_cublas_workspace_size_bytes): the main stream's and 4 grouped-GEMM streams'; 3 more with userbuffers (_NUM_MAX_UB_STREAMS); textbook 0")

    # ---- compute (efficiency model: costmodel/compute/efficiency.py; fitted values: costmodel/spec/calibration.py)
    gemm_wave_quantization: bool = Field(False, description="tile and wave quantisation of every GEMM on the GPU's SMs (costmodel/compute/gemm_waves.py: NVIDIA's Matrix Multiplication Background User's Guide, 'Tile Quantization' and 'Wave Quantization'; the least multiplier over cuBLAS's and CUTLASS's 64x128 to 256x128 tiles, gemm_waves.TILE_SHAPES): a GEMM's time x waves·SMs·tile / (M·N), the mean of its forward, input-gradient and weight-gradient outputs; 1 on a GPU without an SM count in costmodel/spec/hardware.py. Off until the coordinated refit (issue 38): on, under the committed calibration the in-sample median |MFU error| goes 1.11 -> 1.38 points and the A100 rows' median |step-time error| 2.8 -> 6.6 %, the fitted large-GEMM efficiencies having absorbed the published shapes' mean quantisation; textbook False")
    host_seconds_per_kernel: float = Field(10e-6, ge=0, description="host time to issue one kernel or collective from eager PyTorch (Python, autograd, the ATen dispatcher, cudaLaunchKernel): about 5-25 us per op (jiahuanglin.xyz, 'From PyTorch op to kernel launch', lesson 18: the per-layer costs of the dispatch chain; the CUDA Graph docs, docs.nvidia.com/dl-cuda-graph: launch overhead is what graphs remove); 10 us assumed, not fitted; a layer takes max(GPU time, host time) (costmodel/spec/host_floor.py); textbook 0")
    host_kernels_per_dense_layer: float = Field(float(DENSE_LAYER_KERNELS), ge=0, description="kernels and collectives the host issues per dense transformer layer and micro-batch, forward + backward, under Megatron-Core with Transformer Engine and SP (costmodel/spec/host_floor.py DENSE_LAYER_OPS, by op: 16 forward, 27 backward, 43); an estimate from the layer's op list, not a profile")
    eager_elementwise: bool = Field(False, description="the model's elementwise ops run one PyTorch op per kernel, unfused: torchtitan without torch.compile ([compile] enable = false, its default: torchtitan v0.2.2 torchtitan/config/job_config.py:721-723); priced as the HBM traffic its norms, rotary embedding, KV-head repeat, attention-output copy and SwiGLU move beyond fused kernels, per token and layer (costmodel/compute/eager_elementwise.py, op by op from torchtitan@9dec370's Llama); False: fused (Megatron-Core with Transformer Engine, torch.compile). The torchtitan export writes [compile] enable = not this")
    moe_dispatch_sync: bool = Field(True, description="an MoE layer's dropless dispatcher blocks the host once per forward to read the per-expert token counts (Megatron-Core alltoall, allgather and flex/HybridEP/DeepEP dispatchers, torchtitan's all-to-all: costmodel/spec/host_floor.py cites each), so the GPU waits for the round trip and for the kernels the host issues after it until the host runs ahead again (host_floor.moe_sync_exposed_s, kernels counted from Megatron-Core's code, host_seconds_per_kernel each); 0 under cuda_graphs and where experts are padded to capacity (moe_pad_to_capacity) but for DeepEP; textbook False")
    moe_dispatch_sync_round_trip_s: float = Field(20e-6, ge=0, description="the dispatcher's sync itself: the D2H copy of the token counts after the GPU drains and the host thread's return from the event's synchronize, per MoE layer and micro-batch (costmodel/spec/host_floor.py); 20 us assumed (two host-side operations at the 10 us of host_seconds_per_kernel), not measured nor fitted")
    cuda_graphs: bool = Field(False, description="the framework replays each layer as a captured CUDA graph (Megatron-Core --cuda-graph-impl transformer_engine|local, Megatron-Bridge cuda_graph_impl; docs.nvidia.com/megatron/user-guide/features/cuda-graph): one launch per graph, so the host floor is 0; False: eager launches (the default of Megatron-Core, Megatron-Bridge ('none' default) and torchtitan)")
    matmul_efficiency: float = Field(_CEIL["matmul"], gt=0, le=1, description="ceiling on the share of the dense BF16 peak any linear layer reaches (the solver's time bounds use it); default: the largest fitted per-generation value, so it never binds; textbook: 0.6 flat (seed 003: EFF = 0.6)")
    matmul_efficiency_ampere: Optional[float] = Field(_CAL["matmul_efficiency_ampere"], gt=0, le=1, description=f"share of the BF16 peak that large GEMMs reach on A100; {_FIT}; None: matmul_efficiency")
    matmul_efficiency_hopper: Optional[float] = Field(_CAL["matmul_efficiency_hopper"], gt=0, le=1, description=f"share of the BF16 peak that large GEMMs reach on H100/H800/H200; {_FIT}; None: matmul_efficiency")
    matmul_efficiency_blackwell: Optional[float] = Field(_CAL["matmul_efficiency_blackwell"], gt=0, le=1, description=f"share of the BF16 peak that large GEMMs reach on B200/GB200; {_FIT} as a ratio to the Hopper value with a prior (benchmarks/fit.py RATIOS); None: matmul_efficiency")
    matmul_efficiency_cdna3: Optional[float] = Field(CDNA3_KNOBS["matmul_efficiency_cdna3"], gt=0, le=1, description=f"share of the BF16 peak that large GEMMs reach on MI300X: AMD's Max-Achievable FLOPs, hipBLASLt-bench 708 of 1307.4 TFLOP/s at M=4096 N=4864 K=32896 (ROCm 6.3.0, hipBLASLt@db8e93b; rocm.blogs.amd.com measuring-max-achievable-flops-part2, Table 1); {_CDNA3}; None: matmul_efficiency")
    matmul_shape_penalty: float = Field(_CAL["matmul_shape_penalty"], ge=0, description=f"kappa: a GEMM of M x K x N takes 1 + kappa*R*(1/M + 1/K + 1/N) times its large-GEMM time, R = BF16 peak / HBM bandwidth (roofline ridge); TP, CP and small micro-batches shrink M, K, N; {_FIT}; textbook 0")
    fp8_matmul_efficiency: Optional[float] = Field(_CEIL["fp8"], gt=0, le=1, description="ceiling on the share of the FP8 peak that linear layers reach under FP8 training (casts and scaling included; the solver's bounds use it); default: the largest fitted per-generation value; None: matmul_efficiency against the FP8 peak (textbook)")
    fp8_matmul_efficiency_hopper: Optional[float] = Field(_CAL["fp8_matmul_efficiency_hopper"], gt=0, le=1, description=f"share of the FP8 peak that large FP8 GEMMs reach on Hopper; {_FIT}; None: fp8_matmul_efficiency")
    fp8_matmul_efficiency_blackwell: Optional[float] = Field(_CAL["fp8_matmul_efficiency_blackwell"], gt=0, le=1, description=f"share of the FP8 peak that large FP8 GEMMs reach on Blackwell; {_FIT} as a ratio to the Hopper value with a prior of 1.10 (Hopper's FP22 tensor-core accumulation makes Transformer Engine run the dgrad/wgrad FP8 GEMMs with split accumulation, 1.1-1.2x slower, pytorch/ao#2377; Blackwell accumulates in FP32; benchmarks/fit.py PRIORS); None: fp8_matmul_efficiency")
    fp8_matmul_efficiency_cdna3: Optional[float] = Field(CDNA3_KNOBS["fp8_matmul_efficiency_cdna3"], gt=0, le=1, description=f"share of the FP8 peak that large FP8 GEMMs reach on MI300X: AMD's Max-Achievable FLOPs, hipBLASLt-bench 1273 of 2614.9 TFLOP/s at M=4096 N=3648 K=32896 (same source; its footnote says 1223.6); {_CDNA3}; None: fp8_matmul_efficiency")
    attention_efficiency: Optional[float] = Field(_CEIL["attention"], gt=0, le=1, description="ceiling on the share of the BF16 peak reached in the attention core (QK^T, AV), which runs in BF16 even under FP8 training; default: the largest fitted per-generation value; None: the linear layers' rate (textbook)")
    attention_efficiency_ampere: Optional[float] = Field(_CAL["attention_efficiency_ampere"], gt=0, le=1, description=f"long-sequence share of the BF16 peak in the attention core on A100; {_FIT}; None: attention_efficiency")
    attention_efficiency_hopper: Optional[float] = Field(_CAL["attention_efficiency_hopper"], gt=0, le=1, description=f"long-sequence share of the BF16 peak in the attention core on Hopper (FlashAttention-2/3 reach roughly 35-75 %, Shah et al. 2024 §4); {_FIT}; None: attention_efficiency")
    attention_efficiency_blackwell: Optional[float] = Field(_CAL["attention_efficiency_blackwell"], gt=0, le=1, description=f"long-sequence attention-core share of the BF16 peak on Blackwell; {_FIT} as a ratio to the Hopper value with a prior from cuDNN against cuDNN (B200 cuDNN 9.13 at least 1240 TFLOP/s, 55 % of 2.25 PF, FlashAttention-4 paper arXiv 2603.05451: FA4 1613 TFLOP/s is up to 1.3x cuDNN; H100 cuDNN about 600 TFLOP/s, 61 %, FlashAttention-3 paper Fig. 5: ratio >= 0.91); None: attention_efficiency")
    attention_efficiency_cdna3: Optional[float] = Field(CDNA3_KNOBS["attention_efficiency_cdna3"], gt=0, le=1, description=f"long-sequence attention-core share of the BF16 peak on MI300X: 1.15x the throughput of an FA2-class kernel on H100 (attention_efficiency_flash2 x 989.4/1307.4), AMD's launch claim of FlashAttention-2 forward at 1.1-1.2x H100 (SemiAnalysis, 'AMD MI300 Performance - Faster Than H100, But How Much?', Dec 2023); a vendor's forward-only figure, no independent forward+backward one found; {_CDNA3}; None: attention_efficiency")
    fp8_attention: bool = Field(False, description="FP8 dot-product attention under FP8 training (Transformer Engine fp8_dpa / NVTE_FP8_DPA, cuDNN FP8 fused attention; the MLPerf Training v5.1 NeMo configs set FP8_DPA=True): the attention core runs fp8_attention_speedup times faster than in BF16; False: BF16 attention (TE's default)")
    fp8_recipe: Literal["tensorwise", "mxfp8"] = Field("tensorwise", description="FP8 scaling recipe of the linear layers under FP8 training: 'tensorwise' (one scale per tensor, delayed or current scaling; the MLPerf v5.1 NeMo configs' FP8_RECIPE=tensorwise); 'mxfp8' (Blackwell's 1x32 block scaling, Transformer Engine MXFP8BlockScaling): the FP8 linear layers take costmodel/compute/efficiency.py MXFP8_LINEAR_TIME_FACTOR (1.11) times as long, from NVIDIA's Megatron-Bridge 25.11 table of one Llama 3 8B plan in both recipes")
    fp8_transpose_copies: bool = Field(True, description="FP8 training on a GPU whose FP8 GEMMs take only the TN layout (Hopper) writes a transposed one-byte copy of every GEMM input and output gradient for the weight-gradient GEMM, M·(K + N) bytes per GEMM at HBM bandwidth; Blackwell's take either layout and Transformer Engine writes none (costmodel/compute/fp8_transpose.py); textbook False")
    fp8_attention_speedup: float = Field(_CAL.get("fp8_attention_speedup", 1.6), ge=1, le=2, description=f"attention-core speed-up of FP8 over BF16 attention when fp8_attention is on (FlashAttention-3 paper, Shah et al. 2024: FP8 forward close to 1.2 PFLOP/s vs 740 TFLOP/s in BF16 on H100, 1.6x; the FP8 peak is 2x); {_FIT}")
    attention_kernel: Literal["fused", "flash2"] = Field("fused", description="attention kernel on Hopper and newer: 'fused' (cuDNN fused attention / FlashAttention-3, Transformer Engine's default in Megatron-Core and NeMo: attention_efficiency_<generation>) or 'flash2' (FlashAttention-2-class kernels without Hopper's asynchronous tensor-core instructions, e.g. PyTorch SDPA in 2024: attention_efficiency_flash2; FlashAttention-3 paper: FA2 reaches about 35 % of H100's peak, FA3 up to 75 %); on Ampere both are FlashAttention-2")
    attention_efficiency_flash2: Optional[float] = Field(_CAL["attention_efficiency_flash2"], gt=0, le=1, description=f"long-sequence share of the BF16 peak of a FlashAttention-2-class kernel on Hopper and newer (attention_kernel = 'flash2'); {_FIT}")
    attention_seq_penalty: float = Field(_CAL["attention_seq_penalty"], ge=0, description=f"s0 in tokens: attention efficiency = e_attn / (1 + s0 / (seq_len/cp)); FlashAttention is slower on short sequences (FlashAttention-2 Fig. 4-6); {_FIT}; textbook 0")
    activation_traffic_passes: float = Field(_CAL["activation_traffic_passes"], ge=0, description=f"memory-bound elementwise work (norms, activation functions, dropout, residual adds, unfused softmax): a layer's activation bytes (the memory ledger's items, all of them) times this many passes at HBM bandwidth, per micro-batch fwd+bwd; {_FIT}; textbook 0")
    clamped_glu_forward_passes: float = Field(4.0, ge=0, description="passes over the fc1 output (routed rows x 2·expert_ffn_hidden_size, BF16) that a clamped gated activation (model.moe.activation_clamp) adds per forward, at HBM bandwidth, again per recomputed moe_act: Megatron-Core's chunk, two clamps and cat before its fused kernel (Megatron-LM 2a75ac12 fusions/fused_bias_geglu.py:424-432; costmodel/moe/expert_elementwise.py); 0 where a framework fuses the clamp")
    clamped_glu_backward_passes: float = Field(5.0, ge=0, description="the same per backward: the two clamps' backward (3 half passes) and the chunk's concatenated gradient (2) (costmodel/moe/expert_elementwise.py)")
    expert_bias_passes: float = Field(14.0, ge=0, description="passes over the fc2 output (routed rows x hidden_size, BF16) that the experts' second bias (model.moe.expert_bias) adds per forward + backward: Megatron-Core's per-expert t + b·p and cat, forward 6, backward 8 (Megatron-LM 2a75ac12 transformer/moe/experts.py:312-330; costmodel/moe/expert_elementwise.py); 0 where a framework fuses the bias")
    hbm_bandwidth_gbps: Optional[float] = Field(None, gt=0, description="HBM bandwidth per GPU in GB/s for the GEMM roofline and the elementwise traffic; None: the GPU's datasheet value (costmodel/compute/efficiency.py)")
    attention_flops_causal_fraction: float = Field(0.5, gt=0, le=1, description="causal masking halves the score/context FLOPs (seed 003: 6*s*h per token per layer)")
    backward_to_forward_ratio: float = Field(2.0, gt=0, description="B = 2F for matmuls (seed 000 bubble example: F=1, B=2)")
    moe_load_imbalance: float = Field(1.1, ge=1, description="busiest EP rank's routed tokens over the mean at moe_load_imbalance_reference_ep ranks (seed 003 exercise: 1.1-1.3); at other EP sizes it scales as 1 + (this - 1)·√(ln ep / ln ref), 1 at ep 1 (the expected maximum of ep Gaussian loads, costmodel/moe/moe_dispatch.py busiest_rank_load); applied to the routed-expert GEMMs, their activations and the all-to-all's busiest receiver; textbook 1")
    moe_pad_to_capacity: bool = Field(False, description="with model.moe.capacity_factor: every expert's input padded to its capacity, so every EP rank computes and receives capacity_factor x the mean whatever the routing (DeepSpeed-MoE's capacity-shaped dispatch, deepspeed/moe/sharded_moe.py einsum 'sec,sm->ecm'; Megatron-Core --moe-pad-expert-input-to-capacity); set by the framework's profile; false: the busiest rank's load, capped at the capacity (costmodel/moe/moe_dispatch.py busiest_load)")
    moe_load_imbalance_reference_ep: int = Field(8, ge=2, description="EP size at which moe_load_imbalance is stated (assumed: one 8-GPU node, the seed exercise's setting; not measured)")

    # ---- communication (alpha-beta, seed 001 §2.3)
    include_latency: bool = Field(True, description="alpha term of the alpha-beta model; textbook: bandwidth only")
    intra_node_bandwidth_efficiency: float = Field(_CAL["intra_node_bandwidth_efficiency"], gt=0, le=1, description=f"achieved bus bandwidth over NVLink link rate; {_FIT}")
    collective_busbw_priors: bool = Field(True, description="NVLink collectives at the measured NCCL bus bandwidth of their kind where the GPU has one (costmodel/spec/hardware.py NVLINK_BUSBW_GBPS, each with its source: H100/H200 all-gather/reduce-scatter 360 GB/s, all-reduce 470 with NVLS; H800 160 for every kind, DeepSeek-V3 §3.2.2; A100 all-reduce 240) x nvlink_busbw_scale, instead of line rate x intra_node_bandwidth_efficiency; textbook False")
    nvlink_busbw_scale: float = Field(1.0, gt=0, le=1.5, description="the fit's handle on the NVLink bus-bandwidth priors (collective_busbw_priors): achieved / measured; 1: the NCCL-tests figures as they are (not fitted)")
    nvlink_sharp_all_reduce: bool = Field(True, description="all-reduces inside an NVSwitch domain use NCCL's NVLS (NVLink SHARP) algorithm where the GPU has it (Hopper and newer; NCCL_NVLS_ENABLE defaults on): the all_reduce_nvls prior")
    inter_node_bandwidth_efficiency: float = Field(_CAL["inter_node_bandwidth_efficiency"], gt=0, le=1, description=f"achieved bus bandwidth over NIC line rate; {_FIT}")
    intra_node_latency_factor: float = Field(_CAL["intra_node_latency_factor"], gt=0, description=f"achieved per-step latency of NVLink collectives over the GPU catalog's alpha (seed 001: 5 us); {_FIT}")
    inter_node_latency_factor: float = Field(_CAL["inter_node_latency_factor"], gt=0, description=f"achieved per-step latency of network collectives over the GPU catalog's alpha (seed 001: 30 us); {_FIT}")
    hierarchical_collectives: bool = Field(True, description="DP/ZeRO reduce-scatters and all-gathers, and TP collectives of a TP group wider than the NVLink domain, of a group with k members per NVLink domain move 1/k of each GPU's ring bytes over its NIC (the ring crosses the network once per domain; NCCL rings traverse the local GPUs over NVLink); textbook: every GPU's bytes over its own NIC")
    ring_latency_by_hop: bool = Field(True, description="a ring collective (DP/ZeRO, TP wider than the NVLink domain) of n members over d NVLink domains pays n - d NVLink hops and d - 1 network hops (NCCL's ring latency, NVIDIA/nccl@01afd20a src/graph/tuning.cc: (nsteps - nInterSteps) x intraLat + nInterSteps x interLat; costmodel/communication/comm.py hierarchical_collective_link); off: every step at the network latency; textbook off (it has no latency)")
    hierarchical_collective_efficiency: float = Field(_CAL["hierarchical_collective_efficiency"], ge=0, le=1, description=f"share of that k-fold speed-up realized: a group with k members per domain runs at NIC x (1 + (k-1) x this); {_FIT}")
    tp_comm_overlap: float = Field(1.0, ge=0, le=1, description="share of a block's TP collectives hidden behind the block's GEMMs (Megatron --tp-comm-overlap, torchtitan AsyncTP), at most what (tp-1)/tp of the GEMMs cover (Transformer Engine's ring exchange: tp GEMM chunks, tp-1 exchanges on copy engines beside them, TransformerEngine@d0067d0d comm_gemm_overlap.cpp:1161-1199 and pytorch/module/base.py:384-390; layer_comm.LayerComm.tp_block_s): 1, all the window covers (fitted free under that bound it reached its upper bound, benchmarks/README.md); tp_overlap_pairs prices it pair by pair, with the SMs and chunks it costs; set 0 for frameworks without it; seed 003: none")
    tp_overlap_pairs: bool = Field(False, description="price Transformer Engine's TP overlap pair by pair (layer_comm.LayerComm.paired_s): each collective beside the one GEMM TE pairs it with (ring-exchange all-gathers beside (tp-1)/tp of theirs, the forward reduce-scatter in tp_overlap_rs_splits chunks with the last one exposed, the bulk ones beside the column-parallel backward GEMMs), and the SMs its pipelined and bulk kernels hold (tp_overlap_comm_sms, tp_overlap_sm_margin); False: every collective of a block hidden behind (tp-1)/tp of all the block's GEMMs together, no SM held, no chunk exposed. Off until the coordinated refit (issue 38): on, the fit moves the Hopper BF16 GEMMs 0.768 -> 0.784 and kappa 1.26 -> 1.08, in-sample |MFU error| 1.12/3.14 -> 1.11/3.12 (median/p90, refit) but leave-one-source-out 1.94/4.92 -> 1.97/5.16, the Megatron-Core 2024 TP8 rows, predicted too slow already, the most (benchmarks/README.md 'TP overlap pair by pair'); textbook False")
    tp_overlap_comm_sms: int = Field(16, ge=0, description="tp_overlap_pairs only: SMs Transformer Engine's SM-based TP-overlap kernels hold (tp_comm_overlap > 0, SP): the pipelined reduce-scatter beside the row-parallel forward GEMM (attention's output projection, FC2) and the bulk all-gather / reduce-scatter beside the column-parallel backward GEMMs (QKV's and FC1's input gradient and weight gradient) launch their GEMM on the GPU's SMs less these (TransformerEngine@d0067d0d transformer_engine/pytorch/module/base.py:350-395, initialize_ub's defaults: num_sm 16 and set_sm_margin for the 'pipeline' and 'bulk' methods, 1 SM on the copy engines for 'ring_exchange'; common/comm_gemm_overlap/comm_gemm_overlap.cpp:143 _math_sms = sm_count - num_comm_sm, passed to every chunk's nvte_cublas_gemm), what Megatron-LM's --tp-comm-overlap runs without --tp-comm-overlap-cfg (d98e8a64 megatron/training/initialize.py:211-246): those GEMMs take SMs/(SMs - n) of their time (layer_comm.LayerComm.tp_block_s). Megatron-Bridge's tuned per-model configs hold fewer (training/comm_overlap.py at aae82005: 24 on the output projection, 2-24 without margin on the bulk ones); 0: none")
    tp_overlap_sm_margin: bool = Field(True, description="tp_overlap_pairs only: tp_overlap_comm_sms held for the whole GEMM beside them (Transformer Engine >= 2.0: initialize_ub's default set_sm_margin is True for the 'pipeline' and 'bulk' methods, TransformerEngine@544dd14b 2025-02-07 pytorch/module/base.py:308, d0067d0d base.py:386; the GEMM is launched with CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = SMs - num_sm, common/gemm/cublaslt_gemm.cu:467): its time x SMs/(SMs - n); False: TE < 2.0, whose default was False (933294dc base.py:304): the kernels hold their SMs only while they run and the GEMM spreads over the rest (costmodel/moe/moe_comm.py reserved_sm_time_s)")
    tp_overlap_rs_splits: int = Field(4, ge=0, description="tp_overlap_pairs only: chunks of Transformer Engine's pipelined reduce-scatter beside the row-parallel forward GEMM (tp_comm_overlap > 0, SP): the last chunk's reduce-scatter starts after the last GEMM chunk, so 1/n of the collective is never hidden (TransformerEngine@d0067d0d common/comm_gemm_overlap/comm_gemm_overlap.cpp:611-760 CommOverlapBase::split_overlap_rs, 'Last communication chunk with max SM'; num_splits 4 for the 'pipeline' method, pytorch/module/base.py:387); 0: the reduce-scatter runs as a ring exchange (FP8 tuned configs) beside (tp-1)/tp of the GEMM like the all-gathers")
    cp_comm_overlaps_attention: bool = Field(True, description="ring KV exchange overlapped with attention compute (seed 003)")
    cp_ring_model: Literal["blockwise", "aggregate"] = Field("blockwise", description="how the p2p KV ring's exposure is priced: 'blockwise' (physical, no fitted share: each of the cp-1 forward and cp backward steps exposes max(0, transfer - that step's attention block), Transformer Engine AttnFuncWithCPAndKVP2P, Liu et al. 2023 §3; costmodel/communication/context_parallel.py ring_exposed_s); 'aggregate' (seed 003: the ring's total less cp_comm_overlap of it, never more than the whole attention core); textbook 'aggregate'")
    cp_comm_overlap: float = Field(1.0, ge=0, le=1, description="cp_ring_model 'aggregate' only: share of the CP ring KV exchange hidden behind the attention core (never more than that compute); not fitted (the default model, 'blockwise', has no share); textbook 1 (all of it, as far as attention lasts)")
    overlap_limited_by_compute: bool = Field(True, description="hidden DP/ZeRO traffic cannot exceed the compute it hides behind (per layer: the backward of the last micro-batch for per-step traffic, the layer's fwd+bwd for ZeRO-2/3); textbook: fixed fractions")
    dp_comm_overlap: float = Field(_CAL["dp_comm_overlap"], ge=0, le=1, description=f"share of DP grad reduce / param gather hidden behind backward / forward (Megatron --overlap-grad-reduce/--overlap-param-gather, PyTorch DDP buckets); {_FIT} on the rows that overlap; seed 003: 80 %")
    dp_overlap_min_zero_stage: int = Field(0, ge=0, le=3, description="the lowest ZeRO stage whose once-per-step DP traffic overlaps compute (dp_comm_overlap); below it none is hidden. 0 (default): every stage (Megatron --overlap-grad-reduce, PyTorch DDP/FSDP buckets); 2 for DeepSpeed, whose ZeRO-0 engine all-reduces after the backward and whose ZeRO-1 registers no gradient hooks, so overlap_comm is ignored (microsoft/DeepSpeed#1246), and whose pipeline engine (ZeRO 0/1 only) reduces after the flush (deepspeed/runtime/pipe/schedule.py TrainSchedule: ReduceTiedGrads, ReduceGrads)")
    zero_microbatch_comm_overlap: float = Field(_CAL["zero_microbatch_comm_overlap"], ge=0, le=1, description=f"share hidden of the per-micro-batch traffic of ZeRO-2 (gradient reduce-scatter) and ZeRO-3 (parameter all-gathers + reduce-scatter; FSDP prefetch); {_FIT}")
    pp_comm_overlap: float = Field(_CAL["pp_comm_overlap"], ge=0, le=1, description=f"share of stage-boundary p2p hidden; {_FIT}; seed 003: half")
    dualpipe_pp_comm_overlap: Optional[float] = Field(None, ge=0, le=1, description="share of stage-boundary p2p hidden under DualPipe, whose paired chunks send one chunk's boundary activations while the partner chunk computes; DeepSeek-V3 report (arXiv 2412.19437 §3.2.1): DualPipe 'ensures that both all-to-all and PP communication can be fully hidden during execution' (set 1 for that); None: as its step order hides it, all of it in the F&B steps and the fitted pp_comm_overlap in the lone chunks of the fill and drain (costmodel/schedules/paired_overlap.py paired_pass_share; DualPipeV likewise)")
    ep_comm_overlap: float = Field(0.0, ge=0, le=1, description="share of EP all-to-all hidden by schedules that do not pair chunks (not DualPipe, DualPipeV or plan.moe_a2a_overlap, whose exposure is what the paired compute cannot cover: costmodel/schedules/paired_overlap.py); never more than the layer's compute (overlap_limited_by_compute)")
    paired_overlap_by_component: bool = Field(True, description="paired schedules (DualPipe, DualPipeV, plan.moe_a2a_overlap) price a forward/backward pair per component, four phases of attention, dispatch, MLP and combine each beside the other pass's communication or compute (DeepSeek-V3 §3.2.1 Figure 4; Megatron-Core model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run: costmodel/schedules/paired_overlap.py component_phases_s); off: per chunk, the forward's whole compute beside the backward's whole all-to-all and the other way round (a lower bound of the per-component form)")
    ep_dispatch_bytes: float = Field(2.0, gt=0, description="bytes per element of dispatched tokens (DeepSeek-V3 dispatches FP8: 1); the combine is BF16 (2)")
    hierarchical_all_to_all: bool = Field(True, description="EP all-to-all over two concurrent tiers: copies for GPUs in the sender's NVLink domain over NVLink, the rest over the network, every send posted at once (one latency per tier); node-limited routing (model.moe.max_nodes_per_token) crosses the network once per node and fans out over NVLink (costmodel/communication/collectives.py all_to_all_time_s); textbook: a ring over the EP group's slowest link, (ep-1) latencies in sequence")
    ep_comm_sm_fraction: Optional[float] = Field(None, ge=0, lt=1, description="share of the SMs the overlapped schedules (DualPipe, DualPipeV, plan.moe_a2a_overlap) reserve for the EP dispatch/combine kernels while those run (the MoE layer's compute beside its all-to-all A runs on 1-x of the SMs: x·min(A, C/(1-x)) longer, costmodel/moe/moe_comm.py reserved_sm_time_s; other schedules reserve them while the share ep_comm_overlap hides runs beside the compute, costmodel/evaluation/moe_layer.py); None: the dispatcher's SMs (model.moe.dispatcher_sms, default 20: DeepEP's and DeepSeek-V3 §3.2.2's) over the GPU's (costmodel/spec/hardware.py SM_COUNT; 132 where unknown)")
    tp_sp_weight_grad_regather: bool = Field(True, description="with sequence parallelism the column-parallel linears all-gather their sequence-sharded input again in the backward pass for the weight gradient (Megatron-LM megatron/core/tensor_parallel/layers.py): 5 collectives per attention/MLP block instead of 4; textbook False (seed 003 counts 8 per layer)")
    param_gather_bytes: Optional[float] = Field(None, gt=0, description="bytes per weight element in the distributed optimizer's parameter all-gather; None: weight_bytes; 1 with FP8 primary weights (Megatron-Core --fp8-param-gather, NeMo fp8_param_gather: the MLPerf v5.1 NeMo configs' FP8_PARAM_GATHER=True)")
    grad_reduce_bytes: float = Field(4.0, gt=0, description="bytes per gradient element in the DP reduce-scatter/all-reduce; Megatron reduces fp32 main grads under bf16; seed 003: 2")
    cp_kv_sharded_by_tp: bool = Field(True, description="each TP rank exchanges only its own KV heads in the CP ring; seed 003 sends the whole K,V row per GPU")
    cp_kv_heads_repeated: bool = Field(False, description="the model repeats its KV heads up to the query head count before attention, so context parallelism exchanges and gathers K,V at num_attention_heads, not num_kv_heads (torchtitan before ff0829c1, 2026-01-27 'GQA without kv repeats': repeat_kv ahead of SDPA, torchtitan@9dec370 torchtitan/models/llama/model.py:201-202; torch's context parallel wraps the SDPA op and gathers what it receives); Megatron/TE and seed 003 exchange the KV heads: False")
    recompute_repeats_comm: bool = Field(True, description="full recompute repeats the forward TP/CP comm; textbook: not counted")
    tp_requires_nvlink: bool = Field(True, description="TP groups must sit inside one NVLink domain (seed 003: tp <= NODE)")

    # ---- optimizer CPU offload (costmodel/memory/offload.py; read only by plans with optimizer_offload_fraction > 0)
    host_bandwidth_gbps: Optional[float] = Field(None, gt=0, description="GPU-host link per GPU per direction in GB/s for the optimizer offload copies; None: the GPU's PCIe / NVLink-C2C line rate (costmodel/memory/offload.py HOST_BANDWIDTH_GBPS: H100 PCIe Gen5 x16 64, A100 Gen4 32, GB200 C2C 450)")
    host_bandwidth_efficiency: float = Field(1.0, gt=0, le=1, description="achieved share of the host link's line rate for pinned-memory copies (1: line rate; no measurement fitted)")
    host_adam_params_per_s: float = Field(4.5e9, gt=0, description="parameters per second one node's CPUs update with a vectorized Adam (DeepSpeed CPU-Adam), shared by the node's GPUs; Ren et al. 2021, ZeRO-Offload (USENIX ATC '21) Table 3: CPU-Adam updates 1 B parameters in about 0.22 s (not re-verified against the paper: the sources at hand, DeepSpeed edaa7221 docs/_pages/training.md:378-384, state only CPU-Adam's 5.1-6.5x speedup over PyTorch's CPU Adam for 1-10 B parameters)")
    optimizer_offload_d2h_bytes: float = Field(4.0, ge=0, description="bytes per offloaded parameter copied GPU -> host per step: its fp32 main gradient (Megatron-LM d98e8a64 megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py:104-114 copies each grad into a pinned host buffer of the optimizer parameter's dtype, the distributed optimizer's fp32 main params)")
    optimizer_offload_h2d_bytes: float = Field(4.0, ge=0, description="bytes per offloaded parameter copied host -> GPU per step: the updated fp32 main parameter (hybrid_optimizer.py:117-124 param_copy_back_gpu_hook)")
    activation_offload_overlap: float = Field(1.0, ge=0, le=1, description="activation CPU offload (costmodel/evaluation/activation_offload.py; read only by plans with activation_offload_layers > 0): share of a layer's forward (backward) time that hides the device-to-host (host-to-device) copy of an offloaded layer's saved activations; exposed = max(0, copy - share x time) per layer and pass. 1 (default, assumed, not fitted): Transformer Engine's statement that the copies are 'completely hidden behind computation if computation time of a layer is longer than host-device communication time' (NVIDIA/TransformerEngine d0067d0d transformer_engine/pytorch/cpu_offload_v1.py:316-321); over host_bandwidth_gbps x host_bandwidth_efficiency")
    optimizer_offload_overlap: bool = Field(False, description="the offload copies overlap the CPU Adam step (Megatron-Core --overlap-cpu-optimizer-d2h-h2d, arguments.py:2926, default off): the step pays max(D2H + H2D, CPU) instead of their sum")

    # ---- pipeline
    zb_weight_grad_fraction: float = Field(0.5, ge=0, le=1, description="W / B of the linear layers' GEMMs for zero-bubble schedules (ZB paper: W ~ B/2); the attention core, elementwise work and communication have no W, so the bubble's W is this x the layers' linear-GEMM share of their time x B (costmodel/schedules/schedule.py bubble_beta)")
    uneven_stage_bubble: bool = Field(True, description="the bubble's PP-1 idle slots are the other stages' per-micro-batch times, beta·(Σ t_stage - t_max)/(PP-1) (Alpa, OSDI '22, §5.1 Eq. 2: T = Σ t_i + (B-1)·max t_j); False: every slot is the slowest stage's, beta·t_max (textbook). Equal stages: the same")
    dualpipe_chunk_overlap: float = Field(0.0, ge=0, le=1, description="share of the forward *compute* that runs hidden under the backward compute in DualPipe's paired F&B chunk: F&B = F + B - x·F in units of the stage time, which already carries only the communication the pairing leaves exposed (costmodel/schedules/paired_overlap.py); 0: the pairing hides communication, not compute (DeepSeek-V3 §3.2.1; the two chunks share the SMs)")

    # ---- context parallel
    min_tokens_per_cp_rank: int = Field(1024, ge=1, description="smallest sequence shard per CP rank; textbook 4096 (seed 003 MIN_CP_CHUNK)")


PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "textbook": {
        "grad_bytes": 2.0,
        "activation_sbh_coefficient": 34.0,
        "recomputed_layer_sbh_coefficient": 2.0,
        "logits_bytes_per_element": 0.0,
        "recompute_workspace_layers": 0.0,
        "zero3_unsharded_layers": 0.0,
        "zero_unsharded_across_microbatches_with_pp": False,
        "spread_embedding_evenly": True,
        "cuda_context_gib": 0.0,
        "allocator_fragmentation": 0.1,
        "nccl_buffsize_mib": 0.0,
        "userbuffer_count": 0,
        "te_cublas_workspaces": 0,
        "host_seconds_per_kernel": 0.0,
        "moe_dispatch_sync": False,
        "gemm_wave_quantization": False,  # off by default too; pinned so the refit that turns it on leaves textbook
        "backward_gradient_workspace_layers": 0.0,
        "memory_from_nominal_gb": True,
        "matmul_efficiency": 0.6,
        "matmul_efficiency_ampere": None,
        "matmul_efficiency_hopper": None,
        "matmul_efficiency_blackwell": None,
        "matmul_efficiency_cdna3": None,
        "matmul_shape_penalty": 0.0,
        "attention_efficiency": None,
        "attention_efficiency_ampere": None,
        "attention_efficiency_hopper": None,
        "attention_efficiency_blackwell": None,
        "attention_efficiency_cdna3": None,
        "attention_seq_penalty": 0.0,
        "activation_traffic_passes": 0.0,
        "clamped_glu_forward_passes": 0.0,
        "clamped_glu_backward_passes": 0.0,
        "expert_bias_passes": 0.0,
        "fp8_matmul_efficiency": None,
        "fp8_matmul_efficiency_hopper": None,
        "fp8_matmul_efficiency_blackwell": None,
        "fp8_matmul_efficiency_cdna3": None,
        "overlap_limited_by_compute": False,
        "moe_load_imbalance": 1.0,
        "include_latency": False,
        "hierarchical_collectives": False,
        "ring_latency_by_hop": False,
        "intra_node_latency_factor": 1.0,
        "inter_node_latency_factor": 1.0,
        "intra_node_bandwidth_efficiency": 1.0,
        "inter_node_bandwidth_efficiency": 1.0,
        "tp_comm_overlap": 0.0,
        "tp_sp_weight_grad_regather": False,
        "tp_overlap_pairs": False,
        "hierarchical_all_to_all": False,
        "collective_busbw_priors": False,
        "fp8_activation_bytes": 2.0,
        "fp8_transpose_copies": False,
        "cp_comm_overlaps_attention": True,
        "cp_ring_model": "aggregate",
        "cp_comm_overlap": 1.0,
        "dp_comm_overlap": 0.8,
        "zero_microbatch_comm_overlap": 0.8,
        "pp_comm_overlap": 0.5,
        "recompute_repeats_comm": False,
        "grad_reduce_bytes": 2.0,
        "cp_kv_sharded_by_tp": False,
        "min_tokens_per_cp_rank": 4096,
        "uneven_stage_bubble": False,
    },
}

KNOBS: tuple[str, ...] = tuple(Assumptions.model_fields)


def selective_policy(a: Assumptions, mla: bool) -> str:
    """The selective-recompute policy in force: the knob, with 'model' resolved by the model's attention (its
    description): 'deepseek_v3' with MLA, else 'attention'."""
    if a.selective_recompute_policy == "model":
        return "deepseek_v3" if mla else "attention"
    return a.selective_recompute_policy

AssumptionsSpec = create_model(  # the spec's ``assumptions:`` section: a preset plus optional overrides
    "AssumptionsSpec",
    __config__=ConfigDict(extra="forbid", strict=True, frozen=True),
    preset=(Literal[tuple(PRESETS)], "default"),
    # overrides keep each knob's own range checks (ge/le/gt) so a bad value is a spec error naming it
    **{name: (Optional[Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation], None)
       for name, field in Assumptions.model_fields.items()},
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


__all__ = ["Assumptions", "AssumptionsSpec", "PRESETS", "KNOBS", "resolve_assumptions", "describe_knobs", "selective_policy",
           "ValidationError"]
