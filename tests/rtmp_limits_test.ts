/**
 * The RTMP listener under load: connection caps refuse at once and count, slots come back,
 * idle and half-open connections are cut, and at the open-file limit the server keeps
 * running and serves RTMP again once the load ends.
 */
import assert from "node:assert/strict";
import { createServices } from "../core/services.ts";
import { silentLogger } from "../core/log.ts";
import { openRtmpClient } from "../media/protocols/rtmp/client.ts";
import { RtmpConn } from "../media/protocols/rtmp/conn.ts";
import { decodeAmf0All } from "../media/protocols/rtmp/amf0.ts";
import { buildCommand } from "../media/protocols/rtmp/command.ts";
import { buildHandshakeHello } from "../media/protocols/rtmp/handshake.ts";
import { ChunkStreamId, MessageType } from "../media/protocols/rtmp/message.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import { startRtmpServer } from "../media/providers/rtmp_server.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { waitForHttp } from "./helpers/process.ts";
import { freePortsEnv } from "./helpers/server_process.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";

/** The RTMP listener's figures in /health. */
interface RtmpFigures {
  connections: { current: number; max: number; refused: number };
  connectionsPerAddress: { keys: number; maxPerKey: number; refused: number };
}

async function rtmpFigures(restUrl: string): Promise<RtmpFigures> {
  const res = await fetch(`${restUrl}/health`);
  assert.equal(res.status, 200);
  const body = await res.json();
  return body.limits.listeners.rtmp;
}

/** A client past the handshake, holding its connection. */
async function handshaken(port: number): Promise<RtmpConn> {
  const conn = new RtmpConn(await Deno.connect({ hostname: "127.0.0.1", port }));
  await conn.connectHandshake();
  return conn;
}

