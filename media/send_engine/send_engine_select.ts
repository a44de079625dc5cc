/**
 * Resolves `media.sendEngine` into the sender players use: the FFI send engine, or werift's
 * own SRTP and socket. `auto` takes the engine only when both libc and libcrypto.so.3 load
 * over FFI (the server runs with --allow-ffi on glibc with OpenSSL 3).
 */
import { libcrypto } from "../rtp/srtp/libcrypto.ts";
import { libcUdp } from "./libc_udp.ts";

/** The configured choice. */
export type SendEngineSetting = "auto" | "ffi" | "werift";

/** The resolved sender and why. */
export interface SendEngineChoice {
  engine: "ffi" | "werift";
  /** SRTP backend of the FFI engine (portable when libcrypto is missing but `ffi` is forced). */
  srtpBackend?: "ffi" | "portable";
  reason: string;
}

/** Picks the sender for `setting`; throws when `ffi` is asked for and libc cannot be loaded. */
export function chooseSendEngine(setting: SendEngineSetting): SendEngineChoice {
  if (setting === "werift") return { engine: "werift", reason: "media.sendEngine is werift" };
  const libc = libcUdp();
  const crypto = libcrypto();
  if (setting === "ffi") {
    if (!libc.libc) throw new Error(`media.sendEngine is ffi but ${libc.error}`);
    return crypto.crypto
      ? { engine: "ffi", srtpBackend: "ffi", reason: "media.sendEngine is ffi" }
      : {
        engine: "ffi",
        srtpBackend: "portable",
        reason: `media.sendEngine is ffi; SRTP on node:crypto because ${crypto.error}`,
      };
  }
  if (!libc.libc) return { engine: "werift", reason: `no FFI socket: ${libc.error}` };
  if (!crypto.crypto) return { engine: "werift", reason: `no FFI SRTP: ${crypto.error}` };
  return { engine: "ffi", srtpBackend: "ffi", reason: "libc and libcrypto load over FFI" };
}
