"""A real nginx with `memvault nginx`'s configuration, for the tests that put servers behind it."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from commands import free_port
from conftest import wait_for

from memvault.server import nginx

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
NO_NGINX = "nginx is not installed (CI installs Debian's nginx-light; apt-get install nginx-light)"


@contextlib.asynccontextmanager
async def nginx_in_front(backends: list[str], prefix: Path) -> AsyncIterator[str]:
    """A real nginx with `memvault nginx`'s configuration; yields its base URL."""
    assert NGINX is not None
    prefix.mkdir()
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(nginx.standalone(backends, listen=f"127.0.0.1:{port}", prefix=str(prefix)))
    with open(prefix / "stderr.log", "wb") as log:
        proc = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(prefix)], stdout=log, stderr=log)
        try:

            def listening() -> bool:
                assert proc.poll() is None, (prefix / "stderr.log").read_text()
                with socket.socket() as sock:
                    return sock.connect_ex(("127.0.0.1", port)) == 0

            await wait_for(listening, timeout=10)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)
