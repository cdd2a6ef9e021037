export * from './tracker.js';
