"""ModelConfig: where the model is and how to ask it; `[llm]` in the settings extends it, so
each of these keys has its default here, once, and the adapter takes the section whole."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["ModelConfig"]


class ModelConfig(BaseModel):
    # inf passes every "> 0" check, then fails where it is used (a timeout)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    base_url: str = ""  # empty: OPENAI_BASE_URL, else OpenAI's own
    api_key: SecretStr = SecretStr("")
    model: str = Field("gpt-4o-mini", min_length=1)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    stream_usage: bool = True
    temperature: float | None = Field(None, ge=0, le=2)  # unset: the model server's default
    max_tokens: int | None = Field(None, ge=16)  # per call; unset: each phase's own bound
