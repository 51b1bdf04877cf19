"""Give freed memory back to the system after a large request, so an idle worker is back near its fresh size.

glibc's malloc keeps freed memory for reuse: after one request of a few hundred MB its dynamic mmap
threshold has grown, later large arrays come from the heap, and an idle worker can keep 350 to 550 MB it no
longer uses. ``malloc_trim(0)`` returns the free pages; it costs a walk over the heap (milliseconds), so it
runs only after requests whose body or answer was large, once the answer has been sent and the request's
objects are gone. Elsewhere (musl, macOS) there is no ``malloc_trim`` and this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

from flask import Flask, Response
from flask.wrappers import Request

from service.web.body import body_size_of
from service.web.hooks import RequestGlobals, request_steps

# Bodies at least this large leave enough behind to be worth a trim (the seed request is 100 bytes).
LARGE_BODY_BYTES = 1024 * 1024


def _find_malloc_trim() -> Callable[[int], int] | None:
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        libc = ctypes.CDLL(library)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _find_malloc_trim()

# glibc's mallopt parameter (malloc.h) for the number of malloc arenas.
_M_ARENA_MAX = -8


def _one_malloc_arena() -> bool:
    """Have every thread allocate from glibc's main arena, the one ``malloc_trim`` gives back in full.

    Admission computes and decodes on threads; glibc would give each its own arena, whose heap top
    ``malloc_trim`` leaves alone and which keeps up to 64 MiB after a large request (a worker stayed 45 MiB
    above its fresh size after a body of 1.3 million unknown fields was decoded on a thread). One arena costs
    nothing measurable here: the interpreter lock already lets one thread allocate at a time.
    """
    library = ctypes.util.find_library("c")
    if library is None:
        return False
    try:
        mallopt = ctypes.CDLL(library).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, 1))


def release_freed_memory() -> bool:
    """Return free heap pages to the system; True when something was released."""
    return bool(_MALLOC_TRIM(0)) if _MALLOC_TRIM is not None else False


def install_memory_release(app: Flask) -> None:
    """After a large body or a large answer (streamed, or 1 MiB or more) is sent, release what was freed, and
    keep every thread's allocations in the arena that release reaches (:func:`_one_malloc_arena`)."""
    _one_malloc_arena()
    request_steps(app).add_after(_release_after_large_requests)


def _release_after_large_requests(request: Request, g: RequestGlobals, response: Response) -> Response:
    large_answer = response.is_streamed or (response.content_length or 0) >= LARGE_BODY_BYTES
    if large_answer or body_size_of(request) >= LARGE_BODY_BYTES:  # inflated, if it came compressed
        response.call_on_close(release_freed_memory)
    return response
