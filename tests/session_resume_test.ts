/**
 * Session resumption (`keepAlive` + `authToken`): the server side cuts a keepAlive session's
 * TCP connection (`ss -K`, as a lost network looks to the server), the client reconnects
 * with its authToken and gets the same session back, its streams and the messages sent
 * meanwhile included; past `ws.resumeWindowSec` the session and its streams end; an unknown
 * token gets a new session.
 */
import assert from "node:assert/strict";
import { cutServerConnections } from "./helpers/connection_cut.ts";
import { maxPendingBytes } from "../signaling/session.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import {
  nextStatus,
  startPlaying,
  startPublishing,
  TestPlayer,
  TestPublisher,
  waitFor,
  weriftSanitizers,
} from "./webrtc_helpers.ts";

async function post(server: TestServer, path: string, body?: unknown) {
  const res = await server.post(path, body);
  const text = await res.text();
  return { status: res.status, body: text === "" ? undefined : JSON.parse(text) };
}

async function sessionIds(server: TestServer): Promise<string[]> {
  const { body } = await post(server, "/connection/find_all");
  return (body as { sessionId: string }[]).map((s) => s.sessionId);
}

async function streamNames(server: TestServer): Promise<string[]> {
  const { body } = await post(server, "/stream/find_all");
  return (body as { name: string }[]).map((s) => s.name);
}

Deno.test({
  name: "resume: a keepAlive session cut by the server comes back with its streams and messages",
  ...weriftSanitizers,
  fn: async () => {
    const server = await startTestServer(testConfig({ ws: { resumeWindowSec: 30 } }));
    const clients: WcsClient[] = [];
    const publisher = new TestPublisher("VP8");
    const player = new TestPlayer("VP8");
    const ended = new TestPlayer("VP8");
    try {
      const first = await WcsClient.connect(server.wsUrl, sdkConnectionObject({ keepAlive: true }));
      clients.push(first.client);
      const { sessionId, authToken } = first.userData as { sessionId: string; authToken: string };

      const pubId = await startPublishing(publisher, first.client, { name: "kept" });
      const playId = await startPlaying(player, first.client, { name: "kept" });
      const endedId = await startPlaying(ended, first.client, { name: "kept" });

      await cutServerConnections(server.wsPort);
      // A reset, not a closing handshake (Deno reports code 0 or 1006 for it).
      assert.ok(![1000, 1001].includes((await first.client.closed).code));
      // Detached: still listed, and a message for it is kept.
      assert.deepEqual(await sessionIds(server), [sessionId]);
      const sent = await post(server, "/data/send", { sessionId, payload: { while: "away" } });
      assert.equal(sent.status, 200);
      const stopped = await post(server, "/stream/terminate", { mediaSessionId: endedId });
      assert.equal(stopped.status, 200);
      const receivedBefore = player.received.video;

      const again = await WcsClient.connect(
        server.wsUrl,
        sdkConnectionObject({ keepAlive: true, authToken }),
      );
      clients.push(again.client);
      assert.equal(again.userData.sessionId, sessionId);
      assert.equal(again.userData.authToken, authToken);
      assert.equal(again.userData.status, "ESTABLISHED");
      const [event] = await again.client.next("OnDataEvent") as [Record<string, unknown>];
      assert.deepEqual(event.payload, { while: "away" });
      assert.equal(event.sessionId, sessionId);
      const status = await nextStatus(again.client, endedId);
      assert.deepEqual([status.status, status.info], ["STOPPED", "Stopped by rest /terminate"]);

      assert.deepEqual(await sessionIds(server), [sessionId]);
      const streams = (await post(server, "/stream/find_all")).body as Record<string, unknown>[];
      assert.deepEqual(streams.map((s) => [s.name, s.status, s.sessionId]), [
        ["kept", "PUBLISHING", sessionId],
        ["kept", "PLAYING", sessionId],
      ]);
      // The player's peer never depended on the socket: media kept flowing to it.
      await waitFor(() => player.received.video > receivedBefore + 20, 5000, "video after resume");

      // The new socket controls the session's streams and gets their statuses.
      again.client.send("stopStream", { mediaSessionId: playId, name: "kept", published: false });
      assert.equal((await nextStatus(again.client, playId)).status, "STOPPED");
      again.client.send("unPublishStream", {
        mediaSessionId: pubId,
        name: "kept",
        published: true,
      });
      assert.equal((await nextStatus(again.client, pubId)).status, "UNPUBLISHED");
      assert.deepEqual(first.client.messages().filter((m) => m === "OnDataEvent"), []);
    } finally {
      await publisher.close();
      await player.close();
      await ended.close();
      await Promise.all(clients.map((c) => c.close()));
      await server.stop();
    }
  },
});

