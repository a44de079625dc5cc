/**
 * The SFU SDK's protocol (appKey `sfuApp`, WCS's SFU): `joinRoom`, `updateRoomState`,
 * `leaveRoom`, `destroyRoom`, `evictParticipant`, `muteTrack`, `muteRemoteTrack`,
 * `changeQuality`, `changeSid`, `changeTid`, `leaseTrack`, `renameParticipant` and `setRoomLock` of a session
 * connected with that appKey act on the SFU rooms; every answer and room event is an
 * `sfuCallback` message `{type, roomId, internalMessageId?, ...}`. A refusal is
 * `OPERATION_FAILED {operation, error, info}` with WCS's error string and the request's
 * internalMessageId, which rejects the SDK's promise; the room is left as it was.
 */
import { z } from "zod";
import { MediaServerError, ParseError } from "../../core/errors.ts";
import type { SfuParticipant } from "../../core/sfu/participant.ts";
import type { SfuRoom } from "../../core/sfu/room.ts";
import { sfuErrors, SfuOperationFailed } from "../../core/sfu/operation_failed.ts";
import type { HandlerTable, SignalingContext } from "../handlers.ts";
import { parsePayload } from "../payload.ts";
import { requestedIceTransport } from "../../media/protocols/webrtc/ice_tcp.ts";
import { peerAddress } from "../play_plan.ts";
import type { SignalingSession } from "../session.ts";

/** appKey of the SFU SDK's sessions. */
export const sfuAppKey = "sfuApp";

/** Name of the server → client message carrying every SFU event. */
export const sfuCallback = "sfuCallback";

const text = z.string().nullish().transform((s) => s ?? "");

const joinRoom = z.looseObject({
  id: z.string().min(1),
  pin: text,
  sdp: z.unknown(),
  nickname: text,
  internalMessageId: text,
  tid: text,
});
const updateRoomState = z.looseObject({
  id: z.string().min(1),
  sdp: z.unknown(),
  sdpType: z.enum(["offer", "answer"]),
  internalMessageId: text,
  tid: text,
});
const roomRequest = z.looseObject({ id: z.string().min(1), pin: text, internalMessageId: text });
const evictRequest = z.looseObject({
  id: z.string().min(1),
  userId: z.string(),
  internalMessageId: text,
});
const muteRequest = z.looseObject({
  roomId: z.string().min(1),
  id: z.string(),
  mute: z.boolean(),
  internalMessageId: text,
});
const qualityRequest = z.looseObject({
  roomId: z.string().min(1),
  id: z.string(),
  quality: z.string().nullish(),
  tid: z.number().int().min(0).nullish(),
  internalMessageId: text,
});
const leaseRequest = z.looseObject({
  roomId: z.string().min(1),
  remoteTrackId: z.string().nullable(),
  localMid: z.string(),
  internalMessageId: text,
});
const renameRequest = z.looseObject({
  roomId: z.string().min(1),
  userId: z.string(),
  newNickname: z.string(),
  internalMessageId: text,
});
const lockRequest = z.looseObject({
  id: z.string().min(1),
  value: z.boolean(),
  internalMessageId: text,
});
const sidRequest = z.looseObject({
  roomId: z.string().min(1),
  id: z.string(),
  sid: z.number().int().min(0),
  internalMessageId: text,
});
const tidRequest = z.looseObject({
  roomId: z.string().min(1),
  id: z.string(),
  tid: z.number().int().min(0),
  internalMessageId: text,
});

/** Sessions whose end already removes them from their rooms. */
const leavingOnEnd = new WeakSet<SignalingSession>();

/** Sends an SFU event to the session. */
function sendEvent(session: SignalingSession, event: Record<string, unknown>): void {
  session.send(sfuCallback, event);
}

/** The request's fields the SDK reads back: the room and the correlation id. */
function requestIds(payload: unknown): { roomId: string; internalMessageId: string } {
  const p = (typeof payload === "object" && payload !== null ? payload : {}) as Record<
    string,
    unknown
  >;
  const roomId = typeof p.roomId === "string" ? p.roomId : typeof p.id === "string" ? p.id : "";
  const internalMessageId = typeof p.internalMessageId === "string" ? p.internalMessageId : "";
  return { roomId, internalMessageId };
}

