// Each service's image recipe, checked structurally (no container engine runs here, so no image
// is built in CI): multi-stage, every base image pinned by tag, a non-root final USER, a
// HEALTHCHECK, EXPOSE equal to the port the service's config defaults to, and a command that
// starts the service. The Node services share services/Dockerfile (build args SERVICE and
// PORT, substituted here as docker does); the backend builds the native engine with nvcc on a
// CUDA -devel stage and runs on the matching -runtime image.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { execForm, find, imagePin, parseDockerfile, type Stage } from './support/dockerfile.js';
import { repoRoot } from './support/tools.js';

const services = [
  { dir: 'edge-gateway', runtime: /^node:24-slim$/, file: 'services/Dockerfile' },
  { dir: 'router-service', runtime: /^node:24-slim$/, file: 'services/Dockerfile' },
  { dir: 'observability', runtime: /^node:24-slim$/, file: 'services/Dockerfile' },
  {
    dir: 'inference-backend',
    runtime: /^nvidia\/cuda:[\d.]+-runtime-ubuntu24\.04$/,
    file: 'services/inference-backend/Dockerfile',
  },
];

/** The file with ${NAME} and $NAME of its ARGs replaced by `args`, as docker build --build-arg does. */
function withBuildArgs(text: string, args: Record<string, string>): string {
  return text.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, braced?: string, bare?: string) => {
    const name = (braced ?? bare) as string;
    return name in args ? (args[name] as string) : whole;
  });
}

/** The port a service listens on by default, read from its config source (`configFields.port(N)`). */
function configuredPort(dir: string): number {
  const src = readFileSync(join(repoRoot, 'services', dir, 'src/config.ts'), 'utf8');
  const m = /port:\s*configFields\.port\((\d+)\)/.exec(src);
  if (!m) throw new Error(`no default port in services/${dir}/src/config.ts`);
  return Number(m[1]);
}

describe.each(services)('$file for $dir', ({ dir, runtime, file }) => {
  const text = readFileSync(join(repoRoot, file), 'utf8');
  const stages = parseDockerfile(withBuildArgs(text, { SERVICE: dir, PORT: String(configuredPort(dir)) }));
  const final = stages.at(-1) as Stage;
  const stageNames = new Set(stages.map((s) => s.name).filter(Boolean));

  it('is multi-stage with every external image pinned by a tag (never latest)', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    const images = [
      ...stages.map((s) => s.image),
      ...stages.flatMap((s) =>
        find(s, 'COPY')
          .map((c) => /--from=(\S+)/.exec(c.args)?.[1])
          .filter((x): x is string => !!x),
      ),
    ].filter((image) => !stageNames.has(image));
    expect(images.length).toBeGreaterThan(0);
    for (const image of images) {
      const pin = imagePin(image);
      expect(pin, image).toBeDefined();
      expect(pin, image).not.toBe('latest');
    }
  });

  it('runs the final stage on the expected base as a non-root user', () => {
    expect(final.image).toMatch(runtime);
    const users = find(final, 'USER');
    expect(users.length).toBeGreaterThan(0);
    const user = (users.at(-1)?.args ?? '').split(':')[0] as string;
    expect(['root', '0']).not.toContain(user);
    expect(Number(user)).toBeGreaterThan(0);
  });

  it('declares a HEALTHCHECK on /health/live and EXPOSEs the configured port', () => {
    const [hc] = find(final, 'HEALTHCHECK');
    expect(hc?.args).toMatch(/^--interval=\d+s .*CMD \[/);
    expect(execForm(hc?.args as string)?.join(' ')).toContain('/health/live');
    const port = configuredPort(dir);
    expect(find(final, 'EXPOSE').map((e) => Number(e.args))).toEqual([port]);
    expect(find(final, 'ENV').some((e) => e.args.includes(`PORT=${port}`))).toBe(true);
  });

  it('starts the service: its dist/main.js, where the Helm chart runs it too', () => {
    const [cmd] = find(final, 'CMD');
    const command = execForm(cmd?.args as string);
    if (file === 'services/Dockerfile') {
      // One command for every service: main.js, written by the build, imports the service's.
      expect(command).toEqual(['node', 'main.js']);
      const runs = stages.flatMap((st) => find(st, 'RUN')).map((r) => r.args);
      expect(runs.some((r) => r.includes(`deploy --prod --legacy "/out/services/${dir}"`))).toBe(true);
      expect(runs.some((r) => r.includes(`> /out/main.js`) && r.includes(`"${dir}"`))).toBe(true);
      expect(find(final, 'WORKDIR').map((w) => w.args)).toEqual(['/app']);
    } else {
      expect(command).toEqual(['node', `services/${dir}/dist/main.js`]);
    }
  });

  it('deploys only its own package with production dependencies, copying files that exist', () => {
    const build = stages.find((s) => find(s, 'RUN').some((r) => r.args.includes('deploy --prod')));
    expect(build).toBeDefined();
    for (const copy of stages.flatMap((s) => find(s, 'COPY')).filter((c) => !c.args.startsWith('--from'))) {
      const sources = copy.args.split(/\s+/).slice(0, -1);
      for (const src of sources) expect(existsSync(join(repoRoot, src)), `${dir}: COPY ${src}`).toBe(true);
    }
  });
});

