"""One safe loader for the YAML and JSON files people hand us: scenarios, response policies, lanes policies and
DCIM signal files. These are hostile data (a file from a ticket, a DCIM export, a colleague's policy), so:

- only `yaml.SafeLoader` (or a subclass of it) ever builds objects: no tags that run code;
- a file larger than `MAX_FILE_BYTES` is refused before it is parsed;
- nesting deeper than `MAX_DEPTH` is refused from the parser's event stream, before PyYAML's recursive composer
  (or `json.loads`, or a validator that walks the tree) can raise RecursionError;
- more than `MAX_NODES` nodes, counting what every alias expands to, is refused (the "billion laughs" file:
  aliases cost nothing to parse but a validator walks each expansion);
- numbers PyYAML or json cannot build (a 5,000-digit integer: Python's int limit) are a parse error.

Every refusal is the caller's `InputError` subclass naming the file, so the CLI exits 2 with one line.
"""

from __future__ import annotations

import json
import os
import re
import stat
from itertools import accumulate
from pathlib import Path
from typing import Any

import yaml

from aiops.errors import InputError

MAX_FILE_BYTES = 1 << 20  # 1 MiB: the largest shipped file is 1.2 kB
MAX_DEPTH = 32  # levels of lists and mappings; shipped files use 4
MAX_NODES = 100_000  # scalars, lists and mappings, aliases expanded

# libyaml's parser (PyYAML's C extension, where PyYAML was built with it: the wheels on PyPI and Debian's package
# are) under the same SafeConstructor and Resolver: the same events and objects for ~a tenth of the pure-Python
# scanner's CPU (the 18 shipped playbooks: 51 -> 4 ms). It stands in for `yaml.SafeLoader` itself only; a subclass
# (its own resolvers: guardrails/responses.py's YAML 1.2 booleans) keeps the pure-Python parser it names.
_C_SAFE_LOADER: type[Any] | None = getattr(yaml, "CSafeLoader", None)


def _parser_for(loader: type[yaml.SafeLoader]) -> type[Any]:
    return _C_SAFE_LOADER if loader is yaml.SafeLoader and _C_SAFE_LOADER is not None else loader


def safe_load(text: str) -> Any:
    """`yaml.safe_load` through libyaml's parser where there is one: for trusted text (the shipped playbooks, a
    policy this program stored), without the limits of `parse_yaml`."""
    return yaml.load(text, Loader=_parser_for(yaml.SafeLoader))


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


