// The C library of the machine: the Linux platform packages are built against MLX's manylinux wheels
// and load only on a glibc at least as new as theirs.
import { readFileSync } from 'node:fs';

let glibc: string | null | undefined;
/**
 * The C library's version where it is glibc ('2.36'), else null (musl, or not Linux). Read from the
 * `ldd` script glibc installs (a fraction of a millisecond), else from Node's diagnostic report
 * (several milliseconds, without its network section).
 */
export function glibcVersion(): string | null {
  if (glibc !== undefined) return glibc;
  glibc = null;
  if (process.platform !== 'linux') return glibc;
  try {
    const text = readFileSync('/usr/bin/ldd', 'latin1');
    const m = /ldd \((?:GNU libc|[^)]*GLIBC[^)]*)\) (\d+\.\d+)/.exec(text);
    if (m) return (glibc = m[1]);
  } catch {
    // no ldd: ask the report
  }
  // excludeNetwork: Node 20.13 and later (older ones ignore it and take a little longer).
  const report = process.report as (NodeJS.ProcessReport & { excludeNetwork?: boolean }) | undefined;
  if (report) {
    const exclude = report.excludeNetwork;
    report.excludeNetwork = true;
    try {
      const header = (report.getReport() as { header?: { glibcVersionRuntime?: string } }).header;
      glibc = header?.glibcVersionRuntime ?? null;
    } finally {
      report.excludeNetwork = exclude;
    }
  }
  return glibc;
}

/** Whether version `v` ('2.34') is at least `floor` ('2.35'). */
export function versionAtLeast(v: string, floor: string): boolean {
  const a = v.split('.').map(Number);
  const b = floor.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x > y;
  }
  return true;
}

/**
 * Why a library built for glibc `floor` cannot load on a system with glibc `version` (null: musl or
 * not Linux), or undefined when it can.
 */
export function glibcTooOld(floor: string, version: string | null): string | undefined {
  if (!version || versionAtLeast(version, floor)) return undefined;
  return `needs glibc ${floor} or newer (built against MLX's wheel), and this system has glibc ${version}; build libmlxc from source against MLX (packages/sys/native) and set MLX_C_LIBRARY`;
}
