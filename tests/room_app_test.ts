/**
 * The built-in Room API application (`roomApp`, §10.3) over the Web SDK protocol: the commands
 * the SDK's room module sends with sendData (join, leave, sendMessage), the OnDataEvent
 * payloads it expects back (STATE, JOINED, LEFT, PUBLISHED, UNPUBLISHED, MESSAGE), join
 * refusals with their reason, and rooms ending when empty or when a session ends.
 */
import assert from "node:assert/strict";
import { maxRoomsPerSession } from "../core/room_registry.ts";
import { startHookBackend } from "./helpers/hook_backend.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import { startPublishing, TestPublisher, waitFor, weriftSanitizers } from "./webrtc_helpers.ts";

/** What a room event's payload holds. */
interface RoomPayload {
  roomName: string;
  name: string;
  info: unknown;
}

/** Connects as the SDK's roomApi does: appKey roomApp, custom {login, token}. */
async function connectRoomApp(server: TestServer, login?: string): Promise<WcsClient> {
  const custom = login === undefined ? {} : { login, token: null };
  const { client } = await WcsClient.connect(
    server.wsUrl,
    sdkConnectionObject({ appKey: "roomApp", custom }),
  );
  return client;
}

/** Sends a room command as the SDK does and resolves with its DataStatusEvent. */
function command(client: WcsClient, name: string, options: unknown) {
  return client.sendData({ command: name, options });
}

/** The payload of the client's next OnDataEvent (APP_DATA). */
async function nextEvent(client: WcsClient): Promise<RoomPayload> {
  const [data] = await client.next("OnDataEvent") as [{ payload: RoomPayload; appKey: string }];
  assert.equal(data.appKey, "roomApp");
  return data.payload;
}

async function joinOk(client: WcsClient, room: string): Promise<RoomPayload> {
  const status = await command(client, "join", { name: room, record: false });
  assert.equal(status.status, "ACCEPTED", JSON.stringify(status));
  const state = await nextEvent(client);
  assert.equal(state.name, "STATE");
  assert.equal(state.roomName, room);
  return state;
}

Deno.test("roomApp: join, publish, messages, leave and session end", weriftSanitizers, async () => {
  const backend = await startHookBackend();
  const server = await startTestServer(testConfig({ hooks: { url: backend.url } }));
  const clients: WcsClient[] = [];
  const publisher = new TestPublisher("VP8");
  try {
    const alice = await connectRoomApp(server, "alice");
    const bob = await connectRoomApp(server, "bob");
    const carol = await connectRoomApp(server, "carol");
    clients.push(alice, bob, carol);

    // The first participant sees an empty room; the second sees the first; the first is told.
    assert.deepEqual((await joinOk(alice, "room1")).info, []);
    assert.deepEqual((await joinOk(bob, "room1")).info, ["alice"]);
    assert.deepEqual(await nextEvent(alice), { roomName: "room1", name: "JOINED", info: "bob" });

    // alice publishes as room.publish() does: `<room>-<login>-<4 hex>`, custom {name: room}.
    const streamName = "room1-alice-1f2e";
    const mediaSessionId = await startPublishing(publisher, alice, {
      name: streamName,
      custom: { name: "room1" },
    });
    assert.deepEqual(await nextEvent(bob), {
      roomName: "room1",
      name: "PUBLISHED",
      info: { login: "alice", name: streamName },
    });

    // A late joiner gets the stream in STATE ({login, name}) and bare logins for the others.
    assert.deepEqual((await joinOk(carol, "room1")).info, [
      { login: "alice", name: streamName },
      "bob",
    ]);
    for (const c of [alice, bob]) {
      assert.deepEqual(await nextEvent(c), { roomName: "room1", name: "JOINED", info: "carol" });
    }
    assert.deepEqual(server.services.rooms.list(), [{
      name: "room1",
      participants: [
        { login: "alice", streams: [streamName] },
        { login: "bob", streams: [] },
        { login: "carol", streams: [] },
      ],
    }]);

    // A message to one participant reaches only it; without `to` it reaches every other one.
    const toAlice = { roomConfig: { name: "room1" }, to: "alice", text: "hi alice" };
    assert.equal((await command(bob, "sendMessage", toAlice)).status, "ACCEPTED");
    const toAll = { roomConfig: { name: "room1" }, text: "hi all" };
    assert.equal((await command(bob, "sendMessage", toAll)).status, "ACCEPTED");
    const message = (text: string) => ({
      roomName: "room1",
      name: "MESSAGE",
      info: { from: "bob", text },
    });
    assert.deepEqual(await nextEvent(alice), message("hi alice"));
    assert.deepEqual(await nextEvent(alice), message("hi all"));
    assert.deepEqual(await nextEvent(carol), message("hi all"), "carol got alice's message");

    // Stopping the stream is told to the others.
    alice.send("unPublishStream", { mediaSessionId });
    for (const c of [bob, carol]) {
      assert.deepEqual(await nextEvent(c), {
        roomName: "room1",
        name: "UNPUBLISHED",
        info: { login: "alice", name: streamName },
      });
    }

    // leave is told to the others; carol's socket closing removes her as well.
    assert.equal((await command(bob, "leave", { name: "room1" })).status, "ACCEPTED");
    for (const c of [alice, carol]) {
      assert.deepEqual(await nextEvent(c), { roomName: "room1", name: "LEFT", info: "bob" });
    }
    await carol.close();
    assert.deepEqual(await nextEvent(alice), { roomName: "room1", name: "LEFT", info: "carol" });

    // The room ends with its last participant.
    assert.equal((await command(alice, "leave", { name: "room1" })).status, "ACCEPTED");
    assert.equal(server.services.rooms.size, 0);
    assert.deepEqual(server.services.rooms.list(), []);

    // The built-in app answered every command: no OnDataEvent reached the backend.
    assert.deepEqual(backend.calls.filter((c) => c.hook === "OnDataEvent"), []);
    // Only the events above came: none about a participant to itself.
    for (const c of [alice, bob]) {
      assert.ok(!c.messages().includes("fail"), JSON.stringify(c.frames));
    }
    assert.equal(alice.frames.filter((f) => f.message === "OnDataEvent").length, 7);
  } finally {
    await publisher.close();
    for (const c of clients) await c.close();
    await server.stop();
    await backend.close();
  }
});

