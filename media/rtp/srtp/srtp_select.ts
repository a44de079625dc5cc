/** Picks the SrtpProtector backend: libcrypto over FFI when it loads, node:crypto otherwise. */
import { ffiSrtpAvailable, FfiSrtpProtector } from "./srtp_ffi.ts";
import { PortableSrtpProtector } from "./srtp_portable.ts";
import type { SrtpProtector, SrtpProtectorInit, SrtpProtectorOptions } from "./srtp_protector.ts";

/** A protector for `init` on the backend `options.backend` asks for (default `auto`). */
export function createSrtpProtector(
  init: SrtpProtectorInit,
  options: SrtpProtectorOptions = {},
): SrtpProtector {
  const backend = options.backend ?? "auto";
  if (backend === "portable") return new PortableSrtpProtector(init);
  if (backend === "ffi" || ffiSrtpAvailable().ok) return new FfiSrtpProtector(init);
  return new PortableSrtpProtector(init);
}
