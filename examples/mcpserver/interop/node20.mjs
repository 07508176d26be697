// The conformance CLI (@modelcontextprotocol/conformance) imports fs.globSync,
// which Node added in 22, though only its tier-check command calls it. Node
// 20 then refuses to load the CLI at all. Preloaded with
// `node --import ./node20.mjs`, this hook gives the CLI's `fs` import a
// globSync that throws, so that the CLI loads and its server scenarios run;
// on Node 22 and later it changes nothing.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") {
  register("./node20-hooks.mjs", import.meta.url);
}
