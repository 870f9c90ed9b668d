// String ops: StringConcat, StringSplit, StringNormalizer, RegexFullMatch. MLX holds no strings,
// so these are host code over `string[]` data (placement 'host').
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import { boolTensor, broadcastPairs, stringTensor, stringsOf } from './helpers/strings.js';
import { hostInt64 } from './helpers/util.js';
import { translateRe2 } from './helpers/regex.js';

export { stringEqual } from './helpers/strings.js';

interface HostOpBody<P> {
  parse?: (attrs: Attrs) => P;
  check?: (ctx: CheckContext<P>) => string | undefined;
  note?: string;
}

/** An entry that runs on the host only. */
function hostOp<P = undefined>(
  opType: string,
  since: number,
  f: (ctx: OpContext<P>) => HostTensor[],
  body: HostOpBody<P> = {},
): OpEntry<P> {
  return onnxOp<P>(opType, since, { ...body, placement: 'host', host: f });
}

const stringInput =
  (i: number) =>
  <P>(ctx: CheckContext<P>): string | undefined => {
    const t = ctx.inputType(i);
    return t !== undefined && t !== OnnxDataType.STRING ? `input ${i} must be a string tensor, got element type ${t}` : undefined;
  };

function concat(ctx: OpContext): HostTensor[] {
  stringsOf(ctx.host(0), ctx.where);
  stringsOf(ctx.host(1), ctx.where);
  const { dims, values } = broadcastPairs(ctx.host(0), ctx.host(1), (a, b) => `${a as string}${b as string}`);
  return [stringTensor(values, dims)];
}

// ---------------------------------------------------------------------------------------------
// StringSplit: Python's str.split semantics (the reference implementation is numpy's char.split).
// Without a delimiter that means runs of any whitespace (tabs, newlines), and a maxsplit remainder
// keeps its trailing whitespace; onnxruntime 1.30 splits on ' ' only and trims the remainder.

const PY_SPACE = /[\s\u001c-\u001f\u0085]/; // what Python's str.isspace() accepts beyond JS's \s

/** str.split() with no separator: runs of whitespace separate, and leading/trailing ones vanish. */
function splitWhitespace(s: string, maxsplit: number): string[] {
  const parts: string[] = [];
  let i = 0;
  const n = s.length;
  while (i < n) {
    while (i < n && PY_SPACE.test(s[i])) i++;
    if (i >= n) break;
    if (maxsplit >= 0 && parts.length === maxsplit) {
      // The remainder keeps its trailing whitespace, as Python's does.
      parts.push(s.slice(i));
      break;
    }
    let j = i;
    while (j < n && !PY_SPACE.test(s[j])) j++;
    parts.push(s.slice(i, j));
    i = j;
  }
  return parts;
}

/** str.split(sep, maxsplit): every occurrence separates, so empty pieces are kept. */
function splitOn(s: string, sep: string, maxsplit: number): string[] {
  const parts: string[] = [];
  let start = 0;
  for (;;) {
    const k = maxsplit >= 0 && parts.length === maxsplit ? -1 : s.indexOf(sep, start);
    if (k < 0) break;
    parts.push(s.slice(start, k));
    start = k + sep.length;
  }
  parts.push(s.slice(start));
  return parts;
}

interface SplitParams {
  /** '': runs of whitespace. */
  delimiter: string;
  /** -1: no limit. */
  maxsplit: number;
}

const parseSplit = (attrs: Attrs): SplitParams => ({
  delimiter: attrs.string('delimiter', ''),
  maxsplit: attrs.has('maxsplit') ? attrs.int('maxsplit') : -1,
});

function split(ctx: OpContext<SplitParams>): HostTensor[] {
  const x = ctx.host(0);
  const xs = stringsOf(x, ctx.where);
  const { delimiter, maxsplit } = ctx.params;
  const pieces = xs.map((s) => (delimiter === '' ? splitWhitespace(s, maxsplit) : splitOn(s, delimiter, maxsplit)));
  const width = pieces.reduce((m, p) => Math.max(m, p.length), 0);
  const padded = pieces.flatMap((p) => [...p, ...new Array<string>(width - p.length).fill('')]);
  return [
    stringTensor(padded, [...x.dims, width]),
    hostInt64(
      pieces.map((p) => p.length),
      x.dims,
    ),
  ];
}

// ---------------------------------------------------------------------------------------------
// StringNormalizer: drops elements equal to a stopword, then changes case ([C] or [1, C] input).

