# memvault in a container: the same `memvault serve` as on a laptop, vault on a volume at /data.
# Build and run with `docker compose up -d` (see DOCKER.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MEMVAULT_ROOT=/data

# git for MEMVAULT_SYNC=git and `memvault sync` (ssh for remotes over ssh; CA certificates for https).
RUN apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# A fixed, non-root user, so files written to a bind-mounted vault have a known owner (10001:10001).
RUN groupadd --system --gid 10001 memvault \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/memvault \
        --shell /usr/sbin/nologin memvault \
 && mkdir -p /data \
 && chown 10001:10001 /data

# Only what the package needs (.dockerignore keeps everything else, your vault included, out).
COPY pyproject.toml README.md /tmp/src/
COPY memvault/ /tmp/src/memvault/
RUN pip install --no-cache-dir /tmp/src && rm -rf /tmp/src

USER 10001:10001
WORKDIR /home/memvault
VOLUME ["/data"]
EXPOSE 3000

# slim has no curl: ask /healthz with Python's urllib (any non-200 answer or error is unhealthy).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:3000/healthz', timeout=4).status == 200 else 1)"]

# Host and port are fixed inside the container; publish it on another host port with MCP_PORT.
CMD ["memvault", "serve", "--host", "0.0.0.0", "--port", "3000"]
