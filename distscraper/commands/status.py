"""``scrapy status``: the whole cluster at a glance, from Redis (and MongoDB). Read-only.

``--json`` prints one JSON object (one per refresh with ``--watch``);
``--watch [SECONDS]`` redraws in place until Ctrl-C. Works while a crawl runs
and after it has ended: it only reads.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import redis
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from distscraper.monitor.source import StatusSource
from distscraper.monitor.status import format_status

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[--spider NAME] [--json] [--watch [SECONDS]]"

    def short_desc(self) -> str:
        return "Show the cluster's queue, nodes, rates and documents"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--spider", default="site", help="spider whose frontier to show (default: site)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                            help="refresh every SECONDS (default 2) until Ctrl-C")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if args:
            raise UsageError(f"unexpected arguments: {' '.join(args)}", print_help=False)
        if opts.watch is not None and opts.watch <= 0:
            raise UsageError("--watch SECONDS must be > 0", print_help=False)
        assert self.settings is not None
        try:
            source = StatusSource.from_settings(self.settings, opts.spider)
        except ValueError as exc:
            raise UsageError(str(exc), print_help=False) from None
        try:
            if opts.watch is None:
                self.exitcode = self.show(source, opts.json, clear=False)
            else:
                self.watch(source, opts.json, opts.watch)
        finally:
            source.close()

    def show(self, source: StatusSource, as_json: bool, clear: bool) -> int:
        """Print the status once; 1 if Redis could not be read."""
        try:
            status = source.status()
        except redis.RedisError as exc:
            print(f"{CLEAR if clear else ''}cannot read Redis at {source.redis_url}: {exc}",
                  file=sys.stderr if not clear else sys.stdout, flush=True)
            return 1
        if as_json:
            print(json.dumps(status, sort_keys=True), flush=True)
        else:
            print((CLEAR if clear else "") + format_status(status), flush=True)
        return 0

    def watch(self, source: StatusSource, as_json: bool, every: float) -> None:
        """Redraw (or print a JSON line) every *every* seconds; Ctrl-C exits with 0."""
        try:
            while True:
                started = time.monotonic()
                self.show(source, as_json, clear=not as_json)
                time.sleep(max(every - (time.monotonic() - started), 0.05))
        except KeyboardInterrupt:
            if not as_json:
                print()
