/**
 * The configuration: one zod schema, every field optional with a default. Sources, later ones
 * winning: the embedded defaults, the JSON file (`--config path`, else `server.json` when
 * present), then environment variables named after the field path (`MEDIASERVER_PORTS_REST`
 * for `ports.rest`, `MEDIASERVER_HOOKS_URL` for `hooks.url`).
 */
import { z } from "zod";
import { isHostPattern } from "./core/outbound.ts";

/** Prefix of the environment variables that override configuration fields. */
export const envPrefix = "MEDIASERVER_";

/** Name of the configuration file read when `--config` is not given and the file exists. */
export const defaultConfigFile = "server.json";

const port = z.int().min(0).max(65535);
const logLevel = z.enum(["error", "warn", "info", "debug", "trace"]);
/** A path prefix of the REST port: `/` and plain segments, none of the management API's. */
const httpPathPrefix = z.string().regex(
  /^(\/[A-Za-z0-9._~-]+)+$/,
  "a path like /whip (segments of letters, digits, . _ ~ -)",
).refine(
  (p) =>
    !["/rest-api", "/health", "/client", "/metrics", "/console"].some((taken) =>
      p === taken || p.startsWith(`${taken}/`)
    ),
  "the prefix is taken by the management API",
);

/** One HLS ABR profile: an H.264 encode of the source offered as a variant. */
const hlsProfile = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, "letters, digits, - and _ (1 to 32)")
    .refine((name) => name !== "source", "`source` names the source variant"),
  /** Picture size; 0 for one side keeps the source's aspect. */
  width: z.int().min(0).max(4096),
  height: z.int().min(0).max(4096),
  /** Frames per second; 0 follows the source. */
  fps: z.int().min(0).max(120).default(0),
  bitrateKbps: z.int().min(50).max(100_000),
  codec: z.enum(["H264"]).default("H264"),
  /** GROUP-ID of `hls.audioRenditions` played with it; its own segments are then video only. */
  audioGroup: z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, "letters, digits, - and _ (1 to 32)")
    .optional(),
}).refine((p) => p.width > 0 || p.height > 0, {
  message: "width or height must be set",
  path: ["height"],
});

/** One HLS audio rendition (`#EXT-X-MEDIA:TYPE=AUDIO`): AAC served apart from the video. */
const hlsAudioRendition = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, "letters, digits, - and _ (1 to 32)")
    .refine((name) => name !== "source", "`source` names the source variant"),
  group: z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, "letters, digits, - and _ (1 to 32)"),
  /** AAC bitrate; absent: the source's AAC as it is (other audio converted at 128 kbit/s). */
  bitrateKbps: z.int().min(16).max(512).optional(),
  codec: z.enum(["AAC"]).default("AAC"),
});

/** One application of `apps`: its hook backend and how its hooks are called. */
const appSchema = z.strictObject({
  hooksUrl: z.url({ protocol: /^https?$/ }),
  restOnError: z.enum(["LOG", "FAIL"]).default("LOG"),
  /** Hook names called (`connect`, `OnDataEvent`, ...); absent calls every hook. */
  enabledHooks: z.array(z.string().regex(/^[A-Za-z]+$/, "a hook name like OnDataEvent"))
    .optional(),
  timeoutMs: z.int().min(1).max(600_000).optional(),
});

/**
 * HLS audio groups named by profiles (and the source) exist; profile and audio rendition
 * names, the directories of their URLs, are unique together.
 */
function checkHlsAudioGroups(
  hls: {
    profiles: { name: string; audioGroup?: string }[];
    audioRenditions: { name: string; group: string }[];
    sourceAudioGroup?: string;
  },
  ctx: z.RefinementCtx,
): void {
  const groups = new Set(hls.audioRenditions.map((r) => r.group));
  const unknown = (group: string) =>
    `audio group ${group} is not a group of hls.audioRenditions (${
      [...groups].join(", ") || "none"
    })`;
  hls.profiles.forEach((p, i) => {
    if (p.audioGroup !== undefined && !groups.has(p.audioGroup)) {
      ctx.addIssue({
        code: "custom",
        message: unknown(p.audioGroup),
        path: ["profiles", i, "audioGroup"],
      });
    }
  });
  if (hls.sourceAudioGroup !== undefined && !groups.has(hls.sourceAudioGroup)) {
    ctx.addIssue({
      code: "custom",
      message: unknown(hls.sourceAudioGroup),
      path: ["sourceAudioGroup"],
    });
  }
  const names = new Set(hls.profiles.map((p) => p.name));
  hls.audioRenditions.forEach((r, i) => {
    if (names.has(r.name)) {
      ctx.addIssue({
        code: "custom",
        message: `name ${r.name} is taken by another profile or audio rendition`,
        path: ["audioRenditions", i, "name"],
      });
    }
    names.add(r.name);
  });
}

