"""The server's event log: one JSON line per event on the ``parplan.server`` logger (server/app.py writes the
records to stderr as they are), and the request id that a call's lines and trailing metadata carry."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

import grpc

log = logging.getLogger("parplan.server")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id(context: grpc.ServicerContext) -> str:
    """The caller's ``x-request-id`` if it is a sane token, else a fresh one."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and isinstance(value, str) and _REQUEST_ID.match(value):
            return value
    return uuid.uuid4().hex


def log_event(event: str, **fields: Any) -> None:
    """One JSON line on the ``parplan.server`` logger."""
    log.info(json.dumps({"ts": round(time.time(), 3), "event": event, **fields}, default=str, ensure_ascii=False))
