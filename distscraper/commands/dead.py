"""``scrapy dead list|requeue|purge``: requests that ran out of retries (``<prefix>:dead``).

``requeue`` puts each matching request back at the front of its priority band
in its domain queue, with its attempts reset and without the dupefilter (its
URL is already seen), atomically per entry: see distscraper.commands._letters.
"""

from __future__ import annotations

from typing import Any

import redis
from scrapy.commands import ScrapyCommand

from distscraper.commands._letters import DeadLetters, Letter
from distscraper.commands._letters_command import LettersCommand, short, when
from distscraper.frontier.keys import FrontierKeys


class Command(LettersCommand, ScrapyCommand):
    title = "dead letters"
    field = "url"
    actions = ("list", "requeue", "purge")

    def box(self, server: redis.Redis, keys: FrontierKeys) -> DeadLetters:
        return DeadLetters(server, keys)

    def as_json(self, letter: Letter) -> dict[str, Any]:
        return {"fingerprint": letter.id, **letter.record}

    def line(self, entry: dict[str, Any]) -> str:
        return (f"{entry['fingerprint']}  {when(entry.get('last_attempt'))}  "
                f"attempts={entry.get('attempts', '?')}  {short(entry.get('url', ''), 100)}  "
                f"{short(entry.get('error', ''), 80)}")
