"""`agent-server chat`: talk to a running server from the terminal, over the wire protocol.

Type a message and press Enter; the run streams with its phases marked::

    [step 1] thinking: Let me check the clock.
      → tool get_current_time {"timezone": "UTC"}
      ✓ result (3 ms): {"timezone": "UTC", "iso": "…"}
      observing: The tool returned the time.
    answer (finished in 1 step):
    It is 14:36 in UTC.

On a terminal, answers are rendered as Markdown (client/display.py) and a status line shows
what works and for how long (`⠹ step 1 · acting · 12 s`); piped output stays raw text.

Ctrl-C during a run stops it (a second Ctrl-C quits); Ctrl-C at the prompt or Ctrl-D (end of
input) quits. A question from the agent (`request_input`) is answered at an `answer>` prompt.
`/versions` lists the versions of each turn, `/show 2.1` shows one, `/edit 2 …` and
`/regen 2` make a new one (client/versions.py).
The session id is printed so that `--session ID` resumes it later; the last event seen per
session is kept in $XDG_STATE_HOME/agent-server/terminal.json, so a resumed session (and a
reconnect after a dropped connection) shows only what this terminal has not shown yet.
"""

from __future__ import annotations

import asyncio
import codecs
import io
import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from client import DEFAULT_URL
from client.printer import Printer, Style, approval_text, clean
from client.versions import Command, fetch_events, parse_command, run_command

__all__ = ["resume_command", "run_terminal_chat"]

Frame = dict[str, Any]
RECONNECT_DELAYS_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


class Unreachable(Exception):
    """The server cannot be reached, refused us, or does not know the session."""


def run_terminal_chat(url: str, session_id: str | None, token: str | None) -> int:
    """Chat with the server at `url` until EOF or Ctrl-C; return the process exit code."""
    out = sys.stdout
    if isinstance(out, io.TextIOWrapper):
        out.reconfigure(errors="replace")
    chat = TerminalChat(url, token, out, Style.for_stream(out), terminal=out.isatty())
    try:
        return asyncio.run(chat.run(session_id))
    except KeyboardInterrupt:  # before the handler was installed (while connecting)
        return 130


def _ws_url(url: str, params: dict[str, str]) -> str:
    """`url` with http(s) turned into ws(s), `/ws` as the default path, `params` added."""
    parts = urlsplit(url if "://" in url else f"ws://{url}")
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path if parts.path not in ("", "/") else "/ws"
    query = urlencode([*parse_qsl(parts.query), *params.items()])
    return urlunsplit((scheme, parts.netloc, path, query, ""))


def resume_command(url: str, session_id: str, token: str | None) -> str:
    """The command that resumes `session_id` on this server: with `--url` unless it is the
    default, and `--token …` when one was used, never the token itself (nor a `?token=` or
    password in the URL: the hint stays on screen and in terminal logs)."""
    parts = urlsplit(url if "://" in url else f"ws://{url}")
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "token"]
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username}:…@{netloc.rpartition('@')[2]}"
    shown = urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))
    command = ["agent-server", "chat"]
    if _ws_url(shown, {}) != _ws_url(DEFAULT_URL, {}):
        command += ["--url", shlex.quote(shown)]
    command += ["--session", shlex.quote(session_id)]
    if token or len(query) < len(parse_qsl(parts.query, keep_blank_values=True)):
        command += ["--token", "…"]
    return " ".join(command)


class SeenStore:
    """The last seq this terminal showed, per session, in a small JSON file (best effort)."""

    LIMIT = 200

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
            path = Path(state) / "agent-server" / "terminal.json"
        self.path = path

    def _read(self) -> dict[str, int]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, int)}

    def get(self, session_id: str) -> int | None:
        return self._read().get(session_id)

    def put(self, session_id: str, seq: int | None) -> None:
        data = self._read()
        data.pop(session_id, None)
        if seq is not None:
            data[session_id] = seq  # newest last, so the oldest are dropped first
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(dict(list(data.items())[-self.LIMIT :])), "utf-8")
        except OSError:
            pass  # resuming then replays more than needed; nothing else depends on it


