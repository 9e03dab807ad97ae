"""Hardware catalog: one entry per GPU, every value with its source, every field overridable in the spec.

Bandwidths are per GPU and per direction (GB/s = 1e9 B/s), as the alpha-beta model uses them.
Latencies (alpha) default to seed 001 §2.3: about 5 us inside a node, about 30 us across nodes
(its worked example: 2·7·5 us = 70 us and 2·7·30 us = 420 us of latency for an 8-way all-reduce).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

from parplan.costmodel.errors import ParplanError

GIB = 2**30


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float  # usable HBM as the driver reports it
    memory_gb_nominal: float  # the marketing figure in 1e9 bytes ("80 GB")
    peak_bf16_tflops: float  # dense
    peak_fp8_tflops: Optional[float]  # dense; None where the GPU has no FP8 tensor cores
    nvlink_domain_size: int  # GPUs that reach each other over NVLink/xGMI
    intra_node_bandwidth_gbps: float  # NVLink per GPU per direction
    inter_node_bandwidth_gbps: float  # network (NIC) per GPU per direction
    intra_node_latency_us: float = 5.0
    inter_node_latency_us: float = 30.0
    generation: str = ""
    sources: tuple[str, ...] = ()
    board_power_w: Optional[float] = None  # maximum board power (TDP/TBP), W: BOARD_POWER_W below, cited
    # share of the rated dense peak the tensor cores sustain, relative to the generation's reference part:
    # SUSTAINED_RATE_FRACTION below, cited (1: the part the generation's efficiency knobs describe)
    sustained_rate_fraction: float = 1.0
    sm_count: Optional[int] = None  # streaming multiprocessors: SM_COUNT below, cited (None: not in the catalog)

    def peak_tflops(self, precision: str) -> float:
        if precision == "fp8":
            if self.peak_fp8_tflops is None:
                raise ValueError(f"{self.name} has no FP8 tensor cores; use precision bf16")
            return self.peak_fp8_tflops
        return self.peak_bf16_tflops


CATALOG: dict[str, GPU] = {
    gpu.name: gpu
    for gpu in (
        GPU("A100-SXM-80GB", 80.0, 80, 312.0, None, 8, 300.0, 25.0, generation="ampere",
            sources=("NVIDIA A100 datasheet: 312 TFLOPS BF16 dense, NVLink3 600 GB/s bidirectional",
                     "DGX A100: 8x 200 Gb/s HDR InfiniBand per node -> 25 GB/s per GPU")),
        GPU("A100-SXM-40GB", 40.0, 40, 312.0, None, 8, 300.0, 25.0, generation="ampere",
            sources=("NVIDIA A100 datasheet (40 GB HBM2)",)),
        GPU("H100-SXM-80GB", 79.65, 80, 989.0, 1979.0, 8, 450.0, 50.0, generation="hopper",
            sources=("NVIDIA H100 SXM datasheet: 1979/3958 TFLOPS BF16/FP8 with sparsity -> 989/1979 dense",
                     "NVLink4 900 GB/s bidirectional -> 450 GB/s per direction (seed 003: NVLINK = 450e9)",
                     "DGX H100: 8x 400 Gb/s ConnectX-7 -> 50 GB/s per GPU (seed 003: NET = 50e9)",
                     "nvidia-smi reports 81559 MiB = 79.65 GiB")),
        GPU("H800", 79.65, 80, 989.0, 1979.0, 8, 200.0, 50.0, generation="hopper",
            sources=("H100 compute with NVLink cut to 400 GB/s bidirectional",
                     "DeepSeek-V3 report (arXiv 2412.19437) 3.2: IB 50 GB/s per GPU, NVLink 160 GB/s achievable")),
        GPU("H200-SXM-141GB", 140.4, 141, 989.0, 1979.0, 8, 450.0, 50.0, generation="hopper",
            sources=("NVIDIA H200 datasheet: 141 GB HBM3e, H100 compute; nvidia-smi 143771 MiB",)),
        GPU("B200", 178.4, 180, 2250.0, 4500.0, 8, 900.0, 50.0, generation="blackwell",
            sources=("NVIDIA DGX B200 datasheet: 72 PFLOPS FP8 (sparse) for 8 GPUs -> 4.5 PF dense FP8, "
                     "2.25 PF dense BF16 per GPU; 1440 GB HBM3e total",
                     "NVLink5 1.8 TB/s bidirectional -> 900 GB/s per direction; 8x 400 Gb/s NICs")),
        GPU("GB200-NVL72", 184.0, 186, 2500.0, 5000.0, 72, 900.0, 50.0, generation="blackwell",
            sources=("NVIDIA GB200 NVL72 datasheet: 360 PFLOPS BF16 / 720 PFLOPS FP8 (sparse) for 72 GPUs, "
                     "13.4 TB HBM3e; one 72-GPU NVLink domain at 1.8 TB/s per GPU bidirectional",)),
        # Blackwell Ultra: the GB200's dense BF16 / FP8 rates, NVLink 5 domain and 8 TB/s HBM, with 288 GB HBM3e;
        # usable memory taken as 288e9 B = 268.2 GiB, the lower bound of the nominal figure (no driver reading found)
        GPU("GB300-NVL72", 268.2, 288, 2500.0, 5000.0, 72, 900.0, 50.0, generation="blackwell",
            sources=("verda.com/blog/gb300-nvl72-architecture (per-GPU table, without sparsity): GB300 FP8 5 PFLOPS, "
                     "FP16/BF16 2.5 PFLOPS, 8 TB/s; rack: FP8 360 PFLOPS, BF16 180 PFLOPS dense, 576 TB/s for 72 GPUs",
                     "glennklockwood.com/garden/processors/B300: 288 GB HBM3e (8 stacks, 12-high), 8 TB/s, NVLink 5 "
                     "2x 900 GB/s, 1400 W; GB300 NVL72: one 72-GPU NVLink domain as GB200 NVL72")),
        GPU("MI300X", 192.0, 192, 1307.4, 2614.9, 8, 448.0, 50.0, generation="cdna3",
            sources=("AMD Instinct MI300X datasheet: 1307.4 TFLOPS BF16 dense, 2614.9 FP8 dense, 192 GB HBM3",
                     "Infinity Fabric: 7 links x 64 GB/s per direction = 448 GB/s; 400 Gb/s NIC per GPU")),
    )
}

# Maximum board power per GPU (W) and its source: the energy of capacity sweeps (parplan.library.sweep).
BOARD_POWER_W: dict[str, tuple[float, str]] = {
    "A100-SXM-80GB": (400.0, "NVIDIA A100 Tensor Core GPU datasheet: max TDP 400 W (SXM4)"),
    "A100-SXM-40GB": (400.0, "NVIDIA A100 Tensor Core GPU datasheet: max TDP 400 W (SXM4)"),
    "H100-SXM-80GB": (700.0, "NVIDIA H100 Tensor Core GPU datasheet: max TDP up to 700 W (SXM5, configurable)"),
    "H800": (700.0, "NVIDIA H800 Tensor Core GPU datasheet: max TDP up to 700 W (SXM5, the H100 SXM board)"),
    "H200-SXM-141GB": (700.0, "NVIDIA H200 Tensor Core GPU datasheet: max TDP up to 700 W (SXM, configurable)"),
    "B200": (1000.0, "NVIDIA HGX B200 datasheet: max TDP up to 1,000 W per GPU (configurable)"),
    "GB200-NVL72": (1200.0, "NVIDIA GB200 NVL72 datasheet: Blackwell GPU in GB200 configurable up to 1,200 W"),
    "GB300-NVL72": (1400.0, "verda.com/blog/gb300-nvl72-architecture: GB300 max TDP 1.4 kW (GB200 1.2 kW)"),
    "MI300X": (750.0, "AMD Instinct MI300X datasheet: peak total board power 750 W (OAM)"),
}
# Streaming multiprocessors per GPU and their source: the share of the GPU that the EP dispatch/combine kernels hold
# while they run (costmodel/moe/moe_comm.py sm_fraction: the dispatcher's SMs over these).
SM_COUNT: dict[str, tuple[int, str]] = {
    "A100-SXM-80GB": (108, "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs"),
    "A100-SXM-40GB": (108, "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs"),
    "H100-SXM-80GB": (132, "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs (SXM5)"),
    "H800": (132, "DeepSeek-V3 report (arXiv 2412.19437) §3.2.2: 20 of the 132 SMs available in the H800"),
    "H200-SXM-141GB": (132, "NVIDIA H200 datasheet: the H100 SXM's GH100 configuration, 132 SMs"),
    "B200": (148, "chipsandcheese.com, 'Nvidia's B200: Keeping the CUDA Juggernaut Rolling' (2025): 74 SMs enabled "
                  "per die, 148 per GPU"),
}


def _with_cited(catalog: dict[str, GPU], field: str, label: str, table: dict[str, tuple]) -> dict[str, GPU]:
    """``catalog`` with ``field`` set from ``table`` (name -> (value, source)) and the source added as ``label``."""
    return {name: replace(gpu, **{field: table[name][0]}, sources=gpu.sources + (f"{label}: {table[name][1]}",))
            if name in table else gpu for name, gpu in catalog.items()}


CATALOG = _with_cited(_with_cited(CATALOG, "sm_count", "SMs", SM_COUNT), "board_power_w", "board power", BOARD_POWER_W)

# Parts of one die rated at different clocks: the share of the rated dense peak their tensor cores sustain in
# training, relative to the generation's reference part (B200 for Blackwell, whose rows the Blackwell knobs are
# fitted on; costmodel/compute/efficiency.py applies it to the GEMM and attention rates, never to the peak MFU is quoted
# against). GB200's Blackwell is rated 2.5 PF dense BF16 at 1,200 W against the HGX/DGX B200's 2.25 PF at 1,000 W
# (datasheets above: 1.11x), but NVIDIA's own measurement of the same job on both (Megatron-Bridge performance
# summary, NeMo 25.11 container, NVIDIA-NeMo/Megatron-Bridge@00b7660b docs/performance-summary.md: Llama 3 8B,
# 8 GPUs, GBS 128, MBS 2, seq 8192, TP1 PP1 CP1, GA 8, the same plan on DGX-GB200 and DGX-B200) is 31508 vs
# 30624 tokens/s/GPU in FP8 current scaling (1.029x) and 29789 vs 29521 in MXFP8 (1.009x): the mean, 1.019x, of
# the B200's rate, i.e. 2.25/2.5 x 1.019 = 0.917 of GB200's rated peak. Under dense tensor-core load both run at
# their power limit, below the boost clock the rated peaks assume.
GB200_OVER_B200_MEASURED = (31508 / 30624 + 29789 / 29521) / 2  # Megatron-Bridge 25.11, Llama 3 8B on 8 GPUs
SUSTAINED_RATE_FRACTION: dict[str, tuple[float, str]] = {
    "GB200-NVL72": (2250.0 / 2500.0 * GB200_OVER_B200_MEASURED,
                    "Megatron-Bridge 25.11 performance summary (NVIDIA-NeMo/Megatron-Bridge@00b7660b "
                    "docs/performance-summary.md), Llama 3 8B on 8 GPUs, the same plan: DGX-GB200 31508 / DGX-B200 "
                    "30624 tokens/s/GPU (FP8-CS), 29789 / 29521 (MXFP8): 1.019x the B200 for 1.11x its rated peak"),
}
CATALOG = _with_cited(CATALOG, "sustained_rate_fraction", "sustained rate", SUSTAINED_RATE_FRACTION)

# Achieved NCCL bus bandwidth (GB/s, nccl-tests' busbw at large messages) of one collective kind inside one 8-GPU
# NVLink domain, with its source: the priors of the NVLink tier per collective (costmodel/communication/comm.py nvlink_busbw_Bps;
# assumptions.collective_busbw_priors), in place of line rate x intra_node_bandwidth_efficiency. Kinds: all_gather,
# reduce_scatter (the ring gathers of TP/ETP and ZeRO), all_reduce (ring), all_reduce_nvls (NVLink SHARP, NVSwitch
# generations with NCCL's NVLS algorithm), all_to_all (the EP/Ulysses exchange). Kinds without a measurement keep
# line rate x efficiency.
_NCCL_H100_AG_RS = ("about 360 GB/s busbw for all-gather / reduce-scatter with NCCL-tests on 8x H100 SXM (as stated in "
                    "parplan issue 19; not re-measured here)")
_NCCL_H100_AR = ("docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests: all_reduce_perf busbw at large sizes "
                 "460-480 GB/s on 8x H100 SXM5 (NVLink 4, above the 450 GB/s ring bound: NVLS); midpoint 470")
_NCCL_A100_AR = ("docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests: all_reduce_perf busbw 230-250 GB/s on "
                 "8x A100 SXM4 (NVLink 3, no NVLS); midpoint 240")
_DSV3_H800 = ("DeepSeek-V3 report (arXiv 2412.19437) §3.2.2: 'NVLink offers a bandwidth of 160 GB/s' on H800, "
              "about 3.2x IB's 50 GB/s")
NVLINK_BUSBW_GBPS: dict[str, dict[str, tuple[float, str]]] = {
    "H100-SXM-80GB": {"all_gather": (360.0, _NCCL_H100_AG_RS), "reduce_scatter": (360.0, _NCCL_H100_AG_RS),
                      "all_reduce": (360.0, "ring all-reduce = reduce-scatter + all-gather: " + _NCCL_H100_AG_RS),
                      "all_reduce_nvls": (470.0, _NCCL_H100_AR)},
    "H200-SXM-141GB": {"all_gather": (360.0, "H100's NVLink 4 and NVSwitch: " + _NCCL_H100_AG_RS),
                       "reduce_scatter": (360.0, "H100's NVLink 4 and NVSwitch: " + _NCCL_H100_AG_RS),
                       "all_reduce": (360.0, "H100's NVLink 4 and NVSwitch, ring: " + _NCCL_H100_AG_RS),
                       "all_reduce_nvls": (470.0, "H100's NVLink 4 and NVSwitch: " + _NCCL_H100_AR)},
    "H800": {kind: (160.0, _DSV3_H800) for kind in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")},
    "A100-SXM-80GB": {"all_reduce": (240.0, _NCCL_A100_AR)},
}


def nvlink_busbw_gbps(gpu: GPU, kind: str, nvls: bool = True) -> Optional[float]:
    """The measured NVLink bus bandwidth of collective ``kind`` on ``gpu`` (:data:`NVLINK_BUSBW_GBPS`), or None where
    there is none or the spec overrides the GPU's NVLink rate (the override is the user's measurement).
    ``all_reduce`` takes the NVLS figure when ``nvls`` and the GPU has one."""
    table = NVLINK_BUSBW_GBPS.get(gpu.name)
    base = CATALOG.get(gpu.name)
    if table is None or base is None or base.intra_node_bandwidth_gbps != gpu.intra_node_bandwidth_gbps:
        return None
    if kind == "all_reduce" and nvls and "all_reduce_nvls" in table:
        kind = "all_reduce_nvls"
    entry = table.get(kind)
    return entry[0] if entry is not None else None


# Names used by papers and the published-runs data for the same parts.
ALIASES: dict[str, str] = {
    "H100": "H100-SXM-80GB",
    "H100-SXM": "H100-SXM-80GB",
    "H100-80GB": "H100-SXM-80GB",
    "A100": "A100-SXM-80GB",
    "A100-80GB": "A100-SXM-80GB",
    "A100-SXM4-80GB": "A100-SXM-80GB",
    "A100-40GB": "A100-SXM-40GB",
    "H200": "H200-SXM-141GB",
    "GB200": "GB200-NVL72",
    "GB300": "GB300-NVL72",
}

OVERRIDABLE_FIELDS = (
    "memory_gib",
    "peak_bf16_tflops",
    "peak_fp8_tflops",
    "nvlink_domain_size",
    "intra_node_bandwidth_gbps",
    "inter_node_bandwidth_gbps",
    "intra_node_latency_us",
    "inter_node_latency_us",
)


class UnknownGPU(ParplanError):
    """A ``cluster.gpu`` name that is neither in :data:`CATALOG` nor an alias."""


def _family(catalog_name: str) -> str:
    return catalog_name.split("-")[0].upper()  # 'H100-SXM-80GB' -> 'H100', 'GB200-NVL72' -> 'GB200'


_OTHER_PARTS = {"PCIE": "PCIe", "NVL": "NVL (PCIe)"}  # same chip, other clocks and links: not in the catalog


def resolve_gpu_name(name: str) -> tuple[str, Optional[float]]:
    """A GPU name as people write it -> (catalog name, memory in GB the name states, if any).

    Exact catalog names and :data:`ALIASES` first; otherwise the catalog family named as a word of the name
    ("B200 (DGX-B200)", "H100 SXM5 80GB", "NVIDIA H200", "GB200 (NVL72)"), narrowed by a stated "<n>GB"
    when several catalog parts share the family. A stated size the catalog lacks ("H100 96GB") is returned
    with the nearest part, for the caller to override ``cluster.memory_gib``; PCIe/NVL parts and unknown
    names raise :class:`UnknownGPU` listing the near names.
    """
    key = ALIASES.get(name, name)
    if key in CATALOG:
        return key, None
    words = re.findall(r"[A-Z0-9]+", name.upper())
    sizes = [float(m.group(1)) for w in words if (m := re.fullmatch(r"(\d+)GB", w))]
    stated = sizes[0] if sizes else None
    family = [n for n in CATALOG if _family(n) in words]
    other = [label for w, label in _OTHER_PARTS.items() if w in words]
    if family and not other:
        if len(family) > 1 and stated is not None:
            exact = [n for n in family if CATALOG[n].memory_gb_nominal == stated]
            family = exact or family
        if len(family) > 1:
            alias = ALIASES.get(_family(family[0]))
            family = [alias] if alias in family else family
        if len(family) == 1:
            return family[0], stated
    near = difflib.get_close_matches(name, list(CATALOG) + list(ALIASES), n=4, cutoff=0.3) or family
    why = f" ({other[0]} parts are not in the catalog)" if other else ""
    raise UnknownGPU(f"unknown GPU {name!r}{why}; near: {', '.join(near) or 'none'}; "
                     f"known: {', '.join(sorted(CATALOG))}")


def lookup_gpu(name: str) -> GPU:
    """The catalog entry for ``name`` (aliases and partial names as :func:`resolve_gpu_name` reads them).

    A name stating a memory size the resolved part does not have is an error: give the catalog part and
    ``cluster.memory_gib`` instead.
    """
    key, stated = resolve_gpu_name(name)
    gpu = CATALOG[key]
    if stated is not None and stated != gpu.memory_gb_nominal:
        raise UnknownGPU(f"GPU {name!r}: the catalog's {key} has {gpu.memory_gb_nominal:g} GB, not {stated:g} GB; "
                         f"use gpu: {key} with cluster.memory_gib")
    return gpu


def resolve_gpu(cluster) -> GPU:
    """The catalog entry for ``cluster.gpu`` with the spec's per-field overrides applied.

    Memoized on what the answer depends on, the name and the overrides (each value with its type, so ``80`` and
    ``80.0`` stay apart); :class:`GPU` is frozen, so callers share one instance. The pools evaluator resolves
    every pool's GPU several times per plan (``costmodel/evaluation/pools.py``)."""
    overrides = tuple((f, type(v), v) for f in OVERRIDABLE_FIELDS if (v := getattr(cluster, f)) is not None)
    return _resolved_gpu(cluster.gpu, overrides)


@lru_cache(maxsize=1024)
def _resolved_gpu(name: str, overrides: tuple[tuple[str, type, object], ...]) -> GPU:
    """:func:`resolve_gpu` on its key (an unknown name raises :class:`UnknownGPU`, which is not cached)."""
    gpu = lookup_gpu(name)
    return replace(gpu, **{f: v for f, _, v in overrides}) if overrides else gpu
