// This library's additions to mlx-c's ABI (prefix mlxc_, all written by hand in native/src/): what
// a runtime over MLX needs from native code that the C API does not give, by concept.
import type { FnSpec } from '../dsl.js';
import { capture } from './capture.js';
import { handles } from './handles.js';
import { evaluation } from './eval.js';
import { transfer } from './transfer.js';

/** By group; `extensions/<concept>` names the README row. */
export const extensions: Record<string, FnSpec[]> = {
  'extensions/handles': handles,
  'extensions/eval': evaluation,
  'extensions/transfer': transfer,
  'extensions/capture': capture,
};