/** Schema of the configuration file. */
export const configSchema = z.strictObject({
  bind: z.ipv4().or(z.ipv6()).default("127.0.0.1").describe(
    "Address every listener binds; a public bind must be asked for explicitly.",
  ),
  ports: z.strictObject({
    rest: port.default(8081).describe("REST API (`/rest-api`) and `/health`."),
    ws: port.default(8080).describe("Web SDK WebSocket signaling, plain."),
    wss: port.default(8443).describe(
      "Web SDK WebSocket signaling over TLS; only opened when `tls` is configured.",
    ),
    hls: port.default(8082).describe("HLS over HTTP."),
    rtmp: port.default(1935).describe("RTMP ingest and playback."),
    rtsp: port.default(554).describe(
      "RTSP server: every published stream played at `rtsp://host:port/<stream>`.",
    ),
    srt: port.default(8890).describe(
      "Shared SRT port (UDP): callers publish with stream id `#!::r=<name>,m=publish` (or `<name>`, `publish:<name>`) and play any stream with `#!::r=<name>,m=request` (or `read:<name>`), as MPEG-TS.",
    ),
    sip: port.default(5060).describe(
      "SIP user agent (UDP and TCP): calls of `/call/startup` and of Web SDK sessions with sipOptions go out from it; incoming INVITEs ring the Web SDK session registered with the callee's login.",
    ),
    cdn: port.default(8084).describe(
      "CDN listener (WebSocket): other nodes pull streams from this one; only opened when `cdn.enabled`.",
    ),
    webrtcUdp: port.default(0).describe(
      "One UDP port shared by every WebRTC peer (ICE mux, `media.iceMux`); 0 takes the first free port of `media.udpPortMin`..`udpPortMax` at start.",
    ),
  }).prefault({}),
  tls: z.strictObject({
    certFile: z.string().min(1).optional().describe("PEM certificate chain file for WSS."),
    keyFile: z.string().min(1).optional().describe("PEM private key file for WSS."),
  }).prefault({}).refine((tls) => (tls.certFile === undefined) === (tls.keyFile === undefined), {
    message: "certFile and keyFile go together",
    path: ["keyFile"],
  }),
  folders: z.strictObject({
    media: z.string().min(1).default("content").describe(
      "VOD files, sounds, watermarks and layouts.",
    ),
    records: z.string().min(1).default("records").describe("Recordings."),
    logs: z.string().min(1).default("logs").describe("Per-session client logs."),
  }).prefault({}),
  log: z.strictObject({
    level: logLevel.default("info").describe("Lowest level written."),
  }).prefault({}),
  hooks: z.strictObject({
    url: z.url({ protocol: /^https?$/ }).optional().describe(
      "Base URL of the backend that receives REST hooks (`/connect`, `/OnDataEvent`, ...). Unset: no hooks, everything accepted.",
    ),
    timeoutMs: z.int().min(1).max(600_000).default(15_000).describe(
      "Time a hook may take before it counts as failed, in ms.",
    ),
  }).prefault({}),
  apps: z.record(
    z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, "an appKey of letters, digits, . _ - (1 to 64)"),
    appSchema,
  ).default({}).describe(
    "Applications by appKey (in the file, or JSON in the environment): `{hooksUrl, restOnError?, enabledHooks?, timeoutMs?}`. A session's hooks go to its app's `hooksUrl`; `restOnError` (LOG or FAIL) is the app's default for hooks its backend's `restClientConfig` leaves it unset; `enabledHooks` lists the hooks called (absent: all); `timeoutMs` overrides `hooks.timeoutMs`. Empty: every appKey uses `hooks.url`. Otherwise connections of an appKey neither listed nor built in (defaultApp, flashStreamingApp, roomApp, sfuApp, which use `hooks.url` unless listed) are refused.",
  ),
  keepAlive: z.strictObject({
    intervalMs: z.int().min(100).max(600_000).default(5_000).describe(
      "Interval of the server's WebSocket pings, in ms.",
    ),
    probes: z.int().min(1).max(1000).default(10).describe(
      "Consecutive missed pongs that end a session.",
    ),
  }).prefault({}),
  media: z.strictObject({
    engine: z.enum(["auto", "native", "wasm"]).default("auto").describe(
      "Codec engine: native ffmpeg, ffmpeg.wasm, or native when `ffmpeg` is on PATH.",
    ),
    announcedAddress: z.ipv4().or(z.ipv6()).optional().describe(
      "Address announced in ICE candidates when it differs from `bind` (NAT).",
    ),
    udpPortMin: port.default(31000).describe("Lowest UDP port for media."),
    udpPortMax: port.default(31999).describe("Highest UDP port for media."),
    sendEngine: z.enum(["auto", "ffi", "werift"]).default("auto").describe(
      "Sender of WebRTC players of WebRTC-published streams: `ffi` (after the DTLS handshake, SRTP on libcrypto and `sendmmsg` over FFI in `sendWorkers` Workers, on the ICE mux's socket; werift keeps ICE, DTLS and RTCP), `werift`, or (`auto`) `ffi` when libc and libcrypto.so.3 load (needs `--allow-ffi`). The engine runs only with the ICE mux (`iceMux`); without it players send through werift.",
    ),
    sendWorkers: z.int().min(1).max(256).optional().describe(
      "Workers of the `ffi` send engine. Default: the number of CPU cores.",
    ),
    iceMux: z.enum(["auto", "on", "off"]).default("auto").describe(
      "WebRTC peers of browsers and WHIP/WHEP clients share one UDP port (`ports.webrtcUdp`, a socket opened over FFI): `on`, `off` (each peer binds ports of `udpPortMin`..`udpPortMax`), or (`auto`) `on` when libc loads over FFI (needs `--allow-ffi`). Links to other servers (`/pull`) are on it too.",
    ),
    maxPublishBitrateKbps: z.int().min(100).max(100_000).default(2500).describe(
      "The video bitrate a WebRTC publisher (Web SDK, WHIP) is told (REMB) it may send, in kbit/s, or its own `maxBitrate` (`constraints.video.maxBitrate`, `x-google-max-bitrate`, `b=AS`/`b=TIAS` of its offer) when lower; lowered while its packets arrive with loss. Without it a browser stays near its starting rate (WCS's `webrtc_cc_max_bitrate`).",
    ),
    iceTransport: z.enum(["udp", "tcp"]).default("udp").describe(
      'Transport of the WebRTC media of Web SDK publish and play whose stream object names none (the SDK\'s `transport: "UDP"` or `"TCP"` wins), of WHIP/WHEP sessions without `?transport=` and of SFU participants whose connection has no `custom.transport`: `tcp` answers with one TCP passive candidate (ICE-TCP, RFC 6544) on a TCP port of `udpPortMin`..`udpPortMax` and no UDP one, for clients whose network blocks UDP (WCS\'s `ice_tcp_transport`).',
    ),
    minPublishBitrateKbps: z.int().min(10).max(100_000).default(100).describe(
      "The least a WebRTC publisher is told it may send however much of its video is lost, in kbit/s, or its own `minBitrate` when higher (WCS's `webrtc_cc_min_bitrate`).",
    ),
  }).prefault({}).refine((m) => m.udpPortMin <= m.udpPortMax, {
    message: "udpPortMin must not exceed udpPortMax",
    path: ["udpPortMax"],
  }).refine((m) => m.minPublishBitrateKbps <= m.maxPublishBitrateKbps, {
    message: "minPublishBitrateKbps must not exceed maxPublishBitrateKbps",
    path: ["minPublishBitrateKbps"],
  }),
  rest: z.strictObject({
    maxBodyBytes: z.int().min(1024).max(64 * 1024 * 1024).default(1024 * 1024).describe(
      "Largest REST request body accepted, in bytes.",
    ),
    authTokens: z.array(z.string().min(16)).default([]).describe(
      "Bearer tokens accepted by the REST API (comma-separated in the environment). With neither tokens nor users, REST is open, as in WCS.",
    ),
    basicUsers: z.array(z.string().regex(/^[^:]+:.+$/, "must be user:password")).default([])
      .describe(
        "`user:password` pairs accepted by the REST API with HTTP Basic (comma-separated in the environment).",
      ),
    corsOrigins: z.array(z.string().min(1)).default(["*"]).describe(
      "Origins allowed to call the REST API from a browser; `*` allows any but never with credentials.",
    ),
  }).prefault({}),
  metrics: z.strictObject({
    enabled: z.boolean().default(true).describe(
      "Serve Prometheus metrics at `GET /metrics` on the REST port (behind REST auth when it is on) and time REST requests for them.",
    ),
    streamLabels: z.boolean().default(false).describe(
      "Add per-stream series (label `stream`) to `/metrics`; one series set per published stream, so off by default.",
    ),
  }).prefault({}),
  whip: z.strictObject({
    publishPath: httpPathPrefix.default("/whip").describe(
      "Path prefix of WHIP (RFC 9725) publishing on the REST port: `POST <prefix>/<stream>`.",
    ),
    playPath: httpPathPrefix.default("/whep").describe(
      "Path prefix of WHEP playback on the REST port: `POST <prefix>/<stream>`.",
    ),
  }).prefault({}).refine((w) => w.publishPath !== w.playPath, {
    message: "publishPath and playPath must differ",
    path: ["playPath"],
  }),
  hls: z.strictObject({
    segmentDurationSec: z.int().min(1).max(30).default(2).describe(
      "HLS target segment duration, in seconds; segments end at the first keyframe past it.",
    ),
    windowSegments: z.int().min(2).max(100).default(6).describe(
      "HLS segments kept per variant (in the playlist and in memory).",
    ),
    container: z.enum(["ts", "fmp4"]).default("ts").describe(
      "HLS segment container: MPEG-TS or fMP4 (CMAF); H.265 sources are always served as fMP4.",
    ),
    lowLatency: z.boolean().default(false).describe(
      "Low-latency HLS: partial segments, preload hints and blocking playlist reload.",
    ),
    partDurationMs: z.int().min(100).max(5000).default(500).describe(
      "LL-HLS part duration, in ms (with `hls.lowLatency`).",
    ),
    transport: z.enum(["auto", "ffi", "deno"]).default("auto").describe(
      "Sockets of the HLS port: `ffi` libc sockets with epoll, segments sent with sendfile(2) from where `hls.segmentStore` keeps them (no copy per viewer; needs FFI permission and glibc on Linux), `deno` Deno's sockets, `auto` ffi when available, else deno.",
    ),
    segmentStore: z.enum(["memory", "tmpfile"]).default("memory").describe(
      "Where the `ffi` HLS transport keeps segments and parts it sends: `memory` memfds (never written to disk), `tmpfile` unnamed files in the temp folder (`$TMPDIR` or /tmp; about 10 µs less kernel time per 300 KB segment sent from ext4, but a segment kept past the kernel's dirty expiry, 30 s by default, may be written back to that disk; memfds where the folder cannot hold them).",
    ),
    idleTimeoutSec: z.int().min(1).max(86_400).default(30).describe(
      "An HLS output started by a viewer stops after this long without a viewer request, in seconds.",
    ),
    endedKeepSec: z.int().min(0).max(86_400).default(30).describe(
      "An ended stream's playlists stay (with `#EXT-X-ENDLIST`) this long, then answer 404; a publisher of the name back within it continues the output, in seconds.",
    ),
    profiles: z.array(hlsProfile).default([]).refine(
      (profiles) => new Set(profiles.map((p) => p.name)).size === profiles.length,
      "profile names must be unique",
    ).describe(
      "HLS ABR profiles `{name, width, height, fps, bitrateKbps, codec, audioGroup}` (in the file), each one H.264 encode offered besides the source; with `audioGroup` its segments are video only and it plays with that group of `hls.audioRenditions`.",
    ),
    audioRenditions: z.array(hlsAudioRendition).default([]).describe(
      "HLS audio renditions `{name, group, bitrateKbps, codec}` (in the file): AAC served apart (`#EXT-X-MEDIA`) for the variants naming their `group`, each one encode shared by every viewer; the first of a group is its default.",
    ),
    sourceAudioGroup: z.string().optional().describe(
      "Audio group of `hls.audioRenditions` the source variant plays with (its segments then video only); absent: the source keeps its audio.",
    ),
    corsOrigins: z.array(z.string().min(1)).default(["*"]).describe(
      "Origins allowed to fetch HLS from a browser; `*` allows any.",
    ),
  }).prefault({}).refine((h) => h.partDurationMs < h.segmentDurationSec * 1000, {
    message: "partDurationMs must be shorter than segmentDurationSec",
    path: ["partDurationMs"],
  }).superRefine(checkHlsAudioGroups),
  mixer: z.strictObject({
    width: z.int().min(16).max(4096).multipleOf(2).default(1280).describe(
      "Width of a mixer's output, in pixels (even).",
    ),
    height: z.int().min(16).max(4096).multipleOf(2).default(720).describe(
      "Height of a mixer's output, in pixels (even).",
    ),
    fps: z.int().min(1).max(60).default(30).describe("Frames per second of a mixer's output."),
    keyFrameIntervalSec: z.int().min(1).max(20).default(2).describe(
      "Seconds between keyframes of a mixer's output.",
    ),
    videoBitrateKbps: z.int().min(0).max(50_000).default(2000).describe(
      "H.264 bitrate of a mixer's output, in kbit/s (0: the encoder's choice for the size).",
    ),
    audioBitrateKbps: z.int().min(0).max(510).default(64).describe(
      "Opus bitrate of a mixer's output, in kbit/s (0: the codec's default).",
    ),
    layout: z.string().min(1).default("grid").describe(
      "Layout of a mixer started without `mixerLayoutClass`: grid, center or desktop (WCS class names accepted).",
    ),
    mcuAudio: z.boolean().default(false).describe(
      "MCU mode: every input of a mixer also gets an output `<mixer output>-<input name without #>` whose sound leaves that input out (what a conference participant plays).",
    ),
    autoMixing: z.boolean().default(false).describe(
      "Streams published as `<login>#<room>` join the mixer `<room>`, made on the first join and ended when the last input leaves.",
    ),
  }).prefault({}),
  rtmp: z.strictObject({
    transport: z.enum(["auto", "ffi", "deno"]).default("auto").describe(
      "How the RTMP port's connections write: `ffi` with one send(2) on the socket's descriptor per write, what the socket does not take at once through Deno's write (needs FFI permission and a C library on Linux), `deno` Deno's writes only, `auto` ffi when available, else deno.",
    ),
  }).prefault({}),
  rtsp: z.strictObject({
    transport: z.enum(["auto", "udp", "tcp"]).default("auto").describe(
      "How RTSP pulls receive media: UDP, TCP interleaved, or UDP falling back to TCP when no packet comes.",
    ),
    serverUsers: z.array(z.string().regex(/^[^:]+:.+$/, "must be user:password")).default([])
      .describe(
        "`user:password` pairs the RTSP server asks of its players and publishers (Digest or Basic; comma-separated in the environment). Empty: no authentication.",
      ),
  }).prefault({}),
  binds: z.strictObject({
    rest: z.ipv4().or(z.ipv6()).optional().describe(
      "Address of the REST listener when it differs from `bind` (keep REST on 127.0.0.1 while media is public).",
    ),
    ws: z.ipv4().or(z.ipv6()).optional().describe(
      "Address of the WS and WSS signaling listeners when it differs from `bind`.",
    ),
    rtmp: z.ipv4().or(z.ipv6()).optional().describe(
      "Address of the RTMP listener when it differs from `bind`.",
    ),
    hls: z.ipv4().or(z.ipv6()).optional().describe(
      "Address of the HLS listener when it differs from `bind`.",
    ),
    rtsp: z.ipv4().or(z.ipv6()).optional().describe(
      "Address of the RTSP server's listener when it differs from `bind`.",
    ),
    srt: z.ipv4().or(z.ipv6()).optional().describe(
      "Address of the shared SRT port when it differs from `bind`.",
    ),
    sip: z.ipv4().or(z.ipv6()).optional().describe(
      "Address of the SIP user agent and of its calls' RTP when it differs from `bind`.",
    ),
    media: z.ipv4().or(z.ipv6()).optional().describe(
      "Address WebRTC media (UDP) binds when it differs from `bind`.",
    ),
  }).prefault({}),
  limits: z.strictObject({
    connectionsPerListener: z.int().min(1).default(10_000).describe(
      "Open connections one TCP listener (WS, WSS, RTMP) holds; more are refused.",
    ),
    connectionsPerAddress: z.int().min(1).default(1_000).describe(
      "Open connections from one client address on one listener; more are refused.",
    ),
    sessions: z.int().min(1).default(10_000).describe("Web SDK sessions at once."),
    streams: z.int().min(1).default(1_000).describe("Streams published at once."),
    pulls: z.int().min(1).default(200).describe("RTSP and RTMP pulls at once."),
    pushes: z.int().min(1).default(200).describe("RTMP pushes at once."),
    vods: z.int().min(1).default(100).describe("VOD streams at once."),
    recorders: z.int().min(1).default(200).describe("Recorders and multi-recorders at once."),
    transcoders: z.int().min(1).default(32).describe(
      "Transcoders at once (REST transcoders and renditions made for players).",
    ),
    mixers: z.int().min(1).default(8).describe("Mixers at once (REST and auto-mixing)."),
    calls: z.int().min(1).default(200).describe("SIP calls at once (REST, Web SDK, incoming)."),
    engineJobs: z.int().min(1).optional().describe(
      "Codec engine jobs (ffmpeg processes or Workers) running at once; snapshots queue behind them. Default: the number of CPU cores.",
    ),
    engineQueue: z.int().min(0).default(256).describe(
      "Codec engine jobs waiting for one of `engineJobs`; more are refused (503).",
    ),
    fdReserve: z.int().min(0).optional().describe(
      "Descriptors kept free below the open-file limit for the REST API, files and pipes (WS/RTMP connections and pulls/pushes are refused within it); default half the limit, at most 1024; 0 turns this off.",
    ),
    recordMinFreeMb: z.int().min(0).default(256).describe(
      "Free space the records folder keeps, in MiB; new recordings are refused below it.",
    ),
  }).prefault({}),
  ws: z.strictObject({
    maxMessageBytes: z.int().min(1024).max(16 * 1024 * 1024).default(256 * 1024).describe(
      "Largest WebSocket message of an established session, in bytes; a larger one closes with 1009.",
    ),
    maxHandshakeMessageBytes: z.int().min(1024).max(16 * 1024 * 1024).default(16 * 1024)
      .describe(
        "Largest WebSocket message before the `connection` message is accepted, in bytes.",
      ),
    handshakeTimeoutMs: z.int().min(100).max(600_000).default(10_000).describe(
      "Time a new WebSocket has to upgrade and get its `connection` message accepted, in ms.",
    ),
    resumeWindowSec: z.int().min(0).max(86_400).default(60).describe(
      "A session connected with `keepAlive: true` outlives its WebSocket this long, streams included, for a reconnect with its `authToken` to resume it; 0 ends every session with its socket, in seconds.",
    ),
  }).prefault({}),
  outbound: z.strictObject({
    allowedHosts: z.array(
      z.string().refine(isHostPattern, "a host glob (`cam*.example.com`) or an IPv4 CIDR"),
    ).default([]).describe(
      "Host patterns RTSP/RTMP pulls and pushes may connect to (`cam*.example.com`, `10.0.0.*`, comma-separated in the environment); empty allows any.",
    ),
  }).prefault({}),
  sip: z.strictObject({
    announcedAddress: z.ipv4().or(z.ipv6()).optional().describe(
      "Address written in SIP Via/Contact headers and SDP when it differs from the bound one (NAT).",
    ),
    rtpPortMin: port.default(30100).describe(
      "Lowest UDP port of SIP calls' RTP (an even port for RTP, the next for RTCP).",
    ),
    rtpPortMax: port.default(30999).describe("Highest UDP port of SIP calls' RTP."),
    registerExpiresSec: z.int().min(60).max(86_400).default(3600).describe(
      "Expires asked for in REGISTER; the registration is refreshed before it runs out, in s.",
    ),
    t1Ms: z.int().min(10).max(10_000).default(500).describe(
      "SIP timer T1 (RFC 3261): the first retransmission interval over UDP; a transaction times out after 64 x T1, in ms.",
    ),
  }).prefault({}).refine((s) => s.rtpPortMin < s.rtpPortMax, {
    message: "rtpPortMin must be below rtpPortMax",
    path: ["rtpPortMax"],
  }),
  cdn: z.strictObject({
    enabled: z.boolean().default(false).describe(
      "Join the CDN: announce this node, its published streams (origin) and pull others' on demand (edge).",
    ),
    role: z.enum(["origin", "edge", "transcoder"]).default("origin").describe(
      "Origin: publishers connect here and its streams are offered to the CDN. Edge: players connect here and streams of origins are pulled on demand. Transcoder: encodes profiles of origin streams for edges.",
    ),
    groups: z.array(z.string().regex(/^[A-Za-z0-9._-]{1,64}$/)).default([]).describe(
      "Groups of the node; an edge elects transcoders of its own groups (none: the default group).",
    ),
    address: z.string().min(1).optional().describe(
      "Host other nodes reach this node's CDN listener at; unset: `bind`.",
    ),
    secret: z.string().min(16).optional().describe(
      "Shared secret every node presents when it pulls from another (16 characters or more); unset: nodes pull without one (a trusted network).",
    ),
    heartbeatMs: z.int().min(100).max(60_000).default(1000).describe(
      "How often the node refreshes its liveness in the cluster store, in ms.",
    ),
    nodeTtlMs: z.int().min(300).max(600_000).default(3000).describe(
      "A node that has not refreshed its liveness for this long is PASSIVE, in ms.",
    ),
    pullGraceMs: z.int().min(0).max(3_600_000).default(10_000).describe(
      "An edge's pull of an origin stream ends this long after its last player left, in ms.",
    ),
    aclPropertyName: z.string().min(1).default("aclAuth").describe(
      "Name of the viewer's ACL key: a Web SDK session custom field, an RTMP/HLS URL query parameter.",
    ),
    originAllowedToTranscode: z.boolean().default(false).describe(
      "An origin may encode profiles when no transcoder node is available.",
    ),
    maxEncodings: z.int().min(0).max(10_000).default(0).describe(
      "A transcoder node encoding this many profiles takes no new streams (`thresholdState`); 0: no limit.",
    ),
    loadThreshold: z.number().min(0).max(1000).default(0).describe(
      "A transcoder node whose load average per core reaches this takes no new streams (`thresholdState`); 0: not checked.",
    ),
    thresholdState: z.enum(["CONNECTIONS_ALLOWED", "GROUP_CONNECTIONS_ALLOWED"]).default(
      "GROUP_CONNECTIONS_ALLOWED",
    ).describe(
      "The processing state a transcoder node over `maxEncodings` or `loadThreshold` announces: CONNECTIONS_ALLOWED still takes profiles of streams it decodes, GROUP_CONNECTIONS_ALLOWED none.",
    ),
  }).prefault({}).refine((c) => c.heartbeatMs < c.nodeTtlMs, {
    message: "heartbeatMs must be below nodeTtlMs",
    path: ["nodeTtlMs"],
  }),
  cluster: z.strictObject({
    redisUrl: z.url({ protocol: /^rediss?$/ }).optional().describe(
      "Redis holding the CDN's shared state (nodes, routes, ACLs, profiles); unset: an in-process store (one node).",
    ),
  }).prefault({}),
  sfu: z.strictObject({
    bridge: z.boolean().default(false).describe(
      "Also publish each SFU room participant's media as ordinary streams `{room}-{nickname}-VIDEO` (its highest simulcast layer alive; `-VIDEO-screen` for a screen share) and `{room}-{nickname}-AUDIO`, playable, recordable and pushable like any stream, ended when the participant leaves or stops the track, published again under the new name when the participant is renamed (WCS's `sfu_bridge_enabled`).",
    ),
    maxRooms: z.int().min(1).max(1_000_000).default(10_000).describe(
      "Most SFU rooms at once; a `joinRoom` that would create one more is refused with OPERATION_FAILED `Too many rooms`.",
    ),
    maxParticipantsPerRoom: z.int().min(1).max(10_000).default(100).describe(
      "Most participants in one SFU room; a `joinRoom` beyond them is refused with OPERATION_FAILED `Room is full`.",
    ),
    maxPublishBitrateKbps: z.int().min(100).max(100_000).default(2500).describe(
      "The bitrate an SFU participant is told (REMB) it may publish its video at, in kbit/s, lowered while its packets arrive with loss; it lets a browser leave its starting rate.",
    ),
  }).prefault({}),
  mpegts: z.strictObject({
    portMin: port.default(30000).describe(
      "Lowest port `/mpegts/startup` allocates (MPEG-TS over UDP or SRT, one port per receiver).",
    ),
    portMax: port.default(30099).describe("Highest port `/mpegts/startup` allocates."),
    timeoutMs: z.int().min(100).max(86_400_000).default(90_000).describe(
      "An MPEG-TS receiver without data for this long ends with its stream, in ms (the record's `timeout`).",
    ),
    maxTimestampDiffSec: z.int().min(1).max(3600).default(1).describe(
      "An MPEG-TS sender's timestamps jumping more than this are re-based so the stream's timeline stays continuous, in seconds (the record's `maxTimestampDiff`).",
    ),
    allowedList: z.array(
      z.string().refine(isHostPattern, "an address, an address glob (`10.0.0.*`) or an IPv4 CIDR"),
    ).default([]).describe(
      "Sender addresses MPEG-TS receivers accept (`10.0.0.5`, `10.0.0.0/8`, comma-separated in the environment); others' datagrams are dropped and counted, SRT callers refused; empty accepts any.",
    ),
    srtPassphrase: z.string().min(10).max(79).optional().describe(
      "Passphrase SRT callers of MPEG-TS receivers and of the shared SRT port (`ports.srt`) must encrypt with (10 to 79 characters); a caller with another one, or none, is refused at the handshake. Unset: callers send in the clear.",
    ),
  }).prefault({}).refine((m) => m.portMin <= m.portMax, {
    message: "portMin must not exceed portMax",
    path: ["portMax"],
  }),
});

