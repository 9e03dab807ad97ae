"""One-line messages: every ``error:`` and ``warning:`` line the CLI prints, and every error's text, is collapsed
to one bounded line. Imports only the standard library, so ``solver-cli --help`` stays light (issue 41 item 2)."""

from __future__ import annotations

MAX_MESSAGE_CHARS = 1000


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Collapse any line breaks (every separator ``str.splitlines`` knows) and bound the length."""
    text = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["one_line", "MAX_MESSAGE_CHARS"]
