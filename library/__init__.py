"""The library surface the CLI and the server share (issue 37 item 1): a spec in (``spec_io``: YAML, a path or a
dict, its model from a Hugging Face config or a preset), plans and evaluations out (``api``, ``evaluation``, the
CONTRACT dicts of ``contract``), capacity sweeps (``sweep/``). Below the wire mapping (``parplan.wire``), above
the frameworks, the solver and the cost model (pyproject ``[tool.importlinter]``)."""
