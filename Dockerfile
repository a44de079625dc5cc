# The media server in a container: Deno from npm, native ffmpeg from Debian, bound to 0.0.0.0.
FROM node:20-bookworm-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && npm install -g deno@2 \
 && deno --version

WORKDIR /app
# Dependencies first, so a code change does not refetch them.
COPY deno.json deno.lock ./
RUN deno install --frozen
COPY . .
RUN deno cache --frozen main.ts && deno task build:wasm

ENV MEDIASERVER_BIND=0.0.0.0
# WS signaling, REST, HLS, WSS, RTMP, WebRTC media.
EXPOSE 8080 8081 8082 8443 1935 31000-31999/udp
VOLUME ["/app/content", "/app/records", "/app/logs"]
STOPSIGNAL SIGTERM
CMD ["deno", "task", "start"]
