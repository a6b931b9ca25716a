"""Settings: config.toml, then CLI flags, then `AGENT__SECTION__KEY` environment variables.

Parsed once, at startup, into frozen models; each component receives only its section.
Every wrong value is reported at once, with the key, what was expected and what was given.
Every check is here: those across sections too (a cost limit needs a price), and
`check_tools`, which create_app calls once the tools are built. So are the defaults that
follow from other keys (`Settings.run_starts_per_minute`, `Settings.sockets_per_tenant`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import os
import tomllib
import types
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.exceptions import SettingsError

from agent.adapters.config import ModelConfig
from agent.budget import Budget, Price
from agent.context import ContextLimits
from agent.run import RunLimits, Style
from agent.tools.config import McpServerConfig, ToolsConfig
from agent.validation import MOST_LINES, describe_errors

__all__ = [
    "AgentSettings",
    "AuthSettings",
    "ConfigError",
    "ContextSettings",
    "Identity",
    "LLMSettings",
    "Price",
    "RUN_LEASE_S",
    "ServerSettings",
    "Settings",
    "StorageSettings",
    "TelemetrySettings",
    "ToolSettings",
    "check_tools",
    "load_settings",
]


class ConfigError(Exception):
    """The configuration is unusable; the message says which key and why."""


class _Section(BaseModel):
    # inf passes every "> 0" check, then fails where it is used (a timeout, an int() of it)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _again(err: ErrorDetails, loc: tuple[int | str, ...] | None = None) -> InitErrorDetails:
    """`err` (at `loc`) as pydantic takes it back: its type and message kept, so that an
    unknown key still reads "unknown key" and a missing one shows no input."""
    return InitErrorDetails(
        type=PydanticCustomError(err["type"], err["msg"]),
        loc=err["loc"] if loc is None else loc,
        input=err["input"],
    )


def _refuse(
    title: str, loc: tuple[int | str, ...], kind: str, message: str, value: Any
) -> ValidationError:
    return ValidationError.from_exception_data(
        title, [InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=value)]
    )


def _http_url(value: str) -> bool:
    """An absolute http(s) URL with a host: anything else fails every request later, each
    one retried as if the failure were temporary."""
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port that is not a number raises ValueError
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def safe_url(url: str) -> str:
    """`url` without what may be secret in it: user and password, query, fragment. Plain
    string work, so that a URL urlsplit refuses (MongoDB's several hosts) is cut all the same."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    rest = rest.partition("#")[0].partition("?")[0].rpartition("@")[2]
    return f"{scheme}{sep}{rest}"


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
    # Connections one address may hold without having sent a complete request head; its next
    # one takes the slot of its own oldest such connection (server/guard.py).
    max_silent_per_source: int = Field(64, ge=1)
    write_timeout_s: float = Field(60.0, gt=0)  # an HTTP response's client reading nothing
    keep_alive_timeout_s: float = Field(5.0, gt=0)
    # A listener of its own that answers only GET /healthz, for probes that must be answered
    # whatever the main port endures (server/health.py); unset: none.
    health_port: int | None = Field(None, ge=1, le=65535)
    # Host headers served (DNS-rebinding defence); server.host is always added. "*" = any.
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")
    # Inbound WebSocket frames per connection: a burst, refilled at a steady rate; a client
    # past it gets `rate_limited` and is closed with 1008.
    max_messages_per_s: float = Field(20.0, gt=0)
    message_burst: int = Field(200, ge=1)

    @model_validator(mode="after")
    def _health_port_is_another(self) -> ServerSettings:
        if self.health_port is not None and self.health_port == self.port:
            raise ValueError("server.health_port must differ from server.port")
        return self

    @model_validator(mode="after")
    def _origins_follow_the_port(self) -> ServerSettings:
        # An explicit list equal to the defaults is still the operator's choice.
        if "allowed_origins" not in self.model_fields_set and self.port not in (8765, 0):
            origins = (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}")
            return self.model_copy(update={"allowed_origins": origins})
        return self


class LLMSettings(ModelConfig):
    """`[llm]`: the model adapter's own keys (agent/adapters/config.py), and where its key
    comes from, the prices of models, and the bundled model."""

    api_key_env: str = "OPENAI_API_KEY"  # api_key is filled from the variable it names
    prices: dict[str, Price] = Field(default_factory=dict)  # per model name
    # No base_url and no key: serve the bundled small local model (server/local_model.py).
    bundled_model: bool = True

    @property
    def unconfigured(self) -> bool:
        """Nothing says where a model is: no base URL (file, flag or OPENAI_BASE_URL) and no
        key for the default endpoint."""
        return not self.base_url and not self.api_key.get_secret_value()

    @field_validator("base_url")
    @classmethod
    def _absolute_http_url(cls, value: str) -> str:
        if value and not _http_url(value):
            raise PydanticCustomError(
                "url",
                "must be an absolute http(s) URL with a host, like http://127.0.0.1:8080/v1",
            )
        return value


# A run's own defaults (agent/run.py): the `[agent]` keys that set a RunLimits field start
# from them, so each default is written once.
_RUN = RunLimits()


class AgentSettings(_Section):
    """`[agent]`. Every key named like a `RunLimits` field is that limit of each run."""

    default_mode: bool = True
    default_max_steps: int = Field(_RUN.max_steps, ge=1)
    max_steps_limit: int = Field(50, ge=1)
    request_input_timeout_s: float = Field(_RUN.request_input_timeout_s, gt=0)
    max_concurrent_runs_per_tenant: int = Field(20, ge=1)
    # Runs one tenant may start a minute (bursts of a sixth of it); 0: 600 when auth tokens
    # are configured (one tenant cannot start and stop runs in a loop), else no limit.
    run_starts_per_minute_per_tenant: int = Field(0, ge=0)
    tool_timeout_s: float = Field(_RUN.tool_timeout_s, gt=0)
    tool_result_max_bytes: int = Field(_RUN.tool_result_max_bytes, ge=1024)
    reply_max_chars: int = Field(_RUN.reply_max_chars, ge=1000)
    chat_tool_rounds: int = Field(_RUN.chat_tool_rounds, ge=0)
    run_timeout_s: float = Field(1800.0, gt=0)
    style: Style = _RUN.style
    plan_every: int = Field(_RUN.plan_every, ge=0)  # 0: no rolling plan
    max_run_tokens: int = Field(0, ge=0)  # 0: unlimited
    max_run_cost: float = Field(0.0, ge=0)  # 0: unlimited; needs llm.prices for the model
    pre_task_research: bool = False  # search once before a session's first task (web_search)
    # asks for a missing control block, per phase
    control_retries: int = Field(_RUN.control_retries, ge=0, le=5)
    # isolated checks of a suspect finish, per run
    max_verifications: int = Field(_RUN.max_verifications, ge=0, le=10)
    # steps in a row only repeating failed calls: the run ends as "stuck"
    stuck_steps: int = Field(_RUN.stuck_steps, ge=0)
    session_titles: bool = True  # one short model call names a session after its first answer

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


# `storage.run_lease_s`'s default, which LiveSession and SessionRegistry start from too.
RUN_LEASE_S = 30.0


class StorageSettings(_Section):
    backend: Literal["sqlite", "mongodb"] = "sqlite"
    sqlite_path: Path = Path("data/agent.db")
    mongodb_uri: str = "mongodb://127.0.0.1:27017"
    mongodb_database: str = "agent_server"
    mongodb_timeout_ms: int = Field(5000, ge=100)
    # Shared stores: a run whose process stops renewing this lease is closed as "interrupted"
    # by another server process.
    run_lease_s: float = Field(RUN_LEASE_S, ge=1, le=3600)
    # Several server processes on this store (docs/deploy.md). None: true for MongoDB, false
    # for SQLite (one process per file); `serve --workers N` with N > 1 sets it.
    shared: bool | None = None
    poll_interval_s: float = Field(0.05, gt=0, le=5)  # followers and controls, shared stores
    # How long a store error that can pass (a timeout, no primary, a network error, a locked
    # SQLite file) is retried before a run ends with storage_error (docs/storage.md). 0: none.
    outage_tolerance_s: float = Field(30.0, ge=0, le=3600)
    # The bytes of events and messages a tenant may keep stored; at it, her runs are refused
    # with storage_quota_exceeded until she deletes some (server/storage_quota.py). 0: none.
    max_bytes_per_tenant: int = Field(0, ge=0)

    @property
    def is_shared(self) -> bool:
        return self.backend == "mongodb" if self.shared is None else self.shared

    @field_validator("mongodb_database")
    @classmethod
    def _database_name(cls, name: str) -> str:
        """MongoDB refuses these in a database name: said at start, not as the driver's
        traceback when the store opens."""
        if not 0 < len(name) < 64 or any(c in name for c in '/\\. "$\x00'):
            raise PydanticCustomError(
                "database_name",
                'a MongoDB database name has 1 to 63 characters, none of / \\ . " $ or a space',
            )
        return name


class ToolSettings(ToolsConfig):
    """`[tools]` and its sub-tables (`web_search`, `web_fetch`, `memory`): docs/tools.md."""


class Identity(_Section):
    tenant: str = Field(min_length=1)
    user: str = Field(min_length=1)
    operator: bool = False  # GET /metrics shows process-wide figures to this token


class AuthSettings(_Section):
    tokens: dict[str, Identity] = Field(default_factory=dict)

    @field_validator("tokens", mode="wrap")
    @classmethod
    def _tokens_never_shown(cls, value: Any, handler: Callable[[Any], Any]) -> Any:
        """A token is a key of the table: an error names it by its place, `<token 2>`, so
        that no message (nor the log it lands in) holds the secret itself."""
        place = (
            {k: f"<token {n}>" for n, k in enumerate(value, 1)} if isinstance(value, dict) else {}
        )
        try:
            tokens: dict[str, Identity] = handler(value)
        except ValidationError as exc:
            errors = [
                _again(err, (place.get(str(err["loc"][0]), "<token>"), *err["loc"][1:]))
                if err["loc"]
                else _again(err)
                for err in exc.errors(include_url=False)
            ]
            raise ValidationError.from_exception_data(exc.title, errors) from None
        short = [place[t] for t in tokens if len(t) < 16]
        if short:
            raise ValueError(
                f"every token must be at least 16 characters long ({', '.join(short)} is not)"
            )
        return tokens


class TelemetrySettings(_Section):
    """OpenTelemetry traces of model and tool calls (server/telemetry.py); off when empty."""

    otlp_endpoint: str = ""  # e.g. http://127.0.0.1:4318/v1/traces
    service_name: str = Field("agent-server", min_length=1)

    @field_validator("otlp_endpoint")
    @classmethod
    def _absolute_http_url(cls, value: str) -> str:
        if value and not _http_url(value):  # else every export fails, logged, traces lost
            raise PydanticCustomError(
                "url",
                "must be an absolute http(s) URL with a host, like http://127.0.0.1:4318/v1/traces",
            )
        return value


_DEFAULT_RUN_STARTS_PER_MINUTE = 600


class Settings(BaseSettings):
    """The whole configuration. Build it with `load_settings`; built directly, it reads no
    environment."""

    # Each section's default is its class's defaults, so a section is built from what was
    # given alone: its `model_fields_set` tells a key written out from one left unset.
    model_config = SettingsConfigDict(
        env_prefix="AGENT__",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
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
        # The file and the flags only: load_settings lays the environment it was given over
        # them (_Environment), so that nothing here reads os.environ behind its back.
        return (init_settings,)

    @model_validator(mode="wrap")
    @classmethod
    def _numbers_are_numbers(cls, data: Any, handler: Callable[[Any], Settings]) -> Settings:
        """pydantic reads `true` as 1 and accepts inf wherever a number must be > 0; the agent's
        own sections (tools, context, prices) too, so they are checked here, in what was given
        (the file, flags, and the environment as strings), and reported with the rest."""
        refused = list(_not_numbers(data, Settings)) if isinstance(data, dict) else []
        try:
            settings = handler(data)
        except ValidationError as exc:
            where = {err["loc"] for err in refused}
            others = [_again(e) for e in exc.errors(include_url=False) if e["loc"] not in where]
            raise ValidationError.from_exception_data(exc.title, [*refused, *others]) from None
        if refused:
            raise ValidationError.from_exception_data(cls.__name__, refused)
        return settings

    @model_validator(mode="after")
    def _priced_budget(self) -> Settings:
        model = self.llm.model
        if self.agent.max_run_cost and model not in self.llm.prices:
            raise _refuse(
                type(self).__name__,
                ("agent", "max_run_cost"),
                "needs_price",
                f'needs a price for model {model!r}: add [llm.prices."{model}"] with '
                "prompt_per_million and completion_per_million",
                self.agent.max_run_cost,
            )
        return self

    @property
    def budget(self) -> Budget:
        """Each run's token and cost bounds, priced by `llm.prices` for `llm.model`."""
        agent, llm = self.agent, self.llm
        price = llm.prices.get(llm.model)
        return Budget(max_tokens=agent.max_run_tokens, max_cost=agent.max_run_cost, price=price)

    @property
    def run_starts_per_minute(self) -> int:
        """`agent.run_starts_per_minute_per_tenant` in force: as set, or (0) 600 when tenants
        are told apart by tokens and none (0) otherwise."""
        configured = self.agent.run_starts_per_minute_per_tenant
        if configured:
            return configured
        return _DEFAULT_RUN_STARTS_PER_MINUTE if self.auth.tokens else 0

    @property
    def sockets_per_tenant(self) -> int:
        """`server.max_sockets_per_tenant` in force: as set, or (0) half of
        `server.max_connections` when tenants are told apart by tokens, else all of it."""
        server = self.server
        if server.max_sockets_per_tenant:
            return server.max_sockets_per_tenant
        if self.auth.tokens:
            return max(1, server.max_connections // 2)
        return server.max_connections

    @model_validator(mode="after")
    def _safe_binding(self) -> Settings:
        if not self.auth.tokens and not _is_loopback(self.server.host):
            raise _refuse(
                type(self).__name__,
                ("server", "host"),
                "loopback_only",
                "without auth tokens the server only binds to a loopback address (127.0.0.1, "
                "::1, localhost); configure [auth] tokens to serve other hosts",
                self.server.host,
            )
        return self


def check_tools(
    settings: Settings,
    offered: Collection[str],
    needing_setup: Mapping[str, str],
    modules: Sequence[tuple[str, str]],
) -> None:
    """Refuse tool names that name no tool, once the tools are built (which exist depends on
    their requirements, on tools.modules and on the tools given to create_app).

    `offered`: the tools tools.enabled may name; `needing_setup`: the tools not built for
    want of a requirement, with what each needs; `modules`: each @tool of tools.modules, as
    (name, where it comes from), in order. Raise ConfigError naming the key."""
    config = settings.tools
    for name in config.enabled:
        if name in offered:
            continue
        if name in needing_setup:
            raise ConfigError(f"tools.enabled: {name!r} needs {needing_setup[name]}")
        known = ", ".join(sorted({*offered, *needing_setup}))  # also those needing setup
        raise ConfigError(f"tools.enabled: unknown tool {name!r}; the tools are: {known}")
    taken = set(config.enabled)
    for name, source in modules:
        if name in taken:
            raise ConfigError(
                f"tools.modules: tool {name!r} of {source} has the name of another tool; "
                "rename it with @tool(name=...)"
            )
        taken.add(name)
    sources = dict(modules)
    prefixes = tuple(f"{name}__" for name in config.mcp)
    for name in sorted(taken):
        if name.startswith(prefixes):
            raise ConfigError(
                f"tools: tool {name!r} ({sources.get(name, 'built-in')}) is named like the "
                f"tools of the MCP server {name.split('__', 1)[0]!r} (<server>__<tool>); "
                "rename it with @tool(name=...)"
            )
    for name in config.approval:
        if name not in taken and name not in offered and not name.startswith(prefixes):
            raise ConfigError(
                f"tools.approval: unknown tool {name!r}; name a built-in or Python tool, or "
                "an MCP tool as <server>__<tool> of a server in [tools.mcp]"
            )
    if settings.agent.pre_task_research and "web_search" not in taken:
        raise ConfigError(
            "agent.pre_task_research needs the web_search tool: enable it in tools.enabled "
            "and configure [tools.web_search] provider"
        )


class _Environment(EnvSettingsSource):
    """pydantic-settings' reading of the `AGENT__SECTION__KEY` variables, from a given mapping
    instead of os.environ."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ  # read by _load_env_vars, which the base's __init__ calls
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name.lower(): value for name, value in self._environ.items()}  # case-blind


def _laid_over(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `top`'s values in their place, tables merged key by key."""
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, dict):
            merged[key] = _laid_over(below, value)
        else:
            merged[key] = value
    return merged


def _strip(annotation: Any) -> Any:
    """`X` of `Annotated[X, ...]` and of `X | None`."""
    if get_origin(annotation) is Annotated:
        return _strip(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip(args[0])
    return annotation


def _child(annotation: Any, key: int | str) -> Any:
    """The type of `key` inside a value of type `annotation`: a field of a model (or of a
    pydantic dataclass), a dict's value, a list's item; None when there is no such key."""
    annotation = _strip(annotation)
    fields = getattr(annotation, "__pydantic_fields__", None)
    if isinstance(fields, dict):
        field = fields.get(key)
        return None if field is None else field.annotation
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (tuple, list, set, frozenset) and args and isinstance(key, int):
        return args[0]
    return None


def _at(loc: tuple[int | str, ...]) -> Any:
    """The type of the setting at `loc` (None for an unknown key)."""
    annotation: Any = Settings
    for key in loc:
        annotation = _child(annotation, key)
        if annotation is None:
            return None
    return _strip(annotation)


def _not_numbers(
    value: Any, annotation: Any, loc: tuple[int | str, ...] = ()
) -> Iterator[InitErrorDetails]:
    """Booleans given for numbers, and numbers that are not finite (TOML's inf and nan, or
    "inf" and "1e999" from the environment), anywhere in `value`."""
    annotation = _strip(annotation)
    if annotation in (int, float):
        if isinstance(value, bool):
            kind, message = "number_type", "Input should be a number, not true or false"
        elif annotation is float and not _finite(value):
            kind, message = "finite_number", "Input should be a finite number"
        else:
            return
        yield InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=value)
    elif isinstance(value, dict):
        for key, item in value.items():
            child = _child(annotation, key)
            if child is not None:
                yield from _not_numbers(item, child, (*loc, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            child = _child(annotation, index)
            if child is not None:
                yield from _not_numbers(item, child, (*loc, index))


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value)) if isinstance(value, float | int | str) else True
    except OverflowError:  # an integer too large for a float
        return False
    except ValueError:  # not a number at all: pydantic says so
        return True


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

    `overrides` are the command-line flags by section, `{"server": {"port": 8080}}` for
    `--port 8080` (None: not given); a message names a wrong one `--port`. `environ` is the
    environment (None: os.environ): its `AGENT__` variables and the secrets named by the
    settings are read from it alone. Relative paths resolve against the config file's
    folder (or the working directory when there is no file). Raise ConfigError with every
    problem found.
    """
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    base = Path.cwd()
    if config_path is not None:
        config_path = config_path.expanduser().resolve()
        base = config_path.parent
        data = _read_toml(config_path)
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    _check_environment(env)
    try:
        settings = Settings(**_laid_over(data, _Environment(env)()))  # env beats flags and file
    except ValidationError as exc:
        raise ConfigError(_describe(exc, config_path, overrides or {}, env)) from None
    except SettingsError as exc:  # a variable _check_environment did not foresee
        raise ConfigError(f"invalid environment: {exc}") from None
    return _resolve(settings, base, env)


def _read_toml(path: Path) -> dict[str, Any]:
    """The file's tables; a file that cannot be read is one line saying why, not a traceback."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {raw[exc.start]:#04x} on line {line})"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None


_ENV_PREFIX = "AGENT__"


def _check_environment(env: Mapping[str, str]) -> None:
    """`AGENT__` variables that pydantic-settings would ignore (an unknown section, while an
    unknown key of a known section is refused) or fail on with a traceback naming only the
    section (a list or table that is not JSON). Their values are never shown: some are
    secrets (AGENT__AUTH__TOKENS)."""
    problems = []
    for name, value in env.items():
        if not name.upper().startswith(_ENV_PREFIX):
            continue
        keys = tuple(name[len(_ENV_PREFIX) :].lower().split("__"))
        if keys[0] not in Settings.model_fields:
            problems.append(
                f"{name}: unknown section {keys[0]!r} (the sections are "
                f"{', '.join(Settings.model_fields)}; AGENT__<SECTION>__<KEY>)"
            )
            continue
        expected = _json_kind(_at(keys), keys)
        if expected and value:
            try:
                json.loads(value)
            except ValueError:
                problems.append(f"{name}: must be {expected}")
    if problems:
        raise ConfigError("\n  ".join(["invalid environment:", *problems]))


def _json_kind(annotation: Any, keys: tuple[str, ...]) -> str:
    """What a variable for a list or a table must hold, with an example; "" for the rest."""
    if keys == ("auth", "tokens"):
        return 'a JSON object, e.g. {"<token>": {"tenant": "acme", "user": "alice"}}'
    if get_origin(annotation) in (tuple, list, set, frozenset):
        return 'a JSON list, e.g. ["a", "b"]'
    if get_origin(annotation) is dict or hasattr(annotation, "__pydantic_fields__"):
        return 'a JSON object, e.g. {"key": "value"}'
    return ""


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
    llm, search = settings.llm, settings.tools.web_search
    for section, keyed in (("llm", llm), ("tools.web_search", search)):
        if keyed.api_key.get_secret_value():  # it would be replaced by the environment's
            raise ConfigError(
                f"{section}.api_key: keys are read from the environment only: set the "
                f"variable {section}.api_key_env names ({keyed.api_key_env}) and leave "
                f"{section}.api_key out"
            )
    base_url = llm.base_url or env.get("OPENAI_BASE_URL", "")
    if not _http_url(base_url or "http://default"):  # llm.base_url itself is checked already
        raise ConfigError(
            "OPENAI_BASE_URL: must be an absolute http(s) URL with a host, like "
            f"http://127.0.0.1:8080/v1 (got {json.dumps(safe_url(base_url))})"
        )
    sqlite_path = settings.storage.sqlite_path
    if not sqlite_path.is_absolute():
        sqlite_path = base / sqlite_path
    return settings.model_copy(
        update={
            "llm": llm.model_copy(
                update={
                    "base_url": base_url,
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


def _describe(
    exc: ValidationError,
    path: Path | None,
    overrides: Mapping[str, Mapping[str, Any]],
    env: Mapping[str, str],
) -> str:
    """Every problem, each naming the environment variable or the flag that set it when one
    did (a value from there is not in the file the message would otherwise point at). A
    secret's value is never shown, nor a token (it is the key of its table)."""
    errors = [_again(e, _token_hidden(e["loc"])) for e in exc.errors(include_url=False)]
    exc = ValidationError.from_exception_data(exc.title, errors)
    shown = describe_errors(exc, root="(top level)")
    bare = describe_errors(exc, root="(top level)", show_input=False)
    variables = {name.upper(): name for name in env}
    lines, from_file = [], False
    for n, err in enumerate(exc.errors(include_url=False)[:MOST_LINES]):
        loc, given = err["loc"], err["input"]
        line = shown[n]
        secret = loc == ("storage", "mongodb_uri") or _holds_secret(_at(loc))  # a password
        if loc[:1] == ("auth",) or err["type"] == "extra_forbidden" or secret:
            line = bare[n]  # an unknown key's value may be a secret under a misspelled name
        elif isinstance(given, float) and not math.isfinite(given):
            line = f"{bare[n]} (got {given})"  # as JSON, inf would read null
        elif isinstance(given, str) and "://" in given:  # any URL may hold a password
            line = f"{bare[n]} (got {json.dumps(safe_url(given))})"
        source = _source(loc, variables, overrides)
        from_file = from_file or source is None
        lines.append(f"{line} (from {source})" if source else line)
    lines += shown[len(lines) :]
    where = f" in {path}" if path and from_file else ""
    return "\n  ".join([f"invalid configuration{where}:", *lines])


def _token_hidden(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """`loc` with a token in it replaced (AuthSettings names tokens by place already): under
    `auth.tokens`, or a key of `[auth]` that is no setting (a token written one level up)."""
    if loc[:2] == ("auth", "tokens") and len(loc) > 2 and not str(loc[2]).startswith("<token"):
        return (*loc[:2], "<token>", *loc[3:])
    if loc[:1] == ("auth",) and len(loc) > 1 and loc[1] not in AuthSettings.model_fields:
        return ("auth", "<a key that is no setting: tokens go in auth.tokens>", *loc[2:])
    return loc


def _holds_secret(annotation: Any, depth: int = 0) -> bool:
    """Whether a value of this type is, or may hold, a secret (a misplaced one included)."""
    annotation = _strip(annotation)
    if annotation is SecretStr:
        return True
    fields = getattr(annotation, "__pydantic_fields__", None)
    inner = [f.annotation for f in fields.values()] if isinstance(fields, dict) else []
    inner += [a for a in get_args(annotation) if not isinstance(a, str)]
    return depth < 6 and any(_holds_secret(a, depth + 1) for a in inner)


def _source(
    loc: tuple[int | str, ...],
    variables: Mapping[str, str],
    overrides: Mapping[str, Mapping[str, Any]],
) -> str | None:
    """The variable or flag a value at `loc` came from (env beats flags); None: the file."""
    for depth in range(len(loc), 0, -1):
        name = _ENV_PREFIX + "__".join(str(part).upper() for part in loc[:depth])
        if name in variables:
            return variables[name]
    if len(loc) >= 2 and (overrides.get(str(loc[0])) or {}).get(str(loc[1])) is not None:
        return "--" + str(loc[1]).replace("_", "-")
    return None
