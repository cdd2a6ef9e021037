// The routing file, loaded and kept current by @strata/common's config-file watcher: a change
// that validates replaces the rules, one that does not keeps the last good rules.
import {
  type ConfigFileWatcher,
  type ConfigFileWatcherOptions,
  loadConfigFile,
  watchConfigFile,
} from '@strata/common';
import { parseRoutingYaml, type RoutingConfig } from './rules.js';

export type RoutingFileWatcher = ConfigFileWatcher<RoutingConfig>;

/** Reads and validates a routing file; throws ConfigError naming every problem. */
export function loadRoutingFile(file: string): RoutingConfig {
  return loadConfigFile(file, parseRoutingYaml);
}

/** Loads the file (throwing if the first load is invalid) and watches it for changes. */
export function watchRoutingFile(
  file: string,
  options: ConfigFileWatcherOptions<RoutingConfig> = {},
): RoutingFileWatcher {
  return watchConfigFile(file, parseRoutingYaml, options);
}
