// The registry: entries indexed by (domain, op type), each with an opset range.
import type { OpEntry } from './types.js';

export class OpRegistry {
  private readonly byKey = new Map<string, OpEntry[]>();
  private readonly families = new Map<OpEntry, string>();

  /** Adds entries of one family (the file that implements them, for OPERATORS.md and messages). */
  addFamily(family: string, entries: readonly OpEntry[]): this {
    this.add(...entries);
    for (const e of entries) this.families.set(e, family);
    return this;
  }

  /** The family an entry was added with, if any. */
  familyOf(e: OpEntry): string | undefined {
    return this.families.get(e);
  }

  add(...entries: (OpEntry | readonly OpEntry[])[]): this {
    for (const e of entries.flat() as OpEntry[]) {
      if (!e.run && !e.host) throw new Error(`registry: ${e.domain}::${e.opType} (since ${e.since}) has neither run() nor host()`);
      if (e.placement === 'host' && !e.host) throw new Error(`registry: ${e.domain}::${e.opType} is placed on the host but has no host()`);
      const key = `${e.domain}::${e.opType}`;
      const list = this.byKey.get(key) ?? this.byKey.set(key, []).get(key)!;
      for (const other of list) {
        const overlap = e.since <= (other.until ?? Infinity) && other.since <= (e.until ?? Infinity);
        if (overlap)
          throw new Error(`registry: ${key} opset ranges overlap (${e.since}..${e.until ?? ''} and ${other.since}..${other.until ?? ''})`);
      }
      list.push(e);
      list.sort((a, b) => a.since - b.since);
    }
    return this;
  }

  /** The entry for a node of `opType` in `domain` under `opset`, or undefined. */
  lookup(domain: string, opType: string, opset: number): OpEntry | undefined {
    const list = this.byKey.get(`${domain}::${opType}`);
    if (!list) return undefined;
    for (let i = list.length - 1; i >= 0; i--) {
      const e = list[i];
      if (e.since <= opset && opset <= (e.until ?? Infinity)) return e;
    }
    return undefined;
  }

  /** Why `lookup` found nothing, in a sentence. */
  explainMissing(domain: string, opType: string, opset: number): string {
    const list = this.byKey.get(`${domain}::${opType}`);
    if (!list) return `no implementation of ${opType} in domain ${domain}`;
    return `${opType} is implemented for opsets ${list.map((e) => `${e.since}${e.until ? `-${e.until}` : '+'}`).join(', ')}, not ${opset}`;
  }

  entries(): OpEntry[] {
    return [...this.byKey.values()].flat();
  }
}