Deno.test("roomApp: refusals carry their reason in DataStatusEvent info", async () => {
  const server = await startTestServer();
  const clients: WcsClient[] = [];
  try {
    const alice = await connectRoomApp(server, "alice");
    const alice2 = await connectRoomApp(server, "alice");
    const nobody = await connectRoomApp(server);
    clients.push(alice, alice2, nobody);
    await joinOk(alice, "room1");

    const refused = async (client: WcsClient, name: string, options: unknown, info: RegExp) => {
      const status = await command(client, name, options);
      assert.equal(status.status, "FAILED", JSON.stringify(status));
      assert.match(String(status.info), info);
    };
    await refused(alice2, "join", { name: "room1" }, /login alice is already in room room1/);
    await refused(alice, "join", { name: "room1" }, /login alice is already in room room1/);
    await refused(alice2, "join", { record: false }, /the room name is missing/);
    await refused(alice2, "join", { name: "" }, /the room name is missing/);
    await refused(nobody, "join", { name: "room1" }, /no login/);
    await refused(alice2, "leave", { name: "room1" }, /not in room room1/);
    const toNobody = { roomConfig: { name: "room1" }, to: "zed", text: "x" };
    await refused(alice, "sendMessage", toNobody, /participant zed is not in room room1/);
    const fromOutside = { roomConfig: { name: "room1" }, to: "alice", text: "x" };
    await refused(alice2, "sendMessage", fromOutside, /not in room room1/);
    await refused(alice, "sendMessage", { roomConfig: { name: "room1" } }, /text/);
    await refused(alice, "dance", {}, /command/);

    // One session's rooms are capped.
    for (let i = 1; i < maxRoomsPerSession; i++) await joinOk(alice, `many-${i}`);
    await refused(
      alice,
      "join",
      { name: "one-too-many" },
      new RegExp(`${maxRoomsPerSession} rooms at most`),
    );
    for (let i = 1; i < maxRoomsPerSession; i++) {
      assert.equal((await command(alice, "leave", { name: `many-${i}` })).status, "ACCEPTED");
    }

    // A refused join leaves the room as it was; the same login joins another room.
    assert.deepEqual(server.services.rooms.list().map((r) => r.participants.length), [1]);
    assert.deepEqual((await joinOk(alice2, "room2")).info, []);
    assert.equal(server.services.rooms.size, 2);

    // A session's end ends the rooms it was alone in.
    await alice.close();
    await alice2.close();
    await waitFor(() => server.services.rooms.size === 0, 5000, "rooms to end");
    assert.ok(!nobody.messages().includes("OnDataEvent"), "nobody was never in a room");
  } finally {
    for (const c of clients) await c.close();
    await server.stop();
  }
});

Deno.test(
  "roomApp: a participant's earlier stream is announced when it joins",
  weriftSanitizers,
  async () => {
    const server = await startTestServer();
    const clients: WcsClient[] = [];
    const publisher = new TestPublisher("VP8");
    try {
      const alice = await connectRoomApp(server, "alice");
      const bob = await connectRoomApp(server, "bob");
      clients.push(alice, bob);
      await joinOk(bob, "r");
      // Published before joining, named by the SDK's rule but without custom.name.
      const mediaSessionId = crypto.randomUUID();
      await publisher.publish(alice, { mediaSessionId, name: "r-alice-0a0b" });
      await joinOk(alice, "r");
      assert.deepEqual(await nextEvent(bob), { roomName: "r", name: "JOINED", info: "alice" });
      assert.deepEqual(await nextEvent(bob), {
        roomName: "r",
        name: "PUBLISHED",
        info: { login: "alice", name: "r-alice-0a0b" },
      });
      // The session's end stops its stream and leaves its rooms: bob is told both.
      await alice.close();
      assert.equal((await nextEvent(bob)).name, "UNPUBLISHED");
      assert.deepEqual(await nextEvent(bob), { roomName: "r", name: "LEFT", info: "alice" });
    } finally {
      await publisher.close();
      for (const c of clients) await c.close();
      await server.stop();
    }
  },
);

Deno.test("roomApp: apps.roomApp with a backend of its own takes the commands", async () => {
  const backend = await startHookBackend();
  const server = await startTestServer(
    testConfig({ apps: { roomApp: { hooksUrl: backend.url } } }),
  );
  const clients: WcsClient[] = [];
  try {
    const alice = await connectRoomApp(server, "alice");
    clients.push(alice);
    const join = { command: "join", options: { name: "room1" } };
    assert.equal((await alice.sendData(join)).status, "ACCEPTED");
    const hook = await backend.waitFor("OnDataEvent");
    assert.deepEqual(hook.body.payload, join);
    assert.equal(hook.body.appKey, "roomApp");
    assert.equal(server.services.rooms.size, 0, "the built-in app stayed out");
  } finally {
    for (const c of clients) await c.close();
    await server.stop();
    await backend.close();
  }
});
