/**
 * Process-wide running totals of the media plane, by provider (what streams received) and by
 * reader kind (what readers took, dropped, and how many are attached). Streams and readers
 * add to the tally object of their label as frames pass, one addition per frame, so the
 * metrics endpoint reads totals that survive the streams and readers themselves.
 */

/** What consumes a stream, a label of reader totals. */
export type ReaderKind =
  | "webrtc"
  | "rtmp"
  | "rtsp"
  | "srt"
  | "mse"
  | "hls"
  | "recorder"
  | "push"
  | "transcoder"
  | "snapshot"
  | "relay"
  | "other";

/** Totals of the streams of one provider. */
export interface ProviderTally {
  /** Media bytes the provider pushed (frame payloads, no container or packet headers). */
  receivedBytes: number;
  receivedFrames: number;
}

/** Totals of the readers of one kind. */
export interface ReaderTally {
  /** Readers attached now. */
  attached: number;
  /** Media bytes and frames the readers took from their queues. */
  deliveredBytes: number;
  deliveredFrames: number;
  /** Frames lost to a full queue or skipped while waiting for a keyframe. */
  droppedFrames: number;
}

const providers = new Map<string, ProviderTally>();
const readers = new Map<ReaderKind, ReaderTally>();

/** The tally of `provider`, created at its first stream. */
export function providerTally(provider: string): ProviderTally {
  let tally = providers.get(provider);
  if (!tally) {
    tally = { receivedBytes: 0, receivedFrames: 0 };
    providers.set(provider, tally);
  }
  return tally;
}

/** The tally of readers of `kind`, created at its first reader. */
export function readerTally(kind: ReaderKind): ReaderTally {
  let tally = readers.get(kind);
  if (!tally) {
    tally = { attached: 0, deliveredBytes: 0, deliveredFrames: 0, droppedFrames: 0 };
    readers.set(kind, tally);
  }
  return tally;
}

/** Every provider tally so far. */
export function providerTallies(): ReadonlyMap<string, Readonly<ProviderTally>> {
  return providers;
}

/** Every reader tally so far. */
export function readerTallies(): ReadonlyMap<ReaderKind, Readonly<ReaderTally>> {
  return readers;
}
