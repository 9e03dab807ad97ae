"""parplan: proven-optimal parallelism plans for large-model training.

The top-level folders of the repository are installed as subpackages of this one:
``parplan.costmodel`` (the exact evaluator), ``parplan.solver`` (CP-SAT planner and exhaustive oracle),
``parplan.client`` (spec loading, reports and the ``solver-cli`` command), ``parplan.server``.

Embedding code usually needs three names::

    from parplan import load_spec, evaluate, optimize

    spec = load_spec("examples/llama3-70b-64xh100.yaml")
    result = optimize(spec, top_k=3)          # PlanResult: status, plans (cost-model Evaluations), ...
    best = result.plans[0].plan               # the canonical Plan
"""

__version__ = "0.1.0"

__all__ = ["load_spec", "evaluate", "optimize", "Spec", "Plan", "__version__"]


def __getattr__(name: str):  # lazy: importing parplan stays cheap and pulls no solver unless asked
    if name == "load_spec":
        from parplan.client.spec_io import load_spec

        return load_spec
    if name == "evaluate":
        from parplan.costmodel.evaluate import evaluate

        return evaluate
    if name == "optimize":
        from parplan.solver.planner import optimize

        return optimize
    if name in ("Spec", "Plan"):
        from parplan.costmodel import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'parplan' has no attribute {name!r}")
