"""What every Slurm document shares, whichever command printed it: ``--oneliner`` key=value
lines, state words and their flags, v0.0.4x's wrapped numbers, times, GRES counts, and which
``--json`` schema a Slurm version prints (OpenAPI v0.0.38 for 22.05, data_parser v0.0.42 to
v0.0.45 for 24.11 to 26.05; 23.02 to 24.05 are read as text)."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any


@functools.lru_cache(maxsize=4096)
def parse_gpu_count(gres: str | None) -> int:
    """GPUs in a GRES string such as ``gpu:8``, ``gpu:a100:4(S:0-1)``, ``gpu:2(IDX:0,2)``."""
    if not gres or gres in ("(null)", "N/A"):
        return 0
    total = 0
    for match in re.finditer(r"(?:^|,)gpu(?::[A-Za-z0-9_.\-]+)?:(\d+)", gres):
        total += int(match.group(1))
    return total


def parse_oneliner(line: str) -> dict[str, str]:
    """Split ``scontrol show ... --oneliner`` output into keys and values.

    Values may contain spaces (``OS=Linux 6.1 #1 SMP``): a token without ``=`` belongs to the
    value before it.
    """
    out: dict[str, str] = {}
    last: str | None = None
    for token in line.split():
        key, eq, value = token.partition("=")
        if eq and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:]*", key):
            out[key] = value
            last = key
        elif last is not None:
            out[last] += " " + token
    return out


def parse_features(text: str | None) -> frozenset[str]:
    """Features as ``scontrol``/``sinfo`` print them (comma-separated, ``(null)`` for none)."""
    if not text or text == "(null)":
        return frozenset()
    return frozenset(f for f in text.split(",") if f)


def split_state(raw: str) -> tuple[str, frozenset[str]]:
    """``IDLE+DRAIN`` or ``idle*`` to a base state and flags."""
    text = raw.strip().upper()
    flags = set()
    # sinfo/scontrol suffixes: * not responding, ~ powered off, # powering up, % powering down.
    suffixes = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                "%": "POWERING_DOWN", "!": "POWER_DOWN", "$": "MAINTENANCE",
                "@": "REBOOT_REQUESTED"}
    while text and text[-1] in suffixes:
        flags.add(suffixes[text[-1]])
        text = text[:-1]
    parts = text.split("+")
    return parts[0], frozenset(flags | set(parts[1:]))


def number(value: Any) -> int | None:
    """An integer of a v0.0.4x document: ``{"set", "infinite", "number"}`` (None when unset
    or infinite), or a plain number."""
    if isinstance(value, Mapping):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    return int(value)


#: Job state flags that Slurm's own text shows instead of the base state, in the order its
#: ``job_state_string`` tests them (v0.0.4x lists them beside the base state).
_JOB_STATE_SHOWN_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED",
                          "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED",
                          "RESV_DEL_HOLD", "SIGNALING")


def job_state(states: Any) -> str:
    """A v0.0.4x job state list (``["RUNNING", "COMPLETING"]``) as the one word squeue prints."""
    if isinstance(states, str):
        return states.upper()
    words = [str(s).upper() for s in states or ()]
    for flag in _JOB_STATE_SHOWN_FLAGS:
        if flag in words:
            return flag
    return words[0] if words else ""


def parse_duration_min(text: str) -> int | None:
    """Slurm's ``[days-]hours:minutes:seconds`` (or ``UNLIMITED``) in whole minutes."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A", "PARTITION_LIMIT"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return days * 1440 + h * 60 + m + (1 if s else 0)


def parse_time_limit(text: str) -> int | None:
    """An sbatch ``--time`` value in seconds (``None`` for UNLIMITED); ``ValueError`` if bad.

    sbatch's forms: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``.
    """
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, rest = (text.split("-", 1) if "-" in text else ("", text))
    parts = rest.split(":")
    if not all(p.isdigit() for p in [*parts, *([days] if days else [])]) or len(parts) > 3:
        raise ValueError(f"{text!r} is not a Slurm time ([D-]H:M:S, M:S or M)")
    nums = [int(p) for p in parts]
    if days:
        h, m, sec = [*nums, 0, 0][:3]
        return ((int(days) * 24 + h) * 60 + m) * 60 + sec
    if len(nums) == 1:
        return nums[0] * 60
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return (nums[0] * 60 + nums[1]) * 60 + nums[2]


def parse_time(text: str) -> int | None:
    """An ISO time as Slurm's text prints it, in epoch seconds (None for N/A, Unknown, ...)."""
    text = text.strip()
    if not text or text in ("N/A", "Unknown", "None", "(null)"):
        return None
    try:
        return int(datetime.fromisoformat(text).timestamp())
    except ValueError:
        return None


def json_version(doc: Mapping[str, Any]) -> str:
    """The schema ``meta.plugin`` names in a ``--json`` document."""
    meta = doc.get("meta", {})
    plugin = meta.get("plugin", {})
    return str(plugin.get("type") or plugin.get("data_parser") or "")
