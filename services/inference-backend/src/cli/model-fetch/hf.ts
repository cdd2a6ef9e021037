// hf://org/repo@revision over the Hugging Face Hub's HTTP API, with nothing but fetch:
//   GET {endpoint}/api/models/{repo}/revision/{revision}    -> the commit (sha) the revision names
//   GET {endpoint}/api/models/{repo}/tree/{sha}?recursive=true -> files: path, size, oid, lfs.oid
//   GET {endpoint}/{repo}/resolve/{sha}/{path}             -> the bytes (Range honoured; redirects to the CDN)
// Every file comes from the one commit, so a branch moving during the download cannot mix two
// versions. LFS files (the weights) are checked against their sha256 (lfs.oid), small files
// against their git blob id. HF_TOKEN (gated or private repositories) and HF_ENDPOINT (a mirror)
// are honoured as huggingface_hub does.
import {
  type Digest,
  FetchError,
  included,
  type ModelSource,
  type RemoteFile,
  safeRelativePath,
} from './source.js';

export interface HfOptions {
  endpoint?: string;
  token?: string;
}

interface TreeEntry {
  type: string;
  path: string;
  size: number;
  oid: string;
  lfs?: { oid: string; size: number };
}

export function hfSource(repo: string, revision: string, options: HfOptions = {}): ModelSource {
  const endpoint = (options.endpoint || 'https://huggingface.co').replace(/\/+$/, '');
  const headers: Record<string, string> = { 'user-agent': 'strata-fetch-model' };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const uri = `hf://${repo}@${revision}`;

  const get = async (url: string, what: string, extra: Record<string, string> = {}, signal?: AbortSignal) => {
    let res: Response;
    try {
      res = await fetch(url, {
        headers: { ...headers, ...extra },
        redirect: 'follow',
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      if ((err as Error).name === 'AbortError') throw err;
      throw new FetchError(
        'STRATA_FETCH_SOURCE',
        `${what}: ${endpoint} unreachable (${(err as Error).message})`,
      );
    }
    if (res.ok) return res;
    const body = (await res.text().catch(() => '')).slice(0, 200);
    if (res.status === 401 || res.status === 403)
      throw new FetchError(
        'STRATA_FETCH_AUTH',
        `${what}: Hugging Face answered ${res.status}${options.token ? ' with the token given' : ''}: ` +
          `the repository is gated, private or does not exist; ${options.token ? 'check the token has access' : 'set HF_TOKEN'} (${body})`,
      );
    if (res.status === 404)
      throw new FetchError('STRATA_FETCH_NOT_FOUND', `${what}: not found on ${endpoint} (${body})`);
    throw new FetchError('STRATA_FETCH_SOURCE', `${what}: HTTP ${res.status} from ${endpoint} (${body})`);
  };

  return {
    uri,
    async list(include) {
      const info = (await (
        await get(`${endpoint}/api/models/${repo}/revision/${encodeURIComponent(revision)}`, uri)
      ).json()) as { sha?: unknown };
      if (typeof info.sha !== 'string' || !/^[0-9a-f]{40}$/.test(info.sha))
        throw new FetchError('STRATA_FETCH_SOURCE', `${uri}: the hub named no commit for the revision`);
      const sha = info.sha;
      const entries: TreeEntry[] = [];
      let next: string | undefined = `${endpoint}/api/models/${repo}/tree/${sha}?recursive=true`;
      while (next) {
        const res = await get(next, `${uri} (file list)`);
        entries.push(...((await res.json()) as TreeEntry[]));
        // Large repositories come in pages: Link: <url>; rel="next".
        next = /<([^>]+)>;\s*rel="next"/.exec(res.headers.get('link') ?? '')?.[1];
      }
      const files: RemoteFile[] = [];
      for (const e of entries) {
        if (e.type !== 'file' || !included(e.path, include)) continue;
        if (!safeRelativePath(e.path))
          throw new FetchError('STRATA_FETCH_SOURCE', `${uri}: "${e.path}" is not a usable file path`);
        const digest: Digest = e.lfs
          ? { algorithm: 'sha256', hex: e.lfs.oid.toLowerCase(), origin: 'lfs' }
          : { algorithm: 'git-sha1', hex: e.oid.toLowerCase(), origin: 'git' };
        files.push({ path: e.path, size: e.lfs?.size ?? e.size, digest, version: sha });
      }
      if (files.length === 0)
        throw new FetchError(
          'STRATA_FETCH_NOT_FOUND',
          `${uri}: no files match the include patterns (${include.join(', ')})`,
        );
      return { revision: sha, files };
    },
    async open(file, offset, signal) {
      const path = file.path.split('/').map(encodeURIComponent).join('/');
      const res = await get(
        `${endpoint}/${repo}/resolve/${file.version}/${path}`,
        `${uri}: ${file.path}`,
        offset > 0 ? { range: `bytes=${offset}-` } : {},
        signal,
      );
      if (!res.body) throw new FetchError('STRATA_FETCH_SOURCE', `${uri}: ${file.path}: empty response body`);
      // 200 to a ranged request: the whole file follows, start over.
      return { body: res.body as AsyncIterable<Uint8Array>, offset: res.status === 206 ? offset : 0 };
    },
  };
}
