"""create_app: build the default parts from Settings, accept substitutes, wire the routes."""

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from agent.adapters.openai_chat import OpenAIChatModel
from agent.context import ContextWindow
from agent.ports import ChatModel, PromptProvider, ToolContext
from agent.prompts import FilePromptProvider
from agent.run import Search
from agent.tokens import counter_for_model
from agent.tools import (
    BUILTIN_TOOLS,
    REQUIREMENTS,
    ExtractorPool,
    MemoryStore,
    Tool,
    ToolRegistry,
    build_tools,
    create_http_client,
)
from agent.tools.catalog import ToolCatalog
from agent.tools.mcp import McpServer
from agent.tools.python import load_tool_modules
from server.auth import Authenticator
from server.health import HealthListener
from server.http_api import health, http_error
from server.http_api import routes as api_routes
from server.services import Services
from server.sessions import SessionHub
from server.settings import ConfigError, Settings, check_tools
from server.storage.base import Store
from server.storage.memory_sqlite import SQLiteMemoryStore
from server.ws import websocket_endpoint

if TYPE_CHECKING:
    from server.storage.memory_mongo import MongoMemoryStore

__all__ = ["allowed_hosts", "create_app", "create_store"]

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).parent / "static"


def create_store(settings: Settings) -> Store:
    """The configured backend; drivers are imported only when chosen."""
    storage = settings.storage
    if storage.backend == "mongodb":
        from server.storage.mongo import MongoStore

        return MongoStore(storage)
    from server.storage.outage import Outage
    from server.storage.sqlite import SQLiteStore

    outage = Outage(storage.outage_tolerance_s)
    return SQLiteStore(storage.sqlite_path, shared=storage.is_shared, outage=outage)


def _tools(
    settings: Settings,
    extra: list[Tool] | None,
    *,
    http: httpx.AsyncClient,
    memory: MemoryStore | None,
    extractor: ExtractorPool,
) -> ToolCatalog:
    """Built-in tools named in tools.enabled, every @tool of tools.modules, the MCP servers."""
    config = settings.tools
    try:
        built = build_tools(config, http=http, memory=memory, extractor=extractor)
        if config.modules and config.modules_dir is not None:
            if str(config.modules_dir) not in sys.path:
                sys.path.insert(0, str(config.modules_dir))
        python, sources = load_tool_modules(config.modules)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    available = {**BUILTIN_TOOLS, **{t.name: t for t in [*built, *(extra or ())]}}
    check_tools(settings, available, REQUIREMENTS, [(t.name, sources[t.name]) for t in python])
    chosen = [available[n] for n in config.enabled]
    servers = [McpServer(name, server) for name, server in config.mcp.items()]
    return ToolCatalog(
        ToolRegistry([*chosen, *python]), servers, approval=config.approval, sources=sources
    )


def _memory_store(settings: Settings) -> SQLiteMemoryStore | MongoMemoryStore | None:
    """The memory tools' store, beside the conversation store, when the tools are enabled.

    On MongoDB it opens its own client on the same database: MongoStore creates its client
    only in open(), after the tools are built. Like create_store, it imports pymongo only
    when chosen.
    """
    wanted = {"memory_save", "memory_retrieve"} & set(settings.tools.enabled)
    if not wanted:
        return None
    if settings.storage.backend == "mongodb":
        from server.storage.memory_mongo import MongoMemoryStore

        return MongoMemoryStore(settings.storage)
    return SQLiteMemoryStore(settings.storage.sqlite_path)


def _context_window(settings: Settings) -> ContextWindow | None:
    config = settings.context
    if not config.window_tokens:
        return None
    return ContextWindow(counter_for_model(settings.llm.model), config)


def _research(settings: Settings, registry: ToolCatalog) -> Search | None:
    """Pre-task research runs the configured web_search tool (check_tools makes sure of it)."""
    if not settings.agent.pre_task_research:
        return None

    async def search(query: str, context: ToolContext) -> Any:
        return await registry.call("web_search", {"query": query}, context)

    return search


def allowed_hosts(settings: Settings) -> list[str]:
    """Host-header names served (DNS-rebinding defence): the configured ones and server.host,
    IPv6 literals in the bracketed form a Host header carries."""
    names = [*settings.server.allowed_hosts, settings.server.host]
    hosts: list[str] = []
    for name in names:
        name = name.strip().lower().removeprefix("[").removesuffix("]")
        if name in ("", "0.0.0.0", "::"):  # a wildcard bind names no host
            continue
        hosts.append(f"[{name}]" if ":" in name else name)
    return sorted(set(hosts))


