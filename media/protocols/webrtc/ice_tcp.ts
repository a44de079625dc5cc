/**
 * WebRTC media over TCP (ICE-TCP, RFC 6544) for clients whose network blocks UDP: the Web SDK's
 * `transport: "TCP"` asks WCS for TCP passive candidates instead of UDP ones. A server peer on
 * TCP listens on one TCP port of the media range and its answer carries that passive host
 * candidate only, so the browser connects out to it (as it would through a firewall that lets
 * TCP out); werift's UDP socket and its TCP active candidate stay out of the answer, and neither
 * pairs nor answers checks, so media never goes over UDP for that peer.
 */
import type { CandidatePair, Message, RTCPeerConnection } from "werift";

/** Transport of a server peer's ICE candidates. */
export type IceTransport = "udp" | "tcp";

/**
 * The transport a Web SDK stream object asks for (`transport`: "TCP" or "UDP", any case), or
 * `fallback` (the server's `media.iceTransport`) when it names none or something else.
 */
export function requestedIceTransport(value: unknown, fallback: IceTransport): IceTransport {
  if (typeof value !== "string") return fallback;
  const lower = value.toLowerCase();
  return lower === "tcp" || lower === "udp" ? lower : fallback;
}

/** What werift tells of a candidate: its transport and, on TCP, its type. */
interface CandidateFields {
  transport: string;
  tcptype?: string;
}

/** Whether `candidate` is a TCP passive one (a listening socket the client connects to). */
function isTcpPassive(candidate: CandidateFields | undefined): boolean {
  return candidate?.transport.toLowerCase() === "tcp" && candidate.tcptype === "passive";
}

/**
 * werift settings of a peer on TCP: it gathers TCP candidates (a listening server per host
 * address, on a port of `icePortRange`), pairs only its passive one (the client's checks over
 * the connection it opened) and answers no Binding request that came any other way (UDP).
 */
export function tcpIceConfig(): Partial<RTCPeerConnection["config"]> {
  return {
    iceUseTcp: true,
    iceTcpPassive: true,
    iceFilterCandidatePair: (pair: CandidatePair) => isTcpPassive(pair.localCandidate),
    iceFilterStunResponse: (_message: Message, _addr: unknown, protocol: unknown) =>
      isTcpPassive((protocol as { localCandidate?: CandidateFields }).localCandidate),
  };
}

/**
 * The SDP with only its TCP passive candidate lines, those on `host` when given (werift adds
 * interface addresses), written with `announced` as their address when given (NAT).
 */
export function keepTcpPassiveCandidates(sdp: string, host?: string, announced?: string): string {
  return sdp.split("\r\n").flatMap((line) => {
    if (!line.startsWith("a=candidate:")) return [line];
    const fields = line.split(" ");
    const passive = fields[2]?.toLowerCase() === "tcp" &&
      fields.some((f, i) => f === "tcptype" && fields[i + 1] === "passive");
    if (!passive || (host !== undefined && fields[4] !== host)) return [];
    if (announced !== undefined) fields[4] = announced;
    return [fields.join(" ")];
  }).join("\r\n");
}

/** Ports of the TCP passive candidates of a local candidate list. */
export function tcpPassivePorts(candidates: readonly (CandidateFields & { port: number })[]) {
  return candidates.filter(isTcpPassive).map((c) => c.port);
}

/** The part of werift's ICE connection that tells the selected pair. */
interface SelectedPairOf {
  nominated?: { localCandidate?: CandidateFields };
}

/**
 * The transport of the connection's selected (nominated) candidate pair; undefined before
 * ICE selected one. The send engine carries only "udp" (it sends datagrams on the ICE mux's
 * socket), so a player whose pair is "tcp" stays on werift's send path.
 */
export function selectedTransportOf(connection: SelectedPairOf): IceTransport | undefined {
  const local = connection.nominated?.localCandidate;
  if (!local) return undefined;
  return local.transport.toLowerCase() === "tcp" ? "tcp" : "udp";
}
