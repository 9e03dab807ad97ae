"""parplan: proven-optimal parallelism plans for large-model training.

The top-level folders of the repository are installed as subpackages of this one:
``parplan.costmodel`` (the exact evaluator), ``parplan.solver`` (CP-SAT planner and its exact oracle),
``parplan.frameworks`` (framework profiles and exports), ``parplan.library`` (spec loading, optimize and
evaluate, sweeps: what the CLI and the service share), ``parplan.wire`` (the proto mapping), ``parplan.server``
(the gRPC service), ``parplan.client`` (the ``solver-cli`` command and its reports, the gRPC client).

Embedding code usually needs three names::

    from parplan import load_spec, optimize, evaluate

    result = optimize("examples/llama3-70b-64xh100.yaml", top_k=3)   # a Spec, a path or a dict
    best = result.plans[0].plan               # the canonical Plan
    ledger = evaluate(load_spec("examples/llama3-70b-64xh100.yaml"), best)

``plan`` is ``optimize``'s other name (``from parplan import plan``). Every error a caller can fix is a
``ParplanError`` (``SpecError``, ``PlanError``, ``ArgumentError``). ``PlannerClient`` calls a
``solver-cli serve`` server (docs/service.md). Importing parplan pulls in neither OR-Tools nor grpcio: names are
resolved on first use.
"""

__version__ = "0.1.0"

_NAMES = {
    "load_spec": ("parplan.library.spec_io", "load_spec"),
    "as_spec": ("parplan.library.spec_io", "as_spec"),
    "optimize": ("parplan.library.api", "optimize"),
    "plan": ("parplan.library.api", "optimize"),
    "evaluate": ("parplan.library.api", "evaluate"),
    "Spec": ("parplan.costmodel.spec.spec", "Spec"),
    "Plan": ("parplan.costmodel.spec.spec", "Plan"),
    "PlanSpec": ("parplan.costmodel.spec.spec", "PlanSpec"),
    "SolverControls": ("parplan.solver.cpsat", "SolverControls"),
    "PlanResult": ("parplan.solver.result", "PlanResult"),
    "ParplanError": ("parplan.costmodel.errors", "ParplanError"),
    "ArgumentError": ("parplan.costmodel.errors", "ArgumentError"),
    "SpecError": ("parplan.library.spec_io", "SpecError"),
    "PlanError": ("parplan.costmodel.evaluation.evaluate", "PlanError"),
    "PlannerClient": ("parplan.client.grpc_client", "PlannerClient"),  # the gRPC client (the 'server' extra)
    "ServiceError": ("parplan.client.grpc_client", "ServiceError"),
    "sweep": ("parplan.library.sweep.run", "sweep"),
    "SweepError": ("parplan.library.sweep.points", "SweepError"),
}

__all__ = sorted(_NAMES) + ["__version__"]


def __getattr__(name: str):  # lazy: importing parplan stays cheap and pulls no solver unless asked
    if name not in _NAMES:
        raise AttributeError(f"module 'parplan' has no attribute {name!r}")
    module, attr = _NAMES[name]
    import importlib

    return getattr(importlib.import_module(module), attr)
