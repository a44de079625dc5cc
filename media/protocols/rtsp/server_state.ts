/**
 * The state machine of an RTSP server session (RFC 2326 Appendix A.2): which methods the
 * server answers, in which states, and where each leads. A method out of order is 455, one
 * the server does not know 501.
 */

/** States of a session: none set up, set up, playing, recording (a publisher's media). */
export type RtspServerState = "init" | "ready" | "playing" | "recording";

/** Methods the server implements, for the Public header of OPTIONS. */
export const serverMethods = [
  "OPTIONS",
  "DESCRIBE",
  "SETUP",
  "PLAY",
  "PAUSE",
  "TEARDOWN",
  "GET_PARAMETER",
  "SET_PARAMETER",
  "ANNOUNCE",
  "RECORD",
] as const;

/** A method the server implements. */
export type ServerMethod = typeof serverMethods[number];

const anyState: readonly RtspServerState[] = ["init", "ready", "playing", "recording"];

const validIn: Record<ServerMethod, readonly RtspServerState[]> = {
  OPTIONS: anyState,
  DESCRIBE: anyState,
  // A transport cannot change while packets flow.
  SETUP: ["init", "ready"],
  PLAY: ["ready", "playing"],
  PAUSE: ["ready", "playing", "recording"],
  TEARDOWN: anyState,
  GET_PARAMETER: anyState,
  SET_PARAMETER: anyState,
  ANNOUNCE: ["init"],
  RECORD: ["ready", "recording"],
};

/** True for a method the server implements. */
export function isServerMethod(method: string): method is ServerMethod {
  return (serverMethods as readonly string[]).includes(method);
}

/** The status refusing `method` in `state` (501 unknown, 455 out of order), or 0 if valid. */
export function refusalStatus(method: string, state: RtspServerState): number {
  if (!isServerMethod(method)) return 501;
  return validIn[method].includes(state) ? 0 : 455;
}

/** The state a successful `method` leads to from `state`. */
export function nextState(method: ServerMethod, state: RtspServerState): RtspServerState {
  switch (method) {
    case "SETUP":
      return "ready";
    case "PLAY":
      return "playing";
    case "RECORD":
      return "recording";
    case "PAUSE":
      return "ready";
    case "TEARDOWN":
      return "init";
    default:
      return state;
  }
}
