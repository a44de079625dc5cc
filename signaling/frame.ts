/**
 * The signaling envelope: one JSON object a text frame, `{message, data: [...]}`. Every frame
 * we send carries a `data` array, because the SDK reads `data[0]` of every frame it gets.
 * Size limits are enforced below, while the WebSocket reads (`config.ws`).
 */
import { ParseError } from "../core/errors.ts";

/** A decoded client frame. */
export interface Frame {
  readonly message: string;
  /** The SDK always sends one argument, so handlers get `data[0]`. */
  readonly data: readonly unknown[];
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
