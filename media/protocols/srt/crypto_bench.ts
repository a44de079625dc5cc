/**
 * What SRT encryption costs: `deno run -A media/protocols/srt/crypto_bench.ts`.
 *
 * One WebCrypto AES-CTR call per 1316-byte payload (7 TS packets, what ffmpeg and OBS send),
 * awaited one at a time as a connection does: wall and process CPU time per packet for
 * decrypt and encrypt at each key length, after a warm-up; then the one-off cost of a key
 * exchange (PBKDF2 with 2048 iterations and the key wrap).
 */
import { SrtCipher } from "./crypto.ts";
import { parseKeyMaterial } from "./key_material.ts";

const payloadBytes = 1316;
const warmupPackets = 5_000;
const timedPackets = 50_000;
const clockTicksPerSecond = 100;

/** User + system CPU time of this process (all threads: WebCrypto runs off the main one). */
function processCpuMs(): number {
  const fields = Deno.readTextFileSync("/proc/self/stat").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 1000 / clockTicksPerSecond;
}

async function perPacket(run: (seq: number) => Promise<unknown>): Promise<string> {
  for (let seq = 0; seq < warmupPackets; seq++) await run(seq);
  const wall = performance.now();
  const cpu = processCpuMs();
  for (let seq = 0; seq < timedPackets; seq++) await run(seq);
  const wallUs = (performance.now() - wall) * 1000 / timedPackets;
  const cpuUs = (processCpuMs() - cpu) * 1000 / timedPackets;
  return `wall ${wallUs.toFixed(1)} µs, CPU ${cpuUs.toFixed(1)} µs per packet`;
}

for (const keyLength of [16, 24, 32] as const) {
  const sender = await SrtCipher.create("bench passphrase", keyLength);
  const km = parseKeyMaterial(sender.keyMaterial());
  const receiver = await SrtCipher.fromKeyMaterial(km, "bench passphrase");
  const payload = crypto.getRandomValues(new Uint8Array(payloadBytes));
  const sealed = (await sender.encrypt(0, payload)).payload;
  console.log(
    `AES-${keyLength * 8} decrypt: ${await perPacket((s) => receiver.decrypt(s, 1, sealed))}`,
  );
  console.log(
    `AES-${keyLength * 8} encrypt: ${await perPacket((s) => sender.encrypt(s, payload))}`,
  );
}

const started = performance.now();
const sender = await SrtCipher.create("bench passphrase", 16);
await SrtCipher.fromKeyMaterial(parseKeyMaterial(sender.keyMaterial()), "bench passphrase");
console.log(
  `key exchange (create + fromKeyMaterial): ${(performance.now() - started).toFixed(1)} ms`,
);
