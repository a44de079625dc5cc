/**
 * A SIP dialog (RFC 3261 §12): Call-ID, local and remote tags, the local and remote URIs of
 * From/To, the CSeq numbers of both sides, the remote target (the far end's Contact) and the
 * route set (Record-Route). It builds the requests sent inside the dialog and tells where the
 * next hop is; it checks that requests received belong to it and arrive in CSeq order.
 */
import { ParseError } from "../../../core/errors.ts";
import { parseCSeq } from "./headers.ts";
import { SipHeaders, type SipRequest, type SipResponse } from "./message.ts";
import { tagOf } from "./transport.ts";
import { formatSipUri, parseNameAddr, type SipUri } from "./uri.ts";

/** Max-Forwards of the requests a user agent originates (RFC 3261 §8.1.1.6). */
export const maxForwards = "70";

/** The URI of a name-addr header value (Contact, Route, Refer-To). */
export function uriOf(value: string): SipUri {
  return parseNameAddr(value).uri;
}

/** The header value a request must carry, or a ParseError naming it. */
export function required(message: SipRequest | SipResponse, name: string): string {
  const value = message.headers.get(name);
  if (value === undefined || value === "") throw new ParseError(`SIP message without ${name}`);
  return value;
}

/** A SIP request from its parts; `body` with `contentType` sets Content-Type. */
export function sipRequest(
  method: string,
  uri: string,
  headers: Iterable<[string, string]>,
  body?: string,
  contentType?: string,
): SipRequest {
  const h = new SipHeaders();
  for (const [name, value] of headers) h.add(name, value);
  if (body !== undefined && contentType !== undefined) h.set("Content-Type", contentType);
  return {
    kind: "request",
    method,
    uri,
    headers: h,
    body: body === undefined ? new Uint8Array() : new TextEncoder().encode(body),
  };
}

/** Request-URI, Route values and next-hop URI of a request sent in a dialog. */
export interface DialogRoute {
  requestUri: string;
  routes: string[];
  /** Where the request goes (before any outbound proxy). */
  nextHop: SipUri;
}

/** One dialog, from either side. */
export class SipDialog {
  /** Call-ID of the dialog. */
  readonly callId: string;
  /** Our tag. */
  readonly localTag: string;
  /** The far end's tag. */
  readonly remoteTag: string;
  /** Our From (requests we send) value, with our tag. */
  readonly localParty: string;
  /** The far end's value (To of requests we send), with its tag. */
  readonly remoteParty: string;
  /** CSeq number of the last request we sent in the dialog. */
  localSeq: number;
  /** CSeq number of the last request the far end sent, undefined before any. */
  remoteSeq?: number;
  /** The far end's Contact URI: the Request-URI of our requests. */
  remoteTarget: SipUri;
  /** Route values, in the order our requests carry them. */
  readonly routeSet: string[];

  private constructor(o: {
    callId: string;
    localTag: string;
    remoteTag: string;
    localParty: string;
    remoteParty: string;
    localSeq: number;
    remoteSeq?: number;
    remoteTarget: SipUri;
    routeSet: string[];
  }) {
    this.callId = o.callId;
    this.localTag = o.localTag;
    this.remoteTag = o.remoteTag;
    this.localParty = o.localParty;
    this.remoteParty = o.remoteParty;
    this.localSeq = o.localSeq;
    this.remoteSeq = o.remoteSeq;
    this.remoteTarget = o.remoteTarget;
    this.routeSet = o.routeSet;
  }

  /**
   * The dialog of a request we sent, from the 2xx (or 1xx with a To tag) that answered it
   * (§12.1.2): the route set is the Record-Route in reverse order.
   */
  static forUac(response: SipResponse): SipDialog {
    const from = required(response, "From");
    const to = required(response, "To");
    const localTag = tagOf(from);
    const remoteTag = tagOf(to);
    if (!localTag || !remoteTag) throw new ParseError("SIP response without From or To tag");
    return new SipDialog({
      callId: required(response, "Call-ID"),
      localTag,
      remoteTag,
      localParty: from,
      remoteParty: to,
      localSeq: parseCSeq(required(response, "CSeq")).seq,
      remoteTarget: uriOf(required(response, "Contact")),
      routeSet: response.headers.getAll("Record-Route").reverse(),
    });
  }

