/** The anchor of the REST benchmark: the runtime's bare HTTP server answering `[]`. */
const port = Number(Deno.args[0]);
Deno.serve({ hostname: "127.0.0.1", port, onListen: () => {} }, () => Response.json([]));
