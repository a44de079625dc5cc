/**
 * The rooms of the built-in Room API application (`roomApp`): participants by login, each on
 * one client session, and what each one must be told when another joins, leaves, publishes a
 * stream, stops one, or sends a message. A participant's streams are the published streams of
 * its session that belong to the room (see `isRoomStream`), read from the stream registry, which
 * is watched while any room exists. A room ends when its last participant leaves.
 */
import {
  BadRequestError,
  ConflictError,
  NotFoundError,
  ServiceUnavailableError,
} from "./errors.ts";
import type { RegisteredStream, StreamRegistry } from "./stream_registry.ts";

/** Rooms one session may be in at once; a join beyond is refused. */
export const maxRoomsPerSession = 64;

/** What a participant is told about the others of a room. */
export type RoomEvent =
  | { readonly kind: "joined" | "left"; readonly login: string }
  | {
    readonly kind: "published" | "unpublished";
    readonly login: string;
    readonly streamName: string;
  }
  | { readonly kind: "message"; readonly from: string; readonly text: unknown };

/** A participant of a room: its login, its session, and how it is told of the others. */
export interface RoomMember {
  readonly login: string;
  readonly sessionId: string;
  /** Tells the participant of an event in `room`; must not throw. */
  tell(room: string, event: RoomEvent): void;
}

/** Another participant of a room as a joining one sees it: login and published stream names. */
export interface RoomPeer {
  readonly login: string;
  readonly streams: string[];
}

/** A room and its participants, as `list()` gives it. */
export interface RoomSummary {
  readonly name: string;
  readonly participants: RoomPeer[];
}

/**
 * True when the published stream `record` of a participant `login` belongs to `room`: the SDK
 * publishes room streams with `custom.name` set to the room (and names them
 * `<room>-<login>-<4 hex>[-<suffix>]`, the rule for streams published without that custom field).
 */
export function isRoomStream(
  record: { name: string; custom: Record<string, unknown> },
  room: string,
  login: string,
): boolean {
  const tagged = record.custom.name;
  if (typeof tagged === "string") return tagged === room;
  return record.name.startsWith(`${room}-${login}-`);
}

/** Rooms by name, participants by login, and the rooms of each session. */
export class RoomRegistry {
  /** room → login → member. */
  #rooms = new Map<string, Map<string, RoomMember>>();
  /** sessionId → room → member. */
  #bySession = new Map<string, Map<string, RoomMember>>();
  #streams: StreamRegistry;
  #unwatch?: () => void;

  constructor(streams: StreamRegistry) {
    this.#streams = streams;
  }

  /**
   * Adds `member` to `room` (made on the first join) and tells the others it joined, then of
   * each stream it already publishes there. Returns the others as the member must see them.
   * An empty room name or login is a BadRequestError, a login already in the room a
   * ConflictError, a session in maxRoomsPerSession rooms a ServiceUnavailableError.
   */
  join(room: string, member: RoomMember): RoomPeer[] {
    if (room === "") throw new BadRequestError("options.name", "the room name is missing");
    if (member.login === "") {
      throw new BadRequestError("custom.login", "the session has no login (custom.login)");
    }
    const members = this.#rooms.get(room);
    if (members?.has(member.login)) {
      throw new ConflictError(`login ${member.login} is already in room ${room}`);
    }
    const joined = this.#bySession.get(member.sessionId) ?? new Map<string, RoomMember>();
    if (joined.size >= maxRoomsPerSession) {
      throw new ServiceUnavailableError(`a session may be in ${maxRoomsPerSession} rooms at most`);
    }
    const others = [...members?.values() ?? []];
    const peers = others.map((o) => ({ login: o.login, streams: this.#streamsOf(room, o) }));
    if (members) members.set(member.login, member);
    else this.#rooms.set(room, new Map([[member.login, member]]));
    joined.set(room, member);
    this.#bySession.set(member.sessionId, joined);
    this.#unwatch ??= this.#streams.watch((event, stream) => this.#onStream(event, stream));
    this.#tellOthers(room, member, { kind: "joined", login: member.login });
    for (const streamName of this.#streamsOf(room, member)) {
      this.#tellOthers(room, member, { kind: "published", login: member.login, streamName });
    }
    return peers;
  }

  /** Removes the session's participant from `room` and tells the others; NotFoundError if none. */
  leave(room: string, sessionId: string): void {
    const member = this.#bySession.get(sessionId)?.get(room);
    if (!member) throw new NotFoundError(`the session is not in room ${room}`);
    this.#remove(room, member);
  }

  /** Removes the session from every room it is in (its end), telling the others. */
  leaveAll(sessionId: string): void {
    for (const [room, member] of this.#bySession.get(sessionId) ?? []) this.#remove(room, member);
  }

  /**
   * Relays `text` from the session's participant of `room` to the participant `to`, or to every
   * other participant when `to` is undefined. NotFoundError when the sender or `to` is not in
   * the room.
   */
  message(room: string, sessionId: string, to: string | undefined, text: unknown): void {
    const sender = this.#bySession.get(sessionId)?.get(room);
    if (!sender) throw new NotFoundError(`the session is not in room ${room}`);
    const event: RoomEvent = { kind: "message", from: sender.login, text };
    if (to === undefined) return this.#tellOthers(room, sender, event);
    const recipient = this.#rooms.get(room)?.get(to);
    if (!recipient) throw new NotFoundError(`participant ${to} is not in room ${room}`);
    recipient.tell(room, event);
  }

  /** Every room with its participants and their streams, by name. */
  list(): RoomSummary[] {
    return [...this.#rooms].map(([name, members]) => ({
      name,
      participants: [...members.values()].map((m) => ({
        login: m.login,
        streams: this.#streamsOf(name, m),
      })),
    }));
  }

  /** Number of rooms. */
  get size(): number {
    return this.#rooms.size;
  }

  #remove(room: string, member: RoomMember): void {
    const members = this.#rooms.get(room);
    if (members?.get(member.login) !== member) return;
    members.delete(member.login);
    const joined = this.#bySession.get(member.sessionId);
    joined?.delete(room);
    if (joined?.size === 0) this.#bySession.delete(member.sessionId);
    if (members.size === 0) this.#rooms.delete(room);
    else this.#tellOthers(room, member, { kind: "left", login: member.login });
    if (this.#rooms.size === 0) {
      this.#unwatch?.();
      this.#unwatch = undefined;
    }
  }

  /** Names of the streams the member's session publishes in `room`. */
  #streamsOf(room: string, member: RoomMember): string[] {
    const names: string[] = [];
    for (const stream of this.#streams.list()) {
      if (!stream.published) continue;
      const record = stream.record();
      if (record.sessionId === member.sessionId && isRoomStream(record, room, member.login)) {
        names.push(record.name);
      }
    }
    return names;
  }

  #onStream(event: "published" | "unpublished", stream: RegisteredStream): void {
    const record = stream.record();
    const joined = this.#bySession.get(record.sessionId);
    if (!joined) return;
    for (const [room, member] of joined) {
      if (!isRoomStream(record, room, member.login)) continue;
      this.#tellOthers(room, member, { kind: event, login: member.login, streamName: record.name });
    }
  }

  #tellOthers(room: string, from: RoomMember, event: RoomEvent): void {
    for (const member of this.#rooms.get(room)?.values() ?? []) {
      if (member !== from) member.tell(room, event);
    }
  }
}