/** The validated configuration with every default filled in. */
export type Config = z.output<typeof configSchema>;

/** A configuration value is wrong; `field` is its dotted path, `source` where it came from. */
export class ConfigError extends Error {
  constructor(readonly field: string, message: string, readonly source: string) {
    super(`${source}: ${field}: ${message}`);
    this.name = "ConfigError";
  }
}

/** Where to read the configuration from. */
export interface ConfigSources {
  /** Command-line arguments (only `--config path` / `--config=path` is read). */
  args?: string[];
  /** Environment variables. */
  env?: Record<string, string>;
  /** Reads a file as text; injectable for tests. */
  readTextFile?: (path: string) => string;
}

/** Builds the configuration from defaults, the file and the environment, or throws ConfigError. */
export function loadConfig(sources: ConfigSources = {}): Config {
  const read = sources.readTextFile ?? Deno.readTextFileSync;
  const explicitPath = configPathFromArgs(sources.args ?? []);
  const path = explicitPath ?? defaultConfigFile;
  let fileValue: unknown = {};
  let text: string | undefined;
  try {
    text = read(path);
  } catch (err) {
    if (explicitPath !== undefined || !(err instanceof Deno.errors.NotFound)) {
      throw new ConfigError("--config", `cannot read ${path}: ${(err as Error).message}`, path);
    }
  }
  if (text !== undefined) {
    try {
      fileValue = JSON.parse(text);
    } catch (err) {
      throw new ConfigError("(file)", `not valid JSON: ${(err as Error).message}`, path);
    }
    const fromFile = configSchema.safeParse(fileValue);
    if (!fromFile.success) throw issueToError(fromFile.error.issues[0], path);
  }
  const merged = applyEnv(fileValue, sources.env ?? {});
  const result = configSchema.safeParse(merged.value);
  if (!result.success) {
    const issue = result.error.issues[0];
    const field = issue.path.join(".");
    throw issueToError(issue, merged.sources.get(field) ?? path);
  }
  return result.data;
}

