"""Plans on heterogeneous GPU pools (issue 21): one job whose pipeline stages run on pools of different GPU types,
a package as :mod:`parplan.solver.oracle` is (the pool pricing is the cost model's, ``costmodel/evaluation/pools.py``).

* :mod:`.planner`: ``optimize`` on several ``cluster.pools`` (``solver/planner.py`` hands such a spec here);
* :mod:`.cpsat`: one CP-SAT stage → pool model per choice (``method='cpsat'``), whose coefficients and bounds
  :mod:`.choice_model` reads off the evaluator;
* :mod:`.space`: the space (choices, stage pool sequences, layer compositions, the least recompute that fits)
  and its plain enumeration, the tests' reference;
* :mod:`.search` and :mod:`.bnb`: the exact search over that space by branch and bound (``method='exhaustive'``),
  the oracle of the CP-SAT model;
* :mod:`.frontier`: step time against the GPUs of each pool (``--pareto gpus``, the ``min_gpus`` objective);
* :mod:`.explain`: why each stage sits on its pool (the answer's ``placement`` lines).
"""
