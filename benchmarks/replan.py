"""Failure-trace simulation of replanning (issue 43 item 3): a training job on a cluster that loses nodes, under three
policies, and the goodput each keeps.

The trace: interruptions arrive as a Poisson process at Llama 3's published rate, 419 unexpected interruptions in
54 days of pre-training on 16,384 H100 (Llama 3 paper, arXiv:2407.21783 §3.3.4, Table 5); each takes one node out
until it is repaired ``--repair-h`` hours later (an assumption: the paper gives no repair time). The job runs on the
available nodes rounded down to ``--granule`` nodes (the rest are spares: a job of a fixed global batch cannot use
any node count, docs/replan.md); every interruption restarts it, and it replans on the nodes it then has with the
expected time to the next interruption (54 days / 419 = 3.1 h) as the horizon. Policies, each from the same
``Replan`` answer (library/replan.py):

* ``replan-with-cost``: the plan of least effective step time (step time plus reconfiguration over the horizon);
* ``replan-ignoring-cost``: the fastest plan (what ``Plan`` alone would answer), paying whatever resharding it needs;
* ``shrink-DP-only``: the old TP/CP/PP/EP/ZeRO with the largest DP the nodes and the global batch allow (idle GPUs
  where DP must shrink further).

``--trace spot`` replays a spot cluster instead: AWS's Spot Instance Advisor states an instance type's "frequency of
interruption", "the rate at which Spot has reclaimed capacity during the trailing month", in buckets <5 %, 5-10 %,
10-15 %, 15-20 % and >20 % (aws.amazon.com/ec2/spot/instance-advisor/; the definition as quoted by
pkg.go.dev/github.com/grailbio/base/cloud/spotadvisor); the trace takes the top bucket's bound, 20 % of 8-GPU
instances reclaimed per 30 days, as a Poisson rate per instance (1.76 x Llama 3's per-GPU rate), a reclaimed
instance back after ``--repair-h``.

Between interruptions a plan first pays its reconfiguration (restart + resharding; an interruption that cuts it
short loses it), then trains. Goodput = tokens trained / (the full cluster's best plan's tokens per second × the
trace's time). Lost work since the last checkpoint is the same for every policy and left out.

    python benchmarks/replan.py            # Llama 3.1 405B, 16,384 H100, 54 days
    python benchmarks/replan.py --quick    # Llama 3 8B on 1,024 H100 for 8 days (a smoke test, seconds)
    python benchmarks/replan.py --plot docs/img/replan-goodput.png   # and draw goodput over the trace (extra: plot)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass

LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_GPUS = 419, 54, 16384  # arXiv:2407.21783 §3.3.4
SPOT_RECLAIMED_PER_MONTH, SPOT_GPUS_PER_INSTANCE = 0.20, 8  # AWS Spot Instance Advisor's top bucket (module docstring)
POLICIES = ("replan-with-cost", "replan-ignoring-cost", "shrink-DP-only")


@dataclass(frozen=True)
class Trace:
    label: str
    per_gpu_s: float  # interruptions per GPU per second


TRACES = {
    "llama3": Trace("Llama 3's 419 interruptions in 54 days on 16,384 H100",
                    LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * 86400.0) / LLAMA3_GPUS),
    "spot": Trace("spot: 20 % of 8-GPU instances reclaimed a month (AWS Spot Instance Advisor, '>20%')",
                  SPOT_RECLAIMED_PER_MONTH / (30 * 86400.0) / SPOT_GPUS_PER_INSTANCE),
}


@dataclass
class Scenario:
    name: str
    spec: dict
    nodes: int
    days: float
    granule: int  # nodes


FULL = Scenario("Llama 3.1 405B on 16,384 H100, 54 days",
                {"model": {"preset": "llama3.1-405b"}, "training": {"seq_len": 8192, "global_batch_size": 2048},
                 "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 16384, "gpus_per_node": 8}}, 2048, 54.0, 128)
QUICK = Scenario("Llama 3 8B on 1,024 H100, 8 days",
                 {"model": {"preset": "llama3-8b"}, "training": {"seq_len": 8192, "global_batch_size": 1024},
                  "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 1024, "gpus_per_node": 8}}, 128, 8.0, 8)


def trace(rate_per_s: float, horizon_s: float, seed: int) -> list[float]:
    """Interruption times of a Poisson process (deterministic for a seed)."""
    rng, t, out = random.Random(seed), 0.0, []
    while True:
        t += rng.expovariate(rate_per_s)
        if t >= horizon_s:
            return out
        out.append(t)


def shrink_dp(spec, old, gpus: int):
    """The old layout with the largest DP that fits ``gpus`` and divides the global batch (None if none does)."""
    mp = old.tp * old.cp * old.pp
    gbs = spec.training.global_batch_size
    for dp in range(gpus // mp, 0, -1):
        if gbs % (dp * old.micro_batch_size) == 0 and (mp * dp) % spec.cluster.gpus_per_node == 0:
            return old.model_copy(update={"dp": dp, "num_microbatches": gbs // (dp * old.micro_batch_size)})
    return None


class Simulator:
    def __init__(self, sc: Scenario, horizon_s: float, workers: int, reshard: dict | None = None):
        from parplan.costmodel.memory.reshard import ReshardAssumptions
        from parplan.library.spec_io import spec_from_data

        self.sc, self.horizon_s, self.workers = sc, horizon_s, workers
        self.reshard = ReshardAssumptions(**(reshard or {}))
        self.base = spec_from_data(sc.spec, sc.name)
        self.cache: dict = {}
        self.solves = 0

    def spec_at(self, nodes: int):
        return self.base.at_gpus(nodes * self.base.cluster.gpus_per_node)

    def replan(self, plan, old_nodes: int, new_nodes: int):
        """One Replan answer per (plan, node counts), shared by the policies."""
        from parplan.library.replan import replan

        key = (json.dumps(plan.model_dump(mode="json"), sort_keys=True), old_nodes, new_nodes)
        if key not in self.cache:
            lost = list(range(old_nodes - new_nodes)) if new_nodes < old_nodes else [0]
            added = 0 if new_nodes < old_nodes else new_nodes - old_nodes + 1
            self.cache[key] = replan(self.spec_at(old_nodes), plan=plan.model_dump(mode="json"), lost_nodes=lost,
                                     added_nodes=added, horizon_s=self.horizon_s, workers=self.workers,
                                     reshard=self.reshard)
            self.solves += 1
        return self.cache[key]

    def shrink_point(self, plan, old_nodes: int, new_nodes: int):
        """(plan, step time, reconfiguration s) of shrink-DP-only, or None."""
        from parplan.costmodel.compute.architecture import Architecture
        from parplan.costmodel.spec.hardware import resolve_gpu
        from parplan.costmodel.memory.reshard import reconfiguration
        from parplan.library.api import evaluate

        gpn = self.base.cluster.gpus_per_node
        p = shrink_dp(self.base, plan, new_nodes * gpn)
        if p is None:
            return None
        e = evaluate(self.spec_at(p.num_gpus // gpn).model_copy(update={"plan": None}), p)
        if not e.feasible:
            return None
        r = reconfiguration(Architecture(self.base.model), plan, p, lost_gpus=gpn,
                            added_gpus=max(0, p.num_gpus - plan.num_gpus + gpn), gpus_per_node=gpn,
                            network_gbps_per_gpu=resolve_gpu(self.base.cluster).inter_node_bandwidth_gbps,
                            a=self.reshard)
        return e.plan, e.metrics.step_time_s, r.time_s


def next_move(sim: Simulator, policy: str, plan, nodes: int, new_nodes: int):
    """(plan, step time s, reconfiguration s) that ``policy`` moves to when the job goes from ``nodes`` to
    ``new_nodes`` nodes."""
    if policy == "shrink-DP-only":
        point = sim.shrink_point(plan, nodes, new_nodes)
        if point is None:
            raise SystemExit(f"shrink-DP-only: no DP fits {new_nodes} nodes")
        return point
    res = sim.replan(plan, nodes, new_nodes)
    p = res.best if policy == "replan-with-cost" else res.fastest
    return p.evaluation.plan, p.step_time_s, p.reconfiguration_s


def run_policy(sim: Simulator, policy: str, best, events: list[float], total_s: float, repair_h: float) -> dict:
    """One policy over the trace: its goodput, reconfiguration time, layout changes, and its ``series`` of
    (day, goodput so far, nodes in use) after each interruption (what --plot draws)."""
    sc, gpn = sim.sc, sim.base.cluster.gpus_per_node
    tokens_per_step = sim.base.training.global_batch_size * sim.base.training.seq_len
    ideal = tokens_per_step / best.metrics.step_time_s
    plan, nodes, step_s, pending = best.plan, sc.nodes, best.metrics.step_time_s, 0.0
    tokens, reconf_s, changes, repairs, series = 0.0, 0.0, 0, [], []
    times = [0.0] + events + [total_s]
    for i in range(1, len(times)):
        seg, t = times[i] - times[i - 1], times[i]
        tokens += max(0.0, seg - pending) / step_s * tokens_per_step
        reconf_s += min(seg, pending)
        series.append((t / 86400.0, tokens / (ideal * t), nodes))
        if i == len(times) - 1:
            break
        repairs = [x for x in repairs if x > t] + [t + repair_h * 3600.0]
        new_nodes = min(sc.nodes, (sc.nodes - len(repairs)) // sc.granule * sc.granule)
        new_plan, new_step, pending = next_move(sim, policy, plan, nodes, new_nodes)
        changes += any(getattr(new_plan, f) != getattr(plan, f) for f in ("tp", "cp", "pp", "ep", "zero_stage"))
        plan, nodes, step_s = new_plan, new_plan.num_gpus // gpn, new_step
    return {"goodput": tokens / (ideal * total_s), "reconfiguration_h": reconf_s / 3600.0, "layout_changes": changes,
            "series": series}


def simulate(sc: Scenario, seed: int, repair_h: float, workers: int, reshard: dict | None = None,
             trace_name: str = "llama3") -> dict:
    from parplan.library.api import optimize

    total_s = sc.days * 86400.0
    rate = TRACES[trace_name].per_gpu_s * sc.nodes * sc.spec["cluster"]["gpus_per_node"]  # per job, per second
    events = trace(rate, total_s, seed)
    horizon_s = 1.0 / rate
    sim = Simulator(sc, horizon_s, workers, reshard)
    best = optimize(sim.base, workers=workers).plans[0]
    out = {policy: run_policy(sim, policy, best, events, total_s, repair_h) for policy in POLICIES}
    return {"scenario": sc.name, "trace": trace_name, "interruptions": len(events), "horizon_h": horizon_s / 3600.0,
            "best_full_cluster": best.plan.model_dump(mode="json"), "replan_solves": sim.solves, "policies": out}


def plot(res: dict, path: str) -> None:
    """Goodput so far (top) and nodes in use (bottom) per policy over the trace, as a PNG."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install -e '.[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True, height_ratios=(2, 1))
    for (policy, r), style in zip(res["policies"].items(), ("-", "--", "-")):  # dashed: visible where lines agree
        days, goodput, nodes = zip(*r["series"])
        top.plot(days, goodput, style, label=f"{policy} ({r['goodput']:.3f})", lw=1.4)
        bottom.step(days, nodes, style, where="post", label=policy, lw=1.0)
    top.set_ylabel("goodput so far")
    top.set_title(f"{res['scenario']}\n{TRACES[res['trace']].label}: {res['interruptions']} interruptions",
                  fontsize=10)
    top.legend(loc="lower left", fontsize=8)
    top.grid(alpha=0.3)
    bottom.set_ylabel("nodes in use")
    bottom.set_xlabel("day")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="Llama 3 8B on 1,024 H100 for 8 days (a smoke test)")
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--repair-h", type=float, default=24.0, help="hours until a lost node returns (an assumption)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--storage-gbps-per-node", type=float, help="checkpoint reads per node (default: Llama 3's)")
    ap.add_argument("--restart-s", type=float, help="seconds per restart (default 600, an assumption)")
    ap.add_argument("--trace", choices=sorted(TRACES), default="llama3", help="interruption rate: Llama 3's "
                    "failures (default) or a spot cluster's reclaims (module docstring)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--plot", metavar="PATH", help="draw goodput per policy over the trace into PATH (a PNG; needs "
                    "matplotlib, the plot extra)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    reshard = {k: v for k, v in (("storage_read_gbps_per_node", args.storage_gbps_per_node),
                                 ("restart_s", args.restart_s)) if v is not None}
    res = simulate(QUICK if args.quick else FULL, args.seed, args.repair_h, args.workers, reshard, args.trace)
    print(f"{res['scenario']}, trace {args.trace}: {res['interruptions']} interruptions (seed {args.seed}), horizon "
          f"{res['horizon_h']:.2f} h, lost nodes back after {args.repair_h:g} h; {res['replan_solves']} Replan solves")
    print(f"{'policy':<22} {'goodput':>8} {'reconfiguration h':>18} {'layout changes':>15}")
    for name, r in res["policies"].items():
        print(f"{name:<22} {r['goodput']:>8.3f} {r['reconfiguration_h']:>18.2f} {r['layout_changes']:>15d}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)
    if args.plot:
        plot(res, args.plot)
        print(f"wrote {args.plot}")
    return 0 if all(math.isfinite(r["goodput"]) for r in res["policies"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
