"""Markdown tables of a run's figures, grouped by benchmark, for docs/benchmarks.md.

    .venv/bin/python -m bench.report bench/results/<run>/results.json [--only render engine ...]

Each row: what was measured, the value and unit, the baseline it is read against (and whether that
baseline was measured in the same run or is a published figure), the ratio value / baseline, and
**worse** where tokenwire is on the worse side of its baseline (slower, or more memory) by more than
3 %, "≈" when within 3 %.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

NOISE = 0.03  # a worse figure within 3 % of its baseline is shown as about equal


def _num(x: float | None) -> str:
    if x is None:
        return ""
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def table(figures: list[dict[str, Any]]) -> str:
    rows = ["| figure | value | baseline | baseline value | ratio | |", "|---|---:|---|---:|---:|---|"]
    for f in figures:
        base = f["baseline"] or ""
        if f["baseline_source"] and f["baseline_source"] != "same run":
            base += " *(published)*"
        ratio = "" if f["ratio"] is None else f"{f['ratio']:.2f}×"
        flag = ""
        if f["worse_than_baseline"]:
            flag = "**worse**" if f["ratio"] is None or abs(f["ratio"] - 1) > NOISE else "≈ (within 3 %)"
        label = f["label"] + (f" ({f['note']})" if f.get("note") else "")
        rows.append(f"| {label} | {_num(f['value'])} {f['unit']} | {base} | {_num(f['baseline_value'])} | "
                    f"{ratio} | {flag} |")
    return "\n".join(rows)


def report(run: dict[str, Any], only: list[str] | None = None) -> str:
    m = run["machine"]
    out = [f"Run `{run['started_at']}` ({run['tokenwire_bench']['mode']}, {run['duration_s']} s), commit "
           f"`{(run['git']['commit'] or '?')[:10]}`{' (dirty tree)' if run['git'].get('dirty') else ''}; "
           f"{m['cpu_model']}, {m['cpus_usable']} CPUs, {m['memory_gib']} GiB; load average "
           f"{m['load_average_before']} before, {m['load_average_after']} after.", ""]
    groups: dict[str, list[dict[str, Any]]] = {}
    for f in run["figures"]:
        groups.setdefault(f["id"].split(".", 1)[0], []).append(f)
    for name, figs in groups.items():
        if only and name not in only:
            continue
        sec = run["sections"].get(name, {})
        out += [f"### {name}", "", f"`{sec.get('command', '')}` — {sec.get('seconds', '?')} s, load average "
                f"{sec.get('load_average_before')} → {sec.get('load_average_after')}", "", table(figs), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="a run's results.json")
    p.add_argument("--only", nargs="+", default=None, help="only these benchmarks")
    a = p.parse_args(argv)
    print(report(json.loads(Path(a.results).read_text()), a.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
