# Developer shortcuts; each target is one script, so CI and a shell run the same thing.
#   make check   the fast loop: ruff, format check, import contracts, unit tier without slow tests (no root)
#   make unit    the whole unit tier, slow tests included (no root)
#   make test    the whole suite as CI runs it (root: provisions, then every tier)
.PHONY: check unit test

check:
	bash scripts/check.sh

unit:
	.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 tests/unit

test:
	bash scripts/test.sh