/** Resolves true when the server hangs up on `conn` (read ends or fails) within `ms`. */
async function hungUp(conn: Deno.Conn, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<false>((r) => timer = setTimeout(() => r(false), ms));
  const read = conn.read(new Uint8Array(4096)).then((n) => n === null, () => true);
  try {
    return await Promise.race([read, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A client publishes `name` (no media) and leaves: the listener admits clients. */
async function publishesAndLeaves(port: number, name: string): Promise<void> {
  const client = await openRtmpClient(
    parseRtmpUrl(`rtmp://127.0.0.1:${port}/live/${name}`, "uri"),
    "publish",
  );
  client.conn.close();
}

async function noConnectionsHeld(server: TestServer): Promise<RtmpFigures> {
  return await waitFor("rtmp slots back to 0", async () => {
    const figures = await rtmpFigures(server.restUrl);
    return figures.connections.current === 0 && figures.connectionsPerAddress.keys === 0
      ? figures
      : undefined;
  });
}

Deno.test("connections beyond limits.connectionsPerListener are closed at once and counted; slots come back", async () => {
  const server = await startTestServer(testConfig({ limits: { connectionsPerListener: 3 } }));
  const held: RtmpConn[] = [];
  try {
    for (let i = 0; i < 3; i++) held.push(await handshaken(server.rtmpPort));
    const extra = await Deno.connect({ hostname: "127.0.0.1", port: server.rtmpPort });
    try {
      await extra.write(buildHandshakeHello(0)).catch(() => {});
      assert.equal(await hungUp(extra, 2000), true, "the 4th connection stayed open");
    } finally {
      extra.close();
    }
    assert.deepEqual((await rtmpFigures(server.restUrl)).connections, {
      current: 3,
      max: 3,
      refused: 1,
    });
    for (const conn of held.splice(0)) conn.close();
    const figures = await noConnectionsHeld(server);
    assert.equal(figures.connections.refused, 1);
    await publishesAndLeaves(server.rtmpPort, "after");
  } finally {
    for (const conn of held) conn.close();
    await server.stop();
  }
});

Deno.test("connections beyond limits.connectionsPerAddress from one address are refused", async () => {
  const server = await startTestServer(testConfig({ limits: { connectionsPerAddress: 2 } }));
  const held: RtmpConn[] = [];
  try {
    for (let i = 0; i < 2; i++) held.push(await handshaken(server.rtmpPort));
    await assert.rejects(() => handshaken(server.rtmpPort));
    const figures = await rtmpFigures(server.restUrl);
    assert.deepEqual(figures.connectionsPerAddress, { keys: 1, maxPerKey: 2, refused: 1 });
    assert.equal(figures.connections.current, 2);
    for (const conn of held.splice(0)) conn.close();
    await noConnectionsHeld(server);
    await publishesAndLeaves(server.rtmpPort, "again");
  } finally {
    for (const conn of held) conn.close();
    await server.stop();
  }
});

Deno.test("half-open handshakes and clients that never publish nor play are cut after the setup timeout", async () => {
  const config = testConfig();
  const services = createServices(config, silentLogger);
  const setupTimeoutMs = 300;
  const rtmp = startRtmpServer(services, { setupTimeoutMs });
  const conns: Deno.Conn[] = [];
  try {
    const connect = () => Deno.connect({ hostname: "127.0.0.1", port: rtmp.port });
    // Nothing sent; C0 and half of C1; a whole handshake and connect, then nothing.
    const silent = await connect();
    const halfOpen = await connect();
    conns.push(silent, halfOpen);
    await halfOpen.write(buildHandshakeHello(0).subarray(0, 700));
    const connected = await handshaken(rtmp.port);
    await connected.send(ChunkStreamId.command, {
      type: MessageType.commandAmf0,
      streamId: 0,
      timestamp: 0,
      payload: buildCommand("connect", 1, { app: "live", tcUrl: "rtmp://127.0.0.1/live" }),
    });
    assert.equal(rtmp.limitsSnapshot().connections.current, 3);
    const started = performance.now();
    assert.equal(await hungUp(silent, 3000), true);
    assert.equal(await hungUp(halfOpen, 3000), true);
    const answers: unknown[] = [];
    for await (const message of connected.messages()) {
      if (message.type === MessageType.commandAmf0) answers.push(decodeAmf0All(message.payload)[0]);
    }
    assert.deepEqual(answers, ["_result"]);
    const tookMs = performance.now() - started;
    assert.ok(tookMs < setupTimeoutMs + 1500, `cut after ${Math.round(tookMs)} ms`);
    await waitFor(
      "slots back",
      () => rtmp.limitsSnapshot().connections.current === 0 ? true : undefined,
    );
  } finally {
    for (const conn of conns) conn.close();
    await rtmp.close();
  }
});

Deno.test("600 idle RTMP connections under a 256 open-file limit: the server lives on and serves RTMP after", async () => {
  const { ports, env: portsEnv } = freePortsEnv();
  const rtmpPort = ports.rtmp;
  const child = new Deno.Command("prlimit", {
    args: [
      "--nofile=256:256",
      Deno.execPath(),
      ...["run", "--allow-net", "--allow-read", "--allow-write", "--allow-env", "--allow-run"],
      ...["--allow-sys", "main.ts"],
    ],
    cwd: new URL("..", import.meta.url).pathname,
    env: {
      NO_COLOR: "1",
      ...portsEnv,
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
  ]);
  let exited = false;
  child.status.then(() => exited = true);
  const restUrl = `http://127.0.0.1:${ports.rest}`;
  const conns: Deno.Conn[] = [];
  try {
    await waitForHttp(`${restUrl}/health`, 15_000);
    const opened = await Promise.allSettled(
      Array.from({ length: 600 }, () => Deno.connect({ hostname: "127.0.0.1", port: rtmpPort })),
    );
    for (const result of opened) if (result.status === "fulfilled") conns.push(result.value);
    assert.equal(conns.length, 600);
    // Time for the server to run into its limit and keep failing accepts.
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(exited, false, "the server exited under the load");
    for (const conn of conns.splice(0)) conn.close();

    await waitForHttp(`${restUrl}/health`, 15_000);
    await waitFor(
      "rtmp slots back to 0",
      async () => (await rtmpFigures(restUrl)).connections.current === 0 ? true : undefined,
      15_000,
    );
    await publishesAndLeaves(rtmpPort, "survivor");
    assert.equal(exited, false);
  } finally {
    for (const conn of conns) conn.close();
    try {
      child.kill("SIGTERM");
    } catch {
      // Exited already.
    }
    await child.status;
    const [stdout] = await output;
    assert.match(stdout, /accept failed; retrying/);
    assert.doesNotMatch(stdout, /Uncaught|Too many open files \(os error 24\)"?\s*$/);
  }
});
