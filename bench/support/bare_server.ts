/**
 * The anchor of the REST benchmark: the runtime's bare HTTP server reading the request's JSON
 * body (as every management operation does) and answering `[]`.
 */
const port = Number(Deno.args[0]);
Deno.serve({ hostname: "127.0.0.1", port, onListen: () => {} }, async (req) => {
  // GET is the bench's readiness probe.
  if (req.method === "POST") await req.json();
  return Response.json([]);
});
