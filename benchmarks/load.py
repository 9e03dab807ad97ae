"""Load on a local `solver-cli serve`: N concurrent clients x M Plan requests, then a cancel storm.

    python benchmarks/load.py [--clients 16] [--requests 50] [--spec examples/seed-textbook-70b-8k.yaml]
                              [--server-max-concurrent N] [--workers 1] [--storm 32] [--out FILE.json]

1. baseline: one client, ``--baseline`` sequential requests: its median latency;
2. load: ``--clients`` threads, each with its own channel (the shipped client's channel options: gRPC's retry
   policy for RESOURCE_EXHAUSTED / UNAVAILABLE), send ``--requests`` Plan calls each to a server with its
   DEFAULT settings (4 solver slots, a queue of 64) unless ``--server-max-concurrent`` is given: calls beyond
   the slots wait in the server's queue; throughput, p50/p99 latency, p50/p99/max queue wait and the longest
   queue (the responses' ``admission``), error count by status code, and the server's RSS sampled every 0.2 s:
   peak over the first and the second half of the run;
3. cancel storm: ``--storm`` calls of a ~6 s solve (the seed-textbook spec, top 20), each cancelled by its
   client after a random 0.1-1.0 s; then the server's threads are sampled (psutil per-thread CPU times) until
   none is using CPU (at most ``--storm-wait-s``): the busy threads 1 s after the last cancel and the time
   until none is busy (null if some still were at the end of the wait).

Every request asks for ``--workers`` CP-SAT workers (1: N clients share the cores without oversubscribing).
The result is printed and written as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository root, for the benchmarks package
    sys.path.insert(0, str(REPO))

from benchmarks.serve_process import start_serve, stop_serve  # noqa: E402

from parplan.client.grpc_client import CHANNEL_OPTIONS
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

STORM_SPEC = REPO / "examples" / "seed-textbook-70b-8k.yaml"


def start_server(max_concurrent: int | None) -> tuple[subprocess.Popen, int]:
    limits = ["--max-concurrent", str(max_concurrent)] if max_concurrent is not None else []
    return start_serve(*limits, "--grace-period", "5")


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


class RssSampler(threading.Thread):
    def __init__(self, pid: int, period_s: float = 0.2):
        super().__init__(daemon=True)
        self.process, self.period_s = psutil.Process(pid), period_s
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def sample(self) -> None:
        self.samples.append((time.perf_counter(), self.process.memory_info().rss))

    def run(self) -> None:
        """One sample at the start, one each period, one at the stop: a run shorter than a period has two."""
        self.sample()
        while not self.stop.wait(self.period_s):
            self.sample()
        self.sample()


def plan_calls(target: str, request: pb.PlanRequest, count: int, latencies: list, codes: collections.Counter,
               lock: threading.Lock, admissions: list | None = None) -> None:
    with grpc.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.PlannerServiceStub(channel)
        for _ in range(count):
            t0 = time.perf_counter()
            admission = None
            try:
                reply = stub.Plan(request, timeout=300)
                code = "OK" if reply.status in (pb.PLAN_STATUS_OPTIMAL, pb.PLAN_STATUS_FEASIBLE) else \
                    pb.PlanStatus.Name(reply.status)
                admission = (reply.admission.queue_wait_s, reply.admission.queue_length)
            except grpc.RpcError as err:
                code = err.code().name
            with lock:
                latencies.append((time.perf_counter(), time.perf_counter() - t0))
                codes[code] += 1
                if admissions is not None and admission is not None:
                    admissions.append(admission)


def busy_threads(process: psutil.Process, window_s: float = 0.5) -> int:
    """Threads of the server that used more than 5 % of a core during ``window_s``."""
    before = {t.id: t.user_time + t.system_time for t in process.threads()}
    time.sleep(window_s)
    after = {t.id: t.user_time + t.system_time for t in process.threads()}
    return sum(1 for tid, cpu in after.items() if cpu - before.get(tid, cpu) > 0.05 * window_s)


def cancel_storm(target: str, calls: int, process: psutil.Process, wait_s: float, seed: int = 7) -> dict:
    rng = random.Random(seed)
    request = pb.PlanRequest(spec_text=STORM_SPEC.read_text(), top_k=20, solver=pb.SolverParameters(workers=1))
    codes: collections.Counter = collections.Counter()
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.PlannerServiceStub(channel)
        futures = [(stub.Plan.future(request, timeout=120), rng.uniform(0.1, 1.0)) for _ in range(calls)]
        t0 = time.perf_counter()
        for future, delay in sorted(futures, key=lambda f: f[1]):
            time.sleep(max(0.0, t0 + delay - time.perf_counter()))
            future.cancel()
        last_cancel = time.perf_counter()
        for future, _ in futures:
            try:
                future.result()
                codes["OK"] += 1
            except grpc.FutureCancelledError:
                codes["CANCELLED"] += 1
            except grpc.RpcError as err:
                codes[err.code().name] += 1
    time.sleep(max(0.0, last_cancel + 1.0 - time.perf_counter()))
    busy_after_1s = busy_threads(process)
    busy = busy_after_1s
    while busy and time.perf_counter() - last_cancel < wait_s:
        busy = busy_threads(process)
    return {"calls": calls, "codes": dict(codes), "busy_threads_1s_after_last_cancel": busy_after_1s,
            "seconds_until_no_busy_thread": round(time.perf_counter() - last_cancel, 2) if not busy else None,
            "busy_threads_at_end_of_wait": busy, "wait_s": wait_s}


def table(result: dict) -> str:
    rows = [("requests", f"{result['requests']} ({result['clients']} clients x {result['requests_per_client']})"),
            ("errors", f"{result['errors']} {result['codes']}"),
            ("throughput", f"{result['throughput_rps']} requests/s"),
            ("latency p50 / p99", f"{result['p50_s']:.3f} s / {result['p99_s']:.3f} s "
                                  f"(one client alone: p50 {result['single_client_p50_s']:.3f} s)"),
            ("queue wait p50 / p99 / max", f"{result['queue_wait_p50_s']:.3f} s / {result['queue_wait_p99_s']:.3f} s / "
                                           f"{result['queue_wait_max_s']:.3f} s"),
            ("longest queue on arrival", str(result["queue_length_max"])),
            ("server RSS peak", f"{max(result['rss_peak_first_half_mib'], result['rss_peak_second_half_mib'])} MiB")]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=50, help="per client")
    parser.add_argument("--spec", type=Path, default=REPO / "examples" / "seed-textbook-70b-8k.yaml")
    parser.add_argument("--server-max-concurrent", type=int, default=None, help="the server's --max-concurrent "
                        "(default: the server's default)")
    parser.add_argument("--workers", type=int, default=1, help="CP-SAT workers per request")
    parser.add_argument("--baseline", type=int, default=10, help="sequential single-client requests")
    parser.add_argument("--storm", type=int, default=32, help="calls in the cancel storm (0: none)")
    parser.add_argument("--storm-wait-s", type=float, default=120.0, help="longest wait for the storm's solves "
                        "to stop")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    request = pb.PlanRequest(spec_text=args.spec.read_text(), solver=pb.SolverParameters(workers=args.workers))
    server, port = start_server(args.server_max_concurrent)
    target = f"127.0.0.1:{port}"
    process = psutil.Process(server.pid)
    lock = threading.Lock()
    try:
        single: list = []
        plan_calls(target, request, args.baseline, single, collections.Counter(), lock)
        single_p50 = statistics.median(lat for _, lat in single)

        latencies: list = []
        admissions: list = []
        codes: collections.Counter = collections.Counter()
        sampler = RssSampler(server.pid)
        sampler.start()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=plan_calls, args=(target, request, args.requests, latencies, codes, lock,
                                                                 admissions))
                   for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
        middle = t0 + elapsed / 2
        first = [rss for ts, rss in sampler.samples if ts < middle]
        second = [rss for ts, rss in sampler.samples if ts >= middle]
        lat = [x for _, x in latencies]
        waits = [w for w, _ in admissions]
        result = {
            "command": "python benchmarks/load.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs",
            "spec": str(args.spec.relative_to(REPO)) if args.spec.is_relative_to(REPO) else str(args.spec),
            "clients": args.clients, "requests_per_client": args.requests, "workers_per_request": args.workers,
            "server_max_concurrent": args.server_max_concurrent or "default (4)",
            "single_client_p50_s": round(single_p50, 4),
            "requests": len(lat), "elapsed_s": round(elapsed, 2), "throughput_rps": round(len(lat) / elapsed, 2),
            "p50_s": round(percentile(lat, 0.5), 4), "p99_s": round(percentile(lat, 0.99), 4),
            "p50_over_single_client_p50": round(percentile(lat, 0.5) / single_p50, 2),
            "queue_wait_p50_s": round(percentile(waits, 0.5), 4), "queue_wait_p99_s": round(percentile(waits, 0.99), 4),
            "queue_wait_max_s": round(max(waits, default=0.0), 4),
            "queue_length_max": max((n for _, n in admissions), default=0),
            "codes": dict(codes), "errors": sum(n for code, n in codes.items() if code != "OK"),
            "rss_peak_first_half_mib": round(max(first, default=0) / 2**20, 1),
            "rss_peak_second_half_mib": round(max(second, default=0) / 2**20, 1),
        }
        if args.storm:
            result["cancel_storm"] = cancel_storm(target, args.storm, process, args.storm_wait_s)
    finally:
        stop_serve(server)
    text = json.dumps(result, indent=2)
    print(table(result))
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
