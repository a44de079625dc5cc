/**
 * A mixer: many streams made into one. Each input is decoded once (its pictures through the
 * decoder hub, its audio to PCM), its pictures are laid out by the composer and its audio
 * summed by the audio mixer, and the output Stream gets both encoded again. The output runs
 * on its own clock from startup: a stalled input shows its last picture and plays silence,
 * no input shows the background, and nothing an input does holds the output back.
 *
 * Timing: output video tick n is presented at n / fps and output audio frame n at n x 20 ms,
 * both from the same start, so the output's A/V sync is by construction. An input's
 * pictures are placed on the output clock by an offset (`now + videoDelayMs` at the picture
 * that came through fastest), re-taken when its timeline jumps; its audio plays after the
 * audio mixer's jitter buffer. Both paths hold a streaming engine's input about as long.
 */
import type { Logger } from "../../core/log.ts";
import { ConflictError, NotFoundError } from "../../core/errors.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { Stream } from "../stream.ts";
import type { StreamDirectory } from "../stream_record.ts";
import type { DecoderHub, PictureNeed, SourceSubscription } from "../transcoder/decoded_source.ts";
import { pipelineVideoClockHz, type VideoEncoder } from "../transcoder/video_codec.ts";
import { createVideoEncoder } from "../transcoder/video_encoder.ts";
import type { PlacedWatermark } from "../transcoder/rendition.ts";
import { AudioMixer } from "./audio_mixer.ts";
import { AvEncoder } from "./av_encoder.ts";
import { pictureBuffers } from "./buffer_pool.ts";
import { i420Size, type YuvColor } from "./i420.ts";
import type { CustomLayout, LayoutName } from "./layout.ts";
import { McuOutput, mcuOutputName } from "./mcu_output.ts";
import { PcmDecoder, PcmEncoder, type PcmFormat } from "./pcm_codec.ts";
import { type RawVideoFrame, VideoComposer } from "./video_composer.ts";

/** `mediaProvider` of a mixer's output stream. */
export const mixerMediaProvider = "Mixer";
/**
 * How far ahead of the output clock an input's pictures are placed, in ms: room for the
 * decoder's bursts, which would otherwise arrive behind the clock and be dropped. A chunked
 * decoder (ffmpeg.wasm) hands over a GOP of up to 2 s at once, after a run.
 */
const videoDelayMs = { streaming: 150, chunked: 3000 };
/**
 * An input picture this far ahead of the delay came through faster than the one that set
 * the offset, which is then re-taken from it, in ms. Within a chunked decoder's burst every
 * picture comes at once, so only a burst early by more than the delay re-takes it.
 */
const videoEarlySlackMs = { streaming: 50, chunked: 3000 };
/** An input picture this far behind the delay re-takes the offset (a stall, a jump), in ms. */
const videoResyncMs = 300;
/** Highest input frame rate the composer's queues are sized for, in frames per second. */
const maxInputFps = 60;
/** Audio an input buffers before it plays, in ms; about what its pictures are held. */
const audioJitterMs = 100;
/** How far an input's sound may be from its pictures' time before it is moved, in ms. */
const audioAlignToleranceMs = 20;
/** Most audio an input may buffer, in ms: a decoder's start-up burst is cut to this. */
const audioMaxDelayMs = 250;
/** Side of the black picture shown for a muted input, in pixels (16:9). */
const mutedPicture = { width: 32, height: 18 };

/** What the output is encoded as. */
export interface MixerSettings {
  /** Output size in pixels, both even. */
  width: number;
  height: number;
  /** Output frames per second. */
  fps: number;
  /** Frames from one keyframe to the next. */
  keyFrameInterval: number;
  /** Video bitrate in kbit/s (0: the encoder's choice for the size). */
  videoBitrateKbps: number;
  /** Audio sample rate in Hz (48000 for Opus). */
  sampleRate: number;
  /** Audio channels, 1 or 2. */
  channels: number;
  /** Audio bitrate in kbit/s (0: the codec's default). */
  audioBitrateKbps: number;
}

