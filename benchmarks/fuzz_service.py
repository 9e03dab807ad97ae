"""Fuzz a local `solver-cli serve` with valid and invalid requests, large and small; count the answers.

    python benchmarks/fuzz_service.py [--smoke] [--requests 10000] [--clients 4] [--seed 1] [--skip-kind KIND]
                                      [--out benchmarks/results/fuzz_service.json]

Every request is one of these kinds (drawn with fixed weights from ``--seed``):

* ``valid_plan``: a random valid spec (dense or MoE, 1-160 layers, 1-4096 GPUs of any catalog GPU, random search
  restrictions) sent typed or as text, ``Plan`` with a random time limit of 0.05-1.5 s on one worker;
* ``valid_evaluate``: the same kind of spec with a random (often infeasible) ``plan:``, ``Evaluate``;
* ``large_plan``: a valid spec at the large end (1,000-4,000 layers, 8,192-65,536 GPUs), ``Plan``, limit 1-2 s;
* ``bad_solver``: a valid small spec with one solver parameter or ``top_k`` out of its range;
* ``mutated_spec``: the example spec, typed, with 1-4 fields (recursively) set to random values of their type;
* ``bad_text``: spec text that is not a spec (random characters, broken YAML, wrong types, deep nesting, YAML
  aliases, up to 4 MiB + 1);
* ``raw_bytes``: random bytes as the body of a random method;
* ``hf_bomb``: ``hf_config_json`` with wrong types, huge numbers, NaN/inf, 5,000-digit ints, zero heads (issue 36);
* ``sweep``: ``Sweep`` with small, 40,000-point, alias-bomb, day-long-limit or broken specs, odd ``jobs``, ``ray_address``;
* ``cancelled``: a valid Plan/PlanStream/Pareto the client cancels 0-0.4 s after sending;
* ``model_source``: ``model.hf_config`` paths (/etc/passwd, /dev/zero, relative, ``..``), ``hf_config_json``
  (random JSON, not JSON, a real config), unknown and real presets.

A call passes when its status is OK or INVALID_ARGUMENT (RESOURCE_EXHAUSTED only for a body over the 4 MiB
message limit) and a solving call ends within its time limit + 1 s after its queue wait. At the end the server
must still be running and SERVING, with no ``internal_error`` line in its log. The figures are printed and
written as JSON (``--out``). Exit code 0 when every call passed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import string
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import grpc
from google.protobuf.descriptor import FieldDescriptor

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository root, for the benchmarks package
    sys.path.insert(0, str(REPO))

from benchmarks.serve_process import start_serve, stop_serve  # noqa: E402

from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from parplan.library.spec_io import load_spec_file  # noqa: E402
from parplan.wire import convert  # noqa: E402
from parplan.v1 import planner_pb2 as pb  # noqa: E402
from parplan.v1 import planner_pb2_grpc as pb_grpc  # noqa: E402

GPUS = ["A100-SXM-80GB", "A100-SXM-40GB", "H100-SXM-80GB", "H800", "H200-SXM-141GB", "B200", "GB200-NVL72", "MI300X"]
EXAMPLE = REPO / "examples" / "llama3-70b-64xh100-evaluate.yaml"
METHODS = ("Plan", "PlanStream", "Evaluate", "Pareto", "Sweep")
KINDS = {"valid_plan": 14, "valid_evaluate": 16, "large_plan": 2, "bad_solver": 14, "mutated_spec": 20,
         "bad_text": 14, "raw_bytes": 12, "model_source": 8, "hf_bomb": 8, "sweep": 8, "cancelled": 6}
SMOKE_KINDS = ("valid_evaluate", "bad_solver", "mutated_spec", "bad_text", "raw_bytes", "model_source", "hf_bomb",
               "sweep", "cancelled")  # --smoke: the cheap kinds, every method
SLACK_S = 1.0


# ---------------------------------------------------------------------------------------------- specs


def random_spec(rng: random.Random, large: bool = False) -> dict[str, Any]:
    heads = rng.choice([8, 16, 32, 64, 96, 128])
    kv = rng.choice([h for h in (1, 2, 4, 8, 16, heads) if heads % h == 0])
    head_dim = rng.choice([64, 128])
    hidden = heads * head_dim
    layers = rng.randint(1000, 4000) if large else rng.randint(1, 160)
    model: dict[str, Any] = {"name": "fuzz", "num_layers": layers, "hidden_size": hidden,
                             "ffn_hidden_size": hidden * rng.choice([2, 3, 4]) + rng.choice([0, 0, 256]),
                             "num_attention_heads": heads, "num_kv_heads": kv,
                             "vocab_size": rng.choice([32000, 50304, 128256, 151936])}
    if rng.random() < 0.25:
        experts = rng.choice([8, 16, 64, 256])
        model["moe"] = {"num_experts": experts, "top_k": rng.choice([1, 2, 4, 8][: 2 + (experts > 8)]),
                        "expert_ffn_hidden_size": rng.choice([512, 1024, 2048])}
    gpus_per_node = 8
    num_gpus = rng.choice([8192, 16384, 65536]) if large else rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 512, 4096])
    if num_gpus < gpus_per_node:
        gpus_per_node = num_gpus
    seq = rng.choice([1024, 2048, 4096, 8192, 32768])
    batch = rng.choice([1, 8, 64, 256, 1024, 4096]) * (1 if num_gpus < 4096 else 4)
    spec: dict[str, Any] = {"model": model, "training": {"seq_len": seq, "global_batch_size": batch},
                            "cluster": {"gpu": rng.choice(GPUS), "num_gpus": num_gpus,
                                        **({"gpus_per_node": gpus_per_node} if num_gpus < 8 else {})}}
    if rng.random() < 0.3:
        spec["search"] = {"pp": sorted(rng.sample([1, 2, 4, 8], rng.randint(1, 3)))}
    if rng.random() < 0.2:
        spec["objective"] = "min_memory"
    return spec


def random_plan(rng: random.Random) -> dict[str, Any]:
    plan = {k: rng.choice([1, 2, 4, 8]) for k in ("tp", "pp") if rng.random() < 0.7}
    if rng.random() < 0.5:
        plan["micro_batch_size"] = rng.choice([1, 2, 4])
    if rng.random() < 0.3:
        plan["recompute"] = rng.choice(["none", "selective", "full"])
    return plan


def spec_source(rng: random.Random, spec: dict[str, Any], request: Any) -> None:
    if rng.random() < 0.5:
        request.spec.CopyFrom(convert.spec_to_message(spec))
    else:
        request.spec_text = json.dumps(spec) if rng.random() < 0.3 else _yaml(spec)


def _yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)


# -------------------------------------------------------------------------------------- bad requests


def _scalar(rng: random.Random, field: FieldDescriptor) -> Any:
    if field.enum_type is not None:
        return rng.randint(-2, 9)
    if field.type == FieldDescriptor.TYPE_INT64:
        return rng.choice([rng.randint(-3, 300), rng.randint(-2**63, 2**63 - 1), 2**53 + 1, 0])
    if field.type == FieldDescriptor.TYPE_INT32:
        return rng.randint(-2**31, 2**31 - 1)
    if field.type == FieldDescriptor.TYPE_DOUBLE:
        return rng.choice([float("nan"), float("inf"), -1.0, 0.0, rng.uniform(-10, 1e4), 1e308])
    if field.type == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    return rng.choice(["", "H100", "\x00", "é" * 30, "".join(rng.choices(string.printable, k=rng.randint(1, 40)))])


def mutate(rng: random.Random, message: Any, depth: int = 0) -> Any:
    message = type(message).FromString(message.SerializeToString())
    for _ in range(rng.randint(1, 4)):
        field = rng.choice(list(message.DESCRIPTOR.fields))
        target = getattr(message, field.name)
        if rng.random() < 0.15:
            message.ClearField(field.name)
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            value = target[rng.choice(["grad_bytes", "matmul_efficiency", "nope", ""])]
            kind = rng.choice(["number_value", "integer_value", "bool_value", "string_value"])
            value.MergeFrom(pb.ScalarValue(**{kind: _scalar(rng, pb.ScalarValue.DESCRIPTOR.fields_by_name[kind])}))
        elif field.message_type is not None:
            if field.is_repeated or depth >= 2:
                continue
            target.CopyFrom(mutate(rng, target, depth + 1))
        elif field.is_repeated:
            del target[:]
            target.extend(_scalar(rng, field) for _ in range(rng.randint(0, 4)))
        else:
            setattr(message, field.name, _scalar(rng, field))
    return message


def bad_text(rng: random.Random) -> str:
    choice = rng.randrange(8)
    if choice == 0:
        return "".join(rng.choices(string.printable + "é\u2028{}[]:&*!|>", k=rng.randint(0, 400)))
    if choice == 1:
        return "model: {" * rng.randint(1, 3000)
    if choice == 2:
        return "a: &a [" + ",".join(["*a"] * 5) + "]\n"
    if choice == 3:
        return "[" * rng.randint(100, 200_000)
    if choice == 4:
        return _yaml({"model": rng.choice([[1, 2], "x", 5, None]), "training": {}, "cluster": {"gpu": 7}})
    if choice == 5:
        return "#" * (4 * 2**20 + rng.choice([1, 100]))  # just over the spec text limit
    if choice == 6:
        spec = random_spec(rng)
        spec[rng.choice(["model", "training", "cluster"])][rng.choice(["nope", "num_layers", "gpu"])] = \
            rng.choice([-1, "x", 1e300, [1], None])
        return _yaml(spec)
    return _yaml(random_spec(rng)) + "\n" + "x" * rng.randint(0, 3000) + ": 1\n"


OUT_OF_RANGE = [("workers", lambda r: r.choice([257, 10**6, -1])), ("seed", lambda r: r.randint(-2**31, -1)),
                ("time_limit_s", lambda r: r.choice([0.0, -1.0, float("nan"), float("inf"), 86401.0])),
                ("method", lambda r: r.randint(3, 99)), ("top_k", lambda r: r.choice([0, -5, 101, 2**31 - 1]))]


def model_source(rng: random.Random) -> dict[str, Any]:
    spec = random_spec(rng)
    choice = rng.randrange(6)
    if choice == 0:
        spec["model"] = {"hf_config": rng.choice(["/etc/passwd", "/dev/zero", "/proc/self/environ", "config.json",
                                                  "../../etc/shadow", "/", ""])}
    elif choice == 1:
        spec["model"] = {"hf_config_json": rng.choice(["{}", "[]", "not json", '{"model_type": "llama"}', "null",
                                                        (REPO / "tests/data/hf/llama-3-8b.json").read_text()])}
    elif choice == 2:
        spec["model"] = {"preset": rng.choice(["llama3-8b", "nope", "", "../x"])}
    elif choice == 3:
        spec["model"] = {"preset": "llama3-8b", "hf_config": "/etc/passwd"}
    elif choice == 4:
        spec["model"]["hf_config"] = "/etc/hostname"
    else:
        spec["model"] = {"hf_config_json": json.dumps({"model_type": "llama", "num_hidden_layers": rng.randint(-1, 99)})}
    return spec


def hf_bomb(rng: random.Random) -> str:
    """``hf_config_json`` whose values are of the wrong type, huge, NaN/inf, 5,000-digit or zero (issue 36, 3)."""
    config = json.loads((REPO / "tests/data/hf/llama-3-8b.json").read_text())
    keys = ["num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "vocab_size", "sliding_window", "head_dim", "max_position_embeddings", "num_local_experts"]
    values = ["12", "x", None, [], {}, True, 0, -1, 10**18, 2**63, "1e308", 1e308, -0.0]
    text_values = ["NaN", "Infinity", "-Infinity", "9" * 5000, "1" + "0" * 400]
    raw: dict[str, str] = {}
    for _ in range(rng.randint(1, 4)):
        key = rng.choice(keys)
        if rng.random() < 0.4:
            raw[key] = rng.choice(text_values)
            config[key] = f"@@{key}@@"
        else:
            config[key] = rng.choice(values)
    text = json.dumps(config)
    for key, value in raw.items():
        text = text.replace(f'"@@{key}@@"', value)
    return text


def sweep_text(rng: random.Random) -> str:
    """A sweep spec: small and valid, with many points, with an alias bomb, or broken."""
    choice = rng.randrange(5)
    base = {"model": {"preset": rng.choice(["llama3-8b", "nope", ""])}, "training": {"seq_len": 2048,
            "global_batch_size": 64}, "cluster": {"gpu": rng.choice(GPUS), "num_gpus": 8}}
    if choice == 0:
        return _yaml({"base": base, "axes": {"cluster.num_gpus": [8, 16]}, "budget": {"tokens": 1e9},
                      "solver": {"time_limit_s": rng.uniform(0.05, 1.0)}})
    if choice == 1:  # 40,000 points in ~2 KB
        return _yaml({"base": base, "axes": {"cluster.num_gpus": list(range(1, 201)),
                                             "training.global_batch_size": list(range(1, 201))}})
    if choice == 2:  # a billion-laughs of YAML aliases, ~0.5 KB
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]"
                  for i in range(1, 9)]
        return "\n".join(lines) + "\nbase: *a8\n"
    if choice == 3:
        return _yaml({"base": base, "axes": {"cluster.num_gpus": [8]},
                      "solver": {"time_limit_s": rng.choice([86400, 1e9, -1, float("nan")])}})
    return bad_text(rng)[:4096]


# ----------------------------------------------------------------------------------------- the calls


def make_call(rng: random.Random, kind: str, base: Any) -> tuple[str, Any, Optional[float]]:
    """(method, request message or raw bytes, the solver time limit when the call solves)."""
    if kind in ("valid_plan", "large_plan"):
        limit = rng.uniform(1.0, 2.0) if kind == "large_plan" else rng.uniform(0.05, 1.5)
        request = pb.PlanRequest(solver=pb.SolverParameters(workers=1, time_limit_s=limit), top_k=rng.choice([1, 1, 3]))
        spec_source(rng, random_spec(rng, large=kind == "large_plan"), request)
        return "Plan", request, limit
    if kind == "valid_evaluate":
        spec = random_spec(rng)
        spec["plan"] = random_plan(rng)
        request = pb.EvaluateRequest()
        spec_source(rng, spec, request)
        return "Evaluate", request, None
    if kind == "bad_solver":
        name, value = rng.choice(OUT_OF_RANGE)
        request = pb.PlanRequest(solver=pb.SolverParameters(workers=1, time_limit_s=1.0))
        if name == "top_k":
            request.top_k = value(rng)
        else:
            setattr(request.solver, name, value(rng))
        spec_source(rng, random_spec(rng), request)
        return "Plan", request, 1.0
    if kind == "mutated_spec":
        method = rng.choice(["Evaluate", "Plan"])
        spec = mutate(rng, base)
        if method == "Plan":
            return method, pb.PlanRequest(spec=spec, solver=pb.SolverParameters(workers=1, time_limit_s=1.0)), 1.0
        return method, pb.EvaluateRequest(spec=spec), None
    if kind == "bad_text":
        return "Plan", pb.PlanRequest(spec_text=bad_text(rng), solver=pb.SolverParameters(workers=1, time_limit_s=1.0)), 1.0
    if kind == "raw_bytes":
        return rng.choice(METHODS), rng.randbytes(rng.choice([0, 1, 7, 64, 600, 5000])), None
    if kind == "hf_bomb":
        spec = random_spec(rng)
        spec["model"] = {"hf_config_json": hf_bomb(rng)}
        method = rng.choice(["Evaluate", "Plan", "Pareto"])
        if method == "Evaluate":
            return method, pb.EvaluateRequest(spec_text=_yaml({**spec, "plan": {}})), None
        solver = pb.SolverParameters(workers=1, time_limit_s=0.5)
        cls = pb.PlanRequest if method == "Plan" else pb.ParetoRequest
        return method, cls(spec_text=_yaml(spec), solver=solver), 0.5
    if kind == "sweep":
        request = pb.SweepRequest(sweep_text=sweep_text(rng), jobs=rng.choice([0, 1, 2, 4096, -1]))
        if rng.random() < 0.2:
            request.engine, request.ray_address = "ray", rng.choice(["127.0.0.1:1", "10.255.255.1:6379", "nope"])
        return "Sweep", request, 30.0
    if kind == "cancelled":  # a valid call the client cancels at a random point (run_call reads cancel_after_s)
        method = rng.choice(["Plan", "PlanStream", "Pareto"])
        cls = {"Plan": pb.PlanRequest, "PlanStream": pb.PlanStreamRequest, "Pareto": pb.ParetoRequest}[method]
        request = cls(solver=pb.SolverParameters(workers=1, time_limit_s=1.0))
        spec_source(rng, random_spec(rng), request)
        return method, request, -rng.uniform(0.0, 0.4)  # negative: cancel after that many seconds
    spec = model_source(rng)
    request = pb.EvaluateRequest(spec_text=_yaml({**spec, "plan": {}}))
    return "Evaluate", request, None


def run_call(channel: grpc.Channel, method: str, request: Any, limit: Optional[float]) -> tuple[str, float, float]:
    """(status code name, latency s, queue wait s)."""
    path = f"/parplan.v1.PlannerService/{method}"
    raw = isinstance(request, bytes)
    serialize = None if raw else type(request).SerializeToString
    cancel_after = -limit if limit is not None and limit <= 0 else None
    timeout = (limit or 30.0) + 30.0 if cancel_after is None else 30.0
    t0 = time.perf_counter()
    wait = 0.0
    try:
        if cancel_after is not None:  # cancelled at a random point: only the server's later health counts
            stream = method in ("PlanStream", "Sweep")
            kind = channel.unary_stream if stream else channel.unary_unary
            future = kind(path, request_serializer=serialize)(request, timeout=timeout) if stream else \
                kind(path, request_serializer=serialize).future(request, timeout=timeout)
            time.sleep(cancel_after)  # the random point itself, not a synchronisation
            future.cancel()
            return "CANCELLED", time.perf_counter() - t0, 0.0
        if method in ("PlanStream", "Sweep"):
            response = pb.PlanStreamResponse if method == "PlanStream" else pb.SweepResponse
            call = channel.unary_stream(path, request_serializer=serialize, response_deserializer=response.FromString)
            for message in call(request, timeout=timeout):
                if method == "PlanStream" and message.WhichOneof("event") == "result":
                    wait = message.result.admission.queue_wait_s
        else:
            response_class = {"Plan": pb.PlanResponse, "Evaluate": pb.EvaluateResponse,
                              "Pareto": pb.ParetoResponse}[method]
            call = channel.unary_unary(path, request_serializer=serialize, response_deserializer=response_class.FromString)
            reply = call(request, timeout=timeout)
            if method in ("Plan", "Pareto"):
                wait = reply.admission.queue_wait_s
        code = "OK"
    except grpc.RpcError as err:
        code = err.code().name
    return code, time.perf_counter() - t0, wait


def start_server() -> tuple[subprocess.Popen, int, list[str]]:
    internal: list[str] = []

    def keep_internal(line: str) -> None:
        if '"internal_error"' in line:
            internal.append(line.strip()[:2000])

    proc, port = start_serve("--grace-period", "5", on_line=keep_internal)
    return proc, port, internal


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", "--requests", dest="count", type=int, default=10_000, help="requests in all")
    parser.add_argument("--smoke", action="store_true", help="CI: 200 requests of the cheap kinds, every method")
    parser.add_argument("--clients", type=int, default=4, help="concurrent client threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-kind", action="append", default=[], choices=list(KINDS),
                        help="leave a kind of request out (repeatable)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.count = min(args.count, 200)
        args.skip_kind += [k for k in KINDS if k not in SMOKE_KINDS]
    kinds_used = {k: w for k, w in KINDS.items() if k not in args.skip_kind}
    base = convert.spec_to_message(load_spec_file(EXAMPLE).model_dump(mode="json", exclude_none=True))
    master = random.Random(args.seed)
    kinds = master.choices(list(kinds_used), weights=list(kinds_used.values()), k=args.count)
    seeds = [master.getrandbits(64) for _ in range(args.count)]
    server, port, internal = start_server()
    target = f"127.0.0.1:{port}"
    codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures: list[dict] = []
    over_limit: list[dict] = []
    worst_margin = {"s": float("-inf")}
    latencies: list[float] = []
    lock = threading.Lock()
    next_index = iter(range(args.count))

    def client() -> None:
        with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 8 * 2**20)]) as channel:
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                rng = random.Random(seeds[i])
                method, request, limit = make_call(rng, kinds[i], base)
                code, latency, wait = run_call(channel, method, request, limit)
                big = not isinstance(request, bytes) and request.ByteSize() > 4 * 2**20
                ok = code in ("OK", "INVALID_ARGUMENT") or (code == "RESOURCE_EXHAUSTED" and big) or \
                    (code == "CANCELLED" and kinds[i] == "cancelled")
                with lock:
                    codes[kinds[i]][code] += 1
                    latencies.append(latency)
                    if not ok:
                        failures.append({"index": i, "kind": kinds[i], "method": method, "code": code})
                    if limit is not None and limit > 0 and code == "OK":
                        margin = latency - wait - limit
                        worst_margin["s"] = max(worst_margin["s"], margin)
                        if margin > SLACK_S:
                            over_limit.append({"index": i, "kind": kinds[i], "limit_s": round(limit, 3),
                                               "latency_s": round(latency, 3), "queue_wait_s": round(wait, 3)})

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        alive = server.poll() is None
        serving = False
        if alive:
            with grpc.insecure_channel(target) as channel:
                health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
                serving = health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        stop_serve(server)
    total = collections.Counter()
    for counter in codes.values():
        total.update(counter)
    latencies.sort()
    result = {
        "command": "python benchmarks/fuzz_service.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs",
        "requests": sum(total.values()), "elapsed_s": round(elapsed, 1), "clients": args.clients, "seed": args.seed,
        "codes": dict(total), "by_kind": {k: dict(v) for k, v in sorted(codes.items())},
        "internal": total.get("INTERNAL", 0) + len(internal), "unknown": total.get("UNKNOWN", 0),
        "failures": len(failures), "failure_examples": failures[:20],
        "runs_past_limit_plus_1s": len(over_limit), "over_limit_examples": over_limit[:20],
        "worst_latency_minus_wait_minus_limit_s": round(worst_margin["s"], 3),
        "latency_p50_s": round(latencies[len(latencies) // 2], 4) if latencies else None,
        "latency_max_s": round(latencies[-1], 3) if latencies else None,
        "server_alive_and_serving": alive and serving, "internal_error_log_lines": internal[:5],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    passed = not failures and not over_limit and not internal and alive and serving
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
