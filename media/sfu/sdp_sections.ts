/**
 * What an SFU participant's SDP says about each of its media sections: the mid, the kind, the
 * direction, the MediaStreamTrack id of `a=msid` (the SDK names tracks by it in `muteTrack`),
 * the `a=content` label the SFU SDK adds after `a=msid` (camera, screen, mic, ...) and the
 * simulcast layers offered (`a=simulcast:send`, else the `a=rid:<id> send` lines).
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
  /** rids of the simulcast layers sent, in the offer's order; empty without simulcast. */
  rids: string[];
}

const directions = new Set(["sendonly", "recvonly", "sendrecv", "inactive"]);

/**
 * The rids of an `a=simulcast:send` value (RFC 8853): `;` separates layers, `,` alternatives
 * of which the first is taken, `~` marks a layer paused at the start.
 */
function simulcastRids(value: string): string[] {
  return value.split(" ")[0].split(";").map((layer) => layer.split(",")[0].replace(/^~/, ""))
    .filter((rid) => rid !== "");
}

/**
 * The m-lines of `sdp`, less rejected ones (port 0) without a mid; not an SDP, or another
 * section without a mid, is a ParseError.
 */
export function parseSections(sdp: unknown): SdpSection[] {
  if (typeof sdp !== "string" || !sdp.startsWith("v=0")) {
    throw new ParseError("the SDP does not start with v=0");
  }
  const sections: SdpSection[] = [];
  const ridLines = new Map<SdpSection, string[]>();
  const rejected = new Set<SdpSection>();
  let current: SdpSection | undefined;
  for (const raw of sdp.split(/\r?\n/)) {
    const line = raw.trim();
    if (line.startsWith("m=")) {
      const [kind, port] = line.slice(2).split(" ");
      current = { kind, mid: "", direction: "sendrecv", trackId: "", content: "", rids: [] };
      if (port === "0") rejected.add(current);
      sections.push(current);
      ridLines.set(current, []);
    } else if (!current) continue;
    else if (line.startsWith("a=mid:")) current.mid = line.slice(6);
    else if (line.startsWith("a=msid:")) current.trackId = line.slice(7).split(" ")[1] ?? "";
    else if (line.startsWith("a=content:")) current.content = line.slice(10);
    else if (line.startsWith("a=simulcast:send ")) current.rids = simulcastRids(line.slice(17));
    else if (/^a=rid:\S+ send/.test(line)) ridLines.get(current)!.push(line.slice(6).split(" ")[0]);
    else if (directions.has(line.slice(2))) current.direction = line.slice(2);
  }
  if (sections.length === 0) throw new ParseError("the SDP has no m-line");
  // A stopped transceiver's m-line may come without its mid: nothing here refers to it.
  const named = sections.filter((s) => !(rejected.has(s) && s.mid === ""));
  sections.splice(0, sections.length, ...named);
  const unnamed = sections.find((s) => s.mid === "");
  if (unnamed) throw new ParseError(`an m=${unnamed.kind} section has no a=mid`);
  for (const section of sections) {
    if (section.rids.length === 0) section.rids = ridLines.get(section)!;
  }
  return sections;
}
