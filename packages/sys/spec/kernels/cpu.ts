// ABI spec, the project's own kernels: the CPU they run on (native/src/kernels/common/): the
// thread count of their pool (and OpenBLAS's) and the instruction set their builds use. Written by
// hand; @mlx/core wraps them as cpuThreads, setCpuThreads, cpuKernelsUseAvx2, cpuKernelsUseAvx512.
import { manual, type FnSpec } from '../dsl.js';

export const cpu: FnSpec[] = [
  manual(
    'int mlxc_cpu_set_threads(int n)',
    "threads of the fused kernels' pool and of OpenBLAS (openblas_set_num_threads, where loaded); n <= 0: the machine's cores",
  ),
  manual('int mlxc_cpu_threads(int* res)', "the fused kernels' thread count"),
  manual('int mlxc_cpu_has_avx2(bool* res)', 'whether the fused kernels run their AVX2+FMA build on this CPU'),
  manual(
    'int mlxc_cpu_has_avx512(bool* res)',
    'whether the fused kernels run their AVX-512F build on this CPU (it takes precedence over AVX2)',
  ),
];
