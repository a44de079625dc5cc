/**
 * Starts and stops the listeners of one server: the REST API now; signaling, RTMP and HLS
 * plug in here as they are built. Everything started here is closed by `stop()`.
 */
import type { Config } from "./config.ts";
import type { Logger } from "./core/log.ts";
import { InflightTracker } from "./core/inflight.ts";
import { HttpListener } from "./core/http_listener.ts";
import { descriptors } from "./core/fd_guard.ts";
import { startMemoryTrim } from "./core/memory_trim.ts";
import { createServices, type ServiceOverrides, type Services } from "./core/services.ts";
import { CdnListener } from "./core/cdn/cdn_listener.ts";
import { createRestHandler } from "./routes/http.ts";
import { operations } from "./routes/mod.ts";
import { SignalingServer } from "./signaling/listener.ts";
import { type RunningRtmpServer, startRtmpServer } from "./media/providers/rtmp_server.ts";
import { createHlsHandler } from "./media/publishers/hls/hls_http.ts";
import { HlsListener } from "./media/publishers/hls/hls_listener.ts";
import { type RunningRtspServer, startRtspServer } from "./media/publishers/rtsp_server.ts";
import { type RunningSrtServer, startSrtServer } from "./core/srt_server.ts";
import { closeIceMux, openIceMux } from "./media/protocols/webrtc/ice_mux_select.ts";
import type { IceMux } from "./media/protocols/webrtc/ice_mux.ts";
import { chooseSendEngine } from "./media/send_engine/send_engine_select.ts";

/** A started server. */
export interface RunningServer {
  readonly services: Services;
  /** Port the REST API listens on (the configured one, or the ephemeral one given for 0). */
  readonly restPort: number;
  /** Web SDK signaling: its listeners, sessions and message handlers. */
  readonly signaling: SignalingServer;
  /** Port of plain WebSocket signaling. */
  readonly wsPort: number;
  /** Port of WebSocket signaling over TLS; undefined when no certificate is configured. */
  readonly wssPort?: number;
  /** Port of RTMP ingest and playback. */
  readonly rtmpPort: number;
  /** Port of HLS over HTTP. */
  readonly hlsPort: number;
  /** Port of the RTSP server. */
  readonly rtspPort: number;
  /** Port of the shared SRT listener (publish and play by stream id). */
  readonly srtPort: number;
  /** Port of the SIP user agent (UDP and TCP). */
  readonly sipPort: number;
  /** The shared SRT listener: its handshake counters and publishers. */
  readonly srt: RunningSrtServer;
  /** Port of the CDN listener; undefined when the CDN is not enabled. */
  readonly cdnPort?: number;
  /** UDP port every browser-facing WebRTC peer shares; undefined without the ICE mux. */
  readonly webrtcUdpPort?: number;
  /** Stops accepting, lets in-flight requests finish, closes every listener. */
  stop(): Promise<void>;
}