function configPathFromArgs(args: string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--config") {
      if (i + 1 >= args.length) throw new ConfigError("--config", "needs a path", "arguments");
      return args[i + 1];
    }
    if (args[i].startsWith("--config=")) return args[i].slice("--config=".length);
  }
  return undefined;
}

function issueToError(issue: z.core.$ZodIssue, source: string): ConfigError {
  let path = issue.path.map(String);
  if (issue.code === "unrecognized_keys") path = [...path, issue.keys[0]];
  const message = issue.code === "unrecognized_keys" ? "unknown field" : issue.message;
  return new ConfigError(path.join(".") || "(root)", message, source);
}

/** The environment variable that overrides a field path, e.g. ["ports","rest"] → MEDIASERVER_PORTS_REST. */
export function envName(path: string[]): string {
  return envPrefix +
    path.map((p) => p.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase()).join("_");
}

interface Leaf {
  path: string[];
  type: string;
}

/** Walks the schema to list its leaf fields with their base types. */
function leaves(schema: z.core.$ZodType, path: string[] = []): Leaf[] {
  const inner = unwrap(schema);
  const def = inner._zod.def;
  if (def.type === "object") {
    const shape = (def as z.core.$ZodObjectDef).shape;
    return Object.entries(shape).flatMap(([key, child]) => leaves(child, [...path, key]));
  }
  return [{ path, type: def.type }];
}

