"""Incident ids of a workspace made before ids were cluster-unique (every agent numbered from `INC-0001`): the
service's first start qualifies them with its tier's prefix (`INC-0007` -> `INC-gpu-a100-017-0007`), in every
table that names an incident (`incident_id`, and `recurrence_of` of the incident links), in one transaction,
so the proposals, hypotheses, notifications, outcomes and alert links of an incident stay with it and the
numbering carries on where it was.

Left as they were: `node_incidents` (the fleet's copy of the node agents' own ids: theirs to rename, and read
again from their exports) and the audit log (a hash chain: history is never rewritten; the service appends one
record of the renaming instead). A notification body already sent keeps the id it carried; the sinks that
follow an alert across events read the earlier bodies (PagerDuty's `dedup_key`, Alertmanager's label sets), so
an incident open across the upgrade is still updated and resolved under the key it was opened with.
"""

from __future__ import annotations

from aiops.store.store import Store

LEGACY_ID = "^INC-[0-9]+$"  # what every agent wrote before: INC- and a number, nothing naming the tier
NOT_RENAMED = ("node_incidents", "audit_log")


ID_COLUMNS = ("incident_id", "recurrence_of")  # columns holding one of this workspace's incident ids


def tables_naming_incidents(store: Store) -> list[tuple[str, str]]:
    """Every (table, column) of the workspace holding an incident id, but the tables in `NOT_RENAMED`."""
    rows = store.query(
        "SELECT DISTINCT table_name, column_name FROM information_schema.columns "
        "WHERE column_name IN (SELECT unnest(?)) AND table_schema = 'main' "
        "AND table_catalog = current_database() ORDER BY table_name, column_name",
        [list(ID_COLUMNS)],
    )
    return [
        (str(r["table_name"]), str(r["column_name"])) for r in rows if str(r["table_name"]) not in NOT_RENAMED
    ]


def qualify_legacy_ids(store: Store, prefix: str) -> dict[str, str]:
    """Rename every legacy id (`INC-<number>`) to `<prefix><number>` in every table naming incidents; returns
    old -> new (empty when there was nothing to rename: the step is idempotent)."""
    columns = tables_naming_incidents(store)
    legacy: set[str] = set()
    for table, column in columns:
        rows = store.query(
            f'SELECT DISTINCT "{column}" AS id FROM {table} WHERE regexp_matches("{column}", ?)', [LEGACY_ID]
        )
        legacy.update(str(r["id"]) for r in rows)
    if not legacy:
        return {}
    mapping = {old: prefix + old.removeprefix("INC-") for old in sorted(legacy)}
    clash = store.query(
        "SELECT incident_id FROM incidents WHERE incident_id IN (SELECT unnest(?))", [list(mapping.values())]
    )
    if clash:  # never two incidents under one id: the workspace was renamed by hand half-way
        raise ValueError(
            f"cannot qualify legacy incident ids with {prefix!r}: {clash[0]['incident_id']} exists already"
        )
    conn = store.conn
    conn.execute("BEGIN TRANSACTION")
    try:
        for table, column in columns:
            conn.execute(
                f'UPDATE {table} SET "{column}" = ? || substr("{column}", 5) WHERE regexp_matches("{column}", ?)',
                [prefix, LEGACY_ID],
            )
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise
    return mapping
