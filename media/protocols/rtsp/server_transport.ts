/**
 * The Transport header of a SETUP as the server reads and answers it (RFC 2326 §12.39):
 * unicast RTP over TCP interleaved channels or UDP to the client's port pair. Multicast,
 * and UDP without client ports, are not served (461).
 */
import { ParseError } from "../../../core/errors.ts";
import { parseTransport } from "./headers.ts";

/** A transport the server can serve. */
export type ServerTransport =
  /** Interleaved channels the client asked for, or none (the server picks). */
  | { protocol: "tcp"; interleaved?: [number, number] }
  | { protocol: "udp"; clientPorts: [number, number] };

/**
 * The first alternative of a Transport value the server serves, or undefined when it
 * serves none of them.
 */
export function pickTransport(value: string): ServerTransport | undefined {
  for (const alternative of value.split(",")) {
    const lower = alternative.toLowerCase();
    if (lower.includes("multicast")) continue;
    const profile = lower.split(";")[0].trim();
    if (profile === "rtp/avp/tcp" && !lower.includes("interleaved")) return { protocol: "tcp" };
    let spec;
    try {
      spec = parseTransport(alternative);
    } catch (err) {
      if (err instanceof ParseError) continue;
      throw err;
    }
    if (spec.protocol === "tcp") return spec;
    if (spec.clientPorts[0] > 0) return { protocol: "udp", clientPorts: spec.clientPorts };
  }
  return undefined;
}

/** The Transport of the SETUP answer: a player's with the server's SSRC, a publisher's without. */
export function formatServerTransport(
  transport:
    | { protocol: "tcp"; interleaved: [number, number] }
    | { protocol: "udp"; clientPorts: [number, number]; serverPorts: [number, number] },
  ssrc?: number,
): string {
  // The server's SSRC when it sends; a publisher's answer has none.
  const tail = ssrc === undefined
    ? ";mode=record"
    : `;ssrc=${ssrc.toString(16).toUpperCase().padStart(8, "0")}`;
  if (transport.protocol === "tcp") {
    const [a, b] = transport.interleaved;
    return `RTP/AVP/TCP;unicast;interleaved=${a}-${b}${tail}`;
  }
  const [c0, c1] = transport.clientPorts;
  const [s0, s1] = transport.serverPorts;
  return `RTP/AVP;unicast;client_port=${c0}-${c1};server_port=${s0}-${s1}${tail}`;
}
