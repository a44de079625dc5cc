/**
 * RTSP 1.0 responses a server writes (RFC 2326 §7): status line, CSeq echoed from the
 * request, header fields, and a body with its Content-Length.
 */
import { writeMessage } from "./message.ts";

/** Reason phrases of the statuses the server answers (RFC 2326 §7.1.1). */
export const rtspReasons: Readonly<Record<number, string>> = {
  200: "OK",
  400: "Bad Request",
  401: "Unauthorized",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  409: "Conflict",
  415: "Unsupported Media Type",
  454: "Session Not Found",
  455: "Method Not Valid in This State",
  459: "Aggregate Operation Not Allowed",
  461: "Unsupported Transport",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
};

/** A response to write. */
export interface RtspReply {
  status: number;
  /** Header fields in order, CSeq not among them (writeResponse adds it). */
  headers?: [string, string][];
  body?: Uint8Array;
  /** Close the connection once the response is written (a request the server cannot follow). */
  close?: boolean;
  /** Runs once the response is queued on the connection: what must follow it (media). */
  afterWrite?: () => void;
}

/** The bytes of a response to the request of `cseq` (none when the request had no CSeq). */
export function writeResponse(cseq: string | undefined, reply: RtspReply): Uint8Array {
  const fields: [string, string][] = cseq === undefined ? [] : [["CSeq", cseq]];
  return writeMessage(
    `RTSP/1.0 ${reply.status} ${rtspReasons[reply.status] ?? "Unknown"}`,
    [...fields, ...(reply.headers ?? [])],
    reply.body,
  );
}
