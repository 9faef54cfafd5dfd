"""Writes benchmarks/RESULTS.md and benchmarks/results.json from the figure dicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]]) -> list[str]:
    """A Markdown table; columns are the union of the rows' keys, in first-seen order."""
    if not rows:
        return []
    cols: list[str] = []
    for row in rows:
        cols += [k for k in row if k not in cols]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_cell(row.get(c)) for c in cols) + " |" for row in rows]
    return out


def nested(result: dict[str, Any]) -> list[str]:
    """A benchmark's own result dict: scalars as a list, sub-dicts as a table."""
    scalars = {k: v for k, v in result.items() if not isinstance(v, dict)}
    subs = [{"": k, **{kk: vv for kk, vv in v.items() if not isinstance(vv, dict)}}
            for k, v in result.items() if isinstance(v, dict)]
    lines = [f"- {k}: {_cell(v)}" for k, v in scalars.items()]
    return lines + ([""] if lines else []) + table(subs)


def markdown(meta: dict[str, Any], figures: list[dict[str, Any]]) -> str:
    lines = ["# Benchmark results", "",
             f"Written by `{meta['command']}` on {meta['date']} ({meta['mode']} mode). "
             f"The whole run took **{meta['minutes']} minutes**. What each figure means, and how "
             "to run the benchmarks: [README.md](README.md). Raw numbers: [results.json](results.json).", "",
             "## Machine", "",
             f"- CPU: {meta['cpu']}, {meta['cores']} cores; RAM {meta['ram_gib']} GiB; OS {meta['os']}",
             f"- load average (1, 5, 15 min) at start {meta['load_at_start']}, at end {meta['load_at_end']}"
             + (" - the machine was shared with other engineers' test runs, so absolute figures are "
                "lower and noisier than on an idle machine; ratios come from runs interleaved in time"
                if max(meta["load_at_start"][0], meta["load_at_end"][0]) > 1.5 else ""),
             f"- code measured: commit {meta['code']['commit']}"
             + (f", with uncommitted edits to {', '.join(meta['code']['uncommitted'])}"
                if meta["code"]["uncommitted"] else "")
             + (f". **Edited while the benchmarks ran** (figures before and after the edit "
                f"measured different code): {', '.join(meta['code']['changed_during_run'])}"
                if meta["code"].get("changed_during_run") else ""),
             "", "| component | version |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in meta["versions"].items()]
    lines += ["", "## Parameters", ""] + [f"- {k}: {_cell(v)}" for k, v in meta["params"].items()]
    lines += ["", "## Summary", "", "| figure | measured | target | result | note |", "|---|---|---|---|---|"]
    for fig in figures:
        for c in fig.get("checks", []):
            lines.append(f"| {fig['title'].split('.')[0]}. {_cell(c['what'])} | {_cell(c['value'])} | "
                         f"{_cell(c['target'])} | **{c['result']}** | {_cell(c['note'])} |")
    for fig in figures:
        lines += ["", f"## {fig['title']}", ""]
        if fig.get("params"):
            lines += [f"- {k}: {_cell(v)}" for k, v in fig["params"].items()] + [""]
        if fig.get("rows"):
            lines += table(fig["rows"])
        if isinstance(fig.get("result"), dict):
            lines += nested(fig["result"])
        if fig.get("explain"):
            lines += [""] + fig["explain"]
    return "\n".join(lines) + "\n"


def write(meta: dict[str, Any], figures: list[dict[str, Any]], md_path: Path | None = None,
          json_path: Path | None = None) -> tuple[Path, Path]:
    md_path = md_path or HERE / "RESULTS.md"
    json_path = json_path or HERE / "results.json"
    md_path.write_text(markdown(meta, figures))
    json_path.write_text(json.dumps({"meta": meta, "figures": figures}, indent=1, default=str) + "\n")
    return md_path, json_path
