// The one resolver of optional packages (onnxruntime-node and onnxruntime-web for the fallback,
// the image codecs of ImageDecoder, the onnxruntime-common copies the backend registers with):
// the application's copy first, found from the working folder's project and from the folder of
// the script node runs (a bundle's own folder), then this package's own dependencies, so that the
// copy the application uses is the one that runs.
import * as nodeModule from 'node:module';
import { isAbsolute, join } from 'node:path';
import { pathToFileURL } from 'node:url';

/**
 * This module's URL: import.meta.url, or in a CommonJS bundle (where the bundler empties
 * import.meta) the bundle's own file. webpack writes the URL the source had where it was built
 * (a folder that need not exist where the bundle runs): hence the script's folder as a place too.
 */
export const selfUrl: string = import.meta.url ?? pathToFileURL(__filename).href;

/**
 * createRequire(where), called through the module's namespace: webpack replaces a createRequire
 * imported by name with its own require where `where` is a constant, and with undefined where it
 * is not (every call here), which would make every optional package look absent in its bundles.
 */
export function requireAt(where: string): Requirer {
  return nodeModule.createRequire(where);
}

/**
 * A CommonJS require bound to a place (what createRequire returns), spelled out so that these
 * declarations need no @types/node.
 */
export interface Requirer {
  (id: string): unknown;
  resolve(id: string): string;
}

/**
 * The script node was started with (process.argv[1]) where it is the application's own: absolute
 * and outside node_modules (a test runner or CLI run from node_modules is not the application).
 */
function applicationScript(): string | undefined {
  const script = process.argv[1];
  return script && isAbsolute(script) && !script.split(/[\\/]/).includes('node_modules') ? script : undefined;
}

/**
 * Where an optional package is looked for, in order: the working folder's project, the
 * application's script (applicationScript: a bundled application finds the packages installed
 * beside it whatever the working folder), then this package.
 */
export function packageRequirers(): Requirer[] {
  const out: Requirer[] = [];
  try {
    out.push(requireAt(join(process.cwd(), 'package.json')));
  } catch {
    // No usable working folder.
  }
  const script = applicationScript();
  if (script) out.push(requireAt(script));
  out.push(requireAt(selfUrl));
  return out;
}

/**
 * The first copy of `name` that loads and that `accept` takes, from `from` (default
 * packageRequirers()); undefined when none does. A copy that fails to load (a missing native
 * binary) counts as absent: the next place is tried. Nothing is cached here.
 */
export function requireOptional<T>(
  name: string,
  accept: (m: unknown, from: Requirer) => boolean = () => true,
  from: readonly Requirer[] = packageRequirers(),
): T | undefined {
  for (const req of from) {
    try {
      const m = req(name) as unknown;
      if (accept(m, req)) return m as T;
    } catch {
      // Not installed there, or it failed to load: try the next place.
    }
  }
  return undefined;
}

/** Whether `name` resolves from one of `from` (without loading it). */
export function resolvesOptional(name: string, from: readonly Requirer[] = packageRequirers()): boolean {
  return from.some((req) => {
    try {
      req.resolve(name);
      return true;
    } catch {
      return false;
    }
  });
}
