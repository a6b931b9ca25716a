"""EchoGate: keep a small model's copy of our own prompts from reaching the person.

Small models (Qwen 0.5B on llama.cpp, for one) sometimes answer a phase with its instructions,
word for word: an Observe that reads "A sentence or two for the person, then the JSON block…",
a max-steps answer that is the summary directive. Shown, that is our prompt posing as the
model's text, and as a final answer it hides what the run found.

The gate holds a phase's first words back only while they are a copy of the prompts, word for
word from where the text starts; genuine text stops matching within a word or two and goes out
at once. Once `ECHO_WORDS` words have matched, the phase's text is a copy: nothing more of it is
shown, and the caller falls back as for a phase that wrote no text.
"""

from __future__ import annotations

__all__ = ["ECHO_WORDS", "EchoGate"]

ECHO_WORDS = 8  # this many words copied in a row, from the start, make a phase's text a copy


class EchoGate:
    """Feed the text a phase may show; get back what to show now."""

    def __init__(self, prompts: str) -> None:
        self._source = f" {_normalized(prompts)} "
        self._held = ""
        self._open = False  # the text is the model's own: everything passes
        self.echoed = False  # the text is a copy of the prompts: nothing passes

    def feed(self, text: str) -> str:
        if self._open or not text:
            return text
        if self.echoed:
            return ""
        self._held += text
        said = _normalized(self._held)
        if not said:
            return ""  # white space only so far
        if f" {said}" not in self._source:
            return self._release()
        if len(said.split()) >= ECHO_WORDS:
            self.echoed = True
        return ""

    def finish(self) -> str:
        """The end of the phase: a short text that matched so far is the model's own."""
        return "" if self.echoed or self._open else self._release()

    def _release(self) -> str:
        self._open = True
        held, self._held = self._held, ""
        return held


def _normalized(text: str) -> str:
    return " ".join(text.lower().split())
