// GET /docs as a browser loads it: the page, every asset it links, and the OpenAPI document its
// Swagger UI is told to read, each URL resolved against the page's own.

export interface LoadedAsset {
  url: string;
  status: number;
  contentType: string | null;
}

export interface LoadedDocs {
  status: number;
  contentType: string | null;
  html: string;
  /** The page's src/href attributes as written. */
  links: string[];
  assets: LoadedAsset[];
  /** The spec URL in Swagger UI's configuration, resolved against the page. */
  documentUrl: string;
  document: unknown;
}

const INITIALIZER = 'swagger-initializer.js';

async function text(url: string): Promise<{ response: Response; body: string }> {
  const response = await fetch(url, { redirect: 'manual' });
  return { response, body: await response.text() };
}

/** Loads `docsUrl` (e.g. http://127.0.0.1:8080/docs) and everything the page needs. */
export async function loadDocs(docsUrl: string): Promise<LoadedDocs> {
  const page = await text(docsUrl);
  if (page.response.status !== 200) {
    return {
      status: page.response.status,
      contentType: page.response.headers.get('content-type'),
      html: page.body,
      links: [],
      assets: [],
      documentUrl: '',
      document: undefined,
    };
  }
  const links = [...page.body.matchAll(/\s(?:src|href)="([^"]+)"/g)].map((m) => m[1] as string);
  const assets: LoadedAsset[] = [];
  let initializer: string | undefined;
  for (const link of links) {
    const url = new URL(link, docsUrl).href;
    const asset = await text(url);
    assets.push({
      url,
      status: asset.response.status,
      contentType: asset.response.headers.get('content-type'),
    });
    if (url.endsWith(`/${INITIALIZER}`)) initializer = asset.body;
  }
  if (initializer === undefined) throw new Error(`${docsUrl} links no ${INITIALIZER}: ${links.join(', ')}`);
  // The plugin writes uiConfig into the initializer as JSON-compatible object literals.
  const urls = /"urls":(\[[^\]]*\])/.exec(initializer)?.[1];
  if (urls === undefined) throw new Error(`${INITIALIZER} configures no spec urls:\n${initializer}`);
  const [first] = JSON.parse(urls) as Array<{ url: string }>;
  if (first === undefined) throw new Error(`${INITIALIZER} configures an empty urls list`);
  const documentUrl = new URL(first.url, docsUrl).href;
  const document = await fetch(documentUrl).then((r) => {
    if (r.status !== 200) throw new Error(`${documentUrl} answered ${r.status}`);
    return r.json();
  });
  return {
    status: page.response.status,
    contentType: page.response.headers.get('content-type'),
    html: page.body,
    links,
    assets,
    documentUrl,
    document,
  };
}

export interface DocumentedOperation {
  method: string;
  path: string;
  operationId: string | undefined;
}

/** Every operation of an OpenAPI document: method, path and operationId. */
export function operationsOf(document: unknown): DocumentedOperation[] {
  const paths =
    (document as { paths?: Record<string, Record<string, { operationId?: string }>> }).paths ?? {};
  return Object.entries(paths).flatMap(([path, methods]) =>
    Object.entries(methods)
      .filter(([method]) => ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'].includes(method))
      .map(([method, op]) => ({ method, path, operationId: op.operationId })),
  );
}

/** Why an OpenAPI document's operationIds fail client generators (missing, duplicated, not an identifier); [] when fine. */
export function operationIdProblems(document: unknown): string[] {
  const ops = operationsOf(document);
  const problems: string[] = [];
  const seen = new Map<string, string>();
  for (const op of ops) {
    const where = `${op.method.toUpperCase()} ${op.path}`;
    if (op.operationId === undefined) problems.push(`${where}: no operationId`);
    else if (!/^[a-z][A-Za-z0-9]*$/.test(op.operationId))
      problems.push(`${where}: "${op.operationId}" is not a camelCase identifier`);
    else if (seen.has(op.operationId))
      problems.push(`${where}: "${op.operationId}" also names ${seen.get(op.operationId)}`);
    else seen.set(op.operationId, where);
  }
  if (ops.length === 0) problems.push('the document has no operations');
  return problems;
}
