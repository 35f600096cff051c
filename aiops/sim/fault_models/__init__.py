"""The twin's fault models, one per scenario fault kind (a root-cause label whose spec has `twin_fault`,
aiops/labels.py): the sim layer's registry of labels. A family's module holds its models and their `MODELS`
table; this table joins them. tests/test_label_units.py checks it against the labels' specs.
"""

from __future__ import annotations

from aiops.sim.fault_models import devices, fabric, thermal
from aiops.sim.fault_models.base import FaultModel

FAULT_MODELS: dict[str, FaultModel] = {**thermal.MODELS, **devices.MODELS, **fabric.MODELS}

__all__ = ["FAULT_MODELS", "FaultModel"]
