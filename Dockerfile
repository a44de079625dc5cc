# The media server in a container: Deno from npm, native ffmpeg from Debian, bound to 0.0.0.0,
# running as the unprivileged user `mediaserver`.
#
#   docker build -t media-server .
#   docker run -d --name media-server \
#     -p 8080:8080 -p 8081:8081 -p 8082:8082 -p 1935:1935 -p 554:554 \
#     -p 31000-31999:31000-31999/udp \
#     -e MEDIASERVER_MEDIA_ANNOUNCED_ADDRESS=<the host's public IP> \
#     -e MEDIASERVER_REST_AUTH_TOKENS=<a long random token> \
#     -v media-content:/app/content -v media-records:/app/records media-server
#
# WebRTC: the server announces its own address in ICE candidates, which inside a container is
# the bridge address no client can reach. Set MEDIASERVER_MEDIA_ANNOUNCED_ADDRESS to the
# address clients use (the host's public IP behind NAT), and publish the UDP media range
# 1:1 (or use --network host). REST (8081, with /metrics) is reachable from outside the
# container once published: set REST auth tokens or publish it on 127.0.0.1 only
# (-p 127.0.0.1:8081:8081).
FROM node:20-bookworm-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && npm install -g deno@2 \
 && deno --version \
 && useradd --system --create-home --home-dir /home/mediaserver --shell /usr/sbin/nologin \
      mediaserver

# Deno's cache outside root's home, so the server's user can read it (and write code caches).
ENV DENO_DIR=/var/cache/deno
WORKDIR /app
# Dependencies first, so a code change does not refetch them.
COPY deno.json deno.lock ./
RUN deno install --frozen
COPY . .
# The code stays root's (read-only for the server); only the data folders and the cache are
# the server user's.
RUN deno cache --frozen main.ts && deno task build:wasm \
 && mkdir -p /app/content /app/records /app/logs \
 && chown -R mediaserver:mediaserver /app/content /app/records /app/logs "$DENO_DIR"

ENV MEDIASERVER_BIND=0.0.0.0
# The start task's allocator settings: memory a burst of load freed goes back to the system.
ENV MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072
# WS signaling, REST, HLS, WSS, RTMP, RTSP, WebRTC media, MPEG-TS/SRT receivers.
EXPOSE 8080 8081 8082 8443 1935 554 31000-31999/udp 30000-30099/udp
VOLUME ["/app/content", "/app/records", "/app/logs"]
USER mediaserver
STOPSIGNAL SIGTERM
# Run main.ts directly: `deno task start` would rebuild the kernels into the root-owned tree.
# RTSP's port 554 needs no capability: Docker (20.10+) sets
# net.ipv4.ip_unprivileged_port_start=0 in a container's own network namespace. With
# --network host it does not; set MEDIASERVER_PORTS_RTSP to a port above 1023 there.
# The V8 flag is the start task's: a young generation of 2 MiB semi-spaces (README, RTMP bench).
CMD ["deno", "run", "--frozen", "--v8-flags=--max-semi-space-size=2", "--allow-net", \
     "--allow-read", "--allow-write", "--allow-env", "--allow-run", "--allow-sys", "--allow-ffi", \
     "main.ts"]
