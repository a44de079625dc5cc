/**
 * WebRTC media over TCP (ICE-TCP) for Web SDK streams with `transport: "TCP"`: werift clients
 * whose UDP sockets are closed (a firewall that blocks UDP) publish and play through a server
 * whose answers carry one TCP passive candidate of the media range and nothing else; their
 * players stay on werift's send path while a UDP player of the same stream goes to the send
 * engine; listening sockets close with their peers, a peer nobody connects to times out as a
 * UDP one does, and bytes that are not ICE on the TCP port close that connection only.
 * `media.iceTransport: tcp` makes TCP the default of stream objects that name no transport.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { firstFrameTimeoutMs } from "../media/protocols/webrtc/ice_tcp_gate.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import { SfuClient, withSfuServer } from "./helpers/sfu_client.ts";
import {
  nextStatus,
  TestPlayer,
  TestPublisher,
  waitFor,
  weriftSanitizers,
  withTwoClients,
} from "./webrtc_helpers.ts";

/**
 * The media port range of these tests (TCP ports for ICE-TCP peers): below the kernel's
 * ephemeral range (32768-60999), where the test servers' own listeners (port 0) never land.
 */
const portMin = 21200;
const portMax = 21299;

/** Ports of the TCP sockets this process listens on (its descriptors' inodes in LISTEN). */
function tcpListenPorts(): number[] {
  const inodes = new Set<string>();
  for (const entry of Deno.readDirSync("/proc/self/fd")) {
    try {
      const target = Deno.readLinkSync(`/proc/self/fd/${entry.name}`);
      const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
      if (inode) inodes.add(inode);
    } catch {
      // closed while listing
    }
  }
  const ports: number[] = [];
  for (const file of ["/proc/self/net/tcp", "/proc/self/net/tcp6"]) {
    for (const line of Deno.readTextFileSync(file).split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local_address rem_address st ... inode (10th field); 0A is LISTEN.
      if (fields.length < 10 || fields[3] !== "0A" || !inodes.has(fields[9])) continue;
      ports.push(parseInt(fields[1].split(":")[1], 16));
    }
  }
  return ports;
}

/** Listening ports of the media range. */
function mediaListeners(): number[] {
  return tcpListenPorts().filter((p) => p >= portMin && p <= portMax);
}

/** The candidate lines of an SDP, split in fields. */
function candidatesOf(sdp: string): string[][] {
  return sdp.split("\r\n").filter((l) => l.startsWith("a=candidate:")).map((l) => l.split(" "));
}

/** Asserts that `sdp` has only TCP passive candidates on 127.0.0.1 and the range; their ports. */
function assertTcpOnly(sdp: string): number[] {
  const candidates = candidatesOf(sdp);
  assert.ok(candidates.length > 0, sdp);
  for (const c of candidates) {
    assert.equal(c[2].toLowerCase(), "tcp", c.join(" "));
    assert.equal(c[4], "127.0.0.1");
    assert.deepEqual(c.slice(c.indexOf("tcptype"), c.indexOf("tcptype") + 2), [
      "tcptype",
      "passive",
    ]);
    const port = Number(c[5]);
    assert.ok(port >= portMin && port <= portMax, `port ${port} in the media range`);
  }
  return [...new Set(candidates.map((c) => Number(c[5])))];
}

/** The transport of the selected pair of a werift client. */
function selectedTransport(pc: TestPlayer["pc"]): string | undefined {
  return pc.dtlsTransports[0]?.iceTransport.connection.nominated?.localCandidate.transport;
}

async function find(s: TestServer, filter: Record<string, unknown>) {
  const res = await s.post("/stream/find", filter);
  assert.equal(res.status, 200);
  return await res.json() as Record<string, unknown>[];
}

/**
 * Opens a connection to `port`, writes `bytes` and answers whether the server closed it within
 * `withinMs` (end of stream or reset).
 */
async function closedAfter(port: number, bytes: Uint8Array, withinMs: number): Promise<boolean> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    if (bytes.length > 0) await conn.write(bytes);
    const buffer = new Uint8Array(256);
    const timer = setTimeout(() => conn.close(), withinMs);
    try {
      for (;;) {
        if (await conn.read(buffer) === null) return true;
      }
    } catch (err) {
      // Closed by our timer: still open; reset by the server: closed.
      return !(err instanceof Deno.errors.BadResource);
    } finally {
      clearTimeout(timer);
    }
  } finally {
    try {
      conn.close();
    } catch {
      // already closed
    }
  }
}

function server(overrides: Record<string, unknown> = {}): Promise<TestServer> {
  return startTestServer(testConfig({
    media: { udpPortMin: portMin, udpPortMax: portMax, ...overrides },
  }));
}

