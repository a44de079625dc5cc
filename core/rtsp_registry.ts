/**
 * RTSP pulls by camera URI: `/rtsp/startup` plays a camera and publishes it as a stream,
 * `/rtsp/terminate` tears it down. A pull lives until terminated (it reconnects a camera
 * that drops); ending its stream with `/stream/terminate` ends the pull too.
 */
import type { Config } from "../config.ts";
import { RtspError } from "../media/protocols/rtsp/errors.ts";
import { parseRtspUrl } from "../media/protocols/rtsp/url.ts";
import { RtspPullProvider } from "../media/providers/rtsp_pull.ts";
import {
  BadGatewayError,
  BadRequestError,
  ConflictError,
  NotFoundError,
  ParseError,
  ServiceUnavailableError,
} from "./errors.ts";
import type { Cap } from "./limits.ts";
import { descriptors } from "./fd_guard.ts";
import type { Logger } from "./log.ts";
import { OutboundPolicy } from "./outbound.ts";
import { redactUri, withoutSecrets } from "./redact.ts";
import type { RtspPullRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

interface RtspPull {
  uri: string;
  provider: RtspPullProvider;
}

/** The RTSP pulls of a server. */
export class RtspRegistry {
  #pulls = new Map<string, RtspPull>();
  #starting = new Set<string>();
  #config: Config;
  #streams: StreamRegistry;
  #log: Logger;
  #outbound: OutboundPolicy;
  #cap: Cap;
  #closed = false;

  /** @param cap the `pulls` cap, shared with RTMP pulls; a pull holds a slot from start to end. */
  constructor(config: Config, streams: StreamRegistry, log: Logger, cap: Cap) {
    this.#cap = cap;
    this.#config = config;
    this.#streams = streams;
    this.#log = log.child({ component: "rtsp" });
    this.#outbound = new OutboundPolicy(config.outbound.allowedHosts);
  }

  /**
   * Plays `uri` and publishes it as `localStreamName` (when none, the uri without its
   * credentials and secret parameters). Resolves once media flows. A malformed uri is a
   * 400, a host outside `outbound.allowedHosts` a 403, a uri already pulled or a name
   * already published a 409, a camera that cannot be reached or refuses a 502 naming the
   * reason, a pull or stream beyond its cap a 503 (a slot is taken before connecting, so
   * cameras that never answer cannot pile up).
   */
  async startup(uri: string, localStreamName?: string): Promise<void> {
    let hostname: string;
    try {
      ({ hostname } = parseRtspUrl(uri));
    } catch (err) {
      throw new BadRequestError("uri", (err as Error).message);
    }
    const checkHost = (host: string) => this.#outbound.check(host, "uri");
    checkHost(hostname);
    const name = localStreamName || withoutSecrets(uri);
    if (this.#pulls.has(uri) || this.#starting.has(uri)) {
      throw new ConflictError(`${redactUri(uri)} is already pulled`);
    }
    if (this.#streams.published(name)) {
      throw new ConflictError(`stream ${name} is already published`);
    }
    if (!descriptors.admit()) throw new ServiceUnavailableError(descriptors.refusal());
    if (!this.#cap.tryAcquire()) throw new ServiceUnavailableError(this.#cap.refusal());
    this.#starting.add(uri);
    let provider: RtspPullProvider;
    try {
      provider = await RtspPullProvider.start({
        uri,
        name,
        mediaSessionId: crypto.randomUUID(),
        transport: this.#config.rtsp.transport,
        udp: {
          hostname: this.#config.binds.media ?? this.#config.bind,
          min: this.#config.media.udpPortMin,
          max: this.#config.media.udpPortMax,
        },
        checkHost,
        log: this.#log,
      });
    } catch (err) {
      this.#cap.release();
      if (err instanceof RtspError || err instanceof ParseError) {
        throw new BadGatewayError(`camera ${redactUri(uri)}: ${err.message}`, { cause: err });
      }
      throw err;
    } finally {
      this.#starting.delete(uri);
    }
    try {
      if (this.#closed) throw new ConflictError("the server is stopping");
      this.#streams.add(provider.stream);
    } catch (err) {
      this.#cap.release();
      await provider.stop();
      throw err;
    }
    this.#pulls.set(uri, { uri, provider });
    this.#log.info("rtsp pull started", { stream: name, transport: provider.transport });
    provider.done.then(() => this.#forget(uri, provider), (err) => {
      this.#log.error("rtsp pull failed", { stream: name, err });
      this.#forget(uri, provider);
    });
  }

  /**
   * Tears the pull of `uri` down and ends its stream. `uri` is the one pulled or the
   * redacted one the records show, when it names one pull; an unknown uri is a 404.
   */
  async terminate(uri: string): Promise<void> {
    const pull = this.#pulls.get(uri) ?? this.#byRedacted(uri);
    if (!pull) throw new NotFoundError(`RTSP pull of ${redactUri(uri)} not found`);
    await pull.provider.stop();
    this.#forget(pull.uri, pull.provider);
  }

  /** The one pull whose redacted uri is `redacted`. */
  #byRedacted(redacted: string): RtspPull | undefined {
    const matches = [...this.#pulls.values()].filter((p) => redactUri(p.uri) === redacted);
    return matches.length === 1 ? matches[0] : undefined;
  }

  /** The RTSP pull records; uris show no secret. */
  list(): RtspPullRecord[] {
    return [...this.#pulls.values()].map(({ uri, provider }) => ({
      uri: redactUri(uri),
      toStream: provider.stream.name,
      status: provider.status,
    }));
  }

  /** Tears every pull down (server stop). */
  async closeAll(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#pulls.keys()].map((uri) => this.terminate(uri)));
  }

  #forget(uri: string, provider: RtspPullProvider): void {
    if (this.#pulls.get(uri)?.provider === provider) {
      this.#pulls.delete(uri);
      this.#cap.release();
    }
    this.#streams.remove(provider.stream);
    provider.stream.end();
  }
}
