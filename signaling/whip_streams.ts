/**
 * WHIP publishes and WHEP plays made into the same WebRTC publishers and players as the Web
 * SDK's: admitted by the same hooks (`connect` with the bearer token, then `publishStream` or
 * `playStream`), reported by `StreamStatusEvent`, listed and recordable like any stream. A
 * refusal is a typed error the HTTP side turns into its status.
 */
import {
  BadRequestError,
  ConflictError,
  ForbiddenError,
  MediaServerError,
  NotFoundError,
  ParseError,
  ServiceUnavailableError,
} from "../core/errors.ts";
import { type RestClientConfig } from "../core/hooks.ts";
import { randomToken } from "../core/ids.ts";
import type { Logger } from "../core/log.ts";
import { plainString } from "../core/records.ts";
import type { Services } from "../core/services.ts";
import type { WhipSession } from "../core/whip_registry.ts";
import type { StreamClient, StreamStatus } from "../media/protocols/webrtc/client.ts";
import { type NegotiatedCodec, pickPublishCodec } from "../media/protocols/webrtc/codecs.ts";
import type { IceTransport } from "../media/protocols/webrtc/ice_tcp.ts";
import { parseOfferMedia, type SdpMedia } from "../media/protocols/webrtc/sdp.ts";
import { iceUfragOf } from "../media/protocols/webrtc/sdpfrag.ts";
import { publishBitrate } from "../media/protocols/webrtc/publish_remb.ts";
import { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { defaultAppKey } from "./connection.ts";
import {
  describeMedia,
  peerAddress,
  planPlay,
  type Player,
  type PlayerCommon,
} from "./play_plan.ts";

/** Characters of a session resource id (about 190 bits: unguessable). */
const resourceIdChars = 32;

/** What a WHIP or WHEP POST asks for. */
export interface WhipRequest {
  kind: "publish" | "play";
  /** Stream name from the URL. */
  name: string;
  /** The SDP offer. */
  sdp: string;
  /** The `Authorization: Bearer` token, if any (handed to the `connect` hook). */
  token?: string;
  /** The request's Origin header, "" without one. */
  origin: string;
  /**
   * Transport of the media: "tcp" answers with one TCP passive candidate (ICE-TCP) for a
   * client whose network blocks UDP; `media.iceTransport` when undefined.
   */
  transport?: IceTransport;
}

/** An opened session and the SDP answer for the client. */
export interface WhipOpened {
  session: WhipSession;
  answer: string;
}

/** A failure the client caused that the spec answers with 422 (an offer the server cannot fully accept). */
export class UnprocessableOfferError extends MediaServerError {
  constructor(message: string) {
    super(422, "unprocessable entity", message);
  }
}

const terminal = new Set<StreamStatus>(["UNPUBLISHED", "STOPPED", "FAILED"]);

/** Status of a WHIP/WHEP stream: the StreamStatusEvent hook, and `onEnd` at the final one. */
class WhipStreamClient implements StreamClient {
  #ended = false;

  constructor(
    private readonly services: Services,
    private readonly context: Record<string, unknown>,
    private readonly restClientConfig: RestClientConfig | undefined,
    private readonly onEnd: () => void,
  ) {}

  status(status: StreamStatus, info: string, fields: Record<string, unknown> = {}): void {
    if (this.#ended) return;
    if (terminal.has(status)) {
      this.#ended = true;
      this.onEnd();
    }
    void this.services.hooks.invoke(
      "StreamStatusEvent",
      { ...this.context, ...fields, status, info },
      this.restClientConfig,
    );
  }

  /** WHIP and WHEP have no channel for stream events. */
  event(): void {}
}

/** Admits, builds, registers and answers a WHIP publish or WHEP play. */
export async function openWhipSession(
  services: Services,
  request: WhipRequest,
  log: Logger,
): Promise<WhipOpened> {
  const { kind } = request;
  if (request.name === "" || !plainString.safeParse(request.name).success) {
    throw new BadRequestError("name", "the stream name is empty or has control characters");
  }
  const media = offerMedia(request.sdp);
  if (kind === "publish" && services.streams.published(request.name)) {
    throw new ConflictError(`stream ${request.name} is already published`);
  }
  // Through the CDN's gate: a stream of another node is pulled here; WHEP presents no
  // access key, so a stream with an access list refuses it (403).
  if (kind === "play" && !await services.streams.open(request.name)) {
    throw new NotFoundError(`stream ${request.name} is not published`);
  }
  const sessionId = crypto.randomUUID();
  const mediaSessionId = crypto.randomUUID();
  const connection = await services.hooks.connect({
    appKey: defaultAppKey,
    sessionId,
    nodeId: services.nodeId,
    origin: request.origin,
    mediaProviders: ["WebRTC"],
    clientVersion: kind === "publish" ? "WHIP" : "WHEP",
    custom: request.token === undefined ? {} : { token: request.token },
  });
  if (!connection.ok) throw new ForbiddenError(`refused by the backend: ${connection.reason}`);
  const appKey = typeof connection.body.appKey === "string"
    ? connection.body.appKey
    : defaultAppKey;
  const hooked = await services.hooks.invoke(kind === "publish" ? "publishStream" : "playStream", {
    mediaSessionId,
    name: request.name,
    published: kind === "publish",
    hasVideo: media.some((m) => m.kind === "video"),
    hasAudio: media.some((m) => m.kind === "audio"),
    status: "PENDING",
    mediaProvider: "WebRTC",
    record: false,
    custom: {},
    nodeId: services.nodeId,
    appKey,
    sessionId,
  }, connection.restClientConfig);
  if (!hooked.ok) throw new ForbiddenError(`refused by the backend: ${hooked.reason}`);
  const { sdp: _sdp, ...clientStream }: Record<string, unknown> = {
    ...hooked.body,
    mediaSessionId,
  };
  const name = typeof clientStream.name === "string" ? clientStream.name : request.name;
  if (!plainString.safeParse(name).success) {
    throw new ForbiddenError("the backend named the stream with control characters");
  }
  const id = randomToken(resourceIdChars);
  const client = new WhipStreamClient(
    services,
    { ...clientStream, sessionId, nodeId: services.nodeId, appKey },
    connection.restClientConfig,
    () => {
      services.whip.remove(id);
      services.streams.remove(stream);
    },
  );
  const common = {
    mediaSessionId,
    sessionId,
    appKey,
    nodeId: services.nodeId,
    clientStream,
    sdp: request.sdp,
    address: {
      ...peerAddress(services),
      transport: request.transport ?? services.config.media.iceTransport,
    },
    client,
  };
  const stream: Player = kind === "publish"
    ? publisherOf(services, name, media, log, common)
    : playerOf(services, name, media, log, common);
  try {
    services.streams.add(stream);
  } catch (err) {
    await stream.terminate(`Failed by error: ${(err as Error).message}`);
    throw err instanceof ServiceUnavailableError ? err : new ConflictError((err as Error).message);
  }
  const session: WhipSession = {
    id,
    kind,
    urlName: request.name,
    etag: `"${randomToken(resourceIdChars)}"`,
    clientUfrag: iceUfragOf(request.sdp),
    stream,
  };
  services.whip.add(session);
  try {
    return { session, answer: await stream.answer() };
  } catch (err) {
    await stream.terminate("Failed by error");
    if (err instanceof ParseError) throw new BadRequestError("sdp", err.message);
    throw err;
  }
}

/** The offer's audio and video sections; a 400 naming what is wrong with a bad one. */
function offerMedia(sdp: string): SdpMedia[] {
  let media: SdpMedia[];
  try {
    media = parseOfferMedia(sdp);
  } catch (err) {
    if (err instanceof ParseError) throw new BadRequestError("sdp", err.message);
    throw err;
  }
  if (media.length === 0) throw new BadRequestError("sdp", "the offer has no audio or video");
  for (const kind of ["audio", "video"] as const) {
    if (media.filter((m) => m.kind === kind).length > 1) {
      throw new UnprocessableOfferError(`the offer has more than one ${kind} section`);
    }
  }
  return media;
}

/** The codec of each offered section of a publish; 422 when one offers none the server takes. */
function publishCodecs(media: SdpMedia[], name: string, log: Logger): NegotiatedCodec[] {
  const codecs = media.map(pickPublishCodec);
  if (codecs.some((c) => c === undefined)) {
    log.info("WHIP publish refused: no supported codec", { name, offered: describeMedia(media) });
    throw new UnprocessableOfferError(`no supported codec in: ${describeMedia(media)}`);
  }
  return codecs as NegotiatedCodec[];
}

/** The publisher of a WHIP offer, told (REMB) it may send up to `media.maxPublishBitrateKbps`. */
function publisherOf(
  services: Services,
  name: string,
  media: SdpMedia[],
  log: Logger,
  common: PlayerCommon,
): WebRtcPublisher {
  const codecs = publishCodecs(media, name, log);
  const remb = publishBitrate(services.config.media, media, codecs, common.clientStream);
  return new WebRtcPublisher({ ...common, name, codecs, log, remb });
}

/** The player of a WHEP offer; 404 once the stream is gone, 422 without a common codec. */
function playerOf(
  services: Services,
  name: string,
  media: SdpMedia[],
  log: Logger,
  common: PlayerCommon,
): Player {
  const source = services.streams.published(name);
  if (!source) throw new NotFoundError(`stream ${name} is not published`);
  const plan = planPlay(services, source, media, { width: 0, height: 0, maxBitrateKbps: 0 }, log);
  if (!plan.ok) throw new UnprocessableOfferError(plan.info);
  return plan.build(common);
}
