"""What the admin loop records in the site database, and the only SQL of ``reservations/``:
our reservations (one row each, by name), each admission decision with the prediction behind
it, and each binding decision (a waiting job moved, repaired or replanned; a job's ranks at
start). Slurm stays the truth; these rows say what we did and why."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import Any

from slurm_arnold.state import StateDB


class Records:
    """The admin loop's tables of one site database (``reservations``, ``admissions``,
    ``bindings``)."""

    def __init__(self, state: StateDB) -> None:
        self.state = state

    # -- reservations -----------------------------------------------------------------
    def reservation(self, name: str) -> dict[str, Any] | None:
        """Our row for reservation ``name``, or ``None``."""
        rows = list(self.state.db.table("reservations").rows_where("name = ?", [name]))
        return rows[0] if rows else None

    def open_reservations(self) -> dict[str, dict[str, Any]]:
        """Every reservation not yet released, by name."""
        return {r["name"]: r for r in self.state.db.table("reservations").rows_where(
            "state != 'released'")}

    def save_reservation(self, name: str, lpj_job_id: int, user: str, nodes: Iterable[str],
                         *, expected_start: float, weighted_spread: float | None, source: str,
                         now: float) -> None:
        """Record a reservation made (or adopted) now as active, replacing an older row."""
        with self.state.transaction() as db:
            db["reservations"].upsert({  # type: ignore[union-attr]
                "name": name, "lpj_job_id": lpj_job_id, "user": user, "nodes": list(nodes),
                "expected_start": expected_start, "weighted_spread": weighted_spread,
                "source": source, "created_at": now, "state": "active", "lpj_held": 0,
                "released_at": None, "release_reason": None}, pk="name")

    def update_reservation(self, name: str, **fields: Any) -> None:
        """Change some fields of reservation ``name``'s row."""
        with self.state.transaction() as db:
            db["reservations"].update(name, fields)  # type: ignore[union-attr]

    def released(self, name: str, reason: str, now: float, *, done: bool = True) -> None:
        """Reservation ``name`` released (or, ``done=False``, being released: jobs still run
        in it)."""
        self.update_reservation(name, state="released" if done else "releasing",
                                released_at=now, release_reason=reason)

    def gone_from_slurm(self, in_slurm: Collection[str], now: float) -> None:
        """Mark released every open row whose reservation Slurm no longer has."""
        with self.state.transaction() as db:
            for row in db["reservations"].rows_where("state != 'released'"):
                if row["name"] not in in_slurm:
                    db["reservations"].update(row["name"], {  # type: ignore[union-attr]
                        "state": "released", "released_at": now,
                        "release_reason": row["release_reason"] or "gone from Slurm"})

    # -- admissions -------------------------------------------------------------------
    def admission(self, job_id: int, user: str, reservation: str, decision: str, *,
                  source: str, predictor: str, point: float, upper: float,
                  expected_start: float, mode: str, limit_min: int | None,
                  now: float) -> None:
        """One admission decision; the same answer again for the same job and reservation
        keeps one row and counts it (``times``, ``last_decided_at``)."""
        table = self.state.db.table("admissions")
        with self.state.transaction():
            same = list(table.rows_where("job_id = ? and reservation = ? and decision = ?",
                                         [job_id, reservation, decision], limit=1))
            if same:
                table.update(same[0]["id"], {"last_decided_at": now,
                                             "expected_start": expected_start,
                                             "times": same[0]["times"] + 1})
                return
            table.insert({
                "job_id": job_id, "user": user, "reservation": reservation,
                "decision": decision, "source": source, "predictor": predictor,
                "predicted_s": _finite(point), "upper_s": _finite(upper),
                "expected_start": expected_start, "mode": mode, "time_limit_min": limit_min,
                "decided_at": now, "last_decided_at": now, "times": 1})

    def admitted_at(self, job_id: int, reservation: str) -> float | None:
        """When job ``job_id`` was first admitted into ``reservation``, or ``None``."""
        rows = list(self.state.db.table("admissions").rows_where(
            "job_id = ? and reservation = ? and decision = 'admit'", [job_id, reservation],
            limit=1))
        return float(rows[0]["decided_at"]) if rows else None

    # -- bindings ---------------------------------------------------------------------
    def binding(self, job_id: int, user: str, kind: str, reason: str, nodes: list[str],
                previous: list[str], *, weighted_spread: float,
                previous_spread: float | None, expected_start: float, now: float,
                rankfile: str, reservation: str | None = None) -> None:
        """One binding decision (``bind``, ``repair``, ``replan`` or ``start``); with
        ``reservation``, that reservation's row moves to ``nodes`` in the same transaction."""
        with self.state.transaction() as db:
            db["bindings"].insert({  # type: ignore[union-attr]
                "job_id": job_id, "user": user, "kind": kind, "reason": reason,
                "nodes": nodes, "previous": previous, "weighted_spread": weighted_spread,
                "previous_spread": previous_spread, "expected_start": expected_start,
                "decided_at": now, "rankfile": rankfile})
            if reservation is not None:
                db["reservations"].update(reservation,  # type: ignore[union-attr]
                                          {"nodes": nodes})

    def prolog_run(self, job_id: int, user: str, outcome: str, seconds: float,
                   now: float) -> None:
        """One run of arnold-prolog: its outcome (``none``, ``kept``, ``mapped``) and how long
        it took from its process's start."""
        with self.state.transaction() as db:
            db["prolog_runs"].insert({  # type: ignore[union-attr]
                "job_id": job_id, "user": user, "outcome": outcome, "seconds": seconds,
                "at": now})

    def bindings_of(self, job_ids: Iterable[int]) -> dict[int, list[dict[str, object]]]:
        """Every binding decision of these jobs, oldest first."""
        wanted = list(dict.fromkeys(job_ids))
        out: dict[int, list[dict[str, object]]] = {}
        if not wanted or "bindings" not in self.state.db.table_names():
            return out
        marks = ",".join("?" * len(wanted))
        for row in self.state.db.table("bindings").rows_where(f"job_id in ({marks})", wanted,
                                                              order_by="id"):
            out.setdefault(int(row["job_id"]), []).append(row)
        return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
