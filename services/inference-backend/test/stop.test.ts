import { StrataError } from '@strata/common';
import { randomInt, seededRandom } from '@strata/common/testing';
import { describe, expect, it } from 'vitest';
import { StopMatcher, type StopMatcherOptions } from '../src/model/stop.js';

/** Feeds `deltas`, then finish() unless a stop was found; returns each step's text and the stop. */
function run(
  stops: string[],
  deltas: string[],
  options?: StopMatcherOptions,
): { steps: string[]; stop: string | null; tail: string } {
  const m = new StopMatcher(stops, options);
  const steps = deltas.map((d) => m.push(d).text);
  return { steps, stop: m.stopped, tail: m.finish() };
}

describe('StopMatcher', () => {
  it('passes text through when there are no stop strings', () => {
    expect(run([], ['Hello', ' world'])).toEqual({ steps: ['Hello', ' world'], stop: null, tail: '' });
  });

  it('cuts before a stop string inside one delta', () => {
    expect(run(['END'], ['Hello END world'])).toEqual({ steps: ['Hello '], stop: 'END', tail: '' });
  });

  it('holds a possible start of a stop string and finds a stop spanning several deltas', () => {
    expect(run(['END'], ['Hel', 'lo E', 'N', 'D more'])).toEqual({
      steps: ['Hel', 'lo ', '', ''],
      stop: 'END',
      tail: '',
    });
  });

  it('releases held text as soon as it can no longer become a stop string', () => {
    expect(run(['END'], ['ab E', 'Nx', 'yz'])).toEqual({ steps: ['ab ', 'ENx', 'yz'], stop: null, tail: '' });
  });

  it('keeps holding a tail that is again a stop prefix after a false start', () => {
    // "EEN" - the first E fails, the second may still start "END".
    expect(run(['END'], ['E', 'E', 'N', 'D'])).toEqual({ steps: ['', 'E', '', ''], stop: 'END', tail: '' });
  });

  it('stops at the very start of the output', () => {
    expect(run(['\n\n'], ['\n', '\nmore'])).toEqual({ steps: ['', ''], stop: '\n\n', tail: '' });
    expect(run(['The end'], ['The end.'])).toEqual({ steps: [''], stop: 'The end', tail: '' });
  });

  it('flushes the held tail when the sequence ends for another reason', () => {
    expect(run(['The end'], ['Once ', 'upon. The en'])).toEqual({
      steps: ['Once ', 'upon. '],
      stop: null,
      tail: 'The en',
    });
  });

  it('ends at the earliest of several stop strings', () => {
    expect(run(['bcd', 'abc'], ['xab', 'cd'])).toEqual({ steps: ['x', ''], stop: 'abc', tail: '' });
    expect(run(['\n\n', 'User:'], ['Sure.\nUs', 'er: hi\n\n'])).toEqual({
      steps: ['Sure.\n', ''],
      stop: 'User:',
      tail: '',
    });
  });

  it('holds the longest tail that any stop string could grow from', () => {
    expect(run(['abcd', 'cx'], ['zabc', 'y'])).toEqual({ steps: ['z', 'abcy'], stop: null, tail: '' });
  });

  it('keeps the stop string in the output when asked, preferring the longest at one position', () => {
    expect(run(['END'], ['Hello E', 'ND world'], { includeStopString: true })).toEqual({
      steps: ['Hello ', 'END'],
      stop: 'END',
      tail: '',
    });
    expect(run(['ab', 'abc'], ['xabcd'], { includeStopString: true }).steps).toEqual(['xabc']);
  });

  it('sends nothing more once stopped', () => {
    const m = new StopMatcher(['.']);
    expect(m.push('One. Two.')).toEqual({ text: 'One', stop: '.' });
    expect(m.push(' Three')).toEqual({ text: '', stop: '.' });
    expect(m.finish()).toBe('');
  });

  it('matches stop strings made of characters outside the BMP', () => {
    expect(run(['😀!'], ['a😀', '!b'])).toEqual({ steps: ['a', ''], stop: '😀!', tail: '' });
  });

  it('rejects empty and malformed stop strings with STRATA_INVALID_PARAM', () => {
    for (const stops of [['ok', ''], ['\ud83d']]) {
      let err: unknown;
      try {
        new StopMatcher(stops);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(StrataError);
      expect((err as StrataError).code).toBe('STRATA_INVALID_PARAM');
      expect((err as StrataError).message).toBe(
        `stop[${stops.length - 1}] must be a non-empty string of whole Unicode characters`,
      );
    }
  });

  it('agrees with cutting the whole text at the first stop, for random texts split at random', () => {
    const rand = seededRandom(3);
    const alphabet = ['a', 'b', 'c', ' ', '\n', 'é', '😀'];
    const word = (len: number): string =>
      Array.from({ length: len }, () => alphabet[randomInt(rand, alphabet.length)]).join('');
    for (let n = 0; n < 2000; n += 1) {
      const stops = Array.from({ length: 1 + randomInt(rand, 3) }, () => word(1 + randomInt(rand, 3)));
      const text = word(randomInt(rand, 30));
      const cuts = [...Array.from(text).keys()].filter(() => rand() < 0.4);
      const chars = Array.from(text);
      const deltas: string[] = [];
      let last = 0;
      for (const cut of [...cuts, chars.length]) {
        deltas.push(chars.slice(last, cut).join(''));
        last = cut;
      }
      const { steps, stop, tail } = run(stops, deltas);
      const first = Math.min(...stops.map((s) => text.indexOf(s)).filter((i) => i >= 0));
      const expected = Number.isFinite(first) ? text.slice(0, first) : text;
      expect(steps.join('') + tail).toBe(expected);
      expect(stop !== null).toBe(Number.isFinite(first));
      for (const s of steps) expect(s.isWellFormed()).toBe(true);
    }
  });
});