interface NormalizerParams {
  action: 'NONE' | 'LOWER' | 'UPPER';
  caseSensitive: boolean;
  stopwords: string[];
  locale: string;
}

const caseActions = ['NONE', 'LOWER', 'UPPER'];

function parseNormalizer(attrs: Attrs): NormalizerParams {
  const action = attrs.string('case_change_action', 'NONE');
  if (!caseActions.includes(action)) throw new RangeError(`case_change_action '${action}' is not one of ${caseActions.join(', ')}`);
  return {
    action: action as NormalizerParams['action'],
    caseSensitive: attrs.int('is_case_sensitive', 0) !== 0,
    stopwords: attrs.strings('stopwords', []),
    locale: attrs.string('locale', ''),
  };
}

function checkNormalizer(ctx: CheckContext<NormalizerParams>): string | undefined {
  const locale = ctx.params.locale;
  // Case mapping uses JavaScript's locale-independent toUpperCase/toLowerCase; only locales with
  // the same mapping for every letter (English and the like) are safe to claim.
  if (locale && !/^en([_-]|$)/i.test(locale))
    return `locale '${locale}' is not supported (case changes follow Unicode's default mapping, as for 'en_US')`;
  return stringInput(0)(ctx);
}

function normalize(ctx: OpContext<NormalizerParams>): HostTensor[] {
  const x = ctx.host(0);
  const xs = stringsOf(x, ctx.where);
  // [C] or [1, C] with C > 0, as onnxruntime's shape inference requires (a scalar or C = 0 is refused).
  const c = x.dims[x.dims.length - 1];
  if (x.dims.length === 0 || x.dims.length > 2 || (x.dims.length === 2 && x.dims[0] !== 1) || c === 0) {
    throw new RangeError(`${ctx.where}: the input must have shape [C] or [1, C] with C > 0, got [${x.dims.join(', ')}]`);
  }
  const { action, caseSensitive, stopwords } = ctx.params;
  const fold = (s: string) => (caseSensitive ? s : s.toLowerCase());
  const stop = new Set(stopwords.map(fold));
  const kept = xs.filter((s) => !stop.has(fold(s)));
  const changed = kept.map((s) => (action === 'LOWER' ? s.toLowerCase() : action === 'UPPER' ? s.toUpperCase() : s));
  // Everything dropped: one empty string, in the input's rank (the spec's [1] or [1, 1]).
  const out = changed.length ? changed : [''];
  return [stringTensor(out, x.dims.length === 2 ? [1, out.length] : [out.length])];
}

// ---------------------------------------------------------------------------------------------
// RegexFullMatch

/** The pattern as a RegExp (no 'g' or 'y' flag, so test() keeps no state), or why it cannot be one. */
type Compiled = { re: RegExp } | { error: string };

function parseRegex(attrs: Attrs): Compiled {
  const t = translateRe2(attrs.string('pattern'));
  return 'error' in t ? t : { re: new RegExp(t.source, t.flags) };
}

function checkRegex(ctx: CheckContext<Compiled>): string | undefined {
  if ('error' in ctx.params) return `pattern cannot be run as a JavaScript RegExp: ${ctx.params.error}`;
  return stringInput(0)(ctx);
}

function fullMatch(ctx: OpContext<Compiled>): HostTensor[] {
  const x = ctx.host(0);
  if ('error' in ctx.params) throw new SyntaxError(`${ctx.where}: ${ctx.params.error}`);
  const re = ctx.params.re;
  return [
    boolTensor(
      stringsOf(x, ctx.where).map((s) => re.test(s)),
      x.dims,
    ),
  ];
}

export const stringsOps: OpEntry[] = [
  hostOp('StringConcat', 20, concat, { check: (ctx) => stringInput(0)(ctx) ?? stringInput(1)(ctx) }),
  hostOp('StringSplit', 20, split, {
    parse: parseSplit,
    check: stringInput(0),
    note: 'host; no delimiter splits on any whitespace, as Python does (onnxruntime: spaces only)',
  }),
  hostOp('StringNormalizer', 10, normalize, {
    parse: parseNormalizer,
    check: checkNormalizer,
    note: 'host; Unicode default case mapping, so only en locales (or none)',
  }),
  hostOp('RegexFullMatch', 20, fullMatch, {
    parse: parseRegex,
    check: checkRegex,
    note: 'host; RE2 translated to RegExp; lookaround, backreferences, inline flags past the start, \\C, negated POSIX classes refused',
  }),
];
