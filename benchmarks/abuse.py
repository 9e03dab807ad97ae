"""Abuse a local `solver-cli serve` with the attacks of issue 36 and print a table (attack, figure, goal, pass).

    python benchmarks/abuse.py [--quick] [--rounds 10] [--stalled 200] [--fuzz 10000] [--seed 1]
                               [--out benchmarks/results/abuse.txt]

Starts its own server (default: 4 slots, a token, ``--grace-period 5``; ``--health-port 0`` where the server has
that option) and runs, in order:

* ``cancel``: ``--rounds`` rounds of 30 ``Plan`` calls cancelled ~150 ms after sending; then a fresh ``Plan``
  must be served (issue 36, finding 1);
* ``stalled``: ``--stalled`` streams that never send their request on each service (planner, health, reflection);
  health must answer SERVING within 1 s (on the health port if any) and an authenticated ``Plan`` within 1 s of
  its solve time without the streams (finding 2);
* ``bomb:*``: requests of at most 4 KB (hf_config_json bombs, a 40,000-point sweep, a YAML alias bomb,
  ``jobs=4096``, ``ray_address``): the server's RSS (psutil on its pid and its children) may grow by 64 MiB at
  most before a refusal, and the call may last its deadline + 1 s at most (findings 3, 4); ``jobs=4096`` is a
  valid request: its workers are at most the CPUs and server and workers stay within the default budget;
* ``budget``: four memory-frontier ``Pareto`` calls on 10**6-layer specs at once against ``--memory-budget-mib
  512``: the server's RSS stays within it and every call is answered (finding 7);
* ``fuzz``: ``--fuzz`` requests from benchmarks/fuzz_service.py across all five RPCs: 0 INTERNAL (finding 5);
* ``sigterm``: SIGTERM with Plans solving, Plans queued and streams stalled: the process exits within the grace
  period + 1 s and every in-flight ``Plan`` is answered (finding 6).

``--quick`` (CI): 2 rounds, 20 stalled streams per service, 200 fuzzed requests. Exit code 0 when every row passed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import fuzz_service  # noqa: E402
from benchmarks.serve_process import start_serve  # noqa: E402

from parplan.library.spec_io import load_spec_file  # noqa: E402
from parplan.wire import convert  # noqa: E402
from parplan.v1 import planner_pb2 as pb  # noqa: E402

TOKEN = "abuse-benchmark-token"
GRACE_S = 5.0
SPEC = {"model": {"preset": "llama3-8b"}, "training": {"seq_len": 4096, "global_batch_size": 256},
        "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 64}}
STALL_METHODS = {"planner": "/parplan.v1.PlannerService/Plan", "health": "/grpc.health.v1.Health/Check",
                 "reflection": "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}


class _Auth(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds the bearer token to every call."""

    def _details(self, details):
        metadata = list(details.metadata or []) + [("authorization", f"Bearer {TOKEN}")]
        return details._replace(metadata=metadata) if hasattr(details, "_replace") else _Details(details, metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)


class _Details(grpc.ClientCallDetails):
    def __init__(self, details, metadata):
        self.method, self.timeout, self.credentials = details.method, details.timeout, details.credentials
        self.wait_for_ready, self.compression, self.metadata = details.wait_for_ready, details.compression, metadata


class Server:
    """The server under attack: its process, port, health port, pid and ``internal_error`` log lines."""

    def __init__(self, extra: tuple[str, ...] = ()):
        self.internal: list[str] = []
        self.health_port: Optional[int] = None
        self.token_file = tempfile.NamedTemporaryFile("w", suffix=".token", delete=False)
        self.token_file.write(TOKEN)
        self.token_file.close()
        help_text = subprocess.run([sys.executable, "-m", "parplan.client.cli", "serve", "--help"],
                                   capture_output=True, text=True, cwd=REPO).stdout
        args = ["--max-concurrent", "4", "--grace-period", str(GRACE_S), "--auth-token-file", self.token_file.name]
        if "--health-port" in help_text:
            args += ["--health-port", "0"]
        self.proc, self.port = start_serve(*args, *extra, on_line=self._line)
        self.target = f"127.0.0.1:{self.port}"
        time.sleep(0.5)  # the health port's log line follows the serving line; read whatever came

    def _line(self, line: str) -> None:
        if '"internal_error"' in line:
            self.internal.append(line.strip()[:500])
        match = re.search(r'"health_(?:port|address)"\s*:\s*"?[^"]*?:?(\d+)"?', line)
        if match and self.health_port is None:
            self.health_port = int(match.group(1))

    def channel(self) -> grpc.Channel:
        """An authenticated channel on its own TCP connection (as another client's would be: channels in one
        process otherwise share a connection, and one the server closed on an abusive peer is not a fresh
        client's)."""
        return grpc.intercept_channel(grpc.insecure_channel(self.target, options=[("grpc.use_local_subchannel_pool", 1)]),
                                      _Auth())

    def rss_mib(self) -> float:
        proc = psutil.Process(self.proc.pid)
        total = proc.memory_info().rss
        for child in proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.token_file.name)