Deno.test({
  name:
    "transport TCP: clients without UDP publish and play over ICE-TCP; TCP players stay off the send engine; listeners close with their peers; hostile bytes close only their connection",
  ...weriftSanitizers,
  fn: async () => {
    const listenersBefore = mediaListeners().length;
    const publisher = new TestPublisher("VP8", 2, "tcp");
    const tcpPlayer = new TestPlayer("VP8", undefined, "tcp");
    const udpPlayer = new TestPlayer("VP8");
    await withTwoClients([publisher, tcpPlayer, udpPlayer], async (s, pubClient, playClient) => {
      const pubId = crypto.randomUUID();
      const pubSdp = await publisher.publish(pubClient, {
        mediaSessionId: pubId,
        name: "tcp-cam",
        transport: "TCP",
      });
      const [pubPort] = assertTcpOnly(pubSdp);
      publisher.start();
      assert.equal((await nextStatus(pubClient, pubId)).status, "PUBLISHING");
      assert.equal(selectedTransport(publisher.pc), "tcp");

      const tcpId = crypto.randomUUID();
      await tcpPlayer.play(playClient, {
        mediaSessionId: tcpId,
        name: "tcp-cam",
        transport: "TCP",
      });
      assertTcpOnly(tcpPlayer.pc.remoteDescription!.sdp);
      assert.equal((await nextStatus(playClient, tcpId)).status, "PLAYING");
      const udpId = crypto.randomUUID();
      await udpPlayer.play(playClient, { mediaSessionId: udpId, name: "tcp-cam" });
      assert.ok(
        candidatesOf(udpPlayer.pc.remoteDescription!.sdp).every((c) => c[2] === "udp"),
        "a stream object without transport gets UDP",
      );
      assert.equal((await nextStatus(playClient, udpId)).status, "PLAYING");

      await waitFor(
        () => tcpPlayer.received.video > 100 && tcpPlayer.received.audio > 100,
        15_000,
        "media at the TCP player",
      );
      assert.equal(selectedTransport(tcpPlayer.pc), "tcp");
      // The engine has the UDP player's two tracks, the TCP player sends through werift.
      assert.equal(s.services.sendPaths.size, 2, "only the UDP player on the send engine");
      await waitFor(() => udpPlayer.received.video > 100, 10_000, "media at the UDP player");
      assert.equal(mediaListeners().length, listenersBefore + 2, "publisher and TCP player listen");

      const records = await find(s, { name: "tcp-cam" });
      const transports = Object.fromEntries(records.map((r) => [r.mediaSessionId, r.transport]));
      assert.deepEqual(transports, { [pubId]: "TCP", [tcpId]: "TCP", [udpId]: "UDP" });

      // Bytes that are not ICE on the publisher's TCP port: each connection is closed, the
      // publisher's own goes on.
      const http = new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
      const framedJunk = Buffer.concat([Buffer.from([0, 40]), Buffer.alloc(40, 0x16)]);
      const stunOfAnother = Buffer.concat([
        Buffer.from([0, 28]),
        Buffer.from("000100082112a442", "hex"),
        Buffer.alloc(12, 7),
        Buffer.from("00060004", "hex"),
        Buffer.from("abcd"),
      ]);
      for (const bytes of [http, framedJunk, stunOfAnother]) {
        assert.ok(await closedAfter(pubPort, bytes, 2000), `closed after ${bytes.length} bytes`);
      }
      const received = tcpPlayer.received.video;
      await waitFor(() => tcpPlayer.received.video > received + 50, 5000, "media goes on");
      assert.equal(selectedTransport(publisher.pc), "tcp");

      playClient.send("stopStream", { mediaSessionId: tcpId, name: "tcp-cam" });
      playClient.send("stopStream", { mediaSessionId: udpId, name: "tcp-cam" });
      pubClient.send("unPublishStream", { mediaSessionId: pubId, name: "tcp-cam" });
      await waitFor(() => openPeerCount() === 0, 5000, "every peer closed");
      await waitFor(
        () => mediaListeners().length === listenersBefore,
        2000,
        "the listening sockets closed",
      );
    }, () => server({ iceMux: "on", sendEngine: "ffi", sendWorkers: 1 }));
  },
});

