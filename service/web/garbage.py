"""The cyclic garbage collector paused while a large body is decoded or a large answer is built.

Parsing JSON makes one container per array: a 16 MiB body of ``[0],`` rows is 4.2 million lists. Every few
hundred new containers start a collection, and the older generations' collections traverse every container
made so far, all inside the one ``orjson.loads`` call, which holds the interpreter: on Python 3.11 (the
image's) that body took 1.5 s to parse with the collector and 0.31 s without it (5.6 million ``[]``: 2.0 s
against 0.27 s), and the worker's event loop (probes, other connections) could not run meanwhile. (From 3.12
collections wait for the interpreter's next check after the call, yet the same parse took 0.58 s against
0.34 s on 3.13.) Building a log-likelihood's 524,288 rows of
top log-probabilities as lists of dicts is the same: 1.11 s with the collector (its longest single collection
0.16 s, longer when another request's document is alive) against 0.34 s. Neither a parsed document nor an
answer holds reference cycles, so the collector has nothing to find in them; reference counting still frees
everything they make.

A pause is bounded: a block that starts once the pause has lasted :data:`MAX_PAUSE_SECONDS` first collects
the youngest generation (what was made during the pause, other requests' cycles among it), then joins the
pause, which counts as starting afresh. So a stream of overlapping large bodies cannot leave cycles
uncollected for long, and no block runs with the collector on. That collection traverses the documents in
progress too: 0.18 s with a 16 MiB body's 4.2 million lists alive (Python 3.11), once a pause's length at
most.
"""

from __future__ import annotations

import gc
import threading
import time

try:
    from gevent.monkey import get_original
except ImportError:  # the service also runs without gevent; nothing is patched then
    _lock = threading.RLock()
else:
    # Blocks start and end on the worker's loop and on real threads (decoding, compute) alike, so their
    # count is kept under an unpatched thread lock, not the gevent lock that patched `threading` makes. It is
    # held for a few operations that never wait, so a greenlet never holds it across a switch; re-entrant,
    # since a collection or a signal handler may run code on the thread that holds it.
    _lock = get_original("threading", "RLock")()
_blocks = 0  # blocks in progress that hold the collector off; it is on again when the last one ends
_paused_at = 0.0  # when the collector was turned off for them, or last collected during their pause
# How long a pause goes before a block that starts collects the youngest generation (module's docstring).
MAX_PAUSE_SECONDS = 2.0
_clock = time.monotonic


def collection_paused() -> _CollectionPaused:
    """Within the ``with`` block the cyclic garbage collector does not run (but for a collection of the
    youngest generation as a block starts once the pause has lasted :data:`MAX_PAUSE_SECONDS`). It is
    process-wide: other threads' collections wait until every such block has ended. A collector that was
    already off (and no block in progress) is left as it is; one this turned off is always turned back on,
    however the block ends."""
    return _CollectionPaused()


class _CollectionPaused:
    """The context manager of :func:`collection_paused`: a class rather than a generator, as every
    computation's answer is built inside one (the worked example's too) and this costs less."""

    __slots__ = ("_counted",)

    def __init__(self) -> None:
        self._counted = False

    def __enter__(self) -> None:
        global _blocks, _paused_at
        collect = False
        with _lock:
            if _blocks:
                now = _clock()
                if now - _paused_at >= MAX_PAUSE_SECONDS:
                    _paused_at, collect = now, True  # this block collects; others starting now need not
            elif gc.isenabled():
                gc.disable()
                _paused_at = _clock()
            else:
                return  # turned off by someone else: not ours to turn on
            _blocks += 1
            self._counted = True
        if collect:
            gc.collect(0)  # outside the lock: finalizers may run

    def __exit__(self, *exception: object) -> None:
        global _blocks
        if not self._counted:
            return
        self._counted = False
        with _lock:
            _blocks -= 1
            if not _blocks:
                gc.enable()
