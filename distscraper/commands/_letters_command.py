"""The shared command line of ``scrapy dead``, ``scrapy quarantine`` and ``scrapy invalid``.

``scrapy <cmd> list [--json] [--limit N] [--pattern REGEX]``, ``scrapy <cmd>
purge (--all | --pattern REGEX)`` and, for dead letters, ``scrapy dead
requeue (--all | --pattern REGEX)``. ``--pattern`` is a Python regex searched
in the URL (dead), the raw entry (quarantine) or the seed (invalid). Exit
status: 0, 2 on a usage error, 1 when Redis is unreachable.

:class:`LettersCommand` is a mixin, not a ScrapyCommand, so that Scrapy does
not list this module as a command.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from typing import Any

import redis
from scrapy.exceptions import UsageError

from distscraper import defaults
from distscraper.commands._letters import DeadLetters, Letter, LetterList
from distscraper.frontier.connection import redis_from_settings
from distscraper.frontier.keys import FrontierKeys
from distscraper.masking import mask_url


def when(ts: Any) -> str:
    """A unix time as ``YYYY-mm-dd HH:MM:SSZ`` (UTC), or ``?``."""
    try:
        return datetime.fromtimestamp(float(ts), timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def short(text: str, width: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


class LettersCommand:
    """Mixin for a ScrapyCommand over one kind of letters (set the class attributes)."""

    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}
    field = ""  # the record field shown and searched: "url", "entry" or "seed"
    title = ""  # human name, plural
    actions: tuple[str, ...] = ("list", "purge")
    settings: Any

    def syntax(self) -> str:
        return f"{'|'.join(self.actions)} [--all | --pattern REGEX] [--json] [--limit N]"

    def short_desc(self) -> str:
        return f"List or {' / '.join(self.actions[1:])} {self.title}"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)  # type: ignore[misc]
        parser.add_argument("--all", action="store_true", help="act on every entry")
        parser.add_argument("--pattern", metavar="REGEX", help="act on entries matching REGEX")
        parser.add_argument("--limit", type=int, default=50, metavar="N",
                            help="list at most N entries, newest first (0: all; default 50)")
        parser.add_argument("--spider", default="site", help="spider whose frontier to use")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def box(self, server: redis.Redis, keys: FrontierKeys) -> DeadLetters | LetterList:
        raise NotImplementedError

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1 or args[0] not in self.actions:
            raise UsageError(f"expected one action: {' | '.join(self.actions)}", print_help=False)
        action = args[0]
        if action != "list" and opts.all == bool(opts.pattern):
            raise UsageError(f"{action} needs either --all or --pattern REGEX", print_help=False)
        try:
            pattern = re.compile(opts.pattern) if opts.pattern else None
        except re.error as exc:
            raise UsageError(f"bad --pattern {opts.pattern!r}: {exc}", print_help=False) from None
        if opts.limit < 0:
            raise UsageError("--limit must be >= 0", print_help=False)
        keys = FrontierKeys.for_spider(opts.spider, defaults.get(self.settings, "FRONTIER_KEY_PREFIX"))
        server = redis_from_settings(self.settings)
        box = self.box(server, keys)
        try:
            if action == "list":
                out = self.do_list(box, pattern, opts.limit)
            elif opts.all and action == "purge":
                out = {"matched": None, "purged": box.purge_all()}
            else:
                letters = [x for x in box.entries() if pattern is None or pattern.search(x.text)]
                out = {"matched": len(letters)}
                out.update(box.requeue(letters) if isinstance(box, DeadLetters) and action == "requeue"
                           else {"purged": box.purge(letters)})
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            url = mask_url(defaults.get(self.settings, "REDIS_URL"))
            print(f"error: cannot reach Redis at {url}: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        finally:
            server.close()
        self.report(action, {"key": box.key, "action": action, **out}, opts.json)

    def do_list(self, box: DeadLetters | LetterList, pattern: re.Pattern[str] | None,
                limit: int) -> dict[str, Any]:
        letters = [x for x in box.entries() if pattern is None or pattern.search(x.text)]
        shown = letters[:limit] if limit else letters
        return {"total": len(letters), "entries": [self.as_json(x) for x in shown]}

    def as_json(self, letter: Letter) -> dict[str, Any]:
        return dict(letter.record)

    def line(self, entry: dict[str, Any]) -> str:
        return f"{when(entry.get('at'))}  {short(entry.get('reason', ''), 60)}  {short(entry.get(self.field, ''))}"

    def report(self, action: str, out: dict[str, Any], as_json: bool) -> None:
        if as_json:
            print(json.dumps(out))
            return
        if action == "list":
            entries = out["entries"]
            more = f" (showing the newest {len(entries)})" if len(entries) < out["total"] else ""
            print(f"{out['total']} {self.title} in {out['key']}{more}")
            for entry in entries:
                print("  " + self.line(entry))
            return
        counts = ", ".join(f"{k} {v}" for k, v in out.items()
                           if k not in ("key", "action", "matched") and v is not None)
        matched = "all" if out["matched"] is None else f"{out['matched']} matching"
        print(f"{out['key']}: {action} {matched} {self.title}: {counts}")
