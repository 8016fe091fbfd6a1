#!/usr/bin/env python3
"""bench/results/latest.json is generated, not committed (git ignores it): a copy of the
newest dated report in the results folder, `<date>-<commit>[-<label>].json` holding a
report (its "date" and "figures"), newest by the report's own "date" since several runs
share a day. report.py writes it after each run, so bench/run.sh copies it to $OUT as
before; in a fresh checkout it is made on demand:

  python3 bench/results_latest.py [RESULTS_DIR]      (default bench/results)

prints the report it copied, or says there is none (exit status 1)."""

import json
import os
import re
import shutil
import sys

DATED = re.compile(r"^\d{4}-\d{2}-\d{2}-.+\.json$")


def newest(results):
    """The path of the newest dated report in `results`, or None."""
    best = None
    for name in sorted(os.listdir(results)):
        if not DATED.match(name):
            continue
        path = os.path.join(results, name)
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict) or "figures" not in report or not isinstance(report.get("date"), str):
            continue  # not a report (a profile dump, say)
        if best is None or report["date"] > best[0]:
            best = (report["date"], path)
    return best[1] if best else None


def write(results):
    """Copies the newest dated report to `results`/latest.json; returns its path, or None
    (and writes nothing) when there is none."""
    source = newest(results)
    if source is not None:
        shutil.copyfile(source, os.path.join(results, "latest.json"))
    return source


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    source = write(results)
    if source is None:
        print(f"results_latest.py: no dated report in {results}", file=sys.stderr)
        return 1
    print(f"{os.path.join(results, 'latest.json')}: {os.path.basename(source)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
