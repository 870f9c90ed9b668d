// ABI spec, the project's own kernels: index checks (native/src/checked_ops.cpp): integer indices
// made bounded positions in one primitive, with what a front end needs to report a bad one; and
// rows taken by those positions (native/src/kernels/index/).
import { op, type FnSpec } from '../dsl.js';

export const indices: FnSpec[] = [
  op(
    'int mlxc_bounded_indices(mlx_vector_array* res, const mlx_array indices, const int64_t* dims, size_t dims_num, bool negative, const mlx_stream s)',
    'mlxc::safe::bounded_indices($indices, $dims, $negative, $s)',
    'integer indices as int32 positions in [0, n) (negative ones from the end with `negative`; others clamped), n = dims[0] or dims[j] per last-axis component j: {positions, bad (one bool, shape [1]: an index was outside [-n, n), or [0, n)), [below, above] (int64: the smallest index under range and the largest over it, 0 where none)}; take trusts these positions without a second check',
  ),
  op(
    'int mlxc_take_rows(mlx_array* res, const mlx_array table, const mlx_array indices, const mlx_stream s)',
    'mlxc::cpu::take_rows($table, $indices, $s)',
    'mlx_take along axis 0 (an embedding lookup): table [V, ...rest] at integer positions of any shape -> [...indices.shape, ...rest]; on a CPU stream, for an evaluated table in row order and int32 or int64 positions, one copy of each picked row (a negative position counts from the end, one still outside [0, V) is clamped: check indices first, as mlxc_bounded_indices does); else mlx_take. Indices that are not integers are an error',
  ),
];
