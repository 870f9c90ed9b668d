import type { OpEntry } from '../registry/types.js';

export const stringsOps: OpEntry[] = [];
