"""Developer aid: run the suite and print misses with their top hypotheses and the incident's symptoms."""

from __future__ import annotations

import json
import sys

from evals.harness import run_suite


def main() -> None:
    suite = sys.argv[1] if len(sys.argv) > 1 else "evals/scenarios"
    result = run_suite(suite)
    for case in result["cases"]:
        if case["top1"] and not case["false_positives"]:
            continue
        print(f"MISS {case['name']}: expected {case['expected']} FP={case['false_positives']}")
        for p in case["predicted"][:3]:
            print(f"      {p}")
    print(json.dumps(result["summary"]))


if __name__ == "__main__":
    main()
