/**
 * Received SRTP decrypted with libcrypto over FFI instead of werift's JavaScript SRTP. Every
 * werift DTLS transport of the process, once its SRTP session is keyed, gets a
 * FfiSrtpUnprotector with the remote side's keys in place of its session's `decrypt`: what
 * publishers and SFU participants send is authenticated and decrypted in a few native calls
 * rather than with node:crypto objects made per packet (the largest part of receiving, by a
 * CPU profile of an SFU room's server). SRTCP and everything werift sends are unchanged. A
 * packet that fails authentication throws werift's SrtpAuthenticationError, which werift's
 * receive loop drops as it drops its own failures. Without libcrypto (no FFI permission, no
 * libcrypto.so.3) werift keeps its own decryption.
 */
import { Buffer } from "node:buffer";
import { RTCDtlsTransport, SrtpAuthenticationError } from "werift";
import { srtpProfileFromDtlsId } from "../../rtp/srtp/srtp_profile.ts";
import {
  ffiSrtpUnprotectAvailable,
  FfiSrtpUnprotector,
} from "../../rtp/srtp/srtp_unprotect_ffi.ts";

/** werift's SRTP session as `updateSrtpSession` leaves it (the fields read and replaced). */
interface WeriftSrtpSession {
  config?: {
    profile: number;
    keys: { remoteMasterKey: Uint8Array; remoteMasterSalt: Uint8Array };
  };
  decrypt: (data: Buffer) => Buffer;
}

/** The fields of werift's RTCDtlsTransport this patch touches. */
interface WeriftDtlsTransport {
  srtp?: WeriftSrtpSession;
  updateSrtpSession(): void;
  stop(): Promise<void>;
}

/** A transport's FFI decryption: its unprotector is made at the first packet received. */
interface FfiReceive {
  unprotector?: FfiSrtpUnprotector;
  closed: boolean;
}

/** The FFI decryption of each transport whose received SRTP goes through FFI. */
const receives = new WeakMap<object, FfiReceive>();
/** Frees the native contexts of a transport dropped without `stop` (a backstop, not the rule). */
const released = new FinalizationRegistry<FfiSrtpUnprotector>((unprotector) => unprotector.close());

let installed: boolean | undefined;

/**
 * Patches werift once per process; returns whether received SRTP now goes through FFI
 * (false when libcrypto cannot be loaded here).
 */
export function installFfiSrtpReceive(): boolean {
  if (installed !== undefined) return installed;
  installed = ffiSrtpUnprotectAvailable().ok;
  if (!installed) return false;
  const transport = RTCDtlsTransport.prototype as unknown as WeriftDtlsTransport;
  const update = transport.updateSrtpSession;
  transport.updateSrtpSession = function (this: WeriftDtlsTransport) {
    update.call(this);
    receiveThroughFfi(this);
  };
  const stop = transport.stop;
  transport.stop = function (this: WeriftDtlsTransport) {
    release(this);
    return stop.call(this);
  };
  return true;
}

/** Whether `transport` (werift's RTCDtlsTransport) decrypts what it receives through FFI. */
export function receivesThroughFfi(transport: object): boolean {
  return receives.has(transport);
}

/**
 * Gives `transport`'s fresh SRTP session an FFI `decrypt` (a profile FFI lacks keeps werift's).
 * The native contexts are keyed at the first packet: a player's transport never receives RTP
 * and then never holds them.
 */
function receiveThroughFfi(transport: WeriftDtlsTransport): void {
  const session = transport.srtp;
  const config = session?.config;
  const profile = config && srtpProfileFromDtlsId(config.profile);
  if (!session || !config || !profile) return;
  // A new DTLS handshake keys a new session: the previous one's keys are done.
  release(transport);
  const receive: FfiReceive = { closed: false };
  receives.set(transport, receive);
  const keys = {
    profile,
    masterKey: config.keys.remoteMasterKey,
    masterSalt: config.keys.remoteMasterSalt,
  };
  session.decrypt = (data: Buffer): Buffer => {
    let unprotector = receive.unprotector;
    if (!unprotector) {
      if (receive.closed) throw new SrtpAuthenticationError("the DTLS transport is closed");
      unprotector = receive.unprotector = new FfiSrtpUnprotector(keys);
      released.register(transport, unprotector, receive);
    }
    const rtpLength = unprotector.unprotect(data);
    if (rtpLength < 0) throw new SrtpAuthenticationError("SRTP authentication failed");
    // A view of the decrypted bytes (werift's RtpPacket reads them as a Buffer).
    return Buffer.from(data.buffer, data.byteOffset, rtpLength);
  };
}

/** Frees `transport`'s native contexts; its session's later packets fail authentication. */
function release(transport: object): void {
  const receive = receives.get(transport);
  if (!receive) return;
  receives.delete(transport);
  receive.closed = true;
  const unprotector = receive.unprotector;
  if (!unprotector) return;
  receive.unprotector = undefined;
  released.unregister(receive);
  unprotector.close();
}
