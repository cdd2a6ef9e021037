export * from './load.js';
export * from './tracker.js';
