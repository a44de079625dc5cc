/**
 * What an SFU participant's SDP says about each of its media sections: the mid, the kind, the
 * direction, the MediaStreamTrack id of `a=msid` (the SDK names tracks by it in `muteTrack`)
 * and the `a=content` label the SFU SDK adds after `a=msid` (camera, screen, mic, ...).
 */
import { ParseError } from "../../core/errors.ts";

/** One m-line of an SDP. */
export interface SdpSection {
  kind: string;
  mid: string;
  /** sendonly, recvonly, sendrecv or inactive; sendrecv when the line has none. */
  direction: string;
  /** Track id of `a=msid:<stream> <track>`, "" when absent. */
  trackId: string;
  /** `a=content:` label, "" when absent. */
  content: string;
  /** The section offers simulcast (`a=simulcast:send`). */
  simulcast: boolean;
}

const directions = new Set(["sendonly", "recvonly", "sendrecv", "inactive"]);

/** The m-lines of `sdp`; not an SDP, or a section without a mid, is a ParseError. */
export function parseSections(sdp: unknown): SdpSection[] {
  if (typeof sdp !== "string" || !sdp.startsWith("v=0")) {
    throw new ParseError("the SDP does not start with v=0");
  }
  const sections: SdpSection[] = [];
  let current: SdpSection | undefined;
  for (const raw of sdp.split(/\r?\n/)) {
    const line = raw.trim();
    if (line.startsWith("m=")) {
      const kind = line.slice(2).split(" ")[0];
      current = {
        kind,
        mid: "",
        direction: "sendrecv",
        trackId: "",
        content: "",
        simulcast: false,
      };
      sections.push(current);
    } else if (!current) continue;
    else if (line.startsWith("a=mid:")) current.mid = line.slice(6);
    else if (line.startsWith("a=msid:")) current.trackId = line.slice(7).split(" ")[1] ?? "";
    else if (line.startsWith("a=content:")) current.content = line.slice(10);
    else if (line.startsWith("a=simulcast:")) current.simulcast = true;
    else if (directions.has(line.slice(2))) current.direction = line.slice(2);
  }
  if (sections.length === 0) throw new ParseError("the SDP has no m-line");
  const unnamed = sections.find((s) => s.mid === "");
  if (unnamed) throw new ParseError(`an m=${unnamed.kind} section has no a=mid`);
  return sections;
}

/**
 * The offer without its simulcast lines (`a=simulcast`, `a=rid`): until layers are switched
 * per subscriber (media/rtp/simulcast_*), a publisher is asked for one encoding, which the
 * browser then sends alone.
 */
export function withoutSimulcast(sdp: string): string {
  return sdp.split("\r\n").filter((line) =>
    !line.startsWith("a=simulcast:") && !line.startsWith("a=rid:")
  ).join("\r\n");
}
