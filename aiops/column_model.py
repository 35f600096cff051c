"""The shape of a telemetry column's declaration (aiops/columns.py declares the columns): a `Column` of a `Table`,
the Prometheus `Family` and the dcgm-exporter name it is served as, the fault-kind sets its `reacts_to` names, and
what derives from a table's declarations (Arrow columns, exported families, the fleet's reads, docs rows, the
leak test's allowances)."""

from __future__ import annotations

from dataclasses import dataclass

from aiops.labels import FAULT_KINDS

ANY = frozenset(FAULT_KINDS)  # a measurement that follows the work, heat and traffic of the cluster
CAPS = frozenset({"power_cap_misconfig", "facility_power_cap", "power_brake", "thermal_throttle"})
HEAT = frozenset({"thermal_throttle", "rack_cooling_failure", "ambient_drift"})
IDLE = frozenset(
    {"gpu_ecc_error", "application_error", "input_pipeline_bottleneck"}
)  # the job stops: GPUs idle
PCIE = frozenset({"pcie_degraded"})
NVLINK = frozenset({"nvlink_degraded"})

# Arrow's factory name -> the store's SQL type
SQL_TYPES = {
    "float64": "DOUBLE",
    "string": "VARCHAR",
    "int64": "BIGINT",
    "int32": "INTEGER",
    "uint64": "UBIGINT",
    "bool_": "BOOLEAN",
}
GPU_LABELS = ("gpu", "node")
TWIN_GPUS_PER_NODE = 8  # the default twin node docs/METRICS.md counts series on


@dataclass(frozen=True)
class Family:
    """A Prometheus family the node agent serves. `name` as Prometheus stores it (a counter's with `_total`)."""

    name: str
    help: str
    unit: str  # docs/METRICS.md's unit column (Prometheus base units)
    feeds: str  # docs/METRICS.md's "feeds (analyst input)" column: what reads it
    labels: tuple[str, ...] = GPU_LABELS
    per_gpu: str = "1"  # series per GPU ("—" with per_node "events" for one per event)
    per_node: str = ""  # default: per_gpu times the twin node's 8 GPUs
    histogram: bool = False  # a histogram (`name` its base: Prometheus stores `_bucket`, `_sum`, `_count`)

    @property
    def kind(self) -> str:
        if self.histogram:
            return "histogram"
        return "counter" if self.name.endswith("_total") else "gauge"


@dataclass(frozen=True)
class DcgmName:
    """The column as dcgm-exporter serves it: the DCGM field (`etc/default-counters.csv`: name, type, help)."""

    name: str
    kind: str  # gauge | counter, as dcgm-exporter declares it
    help_text: str
    default: bool = False  # in dcgm-exporter's default counters (else an operator enables it)


@dataclass(frozen=True)
class FacilityName:
    """The column as the facility's exporters serve it by default (`[facility]`, aiops/sources/facility.py): the
    series, how a rack's series combine, the scale to the column's unit, and the exporter's HELP."""

    metric: str
    aggregate: str  # avg | sum | max | min
    help_text: str
    scale: float = 1.0
    match: tuple[tuple[str, str], ...] = ()  # label = exact value the series must have


@dataclass(frozen=True)
class Column:
    name: str
    arrow: str  # pyarrow factory name: float64, int64, int32, uint64, string
    family: Family | None = None  # exported as `stored * scale` (None: not exported, or by hand)
    scale: float = 1.0
    fixed: tuple[tuple[str, str], ...] = ()  # labels beside GPU_LABELS that tell columns of one family apart
    fleet: bool = True  # the fleet reads it back from the family (aiops/fleet/pivot.py)
    reacts_to: frozenset[str] = frozenset()  # fault kinds a real reading of it may change with
    observed_by: str = ""  # the real source that reports that change
    collected: bool = True  # False: no collector writes it (the fleet's sample weights)
    # the stored value is what its interval added (a NIC's bytes in the interval): the node exports the running
    # total (its family a counter) and the fleet reads back the increase between scrapes
    counted: bool = False
    key: bool = False  # an entity key (ts_s, gpu, node, uuid): never a family of its own
    migration: int = 1  # the migration that added it (schema_additions)
    # dcgm-exporter's name for it (aiops/sources/names.py): read by `aiops analyze --prometheus`, served at
    # /metrics/dcgm.
    dcgm: tuple[DcgmName, ...] = ()  # several: a field DCGM renamed (the newer name first)
    # a rack sensor no node agent has: read from the facility's exporters (`[facility]`'s default series)
    facility: FacilityName | None = None


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    hand_written: tuple[Family, ...] = ()  # families rendered by hand from the table's columns
    # what a fault may change besides a column's values, for the twin-leak test: the table's row rate
    # (`<rows>`) and the entities (keys) it has only while the fault lasts (`<entities>`): (fault kinds, source)
    rows_react_to: tuple[frozenset[str], str] | None = None
    entities_react_to: tuple[frozenset[str], str] | None = None

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


# -- what derives from a table's declarations ------------------------------------------------------------
def dcgm_columns(table: Table) -> tuple[Column, ...]:
    """Columns declared with their dcgm-exporter name."""
    return tuple(c for c in table.columns if c.dcgm)


def facility_columns(table: Table) -> tuple[Column, ...]:
    """Columns read from the facility's exporters (their default series declared with them)."""
    return tuple(c for c in table.columns if c.facility)


def arrow_columns(table: Table) -> tuple[tuple[str, str], ...]:
    """(column, Arrow factory name) of what collectors write, in the order their rows hold them."""
    return tuple((c.name, c.arrow) for c in table.columns if c.collected)


def exported(table: Table) -> tuple[Column, ...]:
    """Columns the node exports as `stored * scale`, each under its family with its fixed labels."""
    return tuple(c for c in table.columns if c.family is not None)


def families(table: Table) -> tuple[Family, ...]:
    """Every family the table's columns are served as, declared ones first, each once, in declaration order."""
    out: dict[str, Family] = {}
    for c in exported(table):
        assert c.family is not None
        out.setdefault(c.family.name, c.family)
    for f in table.hand_written:
        out.setdefault(f.name, f)
    return tuple(out.values())


def fleet_read(table: Table) -> tuple[Column, ...]:
    """Columns the fleet reads back from their family (the pivot's derived part)."""
    return tuple(c for c in exported(table) if c.fleet)


def integer_families(table: Table) -> tuple[str, ...]:
    """Families whose columns are 32-bit integers (the fleet bounds their samples to fit)."""
    return tuple(dict.fromkeys(c.family.name for c in exported(table) if c.family and c.arrow == "int32"))


def leak_allowances(table: Table) -> dict[tuple[str, str], tuple[frozenset[str], str]]:
    """(table, column) -> (fault kinds, real source): what the twin-leak test lets carry fault information; the
    table's row rate as column `<rows>`, its entities as `<entities>`."""
    out = {(table.name, c.name): (c.reacts_to, c.observed_by) for c in table.columns if c.reacts_to}
    if table.rows_react_to:
        out[(table.name, "<rows>")] = table.rows_react_to
    if table.entities_react_to:
        out[(table.name, "<entities>")] = table.entities_react_to
    return out


def markdown_rows(table: Table) -> list[str]:
    """docs/METRICS.md's rows for the table's families."""
    rows = []
    for f in families(table):
        per_node = f.per_node or str(int(f.per_gpu) * TWIN_GPUS_PER_NODE)
        cells = (f"`{f.name}`", f.kind, ", ".join(f.labels), f.unit, f.feeds, f.per_gpu, per_node)
        rows.append("| " + " | ".join(cells) + " |")
    return rows
