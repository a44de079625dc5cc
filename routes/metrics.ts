/**
 * `GET /metrics`: the Prometheus text exposition of one server. The process-wide registry
 * (runtime figures, REST and hook timings, recorder writes: core/metrics.ts) comes first,
 * then this server's figures, read from its registries at scrape time so no hot path pays
 * for them: streams by provider and status, readers by kind, sessions, media bytes and
 * frames in and out, WebRTC loss/NACK/PLI, dropped frames, caps, engine jobs and Workers.
 * Labels are bounded (providers, reader kinds, caps); per-stream series only with
 * `metrics.streamLabels`.
 */
import client from "prom-client";
import { metricPrefix, processRegistry } from "../core/metrics.ts";
import type { Services } from "../core/services.ts";
import { WorkerRunner } from "../media/mixer/worker_runner.ts";
import { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { Stream } from "../media/stream.ts";
import { providerTallies, readerTallies } from "../media/stream_tally.ts";
import type { RegisteredStream } from "../media/stream_record.ts";

/** Path of the exposition on the REST port. */
export const metricsPath = "/metrics";

/** Provider label of streams published from the Web SDK or WHIP. */
const webrtcProvider = "WebRTC";

/**
 * A counter read from per-object totals that vanish with their object (a stream's NACKs):
 * the last value seen of each departed object is kept, so the sum never goes back.
 */
class CarriedSum {
  #departed = 0;
  #last = new Map<object, number>();

  /** The monotonic total, given the current value of every live object. */
  total(current: Map<object, number>): number {
    for (const [owner, value] of this.#last) {
      if (!current.has(owner)) this.#departed += value;
    }
    this.#last = current;
    let sum = this.#departed;
    for (const value of current.values()) sum += value;
    return sum;
  }
}

/** Carried sums by label value. */
class CarriedSums {
  #sums = new Map<string, CarriedSum>();
  #current = new Map<string, Map<object, number>>();

  /** Records `value` of `owner` under `label` for this scrape. */
  add(label: string, owner: object, value: number): void {
    let current = this.#current.get(label);
    if (!current) this.#current.set(label, current = new Map());
    current.set(owner, value);
  }

  /** The totals by label; labels seen once keep reporting. Starts the next scrape. */
  totals(): Map<string, number> {
    const totals = new Map<string, number>();
    for (const label of this.#current.keys()) {
      if (!this.#sums.has(label)) this.#sums.set(label, new CarriedSum());
    }
    for (const [label, sum] of this.#sums) {
      totals.set(label, sum.total(this.#current.get(label) ?? new Map()));
    }
    this.#current = new Map();
    return totals;
  }
}

/** The `/metrics` exposition of one server. */
export interface MetricsExposition {
  /** Content-Type of the exposition. */
  readonly contentType: string;
  /** The exposition text, read now. */
  text(): Promise<string>;
}

/** Builds the scrape-time metrics of `services`. */
export function createMetrics(services: Services): MetricsExposition {
  const registry = new client.Registry();
  const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new client.Gauge<L>({ name: metricPrefix + name, help, labelNames, registers: [registry] });
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new client.Counter<L>({ name: metricPrefix + name, help, labelNames, registers: [registry] });

  const streams = gauge("streams", "Streams in the registry.", ["provider", "status", "type"]);
  const framesPerSecond = gauge(
    "stream_frames_per_second",
    "Video frames per second of the published streams, summed by provider (transcoder and mixer outputs included).",
    ["provider"],
  );
  const receivedBytes = counter(
    "stream_received_bytes_total",
    "Media payload bytes pushed into streams, by provider (conversions made for players count under their source's provider).",
    ["provider"],
  );
  const receivedFrames = counter(
    "stream_received_frames_total",
    "Media frames pushed into streams, by provider.",
    ["provider"],
  );
  const readers = gauge("readers", "Readers attached to streams, by kind.", ["kind"]);
  const deliveredBytes = counter(
    "reader_delivered_bytes_total",
    "Media payload bytes readers took from streams, by reader kind.",
    ["kind"],
  );
  const deliveredFrames = counter(
    "reader_delivered_frames_total",
    "Media frames readers took from streams, by reader kind.",
    ["kind"],
  );
  const readerDrops = counter(
    "reader_dropped_frames_total",
    "Frames readers lost to a full queue or skipped waiting for a keyframe, by reader kind.",
    ["kind"],
  );
  const droppedFrames = counter(
    "stream_dropped_frames_total",
    "Video frames a provider lost (transcoder and mixer drops), by provider.",
    ["provider"],
  );
  const webrtcLost = counter(
    "webrtc_lost_packets_total",
    "RTP packets WebRTC publishers lost, by media kind.",
    ["kind"],
  );
  const webrtcReceivedPackets = counter(
    "webrtc_received_packets_total",
    "RTP packets received from WebRTC publishers (Web SDK and WHIP).",
  );
  const webrtcReceivedBytes = counter(
    "webrtc_received_bytes_total",
    "RTP payload bytes received from WebRTC publishers.",
  );
  const webrtcSentPackets = counter(
    "webrtc_sent_packets_total",
    "RTP packets sent to WebRTC players.",
  );
  const webrtcDroppedPackets = counter(
    "webrtc_dropped_packets_total",
    "RTP packets to WebRTC players dropped on the server (a player's socket buffer or in-flight cap full): each player loses only its own.",
  );
  const webrtcNacks = counter(
    "webrtc_nacks_total",
    "Retransmission requests (NACK) WebRTC players sent.",
  );
  const webrtcPlis = counter(
    "webrtc_plis_total",
    "Keyframe requests (PLI) sent to WebRTC publishers.",
  );
  const sessions = gauge("sessions", "Established Web SDK sessions.");
  const capHeld = gauge("cap_held", "Slots held of each server-wide cap.", ["cap"]);
  const capMax = gauge("cap_max", "Size of each server-wide cap.", ["cap"]);
  const capRefused = counter(
    "cap_refused_total",
    "Requests refused because a server-wide cap was reached.",
    ["cap"],
  );
  const transcoders = gauge("transcoders", "Running transcoders, by API scheme.", ["scheme"]);
  const mixers = gauge("mixers", "Mixers.");
  const mixerInputs = gauge("mixer_inputs", "Streams mixed, over all mixers.");
  const recorders = gauge("recorders", "Running single-stream recorders.");
  const engineJobs = gauge("engine_jobs", "Whole codec engine jobs, by state.", ["state"]);
  const engineRefused = counter(
    "engine_refused_jobs_total",
    "Codec engine jobs refused because the queue was full.",
  );
  const engineProcesses = gauge(
    "engine_processes",
    "ffmpeg subprocesses (native engine) or Workers (wasm engine) running, live jobs included.",
    ["engine"],
  );
  const kernelWorkers = gauge(
    "kernel_workers",
    "Workers running mixing and compositing kernels (process-wide).",
  );
  const iceMuxDatagrams = counter(
    "ice_mux_datagrams_total",
    "Datagrams through the ICE mux (`ports.webrtcUdp`) for werift: received and delivered to a peer (in), sent (out).",
    ["direction"],
  );
  const iceMuxDropped = counter(
    "ice_mux_dropped_total",
    "Datagrams the ICE mux dropped, by reason: unknown_source (no peer bound, not a Binding request of one), malformed (truncated, unknown family), send_full (socket buffer full, or no IP address).",
    ["reason"],
  );
  const perStream = services.config.metrics.streamLabels
    ? {
      readers: gauge("stream_readers", "Readers of one stream.", ["stream"]),
      bitrate: gauge(
        "stream_bitrate_bytes_per_second",
        "Media bytes per second of one published stream.",
        ["stream"],
      ),
      fps: gauge("stream_fps", "Video frames per second of one published stream.", ["stream"]),
    }
    : undefined;

  const drops = new CarriedSums();
  const lost = new CarriedSums();
  const nacks = new CarriedSums();
  const rtpIn = new CarriedSums();
  const rtpInBytes = new CarriedSums();
  const rtpOut = new CarriedSums();
  const rtpDropped = new CarriedSums();
  const plis = new CarriedSums();

  /** Sets every scrape-time figure from the server's state. */
  function read(): void {
    for (const metric of [streams, framesPerSecond, capHeld, capMax, transcoders, engineJobs]) {
      metric.reset();
    }
    perStream?.readers.reset();
    perStream?.bitrate.reset();
    perStream?.fps.reset();
    for (const stream of services.streams.list()) readStream(stream);

    setCounter(droppedFrames, "provider", drops.totals());
    setCounter(webrtcLost, "kind", lost.totals());
    setCounter(webrtcNacks, undefined, nacks.totals());
    setCounter(webrtcPlis, undefined, plis.totals());
    setCounter(webrtcReceivedPackets, undefined, rtpIn.totals());
    setCounter(webrtcReceivedBytes, undefined, rtpInBytes.totals());
    setCounter(webrtcSentPackets, undefined, rtpOut.totals());
    setCounter(webrtcDroppedPackets, undefined, rtpDropped.totals());

    for (const [provider, tally] of providerTallies()) {
      setTotal(receivedBytes, { provider }, tally.receivedBytes);
      setTotal(receivedFrames, { provider }, tally.receivedFrames);
    }
    for (const [kind, tally] of readerTallies()) {
      readers.set({ kind }, tally.attached);
      setTotal(deliveredBytes, { kind }, tally.deliveredBytes);
      setTotal(deliveredFrames, { kind }, tally.deliveredFrames);
      setTotal(readerDrops, { kind }, tally.droppedFrames);
    }

    sessions.set(services.sessions.size);
    for (const [cap, figures] of Object.entries(services.limits)) {
      const { current, max, refused } = figures.toJSON();
      capHeld.set({ cap }, current);
      capMax.set({ cap }, max);
      setTotal(capRefused, { cap }, refused);
    }
    transcoders.set({ scheme: "transcoder" }, services.transcoders.list("transcoder").length);
    transcoders.set({ scheme: "transcoder2" }, services.transcoders.list("transcoder2").length);
    const mixerRecords = services.mixers.list();
    mixers.set(mixerRecords.length);
    mixerInputs.set(mixerRecords.reduce((n, m) => n + m.mediaSessions.length, 0));
    recorders.set(services.recorders.list().length);
    const engine = services.engine.figures();
    engineJobs.set({ state: "running" }, engine.running);
    engineJobs.set({ state: "queued" }, engine.queued);
    setTotal(engineRefused, {}, engine.refused);
    engineProcesses.set({ engine: services.engine.kind }, services.engine.runningJobs);
    kernelWorkers.set(WorkerRunner.liveWorkers);
    const mux = services.iceMux?.counters;
    if (mux) {
      setTotal(iceMuxDatagrams, { direction: "in" }, mux.datagramsIn);
      setTotal(iceMuxDatagrams, { direction: "out" }, mux.datagramsOut);
      setTotal(iceMuxDropped, { reason: "unknown_source" }, mux.droppedUnknownSource);
      setTotal(iceMuxDropped, { reason: "malformed" }, mux.droppedMalformed);
      setTotal(iceMuxDropped, { reason: "send_full" }, mux.sendDropped);
    }
  }

  function readStream(stream: RegisteredStream): void {
    const record = stream.record({ metrics: stream.published });
    const provider = record.mediaProvider;
    streams.inc({ provider, status: record.status, type: record.mediaType });
    if (stream instanceof WebRtcPublisher) {
      const received = stream.receivedRtp;
      rtpIn.add("", stream, received.packets);
      rtpInBytes.add("", stream, received.bytes);
    }
    const sent = (stream as { packetsSent?: unknown }).packetsSent;
    if (typeof sent === "number") rtpOut.add("", stream, sent);
    const dropped = (stream as { packetsDropped?: unknown }).packetsDropped;
    if (typeof dropped === "number") rtpDropped.add("", stream, dropped);
    if (!stream.published) return;
    framesPerSecond.inc({ provider }, record.fps);
    const m = record.metrics ?? {};
    if (provider === webrtcProvider) {
      lost.add("video", stream, m.VIDEO_LOST ?? 0);
      lost.add("audio", stream, m.AUDIO_LOST ?? 0);
      nacks.add("", stream, m.VIDEO_NACK ?? 0);
      plis.add("", stream, m.VIDEO_PLI ?? 0);
    } else if (m.VIDEO_LOST !== undefined) {
      drops.add(provider, stream, m.VIDEO_LOST);
    }
    if (perStream) {
      const labels = { stream: record.name };
      if (stream instanceof Stream) perStream.readers.set(labels, stream.readerCount);
      perStream.bitrate.set(labels, record.bitrate * 1000 / 8);
      perStream.fps.set(labels, record.fps);
    }
  }

  return {
    contentType: registry.contentType,
    async text() {
      read();
      return await processRegistry.metrics() + "\n" + await registry.metrics();
    },
  };
}

/** Sets a counter to an absolute total read elsewhere (a counter only has `inc`). */
function setTotal<L extends string>(
  metric: client.Counter<L>,
  labels: Partial<Record<L, string>>,
  total: number,
): void {
  if (Object.keys(labels).length === 0) {
    metric.reset();
    metric.inc(total);
    return;
  }
  metric.remove(labels);
  metric.inc(labels, total);
}

/** Sets a counter's totals by the values of one label (or of no label when `label` is unset). */
function setCounter<L extends string>(
  metric: client.Counter<L>,
  label: L | undefined,
  totals: Map<string, number>,
): void {
  for (const [value, total] of totals) {
    setTotal(metric, (label === undefined ? {} : { [label]: value }) as Record<L, string>, total);
  }
}
