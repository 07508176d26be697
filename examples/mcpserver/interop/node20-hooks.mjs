// Module hooks of node20.mjs: the conformance CLI's `fs` resolves to fs with
// a globSync that throws (Node 20 has none).
const shim = "data:text/javascript," + encodeURIComponent(`
import fs from "node:fs";
export * from "node:fs";
export default fs;
export function globSync() {
  throw new Error("fs.globSync needs Node 22 (the conformance CLI's tier-check); server scenarios do not use it");
}
`);

export async function resolve(specifier, context, next) {
  if ((specifier === "fs" || specifier === "node:fs") && context.parentURL?.includes("/@modelcontextprotocol/conformance/")) {
    return { url: shim, shortCircuit: true };
  }
  return next(specifier, context);
}
