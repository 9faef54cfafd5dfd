"""Scrapy project settings: wires the distscraper parts into Scrapy.

Every distscraper setting and its default is in :mod:`distscraper.defaults`;
override any of them per worker with ``scrapy crawl site -s NAME=VALUE``.
"""

from distscraper import defaults

BOT_NAME = "distscraper"
SPIDER_MODULES = ["distscraper.spiders"]
NEWSPIDER_MODULE = "distscraper.spiders"
COMMANDS_MODULE = "distscraper.commands"

# The shared frontier (scrapy-redis scheduler and dupefilter, subclassed).
SCHEDULER = "distscraper.frontier.scheduler.DistributedScheduler"
DUPEFILTER_CLASS = "distscraper.frontier.dupefilter.RedisDupeFilter"
REDIS_URL = defaults.default("REDIS_URL")
MONGO_URI = defaults.default("MONGO_URI")

SPIDER_MIDDLEWARES = {
    "distscraper.frontier.tracker.LeaseTrackerMiddleware": 10,
}
DOWNLOADER_MIDDLEWARES = {
    "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
    "distscraper.frontier.robots.FrontierRobotsTxtMiddleware": 100,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "distscraper.frontier.retry.FrontierRetryMiddleware": 550,
}
ITEM_PIPELINES = {
    "distscraper.pipelines.mongo.MongoPipeline": 300,
}
EXTENSIONS = {
    "distscraper.monitor.heartbeat.Heartbeat": 500,
    "distscraper.monitor.metrics.Metrics": 510,
}

ROBOTSTXT_OBEY = True
DOWNLOAD_TIMEOUT = 30
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 8
TELNETCONSOLE_ENABLED = False
LOG_LEVEL = "INFO"
