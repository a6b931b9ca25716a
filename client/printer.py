"""How the terminal client shows a run: one readable line per event, streamed text growing
in place, and on a terminal the answer rendered as Markdown and a status line
(client/display.py). Model text is cleaned of control characters before it is written."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any, TextIO

from client.display import ERASE, Activity, render_markdown

__all__ = ["Printer", "Style", "approval_text", "clean"]

Frame = dict[str, Any]
STOP_REASONS = {
    "user": "stopped by you",
    "input_timeout": "stopped: the question was not answered in time",
    "shutdown": "stopped: the server is shutting down",
    "interrupted": "interrupted: the server restarted during the run",
}
COMPLETIONS = {
    "finished": "finished",
    "max_steps": "step limit reached",
    "budget": "budget ran out",
    "stuck": "stopped: the same thing kept failing",
}
# C0 controls but tab and newline, DEL and C1: model text must not drive the terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    return _CONTROL.sub("", text)


class Style:
    """ANSI styling, only for a terminal and only without NO_COLOR."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO) -> Style:
        return cls(stream.isatty() and not os.environ.get("NO_COLOR"))

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def ok(self, text: str) -> str:
        return self._wrap("32", text)

    def bad(self, text: str) -> str:
        return self._wrap("31", text)

    def ask(self, text: str) -> str:
        return self._wrap("1;33", text)

    def accent(self, text: str) -> str:
        return self._wrap("1;36", text)


