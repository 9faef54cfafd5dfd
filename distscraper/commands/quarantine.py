"""``scrapy quarantine list|purge``: queue entries no worker could decode (``<prefix>:quarantine``)."""

from __future__ import annotations

import redis
from scrapy.commands import ScrapyCommand

from distscraper.commands._letters import LetterList
from distscraper.commands._letters_command import LettersCommand
from distscraper.frontier.keys import FrontierKeys


class Command(LettersCommand, ScrapyCommand):
    title = "quarantined entries"
    field = "entry"

    def box(self, server: redis.Redis, keys: FrontierKeys) -> LetterList:
        return LetterList(server, keys.quarantine, self.field)
