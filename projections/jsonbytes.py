"""Rows as compact JSON bytes with sorted keys: what the projection store writes, every changed row at each save.

orjson writes them about 2.5x faster than the standard library (a job row: 5.6 against 14.7 us), byte for byte the
same for ASCII text (other text it writes as UTF-8 where the standard library escapes it; both read back alike). An
integer beyond 64 bits (a sum of squares of service, say) is more than it writes: such a row is written by the
standard library instead. Rows are read back with `json.loads` either way.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits, or a key orjson does not take
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