def read_limited(path: str | Path, error: type[InputError]) -> bytes:
    """The file's bytes, or `error` naming it: missing, a directory or another file that is not a regular one,
    unreadable, or over `MAX_FILE_BYTES`."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise error(where, "(file)", "not a regular file (a FIFO, a device or a socket)")
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise error(where, "(file)", "no such file") from None
    except IsADirectoryError:
        raise error(where, "(file)", "is a directory, not a file") from None
    except OSError as exc:
        raise error(where, "(file)", f"cannot read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_FILE_BYTES:
        raise error(where, "(file)", f"larger than the limit of {MAX_FILE_BYTES} bytes")
    return data


def decode_text(data: bytes, source: str, error: type[InputError]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(source, "(file)", "not UTF-8 text") from None


def _too_deep(source: str, error: type[InputError], where: str = "") -> InputError:
    return error(source, "(file)", f"nested deeper than the limit of {MAX_DEPTH} levels{where}")


def _too_many(source: str, error: type[InputError]) -> InputError:
    return error(source, "(file)", f"more than the limit of {MAX_NODES} nodes (aliases expanded)")


def _check_yaml_shape(text: str, source: str, error: type[InputError], loader: type[Any]) -> None:
    """Walk the parser's events (PyYAML's parser is a state machine, not recursive): depth and node count."""
    anchored: dict[str, int] = {}
    open_nodes: list[tuple[str | None, int]] = []  # (anchor, nodes so far) of each open list/mapping
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_nodes) >= MAX_DEPTH:
                mark = event.start_mark
                raise _too_deep(source, error, f" at line {mark.line + 1}" if mark is not None else "")
            open_nodes.append((event.anchor, 1))
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, count = open_nodes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, count = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, count = None, anchored.get(str(event.anchor), 1)
        else:
            continue
        if anchor is not None:
            anchored[anchor] = count
        if count > MAX_NODES:
            raise _too_many(source, error)
        if open_nodes:
            parent_anchor, parent_count = open_nodes[-1]
            open_nodes[-1] = (parent_anchor, parent_count + count)
            if parent_count + count > MAX_NODES:
                raise _too_many(source, error)


def parse_yaml(
    text: str, source: str, error: type[InputError], loader: type[yaml.SafeLoader] = yaml.SafeLoader
) -> Any:
    """YAML text to Python objects with the limits above; `error(source, "(yaml)", ...)` when it is not YAML."""
    if not issubclass(loader, yaml.SafeLoader):  # never a loader that can construct arbitrary objects
        raise TypeError(f"{loader!r} is not a yaml.SafeLoader")
    if len(text) > MAX_FILE_BYTES:
        raise error(source, "(file)", f"larger than the limit of {MAX_FILE_BYTES} bytes")
    parser = _parser_for(loader)  # yaml.SafeLoader's own constructor either way
    try:
        _check_yaml_shape(text, source, error, parser)
        return yaml.load(text, Loader=parser)  # a yaml.SafeLoader subclass (checked above), or its C twin
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(source, "(yaml)", f"not valid YAML{where}: {problem}") from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer past Python's digit limit, a bad date
        raise error(
            source, "(yaml)", f"a value YAML cannot build: {str(exc).splitlines()[0][:120]}"
        ) from None


def parse_json(text: str, source: str, error: type[InputError]) -> Any:
    """JSON text to Python objects with the limits above; `error(source, "(json)", ...)` when it is not JSON."""
    if len(text) > MAX_FILE_BYTES:
        raise error(source, "(file)", f"larger than the limit of {MAX_FILE_BYTES} bytes")
    steps = [_NESTING[c] for c in _JSON_STRING.sub("", text) if c in _NESTING]
    if steps and max(accumulate(steps)) > MAX_DEPTH:
        raise _too_deep(source, error)
    if len(steps) > MAX_NODES:
        raise _too_many(source, error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            source, "(json)", f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise error(
            source, "(json)", f"a value JSON cannot build: {str(exc).splitlines()[0][:120]}"
        ) from None


def load_file(
    path: str | Path,
    error: type[InputError],
    *,
    loader: type[yaml.SafeLoader] = yaml.SafeLoader,
) -> Any:
    """Read and parse a YAML file (JSON when its name ends in .json), within the limits; errors name `path`."""
    where = str(path)
    text = decode_text(read_limited(path, error), where, error)
    if where.endswith(".json"):
        return parse_json(text, where, error)
    return parse_yaml(text, where, error, loader)


def permission_problem(path: str | Path) -> str | None:
    """Why a file that decides who may do what (the config, the allowed-signers file) cannot be trusted, as
    sshd's StrictModes refuses an authorized_keys file: the file, or a folder above it, writable by another
    user (owned by someone other than root or this user, or group- or world-writable; a sticky folder such
    as /tmp is fine: others cannot replace what is in it). None when it is fine or cannot be checked (a
    missing file is the reader's to report)."""
    me = os.geteuid()
    try:
        current = Path(os.path.abspath(path))
        info = current.stat()
    except OSError:
        return None
    if info.st_uid not in (0, me):
        return f"{current} belongs to uid {info.st_uid}, not root or this user: anyone who owns it decides"
    if info.st_mode & 0o022:
        return f"{current} is writable by its group or everyone (mode {stat.S_IMODE(info.st_mode):o}): chmod go-w"
    for folder in current.parents:
        try:
            found = folder.stat()
        except OSError:
            return None
        if found.st_uid not in (0, me):
            return f"the folder {folder} belongs to uid {found.st_uid}: its owner can replace {current.name}"
        if found.st_mode & 0o022 and not found.st_mode & stat.S_ISVTX:
            return (
                f"the folder {folder} is writable by its group or everyone (mode {stat.S_IMODE(found.st_mode):o}): "
                f"anyone can replace {current.name}; chmod go-w {folder}"
            )
    return None
