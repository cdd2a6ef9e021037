export * from './memory-store.js';
export * from './redis-store.js';
export * from './service.js';
export * from './store.js';
