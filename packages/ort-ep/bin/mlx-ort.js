#!/usr/bin/env node
// The mlx-ort command line (built from src/cli.ts).
import('../dist/cli.js')
  .then((m) => m.main(process.argv.slice(2)))
  .catch((e) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
