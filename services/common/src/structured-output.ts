// Structured output: the request fields that constrain what a model may generate, and the one
// grammar each comes down to for the engine (llguidance's kinds: json_schema, json_object, regex,
// lark). Accepted shapes:
//  - OpenAI's response_format: {type: 'json_object'} or {type: 'json_schema', json_schema:
//    {name, schema, strict}} (chat and completions);
//  - vLLM's structured_outputs: {json | regex | choice | grammar | json_object} (one of them), and
//    its older guided_json / guided_regex / guided_choice / guided_grammar fields;
//  - /v1/generate's own `constraint` field, in the structured_outputs shape.
// A request may carry one constraint; two are refused rather than one silently winning.
import { z } from 'zod';
import { StrataError } from './errors.js';

export type GrammarKind = 'json_schema' | 'json_object' | 'regex' | 'lark';

/** What the engine compiles: a kind and its text (data is '' for json_object). */
export interface GrammarSpec {
  kind: GrammarKind;
  data: string;
  /** The request field it came from, for errors and logs. */
  field: string;
}

const schemaObject = z.record(z.string(), z.unknown(), { error: 'a JSON schema must be a JSON object' });
const schemaField = z.union([schemaObject, z.string()], {
  error: 'a JSON schema must be a JSON object (or its JSON text)',
});

export const responseFormatSchema = z.discriminatedUnion(
  'type',
  [
    z.looseObject({ type: z.literal('text') }),
    z.looseObject({ type: z.literal('json_object') }),
    z.looseObject({
      type: z.literal('json_schema'),
      json_schema: z.looseObject({
        name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, {
          error: 'json_schema.name must be 1-64 letters, digits, underscores or dashes',
        }),
        description: z.string().optional(),
        /** Absent: any JSON value (OpenAI's default is an empty schema). */
        schema: schemaObject.optional(),
        /** Honoured either way: the output always follows the schema. */
        strict: z.boolean().nullable().optional(),
      }),
    }),
  ],
  { error: "response_format.type must be 'text', 'json_object' or 'json_schema'" },
);
export type ResponseFormat = z.output<typeof responseFormatSchema>;

const choiceList = z
  .array(z.string().min(1, { error: 'a choice must be a non-empty string' }))
  .min(1, { error: 'choice must list at least one string' })
  .max(4096, { error: 'choice may list at most 4096 strings' });

/** vLLM's structured_outputs, and /v1/generate's `constraint`: exactly one of the fields. */
export const structuredOutputsSchema = z
  .strictObject({
    json: schemaField.optional(),
    regex: z.string().min(1, { error: 'regex must not be empty' }).optional(),
    choice: choiceList.optional(),
    grammar: z.string().min(1, { error: 'grammar must not be empty' }).optional(),
    json_object: z.boolean().optional(),
  })
  .refine((o) => Object.values(o).filter((v) => v !== undefined && v !== false).length === 1, {
    error: 'give exactly one of json, regex, choice, grammar or json_object',
  });
export type StructuredOutputs = z.output<typeof structuredOutputsSchema>;

/** vLLM's older per-kind fields. */
export const guidedFields = {
  guided_json: schemaField.optional(),
  guided_regex: z.string().min(1, { error: 'guided_regex must not be empty' }).optional(),
  guided_choice: choiceList.optional(),
  guided_grammar: z.string().min(1, { error: 'guided_grammar must not be empty' }).optional(),
};

export interface ConstraintFields {
  response_format?: ResponseFormat | undefined;
  structured_outputs?: StructuredOutputs | undefined;
  guided_json?: Record<string, unknown> | string | undefined;
  guided_regex?: string | undefined;
  guided_choice?: string[] | undefined;
  guided_grammar?: string | undefined;
}

const invalid = (message: string) => new StrataError('STRATA_INVALID_GRAMMAR', message);

/** A JSON schema's text: an object as it is, a string only when it is JSON of an object. */
function schemaText(schema: Record<string, unknown> | string, field: string): string {
  if (typeof schema !== 'string') return JSON.stringify(schema);
  let parsed: unknown;
  try {
    parsed = JSON.parse(schema);
  } catch (err) {
    throw invalid(`${field} is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw invalid(`${field} must be a JSON schema object`);
  }
  return schema;
}

/** A choice list as a grammar: one literal per choice (JSON string escapes, which Lark reads). */
export function choiceGrammar(choices: readonly string[]): string {
  return `start: ${choices.map((c) => JSON.stringify(c)).join(' | ')}`;
}

function fromStructured(o: StructuredOutputs, field: string): GrammarSpec {
  if (o.json !== undefined) return { kind: 'json_schema', data: schemaText(o.json, `${field}.json`), field };
  if (o.regex !== undefined) return { kind: 'regex', data: o.regex, field };
  if (o.choice !== undefined) return { kind: 'lark', data: choiceGrammar(o.choice), field };
  if (o.grammar !== undefined) return { kind: 'lark', data: o.grammar, field };
  return { kind: 'json_object', data: '', field };
}

/**
 * The one grammar a request's fields ask for, or undefined when none does. Throws
 * STRATA_INVALID_GRAMMAR when two fields constrain the output, or a schema string is not JSON.
 */
export function grammarOf(body: ConstraintFields): GrammarSpec | undefined {
  const found: GrammarSpec[] = [];
  const rf = body.response_format;
  if (rf?.type === 'json_object') found.push({ kind: 'json_object', data: '', field: 'response_format' });
  if (rf?.type === 'json_schema') {
    const schema = rf.json_schema.schema;
    found.push(
      schema === undefined
        ? { kind: 'json_object', data: '', field: 'response_format' }
        : { kind: 'json_schema', data: JSON.stringify(schema), field: 'response_format' },
    );
  }
  if (body.structured_outputs) found.push(fromStructured(body.structured_outputs, 'structured_outputs'));
  if (body.guided_json !== undefined) {
    found.push({
      kind: 'json_schema',
      data: schemaText(body.guided_json, 'guided_json'),
      field: 'guided_json',
    });
  }
  if (body.guided_regex !== undefined)
    found.push({ kind: 'regex', data: body.guided_regex, field: 'guided_regex' });
  if (body.guided_choice !== undefined) {
    found.push({ kind: 'lark', data: choiceGrammar(body.guided_choice), field: 'guided_choice' });
  }
  if (body.guided_grammar !== undefined) {
    found.push({ kind: 'lark', data: body.guided_grammar, field: 'guided_grammar' });
  }
  if (found.length > 1) {
    throw invalid(`only one constraint per request: got ${found.map((g) => g.field).join(' and ')}`);
  }
  return found[0];
}

/** /v1/generate's `constraint` field as a grammar. */
export function grammarOfConstraint(constraint: StructuredOutputs | undefined): GrammarSpec | undefined {
  return constraint === undefined ? undefined : fromStructured(constraint, 'constraint');
}
