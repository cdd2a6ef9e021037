// A small Dockerfile parser: enough structure to check images without a container engine.
// Handles comments, line continuations, parser directives, `FROM image AS name` stages and
// JSON or shell forms; it does not evaluate ARG substitution beyond literal ${VAR} defaults.

export interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

export interface Stage {
  name: string | undefined;
  image: string;
  instructions: Instruction[];
}

export function parseDockerfile(text: string): Stage[] {
  const instructions: Instruction[] = [];
  let buffer = '';
  let start = 0;
  text.split('\n').forEach((raw, i) => {
    const line = raw.replace(/\r$/, '');
    if (buffer === '' && /^\s*(#|$)/.test(line)) return;
    if (buffer !== '' && /^\s*#/.test(line)) return; // comments inside a continued instruction
    if (buffer === '') start = i + 1;
    if (line.endsWith('\\')) {
      buffer += `${line.slice(0, -1)} `;
      return;
    }
    buffer += line;
    const m = /^\s*([A-Za-z]+)\s+([\s\S]*)$/.exec(buffer);
    if (!m) throw new Error(`line ${start}: not an instruction: ${buffer}`);
    instructions.push({
      keyword: (m[1] as string).toUpperCase(),
      args: (m[2] as string).trim(),
      line: start,
    });
    buffer = '';
  });
  if (buffer !== '') throw new Error('the file ends inside a continued instruction');

  const stages: Stage[] = [];
  for (const ins of instructions) {
    if (ins.keyword === 'FROM') {
      const m = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m) throw new Error(`line ${ins.line}: bad FROM: ${ins.args}`);
      stages.push({ image: m[1] as string, name: m[2], instructions: [] });
    } else if (ins.keyword !== 'ARG' || stages.length > 0) {
      const current = stages.at(-1);
      if (!current) throw new Error(`line ${ins.line}: ${ins.keyword} before FROM`);
      current.instructions.push(ins);
    }
  }
  return stages;
}

/** "repo:tag" / "repo@sha256:..." -> the tag or digest, undefined when unpinned. */
export function imagePin(image: string): string | undefined {
  if (image.includes('@sha256:')) return image.split('@')[1];
  const last = image.split('/').at(-1) as string;
  return last.includes(':') ? last.split(':')[1] : undefined;
}

export function find(stage: Stage, keyword: string): Instruction[] {
  return stage.instructions.filter((i) => i.keyword === keyword);
}

/** The exec-form array of CMD/ENTRYPOINT/HEALTHCHECK CMD, or undefined for shell form. */
export function execForm(args: string): string[] | undefined {
  const json = args.slice(args.indexOf('['));
  try {
    const parsed = JSON.parse(json);
    return Array.isArray(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}
