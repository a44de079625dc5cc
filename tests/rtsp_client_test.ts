/**
 * RTSP client behaviours a GStreamer camera cannot be made to show, against a scripted
 * camera in this file: UDP that never delivers (auto falls back to TCP), a redirect to a
 * path behind Basic auth, keepalives within a short session timeout, TEARDOWN on terminate.
 */
import assert from "node:assert/strict";
import { RtspStreamParser } from "../media/protocols/rtsp/message.ts";
import { rtpBytes } from "../media/rtp/test_packet.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { testConfig, withServer } from "./helpers/test_server.ts";

/** Interval of the scripted camera's PCMU packets, in milliseconds. */
const packetIntervalMs = 20;

const sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=fake\r\nt=0 0\r\na=control:*\r\n" +
  "m=audio 0 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=control:track1\r\n";

/** A request the scripted camera received. */
interface Seen {
  method: string;
  url: string;
  headers: Map<string, string>;
}

/** An RTSP camera that plays PCMU over TCP only; `/old` redirects to `/new`, which wants Basic auth. */
class ScriptedCamera {
  readonly seen: Seen[] = [];
  readonly port: number;
  #listener: Deno.Listener;
  #conns = new Set<Deno.Conn>();
  #timers = new Set<ReturnType<typeof setInterval>>();
  #serving: Promise<void>;
  #handlers: Promise<void>[] = [];

  constructor() {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.#listener = listener;
    this.port = (listener.addr as Deno.NetAddr).port;
    this.#serving = (async () => {
      for await (const conn of listener) this.#handlers.push(this.#serve(conn));
    })();
  }

  get url(): string {
    return `rtsp://127.0.0.1:${this.port}`;
  }

  methods(): string[] {
    return this.seen.map((s) => s.method);
  }

  async close(): Promise<void> {
    this.#listener.close();
    await this.#serving;
    for (const t of this.#timers) clearInterval(t);
    for (const c of this.#conns) {
      try {
        c.close();
      } catch {
        // closed by the client already
      }
    }
    await Promise.all(this.#handlers);
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    this.#conns.add(conn);
    const parser = new RtspStreamParser();
    const buf = new Uint8Array(4096);
    const enc = new TextEncoder();
    const reply = (cseq: string, status: string, headers: string[] = [], body = "") =>
      conn.write(enc.encode(
        `RTSP/1.0 ${status}\r\nCSeq: ${cseq}\r\n${headers.map((h) => h + "\r\n").join("")}` +
          (body ? `Content-Length: ${body.length}\r\n` : "") + `\r\n${body}`,
      ));
    let timer: ReturnType<typeof setInterval> | undefined;
    try {
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) break;
        parser.push(buf.subarray(0, n));
        for (let m = parser.next(); m; m = parser.next()) {
          if (m.kind !== "request") continue;
          const headers = new Map<string, string>();
          for (const name of ["cseq", "transport", "session", "authorization"]) {
            const v = m.headers.get(name);
            if (v !== undefined) headers.set(name, v);
          }
          this.seen.push({ method: m.method, url: m.url, headers });
          const cseq = headers.get("cseq")!;
          const session = ["Session: 77;timeout=2"];
          if (m.method === "OPTIONS") {
            await reply(cseq, "200 OK", [
              "Public: OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER",
            ]);
          } else if (m.method === "DESCRIBE" && m.url.endsWith("/old")) {
            await reply(cseq, "302 Moved", [`Location: ${this.url}/new`]);
          } else if (m.method === "DESCRIBE") {
            if (headers.get("authorization") !== `Basic ${btoa("u:p")}`) {
              await reply(cseq, "401 Unauthorized", ['WWW-Authenticate: Basic realm="cam"']);
            } else {
              await reply(cseq, "200 OK", [
                `Content-Base: ${this.url}/new/`,
                "Content-Type: application/sdp",
              ], sdp);
            }
          } else if (m.method === "SETUP") {
            const transport = headers.get("transport")!;
            const answer = transport.includes("TCP")
              ? "RTP/AVP/TCP;unicast;interleaved=0-1"
              : `${transport};server_port=9-10`; // accepted, but nothing will ever be sent
            await reply(cseq, "200 OK", [...session, `Transport: ${answer}`]);
          } else if (m.method === "PLAY") {
            await reply(cseq, "200 OK", [
              ...session,
              `RTP-Info: url=${this.url}/new/track1;seq=0;rtptime=0`,
            ]);
            const tcp = this.seen.some((s) =>
              s.method === "SETUP" && s.headers.get("transport")!.includes("TCP")
            );
            if (tcp) {
              let seq = 0;
              timer = setInterval(() => {
                const packet = rtpBytes({
                  seq,
                  ts: seq * 160,
                  pt: 0,
                  payload: new Uint8Array(160),
                });
                seq++;
                const frame = new Uint8Array(4 + packet.length);
                frame.set([0x24, 0, packet.length >> 8, packet.length & 0xff]);
                frame.set(packet, 4);
                conn.write(frame).catch(() => {});
              }, packetIntervalMs);
              this.#timers.add(timer);
            }
          } else {
            await reply(cseq, "200 OK", session);
          }
        }
      }
    } catch {
      // the client went away
    } finally {
      clearInterval(timer);
      this.#conns.delete(conn);
      try {
        conn.close();
      } catch {
        // closed already
      }
    }
  }
}

