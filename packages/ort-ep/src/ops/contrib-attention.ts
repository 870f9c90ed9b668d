import type { OpEntry } from '../registry/types.js';
export const contribAttentionOps: OpEntry[] = [];
