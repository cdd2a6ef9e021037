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

/**
 * The inference operations the edge, the router and the backend all serve, in operationTable's
 * form and their order: the OpenAI ones as OpenAI names them, for client generators.
 */
export const INFERENCE_OPERATIONS: readonly string[] = [
  'POST /v1/generate generate',
  'POST /v1/completions createCompletion',
  'POST /v1/chat/completions createChatCompletion',
  'GET /v1/models listModels',
];

/** Every operation of an OpenAPI document as 'METHOD /path operationId', in document order. */
export function operationTable(document: unknown): string[] {
  return operationsOf(document).map((op) => `${op.method.toUpperCase()} ${op.path} ${op.operationId}`);
}

/**
 * What keeps loaded docs from being a service's Swagger UI served from `base` (the URL the
 * service's /docs and /openapi.json stand under) as a browser needs it: the page titled `title`,
 * relative links only (so that it works under a path prefix), at least five assets all
 * served, the bundle as JavaScript, and the spec read from `base`/openapi.json. [] when fine.
 */
export function swaggerUiProblems(docs: LoadedDocs, base: string, title: string): string[] {
  const problems: string[] = [];
  if (docs.status !== 200) problems.push(`/docs answered ${docs.status}`);
  if (!/^text\/html/.test(docs.contentType ?? '')) problems.push(`/docs is ${docs.contentType}, not HTML`);
  if (!docs.html.includes(`<title>${title}</title>`)) problems.push(`the page is not titled "${title}"`);
  for (const link of docs.links) if (!link.startsWith('./')) problems.push(`link ${link} is not relative`);
  if (docs.assets.length < 5) problems.push(`${docs.assets.length} assets, fewer than 5`);
  for (const asset of docs.assets) {
    if (asset.status !== 200) problems.push(`${asset.url} answered ${asset.status}`);
  }
  const bundleUrl = `${base}/docs/static/swagger-ui-bundle.js`;
  const bundle = docs.assets.find((a) => a.url === bundleUrl);
  if (!/^application\/javascript/.test(bundle?.contentType ?? '')) {
    problems.push(`${bundleUrl} is ${bundle ? bundle.contentType : 'not linked'}, not JavaScript`);
  }
  if (docs.documentUrl !== `${base}/openapi.json`) problems.push(`the UI reads ${docs.documentUrl}`);
  return problems;
}