/** What a mixer is built from. */
export interface MixerOptions {
  /** Name of the output stream. */
  name: string;
  /** mediaSessionId of the output stream. */
  mediaSessionId: string;
  settings: MixerSettings;
  hasVideo: boolean;
  hasAudio: boolean;
  layout: LayoutName | CustomLayout;
  /** Colour around and between the pictures. */
  background?: YuvColor;
  /** An I420 picture of the output's size under the inputs. */
  backgroundImage?: RawVideoFrame;
  watermark?: PlacedWatermark;
  /** Where the output is registered. */
  streams: StreamDirectory;
  hub: DecoderHub;
  engine: CodecEngine;
  log: Logger;
  /** Called once when the mixer has ended, whatever the reason. */
  onEnded: (reason: string) => void;
  /**
   * MCU mode: each input also gets an output stream with the mix without its own sound
   * (see mcu_output.ts).
   */
  mcuAudio?: boolean;
  /** Called after an input has left (removed, or its stream ended), with the inputs left. */
  onInputLeft?: (remaining: number) => void;
}

/** How an input is mixed. */
export interface InputSettings {
  /** Audio level, 0 (silent) to 100 (as it is); higher values amplify. */
  audioLevel: number;
  /** True: the input's tile is black. */
  videoMuted: boolean;
}

/** An input as the mixer record shows it. */
export interface MixerInputInfo extends InputSettings {
  /** Name of the input stream. */
  name: string;
  /** mediaSessionId of the input stream. */
  mediaSessionId: string;
}

/** Counters of a mixer. */
export interface MixerStats {
  /** Output video frames encoded. */
  videoFrames: number;
  /** Output audio frames encoded. */
  audioFrames: number;
  /** Input pictures the composer did not show (late, superseded, overflowing). */
  droppedPictures: number;
  /** Times an input's picture timeline was re-placed on the output clock. */
  videoResyncs: number;
  /** Output ticks not composed: every kernel Worker was still busy. */
  skippedTicks: number;
  /** Ticks the encoder refused (it was behind). */
  encoderDrops: number;
}

interface Input extends MixerInputInfo {
  source: Stream;
  subscription?: SourceSubscription;
  pcm?: PcmDecoder;
  mcu?: McuOutput;
  /** Added to a picture's pts to place it on the output clock (90 kHz); set at the first. */
  offset?: number;
  /** Output pts of the last picture given to the composer. */
  lastPts: number;
  /** Source time of the first audio frame decoded, in seconds. */
  audioStartSec?: number;
  /** Sample frames decoded so far, at the mixer's rate (the decoder fills gaps with silence). */
  decodedFrames: number;
}

/** Many streams mixed into one output stream. */
export class Mixer {
  readonly output: Stream;
  readonly #options: MixerOptions;
  readonly #inputs = new Map<string, Input>();
  #composer: VideoComposer | undefined;
  #encoder: VideoEncoder | undefined;
  #audio: AudioMixer | undefined;
  /** The sound's encoder: its own ffmpeg, or the A/V encoder that also encodes the video. */
  #audioEncoder: Pick<PcmEncoder, "push" | "close"> | undefined;
  #videoTrack: Track | undefined;
  #audioTrack: Track | undefined;
  #format: PcmFormat;
  #startMs = 0;
  /** How the engine decodes: a picture at a time, or a GOP at a time. */
  #pace: "streaming" | "chunked";
  #videoFrames = 0;
  #audioFrames = 0;
  #resyncs = 0;
  #ending: Promise<void> | undefined;
  #ended = false;