Deno.test({
  name:
    "transport TCP: a publish nobody connects to ends Failed by ICE timeout and closes its listener; a silent connection is closed",
  ...weriftSanitizers,
  fn: async () => {
    const listenersBefore = mediaListeners().length;
    const s = await server();
    const { client } = await WcsClient.connect(s.wsUrl);
    const publisher = new TestPublisher("VP8", 2, "tcp");
    try {
      await publisher.pc.setLocalDescription(await publisher.pc.createOffer());
      const id = crypto.randomUUID();
      client.send("publishStream", {
        mediaSessionId: id,
        name: "nobody",
        published: true,
        hasVideo: true,
        hasAudio: true,
        mediaProvider: "WebRTC",
        transport: "TCP",
        sdp: publisher.pc.localDescription!.sdp,
      });
      const [, sdp] = await client.next("setRemoteSDP", 10_000) as [string, string];
      const [port] = assertTcpOnly(sdp);
      assert.equal(mediaListeners().length, listenersBefore + 1);
      // A connection that never sends a byte is closed after firstFrameTimeoutMs.
      const started = Date.now();
      assert.ok(await closedAfter(port, new Uint8Array(0), firstFrameTimeoutMs + 2000));
      assert.ok(Date.now() - started >= firstFrameTimeoutMs - 100);
      const status = await nextStatus(client, id, 20_000);
      assert.deepEqual([status.status, status.info], ["FAILED", "Failed by ICE timeout"]);
      await waitFor(() => openPeerCount() === 0, 5000, "the peer closed");
      await waitFor(
        () => mediaListeners().length === listenersBefore,
        2000,
        "the listening socket closed",
      );
    } finally {
      await publisher.close();
      await client.close();
      await s.stop();
    }
  },
});

Deno.test({
  name:
    "media.iceTransport tcp: a stream object without transport is answered on TCP, one with UDP on UDP",
  ...weriftSanitizers,
  fn: async () => {
    const s = await server({ iceTransport: "tcp" });
    const { client } = await WcsClient.connect(s.wsUrl);
    const peers = [new TestPublisher("VP8"), new TestPublisher("VP8")];
    try {
      const byDefault = await peers[0].publish(client, {
        mediaSessionId: crypto.randomUUID(),
        name: "a",
      });
      const asked = await peers[1].publish(client, {
        mediaSessionId: crypto.randomUUID(),
        name: "b",
        transport: "UDP",
      });
      assertTcpOnly(byDefault);
      assert.ok(candidatesOf(asked).every((c) => c[2] === "udp"), asked);
    } finally {
      for (const peer of peers) await peer.close();
      await client.close();
      await s.stop();
    }
    assert.equal(openPeerCount(), 0);
  },
});

