/**
 * This server as a node of the CDN: it announces itself (role, groups, processing state,
 * load) in the cluster store, offers the streams published on it (origin), opens streams of
 * other nodes for its viewers (edge: one relay per stream, on demand), encodes profiles for
 * edges (transcoder) and enforces stream access lists on every node.
 */
import type { Config } from "../../config.ts";
import { serverVersion } from "../version.ts";
import type { Logger } from "../log.ts";
import type { PlayGate, StreamRegistry } from "../stream_registry.ts";
import type { RegisteredStream } from "../../media/stream_record.ts";
import { Stream } from "../../media/stream.ts";
import type { Track } from "../../media/frame.ts";
import { ConflictError, NotFoundError, ServiceUnavailableError } from "../errors.ts";
import type {
  CdnRole,
  ClusterChange,
  ClusterStore,
  NodeEntry,
  NodeRecord,
  ProcessingState,
} from "../cluster/store.ts";
import { ClusterView } from "../cluster/cluster_view.ts";
import { ViewerAccess } from "./viewer_access.ts";
import { EdgePulls, type PullTarget } from "./edge_pulls.ts";
import { type CdnProfile, ProfileTranscodes } from "./profile_transcodes.ts";
import type { DecoderHub } from "../../media/transcoder/decoded_source.ts";
import type { CodecEngine } from "../../media/engine/engine.ts";

/** Path of the relay endpoint of a node's CDN listener. */
export const relayPath = "/cdn/relay";
/** Header carrying the CDN secret between nodes. */
export const secretHeader = "x-cdn-secret";
/** How long an edge keeps sending new viewers of a profile to the transcoder it elected, in ms. */
const electionMemoryMs = 10_000;

/** A route of the CDN: a stream offered by a node. */
export interface RouteValue {
  stream: string;
  nodeId: string;
  /** The node's CDN listener URL. */
  url: string;
  role: CdnRole;
  /** Profile name for a transcoder's output; absent for a published stream. */
  profile?: string;
  /** Descriptions of the stream's tracks (`VIDEO{...}`, `AUDIO{...}`). */
  tracks: string[];
}

/** What a node needs of the server. */
export interface CdnNodeOptions {
  config: Config;
  streams: StreamRegistry;
  store: ClusterStore;
  /** Close the store with the node (false when others share it). */
  ownsStore: boolean;
  /** Decoders and engine a transcoder node encodes profiles with. */
  decoders: DecoderHub;
  engine: CodecEngine;
  log: Logger;
}

/** One CDN node. */
export class CdnNode implements PlayGate {
  #options: CdnNodeOptions;
  #log: Logger;
  #id = "";
  #url = "";
  #startedAtMs = Date.now();
  /** The state `/cdn/enforce_state` set; unset: the state follows the load. */
  #enforced?: ProcessingState;
  #view?: ClusterView;
  #heartbeat?: ReturnType<typeof setInterval>;
  #heartbeatFailing = false;
  #unwatchStreams?: () => void;
  #unwatchView?: () => void;
  /** Routes of the streams published here: stream name → route id. */
  #routes = new Map<string, string>();
  /** Routes of the profile encodings this node (transcoder) offers, by output name. */
  #profileRoutes = new Map<string, { routeId: string; value: RouteValue }>();
  #routeSeq = 0;
  #access: ViewerAccess;
  #pulls: EdgePulls;
  #transcodes: ProfileTranscodes;
  #elected = new Map<string, { nodeId: string; atMs: number }>();
  #roundRobin = 0;
  /** Relays this node serves, so `reset_inbound` can cut them: peer node id → closers. */
  #served = new Map<string, Set<(reason: string) => void>>();

