/**
 * An SFU room (WCS's SFU, served to the SFU SDK): created by its first join with a pin, one
 * peer connection per participant. A participant's published tracks are delivered to every
 * other participant by server offers, announced first with ADD_TRACKS (carrying the mid in the
 * receiver's own peer connection, which the SDK matches with `ontrack`) and withdrawn with
 * REMOVE_TRACKS. Chat on each participant's `control` data channel is relayed to the others.
 */
import type { Logger } from "../log.ts";
import type { PeerAddress } from "../../media/protocols/webrtc/peer.ts";
import {
  type Delivery,
  type DeliveryFeedback,
  type OfferedTrack,
  ParticipantPeer,
} from "../../media/sfu/participant_peer.ts";
import { PublishedTrack } from "../../media/sfu/published_track.ts";
import type { LayerReport } from "../../media/rtp/layer_monitor.ts";
import { parseSections } from "../../media/sfu/sdp_sections.ts";
import { type SfuLink, SfuParticipant } from "./participant.ts";
import { sfuErrors, SfuOperationFailed } from "./operation_failed.ts";
import type { SfuBridge } from "./bridge.ts";
import type { EngineSendPaths } from "../../media/protocols/webrtc/engine_send_path.ts";

/** What a room is given besides its name, pin and log. */
export interface SfuRoomOptions {
  /** Publishes the tracks as ordinary streams too (config `sfu.bridge`). */
  readonly bridge?: SfuBridge;
  /** Joins beyond this many participants are refused (config `sfu.maxParticipantsPerRoom`). */
  readonly maxParticipants?: number;
  /** Publishers are told (REMB) they may send this, in kbit/s (config `sfu.maxPublishBitrateKbps`). */
  readonly maxPublishKbps?: number;
  /** The server's send engine: delivered tracks go out through it when it runs. */
  readonly sendPaths?: EngineSendPaths;
}

/** How often subscribers' simulcast layers are re-chosen, in milliseconds. */
export const layerTickMs = 100;

/** Longest chat message reassembled from fragments, in characters. */
export const maxChatMessageChars = 1024 * 1024;

/** A join request, as the SDK sends it (joinRoom). */
export interface JoinRequest {
  readonly pin: string;
  readonly nickname: string;
  readonly sessionId: string;
  readonly sdp: unknown;
  readonly tid: string;
  readonly internalMessageId: string;
  readonly link: SfuLink;
  readonly address: PeerAddress;
}

/**
 * RTCP feedback about a published track, counted as it flows: what its subscribers sent (NACK,
 * PLI, FIR packets), the packets resent for their NACKs and the PLIs sent to its publisher.
 */
export interface SfuFeedbackStats {
  receivedNACK: number;
  receivedPLI: number;
  receivedFIR: number;
  retransmitted: number;
  sentPLI: number;
  /** The bitrate its publisher was last told (REMB) it may send, in bit/s; 0 when none. */
  sentREMB: number;
}

/** What `/sfu/stats` shows of a plain track. */
export interface SfuTrackStats {
  id: string;
  codec: string;
  bitrate: number;
  alive: boolean;
  type: "AUDIO" | "VIDEO";
  sampleRate?: number;
  channels?: number;
  width?: number;
  height?: number;
  fps?: number;
  feedbackStats?: SfuFeedbackStats;
}

/** What `/sfu/stats` shows of a simulcast track: its layers by `"<rid> send"`. */
export interface SfuCompositeStats {
  id: string;
  composite: true;
  tracks: Record<string, SfuTrackStats>;
  feedbackStats: SfuFeedbackStats;
}

/** What `/sfu/stats` shows of a participant. */
export interface SfuParticipantStats {
  nickName: string;
  outgoingTracks: (SfuTrackStats | SfuCompositeStats)[];
  incomingTracks: Record<string, string | null>;
  /** By source track id: the RTCP this participant sent about it (DeliveryFeedback). */
  incomingFeedbackStats: Record<string, DeliveryFeedback>;
}

