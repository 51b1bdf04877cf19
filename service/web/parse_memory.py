"""What parsing a JSON text holds in memory at its peak, bounded by a count of its bytes before it is parsed.

``orjson.loads`` builds its own document of the text (16 bytes a value, and a copy of the text), then the
Python objects: a list is 56 bytes (64 as the allocator rounds it) and its items' array, a dict 64 empty and
about 200 with keys, every value a pointer in its container, a float 24 bytes (32), an integer beyond the
cached ones (-5 to 256) 28 (32), a string 50 and more. So the peak depends on the shape, not only on the
length. A string takes as many bytes per character as its widest character needs: one character beyond
Latin-1 makes every character of its string 2 or 4 bytes. A dict's table is copied as it grows, so a dict
of many keys holds twice its table for a moment. Measured peak RSS growth per byte of text, orjson 3.13 on
Python 3.11, 16 MiB texts:

=================================  =======  =================================  =======
text                               peak/B   text                               peak/B
=================================  =======  =================================  =======
``0,`` (cached small integers)     13       ``[0.5,0.25],`` (two-wide rows)    18.5
``0.5,``                           15       ``[0],`` (one-element rows)        31
``-7,``                            19.7     ``[-7],``                          31.5
``[0.5],``                         26       ``[],``                            30
``[[]],``                          38       50 nested ``[`` then ``]``         48.5
``"a",``                           23       ``{"k123":123},`` (unique keys)    19.4
``{"a":0},``                       31       ``{"":[]},``                       39
=================================  =======  =================================  =======

:func:`parse_bytes_bound` charges what every one of those took and 8 % more at least (the tests measure
it). A body the budget could take by its length alone could need 3 times as much to parse (48.5 against the
16 bytes a body byte reserves for its computation): 776 MiB for 16 MiB of nested empty lists, which gzip
sends in 57 KB. Counting takes about 1 ms per MiB of a body of numbers (about a quarter of orjson's parse),
and as much again for one of small integers that the first count would refuse.
"""

from __future__ import annotations

import numpy as np

# Charged per byte of the text: orjson's copy of it, with room to spare; and, for a text with a byte beyond
# ASCII or an escape, each byte may also be a character of 4 bytes in a string.
PER_BYTE = 2
PER_WIDE_BYTE = 6
# Per value (every comma and colon separates one more, every container may open with one): orjson's
# document entry (16) and the pointer in its container (8), with room to spare.
PER_VALUE = 28
# Per value that is an object of its own: a number of 3 characters or more, or with a sign (a float, or an
# integer beyond the cached ones: 24 or 28 bytes, allocated as 32). Shorter unsigned numbers (0 to 99) are
# the interpreter's cached integers.
PER_NUMBER = 32
# Per list: its object (56, allocated as 64) and its items' array's rounding (the items are values).
PER_LIST = 80
# Per dict: its object and its keys' table (about 200 with a few keys); and per key (each colon), its entry
# and index in the table, twice over while the table is copied to grow (about 70).
PER_DICT = 200
PER_KEY = 72
# Per double quote, so 64 per string: a short string is 50 bytes and more, allocated as 64.
PER_QUOTE = 32

# The bytes the bound counts; the others (digits, letters, blanks) are dropped first, in one pass, so the
# counts look at a few percent of a body of numbers.
_COUNTED = b',:[]{}"-\\' + bytes(range(0x80, 0x100))
_NOT_COUNTED = bytes(sorted(set(range(256)) - set(_COUNTED)))
# The bytes that are not part of a number or literal; and how many bytes of the text are looked at at once.
_STRUCTURAL = np.zeros(256, dtype=bool)
_STRUCTURAL[list(b',:[]{}" \t\r\n')] = True
_BLOCK = 1 << 20


def parse_bytes_bound(text: bytes, end: int | None = None, *, within: int | None = None) -> int:
    """At most how many bytes ``orjson.loads(text[:end])`` holds at its peak, the text itself aside.

    Brackets, quotes and characters inside strings count as well, so the bound only grows with them. Its
    numbers are first taken to be every 3 characters that are not punctuation (and every minus sign); when
    that bound is over ``within``, they are counted as runs of 3 or more such characters, which costs as
    much again, so that a body of small integers (cached: no object of their own) is not refused for them.
    """
    stop = len(text) if end is None else end
    counts = np.zeros(256, dtype=np.int64)
    for start in range(0, stop, _BLOCK):  # a block at a time: what is kept of a body of brackets is as long
        kept = text[start : min(stop, start + _BLOCK)].translate(None, _NOT_COUNTED)
        counts += np.bincount(np.frombuffer(kept, dtype=np.uint8), minlength=256)
    lists, dicts, minus = int(counts[ord("[")]), int(counts[ord("{")]), int(counts[ord("-")])
    containers = lists + dicts
    values = int(counts[ord(",")]) + int(counts[ord(":")]) + containers + 1
    others = stop - int(counts.sum())  # ASCII digits, letters, blanks
    numbers = min(values - containers, others // 3 + minus)
    wide = counts[ord("\\")] or counts[0x80:].any()
    rest = (
        (PER_WIDE_BYTE if wide else PER_BYTE) * stop
        + PER_VALUE * values
        + PER_KEY * int(counts[ord(":")])
        + PER_LIST * lists
        + PER_DICT * dicts
        + PER_QUOTE * int(counts[ord('"')])
    )
    if within is not None and rest + PER_NUMBER * numbers > within:
        numbers = min(numbers, _long_tokens(text, stop) + minus)
    return rest + PER_NUMBER * numbers


def _long_tokens(text: bytes, stop: int) -> int:
    """How many runs of 3 or more bytes other than JSON's punctuation and blanks ``text[:stop]`` holds: an
    upper bound on its numbers and literals of 3 characters or more (a block at a time, so the count's own
    arrays stay a few MiB)."""
    view = np.frombuffer(text, dtype=np.uint8, count=stop)
    runs = 0
    before = np.zeros(3, dtype=bool)  # whether each of the 3 bytes before the block is part of a token
    for start in range(0, stop, _BLOCK):
        token = np.concatenate((before, ~_STRUCTURAL[view[start : start + _BLOCK]]))
        # a run of 3 or more starts where a token byte follows punctuation and two token bytes follow it
        runs += int(np.count_nonzero(~token[:-3] & token[1:-2] & token[2:-1] & token[3:]))
        before = token[-3:]
    return runs
