"""FRONTIER_PRIORITY_RULES: URL patterns that set a request's priority."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PriorityRules:
    """An ordered list of (compiled regex, priority); the first match wins."""

    rules: tuple[tuple[re.Pattern[str], int], ...] = ()

    @classmethod
    def from_setting(cls, value: Any) -> "PriorityRules":
        if isinstance(value, str):
            value = json.loads(value) if value.strip() else []
        rules = []
        for rule in value or []:
            try:
                pattern, priority = rule
                rules.append((re.compile(pattern), int(priority)))
            except (TypeError, ValueError, re.error) as exc:
                raise ValueError(
                    f"setting FRONTIER_PRIORITY_RULES has a bad rule {rule!r}: "
                    f"expected [regex, integer priority] ({exc})") from None
        return cls(tuple(rules))

    def priority_for(self, url: str) -> int:
        for pattern, priority in self.rules:
            if pattern.search(url):
                return priority
        return 0
