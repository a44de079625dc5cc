/**
 * The connect handshake: `connection` → the backend's `/connect` hook (when configured) →
 * `getUserData` with the agreed connection object, which makes the SDK ESTABLISHED. A refusal
 * is told with `fail` (the SDK fires WARN) and the socket is closed (DISCONNECTED).
 */
import { z } from "zod";
import { hookPolicy, withoutFields } from "../core/hooks.ts";
import { randomToken } from "../core/ids.ts";
import type { ConnectionRecord } from "../core/records.ts";
import type { HandlerTable, SignalingContext } from "./handlers.ts";
import { closeCodes, SignalingSession } from "./session.ts";
import { attachSipPhone } from "./sip_phone.ts";
import { sfuAppKey } from "./sfu/sfu_app.ts";

/** Length of a session's authToken: 62^40 values, unguessable. */
const authTokenChars = 40;
/** Length of the random sipLogin WCS gives non-SIP sessions. */
const sipLoginChars = 20;
/**
 * Close code "Try Again Later" (IANA WebSocket registry): the refusal of a full server, which
 * a client may retry, unlike a policy refusal (1008).
 */
const tryAgainLaterCode = 1013;

/**
 * The `connection` object of the SDK (§3.3), and the backend's answer to `/connect`. Every
 * field is optional, and null stands for absent.
 */
const connectionObject = z.looseObject({
  appKey: z.string().min(1).nullish(),
  mediaProviders: z.array(z.string()).nullish(),
  // Optional fields may be null (the SFU SDK sends `authToken: null`): null means absent.
  keepAlive: z.boolean().nullish(),
  authToken: z.string().nullish(),
  clientVersion: z.string().nullish(),
  clientOSVersion: z.string().nullish(),
  clientBrowserVersion: z.string().nullish(),
  msePacketizationVersion: z.int().nullish(),
  custom: z.unknown().nullish(),
  clientInfo: z.record(z.string(), z.unknown()).nullish(),
  sipLogin: z.string().nullish(),
  // The SDK's phone example passes its port field's text ("5060", or "" when left empty).
  sipPort: z.union([
    z.int(),
    z.string().regex(/^\d{0,5}$/).transform((s) => s === "" ? undefined : Number(s)),
  ]).nullish(),
  sipRegisterRequired: z.boolean().nullish(),
  width: z.int().nullish(),
  height: z.int().nullish(),
  supportedResolutions: z.string().nullish(),
  useDTLS: z.boolean().nullish(),
  useWsTunnel: z.boolean().nullish(),
  useWsTunnelPacketization2: z.boolean().nullish(),
  useBase64BinaryEncoding: z.boolean().nullish(),
  origin: z.string().nullish(),
});
type ConnectionObject = z.output<typeof connectionObject>;

/** appKey of a connection that names none (the SDK's default too). */
export const defaultAppKey = "defaultApp";

/** The Connection record of a connection object; server-owned fields passed apart. */
function recordOf(
  c: ConnectionObject,
  owned: { sessionId: string; authToken: string; origin: string },
): ConnectionRecord {
  const custom = typeof c.custom === "object" && c.custom !== null && !Array.isArray(c.custom)
    ? { ...c.custom as Record<string, unknown> }
    : {};
  if (c.clientInfo) custom.clientInfo = c.clientInfo;
  return {
    custom,
    appKey: c.appKey ?? defaultAppKey,
    sessionId: owned.sessionId,
    origin: owned.origin,
    sipRegisterRequired: c.sipRegisterRequired ?? false,
    sipLogin: c.sipLogin ?? randomToken(sipLoginChars),
    sipPort: c.sipPort ?? 0,
    width: c.width ?? 0,
    height: c.height ?? 0,
    supportedResolutions: c.supportedResolutions ?? "",
    useDTLS: c.useDTLS ?? true,
    useWsTunnel: c.useWsTunnel ?? false,
    useWsTunnelPacketization2: c.useWsTunnelPacketization2 ?? false,
    useBase64BinaryEncoding: c.useBase64BinaryEncoding ?? false,
    // The SFU SDK never resumes a session (its authToken is always null): its participants
    // must leave the rooms when the socket is lost, not a resume window later.
    keepAlive: (c.keepAlive ?? false) && c.appKey !== sfuAppKey,
    msePacketizationVersion: c.msePacketizationVersion ?? 2,
    mediaProviders: c.mediaProviders ?? [],
    authToken: owned.authToken,
    clientVersion: c.clientVersion ?? "",
    clientOSVersion: c.clientOSVersion ?? "",
    clientBrowserVersion: c.clientBrowserVersion ?? "",
  };
}

