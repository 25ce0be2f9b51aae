"""A plain-text table: the command line's and `engine demo`'s way to print rows."""
from __future__ import annotations


def table(rows, headers) -> str:
    rows = [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]
    return "\n".join(out)
