/** The .ts source files under `dir` (not tests, not declarations). */
export function sourceFiles(dir: string): string[];
/** The files `file` imports or re-exports from, by relative specifier. */
export function importsOf(file: string): string[];
/** Every circle of imports among the files under `dir`, as lists of paths relative to it. */
export function importCycles(dir: string): string[][];
