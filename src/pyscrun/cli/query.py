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
        print("\n".join(s["id"] for s in states))
    elif output_format == "json":
        print(jsonc.dumps(states))
    elif output_format == "table":
        print(f"{'ID':<20}{'PID':<10}{'STATUS':<10}{'BUNDLE':<40}{'CREATED':<22}OWNER")
        for s in states:
            print(f"{s['id']:<20}{s['pid']:<10}{s['status']:<10}{s['bundle']:<40}"
                  f"{s['created']:<22}{s['owner']}")
    else:
        raise UsageError(f"invalid format {output_format!r}: use table or json")
    return 0


def features(ctx: Context) -> int:
    from pyscrun.oci.features import document

    print(jsonc.dumps(document()))
    return 0
