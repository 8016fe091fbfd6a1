#!/usr/bin/env python3
"""Parses a Prometheus text exposition on stdin with the reference parser
(prometheus_client.parser) and prints what it read as JSON: one object per family,
with its type, help and samples. Exit status 3 when prometheus_client is not installed
(the caller skips), 1 when the text does not parse."""
import json
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("prometheus_client is not installed (pip install prometheus-client, or "
          "apt-get install python3-prometheus-client)", file=sys.stderr)
    sys.exit(3)

try:
    families = [
        {
            "name": family.name,
            "type": family.type,
            "help": family.documentation,
            "samples": [[s.name, s.labels, s.value] for s in family.samples],
        }
        for family in text_string_to_metric_families(sys.stdin.read())
    ]
except Exception as error:  # the parser raises ValueError and others on bad input
    print(f"not a valid exposition: {error!r}", file=sys.stderr)
    sys.exit(1)
json.dump(families, sys.stdout)
