// Whether a CLI module is the program Node was started with (and not imported, by a test or
// another module): its URL against the entry script's, through symlinks (the bin shims).
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

export function isMainModule(moduleUrl: string): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return moduleUrl === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}
