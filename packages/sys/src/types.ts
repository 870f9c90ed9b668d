/** A native handle as koffi passes it: mlx-c's `{ void* ctx }` struct, by value. */
export interface MlxHandle {
  ctx: unknown;
}