  constructor(options: CdnNodeOptions) {
    this.#options = options;
    this.#log = options.log.child({ component: "cdn" });
    this.#access = new ViewerAccess((stream) => this.#acl(stream));
    this.#pulls = new EdgePulls(options.streams, this.#log, options.config.cdn.pullGraceMs);
    this.#transcodes = new ProfileTranscodes({
      streams: options.streams,
      decoders: options.decoders,
      engine: options.engine,
      log: this.#log,
      graceMs: options.config.cdn.pullGraceMs,
      openSource: (name) => this.#openRemote(name, undefined),
      // Peers learn at once that the node's load (and maybe state) changed.
      onChange: () => void this.#beat(),
    });
  }

  /** Id of this node in the CDN: the host and port of its CDN listener. */
  get id(): string {
    return this.#id;
  }

  get role(): CdnRole {
    return this.#options.config.cdn.role;
  }

  /**
   * Joins the CDN once the CDN listener is up at `host:port`: loads the shared state,
   * announces the node and its streams, and installs itself as the streams' play gate.
   */
  async start(host: string, port: number): Promise<void> {
    this.#id = `${host.includes(":") ? `[${host}]` : host}:${port}`;
    this.#url = `ws://${this.#id}`;
    const { store, streams, config } = this.#options;
    this.#view = await ClusterView.open(store);
    this.#unwatchView = this.#view.watch((change) => this.#onChange(change));
    // Before the heartbeat, so peers that see this node alive again no longer see them.
    this.#withdrawStale();
    await this.#beat();
    this.#heartbeat = setInterval(() => void this.#beat(), config.cdn.heartbeatMs);
    this.#unwatchStreams = streams.watch((event, stream) => this.#onPublish(event, stream));
    for (const stream of streams.list()) {
      if (stream.published) this.#onPublish("published", stream);
    }
    streams.setGate(this);
    this.#log.info("joined the cdn", { id: this.#id, role: this.role });
  }

  /** Leaves the CDN: routes withdrawn, pulls and transcodes ended, heartbeats stopped. */
  async close(): Promise<void> {
    clearInterval(this.#heartbeat);
    this.#options.streams.setGate(undefined);
    this.#unwatchStreams?.();
    this.#unwatchView?.();
    await this.#pulls.closeAll("node stopped");
    await this.#transcodes.closeAll("node stopped");
    for (const routeId of this.#routes.values()) {
      await this.#options.store.delete("route", routeId).catch(() => false);
    }
    this.#routes.clear();
    this.#view?.close();
    if (this.#options.ownsStore) await this.#options.store.close();
  }

  #record(): NodeRecord {
    const { streams, config } = this.#options;
    const list = streams.list();
    const cores = navigator.hardwareConcurrency || 1;
    return {
      id: this.#id,
      role: this.role,
      groups: config.cdn.groups,
      url: this.#url,
      version: serverVersion,
      processingState: this.#processingState(),
      load: {
        streams: list.filter((s) => s.published).length,
        players: list.filter((s) => !s.published).length,
        transcodes: this.#transcodes.size,
        loadAverage: Deno.loadavg()[0] / cores,
      },
      startedAtMs: this.#startedAtMs,
    };
  }

  /**
   * The enforced state, else the load's: a transcoder past `cdn.maxEncodings` encodings or
   * `cdn.loadThreshold` load per core announces `cdn.thresholdState`.
   */
  #processingState(): ProcessingState {
    if (this.#enforced) return this.#enforced;
    const { maxEncodings, loadThreshold, thresholdState } = this.#options.config.cdn;
    if (this.role !== "transcoder") return "NEW_STREAMS_ALLOWED";
    const cores = navigator.hardwareConcurrency || 1;
    const loaded = (maxEncodings > 0 && this.#transcodes.size >= maxEncodings) ||
      (loadThreshold > 0 && Deno.loadavg()[0] / cores >= loadThreshold);
    return loaded ? thresholdState : "NEW_STREAMS_ALLOWED";
  }

  async #beat(): Promise<void> {
    // Not alive before the view is loaded and stale routes withdrawn (a resync beats then).
    if (!this.#view?.synced) return;
    try {
      await this.#options.store.heartbeat(this.#record(), this.#options.config.cdn.nodeTtlMs);
      if (this.#heartbeatFailing) this.#log.info("cluster store reachable again");
      this.#heartbeatFailing = false;
    } catch (err) {
      if (!this.#heartbeatFailing) this.#log.warn("heartbeat failed", { err });
      this.#heartbeatFailing = true;
    }
  }

  #onChange(change: ClusterChange): void {
    if (change.type === "resync") {
      // The store lost what was written while it was away (a Redis restart): say it again.
      // Stale routes withdrawn before the heartbeat: peers see them gone before this node alive.
      this.#withdrawStale();
      void this.#beat();
      for (const name of this.#routes.keys()) this.#announce(name);
      for (const { routeId, value } of this.#profileRoutes.values()) {
        void this.#options.store.put("route", routeId, value).catch(() => undefined);
      }
      for (const name of this.#aclStreams()) this.#access.enforce(name);
      return;
    }
    if (change.type === "put" || change.type === "delete") {
      if (change.kind === "acl") this.#access.enforce(change.key);
    }
  }

  /**
   * Withdraws the routes under this node's id that it does not offer: a run of it killed
   * before it could withdraw them left them (peers would pull streams no longer here).
   */
  #withdrawStale(): void {
    const mine = new Set([
      ...this.#routes.values(),
      ...[...this.#profileRoutes.values()].map((route) => route.routeId),
    ]);
    for (const [routeId, value] of this.#view?.records("route") ?? []) {
      if ((value as RouteValue).nodeId !== this.#id || mine.has(routeId)) continue;
      void this.#options.store.delete("route", routeId).catch(() => false);
    }
  }

  #aclStreams(): string[] {
    return [...(this.#view?.records("acl").keys() ?? [])];
  }

  #offersStreams(): boolean {
    return this.role === "origin";
  }

  #onPublish(event: "published" | "unpublished", stream: RegisteredStream): void {
    if (!this.#offersStreams() || !(stream instanceof Stream)) return;
    const { store } = this.#options;
    if (event === "published") {
      // A stream published again starts open, whatever its last publish's list was.
      if (this.#acl(stream.name)) void store.delete("acl", stream.name).catch(() => false);
      this.#routes.set(stream.name, `${this.#routeSeq++}-${this.#id}-${this.#routes.size}`);
      this.#announce(stream.name);
    } else {
      const routeId = this.#routes.get(stream.name);
      if (routeId === undefined) return;
      this.#routes.delete(stream.name);
      void store.delete("route", routeId).catch((err) =>
        this.#log.warn("route not withdrawn", { stream: stream.name, err })
      );
    }
  }

  #announce(name: string): void {
    const routeId = this.#routes.get(name);
    const stream = this.#options.streams.published(name);
    if (routeId === undefined || !(stream instanceof Stream)) return;
    const value: RouteValue = {
      stream: name,
      nodeId: this.#id,
      url: this.#url,
      role: this.role,
      tracks: stream.tracks.map(describeTrack),
    };
    void this.#options.store.put("route", routeId, value).catch((err) =>
      this.#log.warn("route not announced", { stream: name, err })
    );
  }

  #acl(stream: string): string[] | undefined {
    return this.#view?.get("acl", stream) as string[] | undefined;
  }

  #profiles(): Map<string, CdnProfile> {
    return (this.#view?.records("profile") ?? new Map()) as Map<string, CdnProfile>;
  }

  #alive(nodeId: string): NodeEntry | undefined {
    const entry = this.#view?.node(nodeId);
    return entry?.alive ? entry : undefined;
  }

  /** Routes of published streams of `name` on live origins. */
  #originRoutes(name: string): RouteValue[] {
    const routes: RouteValue[] = [];
    for (const value of this.#view?.records("route").values() ?? []) {
      const route = value as RouteValue;
      if (route.stream === name && !route.profile && this.#alive(route.nodeId)) {
        routes.push(route);
      }
    }
    return routes;
  }

  #target(nodeId: string, url: string, query: Record<string, string>): PullTarget {
    const secret = this.#options.config.cdn.secret;
    const params = new URLSearchParams({ ...query, node: this.#id });
    return {
      nodeId,
      url: `${url}${relayPath}?${params}`,
      headers: secret ? { [secretHeader]: secret } : {},
    };
  }

  // ---- the play gate ----

  /** See PlayGate.open: access check, then the local stream or one from another node. */
  async open(name: string, key: string | undefined): Promise<RegisteredStream | undefined> {
    this.#access.check(name, key);
    const local = this.#options.streams.published(name);
    if (local) return local;
    if (this.role !== "edge") return undefined;
    return await this.#openRemote(name, this.#profileOf(name));
  }

  /** See PlayGate.watchViewer. */
  watchViewer(name: string, key: string | undefined, stop: (info: string) => void): () => void {
    return this.#access.watch(name, key, stop);
  }

  #profileOf(name: string): { source: string; profile: string } | undefined {
    for (const profile of this.#profiles().keys()) {
      if (name.length > profile.length && name.endsWith(profile)) {
        return { source: name.slice(0, -profile.length), profile };
      }
    }
    return undefined;
  }

  /**
   * The stream `name` brought from the node that has it: an origin's published stream, or
   * a transcoder's encoding of `profile`. Undefined when no node offers the source.
   */
  async #openRemote(
    name: string,
    profile: { source: string; profile: string } | undefined,
  ): Promise<Stream | undefined> {
    const { store } = this.#options;
    if (!store.available) {
      throw new ServiceUnavailableError("the cluster store is unreachable: no new CDN routes");
    }
    const source = profile?.source ?? name;
    const origins = this.#originRoutes(source);
    if (origins.length === 0) return undefined;
    if (!profile) {
      const origin = origins[0];
      return await this.#pulls.pull(
        name,
        () => this.#target(origin.nodeId, origin.url, { stream: name }),
      );
    }
    return await this.#pulls.pull(name, () => {
      const transcoder = this.#electTranscoder(name, source, profile.profile);
      return this.#target(transcoder.record.id, transcoder.record.url, {
        stream: source,
        profile: profile.profile,
      });
    });
  }

  /**
   * A transcoder for `profile` of `source`: one already encoding it, whatever its state (the
   * encoding is shared); else round-robin among live transcoders of this node's groups that
   * take new streams, or that already decode `source` when they only take connections. The
   * last choice for the same name is kept for a while so simultaneous viewers land on one
   * transcoder.
   */
  #electTranscoder(name: string, source: string, profile: string): NodeEntry {
    const now = Date.now();
    const remembered = this.#elected.get(name);
    if (remembered && now - remembered.atMs < electionMemoryMs) {
      const entry = this.#alive(remembered.nodeId);
      if (entry) return entry;
    }
    const groups = this.#options.config.cdn.groups;
    const encodings = [...this.#view?.records("route").values() ?? []]
      .map((value) => value as RouteValue)
      .filter((route) => route.stream === source && route.profile);
    const eligible = (this.#view?.nodes() ?? []).filter(({ record, alive }) => {
      const transcodes = record.role === "transcoder" ||
        (record.role === "origin" && this.#options.config.cdn.originAllowedToTranscode);
      const sameGroup = groups.length === 0
        ? record.groups.length === 0
        : record.groups.some((group) => groups.includes(group));
      return alive && transcodes && sameGroup;
    }).sort((a, b) => a.record.id.localeCompare(b.record.id));
    const encoding = eligible.find(({ record }) =>
      encodings.some((route) => route.nodeId === record.id && route.profile === profile)
    );
    const candidates = encoding
      ? [encoding]
      : eligible.filter(({ record }) =>
        record.processingState === "NEW_STREAMS_ALLOWED" ||
        (record.processingState === "CONNECTIONS_ALLOWED" &&
          encodings.some((route) => route.nodeId === record.id))
      );
    if (candidates.length === 0) throw new ServiceUnavailableError("No available transcoders");
    const chosen = candidates[this.#roundRobin++ % candidates.length];
    this.#elected.set(name, { nodeId: chosen.record.id, atMs: now });
    return chosen;
  }

  // ---- the CDN listener's side ----

  /**
   * The stream a peer node asks this one to relay: a published stream, or (transcoder) the
   * encoding of `profile` of an origin's stream. NotFoundError when there is none.
   */
  async relaySource(name: string, profile: string | undefined): Promise<Stream> {
    if (profile === undefined) {
      const stream = this.#options.streams.published(name);
      if (stream instanceof Stream && !stream.ended) return stream;
      throw new NotFoundError(`stream ${name} not found`);
    }
    const settings = this.#profiles().get(profile);
    if (!settings) throw new NotFoundError(`profile ${profile} not found`);
    const output = await this.#transcodes.open(name, profile, settings);
    if (!output) throw new NotFoundError(`stream ${name} not found`);
    this.#announceProfile(name, profile, output);
    return output;
  }

  /** Offers an encoding to the CDN once, for as long as it runs (every edge shares it). */
  #announceProfile(source: string, profile: string, output: Stream): void {
    if (this.#profileRoutes.has(output.name)) return;
    const routeId = `${this.#routeSeq++}-${this.#id}-${profile}`;
    const value: RouteValue = {
      stream: source,
      nodeId: this.#id,
      url: this.#url,
      role: this.role,
      profile,
      tracks: output.tracks.map(describeTrack),
    };
    this.#profileRoutes.set(output.name, { routeId, value });
    void this.#options.store.put("route", routeId, value).catch(() => undefined);
    output.done.then(() => {
      this.#profileRoutes.delete(output.name);
      return this.#options.store.delete("route", routeId).catch(() => false);
    });
  }

  /** Registers a relay served to node `peer` so a connection reset can cut it. */
  trackServed(peer: string, close: (reason: string) => void): () => void {
    let closers = this.#served.get(peer);
    if (!closers) this.#served.set(peer, closers = new Set());
    closers.add(close);
    return () => closers.delete(close);
  }

  /** True when `secret` is the CDN's (or the CDN has none). */
  admitsPeer(secret: string | null): boolean {
    const expected = this.#options.config.cdn.secret;
    return expected === undefined || secret === expected;
  }

  // ---- REST ----

  /** Nodes for `/cdn/show_nodes`. */
  showNodes(): Record<string, unknown>[] {
    return (this.#view?.nodes() ?? []).map(({ record, alive }) => ({
      id: record.id,
      globalState: alive ? "ACTIVE" : "PASSIVE",
      processingState: record.processingState,
      role: record.role.toUpperCase(),
      version: record.version,
      groups: record.groups,
      load: record.load,
      inbound: record.id === this.#id ? undefined : this.#pullsFrom(record.id),
      outbound: record.id === this.#id ? undefined : this.#served.get(record.id)?.size ?? 0,
    }));
  }

  #pullsFrom(nodeId: string): number {
    return this.#pulls.list().filter((pull) => pull.target.nodeId === nodeId).length;
  }

  /** Routes for `/cdn/show_routes`: route id → stream name. */
  showRoutes(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [routeId, value] of this.#view?.records("route") ?? []) {
      const route = value as RouteValue;
      out[routeId] = route.profile ? `${route.stream}${route.profile}` : route.stream;
    }
    return out;
  }

  /** States for `/cdn/show_state`. */
  showState(): string[] {
    return [this.#processingState()];
  }

  /** `/cdn/enforce_state`: the processing state this node announces from now. */
  async enforceState(state: ProcessingState): Promise<void> {
    this.#enforced = state;
    await this.#options.store.heartbeat(this.#record(), this.#options.config.cdn.nodeTtlMs);
  }

  /** `/cdn/stream/show_routes`: the hops a viewer of `name` would go through, with tracks. */
  streamRoutes(name: string): Record<string, string[]> {
    const profile = this.#profileOf(name);
    const source = profile?.source ?? name;
    const out: Record<string, string[]> = {
      "REQUESTED-PROFILE": profile ? [profile.profile] : [],
    };
    let hop = 0;
    for (const route of this.#originRoutes(source)) {
      out[`${hop++}-STREAM-${route.nodeId}`] = route.tracks;
    }
    if (profile) {
      for (const value of this.#view?.records("route").values() ?? []) {
        const route = value as RouteValue;
        if (route.stream === source && route.profile === profile.profile) {
          out[`${hop++}-PROFILE-${route.nodeId}`] = route.tracks;
        }
      }
    }
    for (const pull of this.#pulls.list()) {
      if (pull.name === name) {
        out[`${hop++}-PROXY-${this.#id}`] = pull.stream.tracks.map(describeTrack);
      }
    }
    if (hop === 0) throw new NotFoundError(`stream ${name} has no route`);
    return out;
  }

  /** `/cdn/stream/access_list/add`: keys added to the list of a stream published here. */
  async aclAdd(name: string, keys: string[]): Promise<void> {
    this.#requireOwnStream(name);
    const current = this.#acl(name) ?? [];
    await this.#options.store.put("acl", name, [...new Set([...current, ...keys])]);
  }

  /** `/cdn/stream/access_list/remove`: keys removed; the viewers that used them are stopped. */
  async aclRemove(name: string, keys: string[]): Promise<void> {
    const current = this.#requireAcl(name);
    await this.#options.store.put("acl", name, current.filter((key) => !keys.includes(key)));
  }

  /** `/cdn/stream/access_list/delete`: the list dropped (the stream is open again). */
  async aclDelete(name: string): Promise<void> {
    this.#requireAcl(name);
    await this.#options.store.delete("acl", name);
  }

  /** `/cdn/stream/access_list/print`. */
  aclPrint(name: string): string[] {
    const keys = this.#acl(name);
    if (keys) return keys;
    this.#requireOwnStream(name);
    return [];
  }

  #requireOwnStream(name: string): void {
    if (!this.#options.streams.published(name) && this.#originRoutes(name).length === 0) {
      throw new NotFoundError(`stream ${name} not found`);
    }
  }

  #requireAcl(name: string): string[] {
    const keys = this.#acl(name);
    if (!keys) throw new NotFoundError(`stream ${name} has no access list`);
    return keys;
  }

  /** `/cdn/profile/add`; 409 when the name exists. */
  async profileAdd(name: string, profile: CdnProfile): Promise<void> {
    if (this.#profiles().has(name)) throw new ConflictError(`profile ${name} exists`);
    await this.#options.store.put("profile", name, profile);
  }

  /** `/cdn/profile/modify`: the given fields changed. */
  async profileModify(name: string, changes: CdnProfile): Promise<void> {
    const current = this.#profiles().get(name);
    if (!current) throw new NotFoundError(`profile ${name} not found`);
    await this.#options.store.put("profile", name, {
      ...(current.audio || changes.audio ? { audio: { ...current.audio, ...changes.audio } } : {}),
      ...(current.video || changes.video ? { video: { ...current.video, ...changes.video } } : {}),
    });
  }

  /** `/cdn/profile/print`. */
  profilePrint(): Record<string, CdnProfile> {
    return Object.fromEntries(this.#profiles());
  }

  /** `/cdn/profile/remove`. */
  async profileRemove(name: string): Promise<void> {
    if (!await this.#options.store.delete("profile", name)) {
      throw new NotFoundError(`profile ${name} not found`);
    }
  }

  /** `/cdn/remove_node`: a PASSIVE node forgotten; an ACTIVE one is refused (409). */
  async removeNode(id: string): Promise<void> {
    const entry = this.#view?.node(id);
    if (!entry) throw new NotFoundError(`node ${id} not found`);
    if (entry.alive) {
      throw new ConflictError(`node ${id} is ACTIVE; only a PASSIVE node is removed`);
    }
    await this.#options.store.removeNode(id);
    // Its routes go with it: nothing will withdraw them now.
    for (const [routeId, value] of this.#view?.records("route") ?? []) {
      if ((value as RouteValue).nodeId === id) await this.#options.store.delete("route", routeId);
    }
  }

  /**
   * `/cdn/connection/reset_*`: cuts the relays pulled from (`outbound`) or served to
   * (`inbound`) a node, or all; viewers reopen them on their next play.
   */
  resetConnections(direction: "inbound" | "outbound" | "all", nodeId?: string): number {
    if (nodeId !== undefined && !this.#view?.node(nodeId)) {
      throw new NotFoundError(`node ${nodeId} not found`);
    }
    let reset = 0;
    if (direction !== "inbound") reset += this.#pulls.closeFrom(nodeId, "connection reset");
    if (direction !== "outbound") {
      for (const [peer, closers] of this.#served) {
        if (nodeId !== undefined && peer !== nodeId) continue;
        for (const close of [...closers]) {
          close("connection reset");
          reset++;
        }
      }
    }
    return reset;
  }
}

/** A track as `/cdn/stream/show_routes` lists it, e.g. `VIDEO{width=640, height=360, codec='h264'}`. */
export function describeTrack(track: Track): string {
  const codec = track.codec.toLowerCase();
  return track.kind === "video"
    ? `VIDEO{width=${track.width ?? 0}, height=${track.height ?? 0}, codec='${codec}'}`
    : `AUDIO{rate=${track.sampleRate ?? track.clockRate}, channels=${
      track.channels ?? 1
    }, codec='${codec}'}`;
}
