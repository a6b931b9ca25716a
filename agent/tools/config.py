"""Configuration of the built-in tools: the `[tools]` table and its sub-tables.

These models live in agent/ so the tool factories can take them directly; the server's
settings layer embeds them (TOML, env, flags) and fills the secrets from the environment.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from agent.run import RunLimits
from agent.tools.ssrf import parse_allow_entry

__all__ = [
    "McpServerConfig",
    "MemoryConfig",
    "ToolsConfig",
    "WebFetchConfig",
    "WebSearchConfig",
]

_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$")


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


class McpServerConfig(_Config):
    """`[tools.mcp.<name>]`: one MCP server, started over stdio (`command`) or reached over
    streamable HTTP (`url`). Header values come from environment variables (`headers_env`),
    never from the file."""

    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Path | None = None
    url: str = ""
    headers_env: dict[str, str] = Field(
        default_factory=dict, description="HTTP header name -> environment variable with its value"
    )
    # Filled by the settings layer from headers_env; never in TOML.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    tenants: tuple[str, ...] = Field((), description="Tenants that may use it; empty: all.")
    approval: Literal["never", "destructive", "always"] = "destructive"
    start_timeout_s: float = Field(20.0, gt=0)
    health_interval_s: float = Field(10.0, gt=0)
    restart_backoff_s: float = Field(1.0, gt=0)
    restart_backoff_max_s: float = Field(60.0, gt=0)
    max_message_bytes: int = Field(
        8 * 1024 * 1024,
        ge=64 * 1024,
        description="A longer message (a stdio line, an HTTP JSON body or server-sent event) is "
        "not parsed; the call it answers fails alone.",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("give exactly one of command (stdio) or url (streamable HTTP)")
        if self.url and not self.url.startswith(("http://", "https://")):
            scheme = self.url.partition(":")[0][:20]  # never the rest: it may hold a password
            raise ValueError(f"url must start with http:// or https:// (got {scheme!r}: ...)")
        if self.command and self.headers_env:
            raise ValueError("headers_env needs url: stdio servers take env instead")
        return self


class ToolsConfig(_Config):
    """`[tools]`: the names offered to the model, and each configurable tool's table."""

    enabled: tuple[str, ...] = ("get_current_time",)
    modules: tuple[str, ...] = Field(
        (), description="Python modules whose @tool functions become tools (docs/tools.md)."
    )
    # Filled by the settings layer: the config file's folder, searched first for modules.
    modules_dir: Path | None = None
    approval: tuple[str, ...] = Field((), description="Tools that need the user's approval.")
    approval_timeout_s: float = Field(RunLimits().approval_timeout_s, gt=0)  # the run's own
    mcp: dict[str, McpServerConfig] = Field(default_factory=dict)
    web_search: WebSearchConfig = WebSearchConfig()
    web_fetch: WebFetchConfig = WebFetchConfig()
    memory: MemoryConfig = MemoryConfig()

    @field_validator("mcp")
    @classmethod
    def _server_names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in value:
            if not _SERVER_NAME.match(name) or "__" in name:
                raise ValueError(
                    f"MCP server name {name!r}: use 1-24 letters, digits, '-' or single '_' "
                    "(its tools are named <server>__<tool>)"
                )
        return value
