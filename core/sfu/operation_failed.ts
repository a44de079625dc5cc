/**
 * A refused SFU request. The SFU SDK receives it as `OPERATION_FAILED {operation, error}`, and
 * matches `error` against WCS's strings (room.ts of the SDK rejects a join's promise with it).
 */
import { MediaServerError } from "../errors.ts";

/** WCS's error strings the SDK knows. */
export const sfuErrors = {
  wrongPin: "Wrong pin",
  roomLocked: "Room is locked",
  nicknameUnavailable: "Nickname unavailable",
  alreadyJoined: "User already joined",
  notFound: "Room not found",
  notOwner: "Not an owner of the room",
  notJoined: "Not a participant of the room",
  noSuchParticipant: "Participant not found",
  noSuchTrack: "Track not found",
  noSuchQuality: "Quality not found",
  noLayers: "Track has no quality layers",
  noSuchSlot: "No free transceiver for the track",
  tidMismatch: "Tid mismatch",
  roomCap: "Too many rooms",
  participantCap: "Room is full",
} as const;

/** An SFU operation refused with WCS's `error` string; `operation` is the SDK's Operations name. */
export class SfuOperationFailed extends MediaServerError {
  readonly operation: string;

  constructor(operation: string, error: string) {
    super(409, "conflict", error);
    this.operation = operation;
  }
}
