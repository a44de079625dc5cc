/**
 * A SIP account of the user agent: its fields, their checks (a BadRequestError naming the
 * field) and what follows from them: the address-of-record, the Contact, the Request-URI of
 * a callee, and the next hop of a request (the outbound proxy, or the Request-URI's host).
 */
import { BadRequestError } from "../../../core/errors.ts";
import { defaultSipPort, type SipPeer, type SipTransportName } from "./transport.ts";
import { formatSipUri, parseHostPort, parseSipUri, type SipUri } from "./uri.ts";

/** One SIP account (a line) the user agent registers and calls from. */
export interface SipAccount {
  /** User part of our address-of-record and Contact. */
  login: string;
  /** Digest user (default login). */
  authenticationName?: string;
  password?: string;
  /** Registrar / domain host (name or IP). */
  domain: string;
  /** Port of the domain/proxy, default 5060. */
  port?: number;
  /** "host[:port]": every request of this account is sent there (Request-URI unchanged). */
  outboundProxy?: string;
  /** Default UDP. */
  transport?: SipTransportName;
  /** Display name in From. */
  visibleName?: string;
  /** Appended to our Contact URI parameters ("a=b;c"). */
  contactParams?: string;
  /** Expires asked in REGISTER, default 3600 s. */
  registerExpiresSec?: number;
}

/** Checks an account's fields; a BadRequestError names the first bad one. */
export function checkAccount(account: SipAccount): void {
  if (
    typeof account.login !== "string" || account.login === "" || /[\s@:<>"]/.test(account.login)
  ) {
    throw new BadRequestError("sipLogin", "SIP login must be a non-empty user name");
  }
  try {
    parseHostPort(account.domain, "domain");
  } catch {
    throw new BadRequestError("sipDomain", `bad SIP domain ${JSON.stringify(account.domain)}`);
  }
  if (account.domain.includes(":") && !account.domain.startsWith("[")) {
    // "host:port" in the domain is accepted by parseHostPort; a separate port field exists.
    throw new BadRequestError("sipDomain", "SIP domain must not carry a port (use sipPort)");
  }
  if (
    account.port !== undefined &&
    (!Number.isInteger(account.port) || account.port < 1 || account.port > 65535)
  ) {
    throw new BadRequestError("sipPort", `bad SIP port ${account.port}`);
  }
  if (account.outboundProxy !== undefined && account.outboundProxy !== "") {
    try {
      parseHostPort(account.outboundProxy, "outboundProxy");
    } catch {
      throw new BadRequestError("sipOutboundProxy", "SIP outbound proxy must be host[:port]");
    }
  }
  if (
    account.transport !== undefined && account.transport !== "UDP" && account.transport !== "TCP"
  ) {
    throw new BadRequestError("sipTransport", "SIP transport must be UDP or TCP");
  }
  if (account.visibleName !== undefined && /[\r\n]/.test(account.visibleName)) {
    throw new BadRequestError("visibleName", "SIP visible name must be one line");
  }
  if (account.contactParams !== undefined && /[\s<>",]/.test(account.contactParams)) {
    throw new BadRequestError("sipContactParams", "SIP contact params must be ;name=value");
  }
  const expires = account.registerExpiresSec;
  if (expires !== undefined && (!Number.isInteger(expires) || expires < 1)) {
    throw new BadRequestError("sipRegisterExpires", "SIP register expires must be seconds > 0");
  }
}

/** The transport of the account. */
export function accountTransport(account: SipAccount | undefined): SipTransportName {
  return account?.transport ?? "UDP";
}

/** Our address-of-record: sip:login@domain. */
export function accountUri(account: SipAccount): SipUri {
  return {
    scheme: "sip",
    user: account.login,
    host: account.domain,
    params: new Map(),
    headers: new Map(),
  };
}

/** The registrar / domain URI: sip:domain[:port]. */
export function domainUri(account: SipAccount): SipUri {
  const uri: SipUri = {
    scheme: "sip",
    host: account.domain,
    params: new Map(),
    headers: new Map(),
  };
  if (account.port !== undefined) uri.port = account.port;
  return uri;
}

/**
 * The Request-URI of a callee: a full sip:/sips: URI as given, `user@host` with sip: added,
 * or a user at the account's domain. A BadRequestError names `callee` when malformed.
 */
export function calleeUri(account: SipAccount, callee: string): SipUri {
  const text = callee.trim();
  try {
    if (/^sips?:/i.test(text)) return parseSipUri(text);
    if (text.includes("@")) return parseSipUri(`sip:${text}`);
    const uri = parseSipUri(`sip:${text}@${account.domain}`);
    if (account.port !== undefined) uri.port = account.port;
    return uri;
  } catch (e) {
    throw new BadRequestError(
      "callee",
      `bad SIP callee ${JSON.stringify(callee)}: ${(e as Error).message}`,
    );
  }
}

/** `<sip:user@address:port[;transport=tcp][;params]>`, the Contact of our requests and answers. */
export function contactValue(
  user: string | undefined,
  address: string,
  port: number,
  transport: SipTransportName,
  contactParams?: string,
): string {
  const uri: SipUri = { scheme: "sip", host: address, port, params: new Map(), headers: new Map() };
  if (user) uri.user = user;
  if (transport === "TCP") uri.params.set("transport", "tcp");
  const extra = contactParams?.replace(/^;+/, "") ?? "";
  return `<${formatSipUri(uri)}${extra === "" ? "" : `;${extra}`}>`;
}

/**
 * Where a request to `uri` goes (RFC 3261 §8.1.2 without DNS SRV): the account's outbound
 * proxy when it has one, else the URI's maddr or host and port; the transport is the URI's
 * `transport` parameter, else `transport`.
 */
export function nextHop(
  account: SipAccount | undefined,
  uri: SipUri,
  transport: SipTransportName,
): SipPeer {
  const named = uri.params.get("transport")?.toUpperCase();
  const chosen: SipTransportName = named === "TCP" ? "TCP" : named === "UDP" ? "UDP" : transport;
  if (account?.outboundProxy) {
    const { host, port } = parseHostPort(account.outboundProxy, "outboundProxy");
    return { transport: chosen, host, port: port ?? defaultSipPort };
  }
  return {
    transport: chosen,
    host: uri.params.get("maddr") || uri.host,
    port: uri.port ?? defaultSipPort,
  };
}

/** The user part of a From/To/Request URI, or the whole URI when it has none. */
export function partyName(uri: SipUri): string {
  return uri.user ?? formatSipUri(uri);
}
