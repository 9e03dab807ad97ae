"""parplan: proven-optimal parallelism plans for large-model training.

The top-level folders of the repository are installed as subpackages of this one:
``parplan.costmodel`` (the exact evaluator), ``parplan.solver`` (CP-SAT planner and exhaustive oracle),
``parplan.client`` (library entry points and the ``solver-cli`` command), ``parplan.server``.
"""

__version__ = "0.1.0"
