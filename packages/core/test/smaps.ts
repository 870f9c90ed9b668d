// What /proc/self/smaps says of this process's mappings (Linux), for the tests of the memory that
// asks for huge pages (the resident arena, the heap).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The path of this module, to import in a child process's script (runScript). */
export const SMAPS_HELPER = JSON.stringify(fileURLToPath(import.meta.url));

/** Bytes of this process's mappings that carry the huge-page advice (VmFlags "hg"). */
export function advisedBytes(): number {
  let total = 0;
  for (const vma of readFileSync('/proc/self/smaps', 'utf8').split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    const flags = /\nVmFlags:([^\n]*)/.exec(vma)?.[1] ?? '';
    if (!flags.split(' ').includes('hg')) continue;
    const [lo, hi] = vma.slice(0, vma.indexOf(' ')).split('-');
    total += Number(BigInt(`0x${hi}`) - BigInt(`0x${lo}`));
  }
  return total;
}
