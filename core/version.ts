/** Version of the server, reported by /health and the OpenAPI document. */
export const serverVersion = "0.1.0";
