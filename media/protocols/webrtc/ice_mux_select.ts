/**
 * Resolves `media.iceMux` at server start: the server's ICE mux on `ports.webrtcUdp` (0: the
 * first free port of the media range, then kept from the range's port pool), or none, and
 * why. `auto` opens it when libc loads over FFI (the server runs with --allow-ffi on glibc).
 */
import { libcUdp } from "../../send_engine/libc_udp.ts";
import { IceMux } from "./ice_mux.ts";
import { portPoolOf } from "./port_pool.ts";

/** The configured choice. */
export type IceMuxSetting = "auto" | "on" | "off";

/** What `openIceMux` needs of the configuration. */
export interface IceMuxConfig {
  setting: IceMuxSetting;
  /** Address the mux binds (the media bind address). */
  host: string;
  /** `ports.webrtcUdp`; 0 for the first free port of `portMin`..`portMax`. */
  port: number;
  portMin: number;
  portMax: number;
}

/** The opened mux (undefined: per-peer ports) and the reason, for the start log. */
export interface IceMuxChoice {
  mux?: IceMux;
  reason: string;
}

/**
 * Opens the mux the setting asks for. `on` throws when libc cannot be loaded; both `on` and
 * `auto` throw when the port is taken (Deno.errors.AddrInUse), as any listener would.
 */
export function openIceMux(config: IceMuxConfig): IceMuxChoice {
  if (config.setting === "off") return { reason: "media.iceMux is off" };
  const { libc, error } = libcUdp();
  if (!libc) {
    if (config.setting === "on") throw new Error(`media.iceMux is on but ${error}`);
    return { reason: `no FFI socket: ${error}` };
  }
  const mux = config.port !== 0
    ? IceMux.open({ host: config.host, port: config.port })
    : IceMux.openInRange(config.host, config.portMin, config.portMax);
  // Peers that still bind ports of the range (TCP listeners of ICE-TCP peers) must not probe it.
  if (mux.port >= config.portMin && mux.port <= config.portMax) {
    portPoolOf(config.portMin, config.portMax).reserve(mux.port);
  }
  const reason = config.setting === "on" ? "media.iceMux is on" : "libc loads over FFI";
  return { mux, reason };
}

/** Closes the mux and gives its port back to the range's pool. */
export async function closeIceMux(mux: IceMux, portMin: number, portMax: number): Promise<void> {
  await mux.close();
  if (mux.port >= portMin && mux.port <= portMax) portPoolOf(portMin, portMax).release(mux.port);
}
