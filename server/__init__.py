"""The gRPC planning service: a thin adapter over the library (``service.py``), the proto edge (``convert.py``)
and the server around them (``app.py``: health, reflection, auth, TLS, limits, drain). ``solver-cli serve`` runs it."""
