"""Peak RSS and wall time of `optimize` on the specs that used to take gigabytes (issue 23, item 1).

Each call runs in its own subprocess (``python -c`` calling ``parplan.optimize``); this process polls the child's
RSS every 10 ms with psutil and kills it past ``--guard-gib`` (a runaway never takes the machine down). The
child's own peak RSS, the kernel's ``VmHWM`` from /proc/self/status (not a sample), is printed by the child itself:
not ``ru_maxrss``, which Linux carries over an exec from the memory of the process that exec'd (fs/exec.c
``exec_mmap`` saves the old mm's high-water mark into the signal struct), and subprocess forks by vfork, so
the child would report this process's peak whenever it is larger.

    python benchmarks/bounded_calls.py                       # every spec below, 2 GiB budget, 5 s limit
    python benchmarks/bounded_calls.py --only deep16k --time-limit 5 --budget-mib 2048

Output (one line per spec): status, wall time of the call inside the child, wall time of the whole child
(interpreter start and imports included), peak RSS (kernel VmHWM) in MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import psutil

TINY = dict(hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4, num_kv_heads=4, vocab_size=32000)

SPECS = {
    # issue 23: 10 GiB RSS at 12.4 s under --time-limit 5
    "deep16k": dict(model=dict(name="deep", num_layers=16384, **TINY),
                    training=dict(seq_len=256, global_batch_size=4194304),
                    cluster=dict(gpu="H100-SXM-80GB", num_gpus=1048576)),
    # issue 23: 3.8 GiB
    "deep8k": dict(model=dict(name="deep8k", num_layers=8192, **TINY),
                   training=dict(seq_len=256, global_batch_size=4194304),
                   cluster=dict(gpu="H100-SXM-80GB", num_gpus=8192)),
    # issue 23: a 10,000-layer spec on 16,384 H800 at --time-limit 2 ended at 6.2-6.8 s
    "h800_10k": dict(model=dict(name="h800", num_layers=10000, hidden_size=4096, ffn_hidden_size=16384,
                                num_attention_heads=32, num_kv_heads=8, vocab_size=128256),
                     training=dict(seq_len=4096, global_batch_size=16384),
                     cluster=dict(gpu="H800", num_gpus=16384)),
}

CHILD = r"""
import json, sys, time
spec, limit, budget, method, top_k = json.loads(sys.argv[1])
def peak_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
from parplan import optimize
from parplan.solver.cpsat import SolverControls
kw = {} if budget is None else {"memory_budget_mib": budget}
t0 = time.perf_counter()
r = optimize(spec, method=method, top_k=top_k, controls=SolverControls(time_limit_s=limit, workers=1, **kw))
wall = time.perf_counter() - t0
print(json.dumps({"status": r.status, "call_s": wall, "peak_rss_mib": peak_kib() / 1024,
                  "plans": len(r.plans), "bound_s": r.stats.best_bound, "value_s": r.stats.objective_value}))
"""


def run_one(spec: dict, time_limit: float, budget_mib, method: str = "cpsat", top_k: int = 1,
            guard_gib: float = 6.0) -> dict:
    """Run one optimize call in a child; returns its JSON line plus ``child_s``, ``sampled_peak_mib`` and
    ``killed`` (True when the guard killed it)."""
    arg = json.dumps([spec, time_limit, budget_mib, method, top_k])
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    ps = psutil.Process(proc.pid)
    peak, killed = 0, False
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.Error:
            break
        if peak > guard_gib * 2**30:
            proc.kill()
            killed = True
            break
        time.sleep(0.01)
    out, err = proc.communicate()
    child_s = time.perf_counter() - t0
    line = out.strip().splitlines()[-1] if out.strip() else ""
    res = json.loads(line) if line.startswith("{") else {"status": None, "error": err.strip()[-2000:]}
    res.update(child_s=child_s, sampled_peak_mib=peak / 2**20, killed=killed, returncode=proc.returncode)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(SPECS), action="append")
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--budget-mib", type=int, default=2048)
    ap.add_argument("--method", default="cpsat", choices=["cpsat", "exhaustive"])
    ap.add_argument("--no-budget", action="store_true", help="do not pass memory_budget_mib (the default applies)")
    ap.add_argument("--guard-gib", type=float, default=6.0)
    args = ap.parse_args()
    for name in args.only or sorted(SPECS):
        r = run_one(SPECS[name], args.time_limit, None if args.no_budget else args.budget_mib, args.method,
                    guard_gib=args.guard_gib)
        print(f"{name:9s} limit {args.time_limit:g}s budget {args.budget_mib} MiB: status {r.get('status')} "
              f"call {r.get('call_s', float('nan')):.2f}s child {r['child_s']:.2f}s "
              f"peak {r.get('peak_rss_mib', float('nan')):.0f} MiB sampled {r['sampled_peak_mib']:.0f} MiB"
              + (" KILLED by guard" if r["killed"] else "") + (f" error: {r['error'][-300:]}" if 'error' in r else ""),
              flush=True)


if __name__ == "__main__":
    main()
