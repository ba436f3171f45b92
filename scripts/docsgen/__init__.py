"""Generated figures for README.md and docs/: blocks, records, renderers (see scripts/docs_figures.py)."""
