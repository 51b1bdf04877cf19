"""What parsing a JSON text holds in memory at its peak, bounded by a count of its bytes before it is parsed.

``orjson.loads`` builds its own document of the text (16 bytes a value, and a copy of the text), then the
Python objects: a list is 56 bytes (64 as the allocator rounds it) and its items' array, every value a
pointer in its container, a float 24 bytes (32), a string 50 and more. So the peak depends on the shape, not
only the length. Measured peak RSS growth per byte of text, orjson 3.11 on Python 3.11, 16 MiB texts:

==============================  =======  ===============================  =======
text                            peak/B   text                             peak/B
==============================  =======  ===============================  =======
``0,`` (cached small integers)  13       ``[0.5,0.25],`` (two-wide rows)  18.5
``0.5,``                        15       ``[0],`` (one-element rows)      31
``[0.5],``                      26       ``[],``                          30
``[[]],``                       38       50 nested ``[`` then ``]``       48.5
``"a",``                        23       ``{"":[]},``                     39
==============================  =======  ===============================  =======

The bound charges, per byte, what every one of those took or more (:func:`parse_bytes_bound`): a body the
budget could take by its length alone could need 3 times as much to parse (48.5 against the 16 bytes a body
byte reserves for its computation), 776 MiB for 16 MiB of nested empty lists that gzip sends in 57 KB.
Counting takes about 4 ms per MiB, a small part of the parse it bounds.
"""

from __future__ import annotations

# Charged per byte of the text: orjson's copy of it, with room to spare.
PER_BYTE = 2
# Per value (every comma and colon separates one more, every container may open with one): orjson's
# document entry (16) and the pointer in its container (8), rounded up.
PER_VALUE = 32
# Per value that is not a container: a float or an integer beyond the cached ones (24, allocated as 32).
PER_SCALAR = 32
# Per container: a list or dict (56 or 64, allocated as 64) and its items' array (at least 16).
PER_CONTAINER = 80
# Per double quote, so 64 per string: a short string is 50 bytes and more, allocated as 64.
PER_QUOTE = 32


def parse_bytes_bound(text: bytes, end: int | None = None) -> int:
    """At most how many bytes ``orjson.loads(text[:end])`` holds at its peak, the text itself aside.

    Brackets and quotes inside strings count as well, so the bound only grows with them.
    """
    stop = len(text) if end is None else end
    containers = text.count(b"[", 0, stop) + text.count(b"{", 0, stop)
    separators = text.count(b",", 0, stop) + text.count(b":", 0, stop)
    values = separators + containers + 1
    return (
        PER_BYTE * stop
        + PER_VALUE * values
        + PER_SCALAR * max(0, values - containers)
        + PER_CONTAINER * containers
        + PER_QUOTE * text.count(b'"', 0, stop)
    )
