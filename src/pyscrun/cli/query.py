"""The verbs that only read: state, list, features."""

from __future__ import annotations

from pyscrun import jsonc
from pyscrun.cli.main import Context
from pyscrun.errors import UsageError


def state(ctx: Context) -> int:
    document = ctx.store.load(ctx.container_id).oci_document()
    print(jsonc.dumps(document))
    return 0


def list_containers(ctx: Context) -> int:
    store = ctx.store
    states = []
    for container_id in store.ids():
        try:
            states.append(store.load(container_id).oci_document())
        except Exception:
            continue
    output_format = ctx.option("format") or "table"
    if ctx.flag("quiet"):
        for s in states:
            print(s["id"])
    elif output_format == "json":
        print(jsonc.dumps(states) if states else "null")  # runc's, for no container
    elif output_format == "table":
        rows = [["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"]]
        rows += [[str(s[key]) for key in ("id", "pid", "status", "bundle", "created", "owner")]
                 for s in states]
        print(_table(rows))
    else:
        raise UsageError(f"invalid format {output_format!r}: use table or json")
    return 0


def _table(rows: list[list[str]]) -> str:
    """runc's layout (Go's tabwriter, minimum width 12, padding 3): each column but the
    last as wide as its widest cell plus 3, at least 12; the last unpadded."""
    widths = [max(12, max(len(row[i]) for row in rows) + 3) for i in range(len(rows[0]) - 1)]
    return "\n".join("".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
                     + row[-1] for row in rows)


def features(ctx: Context) -> int:
    from pyscrun.oci.features import document

    print(jsonc.dumps(document()))
    return 0
