// Which package.json is this package's own: bundled into an application, `../package.json` from
// this file is the application's (or nothing), and its version says nothing about @mlx/sys.

/** The version in `manifest` if it is @mlx/sys's package.json, else null. */
export function ownManifestVersion(manifest: unknown): string | null {
  const m = manifest as { name?: unknown; version?: unknown } | null;
  return m && m.name === '@mlx/sys' && typeof m.version === 'string' && m.version ? m.version : null;
}
