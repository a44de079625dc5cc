/**
 * The USERNAME of a STUN Binding request (RFC 8489), read without trusting a byte of the
 * datagram: the ICE mux routes a datagram from an unknown address only when it is such a
 * request and its USERNAME names a local ufrag (`<local ufrag>:<remote ufrag>`).
 */

/** STUN's magic cookie (RFC 8489 §5). */
const magicCookie = 0x2112a442;
/** Bytes of the STUN header. */
const headerBytes = 20;
/** Message type of a Binding request. */
const bindingRequest = 0x0001;
/** Attribute type of USERNAME. */
const usernameAttribute = 0x0006;
/** Longest USERNAME RFC 8489 allows, in bytes. */
const maxUsernameBytes = 513;

const decoder = new TextDecoder("utf-8", { fatal: true });

/** Whether the datagram's first byte puts it in STUN's range (RFC 7983: 0 to 3). */
export function looksLikeStun(data: Uint8Array): boolean {
  return data.length > 0 && data[0] < 4;
}

/**
 * The USERNAME of `data` when it is a well-formed STUN Binding request (header, cookie,
 * length matching the datagram, attributes within it); undefined for anything else.
 */
export function bindingRequestUsername(data: Uint8Array): string | undefined {
  if (data.length < headerBytes || (data.length & 3) !== 0) return undefined;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  if (view.getUint16(0) !== bindingRequest) return undefined;
  if (view.getUint16(2) + headerBytes !== data.length) return undefined;
  if (view.getUint32(4) !== magicCookie) return undefined;
  let offset = headerBytes;
  while (offset + 4 <= data.length) {
    const type = view.getUint16(offset);
    const length = view.getUint16(offset + 2);
    const start = offset + 4;
    if (start + length > data.length) return undefined;
    if (type === usernameAttribute) {
      if (length === 0 || length > maxUsernameBytes) return undefined;
      try {
        return decoder.decode(data.subarray(start, start + length));
      } catch {
        return undefined;
      }
    }
    offset = start + ((length + 3) & ~3);
  }
  return undefined;
}

/** The local ufrag of a Binding request's USERNAME (`<local>:<remote>`), or undefined. */
export function localUfragOf(username: string): string | undefined {
  const colon = username.indexOf(":");
  return colon > 0 ? username.slice(0, colon) : undefined;
}
