"""`agent-server chat` in a real pseudo-terminal, against the real server and the fake LLM.

The client runs as its own process with the pty as its controlling terminal, so Enter,
Ctrl-C (SIGINT from the line discipline) and Ctrl-D (end of input) behave as for a person.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason

# Make the pty the child's controlling terminal (Popen cannot), then become the client.
BOOT = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)
ANSI = re.compile(r"\x1b\[[0-9;]*[mK]")
# A status line drawn and erased again (client/display.py): what a person no longer sees.
STATUS = re.compile(r"\r\x1b\[K(?:\x1b\[[0-9;]*m)*[⠀-⣿][^\r\n]*")


def chat_command() -> list[str]:
    # `-m` from the working directory: the client of the checkout under test, which the
    # installed `agent-server` script may not be (a venv shared by several checkouts)
    return [sys.executable, "-m", "server", "chat"]


class Terminal:
    """A process on a pty: type into it, wait for patterns in what it prints."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc = proc
        self.master = master
        self.raw = b""
        self.pos = 0  # how much of the cleaned text `expect` has consumed
        self.eof = asyncio.Event()
        self.changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(master, self._read)

    @classmethod
    async def start(cls, *args: str, state_dir: Path) -> Terminal:
        master, slave = os.openpty()
        env = {**os.environ, "XDG_STATE_HOME": str(state_dir), "TERM": "xterm"}
        env.pop("NO_COLOR", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            BOOT,
            *chat_command(),
            *args,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            env=env,
        )
        os.close(slave)
        return cls(proc, master)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every slave end is closed
            data = b""
        if data:
            self.raw += data
        else:
            asyncio.get_running_loop().remove_reader(self.master)
            self.eof.set()
        self.changed.set()

    @property
    def text(self) -> str:
        shown = STATUS.sub("", self.raw.decode("utf-8", "replace"))
        return ANSI.sub("", shown).replace("\r", "")

    async def expect(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        """Wait until `pattern` (a regex) appears after the last match; consume up to it."""
        regex = re.compile(pattern)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    found = regex.search(self.text, self.pos)
                    if found:
                        self.pos = found.end()
                        return found
                    if self.eof.is_set():
                        break
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            pass
        raise AssertionError(
            f"{pattern!r} did not appear; the terminal shows:\n"
            f"{self.text[self.pos :]}\n--- (earlier) ---\n{self.text[: self.pos]}"
        )

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    async def exit_code(self, timeout: float = 10.0) -> int:
        async with asyncio.timeout(timeout):
            code = await self.proc.wait()
            await self.eof.wait()
        return code

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if not self.eof.is_set():
            asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)


@pytest.fixture
async def terminals(tmp_path: Path) -> AsyncIterator[Any]:
    """Start clients with `await terminals(url, *args)`; all are killed at the end."""
    started: list[Terminal] = []

    async def start(url: str, *args: str, state_dir: Path = tmp_path / "state") -> Terminal:
        terminal = await Terminal.start("--url", url, *args, state_dir=state_dir)
        started.append(terminal)
        return terminal

    yield start
    for terminal in started:
        await terminal.close()


def ws_url(server: Any) -> str:
    return f"ws://{server.address}/ws"


async def piped_chat(server: Any, typed: bytes, tmp_path: Path, **env: str) -> str:
    """Run the client with a pipe for its input and output (a script's way); return what
    it printed, after checking it exited with 0."""
    environ = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), **env}
    if "NO_COLOR" not in env:
        environ.pop("NO_COLOR", None)
    proc = await asyncio.create_subprocess_exec(
        *chat_command(),
        "--url",
        ws_url(server),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=environ,
    )
    async with asyncio.timeout(20):
        out, _ = await proc.communicate(typed)
    text = out.decode()
    assert proc.returncode == 0, text
    return text


