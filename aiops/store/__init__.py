"""DuckDB telemetry store: schema migrations, batched ingest, queries, retention."""

from aiops.store.migrations import MIGRATIONS, TIME_SERIES_TABLES
from aiops.store.store import Batch, Store, latest_version
from aiops.store.workspace import Workspace

__all__ = ["MIGRATIONS", "TIME_SERIES_TABLES", "Batch", "Store", "Workspace", "latest_version"]
