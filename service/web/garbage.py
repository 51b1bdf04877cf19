"""The cyclic garbage collector paused while a large body is decoded.

Parsing JSON makes one container per array: a 16 MiB body of ``[0],`` rows is 4.2 million lists. Every 700
new containers start a collection, and the older generations' collections traverse every list made so far,
all inside the one ``orjson.loads`` call, which holds the interpreter: that body took 1.5 s to parse with the
collector and 0.31 s without it (5.6 million ``[]``: 2.0 s against 0.27 s), and the worker's event loop
(probes, other connections) could not run meanwhile. A parsed document holds no reference cycles, so the
collector has nothing to find in it; reference counting still frees everything it makes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """Within the block the cyclic garbage collector does not run (it is process-wide: other threads' cycles
    wait until the block ends). Only a collector that was on is paused, and it is turned back on afterwards,
    however the block ends; so with several threads in such blocks at once the collector may come back on
    early, but it is never left off."""
    pausing = gc.isenabled()
    if pausing:
        gc.disable()
    try:
        yield
    finally:
        if pausing:
            gc.enable()
