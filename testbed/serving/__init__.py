"""A closed-loop Prefill/Decode serving model driven by a network engine's KV completions, and the capacity search at an SLO."""
