/**
 * Hosts the server may connect to on a client's request (RTSP/RTMP pulls, RTMP pushes,
 * redirects of cameras): `outbound.allowedHosts` of the configuration, so a REST caller
 * cannot point the server at internal services (SSRF). Patterns match the literal host of
 * the URL: a name is not resolved, so an allowed name may still resolve to any address.
 */
import { ForbiddenError } from "./errors.ts";

/** One compiled pattern: a test on the normalized host. */
type HostTest = (host: string) => boolean;

/** The outbound host policy of a server; with no pattern every host is allowed. */
export class OutboundPolicy {
  readonly #tests: HostTest[];

  /** Compiles `patterns`; a malformed CIDR pattern throws. */
  constructor(readonly patterns: readonly string[]) {
    this.#tests = patterns.map(compilePattern);
  }

  /** True when `host` (a URL's hostname, IPv6 with or without brackets) may be reached. */
  allows(host: string): boolean {
    if (this.#tests.length === 0) return true;
    const normalized = normalizeHost(host);
    // inet_aton forms (`2130706433`, `0x7f.1`) reach addresses no dotted pattern names.
    if (isAmbiguousNumericHost(normalized)) return false;
    return this.#tests.some((test) => test(normalized));
  }

  /** Throws a ForbiddenError naming `field` when `host` may not be reached. */
  check(host: string, field: string): void {
    if (!this.allows(host)) {
      throw new ForbiddenError(`host ${host} is not in outbound.allowedHosts`, field);
    }
  }
}

/** Lowercase, without IPv6 brackets or a trailing dot. */
function normalizeHost(host: string): string {
  return host.toLowerCase().replace(/^\[(.*)\]$/, "$1").replace(/\.$/, "");
}

/** True when `pattern` is a valid host pattern (configuration check). */
export function isHostPattern(pattern: string): boolean {
  try {
    compilePattern(pattern);
    return pattern.trim() !== "";
  } catch {
    return false;
  }
}

/** Compiles a CIDR (`10.0.0.0/8`), a glob (`cam*.example.com`, `10.0.0.*`) or a literal. */
function compilePattern(pattern: string): HostTest {
  const normalized = normalizeHost(pattern.trim());
  if (normalized.includes("/")) return compileCidr(normalized);
  if (normalized.includes(":")) return (host) => host === normalized;
  const labels = normalized.split(".").map(compileLabel);
  return (host) => {
    const parts = host.split(".");
    return parts.length === labels.length && labels.every((test, i) => test.test(parts[i]));
  };
}

/** One label of a glob: `*` matches any run of characters within the label. */
function compileLabel(label: string): RegExp {
  const escaped = label.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"));
  return new RegExp(`^${escaped.join("[^.]*")}$`);
}

/** An IPv4 CIDR pattern. */
function compileCidr(pattern: string): HostTest {
  const [address, bitsText] = pattern.split("/");
  const base = parseIpv4(address);
  const bits = Number(bitsText);
  if (base === undefined || !/^\d{1,2}$/.test(bitsText) || bits > 32) {
    throw new Error(`outbound pattern ${pattern}: an IPv4 CIDR like 10.0.0.0/8 is expected`);
  }
  const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
  return (host) => {
    const value = parseIpv4(host);
    return value !== undefined && ((value & mask) >>> 0) === ((base & mask) >>> 0);
  };
}

/** The 32-bit value of a dotted-quad IPv4 address in canonical decimal form. */
function parseIpv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  let value = 0;
  for (const part of parts) {
    if (!/^(0|[1-9]\d{0,2})$/.test(part) || Number(part) > 255) return undefined;
    value = value * 256 + Number(part);
  }
  return value;
}

/** A host made only of numeric labels that is not a canonical dotted quad. */
function isAmbiguousNumericHost(host: string): boolean {
  const labels = host.split(".");
  return labels.every((l) => /^(0x[0-9a-f]*|\d+)$/.test(l)) && parseIpv4(host) === undefined;
}