Deno.test("auto: UDP that never delivers falls back to TCP; redirect and Basic auth are followed", async () => {
  const camera = new ScriptedCamera();
  const udpPortMin = 40000 + 2 * Math.floor(Math.random() * 10000);
  try {
    await withServer(
      async (server) => {
        const uri = camera.url.replace("rtsp://", "rtsp://u:p@") + "/old";
        const res = await server.post("/rtsp/startup", { uri, localStreamName: "fake" });
        assert.equal(res.status, 200, await res.text());
        // Keepalives may come at any point; the order of the rest is what matters here.
        const methods = camera.methods().filter((m) => m !== "GET_PARAMETER");
        // First connection: redirected. Second: 401 answered, UDP set up, then given up.
        assert.deepEqual(methods.slice(0, 9), [
          "OPTIONS",
          "DESCRIBE",
          "OPTIONS",
          "DESCRIBE",
          "DESCRIBE",
          "SETUP",
          "PLAY",
          "TEARDOWN",
          "OPTIONS",
        ]);
        const setups = camera.seen.filter((s) => s.method === "SETUP");
        assert.match(setups[0].headers.get("transport")!, /^RTP\/AVP;unicast;client_port=\d+-\d+$/);
        assert.match(
          setups[1].headers.get("transport")!,
          /^RTP\/AVP\/TCP;unicast;interleaved=0-1$/,
        );
        assert.equal(setups[1].url, `${camera.url}/new/track1`);
        const [record] = await (await server.post("/stream/find_all")).json();
        assert.equal(record.audioCodec, "PCMU");

        // Session timeout 2 s: a keepalive (GET_PARAMETER, listed in Public) within 1 s.
        await waitFor(
          "a keepalive",
          () => camera.methods().includes("GET_PARAMETER") || undefined,
          2500,
        );
        const keepalive = camera.seen.find((s) => s.method === "GET_PARAMETER")!;
        assert.equal(keepalive.headers.get("session"), "77");

        const teardowns = camera.methods().filter((m) => m === "TEARDOWN").length;
        assert.equal((await server.post("/rtsp/terminate", { uri })).status, 200);
        assert.equal(camera.methods().filter((m) => m === "TEARDOWN").length, teardowns + 1);
        assert.equal(camera.seen.at(-1)!.headers.get("session"), "77");
      },
      testConfig({
        rtsp: { transport: "auto" },
        media: { udpPortMin, udpPortMax: udpPortMin + 99 },
      }),
    );
  } finally {
    await camera.close();
  }
});
