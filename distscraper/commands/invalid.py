"""``scrapy invalid list|purge``: rejected seeds (``<prefix>:start_urls:invalid``)."""

from __future__ import annotations

import redis
from scrapy.commands import ScrapyCommand

from distscraper.commands._letters import LetterList
from distscraper.commands._letters_command import LettersCommand
from distscraper.frontier.keys import FrontierKeys


class Command(LettersCommand, ScrapyCommand):
    title = "invalid seeds"
    field = "seed"

    def box(self, server: redis.Redis, keys: FrontierKeys) -> LetterList:
        return LetterList(server, keys.seeds_invalid, self.field)
