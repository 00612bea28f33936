"""The decoding loop and its maths: engine, verifier, token trees, sampling, KV cache, metrics,
per-request state. Imports only the rest of the library (drafters, models), never the application."""