Deno.test({
  name: "resume: past the window the session and its streams end; its token then opens a new one",
  ...weriftSanitizers,
  fn: async () => {
    const server = await startTestServer(testConfig({ ws: { resumeWindowSec: 1 } }));
    const clients: WcsClient[] = [];
    const publisher = new TestPublisher("VP8");
    try {
      const first = await WcsClient.connect(server.wsUrl, sdkConnectionObject({ keepAlive: true }));
      clients.push(first.client);
      const { sessionId, authToken } = first.userData as { sessionId: string; authToken: string };
      await startPublishing(publisher, first.client, { name: "gone" });

      await cutServerConnections(server.wsPort);
      await first.client.closed;
      assert.deepEqual(await sessionIds(server), [sessionId]);
      assert.deepEqual(await streamNames(server), ["gone"]);
      const deadline = Date.now() + 5000;
      while ((await sessionIds(server)).length > 0) {
        assert.ok(Date.now() < deadline, "the session outlived its window");
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.deepEqual(await streamNames(server), []);
      assert.equal(
        (await post(server, "/data/send", { sessionId, payload: 1 })).status,
        404,
      );

      const late = await WcsClient.connect(
        server.wsUrl,
        sdkConnectionObject({ keepAlive: true, authToken }),
      );
      clients.push(late.client);
      assert.notEqual(late.userData.sessionId, sessionId);
      assert.notEqual(late.userData.authToken, authToken);
      assert.deepEqual(await sessionIds(server), [late.userData.sessionId]);
    } finally {
      await publisher.close();
      await Promise.all(clients.map((c) => c.close()));
      await server.stop();
    }
  },
});

Deno.test("resume: only keepAlive sessions are kept, and REST terminate ends a kept one", async () => {
  const server = await startTestServer(testConfig({ ws: { resumeWindowSec: 60 } }));
  const clients: WcsClient[] = [];
  try {
    const plain = await WcsClient.connect(server.wsUrl);
    clients.push(plain.client);
    await cutServerConnections(server.wsPort);
    await plain.client.closed;
    const deadline = Date.now() + 3000;
    while ((await sessionIds(server)).length > 0) {
      assert.ok(Date.now() < deadline, "a session without keepAlive outlived its socket");
      await new Promise((r) => setTimeout(r, 50));
    }
    // Its token does not bring it back.
    const other = await WcsClient.connect(
      server.wsUrl,
      sdkConnectionObject({ keepAlive: true, authToken: plain.userData.authToken }),
    );
    clients.push(other.client);
    assert.notEqual(other.userData.sessionId, plain.userData.sessionId);

    await cutServerConnections(server.wsPort);
    await other.client.closed;
    const kept = other.userData.sessionId as string;
    assert.deepEqual(await sessionIds(server), [kept]);
    const terminated = await post(server, "/connection/terminate", { sessionId: kept });
    assert.equal(terminated.status, 200);
    assert.deepEqual(await sessionIds(server), []);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
  }
});

Deno.test("resume: a reconnect while the old socket is still open takes the session over", async () => {
  const server = await startTestServer(testConfig());
  const clients: WcsClient[] = [];
  try {
    const first = await WcsClient.connect(
      server.wsUrl,
      // The SFU SDK's first connection carries a null authToken.
      sdkConnectionObject({ keepAlive: true, authToken: null }),
    );
    clients.push(first.client);
    const again = await WcsClient.connect(
      server.wsUrl,
      sdkConnectionObject({ keepAlive: true, authToken: first.userData.authToken }),
    );
    clients.push(again.client);
    assert.equal(again.userData.sessionId, first.userData.sessionId);
    const closed = await first.client.closed;
    assert.deepEqual([closed.code, closed.reason], [1000, "session resumed on another connection"]);
    assert.deepEqual(await sessionIds(server), [first.userData.sessionId]);
    const status = await again.client.sendData({ hello: 1 });
    assert.equal(status.status, "ACCEPTED");
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
  }
});

Deno.test("resume: a keepAlive session that stops answering pings is kept; a stop ends it", async () => {
  const server = await startTestServer(
    testConfig({ keepAlive: { intervalMs: 100, probes: 2 }, ws: { resumeWindowSec: 60 } }),
  );
  const clients: WcsClient[] = [];
  try {
    const silent = await WcsClient.connect(
      server.wsUrl,
      sdkConnectionObject({ keepAlive: true }),
      { autoPong: false },
    );
    clients.push(silent.client);
    const closed = await silent.client.closed;
    assert.match(closed.reason, /^no pong to 2 pings$/);
    assert.deepEqual(await sessionIds(server), [silent.userData.sessionId]);
    const again = await WcsClient.connect(
      server.wsUrl,
      sdkConnectionObject({ keepAlive: true, authToken: silent.userData.authToken }),
      { autoPong: false },
    );
    clients.push(again.client);
    assert.equal(again.userData.sessionId, silent.userData.sessionId);
    // Silent again: detached again, then the server's stop ends it (its window timer too).
    await again.client.closed;
    assert.deepEqual(await sessionIds(server), [silent.userData.sessionId]);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
  }
  assert.equal(server.services.sessions.size, 0);
});

Deno.test("resume: a detached session ends once its kept messages pass maxPendingBytes", async () => {
  const server = await startTestServer(testConfig({ ws: { resumeWindowSec: 60 } }));
  const clients: WcsClient[] = [];
  try {
    const first = await WcsClient.connect(server.wsUrl, sdkConnectionObject({ keepAlive: true }));
    clients.push(first.client);
    const sessionId = first.userData.sessionId as string;
    await cutServerConnections(server.wsPort);
    await first.client.closed;
    const payload = "x".repeat(900 * 1024);
    const statuses: number[] = [];
    for (let sent = 0; sent <= maxPendingBytes + payload.length; sent += payload.length) {
      statuses.push((await post(server, "/data/send", { sessionId, payload })).status);
    }
    // Accepted while kept; once over the bound the session is gone.
    assert.equal(statuses[0], 200);
    assert.equal(statuses.at(-1), 404);
    assert.deepEqual(await sessionIds(server), []);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
  }
});