/** One SFU room. */
export class SfuRoom {
  readonly name: string;
  readonly pin: string;
  readonly creationTime = Date.now();
  /** userId of the participant who created the room. */
  owner = "";
  locked = false;
  readonly #participants = new Map<string, SfuParticipant>();
  readonly #log: Logger;
  readonly #onEmpty: (room: SfuRoom) => void;
  /** Publishes the tracks as ordinary streams too (config `sfu.bridge`). */
  readonly #bridge?: SfuBridge;
  /** Joins beyond this many participants are refused (config `sfu.maxParticipantsPerRoom`). */
  readonly #maxParticipants: number;
  /** Publishers are told (REMB) they may send this, in kbit/s (config `sfu.maxPublishBitrateKbps`). */
  readonly #maxPublishKbps?: number;
  readonly #sendPaths?: EngineSendPaths;
  #ended = false;
  /** Re-chooses layers and reports their liveness; runs once a track is published. */
  #ticker?: ReturnType<typeof setInterval>;

  constructor(
    name: string,
    pin: string,
    log: Logger,
    onEmpty: (room: SfuRoom) => void,
    options: SfuRoomOptions = {},
  ) {
    this.name = name;
    this.pin = pin;
    this.#log = log.child({ room: name });
    this.#onEmpty = onEmpty;
    this.#bridge = options.bridge;
    this.#maxParticipants = options.maxParticipants ?? Infinity;
    this.#maxPublishKbps = options.maxPublishKbps;
    this.#sendPaths = options.sendPaths;
  }

