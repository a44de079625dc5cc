/**
 * WebRTC publish and play for the Web SDK: `publishStream`, `playStream`, `unPublishStream`,
 * `stopStream`, `availableStream` and `sendStreamEvent`. Every publish and play gets exactly
 * one final status; `setRemoteSDP` always precedes it when an answer was made.
 */
import { z } from "zod";
import {
  BadRequestError,
  ConflictError,
  MediaServerError,
  NotFoundError,
  ParseError,
  ServiceUnavailableError,
} from "../core/errors.ts";
import type { RegisteredStream } from "../core/stream_registry.ts";
import { plainString } from "../core/records.ts";
import type { Services } from "../core/services.ts";
import { type StreamClient, type StreamStatus } from "../media/protocols/webrtc/client.ts";
import { type NegotiatedCodec, pickPublishCodec } from "../media/protocols/webrtc/codecs.ts";
import { parseOfferMedia, type SdpMedia } from "../media/protocols/webrtc/sdp.ts";
import { publishBitrate } from "../media/protocols/webrtc/publish_remb.ts";
import { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { deliverStreamEvent } from "../media/publishers/stream_events.ts";
import { WebRtcFramePlayer } from "../media/publishers/webrtc_frame_player.ts";
import { WebRtcPlayer } from "../media/publishers/webrtc_player.ts";
import type { PlayRequest } from "../media/transcoder/play_renditions.ts";
import type { HandlerTable, MessageHandler, SignalingContext } from "./handlers.ts";
import { parsePayload } from "./payload.ts";
import {
  describeMedia,
  planPlay,
  type Player,
  type PlayerCommon,
  streamPeerAddress,
} from "./play_plan.ts";
import { PublishRecording } from "./publish_recording.ts";
import type { SignalingSession } from "./session.ts";
import { registerStreamSnapshot } from "./stream_snapshot.ts";

/** Standard `info` texts of the Web SDK (STREAM_STATUS_INFO) used here. */
export const streamInfo = {
  idNull: "MediaSessionId is null",
  idInUse: "MediaSessionId is already in use",
  nameInUse: "Stream name is already in use",
  notFound: "Stream not found",
  noCodecs: "No common codecs",
  transcodingRequired: "Transcoding required, but disabled",
  restricted: "Restricted access",
  error: "Failed by error",
  user: "Stopped by user",
} as const;

/** Info of a refused stream name (the SDK has no standard text for it). */
export const badStreamNameInfo = "bad stream name: control characters";

/**
 * True for a name with a NUL or control character: it would reach file names (recordings),
 * log lines and URIs, where REST input of the same kind is refused too.
 */
function isBadStreamName(name: unknown): boolean {
  return typeof name === "string" && !plainString.safeParse(name).success;
}

const streamObject = z.looseObject({
  mediaSessionId: z.string().min(1).nullish(),
  name: z.string().default(""),
  sdp: z.unknown().optional(),
});

const stopObject = z.looseObject({ mediaSessionId: z.string().min(1) });
const availableObject = z.looseObject({ mediaSessionId: z.string().optional(), name: z.string() });
const streamEventObject = z.looseObject({
  mediaSessionId: z.string().min(1),
  type: z.string().min(1),
  payload: z.unknown().optional(),
});

const terminal = new Set<StreamStatus>(["UNPUBLISHED", "STOPPED", "FAILED"]);

/**
 * Status and events of one stream towards its session: `notifyStreamStatusEvent` with the
 * client's stream object, the StreamStatusEvent hook, and `onEnd` after the final status.
 */
export class SessionStreamClient implements StreamClient {
  #ended = false;

  constructor(
    private readonly session: SignalingSession,
    private readonly services: Services,
    /** The stream object as the client sent it (hook-overwritten fields applied), no sdp. */
    private readonly stream: Record<string, unknown>,
    private readonly onEnd: () => void = () => {},
    /** Fields the final status waits for (the record name once the file is closed). */
    private readonly finalFields?: () => Promise<Record<string, unknown>>,
  ) {}

  status(status: StreamStatus, info: string, fields: Record<string, unknown> = {}): void {
    if (this.#ended) return;
    if (!terminal.has(status)) return this.#send(status, info, fields);
    this.#ended = true;
    this.onEnd();
    if (!this.finalFields) return this.#send(status, info, fields);
    this.finalFields().catch((err) => {
      this.services.log.error("final fields of a stream status failed", { err });
      return {};
    }).then((extra) => this.#send(status, info, { ...fields, ...extra }));
  }

  #send(status: StreamStatus, info: string, fields: Record<string, unknown>): void {
    const { session, services } = this;
    const body = {
      ...this.stream,
      ...fields,
      status,
      info,
      sessionId: session.sessionId,
      nodeId: services.nodeId,
      appKey: session.record().appKey,
    };
    session.send("notifyStreamStatusEvent", body);
    void services.hooks.invoke("StreamStatusEvent", body, session.restClientConfig);
  }

  event(event: Record<string, unknown>): void {
    this.session.send("notifyStreamEvent", {
      ...event,
      mediaSessionId: this.stream.mediaSessionId,
    });
  }
}

/** The stream object without its SDP (what status events and records carry). */
export function withoutSdp(stream: Record<string, unknown>): Record<string, unknown> {
  const { sdp: _sdp, ...rest } = stream;
  return rest;
}

/** A publish or play request that passed `admit`. */
export interface AdmittedStream {
  /** The stream object as the backend's hook answered it, with the client's SDP. */
  stream: Record<string, unknown>;
  name: string;
  /** The stream object without its SDP, as status events carry it. */
  clientStream: Record<string, unknown>;
  /** Sends the client a FAILED status with `info`. */
  fail: (info: string) => void;
}

/**
 * The checks and hook common to publish and play. Returns the request to go on with, or
 * undefined after the client got its FAILED status.
 */
export async function admit(
  session: SignalingSession,
  payload: unknown,
  services: Services,
  hook: "publishStream" | "playStream",
): Promise<AdmittedStream | undefined> {
  const stream = parsePayload(streamObject, payload) as Record<string, unknown>;
  const fail = (info: string, s = stream) =>
    new SessionStreamClient(session, services, withoutSdp(s)).status("FAILED", info);
  if (!stream.mediaSessionId) {
    fail(streamInfo.idNull, { ...stream, mediaSessionId: null });
    return undefined;
  }
  if (isRegistered(services, stream.mediaSessionId as string)) {
    fail(streamInfo.idInUse);
    return undefined;
  }
  if (isBadStreamName(stream.name)) {
    fail(badStreamNameInfo);
    return undefined;
  }
  const outcome = await services.hooks.invoke(hook, {
    ...stream,
    nodeId: services.nodeId,
    appKey: session.record().appKey,
    sessionId: session.sessionId,
  }, session.restClientConfig);
  if (!outcome.ok) {
    fail(streamInfo.restricted);
    return undefined;
  }
  // A backend may rename the stream: its name is held to the same rule.
  if (isBadStreamName(outcome.body.name)) {
    fail(badStreamNameInfo, { ...outcome.body, mediaSessionId: stream.mediaSessionId });
    return undefined;
  }
  // The backend may only change the stream's own fields, never its identity.
  const admitted: Record<string, unknown> = {
    ...outcome.body,
    mediaSessionId: stream.mediaSessionId,
    sdp: stream.sdp,
  };
  const clientStream = withoutSdp(admitted);
  return {
    stream: admitted,
    name: String(admitted.name ?? ""),
    clientStream,
    fail: (info) => new SessionStreamClient(session, services, clientStream).status("FAILED", info),
  };
}

function isRegistered(services: Services, mediaSessionId: string): boolean {
  return services.streams.list().some((s) => s.mediaSessionId === mediaSessionId);
}

/** The offer's m-lines, or undefined after a FAILED status for a malformed one. */
function offerMedia(
  sdp: unknown,
  fail: (info: string) => void,
  ctx: SignalingContext,
): SdpMedia[] | undefined {
  try {
    return parseOfferMedia(sdp);
  } catch (err) {
    if (!(err instanceof ParseError)) throw err;
    ctx.log.info("offer refused", { reason: err.message });
    fail(streamInfo.error);
    return undefined;
  }
}

async function handlePublish(
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
): Promise<void> {
  const { services } = ctx;
  const admitted = await admit(session, payload, services, "publishStream");
  if (!admitted) return;
  const { stream, name, clientStream, fail } = admitted;
  if (services.streams.published(name)) return fail(streamInfo.nameInUse);
  const media = offerMedia(stream.sdp, fail, ctx);
  if (!media) return;
  const codecs = media.map(pickPublishCodec);
  if (codecs.some((c) => c === undefined)) {
    ctx.log.info("publish refused: no supported codec", { name, offered: describeMedia(media) });
    return fail(streamInfo.noCodecs);
  }
  const recording = stream.record === true ? new PublishRecording(services, ctx.log) : undefined;
  const publisher: WebRtcPublisher = new WebRtcPublisher({
    name,
    mediaSessionId: stream.mediaSessionId as string,
    sessionId: session.sessionId,
    appKey: session.record().appKey,
    nodeId: services.nodeId,
    clientStream,
    sdp: stream.sdp as string,
    codecs: codecs as NegotiatedCodec[],
    address: streamPeerAddress(services, clientStream),
    remb: publishBitrate(services.config.media, media, codecs, clientStream),
    client: new SessionStreamClient(
      session,
      services,
      clientStream,
      () => services.streams.remove(publisher),
      recording && (() => recording.finish(publisher.mediaSessionId)),
    ),
    onPublishing: recording && (() => recording.start(publisher)),
    log: ctx.log,
  });
  try {
    services.streams.add(publisher);
  } catch (err) {
    // The `streams` cap is reached (a FAILED status naming it), or another publish of the
    // name or id won the race while the hook ran.
    await publisher.terminate(
      err instanceof ServiceUnavailableError
        ? `Failed by error: ${err.message}`
        : services.streams.published(name)
        ? streamInfo.nameInUse
        : streamInfo.idInUse,
    );
    return;
  }
  await answerOrFail(session, publisher, () => publisher.answer(), ctx);
}

async function handlePlay(
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
): Promise<void> {
  const { services } = ctx;
  const admitted = await admit(session, payload, services, "playStream");
  if (!admitted) return;
  const opened = await openForViewer(session, admitted, services);
  if (!opened) return;
  const { stream, fail } = admitted;
  const { source, key } = opened;
  const media = offerMedia(stream.sdp, fail, ctx);
  if (!media) return;
  const plan = planPlay(services, source, media, playRequest(stream), ctx.log);
  if (!plan.ok) return fail(plan.info);
  await startPlayer(session, ctx, stream, plan.build, key);
}

/**
 * The access key a Web SDK viewer presents (`cdn.aclPropertyName`): a custom field of its
 * connection, or of its play request.
 */
export function viewerKey(
  session: SignalingSession,
  stream: Record<string, unknown>,
  services: Services,
): string | undefined {
  const property = services.config.cdn.aclPropertyName;
  const fromStream = (stream.custom as Record<string, unknown> | undefined)?.[property];
  const value = session.record().custom[property] ?? fromStream;
  return typeof value === "string" ? value : undefined;
}

/**
 * The stream a viewer plays under its request's name (through the CDN when it is on: access
 * checked with the viewer's key, streams of other nodes brought here), with that key;
 * undefined after the client was told why it cannot.
 */
export async function openForViewer(
  session: SignalingSession,
  { stream, name, fail }: AdmittedStream,
  services: Services,
): Promise<{ source: RegisteredStream; key: string | undefined } | undefined> {
  const key = viewerKey(session, stream, services);
  try {
    const source = await services.streams.open(name, key);
    if (source) return { source, key };
    fail(streamInfo.notFound);
  } catch (err) {
    if (!(err instanceof MediaServerError)) throw err;
    fail(err instanceof NotFoundError ? streamInfo.notFound : err.message);
  }
  return undefined;
}

/** What a play request asks of the stream's picture: `width`/`height`, `maxBitrate` (kbit/s). */
function playRequest(stream: Record<string, unknown>): PlayRequest {
  const number = (value: unknown) =>
    typeof value === "number" && Number.isFinite(value) && value > 0 ? value : 0;
  return {
    width: number(stream.width),
    height: number(stream.height),
    maxBitrateKbps: number(stream.maxBitrate),
  };
}

/** Builds a player of the session's play request, registers it and sends its answer. */
async function startPlayer(
  session: SignalingSession,
  ctx: SignalingContext,
  stream: Record<string, unknown>,
  build: (common: PlayerCommon) => Player,
  key?: string,
): Promise<void> {
  const { services } = ctx;
  const clientStream = withoutSdp(stream);
  let unwatch = () => {};
  const player = build({
    mediaSessionId: stream.mediaSessionId as string,
    sessionId: session.sessionId,
    appKey: session.record().appKey,
    nodeId: services.nodeId,
    clientStream,
    sdp: stream.sdp as string,
    address: streamPeerAddress(services, clientStream),
    client: new SessionStreamClient(
      session,
      services,
      clientStream,
      () => {
        unwatch();
        services.streams.remove(player);
      },
    ),
  });
  try {
    services.streams.add(player);
  } catch {
    await player.terminate(streamInfo.idInUse);
    return;
  }
  unwatch = services.streams.watchViewer(
    String(stream.name ?? ""),
    key,
    (info) => void player.terminate(info),
  );
  await answerOrFail(session, player, () => player.answer(), ctx);
}

/** Sends the answer, or ends the stream with FAILED when werift could not make one. */
async function answerOrFail(
  session: SignalingSession,
  stream: { mediaSessionId: string; terminate(info: string): Promise<void> },
  answer: () => Promise<string>,
  ctx: SignalingContext,
): Promise<void> {
  let sdp: string;
  try {
    sdp = await answer();
  } catch (err) {
    ctx.log.info("answer failed", {
      mediaSessionId: stream.mediaSessionId,
      reason: (err as Error).message,
    });
    await stream.terminate(streamInfo.error);
    return;
  }
  session.send("setRemoteSDP", stream.mediaSessionId, sdp, true);
}

/**
 * The stream of this session with this id and one of these classes; NotFoundError or
 * BadRequestError else.
 */
function ownStream<T>(
  session: SignalingSession,
  services: Services,
  mediaSessionId: string,
  ...types: (new (...args: never[]) => T)[]
): T {
  const stream = services.streams.get(mediaSessionId);
  if (
    !types.some((type) => stream instanceof type) ||
    (stream as { sessionId?: string }).sessionId !== session.sessionId
  ) {
    throw new BadRequestError(
      "mediaSessionId",
      `stream ${mediaSessionId} is not a WebRTC stream of this session`,
    );
  }
  return stream as T;
}

async function handleUnpublish(
  session: SignalingSession,
  payload: unknown,
  { services }: SignalingContext,
) {
  const { mediaSessionId } = parsePayload(stopObject, payload);
  await ownStream(session, services, mediaSessionId, WebRtcPublisher).terminate(streamInfo.user);
}

async function handleStop(
  session: SignalingSession,
  payload: unknown,
  { services }: SignalingContext,
) {
  const { mediaSessionId } = parsePayload(stopObject, payload);
  await ownStream<WebRtcPlayer | WebRtcFramePlayer>(
    session,
    services,
    mediaSessionId,
    WebRtcPlayer,
    WebRtcFramePlayer,
  ).terminate(streamInfo.user);
}

function handleAvailable(
  session: SignalingSession,
  payload: unknown,
  { services }: SignalingContext,
) {
  const { mediaSessionId, name } = parsePayload(availableObject, payload);
  const available = services.streams.published(name) !== undefined;
  session.send("availableStream", {
    id: mediaSessionId,
    status: available ? "true" : "false",
    info: available ? "Available" : streamInfo.notFound,
  });
}

/** A publisher's stream event (mute, data) to every Web SDK player of its stream. */
function handleStreamEvent(
  session: SignalingSession,
  payload: unknown,
  { services }: SignalingContext,
) {
  const event = parsePayload(streamEventObject, payload);
  const publisher = ownStream(session, services, event.mediaSessionId, WebRtcPublisher);
  if (!publisher.publishing) throw new ConflictError(`stream ${publisher.name} is not publishing`);
  deliverStreamEvent(publisher, services.streams.list(), event.type, event.payload);
}

/**
 * A publish or play handler that, when it fails unexpectedly before its stream exists, still
 * gives the client a final status: the SDK's stop() retries forever on a PENDING stream.
 */
export function withFinalStatus(handle: MessageHandler): MessageHandler {
  return async (session, payload, ctx) => {
    try {
      await handle(session, payload, ctx);
    } catch (err) {
      const stream = typeof payload === "object" && payload !== null
        ? payload as Record<string, unknown>
        : {};
      if (
        typeof stream.mediaSessionId === "string" &&
        !isRegistered(ctx.services, stream.mediaSessionId)
      ) {
        new SessionStreamClient(session, ctx.services, withoutSdp(stream)).status(
          "FAILED",
          streamInfo.error,
        );
      }
      throw err;
    }
  };
}

/** Registers the stream handlers of the Web SDK (over the placeholders), snapshot included. */
export function registerWebRtcStreams(handlers: HandlerTable): void {
  registerStreamSnapshot(handlers);
  handlers.register("publishStream", withFinalStatus(handlePublish));
  handlers.register("playStream", withFinalStatus(handlePlay));
  handlers.register("unPublishStream", handleUnpublish);
  handlers.register("stopStream", handleStop);
  handlers.register("availableStream", handleAvailable);
  handlers.register("sendStreamEvent", handleStreamEvent);
}