async def test_a_run_streams_its_phases_and_the_final_answer(
    server: Any, fake_llm: FakeLLM, terminals: Any
) -> None:
    fake_llm.script(
        "reason", reason("Let me check the clock."), reason("I have the time now.", finish=True)
    )
    fake_llm.script("act", act(FakeToolCall("get_current_time", {"timezone": "UTC"})))
    fake_llm.script(
        "observe",
        observe("The tool returned the time.\x1b]0;pwned\x07"),
        observe("Done.", final="It is **noon** in UTC."),
    )
    term = await terminals(ws_url(server))
    session_id = (await term.expect(r"session (\w+) \(new\)")).group(1)
    await term.expect(r"you> ")
    term.type("What time is it?\r")

    await term.expect(r"\[step 1\] thinking: Let me check the clock\.\n")
    await term.expect(r'→ tool get_current_time \{"timezone": "UTC"\}\n')
    await term.expect(r'✓ result \(\d+ ms\): \{"timezone": "UTC", "iso": ')
    await term.expect(r"observing: The tool returned the time\.\]0;pwned\n")  # ESC, BEL dropped
    await term.expect(r"\[step 2\] thinking: I have the time now\.\n")
    await term.expect(r"observing: Done\.\n")
    # a terminal renders the Markdown: bold, not asterisks
    await term.expect(r"answer:\nIt is noon in UTC\.\n\(finished in 2 steps\)\n")
    assert b"\x1b[1mnoon\x1b[0m" in term.raw
    await term.expect(r"you> ")
    assert b"\x1b]0;pwned" not in term.raw  # model text cannot send terminal commands

    term.type("\x04")  # Ctrl-D: end of input
    # not the default address: the hint names it, or it would resume on another server
    url = re.escape(ws_url(server))
    await term.expect(rf"resume it with: agent-server chat --url {url} --session {session_id}\n")
    assert await term.exit_code() == 0


async def test_retries_reasoning_and_the_answer_stream_as_they_happen(
    server: Any, fake_llm: FakeLLM, terminals: Any
) -> None:
    fake_llm.script(
        "reason",
        Reply(status=503),
        reason("Simple enough.", finish=True, reasoning=["weigh the ", "options"]),
    )
    fake_llm.script("observe", observe("Known.", final="Forty-two."))
    term = await terminals(ws_url(server))
    await term.expect(r"you> ")
    term.type("The answer?\r")

    await term.expect(r"↻ the model call failed \(.+\); attempt 2 of 2 in \d+\.\d s\n")
    await term.expect(r"reasoning: weigh the options\n")
    await term.expect(r"\[step 1\] thinking: Simple enough\.\n")
    await term.expect(r"answer:\nForty-two\.\n\(finished in 1 step\)\n")
    assert "answer (" not in term.text  # the streamed answer is not printed twice


async def test_a_question_from_the_agent_is_answered_inline(
    server: Any, fake_llm: FakeLLM, terminals: Any
) -> None:
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Which city?"})))
    fake_llm.script("observe", observe("The user chose Paris.", final="Paris: noon."))
    term = await terminals(ws_url(server))
    await term.expect(r"you> ")
    term.type("What time is it where I am?\r")

    await term.expect(r"\? the agent asks: Which city\?\n")
    await term.expect(r"answer> ")
    term.type("Paris\r")
    await term.expect(r"observing: The user chose Paris\.")
    await term.expect(r"answer:\nParis: noon\.\n\(finished in 1 step\)\n")
    await term.expect(r"you> ")
    observed = await fake_llm.wait_for("observe")
    assert [m["content"] for m in observed.body["messages"] if m["role"] == "tool"] == ["Paris"]


