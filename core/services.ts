/**
 * The services REST routes and signaling call into. One instance per server; tests build
 * their own.
 */
import type { Config } from "../config.ts";
import { HookRouter } from "./hook_router.ts";
import type { Logger } from "./log.ts";
import { nodeIdFor } from "./ids.ts";
import { SessionRegistry } from "./session_registry.ts";
import { StreamRegistry } from "./stream_registry.ts";
import { createEngine } from "../media/engine/select.ts";
import { EnginePool } from "../media/engine/job_pool.ts";
import { RecorderRegistry } from "./recorder_registry.ts";
import { RtspRegistry } from "./rtsp_registry.ts";
import { WhipRegistry } from "./whip_registry.ts";
import { VodRegistry } from "./vod_registry.ts";
import { PushRegistry } from "./push_registry.ts";
import { RtmpPullRegistry } from "./rtmp_pull_registry.ts";
import { RemotePullRegistry } from "./remote_pull_registry.ts";
import { createLimits, type Limits } from "./limits.ts";
import { DecoderHub } from "../media/transcoder/decoded_source.ts";
import { TranscoderRegistry } from "./transcoder_registry.ts";
import { PlayRenditions } from "../media/transcoder/play_renditions.ts";
import { HlsRegistry } from "./hls_registry.ts";
import { MpegtsRegistry } from "./mpegts_registry.ts";
import { MixerRegistry } from "./mixer_registry.ts";
import { WatermarkCache } from "./watermark_cache.ts";
import { CallRegistry } from "./call_registry.ts";
import { RoomRegistry } from "./room_registry.ts";
import { SfuRoomRegistry } from "./sfu/room_registry.ts";
import { SfuBridge } from "./sfu/bridge.ts";
import { CdnNode } from "./cdn/cdn_node.ts";
import type { ClusterStore } from "./cluster/store.ts";
import type { IceMux } from "../media/protocols/webrtc/ice_mux.ts";
import { EngineSendPaths } from "../media/protocols/webrtc/engine_send_path.ts";
import { createClusterStore } from "./cluster/select.ts";

/** Registries and services of one server. */
export interface Services {
  readonly config: Config;
  readonly log: Logger;
  readonly streams: StreamRegistry;
  /** Identity of this server in hook bodies and records (`<32 random chars>@<address>`). */
  readonly nodeId: string;
  /** Established Web SDK client sessions. */
  readonly sessions: SessionRegistry;
  /** Outbound REST hooks, each to the backend of its session's application. */
  readonly hooks: HookRouter;
  /** Files of the media folder published as live streams. */
  readonly vod: VodRegistry;
  /** Recorders and multi-recorders. */
  readonly recorders: RecorderRegistry;
  /**
   * Codec engine (snapshots, conversions), chosen by `media.engine`; whole jobs run through
   * a pool of `limits.engineJobs`.
   */
  readonly engine: EnginePool;
  /** RTSP pulls of cameras. */
  readonly rtsp: RtspRegistry;
  /** WHIP publishes and WHEP plays, by session resource id. */
  readonly whip: WhipRegistry;
  /** Local streams published to remote RTMP servers. */
  readonly pushes: PushRegistry;
  /** Remote RTMP streams played into local streams. */
  readonly rtmpPulls: RtmpPullRegistry;
  /** Streams pulled from or pushed to other WCS-compatible servers (`/pull`). */
  readonly remotePulls: RemotePullRegistry;
  /** Sources being decoded for transcoders: one decoder per source stream. */
  readonly decoders: DecoderHub;
  /** Transcoders of the `/transcoder` and `/transcoder2` groups. */
  readonly transcoders: TranscoderRegistry;
  /** Renditions made for Web SDK players asking for another size or bitrate. */
  readonly playRenditions: PlayRenditions;
  /** Mixers of the `/mixer` group and auto-mixing. */
  readonly mixers: MixerRegistry;
  /** HLS outputs of streams (the `/hls` group and the HLS listener). */
  readonly hls: HlsRegistry;
  /** MPEG-TS receivers of the `/mpegts` group (UDP, SRT). */
  readonly mpegts: MpegtsRegistry;
  /** SIP calls (the `/call` group and Web SDK phones); its user agent starts with the server. */
  readonly calls: CallRegistry;
  /** Rooms of the built-in Room API application (`roomApp`). */
  readonly rooms: RoomRegistry;
  /** Rooms of the SFU (the SFU SDK's `sfuApp` sessions). */
  readonly sfu: SfuRoomRegistry;
  /** Server-wide caps of `config.limits`. */
  readonly limits: Limits;
  /** This server as a CDN node, when `cdn.enabled`; it joins once its listener is up. */
  readonly cdn?: CdnNode;
  /** The UDP socket browser-facing WebRTC peers share (`media.iceMux`); opened by startServer. */
  readonly iceMux?: IceMux;
  /**
   * The send engine of WebRTC players (`media.sendEngine`), started by startServer when it
   * resolves to ffi and the ICE mux is open; players send through werift otherwise.
   */
  readonly sendPaths: EngineSendPaths;
}

