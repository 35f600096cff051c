"""Run `aiops` command lines one after the other in this process (tests/clirun.py) and print, as one JSON list on
stdout, each one's exit code and stderr. tests/bad_input/test_unwritable_paths.py runs it inside a private mount namespace
(`unshare -m`) where a folder is mounted read-only, so every command meets the mount a person would.

Usage: python -m tests.unwritable_cli COMMANDS.json  (a list of {"args": [...], "env": {...}})."""

from __future__ import annotations

import json
import os
import sys
import traceback

from tests.clirun import run_cli


def main(path: str) -> int:
    with open(path, encoding="utf-8") as handle:
        commands = json.load(handle)
    results = []
    for command in commands:
        env = {**os.environ, **command.get("env", {})}
        try:
            done = run_cli(*command["args"], env=env)
        except Exception:  # what a person would see: a traceback (this command's, the next ones still run)
            results.append({"args": command["args"], "rc": 1, "stderr": traceback.format_exc()})
            continue
        results.append({"args": command["args"], "rc": done.returncode, "stderr": done.stderr})
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
