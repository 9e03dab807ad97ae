"""Generated protobuf and gRPC code of parplan.v1 (``python proto/generate.py``); installed as ``parplan.v1``."""
