"""A flow-level network engine: max-min fair-share rates over the exact routes the tables give, event by event, for 1,024-16,384 GPUs."""