def plan_request(limit_s: float = 1.0) -> pb.PlanRequest:
    return pb.PlanRequest(spec_text=json.dumps(SPEC), solver=pb.SolverParameters(workers=1, time_limit_s=limit_s))


def timed_plan(server: Server, limit_s: float = 1.0, timeout_s: float = 10.0) -> tuple[str, float]:
    with server.channel() as channel:
        call = channel.unary_unary("/parplan.v1.PlannerService/Plan", request_serializer=pb.PlanRequest.SerializeToString,
                                   response_deserializer=pb.PlanResponse.FromString)
        t0 = time.perf_counter()
        try:
            call(plan_request(limit_s), timeout=timeout_s)
            return "OK", time.perf_counter() - t0
        except grpc.RpcError as err:
            return f"{err.code().name} ({(err.details() or '')[:80]})", time.perf_counter() - t0


def health(port: int, timeout_s: float = 5.0) -> tuple[str, float]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        t0 = time.perf_counter()
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
            return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status), time.perf_counter() - t0
        except grpc.RpcError as err:
            return err.code().name, time.perf_counter() - t0


# -------------------------------------------------------------------------------------------- attacks


def attack_cancel(server: Server, rounds: int) -> list[tuple[str, str, str, bool]]:
    with server.channel() as channel:
        call = channel.unary_unary("/parplan.v1.PlannerService/Plan", request_serializer=pb.PlanRequest.SerializeToString)
        for _ in range(rounds):
            futures = [call.future(plan_request(2.0), timeout=30) for _ in range(30)]
            time.sleep(0.15)  # the attack's own timing: cancel ~150 ms after sending
            for future in futures:
                future.cancel()
    code, latency = timed_plan(server, limit_s=1.0, timeout_s=15.0)
    return [(f"cancel: {rounds}x30 Plans cancelled at 150 ms, then a fresh Plan",
             f"{code} in {latency:.2f} s, {len(server.internal)} internal_error", "OK, 0 internal_error", code == "OK" and not server.internal)]


def _stall(channel: grpc.Channel, method: str, release: threading.Event):
    """A call whose request never comes: headers sent, the message stream blocked until ``release``."""
    def never():
        release.wait()
        return
        yield  # noqa: unreachable: makes this a generator
    return channel.stream_stream(method)(never(), timeout=120)


