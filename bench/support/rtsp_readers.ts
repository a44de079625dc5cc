/**
 * N RTSP players over TCP in one process, for the fan-out benchmark: each sets up every
 * track of the URL's SDP on interleaved channels, plays, and only counts what it reads.
 * Prints one JSON line per request on stdin ("rate"): the bytes per second each player got
 * since the previous line.
 * Run: deno run -A bench/support/rtsp_readers.ts <url> <players>
 */
const [url, playersText] = Deno.args;
const players = Number(playersText);
const encoder = new TextEncoder();
const counts: number[] = [];

/** One request and the text of its answer (answers fit one read before PLAY). */
async function request(conn: Deno.Conn, text: string, buf: Uint8Array): Promise<string> {
  await conn.write(encoder.encode(text));
  const n = await conn.read(buf);
  return new TextDecoder().decode(buf.subarray(0, n ?? 0));
}

async function player(index: number): Promise<void> {
  const { hostname, port } = new URL(url.replace(/^rtsp:/, "http:"));
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const buf = new Uint8Array(256 * 1024);
  const described = await request(
    conn,
    `DESCRIBE ${url} RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n\r\n`,
    buf,
  );
  const base = /Content-Base: *(\S+)/i.exec(described)?.[1] ?? `${url}/`;
  const controls = [...described.matchAll(/a=control:(\S+)/g)].map((m) => m[1])
    .filter((c) => c !== "*");
  let session = "";
  let cseq = 1;
  for (const [i, control] of controls.entries()) {
    const target = /^rtsp:/.test(control) ? control : base.replace(/\/?$/, "/") + control;
    const answer = await request(
      conn,
      `SETUP ${target} RTSP/1.0\r\nCSeq: ${++cseq}\r\n` +
        `Transport: RTP/AVP/TCP;unicast;interleaved=${2 * i}-${2 * i + 1}\r\n` +
        (session ? `Session: ${session}\r\n` : "") + "\r\n",
      buf,
    );
    session ||= /Session: *([^;\r\n]+)/i.exec(answer)?.[1] ?? "";
  }
  await conn.write(
    encoder.encode(`PLAY ${url} RTSP/1.0\r\nCSeq: ${++cseq}\r\nSession: ${session}\r\n\r\n`),
  );
  for (;;) {
    const n = await conn.read(buf).catch(() => null);
    if (n === null) return;
    counts[index] += n;
  }
}

for (let i = 0; i < players; i++) {
  counts.push(0);
  player(i).catch(() => {});
}
let lastMs = performance.now();
let last = 0;
for await (const _ of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
  const now = performance.now();
  const total = counts.reduce((a, b) => a + b, 0);
  const active = counts.filter((c) => c > 0).length;
  console.log(JSON.stringify({
    bytesPerPlayerPerSec: (total - last) / players / ((now - lastMs) / 1000),
    active,
  }));
  last = total;
  lastMs = now;
}
