// RE2 patterns (RegexFullMatch's syntax) as JavaScript RegExps. The two dialects share most of
// their syntax; this translates the parts that differ in meaning and rejects, with a reason, the
// RE2 features JavaScript cannot express and the JavaScript features RE2 does not have (a model
// relying on lookaround or backreferences is not a valid RE2 model, so accepting it would hide
// an error that onnxruntime reports).

// RE2's \s is ASCII [\t\n\f\r ]; JavaScript's also matches \v and Unicode spaces.
const RE2_SPACE = '\\t\\n\\f\\r ';
const POSIX: Record<string, string> = {
  alnum: '0-9A-Za-z',
  alpha: 'A-Za-z',
  ascii: '\\x00-\\x7F',
  blank: '\\t ',
  cntrl: '\\x00-\\x1F\\x7F',
  digit: '0-9',
  graph: '!-~',
  lower: 'a-z',
  print: ' -~',
  punct: '!-\\/:-@\\[-`{-~',
  space: '\\t\\n\\v\\f\\r ',
  upper: 'A-Z',
  word: '0-9A-Za-z_',
  xdigit: '0-9A-Fa-f',
};
const GENERAL_CATEGORY = /^(?:L[ultmo]?|M[nce]?|N[dlo]?|P[cdseifo]?|S[mcko]?|Z[slp]?|C[cfson]?)$/;
// Characters that JavaScript's u-mode lets (or needs) an escape on; RE2 lets any punctuation be escaped.
const JS_SYNTAX = new Set('^$\\.*+?()[]{}|/'.split(''));
const SIMPLE_ESCAPES = new Set('dDwWbBfnrtv'.split(''));

export type TranslatedRegex = { source: string; flags: string } | { error: string };

class Unsupported extends Error {}

function unicodeClass(body: string, negated: boolean): string {
  const name = body.startsWith('^') ? body.slice(1) : body;
  const neg = negated !== body.startsWith('^');
  if (name === 'Any') return neg ? '[^\\s\\S]' : '[\\s\\S]';
  const prop = GENERAL_CATEGORY.test(name) ? name : `Script=${name}`;
  return `\\${neg ? 'P' : 'p'}{${prop}}`;
}

/** One escape sequence starting at p[i] === '\\'; returns the JS text and the next index. */
function escape(p: string, i: number, inClass: boolean): [string, number] {
  const c = p[i + 1];
  if (c === undefined) throw new Unsupported('the pattern ends with a lone backslash');
  if (c >= '1' && c <= '9') throw new Unsupported(`backreferences (\\${c}) are not RE2 syntax`);
  if (c === '0') throw new Unsupported('octal escapes are not supported');
  if (SIMPLE_ESCAPES.has(c)) return [inClass && (c === 'b' || c === 'B') ? reject(`\\${c} inside a class`) : `\\${c}`, i + 2];
  if (c === 's') return [inClass ? RE2_SPACE : `[${RE2_SPACE}]`, i + 2];
  if (c === 'S') return [inClass ? reject('\\S inside a class') : `[^${RE2_SPACE}]`, i + 2];
  if (c === 'a') return ['\\x07', i + 2];
  if (c === 'A' && !inClass) return ['(?<![\\s\\S])', i + 2];
  if (c === 'z' && !inClass) return ['(?![\\s\\S])', i + 2];
  if (c === 'x') {
    if (p[i + 2] === '{') {
      const end = p.indexOf('}', i + 3);
      if (end < 0) throw new Unsupported('unterminated \\x{...}');
      return [`\\u{${p.slice(i + 3, end)}}`, end + 1];
    }
    return [`\\x${p.slice(i + 2, i + 4)}`, i + 4];
  }
  if (c === 'p' || c === 'P') {
    if (p[i + 2] === '{') {
      const end = p.indexOf('}', i + 3);
      if (end < 0) throw new Unsupported('unterminated \\p{...}');
      return [unicodeClass(p.slice(i + 3, end), c === 'P'), end + 1];
    }
    return [unicodeClass(p[i + 2] ?? '', c === 'P'), i + 3];
  }
  if (/[A-Za-z]/.test(c)) throw new Unsupported(`the escape \\${c} is not supported`);
  // Escaped punctuation is a literal in RE2; u-mode JavaScript only accepts some escapes.
  if (JS_SYNTAX.has(c) || (inClass && c === '-')) return [`\\${c}`, i + 2];
  return [c, i + 2];
}

