"""Text a small model copied from its own instructions instead of writing its own.

Small models (0.5B to 3B) often fill a control block with a line of the prompt: a sentence of
guidance ("check facts, times and anything that can change with a tool before you answer") or
the JSON example's placeholder. Shown as the step's reasoning it reads as if the agent said
it, so where a block's text only stands in for text the model did not write, a copy is left
out.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

__all__ = ["EchoGate", "copied_from", "own_words", "word_trigrams"]

_WORD = re.compile(r"[a-z0-9]+")
_MIN_WORDS = 4  # "Done." or "Checking the time." may well be in a prompt and still be meant
_SHARE = 0.6  # of the text's word trigrams found in the prompt


def copied_from(text: str, *sources: str, descriptions: Sequence[str] = ()) -> bool:
    """True when most of `text`'s word trigrams appear in `sources`, or eight of its words in
    a row do, or a whole sentence of five words or more of `descriptions` (the tools'; they
    count among the sources too). A text of fewer than four words is never judged a copy."""
    return _copied(_WORD.findall(text.lower()), _Ours(sources, descriptions))


def _trigrams(words: list[str]) -> set[tuple[str, str, str]]:
    return set(zip(words, words[1:], words[2:], strict=False))


def word_trigrams(text: str) -> set[tuple[str, str, str]]:
    """Every three words in a row of `text`, as the copies here are judged."""
    return _trigrams(_WORD.findall(text.lower()))


class _Ours:
    """What a copy is judged against: the word trigrams of our texts, and the sentences of the
    tools' descriptions too short for a run of eight words ("Recall what you remember about
    the user" came back inside Qwen2.5-0.5B's list of the tools it would use). Only the
    descriptions': the other sources carry the date and the errors of failed calls, which an
    answer may well say in the same words ("there is no weather data for Atlantis")."""

    def __init__(self, sources: Sequence[str], descriptions: Sequence[str] = ()) -> None:
        self.grams = _trigrams(_WORD.findall(" ".join([*sources, *descriptions]).lower()))
        self.sentences = frozenset(
            tuple(words)
            for source in descriptions
            for sentence in _OUR_SENTENCE_END.split(source.lower())
            if _SHORTEST <= len(words := _WORD.findall(sentence)) < _RUN
        )

    def first_copy(self, words: Sequence[str]) -> tuple[int, int, bool]:
        """The run of our trigrams ending at the first copy in `words` (eight words of ours in
        a row, or a whole short sentence), else at the last word: (its trigrams, the index of
        its last word, whether it is a copy)."""
        run = 0
        for i, gram in enumerate(zip(words, words[1:], words[2:], strict=False)):
            run = run + 1 if gram in self.grams else 0
            if run >= _RUN - 2 or (run and self._sentence_ends(words, i + 2, run)):
                return run, i + 2, True
        return run, len(words) - 1, False

    def _sentence_ends(self, words: Sequence[str], last: int, run: int) -> bool:
        """Whether a whole short sentence of ours ends at `words[last]`, inside a run of `run`
        trigrams of ours ending there."""
        longest = min(run + 2, _RUN - 1, last + 1)
        return any(
            tuple(words[last + 1 - size : last + 1]) in self.sentences
            for size in range(_SHORTEST, longest + 1)
        )


def _copied(words: list[str], ours: _Ours) -> bool:
    """Most of the text's trigrams are ours, or eight words of ours stand in it in a row
    ("I will use the request_input function to ask the user a question and wait for the
    answer": a description carried in words of the model's own), or a whole sentence of ours
    of five words or more."""
    if len(words) < _MIN_WORDS:
        return False
    grams = _trigrams(words)
    if len(grams & ours.grams) >= _SHARE * len(grams):
        return True
    return ours.first_copy(words)[2]


_RUN = 8  # words of ours in a row that make a copy, whatever surrounds them
_SHORTEST = 5  # words of a sentence of ours that make a copy on their own
# Where a sentence of ours ends: a stop, a colon (a description's "Recall …: memories …"), a line.
_OUR_SENTENCE_END = re.compile(r"[.!?:]+(?=\s|$)|\n")


def own_words(text: str, *sources: str, descriptions: Sequence[str] = ()) -> str:
    """`text` without its sentences copied from `sources` (and `descriptions`, the tools'):
    what an `EchoGate` shows of it."""
    gate = EchoGate(*sources, descriptions=descriptions)
    return (gate.feed(text) + gate.finish()).strip()


class EchoGate:
    """Holds each sentence of a phase's streamed text until it shows whether the model is
    writing its own words or reading its instructions back (`copied_from`); a copied sentence
    is never shown. A sentence whose first eight words share no three-word run with the
    instructions passes on at once; one that shares a run is held to its end (or its
    fortieth word, so that a long unpunctuated line cannot leave the phase looking frozen)
    and judged then. Sentence by sentence, because a small model begins with words of its own
    and goes on in the instructions' (Qwen2.5-0.5B: "I will ask the user a question and wait
    for the answer. Use it only when you need information…", a tool's description)."""

    _HOLD_WORDS = 8
    _MAX_HELD_WORDS = 40

    def __init__(self, *sources: str, descriptions: Sequence[str] = ()) -> None:
        self._start(_Ours(sources, descriptions))

    def twin(self) -> EchoGate:
        """A fresh gate over the same texts, without counting their words again."""
        twin = object.__new__(EchoGate)
        twin._start(self._ours)
        return twin

    def _start(self, ours: _Ours) -> None:
        self._ours = ours
        self._sentence = ""  # the sentence under way, shown or not
        self._own: bool | None = None  # its verdict, once there is one
        self._after = _AfterPass(self._ours)  # the rest of a sentence that passed
        self.shown = ""  # everything let through
        self.dropped = False  # a sentence was left out as a copy

    @property
    def copy(self) -> bool:
        """Nothing but copies so far: the text is the instructions read back."""
        return self.dropped and not self.shown.strip()

    def feed(self, text: str) -> str:
        """What of `text` may be shown now."""
        out = []
        if self._sentence[-1:] in (".", "!", "?") and text[:1].isspace():
            out.append(self._close())  # the stop came at the end of the last piece
        while text:
            end = _SENTENCE_END.search(text)
            if end is None:
                out.append(self._add(text))
                break
            out.append(self._add(text[: end.end()]))
            out.append(self._close())
            text = text[end.end() :]
        return self._show("".join(out))

    def finish(self) -> str:
        """The end of the phase's text: what is still held, unless it is a copy."""
        return self._show(self._close())

    def _add(self, piece: str) -> str:
        self._sentence += piece
        if self._own is not None:  # judged: the rest of a passed sentence is still watched
            if not self._own:
                return ""
            shown = self._after.feed(piece)
            self.dropped = self.dropped or self._after.dropping
            return shown
        words = _WORD.findall(self._sentence.lower())  # at most the held words: bounded
        if len(words) >= self._HOLD_WORDS and not self._shares_a_run(words[: self._HOLD_WORDS]):
            self._own = True  # its first words are its own; the rest is watched for a copy
            spans = _WORD.finditer(self._sentence.lower())
            end = next(itertools.islice(spans, self._HOLD_WORDS - 1, None)).end()
            before = words[self._HOLD_WORDS - 2 : self._HOLD_WORDS]
            self._after = _AfterPass(self._ours, before)
            shown = self._sentence[:end] + self._after.feed(self._sentence[end:])
            self.dropped = self.dropped or self._after.dropping
            return shown
        elif len(words) >= self._MAX_HELD_WORDS:
            self._own = not _copied(words, self._ours)
            self.dropped = self.dropped or not self._own
        else:
            return ""
        return self._sentence if self._own else ""

    def _close(self) -> str:
        """The sentence ended: what of it is still to show."""
        sentence, own = self._sentence, self._own
        self._sentence, self._own = "", None
        if own is not None:
            return self._after.finish() if own else ""
        if _copied(_WORD.findall(sentence.lower()), self._ours):
            self.dropped = True
            return ""
        return sentence

    def _show(self, text: str) -> str:
        self.shown += text
        return text

    def _shares_a_run(self, words: list[str]) -> bool:
        return any(g in self._ours.grams for g in _trigrams(words))


# The end of a sentence: a stop followed by a space, or a line break.
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")


class _AfterPass:
    """The rest of a sentence whose first words were the model's own, shown as it comes but
    for a run of our words: held from its first three-word run of ours, left out with the
    rest of the sentence once eight words of ours stand in a row, shown when the run breaks
    first ("I will use the web_fetch function to get the weather, and the lookup_order
    function to look up a person in the user's address book by first name": Qwen2.5-0.5B
    carried a description in words of its own). What is held is a run of fewer than eight
    words and the word under way: bounded."""

    _MOST = 2000  # characters held without a word's end: shown (no run can be judged)

    def __init__(self, ours: _Ours, before: list[str] | None = None):
        self._ours = ours
        self._before = list(before or [])  # the last words shown, for runs across the cut
        self._held = ""
        self.dropping = False  # the rest of the sentence is left out

    def feed(self, piece: str) -> str:
        if self.dropping:
            return ""
        self._held += piece
        found = list(_WORD.finditer(self._held.lower()))
        if found and found[-1].end() == len(self._held):
            found.pop()  # a word that may go on in the next piece
        if len(self._held) > self._MOST and not found:
            return self._release(len(self._held))  # not a word: nothing to judge
        words = [*self._before, *(m.group() for m in found)]
        run, last, copy = self._ours.first_copy(words)  # the run ends at words[last]
        if not run:  # all of it, but a word that may go on
            end = found[-1].end() if found else 0
            partial = _WORD.search(self._held.lower(), end)
            return self._release(partial.start() if partial else len(self._held), found)
        index = last - run - 1 - len(self._before)  # the run's first word, if held
        shown = self._release(found[index].start(), found[:index]) if index > 0 else ""
        if copy:  # it and the rest of the sentence are left out
            self.dropping, self._held = True, ""
        return shown

    def finish(self) -> str:
        """The sentence ended: what is held is shown, unless its end was left out."""
        held, self._held = ("" if self.dropping else self._held), ""
        self.dropping, self._before = False, []
        return held

    def _release(self, end: int, words: Sequence[re.Match[str]] = ()) -> str:
        shown, self._held = self._held[:end], self._held[end:]
        self._before = [*self._before, *(m.group() for m in words)][-2:]
        return shown