async def test_ctrl_c_stops_a_run_and_a_second_ctrl_c_quits(
    server: Any, fake_llm: FakeLLM, terminals: Any
) -> None:
    hanging = Reply(chunks=["Thinking", " slowly"], hang_after=2)
    fake_llm.script("reason", hanging)
    term = await terminals(ws_url(server))
    await term.expect(r"you> ")
    term.type("Take your time\r")
    await term.expect(r"\[step 1\] thinking: Thinking slowly")

    term.type("\x03")  # Ctrl-C
    await term.expect(r"stopping the run… \(Ctrl-C again to quit\)")
    await term.expect(r"■ stopped by you at step 1\n")
    await term.expect(r"you> ")
    assert fake_llm.disconnects >= 1  # the model call in flight was cancelled

    term.type("Then answer now\r")  # the session is still usable
    await term.expect(r"answer:\nHere is the answer\.\n\(finished in 1 step\)\n")
    await term.expect(r"you> ")

    fake_llm.script("reason", Reply(chunks=["Again"], hang_after=1))
    term.type("And slowly again\r")
    await term.expect(r"thinking: Again")
    term.type("\x03")
    await term.expect(r"stopping the run")
    term.type("\x03")
    assert await term.exit_code() == 130
    await term.expect(r"resume it with: agent-server chat --url \S+ --session \w+")


async def test_resuming_a_session_shows_only_what_this_terminal_has_not_shown(
    server: Any, fake_llm: FakeLLM, terminals: Any, tmp_path: Path
) -> None:
    fake_llm.script(
        "observe",
        observe("ok", final="First answer."),
        observe("ok", final="Second answer."),
        observe("ok", final="Third answer."),
    )
    first = await terminals(ws_url(server))
    session_id = (await first.expect(r"session (\w+) \(new\)")).group(1)
    await first.expect(r"you> ")
    first.type("one\r")
    await first.expect(r"First answer\.")
    await first.expect(r"you> ")
    first.type("\x04")
    assert await first.exit_code() == 0
    state = json.loads((tmp_path / "state" / "agent-server" / "terminal.json").read_text())
    assert state[session_id] > 0

    # Meanwhile another client runs in the same session.
    async with await server.client(session_id=session_id) as other:
        await other.recv()
        await other.run("two")

    again = await terminals(ws_url(server), "--session", session_id)
    await again.expect(rf"session {session_id} \(resumed\)")
    await again.expect(r"replaying \d+ event\(s\) not shown here yet")
    await again.expect(r"answer:\nSecond answer\.\n\(finished in 1 step\)\n")
    await again.expect(r"you> ")
    again.type("three\r")
    await again.expect(r"Third answer\.")
    await again.expect(r"you> ")
    again.type("\x04")
    assert await again.exit_code() == 0
    assert "First answer." not in again.text  # shown by the first terminal: not twice

    # A terminal that has never shown this session replays all of it.
    fresh = await terminals(
        ws_url(server), "--session", session_id, state_dir=tmp_path / "other-state"
    )
    await fresh.expect(r"First answer\.")
    await fresh.expect(r"Second answer\.")
    await fresh.expect(r"Third answer\.")
    await fresh.expect(r"you> ")
    fresh.type("\x04")
    assert await fresh.exit_code() == 0


async def test_an_unknown_session_or_server_is_a_clear_error(server: Any, terminals: Any) -> None:
    term = await terminals(ws_url(server), "--session", "no-such-session")
    await term.expect(r"! there is no session no-such-session on this server")
    assert await term.exit_code() == 1
    closed = await terminals("ws://127.0.0.1:9/ws")
    await closed.expect(r"! cannot connect to ws://127\.0\.0\.1:9/ws")
    assert await closed.exit_code() == 1


async def test_an_open_question_can_be_answered_after_resuming(
    server: Any, fake_llm: FakeLLM, terminals: Any
) -> None:
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Which city?"})))
    fake_llm.script("observe", observe("ok", final="Lyon it is."))
    first = await terminals(ws_url(server))
    session_id = (await first.expect(r"session (\w+) \(new\)")).group(1)
    await first.expect(r"you> ")
    first.type("Where?\r")
    await first.expect(r"answer> ")
    first.type("\x04")
    await first.expect(r"\(input ended: the question stays open\)")
    assert await first.exit_code() == 0

    again = await terminals(ws_url(server), "--session", session_id)
    await again.expect(r"\(resumed\)")
    await again.expect(r"\? the agent asks: Which city\?\n")
    await again.expect(r"answer> ")
    again.type("Lyon\r")
    await again.expect(r"answer:\nLyon it is\.\n\(finished in 1 step\)\n")
    await again.expect(r"you> ")


