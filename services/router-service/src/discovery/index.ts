export * from './endpointslices.js';
export * from './pools.js';