describe('services/Dockerfile build arguments', () => {
  const stages = parseDockerfile(readFileSync(join(repoRoot, 'services/Dockerfile'), 'utf8'));
  const checks = stages.flatMap((st) => find(st, 'RUN')).filter((r) => r.args.startsWith('case '));
  /** Runs the RUN line that checks `name` in sh, as the build would, with `value` in the environment. */
  const check = (name: string, value: string) => {
    const line = checks.find((r) => r.args.startsWith(`case "$${name}"`));
    if (!line) throw new Error(`no RUN case "$${name}" in services/Dockerfile`);
    return spawnSync('sh', ['-c', line.args], { env: { [name]: value }, encoding: 'utf8' });
  };

  it('refuses a missing or unknown SERVICE and a missing PORT, naming what it takes', () => {
    for (const service of ['edge-gateway', 'router-service', 'observability']) {
      expect(check('SERVICE', service).status).toBe(0);
    }
    for (const bad of ['', 'inference-backend', 'router']) {
      const r = check('SERVICE', bad);
      expect(r.status).toBe(1);
      expect(r.stderr).toContain('must be edge-gateway, router-service or observability');
    }
    expect(check('PORT', '8081').status).toBe(0);
    for (const bad of ['', '80a']) expect(check('PORT', bad).stderr).toContain('--build-arg PORT');
  });
});

describe('services/inference-backend/Dockerfile', () => {
  const stages = parseDockerfile(
    readFileSync(join(repoRoot, 'services/inference-backend/Dockerfile'), 'utf8'),
  );

  it('compiles the native engine with nvcc on a CUDA -devel stage of the same CUDA and Ubuntu', () => {
    const build = stages.find((s) => s.name === 'build') as Stage;
    expect(build.image).toMatch(/^nvidia\/cuda:[\d.]+-devel-ubuntu24\.04$/);
    expect(imagePin(build.image)?.replace('-devel', '-runtime')).toBe(
      imagePin((stages.at(-1) as Stage).image),
    );
    expect(find(build, 'ENV').some((e) => e.args === 'STRATA_CUDA_HOME=/usr/local/cuda')).toBe(true);
    expect(find(build, 'RUN').some((r) => r.args.includes('scripts/build-native.mjs'))).toBe(true);
    // The archs come from the engine's nvcc module default, which must stay sm_80/sm_89/sm_90.
    const cmake = readFileSync(
      join(repoRoot, 'services/inference-backend/native/engine/cmake/StrataNvcc.cmake'),
      'utf8',
    );
    expect(cmake).toMatch(/set\(STRATA_CUDA_ARCHS "80;89;90"/);
  });

  it('builds structured output in: cargo from a Rust stage at least 1.87, and a build that fails without it', () => {
    const rust = stages.find((s) => s.name === 'rust') as Stage;
    const [, minor] = /^rust:1\.(\d+)-slim$/.exec(rust.image) ?? [];
    expect(Number(minor)).toBeGreaterThanOrEqual(87);
    const build = stages.find((s) => s.name === 'build') as Stage;
    expect(find(build, 'COPY').some((c) => c.args === '--from=rust /usr/local/cargo /usr/local/cargo')).toBe(
      true,
    );
    const env = find(build, 'ENV')
      .map((e) => e.args)
      .join(' ');
    expect(env).toContain('PATH=/usr/local/cargo/bin:$PATH');
    expect(env).toContain('STRATA_REQUIRE_GRAMMAR=1');
  });

  it('puts strata-warmup on PATH for the warmup Job', () => {
    const final = stages.at(-1) as Stage;
    expect(find(final, 'COPY').some((c) => c.args.includes('/usr/local/bin/strata-warmup'))).toBe(true);
  });

  it('carries strata-fetch-model for the fetch-model init container, installing nothing at run time', () => {
    const build = stages.find((s) => s.name === 'build') as Stage;
    const final = stages.at(-1) as Stage;
    expect(find(build, 'RUN').some((r) => r.args.includes('strata-fetch-model:fetch-model'))).toBe(true);
    expect(find(final, 'COPY').some((c) => c.args.includes('/usr/local/bin/strata-fetch-model'))).toBe(true);
    // The downloader's S3 client is a production dependency, so `pnpm deploy --prod` ships it.
    const pkg = JSON.parse(readFileSync(join(repoRoot, 'services/inference-backend/package.json'), 'utf8'));
    expect(pkg.dependencies['@aws-sdk/client-s3']).toBeDefined();
    expect(pkg.bin['strata-fetch-model']).toBe('./bin/strata-fetch-model.js');
    // No pip, no package manager in the runtime stage.
    expect(find(final, 'RUN').filter((r) => /pip|apt-get|npm|pnpm/.test(r.args))).toEqual([]);
  });
});

describe('the parser', () => {
  it('reads continuations, stages and pins', () => {
    const stages = parseDockerfile(
      '# c\nARG X=1\nFROM a:1 AS one\nRUN a \\\n  # note\n  b\nFROM one\nUSER 1\n',
    );
    expect(stages.map((s) => [s.image, s.name])).toEqual([
      ['a:1', 'one'],
      ['one', undefined],
    ]);
    expect(stages[0]?.instructions[0]?.args).toBe('a    b');
    expect(imagePin('ghcr.io/x/y:2.0')).toBe('2.0');
    expect(imagePin('localhost:5000/y')).toBeUndefined();
    expect(() => parseDockerfile('RUN x\n')).toThrow('RUN before FROM');
  });
});
