/** Installed versions of this folder's packages, for the run report (npm aliases by alias name). */
import { readFileSync } from 'node:fs';

export function installedVersion(name) {
  const url = new URL(`../node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}
