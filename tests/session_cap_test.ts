/**
 * The `limits.sessions` cap as a Web SDK user meets it: the upgrade succeeds, the `connection`
 * message is refused with a FAILED ConnectionStatusEvent naming the cap, and the socket closes
 * with 1013 (try again later) and the same reason, which a browser's close event shows.
 */
import assert from "node:assert/strict";
import { startTestServer, testConfig } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import { waitFor } from "./webrtc_helpers.ts";

Deno.test("sessions cap: the third client gets fail and close 1013 with the reason; a freed slot serves a new client", async () => {
  const server = await startTestServer(testConfig({ limits: { sessions: 2 } }));
  const clients: WcsClient[] = [];
  try {
    for (let i = 0; i < 2; i++) clients.push((await WcsClient.connect(server.wsUrl)).client);
    const third = await WcsClient.open(server.wsUrl);
    clients.push(third);
    third.send("connection", sdkConnectionObject());
    const [fail] = await third.next("fail");
    assert.deepEqual(fail, {
      apiMethod: "ConnectionStatusEvent",
      status: "FAILED",
      info: "sessions limit of 2 reached",
    });
    assert.deepEqual(await third.closed, { code: 1013, reason: "sessions limit of 2 reached" });
    assert.ok(!third.messages().includes("getUserData"), "the refused client was established");
    const health = await (await fetch(`${server.restUrl}/health`)).json();
    assert.deepEqual(health.limits.sessions, { current: 2, max: 2, refused: 1 });

    await clients[0].close();
    const sessions = server.services.limits.sessions;
    await waitFor(() => sessions.current === 1, 5000, "the closed session's slot");
    const { client: fourth, userData } = await WcsClient.connect(server.wsUrl);
    clients.push(fourth);
    assert.equal(userData.status, "ESTABLISHED");
    assert.deepEqual(sessions.toJSON(), { current: 2, max: 2, refused: 1 });
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
  }
});
