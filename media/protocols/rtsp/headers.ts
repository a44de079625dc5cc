/**
 * The structured RTSP headers a client reads and writes: Transport (RFC 2326 §12.39),
 * Session (§12.37), RTP-Info (§12.33) and Public (§12.28).
 */
import { ParseError } from "../../../core/errors.ts";

/** Session timeout when the server gives none (RFC 2326 §12.37), in seconds. */
export const defaultSessionTimeoutSeconds = 60;

/** How RTP reaches the client. */
export type TransportSpec =
  /** Over the RTSP connection, on two interleaved channels. */
  | { protocol: "tcp"; interleaved: [number, number] }
  /** Over UDP: the client's ports, and the server's when it answers. */
  | { protocol: "udp"; clientPorts: [number, number]; serverPorts?: [number, number] };

/** The Transport value a client asks for. */
export function formatTransport(spec: TransportSpec): string {
  if (spec.protocol === "tcp") {
    return `RTP/AVP/TCP;unicast;interleaved=${spec.interleaved[0]}-${spec.interleaved[1]}`;
  }
  return `RTP/AVP;unicast;client_port=${spec.clientPorts[0]}-${spec.clientPorts[1]}`;
}

function portPair(value: string): [number, number] {
  const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(value);
  if (!m) throw new ParseError(`bad port range in Transport: ${value}`);
  const first = Number(m[1]);
  const second = m[2] !== undefined ? Number(m[2]) : first + 1;
  if (first > 65535 || second > 65535) throw new ParseError("port out of range in Transport");
  return [first, second];
}

/** Parses the Transport of a SETUP answer (the first transport when several are listed). */
export function parseTransport(value: string): TransportSpec {
  const [first] = value.split(",");
  const parts = first.split(";").map((p) => p.trim());
  const lower = parts[0].toUpperCase();
  if (!lower.startsWith("RTP/AVP")) throw new ParseError(`unsupported transport ${parts[0]}`);
  const params = new Map<string, string>();
  for (const part of parts.slice(1)) {
    const eq = part.indexOf("=");
    if (eq < 0) params.set(part.toLowerCase(), "");
    else params.set(part.slice(0, eq).toLowerCase(), part.slice(eq + 1));
  }
  if (lower === "RTP/AVP/TCP") {
    const interleaved = params.get("interleaved");
    if (interleaved === undefined) throw new ParseError("TCP transport without interleaved");
    const pair = portPair(interleaved);
    if (pair[0] > 255 || pair[1] > 255) throw new ParseError("interleaved channel above 255");
    return { protocol: "tcp", interleaved: pair };
  }
  const client = params.get("client_port");
  const server = params.get("server_port");
  return {
    protocol: "udp",
    clientPorts: client !== undefined ? portPair(client) : [0, 0],
    serverPorts: server !== undefined ? portPair(server) : undefined,
  };
}

/** A Session header: the id and the timeout in seconds. */
export function parseSession(value: string): { id: string; timeoutSeconds: number } {
  const [id, ...params] = value.split(";").map((p) => p.trim());
  if (id === "") throw new ParseError("empty Session header");
  let timeoutSeconds = defaultSessionTimeoutSeconds;
  for (const p of params) {
    const m = /^timeout\s*=\s*(\d{1,6})$/i.exec(p);
    if (m && Number(m[1]) > 0) timeoutSeconds = Number(m[1]);
  }
  return { id, timeoutSeconds };
}

/** One stream of an RTP-Info header. */
export interface RtpInfoEntry {
  url: string;
  seq?: number;
  /** RTP timestamp of the first packet after PLAY, in the track's clock. */
  rtptime?: number;
}

/** Parses RTP-Info. */
export function parseRtpInfo(value: string): RtpInfoEntry[] {
  const entries: RtpInfoEntry[] = [];
  for (const item of value.split(",")) {
    const entry: RtpInfoEntry = { url: "" };
    for (const part of item.split(";")) {
      const eq = part.indexOf("=");
      if (eq < 0) continue;
      const key = part.slice(0, eq).trim().toLowerCase();
      const v = part.slice(eq + 1).trim();
      if (key === "url") entry.url = v;
      else if (key === "seq" && /^\d+$/.test(v)) entry.seq = Number(v) & 0xffff;
      else if (key === "rtptime" && /^\d+$/.test(v)) entry.rtptime = Number(v) >>> 0;
    }
    if (entry.url !== "") entries.push(entry);
  }
  return entries;
}

/** Methods of a Public header, upper-case. */
export function parsePublic(value: string | undefined): Set<string> {
  return new Set((value ?? "").split(",").map((m) => m.trim().toUpperCase()).filter(Boolean));
}
