import type { OpEntry } from '../registry/types.js';

export const signalOps: OpEntry[] = [];
