"""The sandbox site's hit log: every request, in memory and as JSON lines in a file.

:class:`HitLog` keeps every hit in memory and, while a file is open, appends it
there as one JSON line flushed at once, so another process can follow the log
(:func:`read_hits`) while the server runs. It is thread-safe.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any


def read_hits(path: str | Path) -> list[dict[str, Any]]:
    """The hits in a JSON-lines hit log (a partly written last line is skipped)."""
    out: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        pass
    return out


class HitLog:
    """Hits recorded by the server's threads; see the module docstring."""

    def __init__(self) -> None:
        self._hits: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._file: Any = None

    def open(self, path: str | Path) -> None:
        """Append every later hit to *path* too (its folder is created)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")

    def close(self) -> None:
        """Stop writing to the file; hits are still kept in memory."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def record(self, hit: dict[str, Any]) -> None:
        line = json.dumps(hit, separators=(",", ":")) + "\n"
        with self._lock:
            self._hits.append(hit)
            if self._file is not None:
                self._file.write(line)
                self._file.flush()

    def in_memory(self) -> list[dict[str, Any]]:
        """Every hit recorded by this process so far."""
        with self._lock:
            return list(self._hits)
