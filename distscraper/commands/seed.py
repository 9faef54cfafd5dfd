"""``scrapy seed``: validate, deduplicate and queue seed URLs (see distscraper.producer).

Seeds come from the arguments, ``--file`` (one per line; blank lines and
``#`` comments skipped; JSON seed objects allowed), ``--stdin`` (same format)
and ``--sitemap``. Files and stdin are streamed in batches, so any size works.
Exit status: 0 whatever became of the seeds (the report says), 2 on a usage
error (including an unreadable file or sitemap), 1 when Redis is unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from distscraper.producer import Producer, PushResult
from distscraper.sitemaps import SitemapError, urls_from_sitemap

MAX_REJECTIONS_SHOWN = 20


def seed_lines(stream: BinaryIO) -> Iterator[str | bytes]:
    """The seeds of a stream: one per line, without blank lines and ``#`` comments.

    A line that is not UTF-8 stays bytes: the producer rejects it with the reason.
    """
    for line in stream:
        raw = line.strip()
        if not raw or raw.startswith(b"#"):
            continue
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            yield raw


def with_options(seed: str | bytes, priority: int | None, force: bool) -> str | bytes | dict[str, Any]:
    """*seed* with ``--priority`` (unless it sets its own) and ``--force`` applied."""
    if isinstance(seed, bytes) or priority is None and not force:
        return seed
    if seed.startswith("{"):
        try:
            obj = json.loads(seed)
        except ValueError:
            return seed  # the producer rejects it with the reason
        if not isinstance(obj, dict):
            return seed
    else:
        obj = {"url": seed}
    if priority is not None:
        obj.setdefault("priority", priority)
    if force:
        obj["force"] = True
    return obj


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_ENABLED": False}

    def syntax(self) -> str:
        return "[URL ...] [--file FILE] [--stdin] [--sitemap URL] [options]"

    def short_desc(self) -> str:
        return "Queue seed URLs in the shared frontier (validated, deduplicated)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--file", action="append", default=[], metavar="FILE",
                            help="read seeds from FILE, one per line ('-' is stdin)")
        parser.add_argument("--stdin", action="store_true", help="read seeds from standard input")
        parser.add_argument("--sitemap", action="append", default=[], metavar="URL",
                            help="queue every page URL of this sitemap (indexes are followed)")
        parser.add_argument("--priority", type=int, default=None, metavar="N",
                            help="priority of seeds that do not give one (higher first)")
        parser.add_argument("--force", action="store_true",
                            help="queue even URLs already seen (a re-crawl of those pages)")
        parser.add_argument("--max-queue", type=int, default=None, metavar="N",
                            help="wait while the frontier's queue holds N or more requests")
        parser.add_argument("--spider", default="site", help="spider whose frontier gets the seeds")
        parser.add_argument("--json", action="store_true", help="print the report as one JSON object")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        unknown = [a for a in args if a.startswith("-")]
        if unknown:
            raise UsageError(f"unknown option(s): {' '.join(unknown)}", print_help=False)
        if not (args or opts.file or opts.stdin or opts.sitemap):
            raise UsageError("no seeds: give URLs, --file FILE, --stdin or --sitemap URL",
                             print_help=False)
        if opts.max_queue is not None and opts.max_queue < 1:
            raise UsageError("--max-queue must be >= 1", print_help=False)
        for path in opts.file:
            if path != "-":
                try:
                    open(path, "rb").close()
                except OSError as exc:
                    raise UsageError(f"cannot read --file {path}: {exc}", print_help=False) from None
        assert self.settings is not None
        try:
            producer = Producer(spider=opts.spider, settings=self.settings)
        except ValueError as exc:  # a bad setting
            raise UsageError(str(exc), print_help=False) from None
        with producer:
            try:
                producer.ping()
                sitemap_urls = self._sitemap_urls(opts.sitemap)
                seeds = (with_options(s, opts.priority, opts.force)
                         for s in self._sources(args, opts, sitemap_urls))
                result = producer.push_many(seeds, max_queue=opts.max_queue)
            except ConnectionError as exc:
                print(f"error: {exc}", file=sys.stderr)
                self.exitcode = 1
                return
            self._report(result, producer.keys.prefix, producer.redis_url, opts.json)

    @staticmethod
    def _sitemap_urls(sitemaps: list[str]) -> list[str]:
        """Every sitemap is read before anything is queued, so a bad one queues nothing."""
        urls: list[str] = []
        for url in sitemaps:
            try:
                urls.extend(urls_from_sitemap(url))
            except SitemapError as exc:
                raise UsageError(str(exc), print_help=False) from None
        return urls

    @staticmethod
    def _sources(args: list[str], opts: argparse.Namespace,
                 sitemap_urls: list[str]) -> Iterator[str | bytes]:
        yield from args
        for path in opts.file:
            if path == "-":
                yield from seed_lines(sys.stdin.buffer)
                continue
            try:
                with open(path, "rb") as stream:
                    yield from seed_lines(stream)
            except OSError as exc:
                raise UsageError(f"cannot read --file {path}: {exc}", print_help=False) from None
        if opts.stdin:
            yield from seed_lines(sys.stdin.buffer)
        yield from sitemap_urls

    @staticmethod
    def _report(result: PushResult, prefix: str, redis_url: str, as_json: bool) -> None:
        if as_json:
            print(json.dumps({"frontier": prefix, **result.as_dict()}))
            return
        print(f"{prefix}: added {result.added}, skipped {result.skipped} (already seen or queued), "
              f"rejected {result.rejected} [{redis_url}]")
        for seed, reason in result.rejections[:MAX_REJECTIONS_SHOWN]:
            print(f"  rejected {seed!r}: {reason}")
        if result.rejected > MAX_REJECTIONS_SHOWN:
            print(f"  ... and {result.rejected - MAX_REJECTIONS_SHOWN} more (use --json to see all)")
