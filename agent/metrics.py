"""Metric: every counter a run or the server increments, named once.

A run counts into `RunContext.metrics` (a `Counter[Metric]` the host shares across the runs
of a tenant); GET /metrics serves the counts as JSON keyed by these names, or as Prometheus
text (`agent_server_<name>_total`, failures as one counter labelled by error code).
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum

__all__ = ["Metric", "Metrics"]


class Metric(StrEnum):
    RUNS_STARTED = "runs_started"
    RUNS_FAILED_LLM_ERROR = "runs_failed_llm_error"
    RUNS_FAILED_STORAGE_ERROR = "runs_failed_storage_error"
    RUNS_FAILED_INTERNAL_ERROR = "runs_failed_internal_error"
    RUNS_OVER_BUDGET = "runs_over_budget"
    RUNS_STUCK = "runs_stuck"
    VERIFICATIONS = "verifications"
    VERIFICATIONS_NOT_DONE = "verifications_not_done"
    VERIFY_UNREADABLE = "verify_unreadable"
    ANSWERS_UNGROUNDED = "answers_ungrounded"
    ACT_TEXTS_UNGROUNDED = "act_texts_ungrounded"
    TEXT_TOOL_CALLS = "text_tool_calls"
    SCHEMA_TOOL_CALLS = "schema_tool_calls"
    SPRAYED_CALLS_DROPPED = "sprayed_calls_dropped"
    NATIVE_TOOL_CALLS = "native_tool_calls"
    REPLIES_LOOPING = "replies_looping"
    CONTROL_BLOCK_LOOSE = "control_block_loose"
    CONTROL_BLOCK_RETRIES = "control_block_retries"
    CONTROL_BLOCK_FALLBACKS = "control_block_fallbacks"
    REPLIES_CUT = "replies_cut"
    RESEARCH_FAILURES = "research_failures"
    CONTEXT_OVERFLOW_RETRIES = "context_overflow_retries"
    CONTEXT_TRIMS = "context_trims"
    REPEATED_FAILING_CALLS_REFUSED = "repeated_failing_calls_refused"

    @classmethod
    def run_failed(cls, code: str) -> Metric:
        """The counter of runs that ended with the error `code` (ValueError if none)."""
        return cls(f"{_FAILED}{code}")

    @property
    def failure_code(self) -> str | None:
        """The error code this counter counts runs failed with, or None."""
        return self.value.removeprefix(_FAILED) if self.value.startswith(_FAILED) else None

    @property
    def help(self) -> str:
        return _HELP.get(self, self.value.replace("_", " ").capitalize() + ".")


_FAILED = "runs_failed_"

_HELP = {
    Metric.RUNS_STARTED: "Runs started.",
    Metric.RUNS_OVER_BUDGET: "Runs that reached their token or cost budget.",
    Metric.RUNS_STUCK: "Runs ended because their last steps only repeated failed calls.",
    Metric.VERIFICATIONS: "Finish verifications made before a run may end.",
    Metric.VERIFICATIONS_NOT_DONE: "Verifications that sent the run into another step.",
    Metric.VERIFY_UNREADABLE: "Verification replies that could not be read.",
    Metric.ANSWERS_UNGROUNDED: "Answers sent back: they stated figures no tool returned.",
    Metric.ACT_TEXTS_UNGROUNDED: "Act replies that stated figures no tool returned, not a call.",
    Metric.TEXT_TOOL_CALLS: "Tool calls read from the model's text rather than its tool calls.",
    Metric.SCHEMA_TOOL_CALLS: "Tool calls Act asked for as JSON of the call schema.",
    Metric.SPRAYED_CALLS_DROPPED: "Tool calls dropped: one reply called most offered tools.",
    Metric.NATIVE_TOOL_CALLS: "Tool calls the model made as tool calls, as the API intends.",
    Metric.REPLIES_LOOPING: "Replies closed because they went round in circles.",
    Metric.CONTROL_BLOCK_LOOSE: "Control blocks read from loosely formatted text.",
    Metric.CONTROL_BLOCK_RETRIES: "Model calls repeated for a missing control block.",
    Metric.CONTROL_BLOCK_FALLBACKS: "Phases that went on without a control block.",
    Metric.REPLIES_CUT: "Replies closed early: a repeated block, or past reply_max_chars.",
    Metric.RESEARCH_FAILURES: "Research steps that failed.",
    Metric.CONTEXT_OVERFLOW_RETRIES: "Calls sent again, shortened, after a context overflow.",
    Metric.CONTEXT_TRIMS: "Prompts shortened to fit the token budget.",
    Metric.REPEATED_FAILING_CALLS_REFUSED: "Identical failing tool calls refused.",
}

Metrics = Counter[Metric]
