/**
 * The SFU rooms of the server by name: a room is created by the first `joinRoom` naming it
 * (with that join's pin) and ends when its last participant leaves or its owner destroys it.
 */
import type { Logger } from "../log.ts";
import { NotFoundError } from "../errors.ts";
import type { JoinRequest, SfuParticipantStats } from "./room.ts";
import { SfuRoom } from "./room.ts";
import type { SfuParticipant } from "./participant.ts";
import type { SfuBridge } from "./bridge.ts";
import { sfuErrors, SfuOperationFailed } from "./operation_failed.ts";
import type { EngineSendPaths } from "../../media/protocols/webrtc/engine_send_path.ts";

/** How many rooms, and participants in one room, the server takes. */
export interface SfuCaps {
  readonly maxRooms: number;
  readonly maxParticipantsPerRoom: number;
  /** The bitrate publishers are told (REMB) they may send, in kbit/s; absent sends none. */
  readonly maxPublishBitrateKbps?: number;
}

const unlimited: SfuCaps = { maxRooms: Infinity, maxParticipantsPerRoom: Infinity };

/** SFU rooms by name. */
export class SfuRoomRegistry {
  readonly #rooms = new Map<string, SfuRoom>();
  readonly #log: Logger;
  readonly #bridge?: SfuBridge;
  readonly #caps: SfuCaps;
  readonly #sendPaths?: EngineSendPaths;

  /**
   * `bridge`: publishes the rooms' tracks as streams too (config `sfu.bridge`); `caps`: the
   * most rooms and participants per room (config `sfu`).
   */
  /** `sendPaths`: the server's send engine, which delivered tracks go out through when it runs. */
  constructor(
    log: Logger,
    bridge?: SfuBridge,
    caps: SfuCaps = unlimited,
    sendPaths?: EngineSendPaths,
  ) {
    this.#log = log.child({ component: "sfu" });
    this.#bridge = bridge;
    this.#caps = caps;
    this.#sendPaths = sendPaths;
  }

  /** Joins room `name`, creating it with the request's pin when it does not exist. */
  join(name: string, request: JoinRequest): Promise<SfuParticipant> {
    let room = this.#rooms.get(name);
    if (!room) {
      if (this.#rooms.size >= this.#caps.maxRooms) {
        return Promise.reject(new SfuOperationFailed("ROOM_JOIN", sfuErrors.roomCap));
      }
      room = new SfuRoom(
        name,
        request.pin,
        this.#log,
        (ended) => {
          if (this.#rooms.get(ended.name) === ended) this.#rooms.delete(ended.name);
          this.#log.info("SFU room ended", { room: ended.name });
        },
        {
          bridge: this.#bridge,
          maxParticipants: this.#caps.maxParticipantsPerRoom,
          maxPublishKbps: this.#caps.maxPublishBitrateKbps,
          sendPaths: this.#sendPaths,
        },
      );
      this.#rooms.set(name, room);
      this.#log.info("SFU room created", { room: name });
    }
    const created = room;
    return room.join(request).catch((err) => {
      // A room its first join failed to enter is not left behind.
      if (created.participants.length === 0 && this.#rooms.get(name) === created) {
        this.#rooms.delete(name);
      }
      throw err;
    });
  }

  /** The room `name`, if it exists. */
  get(name: string): SfuRoom | undefined {
    return this.#rooms.get(name);
  }

  /** Every room. */
  list(): SfuRoom[] {
    return [...this.#rooms.values()];
  }

  /** `/sfu/stats`: the participants of room `name`; NotFoundError for an unknown room. */
  stats(name: string): { roomName: string; participants: SfuParticipantStats[] } {
    const room = this.#rooms.get(name);
    if (!room) throw new NotFoundError(`SFU room ${JSON.stringify(name)} not found`);
    return { roomName: name, participants: room.stats() };
  }

  /** Removes the session's participants from their rooms (its connection ended). */
  async leaveSession(sessionId: string, reason: string): Promise<void> {
    const leaving = this.list().flatMap((room) => {
      const participant = room.participantOf(sessionId);
      return participant ? [room.leave(participant, reason)] : [];
    });
    await Promise.allSettled(leaving);
  }

  /** Ends every room (server stop). */
  async closeAll(): Promise<void> {
    await Promise.allSettled(this.list().map((room) => room.close()));
  }
}
