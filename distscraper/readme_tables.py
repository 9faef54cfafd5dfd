"""Keep README.md's settings and Redis-key tables equal to the code.

``python -m distscraper.readme_tables`` rewrites the tables between the
``<!-- settings:... -->`` and ``<!-- keys:... -->`` markers; a test checks they match.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from distscraper.defaults import markdown_table
from distscraper.frontier.keys import KEY_DOCS

README = Path(__file__).resolve().parents[1] / "README.md"


def keys_table() -> str:
    rows = ["| key | type | meaning |", "| --- | --- | --- |"]
    rows += [f"| `site:{suffix}` | {kind} | {doc} |" for suffix, (kind, doc) in KEY_DOCS.items()]
    return "\n".join(rows)


def render(text: str) -> str:
    for name, table in (("settings", markdown_table()), ("keys", keys_table())):
        text = re.sub(rf"<!-- {name}:start -->.*?<!-- {name}:end -->",
                      lambda _m, n=name, t=table: f"<!-- {n}:start -->\n{t}\n<!-- {n}:end -->",
                      text, flags=re.S)
    return text


if __name__ == "__main__":
    README.write_text(render(README.read_text()))
    sys.exit(0)