/** What tests (or embedders) may hand a server instead of building it from the configuration. */
export interface ServiceOverrides {
  /** The cluster store of the CDN node (several servers of one process may share one). */
  clusterStore?: ClusterStore;
  /** The ICE mux startServer opened; its owner closes it. */
  iceMux?: IceMux;
}

/** Builds the services of a server. */
export function createServices(
  config: Config,
  log: Logger,
  overrides: ServiceOverrides = {},
): Services {
  const limits = createLimits(config.limits);
  const streams = new StreamRegistry(limits.streams);
  const engine = new EnginePool(createEngine(config.media.engine), {
    // More jobs than cores only slow each other down, and the server with them.
    maxRunning: config.limits.engineJobs ?? navigator.hardwareConcurrency,
    maxQueued: config.limits.engineQueue,
  });
  const decoders = new DecoderHub(engine, log);
  const playRenditions = new PlayRenditions(decoders, engine, log, limits.transcoders);
  const watermarks = new WatermarkCache(config.folders.media);
  const hooks = new HookRouter({ hooks: config.hooks, apps: config.apps, log });
  const nodeId = nodeIdFor(config.bind);
  const pushes = new PushRegistry(config, streams, log, limits.pushes);
  const sendPaths = new EngineSendPaths();
  return {
    config,
    log,
    streams,
    nodeId,
    sessions: new SessionRegistry(),
    hooks,
    vod: new VodRegistry(config, streams, log, limits.vods),
    recorders: new RecorderRegistry(config, streams, engine, log, limits.recorders),
    engine,
    rtsp: new RtspRegistry(config, streams, log, limits.pulls),
    whip: new WhipRegistry(),
    mpegts: new MpegtsRegistry(config, streams, engine, log),
    pushes,
    rtmpPulls: new RtmpPullRegistry(config, streams, log, limits.pulls),
    remotePulls: new RemotePullRegistry({
      config,
      streams,
      engine,
      nodeId,
      log,
      pulls: limits.pulls,
      pushes: limits.pushes,
      iceMux: overrides.iceMux,
      sendPaths,
    }),
    decoders,
    playRenditions,
    transcoders: new TranscoderRegistry(
      streams,
      decoders,
      engine,
      watermarks,
      log,
      limits.transcoders,
    ),
    mixers: new MixerRegistry(
      config,
      streams,
      decoders,
      engine,
      watermarks,
      log,
      limits.mixers,
    ),
    hls: new HlsRegistry(config, streams, playRenditions, engine, log),
    calls: new CallRegistry(config, streams, pushes, engine, hooks, nodeId, limits.calls, log),
    rooms: new RoomRegistry(streams),
    sfu: new SfuRoomRegistry(
      log,
      config.sfu.bridge ? new SfuBridge(streams, log.child({ component: "sfu" })) : undefined,
      config.sfu,
      sendPaths,
    ),
    limits,
    iceMux: overrides.iceMux,
    sendPaths,
    cdn: config.cdn.enabled
      ? new CdnNode({
        config,
        streams,
        store: overrides.clusterStore ?? createClusterStore(config, log),
        ownsStore: !overrides.clusterStore,
        decoders,
        engine,
        log,
      })
      : undefined,
  };
}
