// A profile's node events summed per op type and per node, as onnxruntime's perf test prints its
// own: time, share of all node time, calls. Reads profiles this package writes and onnxruntime's.

/** The fields of a trace event the summary reads. */
export interface ProfileEvent {
  cat: string;
  name: string;
  dur: number;
  args?: Record<string, unknown>;
}

export interface SummaryRow {
  /** The op type (per op), or the node's name (per node). */
  name: string;
  /** The node's op type (per node rows). */
  op?: string;
  provider: string;
  calls: number;
  /** Microseconds, summed over the calls. */
  totalUs: number;
  /** Of all node time. */
  share: number;
}

export interface ProfileSummary {
  /** Node time summed, µs. */
  nodeUs: number;
  /** Time of the runs (model_run events), µs. */
  runUs: number;
  runs: number;
  byOp: SummaryRow[];
  byNode: SummaryRow[];
}

const KERNEL = /_kernel_time$/;

/** Sums a profile's `<node>_kernel_time` events by op type and by node, largest first. */
export function summarizeProfile(events: readonly ProfileEvent[]): ProfileSummary {
  const nodes = events.filter((e) => e.cat === 'Node' && KERNEL.test(e.name));
  const runs = events.filter((e) => e.cat === 'Session' && e.name === 'model_run');
  const nodeUs = nodes.reduce((n, e) => n + e.dur, 0);
  const add = (m: Map<string, SummaryRow>, key: string, row: Omit<SummaryRow, 'calls' | 'totalUs' | 'share'>, dur: number) => {
    const r = m.get(key) ?? { ...row, calls: 0, totalUs: 0, share: 0 };
    r.calls++;
    r.totalUs += dur;
    m.set(key, r);
  };
  const ops = new Map<string, SummaryRow>();
  const byNode = new Map<string, SummaryRow>();
  for (const e of nodes) {
    const op = String(e.args?.op_name ?? '?');
    const provider = String(e.args?.provider ?? '?');
    add(ops, `${provider}\u0000${op}`, { name: op, provider }, e.dur);
    add(byNode, e.name, { name: e.name.replace(KERNEL, ''), op, provider }, e.dur);
  }
  const rows = (m: Map<string, SummaryRow>) =>
    [...m.values()]
      .map((r) => ({ ...r, share: nodeUs ? r.totalUs / nodeUs : 0 }))
      .sort((a, b) => b.totalUs - a.totalUs || a.name.localeCompare(b.name));
  return {
    nodeUs,
    runUs: runs.reduce((n, e) => n + e.dur, 0),
    runs: runs.length,
    byOp: rows(ops),
    byNode: rows(byNode),
  };
}

/** The summary as text: per op type, then the `top` slowest nodes. */
export function formatSummary(s: ProfileSummary, top = 20): string {
  const ms = (us: number) => (us / 1000).toFixed(3);
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const table = (head: string[], body: string[][]) => {
    const w = head.map((h, i) => Math.max(h.length, ...body.map((r) => r[i].length)));
    const line = (r: string[]) => r.map((c, i) => (i === 0 || i === 1 ? c.padEnd(w[i]) : c.padStart(w[i]))).join('  ');
    return [line(head), ...body.map(line)].join('\n');
  };
  const out = [
    `${s.runs} run(s): ${ms(s.runUs)} ms in all; node time ${ms(s.nodeUs)} ms`,
    '',
    'per op type:',
    table(
      ['op', 'provider', 'calls', 'total ms', 'avg ms', 'share'],
      s.byOp.map((r) => [r.name, r.provider, String(r.calls), ms(r.totalUs), ms(r.totalUs / r.calls), pct(r.share)]),
    ),
    '',
    `slowest nodes (${Math.min(top, s.byNode.length)} of ${s.byNode.length}):`,
    table(
      ['node', 'op', 'calls', 'total ms', 'avg ms', 'share'],
      s.byNode.slice(0, top).map((r) => [r.name, r.op ?? '', String(r.calls), ms(r.totalUs), ms(r.totalUs / r.calls), pct(r.share)]),
    ),
  ];
  return out.join('\n');
}
