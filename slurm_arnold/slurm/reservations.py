"""Reservations: read from ``scontrol show reservation --oneliner`` (every version; its text
is stable where the JSON is not) and changed with ``scontrol create/update/delete``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import hostlist

from slurm_arnold.slurm.common import parse_oneliner
from slurm_arnold.slurm.runner import Runner


@dataclass(frozen=True)
class Reservation:
    """One Slurm reservation."""

    name: str
    nodes: tuple[str, ...]
    start_time: str
    end_time: str
    users: tuple[str, ...]
    flags: tuple[str, ...]
    state: str


def reservations_from_scontrol(text: str) -> list[Reservation]:
    """Reservations of ``scontrol show reservation --oneliner``."""
    out = []
    for line in text.splitlines():
        if not line.startswith("ReservationName="):
            continue
        f = parse_oneliner(line)
        nodes = f.get("Nodes", "")
        users = f.get("Users", "(null)")
        out.append(Reservation(
            name=f["ReservationName"],
            nodes=tuple(hostlist.expand_hostlist(nodes)) if nodes and nodes != "(null)" else (),
            start_time=f.get("StartTime", ""),
            end_time=f.get("EndTime", ""),
            users=tuple(u for u in users.split(",") if u and users != "(null)"),
            flags=tuple(x for x in f.get("Flags", "").split(",") if x and x != "(null)"),
            state=f.get("State", ""),
        ))
    return out


def read_reservations(runner: Runner) -> list[Reservation]:
    """Every reservation."""
    return reservations_from_scontrol(
        runner.run(["scontrol", "show", "reservation", "--oneliner"]).stdout)


def create_reservation(runner: Runner, name: str, nodes: Sequence[str], *,
                       users: Sequence[str], start: str = "now", duration: str = "UNLIMITED",
                       flags: Sequence[str] = ()) -> None:
    """Create a reservation on exactly ``nodes`` for ``users``."""
    args = ["scontrol", "create", "reservation", f"ReservationName={name}",
            f"Nodes={hostlist.collect_hostlist(list(nodes))}", f"StartTime={start}",
            f"Duration={duration}", f"Users={','.join(users)}"]
    if flags:
        args.append(f"Flags={','.join(flags)}")
    runner.run(args)


def update_reservation(runner: Runner, name: str, **fields: str) -> None:
    """Update fields (``Nodes``, ``StartTime``, ``Users``, ...) of a reservation."""
    runner.run(["scontrol", "update", f"ReservationName={name}",
                *(f"{k}={v}" for k, v in fields.items())])


def delete_reservation(runner: Runner, name: str) -> None:
    """Delete a reservation."""
    runner.run(["scontrol", "delete", f"ReservationName={name}"])
