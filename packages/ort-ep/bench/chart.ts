// A small grouped bar chart as SVG text, for benchmark figures in READMEs (no dependencies).
export interface Chart {
  title: string;
  groups: string[];
  series: { name: string; values: number[] }[];
  /** Log-scale values (ms spanning orders of magnitude). */
  log?: boolean;
  unit?: string;
}

const COLORS = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#b07aa1'];
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');

export function barChart(c: Chart): string {
  const bw = 14;
  const gap = 18;
  const gw = c.series.length * bw + gap;
  const left = 60;
  const top = 40;
  const h = 260;
  const width = left + c.groups.length * gw + 20;
  const height = top + h + 110;
  const all = c.series.flatMap((s) => s.values).filter((v) => Number.isFinite(v) && v > 0);
  const max = Math.max(...all, 1e-9);
  const min = c.log ? Math.min(...all) : 0;
  const lo = c.log ? Math.floor(Math.log10(min)) : 0;
  const hi = c.log ? Math.ceil(Math.log10(max)) : max;
  const y = (v: number) => (c.log ? top + h - ((Math.log10(v) - lo) / (hi - lo || 1)) * h : top + h - (v / (hi || 1)) * h);
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">\n`;
  svg += `<rect width="100%" height="100%" fill="white"/>\n<text x="${left}" y="20" font-size="13">${esc(c.title)}</text>\n`;
  if (c.log) {
    for (let p = lo; p <= hi; p++) {
      const yy = y(10 ** p);
      svg += `<line x1="${left}" x2="${width - 10}" y1="${yy}" y2="${yy}" stroke="#ddd"/><text x="${left - 6}" y="${yy + 4}" text-anchor="end">${10 ** p >= 1 ? 10 ** p : (10 ** p).toPrecision(1)}</text>\n`;
    }
  }
  c.groups.forEach((g, gi) => {
    const x0 = left + gi * gw + gap / 2;
    c.series.forEach((s, si) => {
      const v = s.values[gi];
      if (!Number.isFinite(v) || v <= 0) return;
      const yy = y(v);
      svg += `<rect x="${x0 + si * bw}" y="${yy.toFixed(1)}" width="${bw - 2}" height="${(top + h - yy).toFixed(1)}" fill="${COLORS[si % COLORS.length]}"><title>${esc(`${s.name} ${g}: ${v.toPrecision(3)}${c.unit ?? ' ms'}`)}</title></rect>\n`;
    });
    svg += `<text transform="translate(${x0 + (c.series.length * bw) / 2},${top + h + 10}) rotate(40)" >${esc(g)}</text>\n`;
  });
  c.series.forEach((s, si) => {
    svg += `<rect x="${left + si * 110}" y="${height - 18}" width="10" height="10" fill="${COLORS[si % COLORS.length]}"/><text x="${left + si * 110 + 14}" y="${height - 9}">${esc(s.name)}</text>\n`;
  });
  return svg + '</svg>\n';
}
