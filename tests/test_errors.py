"""Every exception class lives in the one tree of aiops/errors.py, derives from AiopsError (so the CLI prints
one line and exits with its code) and is drawn in that module's docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import aiops
import aiops.errors
import collectors
import guardrails
from aiops.errors import AiopsError


def _modules() -> list[str]:
    names = []
    for package in (aiops, collectors, guardrails):
        names.append(package.__name__)
        names.extend(m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."))
    return names


def test_every_exception_is_in_the_one_tree() -> None:
    outside, loose = [], []
    for name in _modules():
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if not issubclass(cls, BaseException) or cls.__module__ != name or name == "aiops.errors":
                continue
            outside.append(f"{name}.{cls_name}")
    for cls_name, cls in inspect.getmembers(aiops.errors, inspect.isclass):
        if issubclass(cls, BaseException) and cls.__module__ == "aiops.errors":
            if not issubclass(cls, AiopsError):
                loose.append(cls_name)
            assert cls_name in (aiops.errors.__doc__ or ""), f"{cls_name} is not drawn in the tree"
    assert outside == [] and loose == []
