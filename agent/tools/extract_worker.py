"""The extraction worker: `python -m agent.tools.extract_worker MEMORY_MB [RECYCLE_MB]`.

Caps its own address space, then answers extraction requests on stdin/stdout until stdin
closes (the protocol is in agent/tools/extractor.py). Anything a library prints goes to
stderr, never into the reply stream. After a page that grew it past RECYCLE_MB (default: a
quarter of its cap), it says so in the reply (`"recycle": true`) and exits, so the memory
one page took is given back to the system instead of staying with an idle worker.
"""

from __future__ import annotations

import logging
import os
import resource
import struct
import sys
import traceback
from typing import BinaryIO

import orjson

_LENGTH = struct.Struct(">I")


def _read(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    if len(data) < size:
        return None
    return data


def _cap_memory(memory_mb: int) -> None:
    limit = memory_mb * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _grown_past(limit_bytes: int) -> bool:
    """Whether the process holds more than `limit_bytes` resident now. (Not ru_maxrss: Linux
    carries the spawning parent's peak across exec.)"""
    try:
        with open("/proc/self/statm", "rb") as statm:
            resident_pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return False  # no /proc: never recycle
    return resident_pages * os.sysconf("SC_PAGE_SIZE") > limit_bytes


def serve(inbox: BinaryIO, outbox: BinaryIO, recycle_bytes: int = 1 << 62) -> None:
    """Answer requests until `inbox` ends, or until a page left the process holding more
    than `recycle_bytes` resident."""
    from agent.tools.page_text import extract_text  # imports trafilatura (the slow part)

    while True:
        raw = _read(inbox, _LENGTH.size)
        if raw is None:
            return
        header = orjson.loads(_read(inbox, _LENGTH.unpack(raw)[0]) or b"{}")
        raw = _read(inbox, _LENGTH.size)
        if raw is None:
            return
        body = _read(inbox, _LENGTH.unpack(raw)[0]) or b""
        answer: dict[str, object]
        try:
            title, text = extract_text(
                body, header["content_type"], header["charset"], header["url"]
            )
            answer = {"title": title, "text": text}
        except MemoryError:
            answer = {"error": "the page needs more memory than allowed"}
        except Exception as exc:  # noqa: BLE001 - a page the extractor chokes on fails alone
            answer = {
                "error": f"the page text could not be extracted ({exc!r:.80})",
                "trace": traceback.format_exc(limit=-8),  # for the parent's log
            }
        del body
        recycle = _grown_past(recycle_bytes)
        if recycle:
            answer["recycle"] = True
        reply = orjson.dumps(answer)
        outbox.write(_LENGTH.pack(len(reply)) + reply)
        outbox.flush()
        if recycle:
            return


def main() -> None:
    memory_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    recycle_mb = int(sys.argv[2]) if len(sys.argv) > 2 else memory_mb // 4
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints of a library land on stderr, not in the replies
    logging.basicConfig(level=logging.CRITICAL)  # failures travel in the replies
    _cap_memory(memory_mb)
    try:
        serve(sys.stdin.buffer, outbox, recycle_bytes=recycle_mb * 1024 * 1024)
    except (BrokenPipeError, KeyboardInterrupt):
        pass


if __name__ == "__main__":
    main()
