/**
 * NetConnection and NetStream commands (RTMP 1.0 §7.2) over AMF0: the parsed form of a
 * command message, builders for the commands and answers this server exchanges, and the
 * onStatus codes it uses.
 */
import { ParseError } from "../../../core/errors.ts";
import { type AmfObject, type AmfValue, decodeAmf0All, encodeAmf0 } from "./amf0.ts";

/** A command message: name, transaction id, command object and further arguments. */
export interface RtmpCommand {
  name: string;
  transactionId: number;
  /** The command object (null for most NetStream commands). */
  object: AmfValue;
  args: AmfValue[];
}

/** Parses an AMF0 command payload; AMF3 payloads (type 17) start with one 0 byte, cut by the caller. */
export function parseCommand(payload: Uint8Array): RtmpCommand {
  const values = decodeAmf0All(payload);
  const [name, transactionId, object = null, ...args] = values;
  if (typeof name !== "string") throw new ParseError("RTMP command without a name");
  return {
    name,
    transactionId: typeof transactionId === "number" ? transactionId : 0,
    object,
    args,
  };
}

/** Builds a command payload. */
export function buildCommand(
  name: string,
  transactionId: number,
  object: AmfValue,
  ...args: AmfValue[]
): Uint8Array {
  return encodeAmf0(name, transactionId, object, ...args);
}

/** onStatus codes this server sends or waits for. */
export const StatusCode = {
  connectSuccess: "NetConnection.Connect.Success",
  connectRejected: "NetConnection.Connect.Rejected",
  publishStart: "NetStream.Publish.Start",
  publishBadName: "NetStream.Publish.BadName",
  publishFailed: "NetStream.Publish.Failed",
  unpublishSuccess: "NetStream.Unpublish.Success",
  playFailed: "NetStream.Play.Failed",
  playReset: "NetStream.Play.Reset",
  playStart: "NetStream.Play.Start",
  playStreamNotFound: "NetStream.Play.StreamNotFound",
  playUnpublishNotify: "NetStream.Play.UnpublishNotify",
} as const;

/** The info object of an onStatus command. */
function statusInfo(
  level: "status" | "error",
  code: string,
  description: string,
): AmfObject {
  return { level, code, description };
}

/** An onStatus command payload (transaction 0, null command object). */
export function buildOnStatus(level: "status" | "error", code: string, description: string) {
  return buildCommand("onStatus", 0, null, statusInfo(level, code, description));
}

/** The `@setDataFrame("onMetaData", ...)` payload a publisher sends; players get `onMetaData` alone. */
export function buildMetaData(metadata: AmfObject, withSetDataFrame: boolean): Uint8Array {
  return withSetDataFrame
    ? encodeAmf0("@setDataFrame", "onMetaData", metadata)
    : encodeAmf0("onMetaData", metadata);
}

/** The metadata object of a data message (`@setDataFrame`/`onMetaData`), or undefined for other data. */
export function parseMetaData(payload: Uint8Array): AmfObject | undefined {
  const values = decodeAmf0All(payload);
  let i = 0;
  if (values[i] === "@setDataFrame") i++;
  if (values[i] !== "onMetaData") return undefined;
  const meta = values[i + 1];
  return meta !== null && typeof meta === "object" && !Array.isArray(meta) &&
      !(meta instanceof Date)
    ? meta
    : undefined;
}
