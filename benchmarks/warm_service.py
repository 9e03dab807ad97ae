"""A warm service that remembers (issue 41 item 3): ``Plan`` latency on an in-process server on 127.0.0.1.

    python benchmarks/warm_service.py [--quick] [--requests N] [--rss-specs N] [--out FILE]

For S3 (Llama-3 8B on 8 H100, 8K, benchmarks/solver_speed.py's first scenario with the default framework) and S1
(examples/llama3-70b-64xh100.yaml), each request another global batch:

* ``warm``: the median client-side latency of N distinct requests after one warm-up call (the cache keeps what the
  earlier requests built: solver/warm_cache.py);
* ``cold``: the same requests, the warm cache cleared before each (the process otherwise warm);
* ``off``: the same requests with the cache off (every call builds its pieces alone, as before the cache);
* ``new GPUs``: a request that repeats another (cleared cache, then the spec at G GPUs) with a new GPU count G',
  against a cold request at G' (the ratio of medians; goal ≤ 50 %);
* answers: the warm response equals the cache-off one, byte for byte (timing and admission fields aside).

Beside each latency, the process's CPU time over the call (``time.process_time``: the server's threads and the
client's, one process), which another process's load moves far less than the latency: ``warm CPU`` and the new GPU
count's share by CPU time.

Then RSS under ``--rss-specs`` distinct specs (another sequence length and vocabulary each: another cache key), the
server's memory budget at 512 MiB (the cache's share a quarter of it): the process's RSS every tenth of the run.
Goals: warm median ≤ 30 ms (S3), ≤ 100 ms (S1). Timings on a shared machine are noisy: the load average is
printed beside them. ``--quick``: 3 requests, S3 only, 30 RSS specs (the smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from solver_speed import LLAMA8B  # noqa: E402

S3 = {"model": LLAMA8B, "training": {"seq_len": 8192, "global_batch_size": 64, "precision": "bf16"},
      "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8}}
S1 = yaml.safe_load((REPO / "examples" / "llama3-70b-64xh100.yaml").read_text())
# (name, spec, global batch step, GPU count for the new-GPU-count repeat)
SCENARIOS = [("S3 8B / 8 H100", S3, 8, 16), ("S1 70B / 64 H100", S1, 16, 128)]
VOLATILE = ("timing", "admission")  # response fields that differ call to call


def with_(spec: dict, gbs: int | None = None, gpus: int | None = None, **model) -> dict:
    out = json.loads(json.dumps(spec))
    if gbs is not None:
        out["training"]["global_batch_size"] = gbs
    if gpus is not None:
        out["cluster"]["num_gpus"] = gpus
    out["model"].update(model)
    return out


class Client:
    """Plan calls on a server started in this process (tests/conftest.py's ``server`` fixture does the same)."""

    def __init__(self, max_concurrent: int = 1):
        import grpc
        from parplan.server.app import ServeOptions, start
        from parplan.v1 import planner_pb2 as pb
        from parplan.v1 import planner_pb2_grpc as pb_grpc

        self.pb, self.cpu_s = pb, 0.0
        self.running = start(ServeOptions(port=0, max_concurrent=max_concurrent))
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.running.port}")
        self.stub = pb_grpc.PlannerServiceStub(self.channel)

    def plan(self, spec: dict) -> tuple[float, dict]:
        """(seconds, the response as a dict less its volatile fields); the call's CPU seconds in :attr:`cpu_s`."""
        from google.protobuf.json_format import MessageToDict

        t0, c0 = time.perf_counter(), time.process_time()
        response = self.stub.Plan(self.pb.PlanRequest(spec_text=json.dumps(spec)), timeout=120)
        seconds, self.cpu_s = time.perf_counter() - t0, time.process_time() - c0
        data = MessageToDict(response)
        for name in VOLATILE:
            data.pop(name, None)
        data.get("solver", {}).pop("wallTimeS", None)
        return seconds, data

    def close(self) -> None:
        self.channel.close()
        self.running.drain(0)


def measure(client: Client, name: str, spec: dict, step: int, new_gpus: int, n: int) -> dict:
    from parplan.solver.warm_cache import WARM

    base = spec["training"]["global_batch_size"]
    batches = [base + step * k for k in range(1, n + 1)]
    WARM.clear()
    client.plan(spec)  # warm-up: the process and the cache
    warm, warm_cpu, same = [], [], True
    for gbs in batches:
        seconds, data = client.plan(with_(spec, gbs))
        warm.append(seconds)
        warm_cpu.append(client.cpu_s)
        if len(warm) <= 3:  # the answers: byte-identical to the cache off
            WARM.enabled = False
            _, off_data = client.plan(with_(spec, gbs))
            WARM.enabled = True
            same &= json.dumps(data, sort_keys=True) == json.dumps(off_data, sort_keys=True)
    cold, off = [], []
    for gbs in batches:
        WARM.clear()
        cold.append(client.plan(with_(spec, gbs))[0])
        WARM.enabled = False
        off.append(client.plan(with_(spec, gbs))[0])
        WARM.enabled = True
    repeat, cold_new, repeat_cpu, cold_new_cpu = [], [], [], []
    for gbs in batches:
        WARM.clear()
        client.plan(with_(spec, gbs))  # the request repeated ...
        repeat.append(client.plan(with_(spec, gbs, new_gpus))[0])  # ... with a new GPU count
        repeat_cpu.append(client.cpu_s)
        WARM.clear()
        cold_new.append(client.plan(with_(spec, gbs, new_gpus))[0])
        cold_new_cpu.append(client.cpu_s)
    med = statistics.median
    return {"scenario": name, "warm_ms": 1e3 * med(warm), "cold_ms": 1e3 * med(cold), "off_ms": 1e3 * med(off),
            "new_gpus_ms": 1e3 * med(repeat), "cold_new_gpus_ms": 1e3 * med(cold_new),
            "new_gpus_share": med(repeat) / med(cold_new), "same_answers": same, "n": n, "new_gpus": new_gpus,
            "warm_cpu_ms": 1e3 * med(warm_cpu), "new_gpus_cpu_share": med(repeat_cpu) / med(cold_new_cpu)}


