// What a model source is to the downloader: a URI (s3://bucket/prefix, hf://org/repo@revision)
// that lists files, each with its size and, where the source has one, a digest to verify, and
// opens one file's bytes from an offset (to resume a partial download).

/** A failure the CLI reports as one clear line; `code` names its kind in the log. */
export class FetchError extends Error {
  constructor(
    readonly code:
      | 'STRATA_FETCH_USAGE'
      | 'STRATA_FETCH_NOT_FOUND'
      | 'STRATA_FETCH_AUTH'
      | 'STRATA_FETCH_CHECKSUM'
      | 'STRATA_FETCH_SOURCE'
      | 'STRATA_FETCH_LOCK',
    message: string,
  ) {
    super(message);
    this.name = 'FetchError';
  }
}

/** How a file's content is checked once downloaded. */
export interface Digest {
  /** sha256: of the content; git-sha1: git's blob id (sha1 of "blob <size>\0" + content). */
  algorithm: 'sha256' | 'git-sha1';
  hex: string;
  /** Where the expected value comes from (logged): "SHA256SUMS", "ChecksumSHA256", "lfs", "git". */
  origin: string;
}

export interface RemoteFile {
  /** Relative path inside the model directory, with forward slashes. */
  path: string;
  size: number;
  /** Absent: the source gives nothing to verify against (the size is still checked). */
  digest?: Digest;
  /** Identifies this version of the file (ETag, commit); a partial download of another is discarded. */
  version: string;
}

export interface ModelSource {
  /** The URI, normalised (logged and written to the completion marker). */
  readonly uri: string;
  /** The files (already filtered by the include patterns) and the resolved revision. */
  list(include: readonly string[]): Promise<{ revision: string; files: RemoteFile[] }>;
  /**
   * The file's bytes from `offset` to its end; `offset` in the answer is where the body really
   * starts (0 when a server ignored the range: the partial download is then started over).
   */
  open(file: RemoteFile, offset: number, signal: AbortSignal): Promise<Opened>;
}

export interface Opened {
  body: AsyncIterable<Uint8Array>;
  offset: number;
}

export type SourceUri =
  | { kind: 's3'; bucket: string; prefix: string; uri: string }
  | { kind: 'hf'; repo: string; revision: string; uri: string };

const BUCKET = /^(?=.{3,63}$)[a-z0-9][a-z0-9.-]*[a-z0-9]$/;
const HF_PART = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const USAGE_HINT = 'use s3://bucket/prefix or hf://org/repo[@revision]';

/** Parses a model source URI; throws STRATA_FETCH_USAGE with what is wrong. */
export function parseSourceUri(raw: string): SourceUri {
  const bad = (why: string) => new FetchError('STRATA_FETCH_USAGE', `bad model source "${raw}": ${why}`);
  const scheme = /^([a-z0-9]+):\/\/(.*)$/.exec(raw);
  if (!scheme) throw bad(USAGE_HINT);
  const rest = scheme[2] as string;
  if (scheme[1] === 's3') {
    const slash = rest.indexOf('/');
    const bucket = slash < 0 ? rest : rest.slice(0, slash);
    let prefix = slash < 0 ? '' : rest.slice(slash + 1);
    if (!BUCKET.test(bucket) || bucket.includes('..'))
      throw bad(`"${bucket}" is not an S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)`);
    if (prefix !== '' && !prefix.endsWith('/')) prefix += '/';
    if (prefix.startsWith('/') || prefix.includes('//')) throw bad('the prefix has an empty path segment');
    return { kind: 's3', bucket, prefix, uri: `s3://${bucket}/${prefix}` };
  }
  if (scheme[1] === 'hf') {
    const at = rest.lastIndexOf('@');
    const repo = at < 0 ? rest : rest.slice(0, at);
    const revision = at < 0 ? 'main' : rest.slice(at + 1);
    const parts = repo.split('/');
    if (parts.length > 2 || !parts.every((p) => HF_PART.test(p)))
      throw bad(`"${repo}" is not a Hugging Face repository id (org/name)`);
    if (revision === '' || /\s|\.\./.test(revision)) throw bad(`"${revision}" is not a revision`);
    return { kind: 'hf', repo, revision, uri: `hf://${repo}@${revision}` };
  }
  throw bad(`unsupported scheme "${scheme[1]}:"; ${USAGE_HINT}`);
}

/**
 * Whether a relative path matches one of the glob patterns: `*` matches within one path
 * segment, `**` across segments; a pattern without a slash matches the file name in any folder.
 */
export function included(path: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => globRegExp(p).test(p.includes('/') ? path : (path.split('/').pop() as string)));
}

function globRegExp(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i] as string;
    if (c === '*' && pattern[i + 1] === '*') {
      re += '.*';
      i++;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/** A relative path that stays inside the model directory (no .., no absolute path). */
export function safeRelativePath(path: string): boolean {
  return (
    path !== '' &&
    !path.startsWith('/') &&
    !path.includes('\\') &&
    path.split('/').every((s) => s !== '' && s !== '.' && s !== '..')
  );
}
