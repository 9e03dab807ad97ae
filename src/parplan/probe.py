"""``python -m parplan.probe``: measure this node's rates at the shapes the planner prices; ``calibrate`` reads it.

    python -m parplan.probe --out probe.yaml [--gpu NAME] [--config full|tiny] [--ranks N]
    torchrun --nproc-per-node 8 [--nnodes 2 ...] -m parplan.probe --out probe.yaml      # collectives across GPUs

Measures (median of ``--iters`` timed calls after warm-up; CUDA timed with ``torch.cuda.synchronize``):

* GEMMs ``M x K x N`` of a transformer layer's linear layers (QKV, attention output, MLP up+gate, MLP down) at the
  token counts, hidden sizes and TP degrees the planner searches (``full``), or tiny ones (``tiny``: CI on a CPU);
* the attention core, ``torch.nn.functional.scaled_dot_product_attention`` forward, causal, head dim 128
  (``tiny``: 32), at several sequence lengths;
* HBM bandwidth: a device-to-device copy, bytes read + written per second;
* collectives (``torch.distributed``; NCCL on GPUs, gloo on CPUs): all-reduce and all-gather (and, under NCCL,
  reduce-scatter and all-to-all), with nccl-tests' bus bandwidth (NVIDIA/nccl-tests doc/PERFORMANCE.md: all-reduce
  busbw = algbw·2(n-1)/n, all-gather / reduce-scatter / all-to-all algbw·(n-1)/n; the size is the larger buffer).
  Under torchrun the job's ranks; otherwise ``--ranks N`` local processes (default: the GPUs, 1 on a CPU).

Writes YAML (library/measured_runs.py reads it): ``kind: parplan-probe``, the date, the device and the catalog GPU
the numbers stand for (``--gpu``; on a GPU, read from the device name), ``peak_tflops`` (null on a GPU: the
catalog's; on a CPU the largest measured GEMM rate, or ``--peak-tflops``), and the rows. On a CPU the numbers are
not a GPU's: the CPU path exists so the pipeline is tested in CI (tests/test_probe.py).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Optional

CONFIGS: dict[str, dict[str, Any]] = {
    # Llama-3 8B/70B-like layers (hidden 4096/8192, FFN 14336/28672, GQA 32/8 and 64/8 heads), 4K-8K tokens per
    # micro-batch, TP 1-8; attention at 1K-8K tokens; a 1 GiB copy; collectives of 1 MiB-256 MiB
    "full": {"layers": [(4096, 14336, 32, 8), (8192, 28672, 64, 8)], "tokens": [4096, 8192], "tp": [1, 2, 4, 8],
             "attention": {"batch": 1, "heads": 32, "head_dim": 128, "seq": [1024, 4096, 8192]},
             "copy_bytes": 1 << 30, "collective_bytes": [1 << 20, 16 << 20, 64 << 20, 256 << 20], "iters": 10},
    "tiny": {"layers": [(64, 128, 4, 2)], "tokens": [64], "tp": [1, 2],
             "attention": {"batch": 1, "heads": 2, "head_dim": 32, "seq": [64, 128]},
             "copy_bytes": 8 << 20, "collective_bytes": [1 << 16, 1 << 20], "iters": 3},
}
BUSBW_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def gemm_shapes(config: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(M, K, N) of each linear layer of the configured layers, per token count and TP degree (column-parallel
    layers split N, row-parallel ones K)."""
    shapes = []
    for hidden, ffn, heads, kv in config["layers"]:
        qkv = hidden + 2 * hidden * kv // heads
        for m in config["tokens"]:
            for tp in config["tp"]:
                shapes += [(m, hidden, qkv // tp), (m, hidden // tp, hidden), (m, hidden, 2 * ffn // tp),
                           (m, ffn // tp, hidden)]
    return sorted(set(shapes))


def _timer(device) -> Callable[[Callable[[], Any], int], float]:
    import torch

    def timed(fn: Callable[[], Any], iters: int) -> float:
        fn()  # warm-up
        times = []
        for _ in range(iters):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    return timed


def measure_kernels(config: dict[str, Any], device, iters: int) -> dict[str, Any]:
    import torch

    timed = _timer(device)
    dtype = torch.bfloat16
    out: dict[str, Any] = {"gemm": [], "attention": []}
    for m, k, n in gemm_shapes(config):
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        s = timed(lambda: a @ b, iters)
        out["gemm"].append({"m": m, "k": k, "n": n, "dtype": "bf16", "seconds": s, "tflops": 2 * m * k * n / s / 1e12})
    att = config["attention"]
    for seq in att["seq"]:
        q, kk, v = (torch.randn(att["batch"], att["heads"], seq, att["head_dim"], device=device, dtype=dtype)
                    for _ in range(3))
        s = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True), iters)
        flops = 4 * att["batch"] * att["heads"] * seq * seq * att["head_dim"] * 0.5
        out["attention"].append({"batch": att["batch"], "heads": att["heads"], "seq": seq, "head_dim": att["head_dim"],
                                 "causal": True, "dtype": "bf16", "seconds": s, "tflops": flops / s / 1e12})
    src = torch.empty(config["copy_bytes"] // 2, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    s = timed(lambda: dst.copy_(src), iters)
    moved = 2 * src.numel() * src.element_size()
    out["hbm"] = {"bytes": moved, "seconds": s, "gbps": moved / s / 1e9}
    return out


def measure_collectives(config: dict[str, Any], device, iters: int, ranks_per_node: int) -> list[dict[str, Any]]:
    """Collectives over the default process group (every rank calls this; rank 0's timings are kept)."""
    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    ops = ["all_reduce", "all_gather"] + (["reduce_scatter", "all_to_all"] if dist.get_backend() == "nccl" else [])
    timed = _timer(device)
    rows = []
    for op in ops:
        for size in config["collective_bytes"]:
            count = max(n, size // 4 // n * n)  # fp32 elements, a multiple of the ranks
            big = torch.ones(count, device=device)
            part = torch.ones(count // n, device=device)
            call = {"all_reduce": lambda: dist.all_reduce(big),
                    "all_gather": lambda: dist.all_gather_into_tensor(big, part),
                    "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, big),
                    "all_to_all": lambda: dist.all_to_all_single(torch.empty_like(big), big)}[op]

            def synced(call=call):
                call()
                dist.barrier()

            s = timed(synced, iters)
            size_bytes = count * 4
            rows.append({"op": op, "ranks": n, "ranks_per_node": ranks_per_node, "size_bytes": size_bytes,
                         "time_us": s * 1e6, "busbw_gbps": size_bytes / s / 1e9 * BUSBW_FACTOR[op](n)})
    return rows


def _worker(rank: int, world: int, init_file: str, config: dict[str, Any], iters: int, result: str) -> None:
    import torch
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    rows = measure_collectives(config, device, iters, world)
    if rank == 0:
        with open(result, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def local_collectives(config: dict[str, Any], ranks: int, iters: int) -> list[dict[str, Any]]:
    """Collectives over ``ranks`` local processes (torch.multiprocessing.spawn, a file rendezvous)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "collectives.json")
        # spawn, not fork: a fork after the kernels ran (torch's thread pools started) deadlocks the children
        mp.spawn(_worker, args=(ranks, os.path.join(tmp, "rendezvous"), config, iters, result), nprocs=ranks)
        with open(result) as f:
            return json.load(f)


def catalog_gpu(name: Optional[str], device) -> str:
    """The catalog name of ``--gpu``, else of the CUDA device's name; a CPU run must name one."""
    import torch

    from parplan.costmodel.spec.hardware import resolve_gpu_name

    if name is None:
        if device.type != "cuda":
            raise SystemExit("error: --gpu: a CPU run must name the catalog GPU its rows stand for (e.g. --gpu H100)")
        name = torch.cuda.get_device_name(device)
    return resolve_gpu_name(name)[0]


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    config = CONFIGS[args.config]
    iters = args.iters or config["iters"]
    distributed = "WORLD_SIZE" in os.environ and "RANK" in os.environ
    if distributed:
        import torch.distributed as dist

        backend = "nccl" if torch.cuda.is_available() else "gloo"
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    gpu = catalog_gpu(args.gpu, device)
    doc: dict[str, Any] = {
        "kind": "parplan-probe", "version": 1, "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "config": args.config,
        "device": {"name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "gpu": gpu,
                   "torch": str(torch.__version__)},
    }
    doc.update(measure_kernels(config, device, iters))
    if device.type == "cpu":
        doc["peak_tflops"] = args.peak_tflops or max(r["tflops"] for r in doc["gemm"])
    else:
        doc["peak_tflops"] = args.peak_tflops
    if distributed:
        rows = measure_collectives(config, device, iters, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        if torch.distributed.get_rank() != 0:
            return {}
        doc["collectives"] = rows
    else:
        ranks = args.ranks if args.ranks is not None else max(1, torch.cuda.device_count())
        doc["collectives"] = local_collectives(config, ranks, iters) if ranks > 1 else []
    return doc


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m parplan.probe", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the YAML file to write (rank 0 under torchrun)")
    ap.add_argument("--gpu", default=None, help="the catalog GPU the rows stand for (default: the CUDA device's)")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="full")
    ap.add_argument("--ranks", type=int, default=None, help="local processes for the collectives (no torchrun)")
    ap.add_argument("--iters", type=int, default=None, help="timed calls per measurement (median kept)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the rate efficiencies are shares of (CPU runs)")
    args = ap.parse_args(argv)
    doc = run(args)
    if doc:
        import yaml

        with open(args.out, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        print(f"wrote {args.out}: {len(doc['gemm'])} GEMMs, {len(doc['attention'])} attention, "
              f"{len(doc['collectives'])} collective rows on {doc['device']['name']} as {doc['device']['gpu']}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
