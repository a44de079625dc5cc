/**
 * baresip (Debian `baresip-core`) as the far end of SIP tests, after the recipe of
 * ../shared/peers/start-baresip.sh: bound to 127.0.0.1 on free ports, G.711 only (or the
 * codecs asked, Opus or G.722 among them), a 400 Hz
 * tone as its microphone (aufile), no sound card (ALSA null), driven over ctrl_tcp (JSON
 * netstrings). The sndfile module also writes what it hears, decoded, to a WAV file per call
 * (`*-dec.wav`), so a test can tell sound from silence at the far end.
 */
import { freePort, freeUdpRange } from "./process.ts";

/** A running baresip. */
export interface Baresip {
  /** SIP port (UDP and TCP). */
  readonly sipPort: number;
  /** Its address-of-record user. */
  readonly user: string;
  /** Sends a ctrl_tcp command (`dial sip:...`, `hangup`, `accept`, `listcalls`, ...). */
  command(command: string, params?: string): Promise<{ ok: boolean; data: string }>;
  /** The log so far. */
  log(): string;
  /**
   * RMS (in 16-bit sample units) of what baresip heard in its calls so far, from the sndfile
   * dumps; 0 when nothing was written.
   */
  heardRms(): Promise<number>;
  /** Kills baresip and removes its folder. */
  stop(): Promise<void>;
}

/** What to start. */
export interface BaresipOptions {
  /** `auto` answers incoming calls at once; `manual` waits for `accept`. Default auto. */
  answerMode?: "auto" | "manual";
  /** User of its address-of-record. Default "baresip". */
  user?: string;
  /** Its account's `audio_codecs`, in its order of preference. Default "PCMU,PCMA". */
  audioCodecs?: string;
}

/** Seconds of the tone file (baresip loops it). */
const toneSeconds = 60;
/** Sample rate of the tone and of G.711, in Hz. */
const toneRate = 8000;
/** Rate and channels of Opus as baresip runs it (aufile does not resample). */
const opusRate = 48000;
const opusChannels = 2;
/** Rate G.722 codes at. */
const g722Rate = 16000;
/** Frequency of the tone, in Hz. */
const toneHz = 400;
/** Longest wait for baresip to be ready, in ms. */
const startTimeoutMs = 10_000;
/** Size of a canonical WAV header, in bytes. */
const wavHeaderBytes = 44;

/** A 400 Hz tone as a 16-bit WAV of `rate` Hz and `channels`. */
function toneWav(rate: number, channels: number): Uint8Array {
  const samples = rate * toneSeconds * channels;
  const bytes = new Uint8Array(wavHeaderBytes + samples * 2);
  const view = new DataView(bytes.buffer);
  const ascii = (offset: number, text: string) =>
    [...text].forEach((c, i) => view.setUint8(offset + i, c.charCodeAt(0)));
  ascii(0, "RIFF");
  view.setUint32(4, 36 + samples * 2, true);
  ascii(8, "WAVEfmt ");
  view.setUint32(16, 16, true);
  view.setUint16(20, 1, true);
  view.setUint16(22, channels, true);
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * channels * 2, true);
  view.setUint16(32, channels * 2, true);
  view.setUint16(34, 16, true);
  ascii(36, "data");
  view.setUint32(40, samples * 2, true);
  for (let i = 0; i < samples; i++) {
    const t = Math.floor(i / channels) / rate;
    view.setInt16(
      wavHeaderBytes + i * 2,
      Math.round(8000 * Math.sin(2 * Math.PI * toneHz * t)),
      true,
    );
  }
  return bytes;
}

/**
 * A port free for SIP over UDP and TCP whose next port is free for TCP too: baresip also
 * listens for SIP/TLS there, and fails to start when that port is taken.
 */
async function freeSipPort(): Promise<number> {
  for (;;) {
    const port = await freeUdpRange(2);
    try {
      Deno.listen({ hostname: "127.0.0.1", port: port + 1 }).close();
      return port;
    } catch {
      // Taken over TCP: try another range.
    }
  }
}

