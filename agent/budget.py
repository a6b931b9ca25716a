"""Budget: what a run may spend, in tokens or money, and what it has spent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as validated_dataclass

from agent.messages import Usage

__all__ = ["Budget", "Price"]


@validated_dataclass(frozen=True, slots=True, config=ConfigDict(extra="forbid"))
class Price:
    """Dollars (or any currency) per million tokens: also the `[llm.prices."model"]` setting."""

    prompt_per_million: Annotated[float, Field(ge=0)]
    completion_per_million: Annotated[float, Field(ge=0)]


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits of one run; 0 means no limit. Checked before every LLM call."""

    max_tokens: int = 0
    max_cost: float = 0.0
    price: Price | None = None

    def cost(self, usage: Usage) -> float | None:
        if self.price is None:
            return None
        return (
            usage.prompt_tokens * self.price.prompt_per_million
            + usage.completion_tokens * self.price.completion_per_million
        ) / 1_000_000

    def exhausted(self, usage: Usage) -> bool:
        if self.max_tokens and usage.total_tokens >= self.max_tokens:
            return True
        cost = self.cost(usage)
        return bool(self.max_cost and cost is not None and cost >= self.max_cost)

    def report(self, usage: Usage) -> dict[str, float | int]:
        """The run's usage as events carry it: tokens, calls, and cost when priced."""
        out: dict[str, float | int] = dict(usage.as_dict())
        cost = self.cost(usage)
        if cost is not None:
            out["cost"] = round(cost, 6)
        return out