async def test_a_call_that_needs_approval_is_asked_y_or_n(
    server_factory: Any, fake_llm: FakeLLM, terminals: Any
) -> None:
    fake_llm.script(
        "act",
        act(FakeToolCall("get_current_time", {"timezone": "UTC"})),
        act(FakeToolCall("get_current_time", {"timezone": "Asia/Tokyo"})),
    )
    fake_llm.script("observe", observe("Got UTC."), observe("Declined.", final="No time for you."))
    async with server_factory(tools={"approval": ["get_current_time"]}) as s:
        term = await terminals(ws_url(s))
        await term.expect(r"you> ")
        term.type("What time is it?\r")
        await term.expect(r'\? approve this call: get_current_time \{"timezone": "UTC"\}\n')
        await term.expect(r"approve\? \[y/n reason\] ")
        term.type("maybe\r")
        await term.expect(r"\(answer y to run the call, or n \[reason\] to decline it\)")
        term.type("y\r")
        await term.expect(r'✓ result \(\d+ ms\): \{"timezone": "UTC"')
        await term.expect(r'\? approve this call: get_current_time \{"timezone": "Asia/Tokyo"\}')
        term.type("n not Tokyo\r")
        await term.expect(r"✗ error: The user declined: not Tokyo\.")
        await term.expect(r"answer:\nNo time for you\.\n\(finished in 2 steps\)\n")
        await term.expect(r"you> ")


