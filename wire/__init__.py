"""The wire: the mapping between the parplan.v1 proto messages and the library's types (``convert.py``), shared by
the server (``parplan.server``) and the gRPC client (``parplan.client.grpc_client``); above the library, below
both (pyproject ``[tool.importlinter]``)."""