const reject = (what: string): never => {
  throw new Unsupported(`${what} is not supported`);
};

/** `(?...` at p[i]: named groups and non-capturing groups translate; lookaround and inline flags do not. */
function group(p: string, i: number): [string, number] {
  if (p.startsWith('(?P<', i)) return ['(?<', i + 4];
  if (p.startsWith('(?:', i)) return ['(?:', i + 3];
  if (/^\(\?<[A-Za-z_]/.test(p.slice(i, i + 4))) return ['(?<', i + 3];
  if (/^\(\?(?:=|!|<=|<!)/.test(p.slice(i, i + 4))) throw new Unsupported('lookaround assertions are not RE2 syntax');
  throw new Unsupported('inline flags other than a leading (?ims) are not supported');
}

/** The repetition ({n}, {n,}, {n,m}) starting at p[i] === '{', or undefined when RE2 reads it literally. */
const repetition = (p: string, i: number): string | undefined => /^\{\d+(?:,\d*)?\}/.exec(p.slice(i))?.[0];

function classBody(p: string, i: number, out: string[]): number {
  // p[i] is just past '[' (and a leading '^', which the caller copied).
  let first = true;
  while (i < p.length) {
    const c = p[i];
    if (c === ']' && !first) return i + 1;
    if (c === '[' && p[i + 1] === ':') {
      const end = p.indexOf(':]', i + 2);
      const name = end < 0 ? '' : p.slice(i + 2, end);
      if (name.startsWith('^')) throw new Unsupported(`negated POSIX class [:${name}:] is not supported`);
      if (!(name in POSIX)) throw new Unsupported(`unknown POSIX class [:${name}:]`);
      out.push(POSIX[name]);
      i = end + 2;
    } else if (c === '\\') {
      const [s, next] = escape(p, i, true);
      out.push(s);
      i = next;
    } else {
      out.push(c === '[' || (c === ']' && first) ? `\\${c}` : c);
      i++;
    }
    first = false;
  }
  throw new Unsupported('unterminated character class');
}

/** Translates an RE2 pattern into a JavaScript RegExp that matches only the whole string. */
export function translateRe2(pattern: string): TranslatedRegex {
  try {
    let p = pattern;
    let flags = 'u';
    const lead = /^\(\?([a-zA-Z]+)\)/.exec(p);
    if (lead) {
      for (const f of lead[1]) {
        if (f === 'i' || f === 'm' || f === 's') flags += f;
        else throw new Unsupported(`the inline flag '${f}' is not supported`);
      }
      p = p.slice(lead[0].length);
    }
    const dotAll = flags.includes('s');
    const out: string[] = [];
    let i = 0;
    while (i < p.length) {
      const c = p[i];
      if (c === '\\') {
        if (p[i + 1] === 'Q') {
          const end = p.indexOf('\\E', i + 2);
          const lit = p.slice(i + 2, end < 0 ? p.length : end);
          out.push(lit.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&'));
          i = end < 0 ? p.length : end + 2;
          continue;
        }
        const [s, next] = escape(p, i, false);
        out.push(s);
        i = next;
      } else if (c === '[') {
        out.push('[');
        i++;
        if (p[i] === '^') {
          out.push('^');
          i++;
        }
        i = classBody(p, i, out);
        out.push(']');
      } else if (c === '(' && p[i + 1] === '?') {
        const [s, next] = group(p, i);
        out.push(s);
        i = next;
      } else if (c === '.') {
        // RE2's '.' excludes only '\n'; JavaScript's also excludes '\r', U+2028 and U+2029.
        out.push(dotAll ? '[\\s\\S]' : '[^\\n]');
        i++;
      } else if (c === '{') {
        // A repetition is copied whole; any other brace is a literal in RE2 (an error in u-mode JS).
        const rep = repetition(p, i);
        out.push(rep ?? '\\{');
        i += rep ? rep.length : 1;
      } else if (c === '}' || c === ']') {
        out.push(`\\${c}`);
        i++;
      } else {
        out.push(c);
        i++;
      }
    }
    const body = out.join('');
    const source = `(?<![\\s\\S])(?:${body})(?![\\s\\S])`;
    new RegExp(source, flags); // a syntax error here is a pattern RE2 would reject too
    return { source, flags };
  } catch (e) {
    return { error: (e as Error).message };
  }
}
