#!/usr/bin/env node
// The JavaScript half of the service bundle (scripts/device/bundle-service.sh, which see): the
// inference backend (src/main.ts), its tokenizer worker and the per-token HTTP latency benchmark
// (bench/http-latency.mjs), bundled by esbuild from their TypeScript sources (so never from a
// stale dist/) into OUT as ES modules for Node 24 (OUT/package.json says so), their shared code
// split into chunks. What is not JavaScript stays beside them:
// - the `tokenizers` package's index.js is bundled; its native binding is left external and
//   only tokenizers.linux-x64-gnu.node is copied next to the chunks, where that index.js
//   requires it from (the other platforms' bindings, 60 MB, stay behind);
// - CommonJS code in ESM: a banner gives every chunk `require`, `__filename` and `__dirname`
//   of its own file (createRequire), as esbuild's ESM output has none;
// - Swagger UI's assets (GET /docs) go to OUT/static; its plugin looks for them at
//   `__dirname/../static`, rewritten here to `__dirname/static`.
// The addon (strata_native.node) is not bundled: the service loads STRATA_NATIVE_ADDON.
// Other files that bundled code reads beside itself, checked in the bundle: @fastify/swagger's and
// ioredis' own package.json (optional, read in a try), pino's transport worker and OpenTelemetry's
// gRPC protos (never used: no pino transports, OTLP over HTTP). Chat templates come from the model
// directory and the grammar library (llguidance) is linked into the addon.
//   node scripts/device/bundle-service.mjs OUT
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const out = process.argv[2];
if (!out) {
  console.error('usage: node scripts/device/bundle-service.mjs OUT');
  process.exit(2);
}
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const pkg = join(repo, 'services/inference-backend');
const common = join(repo, 'services/common');
// esbuild is in the workspace (vite's); the CLI package of the pinned version.
const esbuildDir = join(repo, 'node_modules/.pnpm/esbuild@0.28.2/node_modules/esbuild');
if (!existsSync(esbuildDir)) throw new Error(`no esbuild 0.28.2 at ${esbuildDir}: pnpm install first`);
const esbuild = createRequire(join(esbuildDir, 'package.json'))('./lib/main.js');

const requireFromBackend = createRequire(join(pkg, 'package.json'));
const tokenizersDir = dirname(requireFromBackend.resolve('tokenizers/package.json'));
const swaggerUiDir = dirname(
  createRequire(join(common, 'package.json')).resolve('@fastify/swagger-ui/package.json'),
);

// The benchmark imports the backend as '../dist/X.js' (how it runs in the workspace); the bundle
// takes the same modules from src/, so that it and the service share one copy of each.
const distToSrc = {
  name: 'bench-dist-to-src',
  setup(build) {
    build.onResolve({ filter: /^\.\.\/dist\/.*\.js$/ }, (args) => {
      if (!args.importer.startsWith(join(pkg, 'bench'))) return undefined;
      const file = join(pkg, 'src', args.path.slice('../dist/'.length).replace(/\.js$/, '.ts'));
      if (!existsSync(file)) throw new Error(`${args.importer}: ${args.path} has no source ${file}`);
      return { path: file };
    });
  },
};
const swaggerUiStatic = {
  name: 'swagger-ui-static',
  setup(build) {
    build.onLoad({ filter: /@fastify[\\/]swagger-ui[\\/]lib[\\/]routes\.js$/ }, (args) => {
      const text = readFileSync(args.path, 'utf8');
      const from = "path.join(__dirname, '..', 'static')";
      if (!text.includes(from))
        throw new Error(`${args.path} no longer has ${from}: update bundle-service.mjs`);
      return { contents: text.replace(from, "path.join(__dirname, 'static')"), loader: 'js' };
    });
  },
};

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await esbuild.build({
  entryPoints: {
    main: join(pkg, 'src/main.ts'),
    // encoder-worker.ts starts it as './tokenizer-worker.js' beside itself: every chunk is in OUT.
    'tokenizer-worker': join(pkg, 'src/model/tokenizer-worker.ts'),
    // http-workers.ts starts it as './http-worker.js' beside itself (STRATA_HTTP_WORKERS).
    'http-worker': join(pkg, 'src/inference/http-worker.ts'),
    'http-latency': join(pkg, 'bench/http-latency.mjs'),
  },
  outdir: out,
  bundle: true,
  splitting: true,
  chunkNames: 'chunk-[hash]',
  platform: 'node',
  format: 'esm',
  target: 'node24',
  alias: { '@strata/common': join(common, 'src/index.ts') },
  external: ['*.node'],
  banner: {
    js: [
      "import { createRequire as __bundleRequire } from 'node:module';",
      "import { fileURLToPath as __bundlePath } from 'node:url';",
      "import { dirname as __bundleDir } from 'node:path';",
      'const require = __bundleRequire(import.meta.url);',
      'const __filename = __bundlePath(import.meta.url);',
      'const __dirname = __bundleDir(__filename);',
    ].join(' '),
  },
  plugins: [distToSrc, swaggerUiStatic],
  legalComments: 'none',
  metafile: true,
  logLevel: 'warning',
});
if (result.errors.length > 0) process.exit(1);

// .js files as ES modules (the worker's name is tokenizer-worker.js).
writeFileSync(join(out, 'package.json'), `${JSON.stringify({ type: 'module', private: true })}\n`);
cpSync(join(tokenizersDir, 'tokenizers.linux-x64-gnu.node'), join(out, 'tokenizers.linux-x64-gnu.node'));
cpSync(join(swaggerUiDir, 'static'), join(out, 'static'), { recursive: true });

const outputs = Object.entries(result.metafile.outputs);
const total = outputs.reduce((sum, [, info]) => sum + info.bytes, 0);
console.log(
  `bundle: ${(total / 1e6).toFixed(1)} MB of JavaScript in ${outputs.length} files (main.js, tokenizer-worker.js, http-worker.js, ` +
    `http-latency.js and their shared chunks) from ${Object.keys(result.metafile.inputs).length} modules; ` +
    `tokenizers.linux-x64-gnu.node ${(statSync(join(out, 'tokenizers.linux-x64-gnu.node')).size / 1e6).toFixed(1)} MB; ` +
    `Swagger UI's assets; into ${out}`,
);
