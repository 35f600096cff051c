"""A package's submodules without its `__init__`: `bare_package("uvicorn")`, then `from uvicorn.server import
Server` loads the server and what it imports, not what the package's `__init__` adds for its command line
(uvicorn: click, its reloaders and multiprocessing, logging.config; ~1.5 MB of a node agent's resident set that
it never runs, docs/BENCHMARKS.md "Footprint").

`exports` binds the names the package's own submodules import from it (uvicorn's lifespan modules: `from uvicorn
import Config`) to the objects its `__init__` would bind. The package stays whole for everyone else in the
process: the first attribute asked of the package itself that is not bound yet (`uvicorn.run`, `from uvicorn
import main`) runs its `__init__` then (a module `__getattr__`, PEP 562), once."""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

_LOCK = threading.RLock()  # an export's import may ask the package for a name


def bare_package(name: str, exports: Mapping[str, str] | None = None) -> ModuleType:
    """The package `name` in `sys.modules`, its `__init__` not run yet (or the module already there), with
    `exports` (attribute -> the submodule that defines it) bound."""
    with _LOCK:
        present = sys.modules.get(name)
        if present is not None:
            return present
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            raise ImportError(f"{name} is not an importable package", name=name)
        package = importlib.util.module_from_spec(spec)
        loader = spec.loader

        def complete(attribute: str) -> Any:
            with _LOCK:
                if "__getattr__" in package.__dict__:  # the first to ask runs the package's __init__
                    delattr(package, "__getattr__")
                    loader.exec_module(package)
            if attribute in package.__dict__:
                return package.__dict__[attribute]
            raise AttributeError(
                f"module {name!r} has no attribute {attribute!r}", name=attribute, obj=package
            )

        setattr(package, "__getattr__", complete)  # noqa: B010 (a module's PEP 562 hook, not a method)
        sys.modules[name] = package
        for attribute, module in (exports or {}).items():
            setattr(package, attribute, getattr(importlib.import_module(module), attribute))
        return package
