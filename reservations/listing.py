"""Our reservations as Slurm and the database know them (``arnold reserve list``, the admins'
page): LPJ and its state, nodes, expected start, admitted jobs, idle cost, repairs."""

from __future__ import annotations

import json
from typing import Any

from reservations.context import Loop
from slurm_arnold.snapshot.queue import lpj_of
from slurm_arnold.snapshot.snapshot import Snapshot


def listing(loop: Loop) -> list[dict[str, Any]]:
    """One object per reservation of ours open in the database or present in Slurm (the
    ``arnold reserve list --json`` objects)."""
    # Finished jobs too: the jobs admitted into a reservation that ran and ended are listed.
    snap = Snapshot.read(loop.slurm, loop.config, finished=True)
    rows = loop.records.open_reservations()
    moves = loop.records.bindings_of([lpj_of(n) or 0 for n in
                                      set(rows) | set(snap.reservations)])
    out = []
    for name in sorted(set(rows) | {n for n in snap.reservations if lpj_of(n)}):
        res = snap.reservations.get(name)
        row = rows.get(name, {})
        lpj = snap.jobs.get(lpj_of(name) or -1)
        out.append({
            "name": name, "lpj_job_id": lpj_of(name),
            "lpj_state": lpj.state if lpj else "gone",
            "user": row.get("user") or (lpj.user if lpj else None),
            "nodes": list(res.nodes) if res else json_list(row.get("nodes")),
            "expected_start": row.get("expected_start"),
            "weighted_spread": row.get("weighted_spread"),
            "state": row.get("state", "not recorded"),
            "reserved_idle_node_h": round(float(row.get("idle_node_s") or 0.0) / 3600, 4),
            "in_slurm": res is not None,
            "admitted": sorted(j.job_id for j in snap.jobs.values()
                               if j.reservation == name and j.job_id != lpj_of(name)),
            "repairs": [{"kind": m["kind"], "reason": m["reason"],
                         "decided_at": m["decided_at"],
                         "previous": json_list(m["previous"]),
                         "nodes": json_list(m["nodes"])}
                        for m in moves.get(lpj_of(name) or 0, [])],
        })
    return out


def json_list(value: Any) -> list[str]:
    """A list column as sqlite-utils stores it (JSON text) or as given."""
    if isinstance(value, str):
        return list(json.loads(value))
    return list(value or [])
