/**
 * A participant of an SFU room: its nickname, the session it came on, its peer connection and
 * the tracks it publishes. Events reach its client through `link`.
 */
import type { ParticipantPeer } from "../../media/sfu/participant_peer.ts";
import type { PublishedTrack } from "../../media/sfu/published_track.ts";

/** How a room reaches one participant's client (an `sfuCallback` message). */
export interface SfuLink {
  /** Sends an event; the room sets `type` and `roomId`. Must not throw. */
  send(event: Record<string, unknown>): void;
}

/** One participant of a room. */
export class SfuParticipant {
  readonly userId = crypto.randomUUID();
  /** Changed by renameParticipant. */
  nickname: string;
  /**
   * tid of the client's latest offer (joinRoom, updateRoomState): the SDK sends its answers to
   * server offers with it, so an answer with another tid is not for this negotiation.
   */
  offerTid = "";
  readonly sessionId: string;
  readonly link: SfuLink;
  readonly peer: ParticipantPeer;
  /** Published tracks by their mid in this participant's peer. */
  readonly tracks = new Map<string, PublishedTrack>();
  /** Chat messages being reassembled from fragments, by message id. */
  readonly fragments = new Map<string, string[]>();

  /** `makePeer` builds the participant's peer, whose signals refer to the participant. */
  constructor(
    nickname: string,
    sessionId: string,
    link: SfuLink,
    makePeer: (participant: SfuParticipant) => ParticipantPeer,
  ) {
    this.nickname = nickname;
    this.sessionId = sessionId;
    this.link = link;
    this.peer = makePeer(this);
  }

  /** The published track of `id` (its MediaStreamTrack id), if any. */
  trackById(id: string): PublishedTrack | undefined {
    for (const track of this.tracks.values()) if (track.info.id === id) return track;
    return undefined;
  }
}
