export * from './docs.js';
export * from './hostile-input.js';
export * from './identity.js';
export * from './load.js';
export * from './otlp.js';
export * from './process.js';
export * from './random.js';
export * from './redis.js';
