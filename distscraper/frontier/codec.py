"""JSON encoding of Scrapy requests for the shared queue. No pickle, ever.

A payload is a compact JSON object. Only fields that differ from a plain GET
are written. The frontier's own fields are:

``u`` URL, ``d`` politeness domain, ``f`` fingerprint (hex), ``p`` priority,
``n`` attempts so far, ``t0`` first attempt (unix s).

Decoding never executes anything: callbacks are looked up by name on the
spider, and a custom request class must be a subclass of ``scrapy.Request``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from scrapy import Request, Spider
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object

#: meta keys that belong to one process and never travel through Redis. The
#: ``redirect_*`` keys do travel: a redirect is queued as a new request, and
#: REDIRECT_MAX_TIMES must still end a redirect loop the dupefilter lets through (forced).
LOCAL_META_KEYS = ("_ds_lease", "download_slot", "download_latency", "download_timeout",
                   "retry_times", "_dont_retry_flag")


class PayloadError(ValueError):
    """A queue entry that cannot be turned back into a request."""


def domain_of(request: Request) -> str:
    """The politeness slot of a request: its host name, lower-case."""
    return (urlparse_cached(request).hostname or "").lower()


def _json_safe(value: Any, where: str) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{where} is not JSON-serializable: {exc}") from None
    return value


def _method_name(spider: Spider | None, func: Any) -> str | None:
    """The name of the spider method *func* is, or None if it is not one by its own name."""
    name = getattr(func, "__name__", None)
    bound = getattr(spider, name, None) if spider is not None and isinstance(name, str) else None
    if bound is not None and getattr(bound, "__func__", None) is getattr(func, "__func__", None) is not None:
        return name
    return None


def _as_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, without its search through every spider member
    when the callback and errback are spider methods under their own names."""
    names = {}
    for attr in ("callback", "errback"):
        func = getattr(request, attr)
        if callable(func):
            names[attr] = _method_name(spider, func)
            if names[attr] is None:  # Scrapy finds it another way, or raises ValueError
                return request.to_dict(spider=spider)
        else:
            names[attr] = func
    d: dict[str, Any] = {"url": request.url, **names, "headers": dict(request.headers)}
    for attr in request.attributes:
        d.setdefault(attr, getattr(request, attr))
    if type(request) is not Request:
        d["_class"] = type(request).__module__ + "." + type(request).__name__
    return d


def encode(request: Request, spider: Spider | None, fingerprint: bytes, *,
           attempts: int = 0, first_attempt: float | None = None) -> bytes:
    """Serialize *request* to the payload stored in Redis."""
    d = _as_dict(request, spider)
    out: dict[str, Any] = {"u": d["url"], "d": domain_of(request), "f": fingerprint.hex()}
    if d.get("priority"):
        out["p"] = int(d["priority"])
    if attempts:
        out["n"] = attempts
    if first_attempt is not None:
        out["t0"] = round(first_attempt, 3)
    meta = {k: v for k, v in (d.get("meta") or {}).items() if k not in LOCAL_META_KEYS}
    if meta:
        out["m"] = _json_safe(meta, "request.meta")
    if d.get("callback"):
        out["cb"] = d["callback"]
    if d.get("errback"):
        out["eb"] = d["errback"]
    if d.get("method", "GET") != "GET":
        out["me"] = d["method"]
    if d.get("headers"):
        out["h"] = {k.decode("latin-1") if isinstance(k, bytes) else k:
                    [v.decode("latin-1") if isinstance(v, bytes) else v for v in vs]
                    for k, vs in d["headers"].items()}
    if d.get("body"):
        out["b"] = base64.b64encode(d["body"]).decode("ascii")
    for src, dst in (("cookies", "ck"), ("cb_kwargs", "kw"), ("flags", "fl")):
        if d.get(src):
            out[dst] = _json_safe(d[src], f"request.{src}")
    if d.get("dont_filter"):
        out["df"] = True
    if d.get("encoding", "utf-8") != "utf-8":
        out["enc"] = d["encoding"]
    if "_class" in d:
        out["cls"] = d["_class"]
    return json.dumps(out, separators=(",", ":"), sort_keys=True).encode()


def loads(payload: bytes | str) -> dict[str, Any]:
    """Parse a payload's JSON; raise PayloadError if it is not a frontier payload."""
    try:
        obj = json.loads(payload)
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("u"), str) or not isinstance(obj.get("d"), str):
        raise PayloadError("not a request payload (needs string fields 'u' and 'd')")
    return obj


def decode(payload: bytes | str, spider: Spider) -> Request:
    """Rebuild the request a payload describes."""
    obj = loads(payload)
    cls: type[Request] = Request
    if "cls" in obj:
        try:
            cls = load_object(obj["cls"])
        except (ImportError, AttributeError, ValueError, NameError) as exc:
            raise PayloadError(f"unknown request class {obj['cls']!r}: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, Request)):
            raise PayloadError(f"{obj['cls']!r} is not a scrapy.Request subclass")
    try:
        callback = getattr(spider, obj["cb"]) if "cb" in obj else None
        errback = getattr(spider, obj["eb"]) if "eb" in obj else None
    except AttributeError as exc:
        raise PayloadError(f"spider has no such method: {exc}") from None
    try:
        return cls(
            url=obj["u"],
            callback=callback,
            errback=errback,
            method=obj.get("me", "GET"),
            headers=obj.get("h"),
            body=base64.b64decode(obj["b"]) if "b" in obj else None,
            cookies=obj.get("ck"),
            meta=obj.get("m"),
            encoding=obj.get("enc", "utf-8"),
            priority=int(obj.get("p", 0)),
            dont_filter=bool(obj.get("df", False)),
            cb_kwargs=obj.get("kw"),
            flags=obj.get("fl"),
        )
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"invalid request fields: {exc}") from None


def with_attempt(payload: bytes, attempts: int, first_attempt: float) -> bytes:
    """A copy of *payload* that records one more attempt (used for retries)."""
    obj = loads(payload)
    obj["n"] = attempts
    obj.setdefault("t0", round(first_attempt, 3))
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
