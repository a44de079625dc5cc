/** TLS test certificates. */
import assert from "node:assert/strict";

/** A test CA and a certificate for 127.0.0.1 signed by it, made with openssl. */
export async function makeCertificates(
  dir: string,
): Promise<{ ca: string; cert: string; key: string }> {
  const openssl = async (...args: string[]) => {
    const out = await new Deno.Command("openssl", { args, cwd: dir, stdin: "null" }).output();
    assert.equal(out.code, 0, `openssl ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  };
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  await openssl(
    "req",
    "-x509",
    ...ec,
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "1",
    "-subj",
    "/CN=test CA",
  );
  await openssl("req", ...ec, "-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1");
  await Deno.writeTextFile(
    `${dir}/leaf.ext`,
    "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
  );
  await openssl(
    "x509",
    "-req",
    "-in",
    "leaf.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "cert.pem",
    "-days",
    "1",
    "-extfile",
    "leaf.ext",
  );
  return { ca: `${dir}/ca.pem`, cert: `${dir}/cert.pem`, key: `${dir}/key.pem` };
}