/** Starts every listener of the configuration. */
export async function startServer(
  config: Config,
  log: Logger,
  overrides: ServiceOverrides = {},
): Promise<RunningServer> {
  const { media } = config;
  const iceMux = openIceMux({
    setting: media.iceMux,
    host: config.binds.media ?? config.bind,
    port: config.ports.webrtcUdp,
    portMin: media.udpPortMin,
    portMax: media.udpPortMax,
  });
  const closeMux = async () => {
    if (iceMux.mux) await closeIceMux(iceMux.mux, media.udpPortMin, media.udpPortMax);
  };
  if (iceMux.mux) {
    log.info("listening", {
      service: "webrtc-udp",
      address: iceMux.mux.host,
      port: iceMux.mux.port,
    });
  } else {
    log.info("no ICE mux: WebRTC peers bind ports of their own", { reason: iceMux.reason });
  }
  const services = createServices(config, log, { ...overrides, iceMux: iceMux.mux });
  await startSendEngine(services, iceMux.mux, log).catch(async (err) => {
    await closeMux();
    throw err;
  });
  descriptors.configure(config.limits.fdReserve);
  // Listeners opened below fill in their figures; /health reads them per request.
  const listeners: {
    rest?: HttpListener;
    signaling?: SignalingServer;
    rtmp?: RunningRtmpServer;
    hls?: HlsListener;
    rtsp?: RunningRtspServer;
    srt?: RunningSrtServer;
  } = {};
  const restRequests = new InflightTracker();
  const restHandler = createRestHandler({
    services,
    operations,
    inflight: restRequests,
    listenerFigures: () => ({
      ...(listeners.rest ? { rest: { restarts: listeners.rest.restarts } } : {}),
      ...listeners.signaling?.limitsSnapshot(),
      ...(listeners.rtmp ? { rtmp: listeners.rtmp.limitsSnapshot() } : {}),
      ...(listeners.hls ? { hls: { restarts: listeners.hls.restarts } } : {}),
      ...(listeners.rtsp ? { rtsp: listeners.rtsp.limitsSnapshot() } : {}),
      ...(listeners.srt ? { srt: listeners.srt.figures() } : {}),
      ...(iceMux.mux ? { webrtcUdp: { port: iceMux.mux.port, ...iceMux.mux.counters } } : {}),
    }),
  });
  const restHost = config.binds.rest ?? config.bind;
  const wsHost = config.binds.ws ?? config.bind;
  const rest = await HttpListener.start({
    hostname: restHost,
    port: config.ports.rest,
    handler: restHandler,
    onError: (err) => {
      log.error("rest listener error", { err });
      return new Response("internal error", { status: 500 });
    },
    log: log.child({ component: "rest" }),
    alwaysServed: ["/health"],
  }).catch(async (err) => {
    await closeMux();
    throw new Error(`cannot start the rest port ${config.ports.rest}: ${messageOf(err)}`, {
      cause: err,
    });
  });
  const restPort = rest.port;
  listeners.rest = rest;
  log.info("listening", { service: "rest", address: restHost, port: restPort });

  const signaling = new SignalingServer(services);
  listeners.signaling = signaling;
  let wsPort: number;
  let wssPort: number | undefined;
  let rtmp: RunningRtmpServer;
  let hls: HlsListener | undefined;
  let rtsp: RunningRtspServer;
  let srt: RunningSrtServer;
  let sipPort: number;
  let cdn: CdnListener | undefined;
  // Which listener was starting, named in the error: a port in use says which port it was.
  let starting = `ws port ${config.ports.ws}`;
  try {
    wsPort = await signaling.listen({ hostname: wsHost, port: config.ports.ws });
    const { certFile, keyFile } = config.tls;
    if (certFile && keyFile) {
      starting = `wss port ${config.ports.wss}`;
      wssPort = await signaling.listen({
        hostname: wsHost,
        port: config.ports.wss,
        tls: { certFile, keyFile },
      });
    }
    starting = `rtmp port ${config.ports.rtmp}`;
    rtmp = startRtmpServer(services);
    listeners.rtmp = rtmp;
    starting = `rtsp port ${config.ports.rtsp}`;
    rtsp = startRtspServer(services);
    listeners.rtsp = rtsp;
    starting = `srt port ${config.ports.srt} (UDP)`;
    srt = await startSrtServer(services);
    listeners.srt = srt;
    starting = `sip port ${config.ports.sip}`;
    sipPort = await services.calls.start();
    const hlsHost = config.binds.hls ?? config.bind;
    starting = `hls port ${config.ports.hls}`;
    hls = await HlsListener.start({
      hostname: hlsHost,
      port: config.ports.hls,
      handler: createHlsHandler({
        outputs: services.hls,
        corsOrigins: config.hls.corsOrigins,
        targetDurationSec: config.hls.segmentDurationSec,
        partDurationMs: config.hls.lowLatency ? config.hls.partDurationMs : 0,
        aclPropertyName: config.cdn.aclPropertyName,
        log: log.child({ component: "hls" }),
      }),
      log: log.child({ component: "hls" }),
      transport: config.hls.transport,
      segmentStore: config.hls.segmentStore,
    });
    listeners.hls = hls;
    log.info("listening", {
      service: "hls",
      address: hlsHost,
      port: hls.port,
      transport: hls.transport,
    });
    if (services.cdn) {
      starting = `cdn port ${config.ports.cdn}`;
      cdn = await CdnListener.start({
        hostname: config.bind,
        port: config.ports.cdn,
        node: services.cdn,
        log: log.child({ component: "cdn" }),
      });
      log.info("listening", { service: "cdn", address: config.bind, port: cdn.port });
      await services.cdn.start(config.cdn.address ?? config.bind, cdn.port);
    }
  } catch (err) {
    await services.cdn?.close();
    await cdn?.shutdown();
    await hls?.shutdown();
    await listeners.rtmp?.close();
    await listeners.rtsp?.close();
    await listeners.srt?.close();
    await services.calls.closeAll();
    await signaling.stop();
    await rest.shutdown();
    await services.sendPaths.close();
    await closeMux();
    throw new Error(`cannot start the ${starting}: ${messageOf(err)}`, { cause: err });
  }

  const stopMemoryTrim = startMemoryTrim(log);
  let stopped: Promise<void> | undefined;
  return {
    services,
    restPort,
    signaling,
    wsPort,
    wssPort,
    rtmpPort: rtmp.port,
    hlsPort: hls.port,
    rtspPort: rtsp.port,
    srtPort: srt.port,
    sipPort,
    cdnPort: cdn?.port,
    webrtcUdpPort: iceMux.mux?.port,
    srt,
    stop() {
      stopped ??= (async () => {
        stopMemoryTrim();
        await restRequests.drain();
        // Routes withdrawn and relays cut before the streams they carry end one by one.
        await services.cdn?.close();
        await cdn?.shutdown();
        await signaling.stop();
        await rest.shutdown();
        // Outputs first: waiting HLS requests settle, so the listener's shutdown is quick.
        services.hls.closeAll();
        await hls.shutdown();
        // Recorders first, so files close cleanly while their streams still run.
        await services.recorders.closeAll();
        await services.mixers.closeAll();
        await services.transcoders.closeAll();
        await services.playRenditions.closeAll();
        await services.decoders.close();
        await services.vod.closeAll();
        await services.rtsp.closeAll();
        await services.whip.closeAll();
        await services.sfu.closeAll();
        await services.mpegts.closeAll();
        await services.calls.closeAll();
        await srt.close();
        await services.pushes.closeAll();
        await services.rtmpPulls.closeAll();
        await services.remotePulls.closeAll();
        await rtmp.close();
        await rtsp.close();
        await services.engine.close();
        // Its Workers send on the mux's socket.
        await services.sendPaths.close();
        // Last: every peer on it has closed.
        await closeMux();
        log.info("stopped");
      })();
      return stopped;
    },
  };
}

/**
 * Starts the players' send engine when `media.sendEngine` resolves to ffi and the ICE mux is
 * open: its Workers send on the mux's socket, the port browsers' ICE selected.
 */
async function startSendEngine(
  services: Services,
  mux: IceMux | undefined,
  log: Logger,
): Promise<void> {
  const { media } = services.config;
  const choice = chooseSendEngine(media.sendEngine);
  if (choice.engine !== "ffi" || !mux) {
    log.info("WebRTC players send through werift", {
      reason: choice.engine === "ffi" ? "no ICE mux" : choice.reason,
    });
    return;
  }
  await services.sendPaths.start({
    workers: media.sendWorkers,
    socketFd: mux.fd,
    srtpBackend: choice.srtpBackend,
    onSubscriberError: (id, error) => log.warn("send engine refused a player", { id, error }),
  });
  log.info("WebRTC players send through the send engine", {
    workers: services.sendPaths.engine!.workers.length,
    srtp: choice.srtpBackend,
    reason: choice.reason,
  });
}

/** The message of a thrown value, for an error that wraps it. */
function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
