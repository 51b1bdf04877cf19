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
"""

from __future__ import annotations

import gc

# One token per block in progress, on any thread (list.append and list.remove are atomic under the
# interpreter lock): the collector comes back on when the last block ends, not the first.
_in_progress: list[object] = []


def collection_paused() -> _CollectionPaused:
    """Within the ``with`` block the cyclic garbage collector does not run. It is process-wide: other threads'
    collections wait until every such block has ended. A collector that was already off (and no block in
    progress) is left as it is; one this turned off is always turned back on, however the block ends."""
    return _CollectionPaused()


class _CollectionPaused:
    """The context manager of :func:`collection_paused`: a class rather than a generator, as every
    computation's answer is built inside one (the worked example's too) and this costs less."""

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token: object | None = None

    def __enter__(self) -> None:
        if not gc.isenabled() and not _in_progress:
            return  # turned off by someone else: not ours to turn on
        self._token = token = object()
        _in_progress.append(token)
        gc.disable()

    def __exit__(self, *exception: object) -> None:
        if self._token is None:
            return
        _in_progress.remove(self._token)
        self._token = None
        if not _in_progress:
            gc.enable()