function unwrap(schema: z.core.$ZodType): z.core.$ZodType {
  let current = schema;
  for (;;) {
    const def = current._zod.def as {
      type: string;
      innerType?: z.core.$ZodType;
      in?: z.core.$ZodType;
    };
    if (def.innerType) current = def.innerType;
    else if (def.type === "pipe" && def.in) current = def.in;
    else return current;
  }
}

/** Overlays environment variables on the file's value, remembering which variable set which field. */
function applyEnv(
  fileValue: unknown,
  env: Record<string, string>,
): { value: unknown; sources: Map<string, string> } {
  const value = structuredClone(fileValue) as Record<string, unknown>;
  const sources = new Map<string, string>();
  for (const leaf of leaves(configSchema)) {
    const name = envName(leaf.path);
    const raw = env[name];
    if (raw === undefined) continue;
    let target = value;
    for (const key of leaf.path.slice(0, -1)) {
      if (typeof target[key] !== "object" || target[key] === null) target[key] = {};
      target = target[key] as Record<string, unknown>;
    }
    target[leaf.path[leaf.path.length - 1]] = coerceEnv(raw, leaf.type);
    sources.set(leaf.path.join("."), `env ${name}`);
  }
  return { value, sources };
}

function coerceEnv(raw: string, type: string): unknown {
  // A record (`apps`) has no flat form: JSON, or the raw text for the schema to refuse.
  if (type === "record") {
    try {
      return JSON.parse(raw);
    } catch {
      return raw;
    }
  }
  if (type === "array") return raw.split(",").map((item) => item.trim()).filter((item) => item);
  if (type === "number" || type === "int") return raw.trim() === "" ? raw : Number(raw);
  if (type === "boolean") return raw === "true" ? true : raw === "false" ? false : raw;
  return raw;
}
