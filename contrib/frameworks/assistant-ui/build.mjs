// Bundles app.jsx (and iac-agent.js, React, assistant-ui) into dist/app.js: `node build.mjs`.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
const here = fileURLToPath(new URL(".", import.meta.url));
await build({
  entryPoints: [`${here}/app.jsx`],
  bundle: true,
  format: "esm",
  outfile: `${here}/dist/app.js`,
  jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' },
  minify: true,
  sourcemap: true,
  logLevel: "warning",
});