class Printer:
    """Write run events as readable lines; streamed text grows in place. On a `terminal`,
    answers are rendered as Markdown once complete, and `tick` draws the status line."""

    def __init__(self, out: TextIO, style: Style, terminal: bool = False) -> None:
        self.out = out
        self.s = style
        self.terminal = terminal
        self.activity = Activity()
        self.status_shown = False  # the status line is on screen, below the last full line
        self.answers: dict[str, str] = {}  # run -> its answer so far, not printed yet (terminal)
        self.open_tools: set[str] = set()
        self.stream_key: tuple[str, str, int] | None = None  # (run, phase, step) streaming now
        self.held = ""  # trailing whitespace of the stream, written only if more text follows
        self.streamed: set[tuple[str, str, int]] = set()
        self.drafted: set[str] = set()  # runs whose answer is streaming (a draft until completion)
        self.at_prompt = False  # a prompt is shown and the cursor waits after it

    def write(self, text: str) -> None:
        if self.status_shown:
            self.status_shown = False
            self.out.write(ERASE)
        if self.at_prompt:
            self.at_prompt = False
            text = "\n" + text  # news while the prompt waits: start below it
        self.out.write(text)
        self.out.flush()

    def prompt(self, text: str) -> None:
        self.end_stream()
        self.write(text)
        self.at_prompt = True

    def line(self, text: str = "") -> None:
        self.end_stream()
        self.write(text + "\n")

    def tick(self) -> None:
        """Redraw the status line: only on a terminal, between full lines, off the prompt."""
        if not self.terminal or self.stream_key is not None or self.at_prompt:
            return
        status = self.activity.line()
        if status is None:
            if self.status_shown:
                self.write("")
            return
        self.out.write(ERASE + self.s.dim(status))
        self.out.flush()
        self.status_shown = True

    def markdown(self, text: str) -> None:
        """An answer: rendered on a terminal, else as the raw text."""
        text = clean(text).strip()
        if self.terminal:
            self.end_stream()
            self.write(render_markdown(text, color=self.s.enabled))
        else:
            self.line(text)

    def end_stream(self) -> None:
        if self.stream_key is not None:
            self.stream_key, self.held = None, ""
            self.write("\n")

    def stream(
        self, key: tuple[str, str, int], header: str, delta: str, paint: Callable[[str], str] = str
    ) -> None:
        if self.stream_key != key:
            self.end_stream()
            self.stream_key = key
            self.streamed.add(key)
            self.write(header)
        text = self.held + clean(delta)
        body = text.rstrip()
        self.held = text[len(body) :]
        if body:
            self.write(paint(body))

    def full(self, key: tuple[str, str, int], header: str, content: str) -> None:
        """The complete text of a streamed block: written only if no delta showed it."""
        if key in self.streamed:
            if self.stream_key == key:
                self.end_stream()
            return
        self.line(header + clean(content).strip())

    def frame(self, f: Frame) -> None:
        kind = f.get("update_type") or f["type"]
        run, step = str(f.get("run_id")), int(f.get("step") or 0)
        self.follow(kind, f, step)
        if self.terminal and self.hold_answer(kind, f, run):
            return
        s = self.s
        thinking = s.accent(f"[step {step}]") + " " + s.dim("thinking: ")
        observing = "  " + s.dim("observing: ")
        if kind == "agent_start":
            self.line(s.dim(f"▶ agent run (up to {f.get('max_steps')} steps)"))
        elif kind == "agent_reason_delta":
            self.stream((run, "reason", step), thinking, str(f.get("delta", "")))
        elif kind == "agent_reason":
            self.full((run, "reason", step), thinking, str(f.get("content", "")))
        elif kind == "tool_start":
            args = json.dumps(f.get("arguments"), ensure_ascii=False)
            self.line(f"  → tool {s.bold(clean(str(f.get('tool_name'))))} {clean(args)}")
        elif kind == "tool_complete":
            result = json.dumps(f.get("result"), ensure_ascii=False)
            self.line(f"  {s.ok('✓ result')} ({f.get('duration_ms')} ms): {_short(result)}")
        elif kind == "tool_error":
            self.line(f"  {s.bad('✗ error')}: {_short(str(f.get('error')))}")
        elif kind == "agent_request_input":
            self.line(f"  {s.ask('? the agent asks:')} {clean(str(f.get('question')))}")
        elif kind == "agent_request_input_timeout":
            self.line("  " + s.bad("⌛ no answer in time"))
        elif kind == "agent_tool_approval":
            self.line(f"  {s.ask('? approve this call:')} {approval_text(f)}")
        elif kind == "agent_tool_approval_timeout":
            self.line("  " + s.bad("⌛ no decision in time"))
        elif kind == "agent_observe_delta":
            self.stream((run, "observe", step), observing, str(f.get("delta", "")))
        elif kind == "agent_observe":
            self.full((run, "observe", step), observing, str(f.get("content", "")))
        elif kind == "agent_stopped":
            reason = STOP_REASONS.get(str(f.get("reason")), f"stopped ({f.get('reason')})")
            self.line(s.bad(f"■ {reason}" + (f" at step {step}" if step else "")))
        elif kind == "agent_reasoning_delta":
            key = (run, f"reasoning {f.get('phase')}", step)
            self.stream(key, "  " + s.dim("reasoning: "), str(f.get("delta", "")), s.dim)
        elif kind == "agent_llm_retry":
            self.line("  " + s.dim(_retry(f)))
        elif kind == "agent_answer_delta":
            self.drafted.add(run)
            self.stream((run, "answer", step), s.bold("answer:") + "\n", str(f.get("delta", "")))
        elif kind == "agent_verify" and not f.get("done") and run in self.drafted:
            self.drafted.discard(run)
            self.line("  " + s.dim("(that answer was a draft: the agent goes on)"))
        elif kind == "agent_completion":
            summary = _summary(f)
            if run in self.drafted:  # the answer is on screen already
                self.drafted.discard(run)
                self.line(s.dim(f"({summary})"))
            else:
                self.line(s.bold(f"answer ({summary}):"))
                self.line(clean(str(f.get("final_answer", ""))).strip())
        elif kind == "chat_delta":
            self.stream((run, "chat", 0), s.bold("assistant: "), str(f.get("delta", "")))
        elif kind == "chat_response":
            self.full((run, "chat", 0), s.bold("assistant: "), str(f.get("content", "")))
        elif kind == "error":
            self.line(s.bad(f"! {clean(str(f.get('message')))} ({f.get('code')})"))
        elif kind == "response_complete":
            self.end_stream()

    def follow(self, kind: str, f: Frame, step: int) -> None:
        """Keep the status line's phase: what works now, with no line of its own yet."""
        where = f"step {step} · " if step else ""
        if kind in ("agent_reason_delta", "agent_observe_delta", "agent_reasoning_delta"):
            self.activity.count()
        if kind == "tool_start":
            self.open_tools.add(str(f.get("tool_call_id")))
            self.activity.set(f"{where}running {clean(str(f.get('tool_name')))}")
        elif kind in ("tool_complete", "tool_error"):
            self.open_tools.discard(str(f.get("tool_call_id")))
            if not self.open_tools:
                self.activity.set(f"{where}observing")
        elif kind in _PHASE_AFTER:
            label = _PHASE_AFTER[kind]
            if kind == "agent_user_message" and f.get("agent_mode") is False:
                label = "writing"
            self.activity.set(None if label is None else where + label)

    def hold_answer(self, kind: str, f: Frame, run: str) -> bool:
        """On a terminal the answer is rendered whole: gather its pieces (the status line
        counts them), print it when it is complete or cut off. True: the frame is handled."""
        if kind in ("agent_answer_delta", "chat_delta"):
            self.answers[run] = self.answers.get(run, "") + str(f.get("delta", ""))
            self.activity.set("writing the answer" if kind == "agent_answer_delta" else "writing")
            self.activity.count()
            return True
        if kind == "agent_verify" and not f.get("done"):
            self.answers.pop(run, None)  # a draft the agent goes on from
            return False
        if kind == "chat_response":
            self.answers.pop(run, None)
            self.line(self.s.bold("assistant:"))
            self.markdown(str(f.get("content", "")))
            return True
        if kind == "agent_completion":
            self.answers.pop(run, None)
            self.drafted.discard(run)
            self.line(self.s.bold("answer:"))
            self.markdown(str(f.get("final_answer", "")))
            self.line(self.s.dim(f"({_summary(f)})"))
            return True
        if kind in ("agent_stopped", "error", "response_complete") and self.answers.get(run):
            self.line(self.s.bold("answer (cut off):"))
            self.markdown(self.answers.pop(run))
        return False


# The phase that starts after each event (None: nothing works; the user or the end is next).
_PHASE_AFTER: dict[str, str | None] = {
    "agent_user_message": "starting",
    "agent_turn_start": "thinking",
    "agent_reason": "acting",
    "agent_user_answer": "acting",
    "agent_observe": "working",
    "agent_llm_retry": "waiting to retry the model",
    "agent_request_input": None,
    "agent_tool_approval": None,
    "agent_stopped": None,
    "agent_completion": None,
    "chat_response": None,
    "response_complete": None,
}


def _summary(f: Frame) -> str:
    steps = int(f.get("steps") or 0)
    how = COMPLETIONS.get(str(f.get("stop_reason")), str(f.get("stop_reason")))
    return f"{how} in {steps} step{'' if steps == 1 else 's'}"


def _retry(f: Frame) -> str:
    delay_s = int(f.get("delay_ms") or 0) / 1000
    return (
        f"↻ the model call failed ({clean(str(f.get('reason')))}); "
        f"attempt {f.get('attempt')} of {f.get('max_attempts')} in {delay_s:.1f} s"
    )


def _short(text: str, limit: int = 400) -> str:
    text = clean(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def approval_text(f: Frame) -> str:
    arguments = json.dumps(f.get("arguments") or {}, ensure_ascii=False)
    return clean(f"{f.get('tool_name')} {_short(arguments)}")
