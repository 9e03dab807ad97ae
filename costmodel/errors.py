"""The one base of every error a user can cause: a bad spec, a bad plan, a bad argument.

``ParplanError`` is what a caller of the library catches to tell "your input is wrong" from a bug.
The CLI maps it to exit 2 with one line ``error: <field>: <rule>``; the gRPC service maps it to
``INVALID_ARGUMENT`` with a field violation for :attr:`ParplanError.field`. Anything else that escapes
is a bug (exit 1), and no input that validates may reach one.

The subclasses stay importable from where they are raised:

* ``parplan.library.spec_io.SpecError``: an unusable spec (unreadable, malformed, against the schema);
* ``parplan.costmodel.evaluation.evaluate.PlanError``: a plan whose shape contradicts the spec;
* ``parplan.costmodel.spec.hardware.UnknownGPU``: a GPU name not in the catalog;
* :class:`ArgumentError` (here): a library or CLI argument out of its documented range.

This module imports nothing from parplan, so any module may import it without a cycle.
"""

from __future__ import annotations

import re
from typing import Optional

# a leading field path: "model.num_layers: ...", "plan.stage_layers[2]: ...", "--workers: ..."
_FIELD_PREFIX = re.compile(r"^(--[a-z][a-z0-9-]*|[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\]|\.[A-Za-z_][A-Za-z0-9_]*)*): ")


class ParplanError(ValueError):
    """A request the user can fix (bad spec, plan or argument); ``str(err)`` is one line naming the field
    and the rule. The CLI maps it to exit 2, the gRPC service to INVALID_ARGUMENT.

    ``field`` is the field path (``model.num_layers``, ``plan.vpp``, ``top_k``) when the error names one:
    given explicitly, or else read from the ``<field>: `` prefix of the message; None otherwise.
    """

    def __init__(self, message: str = "", *, field: Optional[str] = None):
        super().__init__(message)
        if field is None:
            match = _FIELD_PREFIX.match(str(message))
            field = match.group(1) if match else None
        self.field = field


class ArgumentError(ParplanError):
    """A library or CLI argument outside its documented range (``top_k=0``, ``workers=100000``, ...).

    ``argument`` is the library name of the argument (``top_k``), ``rule`` the range it breaks and
    ``value`` what was passed; the CLI prints the option instead (``--top``).
    """

    def __init__(self, argument: str, rule: str, value: object = None):
        self.argument, self.rule, self.value = argument, rule, value
        super().__init__(f"{argument}: {rule} (got {_short(value)})", field=argument)

    def for_option(self, option: str) -> str:
        """The same message naming a CLI option instead of the library argument."""
        return f"{option}: {self.rule} (got {_short(self.value)})"


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["ParplanError", "ArgumentError"]