class LineReader:
    """Read stdin lines in a daemon thread (the event loop never blocks on it).

    Reads the raw file descriptor, not sys.stdin, so that a thread still blocked in a read
    at exit holds no interpreter lock. Delivers each line, then None at end of input.
    """

    def __init__(self, deliver: Callable[[str | None], None], fd: int = 0) -> None:
        self._deliver = deliver
        self._fd = fd

    def start(self) -> None:
        threading.Thread(target=self._run, name="stdin", daemon=True).start()

    def _run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        while True:
            try:
                chunk = os.read(self._fd, 4096)
            except OSError:
                chunk = b""
            pending += decoder.decode(chunk, final=not chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                self._deliver(line)
            if not chunk:
                if pending:
                    self._deliver(pending)
                self._deliver(None)
                return


class TerminalChat:
    """The client's state machine. Stdin lines, socket frames and Ctrl-C all arrive as
    items of one queue and are handled in order, by one coroutine."""

    def __init__(
        self,
        url: str,
        token: str | None,
        out: TextIO,
        style: Style,
        seen: SeenStore | None = None,
        *,
        terminal: bool = False,
    ) -> None:
        self.url = url
        self.token = token
        self.p = Printer(out, style, terminal)
        self.s = style
        self.seen = seen or SeenStore()
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.ws: ClientConnection | None = None
        self.receiver: asyncio.Task[None] | None = None
        self.session_id: str | None = None
        self.last_seq = 0
        self.history_until = 0  # frames up to the session frame's last_seq are replayed history
        self.status = "idle"  # idle | running | awaiting_input | awaiting_approval
        self.approval: Frame | None = None  # the tool call waiting for approval
        self.question: Frame | None = None  # the question waiting for an answer
        self.question_shown = False
        self.stopping = False
        self.input_ended = False
        self.said_waiting = False  # "(input ended: waiting…)" was printed

    # -- the main loop ---------------------------------------------------------------------------

    async def run(self, session_id: str | None) -> int:
        loop = asyncio.get_running_loop()
        after_seq = None
        if session_id is not None:
            after_seq = self.seen.get(session_id) or 0  # never shown here: replay it all
        try:
            await self.connect(session_id, after_seq)
        except Unreachable as exc:
            self.p.line(self.s.bad(f"! {exc}"))
            return 1
        loop.add_signal_handler(signal.SIGINT, self.events.put_nowait, ("sigint", None))

        def deliver(line: str | None) -> None:
            loop.call_soon_threadsafe(self.events.put_nowait, ("line", line))

        LineReader(deliver).start()
        ticker = asyncio.create_task(self.tick()) if self.p.terminal else None
        try:
            self.prompt()
            return await self.loop()
        finally:
            if ticker is not None:
                ticker.cancel()
            loop.remove_signal_handler(signal.SIGINT)
            if self.receiver is not None:
                self.receiver.cancel()
            if self.ws is not None:
                await self.ws.close()
            self.remember()
            self.p.line(
                self.s.dim(
                    f"session {self.session_id} · resume it with: "
                    + resume_command(self.url, str(self.session_id), self.token)
                )
            )

    async def tick(self) -> None:
        """Turn the status line's spinner and timer while the client runs (a terminal's)."""
        while True:
            await asyncio.sleep(0.1)
            self.p.tick()

    async def loop(self) -> int:
        """Handle queued items until the user quits; return the exit code."""
        while True:
            kind, value = await self.events.get()
            if kind == "frame":
                self.on_frame(value)
            elif kind == "line":
                self.p.at_prompt = False  # the terminal echoed the Enter
                if value is None:
                    self.input_ended = True
                else:
                    await self.on_line(value)
            elif kind == "sigint":
                if await self.on_interrupt():
                    return 130
            elif kind == "closed":
                code = await self.on_closed(value)
                if code is not None:
                    return code
            if self.input_ended:
                if self.status == "running":
                    if not self.said_waiting:  # once: not after every frame that follows
                        self.said_waiting = True
                        self.p.line(self.s.dim("(input ended: waiting for the run to finish)"))
                    continue
                if self.status in ("awaiting_input", "awaiting_approval"):
                    self.p.line(self.s.dim("(input ended: the question stays open)"))
                self.p.line()
                return 0
            self.prompt()

    # -- the connection ----------------------------------------------------------------------

    async def connect(self, session_id: str | None, after_seq: int | None) -> None:
        """Open the socket and read the `session` frame; raise Unreachable on failure."""
        params = {}
        if session_id is not None:
            params["session_id"] = session_id
            if after_seq is not None:
                params["after_seq"] = str(after_seq)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        try:
            ws = await connect(
                _ws_url(self.url, params),
                additional_headers=headers,
                max_size=None,
                open_timeout=10,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            hint = " (is --token right?)" if status in (401, 403) else ""
            raise Unreachable(f"the server refused the connection: HTTP {status}{hint}") from None
        except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
            raise Unreachable(f"cannot connect to {self.url}: {exc}") from None
        try:
            first = json.loads(await asyncio.wait_for(ws.recv(), 10))
        except (ConnectionClosed, TimeoutError, ValueError) as exc:
            await ws.close()
            raise Unreachable(f"the server closed the connection: {exc}") from None
        if first.get("type") != "session":
            await ws.close()
            if first.get("code") == "session_not_found" and session_id is not None:
                self.seen.put(session_id, None)
                raise Unreachable(f"there is no session {session_id} on this server")
            raise Unreachable(f"the server said: {first.get('message', first)}")
        reconnected = self.session_id is not None
        self.ws = ws
        self.on_session(first, after_seq, reconnected)
        self.receiver = asyncio.create_task(self.receive(ws))

    async def receive(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                self.events.put_nowait(("frame", json.loads(raw)))
        except ConnectionClosed:
            pass
        self.events.put_nowait(("closed", ws))

    async def on_closed(self, ws: ClientConnection) -> int | None:
        """Reconnect after a drop, resuming after the last seq; return an exit code to quit."""
        if ws is not self.ws:
            return None  # an old socket
        self.ws = None
        self.p.line(self.s.dim("… connection lost; reconnecting"))
        error: Unreachable | None = None
        for delay in RECONNECT_DELAYS_S:
            await asyncio.sleep(delay)
            try:
                await self.connect(self.session_id, self.last_seq)
                return None
            except Unreachable as exc:
                error = exc
        self.p.line(self.s.bad(f"! could not reconnect: {error}"))
        return 1

    def on_session(self, frame: Frame, after_seq: int | None, reconnected: bool) -> None:
        self.session_id = str(frame["session_id"])
        self.history_until = int(frame.get("last_seq") or 0)
        self.last_seq = self.history_until if after_seq is None else after_seq
        self.status = str(frame.get("status") or "idle")
        pending = frame.get("pending_input")
        same = bool(
            pending
            and self.question
            and pending.get("tool_call_id") == self.question.get("tool_call_id")
        )
        self.question = pending if isinstance(pending, dict) else None
        self.question_shown = same and self.question_shown
        approval = frame.get("pending_approval")
        was = (self.approval or {}).get("tool_call_id")
        self.approval = approval if isinstance(approval, dict) else None
        if self.approval is not None and self.approval.get("tool_call_id") != was:
            self.p.line(f"  {self.s.ask('? approve this call:')} {approval_text(self.approval)}")
        if reconnected:
            self.p.line(self.s.dim("… reconnected"))
            return
        self.p.line(
            self.s.bold(f"session {self.session_id}")
            + self.s.dim(" (new)" if after_seq is None else " (resumed)")
        )
        if self.history_until > self.last_seq:
            self.p.line(
                self.s.dim(
                    f"replaying {self.history_until - self.last_seq} event(s) not shown here yet"
                )
            )
        self.p.line(
            self.s.dim("Enter sends · /versions lists versions · Ctrl-C stops a run · Ctrl-D quits")
        )

    # -- events ----------------------------------------------------------------------------------

    def on_frame(self, f: Frame) -> None:
        seq = f.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return  # shown already
            self.last_seq = seq
        if f.get("type") == "error" and not f.get("run_id"):
            return self.on_client_error(f)
        if f.get("type") == "active_path":
            if not isinstance(seq, int) or seq > self.history_until:  # not history: news
                self.p.line(self.s.dim("(another version is shown now: /versions lists them)"))
            return None
        if f.get("type") == "session_title":
            self.p.line(self.s.dim(f"(this chat is now called: {clean(str(f.get('title')))})"))
            return None
        if not f.get("run_id"):
            return None  # about the session, not a run: it changes no run state
        self.p.frame(f)
        live = not isinstance(seq, int) or seq > self.history_until
        kind = f.get("update_type") or f["type"]
        if kind == "agent_request_input":
            if live or (self.question or {}).get("tool_call_id") == f.get("tool_call_id"):
                self.question, self.question_shown = f, True
                self.status = "awaiting_input"
        elif kind == "agent_tool_approval":
            if live or (self.approval or {}).get("tool_call_id") == f.get("tool_call_id"):
                self.approval, self.status = f, "awaiting_approval"
        elif not live:
            return  # history: the session frame said what state the session is in
        elif kind == "response_complete":
            self.status, self.question, self.stopping = "idle", None, False
            self.approval = None
            self.remember()
        else:
            self.status, self.question, self.approval = "running", None, None

    def on_client_error(self, f: Frame) -> None:
        self.p.line(self.s.bad(f"! {clean(str(f.get('message')))} ({f.get('code')})"))
        code = f.get("code")
        if code in ("invalid_message", "too_many_runs", "no_active_run", "unknown_run"):
            self.status, self.stopping = "idle", False
        elif code == "run_in_progress":
            self.status = "running"
        elif code == "not_awaiting_input":
            self.status, self.question = "running", None
        elif code in ("not_awaiting_approval", "unknown_tool_call", "already_decided"):
            self.status, self.approval = "running", None

    async def on_line(self, line: str) -> None:
        text = line.rstrip("\r")
        if self.status == "awaiting_approval" and self.approval is not None:
            await self.decide(text)
        elif self.status == "awaiting_input" and self.question is not None:
            answer = {"type": "agent_user_input", "content": text}
            call_id = self.question.get("tool_call_id")
            if isinstance(call_id, str):  # a late answer is refused, not given to the next one
                answer["tool_call_id"] = call_id
            if await self.send(answer):
                self.status, self.question = "running", None
        elif self.status != "idle":
            self.p.line(self.s.dim("(a run is in progress: Ctrl-C stops it)"))
        elif (command := parse_command(text)) is not None:
            await self.on_command(command)
        elif text.strip() and await self.send({"type": "chat", "content": text}):
            self.status = "running"

    async def on_command(self, command: Command | str) -> None:
        """`/versions`, `/show`, `/edit`, `/regen` (client/versions.py)."""
        url, session = _ws_url(self.url, {}), str(self.session_id)
        started = await run_command(
            command,
            events=lambda: fetch_events(url, session, self.token),
            say=lambda text: self.p.line(clean(text)),
            fail=lambda text: self.p.line(self.s.bad(f"! {text}")),
            send=self.send,
        )
        if started:
            self.status = "running"

    async def decide(self, text: str) -> None:
        """`y` approves the pending call; `n` denies it (`n <reason>` says why)."""
        answer, _, reason = text.strip().partition(" ")
        if answer.lower() not in ("y", "yes", "n", "no"):
            self.p.line(self.s.dim("(answer y to run the call, or n [reason] to decline it)"))
            return
        approve = answer.lower() in ("y", "yes")
        frame: Frame = {
            "type": "agent_tool_decision",
            "tool_call_id": (self.approval or {}).get("tool_call_id"),
            "approve": approve,
        }
        if not approve and reason.strip():
            frame["reason"] = reason.strip()
        if await self.send(frame):
            self.status, self.approval = "running", None

    async def on_interrupt(self) -> bool:
        """Ctrl-C: stop the run; quit if none is running or a stop was already sent."""
        if self.status == "idle" or self.stopping:
            self.p.line(self.s.dim("^C"))
            return True
        if await self.send({"type": "agent_control", "action": "stop"}):
            self.stopping = True
            self.p.line(self.s.bad("^C stopping the run… (Ctrl-C again to quit)"))
            return False
        return True

    async def send(self, frame: Frame) -> bool:
        if self.ws is None:
            self.p.line(self.s.bad("! not connected; try again in a moment"))
            return False
        try:
            await self.ws.send(json.dumps(frame))
        except ConnectionClosed:
            self.p.line(self.s.bad("! the connection dropped; try again in a moment"))
            return False
        return True

    def prompt(self) -> None:
        """Show the prompt the state asks for, unless it is showing or history is replaying."""
        if self.p.at_prompt or self.input_ended or self.last_seq < self.history_until:
            return
        if self.status == "idle":
            self.p.prompt(self.s.accent("you> "))
        elif self.status == "awaiting_input" and self.question is not None:
            if not self.question_shown:
                question = clean(str(self.question.get("question")))
                self.p.line(f"  {self.s.ask('? the agent asks:')} {question}")
                self.question_shown = True
            self.p.prompt(self.s.ask("answer> "))
        elif self.status == "awaiting_approval" and self.approval is not None:
            self.p.prompt(self.s.ask("approve? [y/n reason] "))

    def remember(self) -> None:
        if self.session_id is not None:
            self.seen.put(self.session_id, self.last_seq)