/** Starts baresip; resolves once its ctrl_tcp answers. */
export async function startBaresip(o: BaresipOptions = {}): Promise<Baresip> {
  const user = o.user ?? "baresip";
  const sipPort = await freeSipPort();
  const ctrlPort = freePort();
  const rtpBase = await freeUdpRange(20);
  const dir = await Deno.makeTempDir({ prefix: "baresip-" });
  await Deno.mkdir(`${dir}/dumps`);
  // The tone at the rate of baresip's first codec (aufile does not resample).
  const first = (o.audioCodecs ?? "PCMU").split(",")[0].toLowerCase();
  const opus = /opus/i.test(o.audioCodecs ?? "");
  const g722 = /g722/i.test(o.audioCodecs ?? "");
  await Deno.writeFile(
    `${dir}/tone.wav`,
    first.startsWith("opus")
      ? toneWav(opusRate, opusChannels)
      : first.startsWith("g722")
      ? toneWav(g722Rate, 1)
      : toneWav(toneRate, 1),
  );
  await Deno.writeTextFile(
    `${dir}/config`,
    [
      "poll_method epoll",
      `sip_listen 127.0.0.1:${sipPort}`,
      "net_interface 127.0.0.1",
      "dns_server 127.0.0.1:53",
      "call_local_timeout 120",
      "call_max_calls 4",
      "audio_player alsa,null",
      "audio_alert alsa,null",
      `audio_source aufile,${dir}/tone.wav`,
      "audio_level no",
      `rtp_ports ${rtpBase}-${rtpBase + 19}`,
      "rtcp_mux no",
      "jitter_buffer_delay 5-10",
      "module_path /usr/lib/baresip/modules",
      "module g711.so",
      ...(opus ? ["module opus.so"] : []),
      ...(g722 ? ["module g722.so"] : []),
      "module alsa.so",
      "module aufile.so",
      "module sndfile.so",
      `snd_path ${dir}/dumps`,
      "module_tmp account.so",
      "module_app menu.so",
      "module_app ctrl_tcp.so",
      `ctrl_tcp_listen 127.0.0.1:${ctrlPort}`,
      "",
    ].join("\n"),
  );
  await Deno.writeTextFile(
    `${dir}/accounts`,
    `<sip:${user}@127.0.0.1:${sipPort}>;regint=0;answermode=${
      o.answerMode ?? "auto"
    };audio_codecs=${o.audioCodecs ?? "PCMU,PCMA"}\n`,
  );
  await Deno.writeTextFile(`${dir}/contacts`, "");
  let child: Deno.ChildProcess;
  try {
    // Line-buffered, so the log can be read while baresip runs (a pipe gets whole blocks).
    child = new Deno.Command("stdbuf", {
      args: ["-oL", "-eL", "baresip", "-f", dir],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (err) {
    await Deno.remove(dir, { recursive: true });
    if (err instanceof Deno.errors.NotFound) {
      throw new Error("baresip is missing: install the Debian package baresip-core");
    }
    throw err;
  }
  // Both outputs into one log, read until baresip exits.
  let log = "";
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    for await (const text of stream.pipeThrough(new TextDecoderStream())) log += text;
  };
  const drained = Promise.all([drain(child.stdout), drain(child.stderr)]);

  const command = async (name: string, params = "") => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: ctrlPort });
    try {
      const token = crypto.randomUUID();
      const body = new TextEncoder().encode(JSON.stringify({ command: name, params, token }));
      await conn.write(new TextEncoder().encode(`${body.length}:`));
      await conn.write(body);
      await conn.write(new TextEncoder().encode(","));
      let text = "";
      const buffer = new Uint8Array(65536);
      for (;;) {
        const n = await conn.read(buffer);
        if (n === null) throw new Error(`baresip closed ctrl_tcp before answering ${name}`);
        text += new TextDecoder().decode(buffer.subarray(0, n));
        for (;;) {
          const colon = text.indexOf(":");
          if (colon < 0) break;
          const length = Number(text.slice(0, colon));
          if (text.length < colon + 2 + length) break;
          const message = JSON.parse(text.slice(colon + 1, colon + 1 + length));
          text = text.slice(colon + 2 + length);
          if (message.response && message.token === token) {
            return { ok: message.ok === true, data: String(message.data ?? "") };
          }
        }
      }
    } finally {
      conn.close();
    }
  };

  const stop = async () => {
    try {
      child.kill("SIGKILL");
    } catch {
      // exited already
    }
    await child.status;
    await drained;
    await Deno.remove(dir, { recursive: true });
  };

  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    try {
      await command("listcalls");
      break;
    } catch {
      // ctrl_tcp not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`baresip did not start:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }

  return {
    sipPort,
    user,
    command,
    log: () => log,
    async heardRms() {
      let sum = 0;
      let count = 0;
      for await (const entry of Deno.readDir(`${dir}/dumps`)) {
        if (!entry.name.endsWith("-dec.wav")) continue;
        const bytes = await Deno.readFile(`${dir}/dumps/${entry.name}`);
        const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        // The header's sizes are written at the end of the call: the samples are read up to
        // the end of the file instead.
        for (let i = wavHeaderBytes; i + 1 < bytes.length; i += 2) {
          const s = view.getInt16(i, true);
          sum += s * s;
          count++;
        }
      }
      return count === 0 ? 0 : Math.sqrt(sum / count);
    },
    stop,
  };
}