/**
 * Runs an SFU request; a refusal (typed error or bad payload) is told as OPERATION_FAILED
 * for `operation`, echoing the request's room and internalMessageId.
 */
function sfuHandler(
  operation: string,
  run: (session: SignalingSession, payload: unknown, ctx: SignalingContext) => void | Promise<void>,
) {
  return async (session: SignalingSession, payload: unknown, ctx: SignalingContext) => {
    const { roomId, internalMessageId } = requestIds(payload);
    try {
      if (session.record().appKey !== sfuAppKey) {
        throw new SfuOperationFailed(operation, `not an ${sfuAppKey} session`);
      }
      await run(session, payload, ctx);
    } catch (err) {
      if (!(err instanceof MediaServerError) && !(err instanceof ParseError)) throw err;
      const failed = err instanceof SfuOperationFailed ? err.operation : operation;
      ctx.log.info("SFU request refused", {
        sessionId: session.sessionId,
        operation: failed,
        reason: err.message,
      });
      sendEvent(session, {
        type: "OPERATION_FAILED",
        roomId,
        internalMessageId,
        operation: failed,
        error: err.message,
        info: payload ?? null,
      });
    }
  };
}

/** The room `id` and the session's participant in it. */
function membership(
  session: SignalingSession,
  id: string,
  operation: string,
  ctx: SignalingContext,
): { room: SfuRoom; participant: SfuParticipant } {
  const room = ctx.services.sfu.get(id);
  if (!room) throw new SfuOperationFailed(operation, sfuErrors.notFound);
  const participant = room.participantOf(session.sessionId);
  if (!participant) throw new SfuOperationFailed(operation, sfuErrors.notJoined);
  return { room, participant };
}

/** ACK of a request that has no event of its own. */
function ack(session: SignalingSession, roomId: string, internalMessageId: string): void {
  if (internalMessageId !== "") sendEvent(session, { type: "ACK", roomId, internalMessageId });
}

async function handleJoin(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(joinRoom, payload);
  const { custom } = session.record();
  // The SDK's examples join with a null nickname: the connection's custom.nickname applies.
  const nickname = request.nickname !== ""
    ? request.nickname
    : typeof custom.nickname === "string"
    ? custom.nickname
    : "";
  if (nickname === "") throw new SfuOperationFailed("ROOM_JOIN", sfuErrors.nicknameUnavailable);
  if (!leavingOnEnd.has(session)) {
    leavingOnEnd.add(session);
    void session.ended.then(() =>
      ctx.services.sfu.leaveSession(session.sessionId, "connection closed")
    );
  }
  const participant = await ctx.services.sfu.join(request.id, {
    pin: request.pin,
    nickname,
    sessionId: session.sessionId,
    sdp: request.sdp,
    tid: request.tid,
    internalMessageId: request.internalMessageId,
    link: { send: (event) => sendEvent(session, event) },
    // The SFU SDK names no transport: the connection's `custom.transport` ("TCP"/"UDP", for
    // clients of their own), else `media.iceTransport`, as for a Web SDK stream object.
    address: {
      ...peerAddress(ctx.services),
      transport: requestedIceTransport(custom.transport, ctx.services.config.media.iceTransport),
    },
  });
  // The connection may have closed while the offer was answered: its end found no
  // participant to remove then.
  if (session.state === "closed") {
    await ctx.services.sfu.get(request.id)?.leave(participant, "connection closed");
  }
}

async function handleUpdate(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(updateRoomState, payload);
  const { room, participant } = membership(session, request.id, "ROOM_UPDATE", ctx);
  if (request.sdpType === "answer") {
    await room.answer(participant, request.sdp, request.tid);
    return;
  }
  await room.update(participant, request.sdp, request.tid);
  ack(session, request.id, request.internalMessageId);
}

async function handleLeave(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(roomRequest, payload);
  const { room, participant } = membership(session, request.id, "ROOM_LEAVE", ctx);
  await room.leave(participant, "left", request.internalMessageId);
}