/** POSTs `pc`'s offer to `path` of the REST port; on 201 applies the answer. */
async function whipOffer(s: TestServer, path: string, pc: TestPlayer["pc"]): Promise<Response> {
  await pc.setLocalDescription(await pc.createOffer());
  const res = await fetch(`${s.restUrl}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/sdp" },
    body: pc.localDescription!.sdp,
  });
  if (res.status === 201) {
    await pc.setRemoteDescription({ type: "answer", sdp: await res.clone().text() });
  }
  return res;
}

Deno.test({
  name:
    "WHIP publish and WHEP play with ?transport=tcp: clients without UDP get one TCP passive candidate and media; a WHEP player without it gets UDP and the engine; a bad transport is 400",
  ...weriftSanitizers,
  fn: async () => {
    const listenersBefore = mediaListeners().length;
    const s = await server({ iceMux: "on", sendEngine: "ffi", sendWorkers: 1 });
    const publisher = new TestPublisher("VP8", 2, "tcp");
    const tcpPlayer = new TestPlayer("VP8", undefined, "tcp");
    const udpPlayer = new TestPlayer("VP8");
    try {
      const bad = await whipOffer(s, "/whip/w?transport=sctp", new TestPlayer("VP8").pc);
      assert.equal(bad.status, 400);
      assert.match(await bad.text(), /transport/);

      const published = await whipOffer(s, "/whip/whip-tcp?transport=TCP", publisher.pc);
      assert.equal(published.status, 201, await published.clone().text());
      assertTcpOnly(await published.text());
      publisher.start();
      await waitFor(() => selectedTransport(publisher.pc) === "tcp", 10_000, "publisher on TCP");

      const played = await whipOffer(s, "/whep/whip-tcp?transport=tcp", tcpPlayer.pc);
      assert.equal(played.status, 201, await played.clone().text());
      assertTcpOnly(await played.text());
      const udp = await whipOffer(s, "/whep/whip-tcp", udpPlayer.pc);
      assert.equal(udp.status, 201);
      assert.ok(candidatesOf(await udp.text()).every((c) => c[2] === "udp"));

      await waitFor(
        () => tcpPlayer.received.video > 100 && tcpPlayer.received.audio > 100,
        15_000,
        "media at the TCP WHEP player",
      );
      assert.equal(selectedTransport(tcpPlayer.pc), "tcp");
      await waitFor(() => udpPlayer.received.video > 100, 10_000, "media at the UDP WHEP player");
      assert.equal(s.services.sendPaths.size, 2, "only the UDP player on the send engine");
      assert.equal(mediaListeners().length, listenersBefore + 2, "publisher and player listen");
      const transports = (await find(s, { name: "whip-tcp" })).map((r) => r.transport).sort();
      assert.deepEqual(transports, ["TCP", "TCP", "UDP"]);
    } finally {
      for (const peer of [publisher, tcpPlayer, udpPlayer]) await peer.close();
      await s.stop();
    }
    await waitFor(() => openPeerCount() === 0, 5000, "every peer closed");
    await waitFor(
      () => mediaListeners().length === listenersBefore,
      2000,
      "the listening sockets closed",
    );
  },
});

Deno.test({
  name:
    "media.iceTransport tcp: WHIP without transport is answered on TCP, with ?transport=udp on UDP",
  ...weriftSanitizers,
  fn: async () => {
    const listenersBefore = mediaListeners().length;
    const s = await server({ iceTransport: "tcp" });
    const peers = [new TestPublisher("VP8"), new TestPublisher("VP8")];
    try {
      const byDefault = await whipOffer(s, "/whip/a", peers[0].pc);
      assert.equal(byDefault.status, 201);
      assertTcpOnly(await byDefault.text());
      const asked = await whipOffer(s, "/whip/b?transport=udp", peers[1].pc);
      assert.equal(asked.status, 201);
      const sdp = await asked.text();
      assert.ok(candidatesOf(sdp).length > 0 && candidatesOf(sdp).every((c) => c[2] === "udp"));
    } finally {
      for (const peer of peers) await peer.close();
      await s.stop();
    }
    await waitFor(() => openPeerCount() === 0, 5000, "every peer closed");
    await waitFor(
      () => mediaListeners().length === listenersBefore,
      2000,
      "the listening socket closed",
    );
  },
});

Deno.test({
  name:
    "SFU room over TCP: a participant connected with custom.transport TCP, its UDP blocked, publishes to and receives from a UDP participant; media.iceTransport tcp applies to one naming none",
  ...weriftSanitizers,
  fn: async () => {
    for (const setting of ["tcp", "udp"] as const) {
      const listenersBefore = mediaListeners().length;
      await withSfuServer(
        async (s, clients) => {
          // With media.iceTransport udp the TCP participant asks for TCP itself; with tcp it
          // names nothing and the other participant asks for UDP.
          const tcp = await SfuClient.connect(s.wsUrl, "tcp-user", "tcp-room", {
            transport: setting === "udp" ? "TCP" : undefined,
            blockUdp: true,
          });
          clients.push(tcp);
          const udp = await SfuClient.connect(s.wsUrl, "udp-user", "tcp-room", {
            transport: setting === "tcp" ? "UDP" : undefined,
          });
          clients.push(udp);
          tcp.addMedia();
          udp.addMedia();
          await tcp.join("tcp-room", "1");
          const answer = await tcp.waitFor((e) => e.type === "REMOTE_SDP");
          assertTcpOnly((answer.info as { sdp: string }).sdp);
          // Connected before the other joins: werift as a client left DTLS unstarted about
          // every other time when the server's offer of new tracks came during its ICE-TCP
          // checks (ICE completed, DTLS "new"); browsers renegotiate at any time.
          await tcp.until(
            () => tcp.pc.connectionState === "connected",
            "TCP participant connected",
          );
          await udp.join("tcp-room", "1");
          const udpAnswer = await udp.waitFor((e) => e.type === "REMOTE_SDP");
          const udpCandidates = candidatesOf((udpAnswer.info as { sdp: string }).sdp);
          assert.ok(udpCandidates.length > 0 && udpCandidates.every((c) => c[2] === "udp"));
          // Each receives the other's video and audio (mids of its own peer, from ADD_TRACKS).
          for (const [client, other] of [[tcp, udp], [udp, tcp]] as const) {
            await client.until(() => {
              const mids = client.events.filter((e) =>
                e.type === "ADD_TRACKS" &&
                (e.info as { nickName: string }).nickName === other.nickname
              ).flatMap((e) => (e.info as { info: { mid: string }[] }).info.map((t) => t.mid));
              return mids.length >= 2 && mids.every((mid) => (client.received.get(mid) ?? 0) >= 20);
            }, `${client.nickname} receiving ${other.nickname}'s tracks`);
          }
          assert.equal(selectedTransport(tcp.pc), "tcp");
          assert.equal(mediaListeners().length, listenersBefore + 1, "one listener: the TCP peer");
        },
        testConfig({ media: { udpPortMin: portMin, udpPortMax: portMax, iceTransport: setting } }),
      );
      await waitFor(
        () => mediaListeners().length === listenersBefore,
        2000,
        "the listening socket closed",
      );
    }
  },
});