  private constructor(options: MixerOptions, audio: AudioMixer | undefined) {
    this.#options = options;
    this.#audio = audio;
    const { settings, engine, log } = options;
    this.#format = { sampleRate: settings.sampleRate, channels: settings.channels };
    this.#pace = engine.start ? "streaming" : "chunked";
    const tracks: Track[] = [];
    let videoTrack: Track | undefined;
    if (options.hasVideo) {
      videoTrack = {
        id: tracks.length,
        kind: "video",
        codec: "H264",
        clockRate: pipelineVideoClockHz,
        width: settings.width,
        height: settings.height,
      };
      tracks.push(videoTrack);
      this.#videoTrack = videoTrack;
    }
    let audioTrack: Track | undefined;
    if (audio) {
      audioTrack = {
        id: tracks.length,
        kind: "audio",
        codec: "OPUS",
        clockRate: settings.sampleRate,
        sampleRate: settings.sampleRate,
        channels: settings.channels,
        config: { codec: "OPUS" },
      };
      tracks.push(audioTrack);
      this.#audioTrack = audioTrack;
    }
    this.output = new Stream({
      name: options.name,
      mediaSessionId: options.mediaSessionId,
      tracks,
      mediaProvider: mixerMediaProvider,
      stopProvider: (info) => this.stop(info),
      lostVideoFrames: () => {
        const { droppedPictures, skippedTicks, encoderDrops } = this.stats;
        return droppedPictures + skippedTicks + encoderDrops;
      },
    });
    try {
      if (videoTrack) {
        const { width, height, fps } = settings;
        this.#composer = new VideoComposer({
          width,
          height,
          frameRate: fps,
          layout: options.layout,
          fit: "letterbox",
          background: options.background,
          backgroundImage: options.backgroundImage,
          watermark: options.watermark && { ...options.watermark.image, ...options.watermark },
          maxQueuedFrames: Math.ceil(maxInputFps * (videoDelayMs[this.#pace] / 1000 + 0.2)),
          pool: pictureBuffers,
        });
        const video = {
          codec: "H264" as const,
          width,
          height,
          fps,
          keyFrameInterval: settings.keyFrameInterval,
          bitrateKbps: settings.videoBitrateKbps,
        };
        if (audioTrack && engine.start) {
          // One ffmpeg for both: a process and its pipes fewer per mixer.
          const av = new AvEncoder({
            engine,
            video,
            videoTrack,
            format: this.#format,
            audioTrack,
            audioBitrate: settings.audioBitrateKbps * 1000,
            onFrame: (frame) => this.#emit(frame),
            log: log.child({ stage: "encoder" }),
          });
          this.#encoder = av.video;
          this.#audioEncoder = av;
        } else {
          this.#encoder = createVideoEncoder({
            engine,
            settings: video,
            track: videoTrack,
            onFrame: (frame) => this.#emit(frame),
            log: log.child({ stage: "video encoder" }),
          });
        }
      }
      if (audioTrack && !this.#audioEncoder) {
        this.#audioEncoder = new PcmEncoder({
          engine,
          format: this.#format,
          track: audioTrack,
          bitrate: settings.audioBitrateKbps * 1000,
          onFrame: (frame) => this.#emit(frame),
          log: log.child({ stage: "audio encoder" }),
        });
      }
    } catch (err) {
      this.#closeStages();
      throw err;
    }
  }

  /**
   * A running mixer with no input: its output is registered (a name in use is a
   * ConflictError) and shows the background with silence until inputs are added.
   */
  static async create(options: MixerOptions): Promise<Mixer> {
    const { settings, hasAudio } = options;
    const audio = hasAudio
      ? await AudioMixer.create({
        sampleRate: settings.sampleRate,
        channels: settings.channels,
        jitterDelayMs: audioJitterMs,
        maxDelayMs: audioMaxDelayMs,
      })
      : undefined;
    let mixer: Mixer;
    try {
      mixer = new Mixer(options, audio);
    } catch (err) {
      audio?.close();
      throw err;
    }
    try {
      options.streams.add(mixer.output);
    } catch (err) {
      await mixer.#closeStages();
      throw err;
    }
    mixer.#start();
    return mixer;
  }

  /** Counters since start. */
  get stats(): MixerStats {
    return {
      videoFrames: this.#videoFrames,
      audioFrames: this.#audioFrames,
      droppedPictures: this.#composer?.stats.droppedFrames ?? 0,
      videoResyncs: this.#resyncs,
      skippedTicks: this.#composer?.stats.skippedTicks ?? 0,
      encoderDrops: this.#encoder?.dropped ?? 0,
    };
  }

  /** True once the mixer has ended. */
  get ended(): boolean {
    return this.#ended;
  }

  /** The inputs, in the order they were added. */
  inputs(): MixerInputInfo[] {
    return [...this.#inputs.values()].map(({ name, mediaSessionId, audioLevel, videoMuted }) => ({
      name,
      mediaSessionId,
      audioLevel,
      videoMuted,
    }));
  }

  /** True when a stream of this name is an input. */
  has(name: string): boolean {
    return this.#inputs.has(name);
  }

  /**
   * Adds `source` as an input; a stream already in the mixer is a ConflictError. The input
   * leaves on its own when its stream ends.
   */
  add(source: Stream, settings: InputSettings): void {
    if (this.#ending) throw new ConflictError(`mixer ${this.#options.name} has ended`);
    if (this.#inputs.has(source.name)) {
      throw new ConflictError(`stream ${source.name} is already in mixer ${this.#options.name}`);
    }
    if (source === this.output) {
      throw new ConflictError(`mixer ${this.#options.name} cannot mix its own output`);
    }
    const { hub, engine, log } = this.#options;
    const name = source.name;
    const input: Input = {
      name,
      mediaSessionId: source.mediaSessionId,
      ...settings,
      source,
      lastPts: -Infinity,
      decodedFrames: 0,
    };
    this.#inputs.set(name, input);
    // Placed in the layout before its first picture: the tile shows at once.
    this.#composer?.addInput(name, { screen: name.endsWith("#desktop") });
    const mcu = this.#options.mcuAudio === true && this.#audio !== undefined;
    if (this.#audio) {
      this.#audio.addInput(name, { ...this.#format, gain: gainOf(settings), minusOne: mcu });
    }
    if (mcu) input.mcu = this.#mcuOutput(input);
    input.subscription = hub.subscribe(source, {
      onPicture: (picture) => this.#onPicture(input, picture),
      onAudio: (frame) => {
        if (!input.pcm) return;
        input.audioStartSec ??= frame.pts / input.subscription!.audio!.clockRate;
        input.pcm.push(frame);
      },
      onEnd: () => {
        if (this.#inputs.get(name) === input) void this.#removeInput(input, "stream ended");
      },
    }, this.#pictureNeed(input));
    // The other inputs' tiles changed with the layout.
    this.#retile();
    const audioTrack = input.subscription.audio;
    if (this.#audio && audioTrack) {
      try {
        input.pcm = new PcmDecoder({
          engine,
          track: audioTrack,
          format: this.#format,
          onPcm: (samples) => this.#onPcm(input, samples),
          log: log.child({ input: name, stage: "audio decoder" }),
        });
      } catch (err) {
        void this.#removeInput(input, "audio decoder failed");
        throw err;
      }
    }
    if (settings.videoMuted) this.#showMuted(input);
    log.info("input added", { input: name, inputs: this.#inputs.size });
  }

  /** Removes the input named `name`; a NotFoundError when it is not in the mixer. */
  async remove(name: string): Promise<void> {
    const input = this.#inputs.get(name);
    if (!input) throw new NotFoundError(`stream ${name} not found in mixer ${this.#options.name}`);
    await this.#removeInput(input, "removed");
  }

  /** Changes how the input `name` is mixed. */
  set(name: string, settings: Partial<InputSettings>): void {
    const input = this.#inputs.get(name);
    if (!input) throw new NotFoundError(`stream ${name} not found in mixer ${this.#options.name}`);
    if (settings.audioLevel !== undefined) {
      input.audioLevel = settings.audioLevel;
      this.#audio?.setGain(name, gainOf(input));
    }
    if (settings.videoMuted !== undefined && settings.videoMuted !== input.videoMuted) {
      input.videoMuted = settings.videoMuted;
      if (input.videoMuted) this.#showMuted(input);
    }
  }

  /** Draws `watermark` over the output from its next frame; undefined removes it. */
  setWatermark(watermark: PlacedWatermark | undefined): void {
    this.#composer?.setWatermark(watermark && { ...watermark.image, ...watermark });
  }

  /**
   * Draws `watermark` over the tile of input `name` from its next frame, (x, y) from the
   * tile's top-left; undefined removes it.
   */
  setInputWatermark(name: string, watermark: PlacedWatermark | undefined): void {
    if (!this.#inputs.has(name)) {
      throw new NotFoundError(`stream ${name} not found in mixer ${this.#options.name}`);
    }
    this.#composer?.setInputWatermark(name, watermark && { ...watermark.image, ...watermark });
  }

  /** Lays the inputs out by `layout` from the next frame. */
  setLayout(layout: LayoutName | CustomLayout): void {
    this.#composer?.setLayout(layout);
    this.#retile();
  }

  /** Ends the mixer: every input leaves, the output stream ends (idempotent). */
  stop(reason: string): Promise<void> {
    this.#ending ??= this.#end(reason);
    return this.#ending;
  }

  #start(): void {
    this.#startMs = performance.now();
    const { log } = this.#options;
    this.#composer?.start(
      (frame) => {
        // The frame's buffer goes back to the composer once in the encoder's pipe: a
        // 1280x720 frame is 1.4 MB, allocated and zeroed anew 30 times a second otherwise.
        const recycle = () => this.#composer!.recycle(frame);
        if (!this.#encoder!.push(frame, recycle)) recycle();
      },
      (err) => log.warn("composing a frame failed", { err }),
    );
    this.#audio?.start(
      (frame) => {
        this.#audioEncoder!.push(frame.samples, frame.pts);
        for (const [name, samples] of frame.minusOne) {
          this.#inputs.get(name)?.mcu?.pushAudio(samples, frame.pts);
        }
      },
      (err) => log.warn("mixing audio failed", { err }),
    );
    log.info("mixer started", { ...this.#options.settings });
  }

  /**
   * The pictures an input needs: as large as its tile (the decoder scales them down to it,
   * the composer fits what comes), none without video.
   */
  #pictureNeed(input: Input): PictureNeed {
    const tile = this.#composer?.tile(input.name);
    return tile ? { width: tile.width, height: tile.height } : "none";
  }

  /** Tells every input's decoder the size of its tile after the layout changed. */
  #retile(): void {
    // While ending, inputs leave one by one: the others' tiles growing is no reason to
    // start larger decoders.
    if (!this.#composer || this.#ending) return;
    for (const input of this.#inputs.values()) input.subscription?.need(this.#pictureNeed(input));
  }

  /** The output clock now, in 90 kHz. */
  #nowPts(): number {
    return Math.round((performance.now() - this.#startMs) * pipelineVideoClockHz / 1000);
  }

  #onPicture(input: Input, picture: RawVideoFrame): void {
    if (this.#inputs.get(input.name) !== input || input.videoMuted || !this.#composer) return;
    const toClock = pipelineVideoClockHz / 1000;
    const target = this.#nowPts() + videoDelayMs[this.#pace] * toClock;
    const lag = input.offset === undefined ? NaN : picture.pts + input.offset - target;
    // The picture that came through fastest sets the offset: the first one usually comes
    // with the decoder's start-up delay, and the burst after it would queue ever ahead.
    if (lag > videoEarlySlackMs[this.#pace] * toClock || !(lag >= -videoResyncMs * toClock)) {
      if (input.offset !== undefined && lag < 0) this.#resyncs++;
      input.offset = target - picture.pts;
    }
    const pts = picture.pts + input.offset!;
    if (pts <= input.lastPts) return;
    input.lastPts = pts;
    // The hub's picture is this input's alone (or shared read-only): handed over.
    this.#composer.push(input.name, { ...picture, pts }, true);
  }

  /**
   * Queues decoded sound of an input, placed on the output clock by the offset of its
   * pictures: the newest sample plays when a picture of its time would show. An input
   * without pictures plays after the audio mixer's jitter buffer.
   */
  #onPcm(input: Input, samples: Int16Array): void {
    if (this.#inputs.get(input.name) !== input) return;
    const audio = this.#audio!;
    audio.push(input.name, samples);
    const { sampleRate, channels } = this.#format;
    input.decodedFrames += samples.length / channels;
    if (input.offset === undefined || input.audioStartSec === undefined) return;
    const newestSec = input.audioStartSec + input.decodedFrames / sampleRate;
    const playAt = newestSec * pipelineVideoClockHz + input.offset;
    // Measured from the mixed position, not the wall clock: when the event loop stalls, the
    // mixing and the buffer fall behind together and nothing is cut or padded.
    const aheadFrames = Math.round(playAt * sampleRate / pipelineVideoClockHz) - audio.position;
    audio.align(input.name, aheadFrames, Math.round(audioAlignToleranceMs * sampleRate / 1000));
  }

  /** The MCU output of `input`, or none (logged) when its name is taken. */
  #mcuOutput(input: Input): McuOutput | undefined {
    const { engine, streams, log, settings } = this.#options;
    const name = mcuOutputName(this.#options.name, input.name);
    try {
      return new McuOutput({
        name,
        video: this.#videoTrack,
        audio: this.#audioTrack!,
        format: this.#format,
        bitrate: settings.audioBitrateKbps * 1000,
        engine,
        streams,
        log: log.child({ mcu: name }),
        onStop: () => {
          void input.mcu?.close();
          input.mcu = undefined;
        },
      });
    } catch (err) {
      log.warn("MCU output not made", { input: input.name, name, err });
      return undefined;
    }
  }

  /** Shows a black picture in the input's tile, from a little ahead of the clock. */
  #showMuted(input: Input): void {
    if (!this.#composer) return;
    const { width, height } = mutedPicture;
    const data = new Uint8Array(i420Size(width, height));
    data.fill(16, 0, width * height);
    data.fill(128, width * height);
    const delay = videoDelayMs[this.#pace] * pipelineVideoClockHz / 1000;
    const pts = Math.max(input.lastPts + 1, this.#nowPts() + delay);
    input.lastPts = pts;
    this.#composer.push(input.name, { width, height, data, pts });
  }

  #emit(frame: MediaFrame): void {
    if (this.#ended) return;
    if (this.output.tracks[frame.trackId].kind === "video") {
      this.#videoFrames++;
      for (const input of this.#inputs.values()) input.mcu?.pushVideo(frame);
    } else {
      this.#audioFrames++;
    }
    this.output.push(frame);
  }

  async #removeInput(input: Input, reason: string): Promise<void> {
    if (this.#inputs.get(input.name) !== input) return;
    this.#inputs.delete(input.name);
    input.subscription?.release();
    if (this.#composer && !this.#ended) {
      this.#composer.removeInput(input.name);
      this.#retile();
    }
    if (this.#audio && !this.#ended) this.#audio.removeInput(input.name);
    await Promise.all([input.pcm?.close(), input.mcu?.close()]);
    this.#options.log.info("input removed", { input: input.name, reason });
    if (!this.#ending) this.#options.onInputLeft?.(this.#inputs.size);
  }

  async #closeStages(): Promise<void> {
    this.#composer?.close();
    this.#audio?.close();
    await Promise.all([this.#encoder?.close(), this.#audioEncoder?.close()]);
  }

  async #end(reason: string): Promise<void> {
    await Promise.all([...this.#inputs.values()].map((input) => this.#removeInput(input, reason)));
    this.#ended = true;
    await this.#closeStages();
    this.output.end();
    this.#options.streams.remove(this.output);
    this.#options.log.info("mixer ended", { reason });
    this.#options.onEnded(reason);
  }
}

/** The audio mixer's linear gain for an input's level (100 = as it is). */
function gainOf(settings: InputSettings): number {
  return Math.max(0, settings.audioLevel) / 100;
}
