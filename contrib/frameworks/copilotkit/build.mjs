// Bundles src/page.jsx into dist/page.js and dist/page.css (KaTeX's fonts, pulled in by
// CopilotKit's CSS, go to dist/ as files).
import { build } from "esbuild";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

await build({
  absWorkingDir: dirname(fileURLToPath(import.meta.url)),
  entryPoints: { page: "src/page.jsx" },
  bundle: true,
  outdir: "dist",
  format: "iife",
  target: "es2022",
  minify: true,
  jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' },
  loader: { ".woff2": "file", ".woff": "file", ".ttf": "file" },
  logLevel: "warning",
});
