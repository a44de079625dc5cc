/**
 * The signaling envelope: one JSON object a text frame, `{message, data: [...]}`. Every frame
 * we send carries a `data` array, because the SDK reads `data[0]` of every frame it gets.
 */
import { ParseError } from "../core/errors.ts";

/** Largest text frame accepted from a client, in bytes; an SDP offer is ~10 KB. */
export const maxFrameBytes = 256 * 1024;

/** A decoded client frame. */
export interface Frame {
  readonly message: string;
  /** The SDK always sends one argument, so handlers get `data[0]`. */
  readonly data: readonly unknown[];
}

const encoder = new TextEncoder();

/** True when a text frame is larger than maxFrameBytes in UTF-8. */
export function exceedsFrameLimit(text: string): boolean {
  // A UTF-16 unit encodes to 1..3 UTF-8 bytes, so the length alone usually decides.
  if (text.length * 3 <= maxFrameBytes) return false;
  if (text.length > maxFrameBytes) return true;
  return encoder.encode(text).length > maxFrameBytes;
}

/** Decodes a text frame, or throws ParseError saying what is wrong with it. */
export function parseFrame(text: string): Frame {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ParseError(`not JSON: ${(err as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ParseError("not a JSON object");
  }
  const { message, data } = value as { message?: unknown; data?: unknown };
  if (typeof message !== "string" || message === "") {
    throw new ParseError("`message` must be a non-empty string");
  }
  if (data !== undefined && !Array.isArray(data)) throw new ParseError("`data` must be an array");
  return { message, data: data ?? [] };
}

/** Encodes a server frame. */
export function encodeFrame(message: string, data: readonly unknown[]): string {
  return JSON.stringify({ message, data });
}
