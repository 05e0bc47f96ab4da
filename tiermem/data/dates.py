"""Turn and session timestamps: the forms the loaders accept, and the one parser the memory reads dates with."""

from __future__ import annotations

import functools
from datetime import datetime

# LoCoMo ("1:56 pm on 8 May, 2023"), LongMemEval ("2023/05/20 (Sat) 02:21"), plain days; ISO 8601 is tried first.
DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%Y/%m/%d (%a) %H:%M", "%Y/%m/%d", "%d %B, %Y", "%d %B %Y", "%Y-%m-%d")
DATE_EXAMPLES = "'1:56 pm on 8 May, 2023', '2023/05/20 (Sat) 02:21', '2024-06-03' or ISO 8601 '2024-06-03T09:12:00Z'"


@functools.lru_cache(maxsize=4096)  # a session's turns share one timestamp; strptime misses are slow
def parse_timestamp(timestamp: str) -> datetime | None:
    """The moment a timestamp names, or None when it is not one of the accepted forms or names no real moment."""
    text = timestamp.strip()
    try:  # ISO 8601 first, what the tiermem conversation format recommends ("2024-06-03T09:12:00Z"): cheap
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return None


def timestamp_problem(value: str) -> str | None:
    """Why `value` cannot be a turn's timestamp (a loader's error message tail), or None when it is one."""
    if parse_timestamp(value) is not None:
        return None
    return f"{value!r} is not a date (or names no real day/time); expected a form such as {DATE_EXAMPLES}"


def is_aware(timestamp: str) -> bool:
    """Whether a timestamp names its time zone ("...T09:12:00Z", "+02:00"): only then is it one instant."""
    moment = parse_timestamp(timestamp)
    return moment is not None and moment.tzinfo is not None and moment.utcoffset() is not None


def zone_mix(stamps: list[tuple[str, str]]) -> str | None:
    """Why (field, timestamp) pairs cannot be ordered: some with a time zone, some without; None when all or none
    name one. A loader refuses any date comparison on such a mix (skipping would let a question see its future)."""
    aware = [s for s in stamps if is_aware(s[1])]
    naive = [s for s in stamps if not is_aware(s[1])]
    if not aware or not naive:
        return None
    (af, at), (nf, nt) = aware[0], naive[0]
    return (f"{af} has a time zone ({at!r}) but {nf} has none ({nt!r}); times with and without a zone cannot be "
            "ordered: give every timestamp an offset (e.g. Z), or none")
