// Stop strings on streamed text. Deltas go in; what comes out is the text that is safe to send:
// a tail that could still grow into a stop string is held back until the next delta decides it.
// A stop string may span any number of deltas. The output ends just before the earliest stop
// string (excluded by default, as in OpenAI's API and vLLM). When the sequence ends for another
// reason (EOS, length), finish() releases the held tail.
//
// Cost per delta is O((held + delta) x stop strings); held is shorter than the longest stop string.

import { StrataError } from '@strata/common';

export interface StopMatcherOptions {
  /** Keep the stop string at the end of the output (vLLM's include_stop_str_in_output). */
  includeStopString?: boolean;
}

export interface StopStep {
  /** Text to send now (may be ''). */
  text: string;
  /** The stop string that ended the output, or null while it goes on. */
  stop: string | null;
}

export class StopMatcher {
  readonly #stops: readonly string[];
  readonly #include: boolean;
  /** Text received but not yet sent: the longest tail that is a proper prefix of some stop string. */
  #held = '';
  #stopped: string | null = null;

  /** Throws StrataError STRATA_INVALID_PARAM for an empty or malformed (lone surrogate) stop string. */
  constructor(stops: readonly string[], options: StopMatcherOptions = {}) {
    for (const [i, stop] of stops.entries()) {
      if (stop.length === 0 || !stop.isWellFormed()) {
        throw new StrataError(
          'STRATA_INVALID_PARAM',
          `stop[${i}] must be a non-empty string of whole Unicode characters`,
        );
      }
    }
    this.#stops = [...new Set(stops)];
    this.#include = options.includeStopString ?? false;
  }

  /** The stop string that ended the output, or null. */
  get stopped(): string | null {
    return this.#stopped;
  }

  /** Feeds one text delta. After a stop has been found, further deltas yield nothing. */
  push(delta: string): StopStep {
    if (this.#stopped !== null) return { text: '', stop: this.#stopped };
    const text = this.#held + delta;
    const match = this.#earliestStop(text);
    if (match !== null) {
      this.#stopped = match.stop;
      this.#held = '';
      const end = this.#include ? match.index + match.stop.length : match.index;
      return { text: text.slice(0, end), stop: match.stop };
    }
    const keep = this.#longestStopPrefixSuffix(text);
    this.#held = text.slice(text.length - keep);
    return { text: text.slice(0, text.length - keep), stop: null };
  }

  /** Ends the sequence: returns the held tail ('' once a stop was found). */
  finish(): string {
    const tail = this.#held;
    this.#held = '';
    return this.#stopped === null ? tail : '';
  }

  /** Earliest occurrence of any stop string; at equal positions the longest, so "include" keeps most. */
  #earliestStop(text: string): { index: number; stop: string } | null {
    let best: { index: number; stop: string } | null = null;
    for (const stop of this.#stops) {
      const index = text.indexOf(stop);
      if (index < 0) continue;
      if (best === null || index < best.index || (index === best.index && stop.length > best.stop.length)) {
        best = { index, stop };
      }
    }
    return best;
  }

  /** Length of the longest suffix of `text` that is a proper prefix of some stop string. */
  #longestStopPrefixSuffix(text: string): number {
    let longest = 0;
    for (const stop of this.#stops) {
      for (let n = Math.min(stop.length - 1, text.length); n > longest; n -= 1) {
        if (text.endsWith(stop.slice(0, n))) {
          longest = n;
          break;
        }
      }
    }
    return longest;
  }
}