async function handleDestroy(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(roomRequest, payload);
  const { room, participant } = membership(session, request.id, "ROOM_DESTROY", ctx);
  await room.destroy(participant, request.pin);
  ack(session, request.id, request.internalMessageId);
}

async function handleEvict(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(evictRequest, payload);
  const { room, participant } = membership(session, request.id, "EVICT_PARTICIPANT", ctx);
  await room.evict(participant, request.userId);
  ack(session, request.id, request.internalMessageId);
}

function handleMute(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(muteRequest, payload);
  const { room, participant } = membership(session, request.roomId, "MUTE_TRACKS", ctx);
  room.mute(participant, request.id, request.mute);
  ack(session, request.roomId, request.internalMessageId);
}

function handleChangeQuality(
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
) {
  const request = parsePayload(qualityRequest, payload);
  const { room, participant } = membership(session, request.roomId, "CHANGE_QUALITY", ctx);
  room.changeQuality(participant, request.id, request.quality, request.tid);
  ack(session, request.roomId, request.internalMessageId);
}

function handleChangeSid(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(sidRequest, payload);
  const { room, participant } = membership(session, request.roomId, "CHANGE_SID", ctx);
  room.changeSid(participant, request.id, request.sid);
  ack(session, request.roomId, request.internalMessageId);
}

function handleChangeTid(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(tidRequest, payload);
  const { room, participant } = membership(session, request.roomId, "CHANGE_TID", ctx);
  room.changeTid(participant, request.id, request.tid);
  ack(session, request.roomId, request.internalMessageId);
}

function handleLease(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(leaseRequest, payload);
  const { room, participant } = membership(session, request.roomId, "LEASE_TRACK", ctx);
  room.lease(participant, request.localMid, request.remoteTrackId);
  ack(session, request.roomId, request.internalMessageId);
}

function handleMuteRemote(
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
) {
  const request = parsePayload(muteRequest, payload);
  const { room, participant } = membership(session, request.roomId, "MUTE_REMOTE_TRACK", ctx);
  room.muteRemote(participant, request.id, request.mute);
  ack(session, request.roomId, request.internalMessageId);
}

function handleRename(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(renameRequest, payload);
  const { room, participant } = membership(session, request.roomId, "RENAME_PARTICIPANT", ctx);
  room.rename(participant, request.userId, request.newNickname, request.internalMessageId);
}

function handleLock(session: SignalingSession, payload: unknown, ctx: SignalingContext) {
  const request = parsePayload(lockRequest, payload);
  const { room, participant } = membership(session, request.id, "ROOM_SET_LOCK", ctx);
  room.setLock(participant, request.value, request.internalMessageId);
}

/** Registers the SFU SDK's requests. */
export function registerSfuApp(handlers: HandlerTable): void {
  handlers.register("joinRoom", sfuHandler("ROOM_JOIN", handleJoin));
  handlers.register("updateRoomState", sfuHandler("ROOM_UPDATE", handleUpdate));
  handlers.register("leaveRoom", sfuHandler("ROOM_LEAVE", handleLeave));
  handlers.register("destroyRoom", sfuHandler("ROOM_DESTROY", handleDestroy));
  handlers.register("evictParticipant", sfuHandler("EVICT_PARTICIPANT", handleEvict));
  handlers.register("muteTrack", sfuHandler("MUTE_TRACKS", handleMute));
  handlers.register("changeQuality", sfuHandler("CHANGE_QUALITY", handleChangeQuality));
  handlers.register("changeSid", sfuHandler("CHANGE_SID", handleChangeSid));
  handlers.register("changeTid", sfuHandler("CHANGE_TID", handleChangeTid));
  handlers.register("muteRemoteTrack", sfuHandler("MUTE_REMOTE_TRACK", handleMuteRemote));
  handlers.register("leaseTrack", sfuHandler("LEASE_TRACK", handleLease));
  handlers.register("renameParticipant", sfuHandler("RENAME_PARTICIPANT", handleRename));
  handlers.register("setRoomLock", sfuHandler("ROOM_SET_LOCK", handleLock));
}
