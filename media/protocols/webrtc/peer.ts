/**
 * werift peer connections as the server needs them: no STUN server (werift's default is a
 * public one), host candidates only on the configured address and UDP port range, and a
 * complete (non-trickle) answer, because the Web SDK never exchanges candidates.
 */
import { RTCPeerConnection } from "werift";
import { ParseError } from "../../../core/errors.ts";
import type { NegotiatedCodec } from "./codecs.ts";

/** Where the media sockets of a peer bind and what their candidates announce. */
export interface PeerAddress {
  /** Address the UDP sockets bind to. */
  bind: string;
  /** Address written into the host candidates (a public address behind NAT), else `bind`. */
  announced?: string;
  /** Lowest UDP port for media. */
  portMin: number;
  /** Highest UDP port for media. */
  portMax: number;
}

/** Longest wait for the local candidates of an answer, in milliseconds. */
export const gatherTimeoutMs = 5000;

let openPeers = 0;

/** Peer connections created and not yet closed (leak checks in tests and benches). */
export function openPeerCount(): number {
  return openPeers;
}

/** A werift peer connection with a close that is counted and safe to call twice. */
export class Peer {
  readonly pc: RTCPeerConnection;
  /** Address the answer's candidates must carry; undefined keeps every candidate. */
  readonly #announced: string | undefined;
  #closed = false;

  /** `negotiated`: the codecs chosen for the offer's media lines, in offer order. */
  constructor(address: PeerAddress, negotiated: readonly NegotiatedCodec[]) {
    const codecs = {
      video: negotiated.filter((c) => c.kind === "video").map((c) => c.params),
      audio: negotiated.filter((c) => c.kind === "audio").map((c) => c.params),
    };
    const wildcard = address.bind === "0.0.0.0" || address.bind === "::";
    this.#announced = address.announced ?? (wildcard ? undefined : address.bind);
    this.pc = new RTCPeerConnection({
      iceServers: [],
      codecs,
      // No header extensions: werift's transport-cc feedback made Chrome cut its bitrate to
      // ~40 kbit/s here, while loss-based estimation alone reaches the capture's full rate.
      headerExtensions: { video: [], audio: [] },
      icePortRange: [address.portMin, address.portMax],
      // werift skips loopback and other "internal" interfaces, so the configured address is
      // added explicitly and the interface scan is turned off unless the bind is a wildcard.
      iceUseIpv4: wildcard && address.announced === undefined,
      iceUseIpv6: false,
      iceAdditionalHostAddresses: this.#announced === undefined ? undefined : [this.#announced],
      iceInterfaceAddresses: wildcard ? undefined : { udp4: address.bind },
    });
    openPeers++;
  }

  /**
   * Applies the client's offer and returns the complete answer: every local candidate is in
   * it, filtered to the announced address. `prepare` runs between the two descriptions (to
   * set directions and senders). A malformed offer is a ParseError.
   */
  async answer(offerSdp: string, prepare: () => void | Promise<void>): Promise<string> {
    try {
      await this.pc.setRemoteDescription({ type: "offer", sdp: offerSdp });
    } catch (err) {
      throw new ParseError(`bad SDP offer: ${(err as Error).message}`, { cause: err });
    }
    await prepare();
    await this.pc.setLocalDescription(await this.pc.createAnswer());
    if (this.pc.iceGatheringState !== "complete") {
      const { promise, resolve } = Promise.withResolvers<void>();
      const sub = this.pc.iceGatheringStateChange.subscribe((s) => s === "complete" && resolve());
      const timer = setTimeout(resolve, gatherTimeoutMs);
      await promise;
      clearTimeout(timer);
      sub.unSubscribe();
    }
    const sdp = this.pc.localDescription?.sdp;
    if (!sdp) throw new Error("werift produced no local description");
    return this.#announced === undefined ? sdp : keepCandidatesOf(sdp, this.#announced);
  }

  /** Closes the connection (idempotent). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    openPeers--;
    await this.pc.close();
  }
}

/** The SDP without candidate lines of other addresses (werift may add interface addresses). */
export function keepCandidatesOf(sdp: string, address: string): string {
  return sdp.split("\r\n").filter((line) => {
    if (!line.startsWith("a=candidate:")) return true;
    return line.split(" ")[4] === address;
  }).join("\r\n");
}
