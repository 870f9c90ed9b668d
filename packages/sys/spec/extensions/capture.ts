// ABI spec, this library's additions to mlx-c for a runtime over MLX (prefix mlxc_, written by
// hand in native/src/capture.cpp): a closure traced once per input signature and replayed from
// native code, where MLX's compile would need a C++ compiler on the CPU.
import { manual, type FnSpec } from '../dsl.js';

export const capture: FnSpec[] = [
  manual(
    'int mlxc_capture(mlx_closure* res, const mlx_closure fun)',
    "a closure that traces fun once per input signature (dtypes and shapes) with placeholder inputs, keeps the arrays between them and the outputs, and on each call builds them again over the real inputs (sharing the traced primitives): mlx_compile's replay without its simplification and fusion, and without the C++ compiler MLX's CPU compile needs. fun must not read its inputs' data (evaluating a placeholder fails)",
  ),
];
