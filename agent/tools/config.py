"""Configuration of the built-in tools: the `[tools]` table and its sub-tables.

These models live in agent/ so the tool factories can take them directly; the server's
settings layer embeds them (TOML, env, flags) and fills the secrets from the environment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from agent.tools.ssrf import parse_allow_entry

__all__ = ["MemoryConfig", "ToolsConfig", "WebFetchConfig", "WebSearchConfig"]


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WebSearchConfig(_Config):
    """`[tools.web_search]`: which provider answers, and how often."""

    provider: Literal["searxng", "brave"] | None = None
    base_url: str = Field("", description="SearXNG: required; Brave: default API host.")
    api_key_env: str = "BRAVE_SEARCH_API_KEY"
    # Filled by the settings layer from the variable named by api_key_env; never in TOML.
    api_key: SecretStr = SecretStr("")
    rate_limit_per_minute: int = Field(30, ge=1, le=10_000)
    cache_ttl_s: float = Field(600.0, ge=0)
    cache_size: int = Field(512, ge=0, le=100_000)
    max_results: int = Field(8, ge=1, le=20)
    timeout_s: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _searxng_needs_url(self) -> WebSearchConfig:
        if self.provider == "searxng" and not self.base_url:
            raise ValueError('provider "searxng" needs base_url, e.g. "http://127.0.0.1:8888"')
        return self


class WebFetchConfig(_Config):
    """`[tools.web_fetch]`: the limits every fetch obeys, and where it may go."""

    allow_hosts: tuple[str, ...] = Field(
        (),
        description=(
            "Hosts reachable even though private or loopback: a name (ports 80 and 443 "
            "only) or name:port; an IP or CIDR (every port) or ip:port, [ipv6]:port, cidr:port."
        ),
    )
    max_bytes: int = Field(2_000_000, ge=1024)
    max_chars: int = Field(20_000, ge=100)
    timeout_s: float = Field(15.0, gt=0)
    max_redirects: int = Field(5, ge=0, le=20)
    max_retries: int = Field(2, ge=0, le=10)
    retry_backoff_s: float = Field(0.5, ge=0)
    retry_max_wait_s: float = Field(5.0, ge=0)
    user_agent: str = "agent-server/0.1 (web_fetch tool)"
    # Page text is extracted in worker processes (started on first use), each capped at
    # extract_memory_mb of address space and killed when the URL's timeout_s runs out.
    extract_workers: int = Field(2, ge=1, le=32)
    extract_memory_mb: int = Field(1024, ge=256)

    @field_validator("allow_hosts")
    @classmethod
    def _valid_entries(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            parse_allow_entry(entry)  # raises ValueError saying what is wrong
        return tuple(e.strip().lower() for e in value)


class MemoryConfig(_Config):
    """`[tools.memory]`: tier sizes and lifetimes of per-user long-term memories."""

    max_content_chars: int = Field(500, ge=20, le=4000)
    max_results: int = Field(10, ge=1, le=50)
    core_max: int = Field(8, ge=1)
    important_max: int = Field(12, ge=1)
    context_max: int = Field(6, ge=1)
    important_ttl_days: float = Field(90, gt=0)
    context_ttl_days: float = Field(30, gt=0)


class ToolsConfig(_Config):
    """`[tools]`: the names offered to the model, and each configurable tool's table."""

    enabled: tuple[str, ...] = ("get_current_time",)
    web_search: WebSearchConfig = WebSearchConfig()
    web_fetch: WebFetchConfig = WebFetchConfig()
    memory: MemoryConfig = MemoryConfig()
