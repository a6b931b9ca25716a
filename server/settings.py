"""Settings: config.toml, then CLI flags, then `AGENT__SECTION__KEY` environment variables.

Parsed once, at startup, into frozen models; each component receives only its section.
Every wrong value is reported at once, with the key, what was expected and what was given.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.budget import Budget, Price
from agent.context import ContextLimits
from agent.run import RunLimits, Style
from agent.tools.config import McpServerConfig, ToolsConfig
from agent.validation import describe_errors

__all__ = [
    "AgentSettings",
    "AuthSettings",
    "ConfigError",
    "ContextSettings",
    "Identity",
    "LLMSettings",
    "Price",
    "ServerSettings",
    "Settings",
    "StorageSettings",
    "TelemetrySettings",
    "ToolSettings",
    "load_settings",
]


class ConfigError(Exception):
    """The configuration is unusable; the message says which key and why."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_DEFAULT_ORIGINS = ("http://127.0.0.1:8765", "http://localhost:8765")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    # Unset: the page's own origins on `port` (127.0.0.1 and localhost), so that serving on
    # another port does not refuse the bundled UI's WebSocket. Set: exactly the list given.
    allowed_origins: tuple[str, ...] = _DEFAULT_ORIGINS
    max_message_bytes: int = Field(1_048_576, ge=1024)
    ping_interval_s: float = Field(20.0, gt=0)
    ping_timeout_s: float = Field(20.0, gt=0)
    outbound_queue_size: int = Field(2048, ge=16)
    outbound_queue_bytes: int = Field(16 << 20, ge=2 << 20)  # frames of up to ~1 MiB each
    shutdown_timeout_s: float = Field(10.0, gt=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Hardening (docs/reliability.md, Security): open connections beyond the cap are answered
    # 503 and closed; a request head (the WebSocket handshake too) must arrive in time.
    max_connections: int = Field(4096, ge=1)
    # WebSockets one tenant may hold open; 0: half of max_connections when auth tokens are
    # configured (so one tenant cannot take every slot), else no cap of its own.
    max_sockets_per_tenant: int = Field(0, ge=0)
    request_timeout_s: float = Field(10.0, gt=0)
    write_timeout_s: float = Field(60.0, gt=0)  # an HTTP response's client reading nothing
    keep_alive_timeout_s: float = Field(5.0, gt=0)
    # Host headers served (DNS-rebinding defence); server.host is always added. "*" = any.
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")
    # Inbound WebSocket frames per connection: a burst, refilled at a steady rate; a client
    # past it gets `rate_limited` and is closed with 1008.
    max_messages_per_s: float = Field(20.0, gt=0)
    message_burst: int = Field(200, ge=1)

    @model_validator(mode="after")
    def _origins_follow_the_port(self) -> ServerSettings:
        # An explicit list equal to the defaults is still the operator's choice.
        if "allowed_origins" not in self.model_fields_set and self.port not in (8765, 0):
            origins = (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}")
            return self.model_copy(update={"allowed_origins": origins})
        return self


class LLMSettings(_Section):
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    api_key: SecretStr = SecretStr("")  # filled from the variable named by api_key_env
    model: str = Field("gpt-4o-mini", min_length=1)
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0, le=10)
    stream_usage: bool = True
    temperature: float | None = Field(None, ge=0, le=2)  # unset: the model server's default
    max_tokens: int | None = Field(None, ge=16)  # per call; unset: the model server's default
    prices: dict[str, Price] = Field(default_factory=dict)  # per model name


