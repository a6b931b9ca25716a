"""Page-text extraction in worker processes that can be killed.

A hostile page can make an HTML parser spin for minutes or grow to gigabytes. Extraction
therefore never runs in the server's process nor in its default thread pool (shared with
getaddrinfo): each call goes to a worker process (`python -m agent.tools.extract_worker`)
whose address space is capped (RLIMIT_AS), and the caller's deadline or cancellation
(a run stop) kills that worker at once. A killed or crashed worker is replaced on the next
call. A worker gets a minimal environment: no key or token of the server's. Workers start
lazily, at most `workers` of them, and are reused between calls.

Wire between parent and worker, both directions length-prefixed (4 bytes, big endian):
request = JSON header `{"content_type", "charset", "url"}`, then the body bytes;
reply = JSON `{"title", "text"}` or `{"error"}`, with `"recycle": true` when the worker
grew large on that page and exits after replying (it is then not reused).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson

__all__ = ["ExtractionFailed", "ExtractorPool"]

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")


_PACKAGES = Path(__file__).resolve().parents[2]  # the folder that holds agent/
# What a worker inherits of the environment: what MCP servers get (the MCP SDK's list), no
# credential (the model's key, the auth tokens) for a process that parses hostile pages.
_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")


def _worker_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in _INHERITED if name in os.environ}


class ExtractionFailed(Exception):
    """The worker could not extract the page (it crashed, ran out of memory, or refused)."""


@dataclass(eq=False)
class _Worker:
    proc: asyncio.subprocess.Process
    retiring: bool = False  # it said it exits after this reply

    async def extract(
        self, body: bytes, content_type: str, charset: str | None, url: str
    ) -> tuple[str | None, str]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        header = orjson.dumps({"content_type": content_type, "charset": charset, "url": url})
        stdin.write(_LENGTH.pack(len(header)) + header + _LENGTH.pack(len(body)))
        stdin.write(body)
        try:
            await stdin.drain()
            (size,) = _LENGTH.unpack(await stdout.readexactly(_LENGTH.size))
            reply = orjson.loads(await stdout.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError, orjson.JSONDecodeError):
            self.retiring = True
            raise ExtractionFailed("the extraction worker died (out of memory?)") from None
        self.retiring = bool(reply.get("recycle"))
        if "error" in reply:
            if "trace" in reply:
                log.warning("extracting %s failed in the worker:\n%s", url, reply["trace"])
            raise ExtractionFailed(str(reply["error"]))
        return reply["title"], reply["text"]


class ExtractorPool:
    """Up to `workers` extraction processes, each capped at `memory_mb` of address space and
    replaced after a page that grew it past `recycle_mb` (default a quarter of the cap).

    Call `extract` from the event loop; wrap it in `asyncio.timeout` for a deadline: a
    timeout or cancellation kills the worker doing that page. Call `aclose()` when done.
    """

    def __init__(self, workers: int = 2, memory_mb: int = 1024, recycle_mb: int = 0) -> None:
        self._memory_mb = memory_mb
        self._recycle_mb = recycle_mb or memory_mb // 4
        self._slots = asyncio.Semaphore(workers)
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._reaping: set[asyncio.Task[int]] = set()
        self._closed = False
        self.last_pid: int | None = None  # the worker that took the latest call (diagnostics)

    async def extract(
        self, body: bytes, content_type: str, charset: str | None, url: str
    ) -> tuple[str | None, str]:
        """Return (title or None, main text); raise ExtractionFailed if the worker fails."""
        async with self._slots:
            if self._closed:
                raise ExtractionFailed("the server is shutting down")
            worker = self._idle.pop() if self._idle else await self._start_shielded()
            self.last_pid = worker.proc.pid
            self._busy.add(worker)
            try:
                result = await worker.extract(body, content_type, charset, url)
            except ExtractionFailed:
                self._retire(worker)
                raise
            except BaseException:  # timeout, stop: the worker's state is unknown
                self._kill(worker)
                raise
            self._retire(worker)
            return result

    def _retire(self, worker: _Worker) -> None:
        """Back to the idle list, unless it is exiting or dead (then reap it)."""
        self._busy.discard(worker)
        if worker.retiring or worker.proc.returncode is not None or self._closed:
            self._kill(worker)
        else:
            self._idle.append(worker)

    async def _start_shielded(self) -> _Worker:
        """Start a worker; if the caller is cancelled meanwhile, keep it for the next call
        (a process spawned by a cancelled start must never be left unowned)."""
        starting = asyncio.ensure_future(self._start())
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(self._adopt)
            raise

    def _adopt(self, starting: asyncio.Future[_Worker]) -> None:
        if starting.cancelled() or starting.exception() is not None:
            return
        worker = starting.result()
        if self._closed:
            self._kill(worker)
        else:
            self._idle.append(worker)

    async def _start(self) -> _Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent.tools.extract_worker",
            str(self._memory_mb),
            str(self._recycle_mb),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=_PACKAGES,  # `-m` finds agent/ there, wherever the server was started
            env=_worker_environment(),
        )
        return _Worker(proc)

    def _kill(self, worker: _Worker) -> None:
        self._busy.discard(worker)
        if worker.proc.returncode is None:
            worker.proc.kill()
        task = asyncio.get_running_loop().create_task(worker.proc.wait())
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)

    async def aclose(self) -> None:
        """Kill every worker, idle or still busy, and wait until each has exited."""
        self._closed = True
        for worker in [*self._idle, *self._busy]:
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()
            self._kill(worker)
        self._idle.clear()
        while self._reaping:
            await asyncio.gather(*self._reaping, return_exceptions=True)
