/**
 * Trickle ICE fragments (RFC 8840 `application/trickle-ice-sdpfrag`) as WHIP and WHEP
 * clients PATCH them: the ICE credentials, and the candidates of each media section.
 */
import { ParseError } from "../../../core/errors.ts";

/** One trickled candidate, as werift's addIceCandidate takes it. */
export interface TrickleCandidate {
  /** The attribute value without `a=`, e.g. `candidate:1 1 udp 2122 127.0.0.1 5000 typ host`. */
  candidate: string;
  /** The `a=mid` of its media section, if the fragment named one. */
  sdpMid?: string;
  /** Index of its media section in the fragment (0 when it has none). */
  sdpMLineIndex: number;
}

/** What a fragment carries. */
export interface SdpFragment {
  /** `a=ice-ufrag`, when present: a new one means an ICE restart. */
  ufrag?: string;
  pwd?: string;
  candidates: TrickleCandidate[];
  /** `a=end-of-candidates` was present. */
  endOfCandidates: boolean;
}

/** Largest number of candidates one fragment may carry. */
const maxCandidates = 64;

/** The candidate grammar of RFC 8839 §5.1, up to the candidate type. */
const candidatePattern =
  /^candidate:[!-~]{1,32} \d{1,3} [A-Za-z]+ \d{1,10} \S+ \d{1,5} typ (host|srflx|prflx|relay)( .*)?$/;

/** Parses a fragment; a line that is neither known nor well formed is a ParseError. */
export function parseSdpFragment(text: string): SdpFragment {
  const fragment: SdpFragment = { candidates: [], endOfCandidates: false };
  let mid: string | undefined;
  let mLineIndex = -1;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === "") continue;
    if (line.startsWith("m=")) {
      mLineIndex++;
      mid = undefined;
    } else if (line.startsWith("a=mid:")) {
      mid = line.slice("a=mid:".length);
    } else if (line.startsWith("a=ice-ufrag:")) {
      fragment.ufrag = line.slice("a=ice-ufrag:".length);
    } else if (line.startsWith("a=ice-pwd:")) {
      fragment.pwd = line.slice("a=ice-pwd:".length);
    } else if (line === "a=end-of-candidates") {
      fragment.endOfCandidates = true;
    } else if (line.startsWith("a=candidate:")) {
      const candidate = line.slice(2);
      if (!candidatePattern.test(candidate)) throw new ParseError(`bad candidate: ${line}`);
      if (fragment.candidates.length === maxCandidates) {
        throw new ParseError(`more than ${maxCandidates} candidates`);
      }
      fragment.candidates.push({ candidate, sdpMid: mid, sdpMLineIndex: Math.max(mLineIndex, 0) });
    } else if (!/^a=[a-z-]+(:.*)?$/.test(line)) {
      throw new ParseError(`not an SDP fragment line: ${line.slice(0, 80)}`);
    }
  }
  return fragment;
}

/** The `a=ice-ufrag` of an SDP (the first one; BUNDLE gives every section the same). */
export function iceUfragOf(sdp: string): string | undefined {
  return /^a=ice-ufrag:(\S+)/m.exec(sdp)?.[1];
}
