"""Which links the `site` spider follows: the seeds' domains, allow and deny patterns."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urldefrag, urlsplit

from distscraper.frontier.seeds import ALLOWED_SCHEMES


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def in_domain(host: str, domain: str) -> bool:
    """True if *host* is *domain* or one of its subdomains."""
    return host == domain or host.endswith("." + domain)


@dataclass(frozen=True)
class LinkPolicy:
    """Decides whether a link found under a seed's domain is followed.

    A link is followed when its scheme is http(s), its host is the seed's
    domain (or a subdomain) or one of ``SITE_ALLOWED_DOMAINS``, it matches one
    of ``SITE_ALLOW`` (when given) and none of ``SITE_DENY``. ``DEPTH_LIMIT``
    is Scrapy's own and applies on top.
    """

    allow: tuple[re.Pattern[str], ...] = ()
    deny: tuple[re.Pattern[str], ...] = ()
    extra_domains: tuple[str, ...] = ()

    @classmethod
    def from_lists(cls, allow: list[str], deny: list[str], domains: list[str]) -> "LinkPolicy":
        def compile_all(name: str, patterns: list[str]) -> tuple[re.Pattern[str], ...]:
            try:
                return tuple(re.compile(p) for p in patterns)
            except re.error as exc:
                raise ValueError(f"setting {name} has a bad regex: {exc}") from None

        return cls(compile_all("SITE_ALLOW", allow), compile_all("SITE_DENY", deny),
                   tuple(d.lower().lstrip(".") for d in domains))

    def normalize(self, url: str) -> str | None:
        """The URL without its fragment, or None if it is not http(s)."""
        url = urldefrag(url)[0]
        return url if urlsplit(url).scheme in ALLOWED_SCHEMES else None

    def follows(self, url: str, root_domain: str) -> bool:
        host = host_of(url)
        if not (in_domain(host, root_domain) or any(in_domain(host, d) for d in self.extra_domains)):
            return False
        if self.allow and not any(p.search(url) for p in self.allow):
            return False
        return not any(p.search(url) for p in self.deny)
