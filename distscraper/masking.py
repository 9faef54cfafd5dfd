"""Hide secrets in connection URLs before they reach a log line."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:@/]*)(?::(?P<pw>[^@/]*))?@")


def mask_url(url: str) -> str:
    """Replace the password of every ``scheme://user:password@host`` in *url* with ``***``.

    >>> mask_url("redis://:s3cret@10.0.0.5:6379/0")
    'redis://:***@10.0.0.5:6379/0'
    >>> mask_url("mongodb://app:pw@db1,db2/?replicaSet=rs")
    'mongodb://app:***@db1,db2/?replicaSet=rs'
    """

    def repl(m: re.Match[str]) -> str:
        if m.group("pw") is None:
            return m.group(0)
        return f"{m.group('scheme')}{m.group('user')}:***@"

    return _USERINFO.sub(repl, str(url))