class AgentSettings(_Section):
    """`[agent]`. Every key named like a `RunLimits` field is that limit of each run."""

    default_mode: bool = True
    default_max_steps: int = Field(10, ge=1)
    max_steps_limit: int = Field(50, ge=1)
    request_input_timeout_s: float = Field(300.0, gt=0)
    max_concurrent_runs_per_tenant: int = Field(20, ge=1)
    # Runs one tenant may start a minute (bursts of a sixth of it); 0: 600 when auth tokens
    # are configured (one tenant cannot start and stop runs in a loop), else no limit.
    run_starts_per_minute_per_tenant: int = Field(0, ge=0)
    tool_timeout_s: float = Field(30.0, gt=0)
    tool_result_max_bytes: int = Field(262_144, ge=1024)
    reply_max_chars: int = Field(200_000, ge=1000)
    chat_tool_rounds: int = Field(5, ge=0)
    run_timeout_s: float = Field(1800.0, gt=0)
    style: Style = "balanced"
    plan_every: int = Field(0, ge=0)  # 0: no rolling plan
    max_run_tokens: int = Field(0, ge=0)  # 0: unlimited
    max_run_cost: float = Field(0.0, ge=0)  # 0: unlimited; needs llm.prices for the model
    pre_task_research: bool = False  # search once before a session's first task (web_search)
    control_retries: int = Field(2, ge=0, le=5)  # asks for a missing control block, per phase
    max_verifications: int = Field(2, ge=0, le=10)  # isolated checks of a suspect finish, per run

    @model_validator(mode="after")
    def _default_within_limit(self) -> AgentSettings:
        if self.default_max_steps > self.max_steps_limit:
            raise ValueError(
                f"default_max_steps ({self.default_max_steps}) exceeds "
                f"max_steps_limit ({self.max_steps_limit})"
            )
        return self

    def limits(
        self,
        *,
        budget: Budget,
        approval_timeout_s: float,
        max_steps: int | None = None,
        style: Style | None = None,
    ) -> RunLimits:
        """The limits of one run: each `RunLimits` field from the key of the same name, so
        the two cannot drift apart; the rest from the run's request (steps and style, else
        `default_max_steps` and `style`) and from other sections (the budget, which needs
        `llm.prices`, and `tools.approval_timeout_s`)."""
        same_name = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(RunLimits)
            if f.name in type(self).model_fields
        }
        return RunLimits(
            **{
                **same_name,
                "max_steps": max_steps or self.default_max_steps,
                "style": style or self.style,
                "budget": budget,
                "approval_timeout_s": approval_timeout_s,
            }
        )


# The agent's own definitions are the settings' (one definition each).
ContextSettings = ContextLimits


class StorageSettings(_Section):
    backend: Literal["sqlite", "mongodb"] = "sqlite"
    sqlite_path: Path = Path("data/agent.db")
    mongodb_uri: str = "mongodb://127.0.0.1:27017"
    mongodb_database: str = "agent_server"
    mongodb_timeout_ms: int = Field(5000, ge=100)
    run_lease_s: float = Field(30.0, ge=1)  # MongoDB: a run whose process stops renewing
    # this lease is closed as "interrupted" by another server process
    # Several server processes on this store (docs/deploy.md). None: true for MongoDB, false
    # for SQLite (one process per file); `serve --workers N` with N > 1 sets it.
    shared: bool | None = None
    poll_interval_s: float = Field(0.05, gt=0, le=5)  # followers and controls, shared stores

    @property
    def is_shared(self) -> bool:
        return self.backend == "mongodb" if self.shared is None else self.shared


class ToolSettings(ToolsConfig):
    """`[tools]` and its sub-tables (`web_search`, `web_fetch`, `memory`): docs/tools.md."""


class Identity(_Section):
    tenant: str = Field(min_length=1)
    user: str = Field(min_length=1)
    operator: bool = False  # GET /metrics shows process-wide figures to this token


class AuthSettings(_Section):
    tokens: dict[str, Identity] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _long_tokens(self) -> AuthSettings:
        short = [t for t in self.tokens if len(t) < 16]
        if short:
            raise ValueError("every token must be at least 16 characters long")
        return self


class TelemetrySettings(_Section):
    """OpenTelemetry traces of model and tool calls (server/telemetry.py); off when empty."""

    otlp_endpoint: str = ""  # e.g. http://127.0.0.1:4318/v1/traces
    service_name: str = Field("agent-server", min_length=1)


