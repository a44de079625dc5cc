import assert from "node:assert/strict";
import { bridgeStreamName } from "./bridge_stream.ts";
import type { PublishedTrack } from "./published_track.ts";

/** A track as far as its bridge name reads it. */
function track(type: "AUDIO" | "VIDEO", contentType: string): PublishedTrack {
  return { info: { type, contentType } } as PublishedTrack;
}

Deno.test("bridge stream names follow WCS: {room}-{nickname}-VIDEO, -VIDEO-screen, -AUDIO", () => {
  assert.equal(bridgeStreamName("r1", "alice", track("VIDEO", "camera")), "r1-alice-VIDEO");
  assert.equal(bridgeStreamName("r1", "alice", track("VIDEO", "")), "r1-alice-VIDEO");
  assert.equal(bridgeStreamName("r1", "alice", track("VIDEO", "screen")), "r1-alice-VIDEO-screen");
  assert.equal(bridgeStreamName("r1", "alice", track("AUDIO", "mic")), "r1-alice-AUDIO");
});
