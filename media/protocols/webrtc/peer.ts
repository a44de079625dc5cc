/**
 * werift peer connections as the server needs them: no STUN server (werift's default is a
 * public one), host candidates only on the configured address and either on the server's
 * ICE mux (one UDP port every peer shares: ice_mux.ts) or on ports of the UDP range no other
 * peer of this process holds (port_pool.ts), or, for a client that asked for TCP, one TCP
 * passive candidate on a port of that range (ice_tcp.ts), and a complete (non-trickle)
 * answer, because the Web SDK never exchanges candidates.
 */
import { RTCPeerConnection } from "werift";
import { ParseError } from "../../../core/errors.ts";
import type { NegotiatedCodec } from "./codecs.ts";
import {
  type DatagramEvent,
  type DtlsRetransmitFilter,
  filterDtlsRetransmits,
} from "./dtls_retransmit_filter.ts";
import type { IceMux } from "./ice_mux.ts";
import {
  type IceTransport,
  keepTcpPassiveCandidates,
  tcpIceConfig,
  tcpPassivePorts,
} from "./ice_tcp.ts";
import { installIceTcpGate } from "./ice_tcp_gate.ts";
import { holdIceRoles } from "./ice_role_hold.ts";
import { installIceMux, muxInterfaceAddresses } from "./ice_mux_werift.ts";
import { portPoolOf, type UdpPortPool } from "./port_pool.ts";
import { installNoDefaultStun } from "./no_default_stun.ts";
import { installUdpBindRetry } from "./udp_bind.ts";
import { installFfiSrtpReceive } from "./srtp_receive_ffi.ts";
import { installRtpHeaderParse } from "./rtp_header_parse.ts";
import type { TrickleCandidate } from "./sdpfrag.ts";
import {
  compactHandshake,
  dropHandshakeKeys,
  dropUnusedSrtpAuth,
  lazyDescriptions,
  leanEvents,
  shareLocalCertificate,
} from "./werift_trim.ts";

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
  /** The server's ICE mux: when set, the peer's UDP candidates are on its port, not the range's. */
  mux?: IceMux;
  /**
   * "tcp": the answer carries one TCP passive candidate, on a TCP port of `portMin`..`portMax`,
   * and nothing else (a client that asked for TCP); "udp" (the default): UDP candidates.
   */
  transport?: IceTransport;
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
  /** Transport of the answer's candidates. */
  readonly transport: IceTransport;
  /** On TCP: the address the passive candidate listens on, when not every interface's. */
  readonly #tcpHost: string | undefined;
  /** The media port range's pool; undefined on the ICE mux. */
  readonly #ports: UdpPortPool | undefined;
  /** Ports of the pool this peer holds: two while it gathers, then those it bound. */
  #heldPorts: number[];
  /** An RTP packet came through SRTP decryption. */
  #rtpDecrypted = false;
  readonly #dtlsFilters: DtlsRetransmitFilter[] = [];
  /** Transports already watched (a renegotiation describes the same ones again). */
  readonly #watched = new WeakSet<object>();
  /** Callers of `onMediaReady` not yet called. */
  #mediaReady: (() => void)[] = [];
  /** What werift made for the handshake was trimmed (werift_trim.ts). */
  #trimmed = false;
  #closed = false;

  /**
   * `negotiated`: the codecs chosen for the offer's media lines, in offer order.
   * `headerExtensions`: RTP header extensions to negotiate (none by default; the SFU takes
   * rid and mid to receive simulcast). A ServiceUnavailableError when the media port range
   * has no free port left (without the ICE mux).
   */
  constructor(
    address: PeerAddress,
    negotiated: readonly NegotiatedCodec[],
    headerExtensions: RTCPeerConnection["config"]["headerExtensions"] = { video: [], audio: [] },
  ) {
    installUdpBindRetry();
    installNoDefaultStun();
    installIceMux();
    installIceTcpGate();
    installFfiSrtpReceive();
    installRtpHeaderParse();
    const codecs = {
      video: negotiated.filter((c) => c.kind === "video").map((c) => c.params),
      audio: negotiated.filter((c) => c.kind === "audio").map((c) => c.params),
    };
    const wildcard = address.bind === "0.0.0.0" || address.bind === "::";
    this.#announced = address.announced ?? (wildcard ? undefined : address.bind);
    const { mux } = address;
    this.transport = address.transport ?? "udp";
    const tcp = this.transport === "tcp";
    // The TCP listener binds the configured address and its candidate is rewritten to the
    // announced one (binding a NAT's public address would fail); a wildcard bind without an
    // announced address listens on every interface werift finds, as UDP does.
    this.#tcpHost = tcp && (!wildcard || address.announced !== undefined)
      ? address.bind
      : undefined;
    // A TCP peer takes its listening port from the range even on the ICE mux.
    this.#ports = mux && !tcp ? undefined : portPoolOf(address.portMin, address.portMax);
    const port = this.#ports?.acquirePair();
    this.#heldPorts = port === undefined ? [] : [port, port + 1];
    this.pc = new RTCPeerConnection({
      iceServers: [],
      codecs,
      // No transport-cc: werift's feedback made Chrome cut its bitrate to ~40 kbit/s here,
      // while loss-based estimation alone reaches the capture's full rate.
      headerExtensions,
      icePortRange: port === undefined ? undefined : [port, port + 1],
      // werift skips loopback and other "internal" interfaces, so the configured address is
      // added explicitly and the interface scan is turned off unless the bind is a wildcard.
      iceUseIpv4: wildcard && address.announced === undefined,
      iceUseIpv6: false,
      iceAdditionalHostAddresses: tcp
        ? this.#tcpHost === undefined ? undefined : [this.#tcpHost]
        : this.#announced === undefined
        ? undefined
        : [this.#announced],
      iceInterfaceAddresses: mux
        ? muxInterfaceAddresses(mux)
        : wildcard
        ? undefined
        : { udp4: address.bind },
      ...(tcp ? tcpIceConfig() : {}),
    });
    openPeers++;
  }

  /**
   * Applies the client's offer and returns the complete answer: every local candidate is in
   * it, filtered to the announced address. `prepare` runs between the two descriptions (to
   * set directions and senders). A malformed offer is a ParseError.
   */
  async answer(offerSdp: string, prepare: () => void | Promise<void>): Promise<string> {
    // On TCP the client's candidates never pair (it dials in: its checks make the pairs),
    // and werift, told they are all there, would fail at once with an empty check list.
    const remoteSdp = this.transport === "tcp" ? withoutEndOfCandidates(offerSdp) : offerSdp;
    const renegotiating = this.pc.remoteDescription !== null;
    try {
      await this.pc.setRemoteDescription({ type: "offer", sdp: remoteSdp });
    } catch (err) {
      throw new ParseError(`bad SDP offer: ${(err as Error).message}`, { cause: err });
    }
    // The DTLS server's side of the handshake, so Chrome's client drives it and its
    // retransmissions. With a loaded Chrome, werift came out of 6 in 79 handshakes as a
    // client and 3 in 100 as a server with keys Chrome did not have ("Failed by ICE
    // timeout"); with the retransmit filter below, 0 in 60 as a server.
    if (/^a=setup:actpass\r?$/m.test(offerSdp)) {
      // Only before the handshake: a re-offer (SFU renegotiation) keeps the agreed role.
      for (const transport of this.pc.dtlsTransports) {
        if (transport.state === "new") transport.role = "server";
      }
    }
    await prepare();
    const describe = async () => {
      await this.pc.setLocalDescription(await this.pc.createAnswer());
    };
    await (renegotiating ? holdIceRoles(this.pc, describe) : describe());
    return await this.#completeLocal();
  }

  /**
   * Makes the server's offer (an incoming SIP call rings the browser with it), complete with
   * every local candidate: `prepare` adds the transceivers first. The browser's answer is
   * applied by `acceptAnswer`.
   */
  async offer(prepare: () => void | Promise<void>): Promise<string> {
    await prepare();
    const describe = async () => {
      await this.pc.setLocalDescription(await this.pc.createOffer());
    };
    // A server offer after the client's (an SFU renegotiation) keeps the role ICE started with.
    await (this.pc.remoteDescription !== null ? holdIceRoles(this.pc, describe) : describe());
    return await this.#completeLocal();
  }

  /** Applies the browser's answer to `offer`; a malformed one is a ParseError. */
  async acceptAnswer(answerSdp: string): Promise<void> {
    // On TCP, as in `answer`: the client's candidates never pair, so werift must not be told
    // they are complete (an SFU participant's answer to a server offer may say so).
    const sdp = this.transport === "tcp" ? withoutEndOfCandidates(answerSdp) : answerSdp;
    try {
      await this.pc.setRemoteDescription({ type: "answer", sdp });
    } catch (err) {
      throw new ParseError(`bad SDP answer: ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * Waits for the local candidates, keeps the bound ports and returns the local description
   * filtered to the announced address.
   */
  async #completeLocal(): Promise<string> {
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
    for (const transport of this.pc.dtlsTransports) {
      if (this.#watched.has(transport)) continue;
      this.#watched.add(transport);
      this.#dtlsFilters.push(
        filterDtlsRetransmits(transport.iceTransport.connection.onData as DatagramEvent),
      );
      // Once, not per packet: whether any SRTP packet was decrypted, for the diagnostics.
      const sub = transport.onRtp.subscribe(() => {
        this.#rtpDecrypted = true;
        sub.unSubscribe();
      });
      transport.onStateChange.subscribe((state) => {
        if (state === "connected") this.#checkMediaReady();
      });
    }
    // After the filters above took what they wrap: the events they left alone are made lean.
    leanEvents(this.pc);
    const bound = new Set(
      this.pc.dtlsTransports.flatMap((t) =>
        t.iceTransport.connection.localCandidates.map((c) => c.port)
      ),
    );
    this.#keepPorts(bound);
    if (this.transport === "tcp") {
      const listening = this.pc.dtlsTransports.flatMap((t) =>
        tcpPassivePorts(t.iceTransport.connection.localCandidates)
      );
      if (listening.length === 0) {
        throw new Error("no TCP port could be listened on for media (taken by another process)");
      }
      const announced = this.#tcpHost === undefined ? undefined : this.#announced;
      return keepTcpPassiveCandidates(sdp, this.#tcpHost, announced);
    }
    if (bound.size === 0) {
      // Both ports were taken by another process: without a candidate the browser could
      // only time out.
      throw new Error("no UDP port could be bound for media (taken by another process)");
    }
    return this.#announced === undefined ? sdp : keepCandidatesOf(sdp, this.#announced);
  }

  /**
   * Adds candidates the client trickled after the answer (WHIP/WHEP PATCH). A candidate
   * werift refuses (unknown section, bad address) is a ParseError.
   */
  async addRemoteCandidates(candidates: readonly TrickleCandidate[]): Promise<void> {
    // A peer on TCP pairs only the connections the client opens to its passive candidate:
    // what the client trickles (its own addresses) can never pair.
    if (this.transport === "tcp") return;
    for (const candidate of candidates) {
      // werift speaks ICE over UDP only; browsers also trickle TCP candidates.
      if (candidate.candidate.split(" ")[2]?.toLowerCase() !== "udp") continue;
      try {
        await this.pc.addIceCandidate(candidate);
      } catch (err) {
        throw new ParseError(`candidate refused: ${(err as Error).message}`, { cause: err });
      }
    }
  }

  /**
   * Calls `ready` once, when every DTLS transport of the peer is connected: the SRTP keys
   * exist, so media can be protected, on werift's path or the send engine's (which takes the
   * keys and gets none before). werift's `connected` connection state is not that moment in
   * every case (an ICE-connected transport makes its connect() return without waiting for
   * DTLS, and the SFU attaches tracks outside it), so media is started from here. Never
   * called after `close`.
   */
  onMediaReady(ready: () => void): void {
    this.#mediaReady.push(ready);
    this.#checkMediaReady();
  }

  /** True when every DTLS transport is connected (SRTP started before werift says so). */
  get mediaReady(): boolean {
    const transports = this.pc.dtlsTransports;
    return transports.length > 0 && transports.every((t) => t.state === "connected");
  }

  #checkMediaReady(): void {
    if (this.#closed || !this.mediaReady) return;
    if (!this.#trimmed) {
      this.#trimmed = true;
      // The handshake made the DTLS and SRTP objects: their events, unused HMACs and (for a
      // DTLS server) the handshake's keys and messages go; the negotiated descriptions are
      // kept as text.
      leanEvents(this.pc);
      lazyDescriptions(this.pc);
      for (const transport of this.pc.dtlsTransports) {
        dropUnusedSrtpAuth(transport);
        dropHandshakeKeys(transport);
        compactHandshake(transport);
        shareLocalCertificate(transport);
      }
    }
    if (this.#mediaReady.length === 0) return;
    const ready = this.#mediaReady;
    this.#mediaReady = [];
    for (const call of ready) call();
  }

  /** Gives back the held ports not in `bound`. */
  #keepPorts(bound: ReadonlySet<number>): void {
    for (const port of this.#heldPorts) if (!bound.has(port)) this.#ports?.release(port);
    this.#heldPorts = this.#heldPorts.filter((port) => bound.has(port));
  }

  /**
   * Where the connection got to, for the log line of one that failed or stalled: the
   * states of ICE and DTLS, whether the browser's connectivity checks arrived (remote
   * candidates are learnt from them, as the SDK sends none), and each candidate pair.
   */
  diagnostics(): PeerDiagnostics {
    const pc = this.pc;
    return {
      connectionState: pc.connectionState,
      iceConnectionState: pc.iceConnectionState,
      iceGatheringState: pc.iceGatheringState,
      rtpDecrypted: this.#rtpDecrypted,
      dtlsRetransmitsDropped: this.#dtlsFilters.reduce((n, f) => n + f.dropped, 0),
      transports: pc.dtlsTransports.map((dtls) => {
        const ice = dtls.iceTransport.connection;
        return {
          dtls: dtls.state,
          dtlsRole: dtls.role,
          srtpProfile: dtls.dtls?.srtp.srtpProfile,
          mediaPacketsReceived: dtls.packetsReceived,
          ice: ice.state,
          iceRole: ice.iceControlling ? "controlling" : "controlled",
          remoteCandidates: ice.remoteCandidates.length,
          nominated: ice.nominated !== undefined,
          pairs: ice.candidatePairs.map((pair) =>
            `${pair.remoteCandidate.host}:${pair.remoteCandidate.port} ${
              pairStates[pair.state] ?? pair.state
            }`
          ),
        };
      }),
    };
  }

  /**
   * Calls `onFailed` once when ICE or DTLS fails, with the phase that failed and the
   * diagnostics at that moment.
   */
  onFailed(onFailed: (phase: "ice" | "dtls", diagnostics: PeerDiagnostics) => void): void {
    let reported = false;
    const report = (phase: "ice" | "dtls") => {
      if (reported || this.#closed) return;
      reported = true;
      onFailed(phase, this.diagnostics());
    };
    this.pc.iceConnectionStateChange.subscribe((state) => state === "failed" && report("ice"));
    this.pc.connectionStateChange.subscribe((state) => {
      if (state !== "failed") return;
      const iceFailed = this.pc.dtlsTransports.some((t) => t.iceTransport.state === "failed");
      report(iceFailed ? "ice" : "dtls");
    });
  }

  /** Closes the connection (idempotent). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#mediaReady = [];
    openPeers--;
    try {
      await this.pc.close();
    } finally {
      this.#keepPorts(new Set());
    }
  }
}

/** Names of werift's candidate pair states, by value. */
const pairStates = ["frozen", "waiting", "in-progress", "succeeded", "failed"];

/** What `Peer.diagnostics` reports. */
export interface PeerDiagnostics {
  connectionState: string;
  iceConnectionState: string;
  iceGatheringState: string;
  /** An RTP packet got through SRTP decryption (media arrives, whoever drops it later). */
  rtpDecrypted: boolean;
  /** Stale retransmitted DTLS handshake records kept from werift (dtls_retransmit_filter.ts). */
  dtlsRetransmitsDropped: number;
  /** One entry per transport (one with BUNDLE). */
  transports: {
    dtls: string;
    dtlsRole: string;
    /** SRTP protection profile DTLS agreed on (werift's number), once connected. */
    srtpProfile?: number;
    /** SRTP and SRTCP packets that reached the transport, decrypted or not. */
    mediaPacketsReceived: number;
    ice: string;
    iceRole: string;
    /** Remote candidates known; 0 means no connectivity check of the browser arrived. */
    remoteCandidates: number;
    nominated: boolean;
    /** "address:port state" of each candidate pair. */
    pairs: string[];
  }[];
}

/** The SDP without its `a=end-of-candidates` lines. */
function withoutEndOfCandidates(sdp: string): string {
  return sdp.split("\r\n").filter((line) => line !== "a=end-of-candidates").join("\r\n");
}

/** The SDP without candidate lines of other addresses (werift may add interface addresses). */
export function keepCandidatesOf(sdp: string, address: string): string {
  return sdp.split("\r\n").filter((line) => {
    if (!line.startsWith("a=candidate:")) return true;
    return line.split(" ")[4] === address;
  }).join("\r\n");
}
