/**
 * The built-in Room API application (§10.3). In WCS, `roomApp` is an application whose backend
 * is the server's own room app, so the `sendData` of a session connected with that appKey (the
 * default of the SDK's `roomApi`) is answered here rather than sent to the `OnDataEvent` hook:
 * `join`, `leave` and `sendMessage` commands act on the room registry, the answer is the
 * `DataStatusEvent` (FAILED with the reason in `info`, which the SDK hands to the room's FAILED
 * callback), and participants learn of each other through `OnDataEvent` messages whose payload
 * is `{roomName, name, info}`: STATE to the one joining, JOINED / LEFT / PUBLISHED /
 * UNPUBLISHED / MESSAGE to the others.
 */
import { z } from "zod";
import type { Config } from "../config.ts";
import { MediaServerError } from "../core/errors.ts";
import type { HookOutcome } from "../core/hooks.ts";
import type { RoomEvent, RoomMember, RoomPeer } from "../core/room_registry.ts";
import type { SignalingContext } from "./handlers.ts";
import { parsePayload } from "./payload.ts";
import type { SignalingSession } from "./session.ts";

/** appKey of the built-in Room API application (the SDK's `roomApi` connects with it). */
export const roomAppKey = "roomApp";

/**
 * True when the built-in room app answers the sendData of sessions of `appKey`: those of
 * `roomApp`, unless `apps.roomApp` names a backend of its own (as repointing WCS's roomApp
 * application does).
 */
export function isBuiltInRoomApp(appKey: string, config: Config): boolean {
  return appKey === roomAppKey && !Object.hasOwn(config.apps, roomAppKey);
}

// A missing room name passes the schema so that the registry refuses it with its own reason.
const roomCommand = z.discriminatedUnion("command", [
  z.object({
    command: z.literal("join"),
    options: z.looseObject({ name: z.string().optional(), record: z.boolean().nullish() }),
  }),
  z.object({ command: z.literal("leave"), options: z.looseObject({ name: z.string() }) }),
  z.object({
    command: z.literal("sendMessage"),
    options: z.looseObject({
      roomConfig: z.looseObject({ name: z.string() }),
      // Absent or empty: every other participant of the room.
      to: z.string().nullish(),
      text: z.unknown().refine((t) => t !== undefined, "is required"),
    }),
  }),
]);

/** Sessions whose end already removes them from their rooms. */
const leavingOnEnd = new WeakSet<SignalingSession>();

/** The `OnDataEvent` payload of a room event. */
function eventPayload(room: string, event: RoomEvent): Record<string, unknown> {
  switch (event.kind) {
    case "joined":
      return { roomName: room, name: "JOINED", info: event.login };
    case "left":
      return { roomName: room, name: "LEFT", info: event.login };
    case "published":
      return {
        roomName: room,
        name: "PUBLISHED",
        info: { login: event.login, name: event.streamName },
      };
    case "unpublished":
      return {
        roomName: room,
        name: "UNPUBLISHED",
        info: { login: event.login, name: event.streamName },
      };
    case "message":
      return { roomName: room, name: "MESSAGE", info: { from: event.from, text: event.text } };
  }
}

/**
 * The STATE payload: a `{login, name}` entry per stream a participant publishes, and the bare
 * login of one that publishes none (the SDK makes a participant of either).
 */
function statePayload(room: string, peers: RoomPeer[]): Record<string, unknown> {
  const info = peers.flatMap((p): (string | { login: string; name: string })[] =>
    p.streams.length === 0 ? [p.login] : p.streams.map((name) => ({ login: p.login, name }))
  );
  return { roomName: room, name: "STATE", info };
}

/** Sends a room payload to `session` as the SDK's APP_DATA. */
function sendRoomData(
  session: SignalingSession,
  payload: Record<string, unknown>,
  { services }: SignalingContext,
): void {
  session.send("OnDataEvent", {
    nodeId: services.nodeId,
    appKey: roomAppKey,
    sessionId: session.sessionId,
    operationId: crypto.randomUUID(),
    payload,
  });
}

function join(
  session: SignalingSession,
  room: string,
  ctx: SignalingContext,
): void {
  const { custom } = session.record();
  const login = typeof custom.login === "string" ? custom.login : "";
  const member: RoomMember = {
    login,
    sessionId: session.sessionId,
    tell: (room, event) => sendRoomData(session, eventPayload(room, event), ctx),
  };
  const peers = ctx.services.rooms.join(room, member);
  if (!leavingOnEnd.has(session)) {
    leavingOnEnd.add(session);
    void session.ended.then(() => ctx.services.rooms.leaveAll(session.sessionId));
  }
  ctx.log.info("room joined", { room, login, sessionId: session.sessionId });
  sendRoomData(session, statePayload(room, peers), ctx);
}

/**
 * Runs the room command of a `sendData` payload of a `roomApp` session; the outcome is what
 * its `DataStatusEvent` tells (a refusal's reason becomes `info`).
 */
export function runRoomCommand(
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
): HookOutcome {
  const { rooms } = ctx.services;
  try {
    const command = parsePayload(roomCommand, payload);
    switch (command.command) {
      case "join":
        join(session, command.options.name ?? "", ctx);
        break;
      case "leave":
        rooms.leave(command.options.name, session.sessionId);
        ctx.log.info("room left", { room: command.options.name, sessionId: session.sessionId });
        break;
      case "sendMessage": {
        const { roomConfig, to, text } = command.options;
        rooms.message(roomConfig.name, session.sessionId, to || undefined, text);
        break;
      }
    }
  } catch (err) {
    if (!(err instanceof MediaServerError)) throw err;
    ctx.log.info("room command refused", { sessionId: session.sessionId, reason: err.message });
    return { ok: false, reason: err.message };
  }
  return { ok: true, body: {} };
}
