/**
 * OpenSSL 3's libcrypto over Deno FFI, just the calls SRTP protection and unprotection need. Pointer and size
 * parameters are `u64` so callers pass precomputed BigInts: V8 then keeps the calls on its
 * fast-call path (~10 ns instead of ~150 ns, fastpath.md "FFI discipline").
 * Loaded once on first use; `error` says why it is unavailable (no --allow-ffi, no
 * libcrypto.so.3), so callers fall back to node:crypto.
 */

const symbols = {
  EVP_CIPHER_CTX_new: { parameters: [], result: "pointer" },
  EVP_CIPHER_CTX_free: { parameters: ["pointer"], result: "void" },
  EVP_aes_128_ctr: { parameters: [], result: "pointer" },
  EVP_aes_128_gcm: { parameters: [], result: "pointer" },
  EVP_aes_256_gcm: { parameters: [], result: "pointer" },
  EVP_sha1: { parameters: [], result: "pointer" },
  // (ctx, cipher, engine, key, iv)
  EVP_EncryptInit_ex: { parameters: ["u64", "u64", "u64", "u64", "u64"], result: "i32" },
  // (ctx, out, &outl, in, inl)
  EVP_EncryptUpdate: { parameters: ["u64", "u64", "u64", "u64", "i32"], result: "i32" },
  EVP_EncryptFinal_ex: { parameters: ["u64", "u64", "u64"], result: "i32" },
  EVP_CIPHER_CTX_ctrl: { parameters: ["u64", "i32", "i32", "u64"], result: "i32" },
  // (ctx, cipher, engine, key, iv)
  EVP_DecryptInit_ex: { parameters: ["u64", "u64", "u64", "u64", "u64"], result: "i32" },
  // (ctx, out, &outl, in, inl)
  EVP_DecryptUpdate: { parameters: ["u64", "u64", "u64", "u64", "i32"], result: "i32" },
  EVP_DecryptFinal_ex: { parameters: ["u64", "u64", "u64"], result: "i32" },
  // HMAC_CTX is deprecated in OpenSSL 3 but exported, and re-initialising it with the same
  // key costs far less than an EVP_MAC fetch per packet.
  HMAC_CTX_new: { parameters: [], result: "pointer" },
  HMAC_CTX_free: { parameters: ["pointer"], result: "void" },
  // (ctx, key, keylen, md, engine)
  HMAC_Init_ex: { parameters: ["u64", "u64", "i32", "u64", "u64"], result: "i32" },
  HMAC_Update: { parameters: ["u64", "u64", "u64"], result: "i32" },
  HMAC_Final: { parameters: ["u64", "u64", "u64"], result: "i32" },
} as const;

/** The loaded libcrypto symbols. */
export type Libcrypto = Deno.DynamicLibrary<typeof symbols>["symbols"];

/** `EVP_CTRL_GCM_GET_TAG` of openssl/evp.h. */
export const evpCtrlGcmGetTag = 0x10;
/** `EVP_CTRL_GCM_SET_TAG` of openssl/evp.h. */
export const evpCtrlGcmSetTag = 0x11;

/** Names libcrypto 3 is found under (Debian/Ubuntu/Alpine, then a generic link). */
const libraryNames = ["libcrypto.so.3", "libcrypto.so"];

let loaded: { crypto?: Libcrypto; error?: string } | undefined;

/** The libcrypto symbols, or why they cannot be had (`error`). */
export function libcrypto(): { crypto?: Libcrypto; error?: string } {
  if (loaded) return loaded;
  let error = "libcrypto.so.3 not found";
  for (const name of libraryNames) {
    try {
      loaded = { crypto: Deno.dlopen(name, symbols).symbols };
      return loaded;
    } catch (err) {
      error = `${name}: ${(err as Error).message}`;
      if (err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied) {
        break;
      }
    }
  }
  loaded = { error };
  return loaded;
}

/** The native address of `bytes` as a BigInt (for u64 FFI parameters). */
export function addressOf(bytes: Uint8Array): bigint {
  return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(bytes)));
}

/** A pointer result as a BigInt (0n for NULL). */
export function pointerValue(pointer: Deno.PointerValue): bigint {
  return BigInt(Deno.UnsafePointer.value(pointer));
}
