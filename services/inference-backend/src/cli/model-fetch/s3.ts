// s3://bucket/prefix through the AWS SDK v3 and its default credential chain: in a pod with an
// IRSA service account that is the web-identity token the EKS webhook mounts (AWS_ROLE_ARN +
// AWS_WEB_IDENTITY_TOKEN_FILE), so no static key is needed. AWS_REGION names the region and
// AWS_ENDPOINT_URL_S3 another S3 API (tests: moto's server).
//
// Checksums, in this order: a SHA256SUMS file under the prefix (sha256sum's format, relative
// paths); else the object's own ChecksumSHA256 when it covers the whole object (uploaded with
// --checksum-algorithm SHA256 in one part, or as a full-object checksum); else none (size only).
import {
  GetObjectCommand,
  HeadObjectCommand,
  type HeadObjectCommandOutput,
  ListObjectsV2Command,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import {
  type Digest,
  FetchError,
  included,
  type ModelSource,
  type RemoteFile,
  type SourceUri,
  safeRelativePath,
} from './source.js';

export const MANIFEST = 'SHA256SUMS';

export interface S3Options {
  /** Path-style requests (bucket in the path): needed by most S3-compatible servers on an IP. */
  forcePathStyle?: boolean;
}

/** sha256sum output: "<hex>  <path>" or "<hex> *<path>" per line. */
export function parseSha256Sums(text: string, origin: string): Map<string, string> {
  const sums = new Map<string, string>();
  for (const [i, line] of text.split('\n').entries()) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const m = /^([0-9a-fA-F]{64}) [ *](.+)$/.exec(line.replace(/\r$/, ''));
    if (!m) throw new FetchError('STRATA_FETCH_SOURCE', `${origin}: line ${i + 1} is not "<sha256>  <path>"`);
    sums.set((m[2] as string).replace(/^\.\//, ''), (m[1] as string).toLowerCase());
  }
  return sums;
}

/** ChecksumSHA256 (base64) as hex, when it is of the whole object (not "<b64>-<parts>"). */
function fullObjectSha256(head: HeadObjectCommandOutput): string | undefined {
  const value = head.ChecksumSHA256;
  if (!value || head.ChecksumType === 'COMPOSITE' || /-\d+$/.test(value)) return undefined;
  return Buffer.from(value, 'base64').toString('hex');
}

export function s3Source(uri: Extract<SourceUri, { kind: 's3' }>, options: S3Options = {}): ModelSource {
  // The SDK's own response checksum validation is off: it cannot cover ranged (resumed) GETs;
  // every file is hashed here instead.
  const client = new S3Client({
    forcePathStyle: options.forcePathStyle ?? false,
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  const where = (key: string) => `s3://${uri.bucket}/${key}`;

  const openKey = async (
    key: string,
    offset: number,
    signal?: AbortSignal,
    etag?: string,
  ): Promise<AsyncIterable<Uint8Array>> => {
    const out = await call(where(key), () =>
      client.send(
        new GetObjectCommand({
          Bucket: uri.bucket,
          Key: key,
          ...(offset > 0 ? { Range: `bytes=${offset}-` } : {}),
          // The object must not change under a resumed download.
          ...(etag ? { IfMatch: etag } : {}),
        }),
        signal ? { abortSignal: signal } : {},
      ),
    );
    if (!out.Body) throw new FetchError('STRATA_FETCH_SOURCE', `${where(key)}: empty response body`);
    return out.Body as AsyncIterable<Uint8Array>;
  };

  return {
    uri: uri.uri,
    async list(include) {
      const objects: { key: string; size: number; etag: string }[] = [];
      let token: string | undefined;
      do {
        const page = await call(uri.uri, () =>
          client.send(
            new ListObjectsV2Command({ Bucket: uri.bucket, Prefix: uri.prefix, ContinuationToken: token }),
          ),
        );
        for (const o of page.Contents ?? []) {
          if (o.Key === undefined || o.Key.endsWith('/')) continue;
          objects.push({ key: o.Key, size: o.Size ?? 0, etag: o.ETag ?? '' });
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      if (objects.length === 0)
        throw new FetchError(
          'STRATA_FETCH_NOT_FOUND',
          `no objects under ${uri.uri}: check the bucket and prefix`,
        );

      const manifestKey = `${uri.prefix}${MANIFEST}`;
      const manifest = objects.find((o) => o.key === manifestKey)
        ? parseSha256Sums(await readAll(await openKey(manifestKey, 0)), where(manifestKey))
        : undefined;
      const files: RemoteFile[] = [];
      for (const o of objects) {
        const path = o.key.slice(uri.prefix.length);
        if (o.key === manifestKey || !included(path, include)) continue;
        if (!safeRelativePath(path))
          throw new FetchError('STRATA_FETCH_SOURCE', `${where(o.key)}: the key is not a usable file path`);
        let digest: Digest | undefined;
        const listed = manifest?.get(path);
        if (listed) digest = { algorithm: 'sha256', hex: listed, origin: MANIFEST };
        else {
          const head = await call(where(o.key), () =>
            client.send(new HeadObjectCommand({ Bucket: uri.bucket, Key: o.key, ChecksumMode: 'ENABLED' })),
          );
          const hex = fullObjectSha256(head);
          if (hex) digest = { algorithm: 'sha256', hex, origin: 'ChecksumSHA256' };
        }
        files.push({ path, size: o.size, version: o.etag, ...(digest ? { digest } : {}) });
      }
      if (files.length === 0)
        throw new FetchError(
          'STRATA_FETCH_NOT_FOUND',
          `no objects under ${uri.uri} match the include patterns (${include.join(', ')})`,
        );
      return { revision: uri.uri, files };
    },
    async open(file, offset, signal) {
      return { body: await openKey(`${uri.prefix}${file.path}`, offset, signal, file.version), offset };
    },
  };
}

async function readAll(body: AsyncIterable<Uint8Array>): Promise<string> {
  const chunks: Uint8Array[] = [];
  for await (const c of body) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

/** Runs an SDK call, turning its errors into FetchErrors that say what to check. */
async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw explain(what, err);
  }
}

function explain(what: string, err: unknown): Error {
  if (err instanceof FetchError) return err;
  const e = err as Error & { name?: string; $metadata?: { httpStatusCode?: number } };
  if (e.name === 'AbortError') return e;
  const status = e.$metadata?.httpStatusCode;
  if (e.name === 'CredentialsProviderError' || /credential/i.test(e.message ?? ''))
    return new FetchError(
      'STRATA_FETCH_AUTH',
      `no AWS credentials for ${what}: in a pod, annotate its service account with eks.amazonaws.com/role-arn (IRSA); elsewhere use the usual AWS environment (${e.message})`,
    );
  if (e.name === 'NoSuchBucket')
    return new FetchError('STRATA_FETCH_NOT_FOUND', `${what}: the bucket does not exist`);
  if (e.name === 'NoSuchKey' || e.name === 'NotFound' || status === 404)
    return new FetchError('STRATA_FETCH_NOT_FOUND', `${what}: no such object`);
  if (e.name === 'PreconditionFailed' || status === 412)
    return new FetchError(
      'STRATA_FETCH_SOURCE',
      `${what}: the object changed during the download; run again`,
    );
  if (
    status === 403 ||
    ['AccessDenied', 'InvalidAccessKeyId', 'SignatureDoesNotMatch', 'ExpiredToken'].includes(e.name ?? '')
  )
    return new FetchError(
      'STRATA_FETCH_AUTH',
      `access denied to ${what} (${e.name}): the role needs s3:ListBucket on the bucket and s3:GetObject on the prefix`,
    );
  if (err instanceof S3ServiceException)
    return new FetchError('STRATA_FETCH_SOURCE', `${what}: ${e.name} (HTTP ${status ?? '?'}): ${e.message}`);
  return new FetchError('STRATA_FETCH_SOURCE', `${what}: ${e.message}`);
}