def rss_mib() -> float:
    from parplan.solver.deadline import rss_bytes

    return rss_bytes() / 2**20


def rss_growth(client: Client, count: int) -> tuple[list[dict], float]:
    """RSS and the cache's state every tenth of ``count`` distinct specs (another sequence and vocabulary each), and
    the cache's limit in MiB under the run's budget."""
    from parplan.solver.deadline import default_memory_budget_mib, set_default_memory_budget
    from parplan.solver.warm_cache import WARM

    before = default_memory_budget_mib()
    set_default_memory_budget(512)  # the cache's share: 128 MiB
    limit_mib = WARM.limit_bytes() / 2**20  # (read under this budget: the default's comes back at the end)
    WARM.clear()
    rows, start = [], rss_mib()
    every = max(1, count // 10)
    try:
        for i in range(count):
            spec = with_(S3, 64, vocab_size=32000 + 64 * i)
            spec["training"]["seq_len"] = (2048, 4096, 8192)[i % 3]
            client.plan(spec)
            if (i + 1) % every == 0:
                stats = WARM.stats()
                rows.append({"specs": i + 1, "rss_mib": rss_mib(), "growth_mib": rss_mib() - start,
                             "entries": stats["entries"], "cache_mib": stats["nbytes"] / 2**20,
                             "evictions": stats["evictions"]})
    finally:  # the process's own budget back (a caller's later solves, e.g. the rest of a test session)
        set_default_memory_budget(before)
        WARM.clear()
    return rows, limit_mib


def report(rows: list[dict], rss: list[dict], limit_mib: float) -> str:
    load = os.getloadavg()
    lines = [f"# benchmarks/warm_service.py on {platform.node()} ({os.cpu_count()} CPUs), python {platform.python_version()}",
             f"# load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (a shared machine: timings are noisy)",
             "# medians over N distinct Plan requests (another global batch each), client-side, in-process server",
             "",
             f"{'scenario':<20} {'N':>3} {'warm ms':>8} {'cold ms':>8} {'off ms':>8} {'new GPUs ms':>12} "
             f"{'cold at G2 ms':>14} {'share':>6} {'same answers':>13} {'warm CPU ms':>12} {'share by CPU':>13}"]
    for r in rows:
        lines.append(f"{r['scenario']:<20} {r['n']:>3} {r['warm_ms']:>8.1f} {r['cold_ms']:>8.1f} {r['off_ms']:>8.1f} "
                     f"{r['new_gpus_ms']:>12.1f} {r['cold_new_gpus_ms']:>14.1f} {r['new_gpus_share']:>6.0%} "
                     f"{'yes' if r['same_answers'] else 'NO':>13} {r['warm_cpu_ms']:>12.1f} "
                     f"{r['new_gpus_cpu_share']:>13.0%}")
    goals = {"S3": 30.0, "S1": 100.0}
    lines.append("")
    for r in rows:
        goal = goals[r["scenario"][:2]]
        lines.append(f"goal {r['scenario'][:2]}: warm median {r['warm_ms']:.1f} ms <= {goal:.0f} ms: "
                     f"{'met' if r['warm_ms'] <= goal else 'NOT met'}; new GPU count {r['new_gpus_share']:.0%} of "
                     f"cold <= 50 %: {'met' if r['new_gpus_share'] <= 0.5 else 'NOT met'}")
    if rss:
        lines += ["", f"RSS under distinct specs (memory budget 512 MiB: the cache's share {limit_mib:.0f} MiB)",
                  f"{'specs':>6} {'RSS MiB':>8} {'growth MiB':>11} {'entries':>8} {'cache MiB (est.)':>17} "
                  f"{'evictions':>10}"]
        for r in rss:
            lines.append(f"{r['specs']:>6} {r['rss_mib']:>8.0f} {r['growth_mib']:>11.0f} {r['entries']:>8} "
                         f"{r['cache_mib']:>17.1f} {r['evictions']:>10}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 requests, S3 only, 30 RSS specs (the smoke test)")
    ap.add_argument("--requests", type=int, default=None, help="distinct requests per measurement (default 10)")
    ap.add_argument("--rss-specs", type=int, default=None, help="distinct specs of the RSS run (default 1000)")
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    n = args.requests or (3 if args.quick else 10)
    count = args.rss_specs if args.rss_specs is not None else (30 if args.quick else 1000)
    client = Client()
    try:
        rows = [measure(client, name, spec, step, gpus, n)
                for name, spec, step, gpus in (SCENARIOS[:1] if args.quick else SCENARIOS)]
        rss, limit_mib = rss_growth(client, count) if count else ([], 0.0)
    finally:
        client.close()
    text = report(rows, rss, limit_mib)
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0 if all(r["same_answers"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
