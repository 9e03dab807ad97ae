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

Between interruptions a plan first pays its reconfiguration (restart + resharding; an interruption that cuts it
short loses it), then trains. Goodput = tokens trained / (the full cluster's best plan's tokens per second × the
trace's time). Lost work since the last checkpoint is the same for every policy and left out.

    python benchmarks/replan.py            # Llama 3.1 405B, 16,384 H100, 54 days
    python benchmarks/replan.py --quick    # Llama 3 8B on 1,024 H100 for 8 days (a smoke test, seconds)
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
POLICIES = ("replan-with-cost", "replan-ignoring-cost", "shrink-DP-only")


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
QUICK = Scenario("Llama 3 8B on 1,024 H100, 8 days (rate per GPU as Llama 3's)",
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
        c = self.base.cluster
        return self.base.model_copy(update={"cluster": c.model_copy(update={"num_gpus": nodes * c.gpus_per_node})})

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


def simulate(sc: Scenario, seed: int, repair_h: float, workers: int, reshard: dict | None = None) -> dict:
    from parplan.library.api import optimize

    total_s = sc.days * 86400.0
    rate = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * 86400.0) * (sc.nodes * 8 / LLAMA3_GPUS)  # per job, per second
    events = trace(rate, total_s, seed)
    horizon_s = 1.0 / rate
    sim = Simulator(sc, horizon_s, workers, reshard)
    best = optimize(sim.base, workers=workers).plans[0]
    tokens_per_step = sim.base.training.global_batch_size * sim.base.training.seq_len
    ideal = tokens_per_step / best.metrics.step_time_s
    repairs: list[float] = []
    out = {}
    for policy in POLICIES:
        plan, nodes, step_s = best.plan, sc.nodes, best.metrics.step_time_s
        tokens, reconf_s, changes = 0.0, 0.0, 0
        repairs = []
        times = [0.0] + events + [total_s]
        for i in range(1, len(times)):
            seg = times[i] - times[i - 1]
            r_s = 0.0 if i == 1 else pending
            tokens += max(0.0, seg - r_s) / step_s * tokens_per_step
            reconf_s += min(seg, r_s)
            if i == len(times) - 1:
                break
            t = times[i]
            repairs = [x for x in repairs if x > t] + [t + repair_h * 3600.0]
            avail = sc.nodes - len(repairs)
            new_nodes = min(sc.nodes, avail // sc.granule * sc.granule)
            res = sim.replan(plan, nodes, new_nodes)
            if policy == "shrink-DP-only":
                point = sim.shrink_point(plan, nodes, new_nodes)
                if point is None:
                    raise SystemExit(f"shrink-DP-only: no DP fits {new_nodes} nodes")
                new_plan, new_step, pending = point
            else:
                p = res.best if policy == "replan-with-cost" else res.fastest
                new_plan, new_step, pending = p.evaluation.plan, p.step_time_s, p.reconfiguration_s
            changes += any(getattr(new_plan, f) != getattr(plan, f) for f in ("tp", "cp", "pp", "ep", "zero_stage"))
            plan, nodes, step_s = new_plan, new_plan.num_gpus // sim.base.cluster.gpus_per_node, new_step
        out[policy] = {"goodput": tokens / (ideal * total_s), "reconfiguration_h": reconf_s / 3600.0,
                       "layout_changes": changes}
    return {"scenario": sc.name, "interruptions": len(events), "horizon_h": horizon_s / 3600.0,
            "best_full_cluster": best.plan.model_dump(mode="json"), "replan_solves": sim.solves, "policies": out}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="Llama 3 8B on 1,024 H100 for 8 days (a smoke test)")
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--repair-h", type=float, default=24.0, help="hours until a lost node returns (an assumption)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--storage-gbps-per-node", type=float, help="checkpoint reads per node (default: Llama 3's)")
    ap.add_argument("--restart-s", type=float, help="seconds per restart (default 600, an assumption)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    reshard = {k: v for k, v in (("storage_read_gbps_per_node", args.storage_gbps_per_node),
                                 ("restart_s", args.restart_s)) if v is not None}
    res = simulate(QUICK if args.quick else FULL, args.seed, args.repair_h, args.workers, reshard)
    print(f"{res['scenario']}: {res['interruptions']} interruptions (seed {args.seed}), horizon "
          f"{res['horizon_h']:.2f} h, lost nodes back after {args.repair_h:g} h; {res['replan_solves']} Replan solves")
    print(f"{'policy':<22} {'goodput':>8} {'reconfiguration h':>18} {'layout changes':>15}")
    for name, r in res["policies"].items():
        print(f"{name:<22} {r['goodput']:>8.3f} {r['reconfiguration_h']:>18.2f} {r['layout_changes']:>15d}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)
    return 0 if all(math.isfinite(r["goodput"]) for r in res["policies"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
