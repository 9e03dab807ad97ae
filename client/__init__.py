"""The user's side: ``solver-cli`` and its rendering (``cli.py``, ``report.py``, ``export_cli.py``, ...) and the
gRPC client (``grpc_client.py``), the top floor (pyproject ``[tool.importlinter]``)."""
