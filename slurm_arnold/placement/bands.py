"""A constructive placement for given spread limits (a, b): bands.

*Row bands*: split the PP stages into at most b bands of consecutive stages. Each band holds
all D' pipelines for its stages and is cut, by pipelines, over at most a minipods (a minipod
with room for u units takes u // height pipelines of the band). A DP group (one stage) then
touches only its band's minipods (<= a) and a pipeline one minipod per band (<= b).

*Column bands*: the transpose. Split the pipelines into at most a bands; each band is cut, by
stages, over at most b minipods. A pipeline touches <= b minipods, a DP group one per band.

Band sizes are chosen greedily, largest first: the biggest band the remaining minipods can
still hold. Minipods for a band are picked best-fit (one minipod if one can hold the band,
the tightest such; otherwise the roomiest ones). It is fast and often reaches the lower bound,
so the solver is left with the cases it cannot settle.
"""

from __future__ import annotations


def _pick(avail: dict[str, int], band: int, span: int, limit: int) -> dict[str, int] | None:
    """Minipods (at most ``limit``) and how many of the band's ``span`` lines each takes,
    for a band ``band`` lines thick; ``None`` when they cannot hold it."""
    lines = {p: min(span, u // band) for p, u in avail.items() if u // band > 0}
    single = [p for p, k in lines.items() if k >= span]
    if single:
        tightest = min(single, key=lambda p: avail[p])
        return {tightest: span}
    roomiest = sorted(lines, key=lambda p: -lines[p])[:limit]
    if sum(lines[p] for p in roomiest) < span:
        return None
    picked: dict[str, int] = {}
    left = span
    for p in roomiest:
        take = min(lines[p], left)
        picked[p] = take
        left -= take
        if left == 0:
            break
    return picked


def _bands(caps: dict[str, int], thick: int, span: int, per_band: int,
           max_bands: int) -> list[tuple[int, dict[str, int]]] | None:
    """Split ``thick`` lines into at most ``max_bands`` bands, each spanning ``span`` cut over
    at most ``per_band`` minipods; returns (band thickness, minipod -> lines) per band."""
    avail = dict(caps)
    bands: list[tuple[int, dict[str, int]]] = []
    left = thick
    while left > 0:
        if len(bands) == max_bands:
            return None
        # the thickest band the remaining room can hold, no thinner than an even share
        floor = -(-left // (max_bands - len(bands)))
        chosen = None
        for size in range(left, floor - 1, -1):
            picked = _pick(avail, size, span, per_band)
            if picked is not None:
                chosen = (size, picked)
                break
        if chosen is None:
            return None
        size, picked = chosen
        for p, k in picked.items():
            avail[p] -= size * k
        bands.append(chosen)
        left -= size
    return bands


def band_layout(caps: dict[str, int], stages: int, columns: int, a: int,
                b: int) -> list[list[str]] | None:
    """A (stage, pipeline) -> minipod layout with DP spread <= a and PP spread <= b, or
    ``None`` when neither band construction finds one."""
    rows = _bands(caps, stages, columns, a, b)
    if rows is not None:
        return _fill(rows, stages, columns, transpose=False)
    cols = _bands(caps, columns, stages, b, a)
    if cols is not None:
        return _fill(cols, stages, columns, transpose=True)
    return None


def _fill(bands: list[tuple[int, dict[str, int]]], stages: int, columns: int,
          transpose: bool) -> list[list[str]]:
    """Lay bands out: each band is ``size`` lines thick and cut across into runs per minipod.
    Row bands run along stages; with ``transpose`` they run along pipelines."""
    layout = [[""] * columns for _ in range(stages)]
    start = 0
    for size, picked in bands:
        across = 0
        for pod, width in picked.items():
            for line in range(start, start + size):
                for cross in range(across, across + width):
                    if transpose:
                        layout[cross][line] = pod
                    else:
                        layout[line][cross] = pod
            across += width
        start += size
    return layout