def attack_stalled(server: Server, per_service: int) -> list[tuple[str, str, str, bool]]:
    _, baseline = timed_plan(server, limit_s=1.0)
    release = threading.Event()
    # each connection carries at most 32 streams at once (the server's HTTP/2 limit): enough connections that
    # every stalled stream reaches the server
    channels = [grpc.insecure_channel(server.target, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(max(4, -(-len(STALL_METHODS) * per_service // 32)))]
    calls = []
    try:
        for name, method in STALL_METHODS.items():
            for i in range(per_service):
                calls.append(_stall(channels[i % len(channels)], method, release))
        time.sleep(1.0)  # let the streams reach the server before probing
        port = server.health_port or server.port
        status, health_s = health(port, timeout_s=5.0)
        code, plan_s = timed_plan(server, limit_s=1.0, timeout_s=15.0)
    finally:
        release.set()
        for call in calls:
            call.cancel()
        for channel in channels:
            channel.close()
    where = "health port" if server.health_port else "main port"
    return [(f"stalled: {per_service} per service, health Check ({where})", f"{status} in {health_s:.2f} s",
             "SERVING <= 1 s", status == "SERVING" and health_s <= 1.0),
            (f"stalled: {per_service} per service, authenticated Plan", f"{code} in {plan_s:.2f} s (alone {baseline:.2f} s)",
             "OK <= alone + 1 s", code == "OK" and plan_s <= baseline + 1.0)]


def _bombs() -> dict[str, tuple[str, Any, float]]:
    """name -> (method, request of <= 4 KB, its deadline s)."""
    rng = random.Random(36)
    hf = {"model_type": "llama", "num_hidden_layers": "80", "hidden_size": 10**9, "intermediate_size": 10**9,
          "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256}
    hf_zero = dict(hf, num_hidden_layers=32, hidden_size=4096, num_attention_heads=0)
    spec = dict(SPEC)
    alias = fuzz_service.sweep_text(random.Random(0))
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    del alias
    small_sweep = fuzz_service._yaml({"base": SPEC, "axes": {"cluster.num_gpus": [8, 16]}, "budget": {"tokens": 1e9},
                                      "solver": {"time_limit_s": 1.0}})
    big_sweep = fuzz_service._yaml({"base": SPEC, "axes": {"cluster.num_gpus": list(range(1, 201)),
                                                           "training.global_batch_size": list(range(1, 201))}})
    bombs = {
        "hf: string layers, 1e9 width": ("Evaluate", pb.EvaluateRequest(spec_text=fuzz_service._yaml(
            {**spec, "model": {"hf_config_json": json.dumps(hf)}, "plan": {}})), 2.0),
        "hf: zero heads": ("Evaluate", pb.EvaluateRequest(spec_text=fuzz_service._yaml(
            {**spec, "model": {"hf_config_json": json.dumps(hf_zero)}, "plan": {}})), 2.0),
        "hf: 5,000-digit layers": ("Evaluate", pb.EvaluateRequest(spec_text=fuzz_service._yaml(
            {**spec, "model": {"hf_config_json": json.dumps(dict(hf_zero, num_attention_heads=32)).replace(
                '"num_hidden_layers": 32', '"num_hidden_layers": ' + "9" * 3000)}, "plan": {}})), 2.0),
        "sweep: 40,000 points": ("Sweep", pb.SweepRequest(sweep_text=big_sweep), 2.0),
        "sweep: alias bomb": ("Sweep", pb.SweepRequest(sweep_text="\n".join(lines) + "\nbase: *a8\n"), 5.0),
        "sweep: jobs=4096": ("Sweep", pb.SweepRequest(sweep_text=small_sweep, jobs=4096), 10.0),
        "sweep: ray_address": ("Sweep", pb.SweepRequest(sweep_text=small_sweep, engine="ray",
                                                       ray_address="127.0.0.1:1"), 5.0),
    }
    del rng
    return bombs


VALID_BOMBS = {"sweep: jobs=4096"}
"""Bombs that are valid requests: their work may use the server's memory budget (workers included), not more; the
others must be refused within +64 MiB (a valid request of <= 4 KB, e.g. a 10**6-layer spec, may take the budget)."""
DEFAULT_BUDGET_MIB = 1536  # solver-cli serve's default --memory-budget-mib


def attack_bombs(server: Server) -> list[tuple[str, str, str, bool]]:
    rows = []
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for name, (method, request, deadline_s) in _bombs().items():
        size = request.ByteSize()
        before = server.rss_mib()
        peak, workers = [before], [0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], server.rss_mib())
                    workers[0] = max(workers[0], sum("parplan.library.sweep.worker" in child.cmdline() for child in
                                                     psutil.Process(server.proc.pid).children(recursive=True)))
                except psutil.Error:
                    return
                done.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        with server.channel() as channel:
            path = f"/parplan.v1.PlannerService/{method}"
            try:
                if method == "Sweep":
                    for _ in channel.unary_stream(path, request_serializer=pb.SweepRequest.SerializeToString)(
                            request, timeout=deadline_s):
                        pass
                else:
                    channel.unary_unary(path, request_serializer=type(request).SerializeToString)(request,
                                                                                            timeout=deadline_s)
                code = "OK"
            except grpc.RpcError as err:
                code = err.code().name
        answered_s = time.perf_counter() - t0
        # the slot: a Plan must be served within deadline + 1 s of the bomb's start (the bomb may hold it after
        # its caller gave up)
        held_code, _ = timed_plan(server, limit_s=0.2, timeout_s=max(0.5, deadline_s + 1.0 - answered_s + 1.0))
        held_s = time.perf_counter() - t0
        done.set()
        sampler.join()
        growth = peak[0] - before
        slot_ok = code != "INTERNAL" and held_code == "OK" and held_s <= deadline_s + 2.5
        if name in VALID_BOMBS:
            ok = size <= 4096 and slot_ok and peak[0] <= DEFAULT_BUDGET_MIB and workers[0] <= cpus
            goal = f"workers <= {cpus} CPUs, RSS with workers <= {DEFAULT_BUDGET_MIB} MiB, slot <= deadline + 1 s"
        else:
            ok = size <= 4096 and growth <= 64 and slot_ok
            goal = "RSS <= +64 MiB, slot <= deadline + 1 s"
        rows.append((f"bomb: {name} ({size} B, deadline {deadline_s:g} s)",
                     f"{code} in {answered_s:.2f} s; RSS +{growth:.0f} MiB ({workers[0]} workers, peak "
                     f"{peak[0]:.0f} MiB); next Plan {held_code} at {held_s:.2f} s", goal, ok))
    return rows


def attack_fuzz(server: Server, count: int, seed: int) -> list[tuple[str, str, str, bool]]:
    base = convert.spec_to_message(load_spec_file(fuzz_service.EXAMPLE).model_dump(mode="json", exclude_none=True))
    master = random.Random(seed)
    kinds = {k: w for k, w in fuzz_service.KINDS.items() if k != "large_plan"}
    chosen = master.choices(list(kinds), weights=list(kinds.values()), k=count)
    seeds = [master.getrandbits(64) for _ in range(count)]
    codes: dict[str, int] = {}
    methods: set[str] = set()
    lock = threading.Lock()
    before = len(server.internal)

    def one(i: int) -> None:
        rng = random.Random(seeds[i])
        method, request, limit = fuzz_service.make_call(rng, chosen[i], base)
        with server.channel() as channel:
            code, _, _ = fuzz_service.run_call(channel, method, request, limit)
        with lock:
            codes[code] = codes.get(code, 0) + 1
            methods.add(method)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(count)))
    internal = codes.get("INTERNAL", 0) + codes.get("UNKNOWN", 0)
    logged = len(server.internal) - before
    return [(f"fuzz: {count} requests over {len(methods)} RPCs", f"{internal} INTERNAL/UNKNOWN, {logged} internal_error "
             f"lines; {json.dumps(dict(sorted(codes.items())))}", "0 INTERNAL", internal == 0 and logged == 0)]


BUDGET_MIB = 512  # the budget attack's server: --memory-budget-mib


def deep_spec(i: int) -> dict:
    """A 10**6-layer model (the largest a spec may name) on 2**20 GPUs, its batch varied by ``i``."""
    return {"model": {"name": f"deep{i}", "num_layers": 10**6, "hidden_size": 256, "ffn_hidden_size": 1024,
                      "num_attention_heads": 4, "num_kv_heads": 4, "vocab_size": 32000},
            "training": {"seq_len": 256, "global_batch_size": 4194304 - i},
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 1048576}}


def attack_budget(server: Server, calls: int = 4) -> list[tuple[str, str, str, bool]]:
    """``calls`` memory-frontier calls on 10**6-layer specs at once against a server whose budget is
    :data:`BUDGET_MIB`: the process's RSS, sampled every 10 ms, must stay within it (finding 7)."""
    peak, done = [server.rss_mib()], threading.Event()

    def sample():
        while not done.is_set():
            try:
                peak[0] = max(peak[0], server.rss_mib())
            except psutil.Error:
                return
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    limit_s = 8.0
    with server.channel() as channel:
        call = channel.unary_unary("/parplan.v1.PlannerService/Pareto", request_serializer=pb.ParetoRequest.SerializeToString,
                                   response_deserializer=pb.ParetoResponse.FromString)
        requests = [pb.ParetoRequest(spec_text=json.dumps(deep_spec(i)), axis=pb.PARETO_AXIS_MEMORY,
                                     solver=pb.SolverParameters(workers=1, time_limit_s=limit_s)) for i in range(calls)]
        t0 = time.perf_counter()
        futures = [call.future(r, timeout=limit_s + 30) for r in requests]
        codes = []
        for future in futures:
            try:
                future.result()
                codes.append("OK")
            except grpc.RpcError as err:
                codes.append(err.code().name)
        wall_s = time.perf_counter() - t0
    done.set()
    sampler.join()
    return [(f"budget: {calls} memory frontiers of 10**6 layers at once, --memory-budget-mib {BUDGET_MIB}",
             f"server RSS peak {peak[0]:.0f} MiB; {', '.join(codes)} in {wall_s:.1f} s",
             f"RSS <= {BUDGET_MIB} MiB, every call answered", peak[0] <= BUDGET_MIB and codes.count("OK") == calls)]


def attack_sigterm(server: Server) -> list[tuple[str, str, str, bool]]:
    release = threading.Event()
    stalls = [_stall(grpc.insecure_channel(server.target), method, release) for method in STALL_METHODS.values()
              for _ in range(3)]
    channel = server.channel()
    call = channel.unary_unary("/parplan.v1.PlannerService/Plan", request_serializer=pb.PlanRequest.SerializeToString,
                               response_deserializer=pb.PlanResponse.FromString)
    plans = [call.future(plan_request(20.0), timeout=60) for _ in range(6)]  # 4 solving, 2 queued
    time.sleep(1.5)  # the Plans are solving (their own 20 s limit) when the signal comes
    t0 = time.perf_counter()
    server.proc.send_signal(signal.SIGTERM)
    try:
        server.proc.wait(timeout=GRACE_S + 30)
    except subprocess.TimeoutExpired:
        pass
    exit_s = time.perf_counter() - t0
    codes = []
    for future in plans:
        try:
            future.result(timeout=5)
            codes.append("OK")
        except grpc.FutureTimeoutError:
            codes.append("NO_ANSWER")
        except grpc.RpcError as err:
            codes.append(err.code().name)
    release.set()
    channel.close()
    answered = codes.count("OK")
    return [(f"sigterm: 6 Plans (4 solving, 2 queued), 9 stalled streams, grace {GRACE_S:g} s",
             f"exit in {exit_s:.2f} s; Plans: {', '.join(codes)}", "exit <= grace + 1 s, every Plan OK",
             exit_s <= GRACE_S + 1.0 and answered == len(plans))]


def table(rows: list[tuple[str, str, str, bool]]) -> str:
    widths = [max(len(r[i]) for r in rows + [("attack", "measured", "goal", True)]) for i in range(3)]
    lines = [f"{'attack':<{widths[0]}}  {'measured':<{widths[1]}}  {'goal':<{widths[2]}}  result"]
    lines += [f"{a:<{widths[0]}}  {m:<{widths[1]}}  {g:<{widths[2]}}  {'pass' if ok else 'FAIL'}" for a, m, g, ok in rows]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI: 2 rounds, 20 stalled per service, 200 fuzzed")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stalled", type=int, default=200, help="stalled streams per service")
    parser.add_argument("--fuzz", type=int, default=10_000, help="fuzzed requests")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", action="append", default=[],
                        choices=["cancel", "stalled", "bomb", "budget", "fuzz", "sigterm"], help="run only these (repeatable)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.stalled, args.fuzz = min(args.rounds, 2), min(args.stalled, 20), min(args.fuzz, 200)
    chosen = args.only or ["cancel", "stalled", "bomb", "budget", "fuzz", "sigterm"]
    rows: list[tuple[str, str, str, bool]] = []
    attacks = {"cancel": lambda s: attack_cancel(s, args.rounds), "stalled": lambda s: attack_stalled(s, args.stalled),
               "bomb": attack_bombs, "budget": attack_budget, "fuzz": lambda s: attack_fuzz(s, args.fuzz, args.seed)}
    for name in [c for c in chosen if c != "sigterm"]:  # each attack on a fresh server: one's leak is not the next's
        server = Server(("--memory-budget-mib", str(BUDGET_MIB)) if name == "budget" else ())
        try:
            rows += attacks[name](server)
        except Exception as err:  # noqa: BLE001 - a broken attack is a failed row, not a lost table
            rows.append((name, f"attack raised {type(err).__name__}: {err}"[:160], "-", False))
        finally:
            server.stop()
    if "sigterm" in chosen:
        server = Server()
        try:
            rows += attack_sigterm(server)
        finally:
            server.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    head = f"python benchmarks/abuse.py {' '.join(argv if argv is not None else sys.argv[1:])}\n" \
           f"{os.cpu_count()} CPUs, server: 4 slots, grace {GRACE_S:g} s, commit {commit}\n"
    text = head + table(rows)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
