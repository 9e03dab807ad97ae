"""The gRPC planning service: a thin adapter over the library (``service.py``) through the wire mapping
(``parplan.wire.convert``), and the server around it (``app.py``: health, reflection, auth, TLS, limits, drain).
``solver-cli serve`` runs it."""