def _agui_routes() -> list[Route]:
    """`POST /agui`, its stop (server/agui.py), its reconnect (server/agui_connect.py) and
    their CORS preflight (server/agui_http.py), each module loaded by its first request, in a
    thread: the AG-UI SDK's models took ~0.15 s of CPU to import at every start, in
    deployments that never serve AG-UI too."""

    def lazy(name: str, path: str = "server.agui") -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            module = sys.modules.get(path) or await asyncio.to_thread(importlib.import_module, path)
            handler: Callable[[Request], Awaitable[Response]] = getattr(module, name)
            return await handler(request)

        return endpoint

    edge = "server.agui_http"  # the CORS preflight of all three
    return [
        Route("/agui", lazy("agui_endpoint"), methods=["POST"]),
        Route("/agui/{thread_id}/stop", lazy("stop_endpoint"), methods=["POST"]),
        Route("/agui/connect", lazy("connect_endpoint", "server.agui_connect"), methods=["POST"]),
        Route("/agui", lazy("preflight", edge), methods=["OPTIONS"]),
        Route("/agui/connect", lazy("preflight", edge), methods=["OPTIONS"]),
        Route("/agui/{thread_id}/stop", lazy("preflight", edge), methods=["OPTIONS"]),
    ]


def create_app(
    settings: Settings,
    *,
    model: ChatModel | None = None,
    store: Store | None = None,
    prompts: PromptProvider | None = None,
    extra_tools: list[Tool] | None = None,
    http_client: httpx.AsyncClient | None = None,
    memory_store: MemoryStore | None = None,
) -> Starlette:
    """Build the ASGI app. Every collaborator can be substituted (tests, embedding)."""
    owned_model = None
    if model is None:
        owned_model = OpenAIChatModel(settings.llm)
        model = owned_model
    store = store or create_store(settings)
    owned_http = None
    if http_client is None:
        owned_http = http_client = create_http_client(timeout_s=settings.tools.web_fetch.timeout_s)
    owned_memory = _memory_store(settings) if memory_store is None else None
    memory_store = memory_store or owned_memory
    fetch = settings.tools.web_fetch
    extractor = ExtractorPool(fetch.extract_workers, fetch.extract_memory_mb)  # starts lazily
    registry = _tools(
        settings, extra_tools, http=http_client, memory=memory_store, extractor=extractor
    )
    hub = SessionHub(
        settings,
        store=store,
        model=model,
        tools=registry,
        prompts=prompts or FilePromptProvider(),
        context=_context_window(settings),
        research=_research(settings, registry),
    )
    services = Services(
        settings=settings,
        store=store,
        hub=hub,
        auth=Authenticator(settings.auth, settings.server.allowed_origins),
        tools=registry,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await store.open()
        if owned_memory is not None:
            await owned_memory.open()
        recovered = await hub.recover()
        if recovered:
            log.info("closed %d run(s) interrupted by the last shutdown", recovered)
        hub.start_upkeep()
        await _start_mcp(registry)
        probes = await _health_listener(settings, services)
        try:
            yield
        finally:
            if probes is not None:
                await probes.aclose()  # before the teardown: a process going away is not healthy
            await hub.stop_upkeep()
            await hub.shutdown(settings.server.shutdown_timeout_s)
            await asyncio.gather(*(s.stop() for s in registry.servers.values()))
            await store.close()
            await extractor.aclose()
            if owned_memory is not None:
                await owned_memory.close()
            if owned_http is not None:
                await owned_http.aclose()
            if owned_model is not None:
                await owned_model.aclose()

    async def index(request: Request) -> Response:
        # Never inside another site's frame (clickjacking): a <meta> CSP cannot say so.
        headers = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}
        return FileResponse(STATIC_DIR / "index.html", headers=headers)

    routes = [
        *api_routes,
        WebSocketRoute("/ws", websocket_endpoint),
        *_agui_routes(),
    ]
    if (STATIC_DIR / "index.html").is_file():
        routes += [Route("/", index), Mount("/static", StaticFiles(directory=STATIC_DIR))]
    hosts = allowed_hosts(settings)
    if settings.server.host in ("0.0.0.0", "::") and "*" not in hosts:
        log.warning(
            "server.host %s listens on every address, but only these Host names are served: "
            "%s; add the names clients use to server.allowed_hosts",
            settings.server.host,
            ", ".join(hosts),
        )
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=hosts)]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=middleware,
        exception_handlers={HTTPException: http_error},
    )
    # `/api/sessions/` is not a path of the API: a JSON 404, not a redirect to the path
    # without the slash built from the request's Host header.
    app.router.redirect_slashes = False
    app.state.services = services
    return app


async def _health_listener(settings: Settings, services: Services) -> HealthListener | None:
    port = settings.server.health_port
    if port is None:
        return None
    listener = HealthListener(lambda: health(services))
    await listener.start(settings.server.host, port)
    return listener


async def _start_mcp(catalog: ToolCatalog) -> None:
    """Start every MCP server at once; wait for each first attempt (each bounded by its own
    start_timeout_s). A server that failed is logged and retried in the background."""
    servers = list(catalog.servers.values())
    for server in servers:
        server.start()
    await asyncio.gather(*(s.wait_started() for s in servers))
    for server in servers:
        if server.state != "up":
            log.error("MCP server %s did not start: %s", server.name, server.error)
