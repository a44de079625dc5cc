/**
 * The Web SDK's non-WebRTC players on the signalling port (wcs-client-protocol.md §8, §9):
 * `playStream` with `mediaProvider: "MSE"` makes an MsePlayer and answers the SDK's fixed
 * offer; the SDK then opens a second WebSocket to the same port whose first message,
 * `connectMediaTransport {authToken}`, makes that socket the media transport of the session's
 * MSE play waiting for one (the newest: the message names no stream). Status events go
 * through the signalling session as for WebRTC. WSPlayer (MPEG-1 video and G.711 to a canvas
 * decoder) is not built: its plays end FAILED saying so.
 */
import { z } from "zod";
import { BadRequestError } from "../core/errors.ts";
import { MsePlayer } from "../media/publishers/mse_player.ts";
import { aacStreamFor } from "../media/publishers/rtmp_aac_stream.ts";
import { Stream } from "../media/stream.ts";
import type { HandlerTable, MessageHandler, SignalingContext } from "./handlers.ts";
import { parsePayload } from "./payload.ts";
import { closeCodes, type SignalingSession } from "./session.ts";
import {
  admit,
  openForViewer,
  SessionStreamClient,
  streamInfo,
  withFinalStatus,
  withoutSdp,
} from "./webrtc_streams.ts";

/** Info of a WSPlayer play. */
export const wsPlayerUnsupportedInfo = "WSPlayer is not supported";

const transportObject = z.looseObject({ authToken: z.string().min(1) });
const stopObject = z.looseObject({ mediaSessionId: z.string().min(1) });

/** The `mediaProvider` of a stream object, if any. */
function mediaProviderOf(payload: unknown): unknown {
  return typeof payload === "object" && payload !== null
    ? (payload as Record<string, unknown>).mediaProvider
    : undefined;
}

async function handleMsePlay(
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
): Promise<void> {
  const { services } = ctx;
  const admitted = await admit(session, payload, services, "playStream");
  if (!admitted) return;
  const opened = await openForViewer(session, admitted, services);
  if (!opened) return;
  const { stream, name, clientStream, fail } = admitted;
  const { source, key } = opened;
  const video = source instanceof Stream ? source.videoTrack : undefined;
  if (!(source instanceof Stream) || (video && video.codec !== "H264")) {
    // MSE carries H.264 only; other video would need a transcoder.
    ctx.log.info("MSE play refused: the source is not H.264", { name, codec: video?.codec });
    return fail(streamInfo.transcodingRequired);
  }
  const frames = aacStreamFor(source, services.engine, ctx.log);
  if (!MsePlayer.plays(frames)) return fail(streamInfo.noCodecs);
  let unwatch = () => {};
  const player: MsePlayer = new MsePlayer({
    source,
    frames,
    mediaSessionId: stream.mediaSessionId as string,
    sessionId: session.sessionId,
    appKey: session.record().appKey,
    nodeId: services.nodeId,
    clientStream,
    sdp: typeof stream.sdp === "string" ? stream.sdp : "",
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
  unwatch = services.streams.watchViewer(name, key, (info) => void player.terminate(info));
  session.send("setRemoteSDP", player.mediaSessionId, player.answer(), true);
}

/** A WSPlayer play: FAILED with the reason, after the usual checks of a stream object. */
function refuseWsPlayer(
  session: SignalingSession,
  payload: unknown,
  { services }: SignalingContext,
): void {
  const stream = typeof payload === "object" && payload !== null
    ? payload as Record<string, unknown>
    : {};
  new SessionStreamClient(session, services, withoutSdp(stream)).status(
    "FAILED",
    wsPlayerUnsupportedInfo,
  );
}

/**
 * The first message of a media socket: the socket leaves signalling and becomes the media
 * transport of the newest MSE play of the session with this authToken that waits for one;
 * without such a play it is closed.
 */
function handleTransport(
  session: SignalingSession,
  payload: unknown,
  { services, log }: SignalingContext,
): void {
  if (session.state !== "new") {
    throw new BadRequestError(
      "connectMediaTransport",
      "connectMediaTransport is the first message of a media socket only",
    );
  }
  const { authToken } = parsePayload(transportObject, payload);
  const owner = services.sessions.findByAuthToken(authToken);
  const player = owner &&
    services.streams.list().findLast((s): s is MsePlayer =>
      s instanceof MsePlayer && s.sessionId === owner.sessionId && s.awaitingTransport
    );
  if (!player) {
    log.info("media transport refused: no MSE play waits for one", {
      clientAddress: session.endpoints.clientAddress,
    });
    session.close(closeCodes.policy, "no MSE play of this authToken waits for a media transport");
    return;
  }
  const socket = session.releaseSocket();
  if (!socket) return;
  // The SDK only answers our pings there; nothing it sends is needed.
  socket.onmessage = () => {};
  player.attach(socket);
}

/** stopStream of an MSE play of this session, else the WebRTC handler. */
function stopHandler(webrtc: MessageHandler): MessageHandler {
  return (session, payload, ctx) => {
    const { mediaSessionId } = parsePayload(stopObject, payload);
    const stream = ctx.services.streams.get(mediaSessionId);
    if (stream instanceof MsePlayer && stream.sessionId === session.sessionId) {
      return stream.terminate(streamInfo.user);
    }
    return webrtc(session, payload, ctx);
  };
}

/**
 * Registers the MSE and WSPlayer plays over the WebRTC handlers (registered first), which
 * keep every other play and stop.
 */
export function registerMseStreams(handlers: HandlerTable): void {
  const play = handlers.get("playStream");
  const stop = handlers.get("stopStream");
  if (!play || !stop) throw new Error("register the WebRTC stream handlers first");
  const msePlay = withFinalStatus(handleMsePlay);
  handlers.register("playStream", (session, payload, ctx) => {
    const provider = mediaProviderOf(payload);
    if (provider === "MSE") return msePlay(session, payload, ctx);
    if (provider === "WSPlayer") return refuseWsPlayer(session, payload, ctx);
    return play.handle(session, payload, ctx);
  });
  handlers.register("stopStream", stopHandler(stop.handle));
  handlers.register("connectMediaTransport", handleTransport, { beforeEstablished: true });
}
