"""The application layer: the CLI and its commands, the benchmark, tuning, the server, training and
export. Users of the library (`resolve`, `SpecDecoder`, the engine); the library never imports them."""
