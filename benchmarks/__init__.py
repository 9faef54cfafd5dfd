"""Benchmarks of distscraper against its anchors (Scrapy's in-memory scheduler, scrapy-redis).

Run them all with ``make bench`` (``python -m benchmarks.run``); see README.md
in this folder. Speed and memory are measured here, never by timed tests.
"""