/** Refuses the connection: `fail` to the client, the FAILED event, then the socket closes. */
function refuse(
  session: SignalingSession,
  ctx: SignalingContext,
  info: string,
  body?: object,
  closeCode: number = closeCodes.policy,
) {
  session.send("fail", { apiMethod: "ConnectionStatusEvent", status: "FAILED", info });
  if (body) {
    void ctx.services.hooks.invoke("ConnectionStatusEvent", {
      ...body,
      status: "FAILED",
      info,
    });
  }
  session.close(closeCode, info);
}

async function handleConnection(
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
): Promise<void> {
  if (!session.beginConnect()) {
    session.send("fail", { apiMethod: "connection", info: "the session is already connected" });
    return;
  }
  const parsed = connectionObject.safeParse(payload);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = issue.path.join(".") || "connection";
    refuse(session, ctx, `bad connection object: ${field}: ${issue.message}`);
    return;
  }
  const { services } = ctx;
  const { keepAlive, authToken } = parsed.data;
  if (keepAlive === true && authToken) {
    // A reconnect: the session given this token takes the socket over. An unknown or ended
    // token gets a new session (the client tells by its new sessionId and authToken).
    const kept = services.sessions.findByAuthToken(authToken);
    if (kept instanceof SignalingSession && kept.resume(session)) return;
    ctx.log.info("authToken of no resumable session: a new session", {
      clientAddress: session.endpoints.clientAddress,
    });
  }
  // Counted here rather than at the upgrade, so a browser over the cap learns why (a 503
  // before the upgrade reaches the SDK as a bare 1006). Held until the session ends.
  const sessions = services.limits.sessions;
  if (!sessions.tryAcquire()) {
    refuse(session, ctx, sessions.refusal(), undefined, tryAgainLaterCode);
    return;
  }
  void session.ended.then(() => sessions.release());
  const owned = {
    sessionId: session.sessionId,
    authToken: randomToken(authTokenChars),
    origin: session.endpoints.origin,
  };
  const { clientInfo: _inCustom, ...sent } = parsed.data;
  const record = recordOf(parsed.data, owned);
  if (!services.hooks.accepts(record.appKey)) {
    // No application to send its hooks to (spec §3.2): refused before any hook.
    refuse(session, ctx, `unknown appKey ${JSON.stringify(record.appKey)}`);
    return;
  }
  const body = { ...sent, ...record, nodeId: services.nodeId };
  const answer = await services.hooks.connect(body, ["authToken", "origin"]);
  if (!answer.ok) {
    refuse(session, ctx, `connection refused by the backend: ${answer.reason}`, body);
    return;
  }
  const agreed = connectionObject.safeParse(answer.body);
  if (!agreed.success) {
    const issue = agreed.error.issues[0];
    refuse(session, ctx, `bad connect answer: ${issue.path.join(".")}: ${issue.message}`, body);
    return;
  }
  const connection = answer.body;
  const finalRecord = recordOf(agreed.data, owned);
  const policy = hookPolicy(answer.restClientConfig, "connect");
  const forClient = withoutFields({ ...connection, status: "ESTABLISHED" }, policy.clientExclude);
  if (!session.establish(connection, finalRecord, answer.restClientConfig, forClient)) return;
  attachSipPhone(session, agreed.data, ctx);
  const event = await services.hooks.invoke(
    "ConnectionStatusEvent",
    { ...connection, status: "ESTABLISHED" },
    answer.restClientConfig,
  );
  if (!event.ok) session.send("fail", { apiMethod: "ConnectionStatusEvent", info: event.reason });
}

/** Registers the `connection` handler. */
export function registerConnection(handlers: HandlerTable): void {
  handlers.register("connection", handleConnection, { beforeEstablished: true });
}
