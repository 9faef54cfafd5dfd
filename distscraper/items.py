"""The item the `site` spider stores: one per fetched page."""

import scrapy


class PageItem(scrapy.Item):
    url = scrapy.Field()  # final URL after redirects; the unique key in MongoDB
    requested_url = scrapy.Field()  # the URL first requested
    status = scrapy.Field()
    content_type = scrapy.Field()
    title = scrapy.Field()
    description = scrapy.Field()  # <meta name="description">
    canonical = scrapy.Field()  # <link rel="canonical">
    headings = scrapy.Field()  # h1-h3 texts, in page order
    text_length = scrapy.Field()  # characters of visible text
    out_links = scrapy.Field()  # links found on the page
    content_hash = scrapy.Field()  # SHA-1 of the body
    depth = scrapy.Field()
    referer = scrapy.Field()
    fetched_at = scrapy.Field()  # unix time, seconds
    download_latency = scrapy.Field()  # seconds
    node = scrapy.Field()  # the worker that fetched it
