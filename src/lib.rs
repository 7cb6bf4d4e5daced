//! breakdance: a software branch tracer.