  /**
   * The dialog of a request we answer with `localTag` (§12.1.1): the route set is the
   * Record-Route in order.
   */
  static forUas(request: SipRequest, localTag: string): SipDialog {
    const from = required(request, "From");
    const remoteTag = tagOf(from);
    if (!remoteTag) throw new ParseError("SIP request without From tag");
    return new SipDialog({
      callId: required(request, "Call-ID"),
      localTag,
      remoteTag,
      localParty: `${required(request, "To")};tag=${localTag}`,
      remoteParty: from,
      localSeq: Math.floor(Math.random() * 10000),
      remoteSeq: parseCSeq(required(request, "CSeq")).seq,
      remoteTarget: uriOf(required(request, "Contact")),
      routeSet: request.headers.getAll("Record-Route"),
    });
  }

  /** Whether a request received belongs to this dialog (Call-ID and both tags). */
  matches(request: SipRequest): boolean {
    return request.headers.get("Call-ID") === this.callId &&
      tagOf(request.headers.get("To") ?? "") === this.localTag &&
      tagOf(request.headers.get("From") ?? "") === this.remoteTag;
  }

  /**
   * Checks the CSeq of a request received in the dialog (§12.2.2): false when lower than the
   * last one (to be answered 500); otherwise it becomes the remote sequence number.
   */
  acceptRemoteSeq(request: SipRequest): boolean {
    const { seq } = parseCSeq(required(request, "CSeq"));
    if (request.method === "ACK") return true;
    if (this.remoteSeq !== undefined && seq < this.remoteSeq) return false;
    this.remoteSeq = seq;
    return true;
  }

  /** Takes the far end's new Contact of a target refresh request or its 2xx (§12.2). */
  refreshTarget(message: SipRequest | SipResponse): void {
    const contact = message.headers.get("Contact");
    if (contact) this.remoteTarget = uriOf(contact);
  }

  /**
   * Request-URI and Route of a request in the dialog (§12.2.1.1): with a loose router first
   * (`;lr`) the Request-URI is the remote target; with a strict one it is that router's URI
   * and the remote target goes last in Route.
   */
  route(): DialogRoute {
    const target = formatSipUri(this.remoteTarget);
    if (this.routeSet.length === 0) {
      return { requestUri: target, routes: [], nextHop: this.remoteTarget };
    }
    const first = uriOf(this.routeSet[0]);
    if (first.params.has("lr")) {
      return { requestUri: target, routes: this.routeSet, nextHop: first };
    }
    const strict = { ...first, headers: new Map() };
    return {
      requestUri: formatSipUri(strict),
      routes: [...this.routeSet.slice(1), `<${target}>`],
      nextHop: first,
    };
  }

  /**
   * A new request in the dialog with the next CSeq number; `headers` follow the dialog's own
   * (Contact, Content-Type and the like).
   */
  request(
    method: string,
    headers: [string, string][] = [],
    body?: string,
    contentType?: string,
  ): SipRequest {
    this.localSeq += 1;
    return this.#build(method, this.localSeq, headers, body, contentType);
  }

  /** The ACK of our INVITE numbered `seq` answered 2xx (§13.2.2.4): same CSeq number. */
  ack(seq: number, headers: [string, string][] = [], body?: string, contentType?: string) {
    return this.#build("ACK", seq, headers, body, contentType);
  }

  #build(
    method: string,
    seq: number,
    headers: [string, string][],
    body: string | undefined,
    contentType: string | undefined,
  ): SipRequest {
    const { requestUri, routes } = this.route();
    const list: [string, string][] = [
      ["Max-Forwards", maxForwards],
      ["From", this.localParty],
      ["To", this.remoteParty],
      ["Call-ID", this.callId],
      ["CSeq", `${seq} ${method}`],
      ...routes.map((r): [string, string] => ["Route", r]),
      ...headers,
    ];
    return sipRequest(method, requestUri, list, body, contentType);
  }
}
