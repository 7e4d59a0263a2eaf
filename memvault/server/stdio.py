"""`memvault stdio`: one token's vault over stdio, with the HTTP server's tools, locks and live index."""

from __future__ import annotations

import logging

from memvault import __version__
from memvault.config import Settings
from memvault.ops.service import Service
from memvault.tools import build_server
from memvault.tools.common import SERVED_TOKEN

log = logging.getLogger("memvault")


async def serve_stdio(settings: Settings, token: str) -> None:
    """Serve ``token`` on stdin/stdout until the client closes them. Writes take the token's file
    lock as the HTTP server's do, and the watcher sees the other process's writes, so both can
    serve one vault at once. Logs go to stderr: stdout carries protocol messages only."""
    service = Service(settings)
    server = build_server(service, settings)
    watcher = service.watcher()
    settings.root.mkdir(parents=True, exist_ok=True)
    SERVED_TOKEN.set(token)  # tasks the server starts copy this context: token_of finds it
    await service.start()
    log.info(
        "memvault %s serving token folder %r over stdio (watcher: %s)", __version__, token, watcher.state()
    )
    try:
        await server.run_stdio_async()
    finally:
        await service.close()