  /** Participants, in join order. */
  get participants(): SfuParticipant[] {
    return [...this.#participants.values()];
  }

  /** True once destroyed or left by everyone. */
  get ended(): boolean {
    return this.#ended;
  }

  /** The participant of `sessionId` in this room, if any. */
  participantOf(sessionId: string): SfuParticipant | undefined {
    return this.participants.find((p) => p.sessionId === sessionId);
  }

  /**
   * Joins a participant with its offer: JOINED and the answer (REMOTE_SDP with the request's
   * tid) to it, JOINED and its tracks to the others, theirs to it. Refusals are
   * SfuOperationFailed (ROOM_JOIN) and a malformed offer a ParseError; the room is unchanged.
   */
  async join(request: JoinRequest): Promise<SfuParticipant> {
    const refuse = (error: string) => new SfuOperationFailed("ROOM_JOIN", error);
    if (this.#ended) throw refuse(sfuErrors.notFound);
    if (request.pin !== this.pin) throw refuse(sfuErrors.wrongPin);
    if (this.locked) throw refuse(sfuErrors.roomLocked);
    if (this.participantOf(request.sessionId)) throw refuse(sfuErrors.alreadyJoined);
    if (this.participants.some((p) => p.nickname === request.nickname)) {
      throw refuse(sfuErrors.nicknameUnavailable);
    }
    if (this.#participants.size >= this.#maxParticipants) throw refuse(sfuErrors.participantCap);
    parseSections(request.sdp);
    const participant = new SfuParticipant(
      request.nickname,
      request.sessionId,
      request.link,
      (self) =>
        new ParticipantPeer(
          request.address,
          {
            delivering: (deliveries) => this.#announce(self, deliveries),
            offer: (sdp, tid) =>
              this.#send(self, "REMOTE_SDP", { info: { sdp, type: "offer", tid } }),
            controlMessage: (text) => this.#chat(self, text),
            failed: (reason) => void this.leave(self, reason),
          },
          this.#log,
          this.#maxPublishKbps === undefined ? undefined : {
            maxPublishKbps: this.#maxPublishKbps,
            published: () => self.tracks.values(),
          },
          this.#sendPaths,
        ),
    );
    const peer = participant.peer;
    let outcome;
    try {
      outcome = await peer.clientOffer(request.sdp);
    } catch (err) {
      await peer.close();
      throw err;
    }
    // Checked again: other joins (or a lock) may have completed while this one answered.
    const late = this.#ended
      ? sfuErrors.notFound
      : this.locked
      ? sfuErrors.roomLocked
      : this.#participants.size >= this.#maxParticipants
      ? sfuErrors.participantCap
      : outcome === "glare" || this.participants.some((p) => p.nickname === request.nickname)
      ? sfuErrors.nicknameUnavailable
      : undefined;
    if (late !== undefined || outcome === "glare") {
      await peer.close();
      throw refuse(late ?? sfuErrors.nicknameUnavailable);
    }
    participant.offerTid = request.tid;
    const others = this.participants;
    this.#participants.set(participant.userId, participant);
    if (this.owner === "") this.owner = participant.userId;
    this.#log.info("SFU participant joined", {
      nickname: participant.nickname,
      userId: participant.userId,
      sessionId: participant.sessionId,
    });
    this.#send(participant, "JOINED", {
      internalMessageId: request.internalMessageId,
      userId: participant.userId,
      name: participant.nickname,
      chatId: this.name,
      owner: this.owner === participant.userId,
    });
    this.#send(participant, "REMOTE_SDP", {
      info: { sdp: outcome.answer, type: "answer", tid: request.tid },
    });
    this.#send(participant, "ROLE_ASSIGNED", {
      userId: participant.userId,
      name: participant.nickname,
      role: this.owner === participant.userId ? "OWNER" : "PARTICIPANT",
    });
    for (const other of others) {
      this.#send(other, "JOINED", { userId: participant.userId, name: participant.nickname });
    }
    this.#participantList();
    this.#publish(participant, outcome.added);
    for (const other of others) {
      for (const track of other.tracks.values()) participant.peer.deliver(track);
    }
    return participant;
  }

  /**
   * A later client offer (updateRoomState): answered with the request's tid; tracks added are
   * delivered to the others, tracks stopped withdrawn. Glare needs no answer: the client
   * offers again after answering the server's offer.
   */
  async update(participant: SfuParticipant, sdp: unknown, tid: string): Promise<void> {
    // Recorded even for an offer lost to glare: the SDK answers our offer with this tid.
    participant.offerTid = tid;
    const outcome = await participant.peer.clientOffer(sdp);
    if (outcome === "glare" || !this.#participants.has(participant.userId)) return;
    this.#send(participant, "REMOTE_SDP", { info: { sdp: outcome.answer, type: "answer", tid } });
    this.#publish(participant, outcome.added);
    for (const mid of outcome.stopped) {
      const track = participant.tracks.get(mid);
      if (!track) continue;
      participant.tracks.delete(mid);
      this.#withdraw(participant, [track]);
      this.#bridge?.close([track]);
    }
  }

  /**
   * The client's answer to a server offer (updateRoomState with sdpType answer), which the SDK
   * sends with the tid of its own latest offer: another tid is refused and nothing applied.
   */
  async answer(participant: SfuParticipant, sdp: unknown, tid: string): Promise<void> {
    if (tid !== participant.offerTid) {
      throw new SfuOperationFailed("ROOM_UPDATE", sfuErrors.tidMismatch);
    }
    await participant.peer.clientAnswer(sdp);
  }

  /**
   * renameParticipant: `by` renames itself, or the owner anyone. PARTICIPANT_RENAMED to
   * everyone (the requester's answers `internalMessageId`) and the new PARTICIPANT_LIST; a
   * nickname in use is "Nickname unavailable" and changes nothing.
   */
  rename(by: SfuParticipant, userId: string, nickname: string, internalMessageId: string): void {
    const refuse = (error: string) => new SfuOperationFailed("RENAME_PARTICIPANT", error);
    const target = this.#participants.get(userId);
    if (!target) throw refuse(sfuErrors.noSuchParticipant);
    if (target !== by && by.userId !== this.owner) throw refuse(sfuErrors.notOwner);
    if (nickname === "" || this.participants.some((p) => p !== target && p.nickname === nickname)) {
      throw refuse(sfuErrors.nicknameUnavailable);
    }
    const previousName = target.nickname;
    target.nickname = nickname;
    this.#log.info("SFU participant renamed", { userId, previousName, nickname });
    this.#bridge?.rename(this.name, nickname, target.tracks.values());
    for (const p of this.participants) {
      this.#send(p, "PARTICIPANT_RENAMED", {
        internalMessageId: p === by ? internalMessageId : "",
        userId,
        previousName,
        updatedName: nickname,
      });
    }
    this.#participantList();
  }

  /**
   * setRoomLock (owner only, the SDK's RoomExtended.setLock): joins are refused with "Room is
   * locked" while locked; ROOM_LOCKED `{value}` to everyone (the owner's answers its request).
   */
  setLock(by: SfuParticipant, locked: boolean, internalMessageId: string): void {
    if (by.userId !== this.owner) throw new SfuOperationFailed("ROOM_SET_LOCK", sfuErrors.notOwner);
    this.locked = locked;
    for (const p of this.participants) {
      this.#send(p, "ROOM_LOCKED", {
        internalMessageId: p === by ? internalMessageId : "",
        value: locked,
      });
    }
  }

  /** Mutes or unmutes a track of `participant`: MUTE_TRACKS to the others. */
  mute(participant: SfuParticipant, trackId: string, mute: boolean): void {
    const track = participant.trackById(trackId);
    if (!track) throw new SfuOperationFailed("MUTE_TRACKS", sfuErrors.noSuchTrack);
    track.info.mute = mute;
    if (!mute) track.requestKeyframe();
    for (const other of this.participants) {
      const mid = other.peer.midOf(track);
      if (mid === undefined) continue;
      this.#send(other, "MUTE_TRACKS", {
        info: this.#tracksInfo(participant, [{ track, mid }]),
      });
    }
  }

  /**
   * Caps the layer `participant` receives of a delivered track (changeQuality, `id` its source
   * track id or its mid there) at `quality` (a rid), and VP8 temporal layers at `tid`.
   */
  changeQuality(participant: SfuParticipant, id: string, quality: unknown, tid: unknown): void {
    const track = this.#layeredTrack(participant, id, "CHANGE_QUALITY");
    if (quality !== undefined && quality !== null) {
      if (typeof quality !== "string" || !track.layers.includes(quality)) {
        throw new SfuOperationFailed("CHANGE_QUALITY", sfuErrors.noSuchQuality);
      }
      participant.peer.configure(id, (s) => s.setQuality(quality));
    }
    if (typeof tid === "number") participant.peer.configure(id, (s) => s.setTemporal(tid));
  }

  /** Caps the layer of a delivered track at index `sid`, 0 the lowest (changeSid). */
  changeSid(participant: SfuParticipant, id: string, sid: number): void {
    this.#layeredTrack(participant, id, "CHANGE_SID");
    participant.peer.configure(id, (s) => s.setSpatial(sid));
  }

  /** Caps VP8 temporal layers of a delivered track at `tid` (changeTid). */
  changeTid(participant: SfuParticipant, id: string, tid: number): void {
    this.#layeredTrack(participant, id, "CHANGE_TID");
    participant.peer.configure(id, (s) => s.setTemporal(tid));
  }

  /** Stops or resumes forwarding a delivered track to `participant` (muteRemoteTrack). */
  muteRemote(participant: SfuParticipant, id: string, mute: boolean): void {
    const track = participant.peer.deliveredTrack(id);
    if (!track) throw new SfuOperationFailed("MUTE_REMOTE_TRACK", sfuErrors.noSuchTrack);
    participant.peer.configure(id, (s) => s.setMuted(mute));
  }

  /**
   * leaseTrack: the client's lease slot at `localMid` receives the track `remoteTrackId` of
   * another participant from now on; null empties the slot.
   */
  lease(participant: SfuParticipant, localMid: string, remoteTrackId: string | null): void {
    let track: PublishedTrack | undefined;
    if (remoteTrackId !== null) {
      for (const other of this.participants) {
        if (other !== participant) track ??= other.trackById(remoteTrackId);
      }
      if (!track) throw new SfuOperationFailed("LEASE_TRACK", sfuErrors.noSuchTrack);
    }
    if (!participant.peer.lease(localMid, track ?? null)) {
      throw new SfuOperationFailed("LEASE_TRACK", sfuErrors.noSuchSlot);
    }
  }

  /** A delivered track with simulcast layers, else SfuOperationFailed for `operation`. */
  #layeredTrack(participant: SfuParticipant, id: string, operation: string): PublishedTrack {
    const track = participant.peer.deliveredTrack(id);
    if (!track) throw new SfuOperationFailed(operation, sfuErrors.noSuchTrack);
    if (track.layers.length < 2) throw new SfuOperationFailed(operation, sfuErrors.noLayers);
    return track;
  }

  /**
   * Removes a participant: LEFT to it (answering `internalMessageId` when it asked) and to
   * the others, its tracks withdrawn from them, its peer closed. The last one ends the room.
   */
  async leave(participant: SfuParticipant, reason: string, internalMessageId = ""): Promise<void> {
    if (!this.#participants.delete(participant.userId)) return;
    this.#log.info("SFU participant left", { nickname: participant.nickname, reason });
    const tracks = [...participant.tracks.values()];
    participant.tracks.clear();
    this.#withdraw(participant, tracks);
    this.#bridge?.close(tracks);
    for (const track of tracks) track.close();
    this.#send(participant, "LEFT", {
      internalMessageId,
      userId: participant.userId,
      name: participant.nickname,
    });
    for (const other of this.participants) {
      this.#send(other, "LEFT", { userId: participant.userId, name: participant.nickname });
    }
    this.#participantList();
    await participant.peer.close();
    if (this.#participants.size === 0) this.#end();
    else if (this.owner === participant.userId) {
      // The room keeps an owner: the longest present participant.
      const next = this.participants[0];
      this.owner = next.userId;
      for (const p of this.participants) {
        this.#send(p, "ROLE_ASSIGNED", { userId: next.userId, name: next.nickname, role: "OWNER" });
      }
    }
  }

  /** Evicts `userId` (owner only): EVICTED to it, then it leaves. */
  async evict(by: SfuParticipant, userId: string): Promise<void> {
    if (by.userId !== this.owner) {
      throw new SfuOperationFailed("EVICT_PARTICIPANT", sfuErrors.notOwner);
    }
    const target = this.#participants.get(userId);
    if (!target) throw new SfuOperationFailed("EVICT_PARTICIPANT", sfuErrors.noSuchParticipant);
    this.#send(target, "EVICTED", { userId: target.userId, name: target.nickname });
    await this.leave(target, "evicted");
  }

  /** Ends the room (owner only): ENDED to everyone, every peer closed. */
  async destroy(by: SfuParticipant, pin: string): Promise<void> {
    if (pin !== this.pin) throw new SfuOperationFailed("ROOM_DESTROY", sfuErrors.wrongPin);
    if (by.userId !== this.owner) throw new SfuOperationFailed("ROOM_DESTROY", sfuErrors.notOwner);
    await this.close();
  }

  /** Ends the room: ENDED to everyone, every peer closed (server stop, destroyRoom). */
  async close(): Promise<void> {
    const participants = this.participants;
    this.#participants.clear();
    for (const p of participants) {
      this.#bridge?.close(p.tracks.values());
      for (const track of p.tracks.values()) track.close();
      this.#send(p, "ENDED", {});
    }
    await Promise.allSettled(participants.map((p) => p.peer.close()));
    this.#end();
  }

  /**
   * The room's statistics for `/sfu/stats`, measured from the RTP seen: a simulcast track is
   * a composite of its layers (`"<rid> send"`), and a received track names the layer it gets.
   */
  stats(): SfuParticipantStats[] {
    const nowMs = performance.now();
    return this.participants.map((p) => {
      const outgoingTracks = [...p.tracks.values()].map((track) => {
        const reports = track.report(nowMs);
        const layers = track.layers.map((rid, i) => ({
          name: `${rid} send`,
          stats: trackStats(track, reports[i]),
        }));
        const f = track.feedback;
        const feedbackStats = {
          receivedNACK: f.nacks,
          receivedPLI: f.plis,
          receivedFIR: f.firs,
          retransmitted: f.retransmitted,
          sentPLI: f.sentPlis,
          sentREMB: Math.round(p.peer.uplinkKbps * 1000),
        };
        if (track.layers[0] === null) return { ...layers[0].stats, feedbackStats };
        return {
          id: track.info.id,
          composite: true as const,
          tracks: Object.fromEntries(layers.map((l) => [l.name, l.stats])),
          feedbackStats,
        };
      });
      const incomingTracks: Record<string, string | null> = {};
      const incomingFeedbackStats: Record<string, DeliveryFeedback> = {};
      for (const [track, { layer, feedback }] of p.peer.incoming()) {
        incomingTracks[track.info.id] = layer === null ? null : `${layer} send`;
        incomingFeedbackStats[track.info.id] = { ...feedback };
      }
      return { nickName: p.nickname, outgoingTracks, incomingTracks, incomingFeedbackStats };
    });
  }

  #end(): void {
    if (this.#ended) return;
    this.#ended = true;
    clearInterval(this.#ticker);
    this.#onEmpty(this);
  }

  /** Makes the offered tracks published tracks and delivers them to the others. */
  #publish(participant: SfuParticipant, added: readonly OfferedTrack[]): void {
    for (const offered of added) {
      const { section, transceiver, codec } = offered;
      const id = section.trackId !== "" && !participant.trackById(section.trackId)
        ? section.trackId
        : crypto.randomUUID();
      const track = new PublishedTrack(
        {
          id,
          type: codec.kind === "audio" ? "AUDIO" : "VIDEO",
          contentType: section.content,
          quality: codec.kind === "video" ? section.rids : [],
          mute: false,
          creationTime: Date.now(),
        },
        codec,
        transceiver,
      );
      participant.tracks.set(section.mid, track);
      this.#bridge?.open(this.name, participant.nickname, track);
      for (const other of this.participants) {
        if (other !== participant) other.peer.deliver(track);
      }
      if (track.layers.length > 1 && !this.#ticker && !this.#ended) {
        this.#ticker = setInterval(() => this.#tick(), layerTickMs);
      }
    }
  }

  /** Re-chooses every subscriber's layers; TRACK_QUALITY_STATE where liveness changed. */
  #tick(): void {
    const nowMs = performance.now();
    for (const publisher of this.participants) {
      for (const track of publisher.tracks.values()) {
        if (!track.tick(nowMs)) continue;
        for (const other of this.participants) {
          const mid = other.peer.midOf(track);
          if (mid !== undefined) this.#qualityState(other, publisher, track, mid, nowMs);
        }
      }
    }
  }

  /**
   * TRACK_QUALITY_STATE to `receiver`: which layers of `track` (at `mid` in its peer) are
   * alive, with their picture size and temporal layers.
   */
  #qualityState(
    receiver: SfuParticipant,
    publisher: SfuParticipant,
    track: PublishedTrack,
    mid: string,
    nowMs: number,
  ): void {
    const reports = track.report(nowMs);
    const quality = track.layers.map((rid, i) => ({
      quality: rid,
      available: reports[i].alive,
      layersInfo: {
        spatialLayers: [{
          resolution: { width: reports[i].width, height: reports[i].height },
          sid: 0,
        }],
        temporalLayers: Array.from({ length: reports[i].temporalLayers }, (_, tid) => ({ tid })),
      },
    }));
    this.#send(receiver, "TRACK_QUALITY_STATE", {
      info: {
        nickName: publisher.nickname,
        userId: publisher.userId,
        tracks: [{ mid, quality }],
      },
    });
  }

  /** Withdraws tracks of `publisher` from everyone else: REMOVE_TRACKS where they were told. */
  #withdraw(publisher: SfuParticipant, tracks: readonly PublishedTrack[]): void {
    for (const other of this.participants) {
      if (other === publisher) continue;
      const removed: Delivery[] = [];
      for (const track of tracks) {
        const mid = other.peer.withdraw(track);
        if (mid !== undefined) removed.push({ track, mid });
      }
      if (removed.length > 0) {
        this.#send(other, "REMOVE_TRACKS", { info: this.#tracksInfo(publisher, removed) });
      }
    }
  }

  /** ADD_TRACKS to `receiver`, one event per publisher of the delivered tracks. */
  #announce(receiver: SfuParticipant, deliveries: readonly Delivery[]): void {
    const nowMs = performance.now();
    for (const publisher of this.participants) {
      const own = deliveries.filter((d) => [...publisher.tracks.values()].includes(d.track));
      if (own.length === 0) continue;
      this.#send(receiver, "ADD_TRACKS", { info: this.#tracksInfo(publisher, own) });
      // A new subscriber learns at once which layers are alive.
      for (const { track, mid } of own) {
        if (track.layers.length > 1) this.#qualityState(receiver, publisher, track, mid, nowMs);
      }
    }
  }

  #tracksInfo(publisher: SfuParticipant, deliveries: readonly Delivery[]) {
    return {
      userId: publisher.userId,
      nickName: publisher.nickname,
      waitingRoom: false,
      info: deliveries.map(({ track, mid }) => ({ ...track.info, mid })),
    };
  }

  /** PARTICIPANT_LIST to everyone: the nicknames present. */
  #participantList(): void {
    const participants = this.participants.map((p) => p.nickname);
    for (const p of this.participants) this.#send(p, "PARTICIPANT_LIST", { participants });
  }

  /**
   * A control channel message `{id, last?, payload}`: fragments are joined, the whole message
   * goes to the others as MESSAGE and the sender gets ACK with its id.
   */
  #chat(sender: SfuParticipant, text: string): void {
    let message: { id?: unknown; last?: unknown; payload?: unknown };
    try {
      message = JSON.parse(text);
    } catch {
      this.#log.debug("control message is not JSON", { nickname: sender.nickname });
      return;
    }
    if (typeof message?.id !== "string" || typeof message.payload !== "string") return;
    const parts = sender.fragments.get(message.id) ?? [];
    parts.push(message.payload);
    const size = parts.reduce((n, p) => n + p.length, 0);
    if (size > maxChatMessageChars) {
      sender.fragments.delete(message.id);
      return;
    }
    if (message.last === false) {
      sender.fragments.set(message.id, parts);
      return;
    }
    sender.fragments.delete(message.id);
    const whole = JSON.stringify({ id: message.id, last: true, payload: parts.join("") });
    const relayed = JSON.stringify({
      type: "MESSAGE",
      roomId: this.name,
      message: { nickName: sender.nickname, message: whole },
    });
    for (const other of this.participants) {
      if (other !== sender) other.peer.sendControl(relayed);
    }
    sender.peer.sendControl(
      JSON.stringify({ type: "ACK", roomId: this.name, internalMessageId: message.id }),
    );
  }

  #send(participant: SfuParticipant, type: string, fields: Record<string, unknown>): void {
    participant.link.send({ ...fields, type, roomId: this.name });
  }
}

/** The measured statistics of one layer of a track. */
function trackStats(track: PublishedTrack, m: LayerReport): SfuTrackStats {
  const base = {
    id: track.info.id,
    codec: track.codec.codec,
    bitrate: m.kbps * 1000,
    alive: m.alive,
    type: track.info.type,
  };
  return track.kind === "audio"
    ? {
      ...base,
      sampleRate: track.codec.params.clockRate,
      channels: track.codec.params.channels ?? 1,
    }
    : { ...base, width: m.width, height: m.height, fps: m.fps };
}