async def test_piped_input_waits_for_its_run_and_says_so_once(
    server: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    # `printf 'question\n' | agent-server chat`: input ends before the run does. The note
    # that the client waits was printed again after every frame, splitting each token onto a
    # line of its own.
    fake_llm.script("reason", reason("I know this one.", finish=True, delay_s=0.02))
    fake_llm.script("observe", observe("Easy.", final="It is noon.", delay_s=0.02))
    text = await piped_chat(server, b"What time is it?\n", tmp_path, NO_COLOR="1")
    assert text.count("(input ended: waiting for the run to finish)") == 1, text
    assert "It is noon." in text


@pytest.mark.parametrize(
    ("url", "token", "hint"),
    [
        ("ws://127.0.0.1:8765/ws", None, "agent-server chat --session s1"),
        ("http://127.0.0.1:8765", None, "agent-server chat --session s1"),  # the same server
        (
            "ws://10.0.0.5:9000/ws",
            None,
            "agent-server chat --url ws://10.0.0.5:9000/ws --session s1",
        ),
        ("ws://h:9000/ws", "tok-secret-123456", "chat --url ws://h:9000/ws --session s1 --token …"),
        (
            "ws://h:9000/ws?token=tok-secret-123456",
            None,
            "--url ws://h:9000/ws --session s1 --token …",
        ),
        ("wss://me:tok-secret-123456@h/ws", None, "--url 'wss://me:…@h/ws' --session s1"),
    ],
)
def test_the_resume_hint_names_the_server_but_never_the_token(
    url: str, token: str | None, hint: str
) -> None:
    # It dropped --url, so the command it printed resumed on the default server instead.
    from client.terminal import resume_command

    shown = resume_command(url, "s1", token)
    assert shown.endswith(hint) and "tok-secret" not in shown


MARKDOWN_ANSWER = (
    "Run this:\n\n```python\nprint('hi')\n```\n\n| city | offset |\n| --- | --- |\n"
    "| Tokyo | +09:00 |"
)


async def test_a_terminal_renders_the_answer_and_shows_what_works_and_for_how_long(
    server: Any, fake_llm: FakeLLM, terminals: Any
) -> None:
    # Markdown came out raw (fences, pipes), and a phase that printed nothing (Act) showed no
    # sign of life for minutes (issue 46, item 12).
    fake_llm.script("reason", reason("I know this.", finish=False))
    fake_llm.script("act", Reply(hang_after=0))  # the model writes its tool call, slowly
    term = await terminals(ws_url(server))
    await term.expect(r"you> ")
    term.type("Show me\r")
    await term.expect(r"\[step 1\] thinking: I know this\.\n")
    seen = re.compile(r"\r\x1b\[K(?:\x1b\[[0-9;]*m)*[⠀-⣿] step 1 · acting · (\d+) s")
    async with asyncio.timeout(10):
        while len({m.group(1) for m in seen.finditer(term.raw.decode("utf-8", "replace"))}) < 2:
            term.changed.clear()
            await term.changed.wait()  # the timer moves while nothing else happens
    term.type("\x03")  # stop it
    await term.expect(r"■ stopped by you at step 1\n")
    await term.expect(r"you> ")

    fake_llm.script("reason", reason("Easy.", finish=True))
    fake_llm.script("observe", observe("Done.", final=MARKDOWN_ANSWER))
    term.type("Tokyo is at +09:00; show it again\r")  # the answer's figure is the task's
    await term.expect(r"answer:\nRun this:\n")
    await term.expect(r"print\('hi'\)")
    await term.expect(r" city +offset *\n ─+ *\n Tokyo +\+09:00")
    await term.expect(r"\(finished in 1 step\)\n")
    assert "```" not in term.text and "| city" not in term.text


async def test_piped_output_keeps_the_raw_markdown_and_no_status_line(
    server: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script("reason", reason("Easy.", finish=True))
    fake_llm.script("observe", observe("Done.", final=MARKDOWN_ANSWER))
    text = await piped_chat(server, b"Show me Tokyo at +09:00\n", tmp_path)
    assert MARKDOWN_ANSWER in text  # as the model wrote it, for a file or a script
    assert "\x1b" not in text and "⠋" not in text


async def test_versions_are_listed_switched_edited_and_regenerated(
    server: Any, fake_llm: FakeLLM, terminals: Any
) -> None:
    """Versions of a turn (issue 46, item 2): `/versions`, `/show`, `/edit` and `/regen`."""
    fake_llm.script(
        "chat",
        Reply(chunks=["Paris."]),
        Reply(chunks=["Rome."]),
        Reply(chunks=["Madrid."]),
        Reply(chunks=["Still Paris."]),
    )
    async with await server.client() as c:  # a chat-mode conversation of two turns
        session = (await c.recv())["session_id"]
        await c.run("Capital of France?", agent_mode=False)
        await c.run("Capital of Italy?", agent_mode=False)
    term = await terminals(ws_url(server), "--session", session)
    await term.expect(r"you> ")
    term.type("/edit 2 Capital of Spain?\r")
    await term.expect(r"Madrid\.")
    await term.expect(r"you> ")
    # a chat-mode call (as the turn ran), which reads the first turn, not Italy's
    requests = [r for r in fake_llm.requests if r.phase == "chat"]
    read = [m["content"] for m in requests[-1].body["messages"][1:]]
    assert len(requests) == 3 and read == ["Capital of France?", "Paris.", "Capital of Spain?"]

    term.type("/versions\r")
    await term.expect(r"1\. Capital of France\?\n")
    await term.expect(r"2\. Capital of Spain\?  ‹2/2›\n")
    await term.expect(r"2\.1 Capital of Italy\?\n")
    await term.expect(r"2\.2 Capital of Spain\?  ← shown\n")
    term.type("/show 2.1\r")
    await term.expect(r"another version is shown now")
    term.type("/versions\r")
    await term.expect(r"2\. Capital of Italy\?  ‹1/2›\n")

    term.type("/regen 1\r")
    await term.expect(r"Still Paris\.")
    await term.expect(r"you> ")
    term.type("/versions\r")
    await term.expect(r"1\. Capital of France\?  ‹2/2›\n")
    await term.expect(r"1\.2 Capital of France\?  ← shown\n")
    term.type("/show 9.1\r")
    await term.expect(r"! there is no turn 9")
    term.type("/show two\r")
    await term.expect(r"usage: /versions · /show TURN\.VERSION")
    term.type("\x04")
    assert await term.exit_code() == 0
