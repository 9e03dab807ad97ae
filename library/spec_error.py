"""The error of an unusable spec, sweep or profile (library/spec_io.py, library/safe_yaml.py): one line naming the
field path (or the file) and the rule, as the CLI prints it (exit 2) and the service returns it (INVALID_ARGUMENT)."""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.errors import ParplanError
from parplan.library.messages import one_line


class SpecError(ParplanError):
    """An unusable spec. ``str(err)`` is a single line naming the field path (or the file) and the rule."""

    def __init__(self, message: str, *, source: Optional[str] = None):
        self.message = one_line(message)
        self.source = source
        super().__init__(self.message)
        if source is not None and self.message.startswith(f"{source}: "):
            self.field = None  # the message names the file, not a field