class Settings(BaseSettings):
    """The whole configuration. Build it with `load_settings`."""

    # Each section's default is its class's defaults, so a section is built from what was
    # given alone: its `model_fields_set` tells a key written out from one left unset.
    model_config = SettingsConfigDict(
        env_prefix="AGENT__",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    server: ServerSettings = ServerSettings()
    llm: LLMSettings = LLMSettings()
    agent: AgentSettings = AgentSettings()
    storage: StorageSettings = StorageSettings()
    context: ContextSettings = ContextSettings()  # the agent's ContextLimits
    tools: ToolSettings = ToolSettings()
    auth: AuthSettings = AuthSettings()
    telemetry: TelemetrySettings = TelemetrySettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)  # env beats flags, flags beat the file

    @model_validator(mode="after")
    def _safe_binding(self) -> Settings:
        if not self.auth.tokens and not _is_loopback(self.server.host):
            raise ValueError(
                f"server.host is {self.server.host!r} but no auth tokens are configured: "
                "without tokens the server only binds to a loopback address (127.0.0.1, ::1, "
                "localhost). Configure [auth] tokens to serve other hosts."
            )
        return self


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_settings(
    config_path: Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Read the TOML file (if it exists), apply flags and environment, validate everything.

    Relative paths resolve against the config file's folder (or the working directory when
    there is no file). Raise ConfigError with every problem found.
    """
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    base = Path.cwd()
    if config_path is not None:
        config_path = config_path.expanduser().resolve()
        base = config_path.parent
        try:
            data = tomllib.loads(config_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {config_path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config_path} is not valid TOML: {exc}") from None
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, config_path)) from None
    return _resolve(settings, base, env)


def _mcp_servers(
    servers: dict[str, McpServerConfig], base: Path, env: Mapping[str, str]
) -> dict[str, McpServerConfig]:
    """Header secrets from the environment, relative `cwd`s against the config folder."""
    resolved = {}
    for name, server in servers.items():
        missing = [var for var in server.headers_env.values() if var not in env]
        if missing:
            raise ConfigError(
                f"tools.mcp.{name}.headers_env: environment variable(s) not set: "
                + ", ".join(missing)
            )
        headers = {h: SecretStr(env[var]) for h, var in server.headers_env.items()}
        cwd = server.cwd if server.cwd is None or server.cwd.is_absolute() else base / server.cwd
        resolved[name] = server.model_copy(update={"headers": headers, "cwd": cwd})
    return resolved


def _resolve(settings: Settings, base: Path, env: Mapping[str, str]) -> Settings:
    llm = settings.llm
    if llm.api_key.get_secret_value():  # it would be replaced by the environment's, silently
        raise ConfigError(
            "llm.api_key: keys are read from the environment only: set the variable "
            f"llm.api_key_env names ({llm.api_key_env}) and leave llm.api_key out"
        )
    search = settings.tools.web_search
    sqlite_path = settings.storage.sqlite_path
    if not sqlite_path.is_absolute():
        sqlite_path = base / sqlite_path
    return settings.model_copy(
        update={
            "llm": llm.model_copy(
                update={
                    "base_url": llm.base_url or env.get("OPENAI_BASE_URL", ""),
                    "api_key": SecretStr(env.get(llm.api_key_env, "")),
                }
            ),
            "storage": settings.storage.model_copy(update={"sqlite_path": sqlite_path}),
            "tools": settings.tools.model_copy(
                update={
                    "web_search": search.model_copy(
                        update={"api_key": SecretStr(env.get(search.api_key_env, ""))}
                    ),
                    "mcp": _mcp_servers(settings.tools.mcp, base, env),
                    "modules_dir": settings.tools.modules_dir or base,
                }
            ),
        }
    )


def _describe(exc: ValidationError, path: Path | None) -> str:
    """Every problem, each naming the environment variable that set it when one did (a value
    from the environment is not in the file the message would otherwise point at)."""
    where = f" in {path}" if path else ""
    from_env: dict[str, str] = {}
    for error in exc.errors():
        variable = "AGENT__" + "__".join(str(part).upper() for part in error["loc"])
        if variable in os.environ:
            from_env[".".join(str(part) for part in error["loc"]) + ":"] = variable
    lines = [
        next((f"{line} (from {v})" for k, v in from_env.items() if line.startswith(k)), line)
        for line in describe_errors(exc, root="(top level)")
    ]
    return "\n  ".join([f"invalid configuration{where}:", *lines])
