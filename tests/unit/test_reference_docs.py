"""The generated reference pages (scripts/gen_reference.py): fresh in the repository, the
staleness check able to fail, and the exported schema accepting the shipped example specs."""

import argparse
import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from testbed.experiment import spec as especs

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "docs" / "examples").glob("*.yaml"))


def _gen():
    s = importlib.util.spec_from_file_location("gen_reference", REPO / "scripts" / "gen_reference.py")
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gen():
    return _gen()


def test_the_committed_pages_are_what_the_code_generates(gen):
    assert gen.stale(REPO) == [], "run: python scripts/gen_reference.py (and commit its output)"


def test_check_fails_when_a_page_is_edited_or_missing(gen, tmp_path, capsys):
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.main(["--check", "--root", str(tmp_path)]) == 0
    cli = tmp_path / "docs" / "reference" / "cli.md"
    cli.write_text(cli.read_text().replace("machine-readable output", "machine readable output", 1))
    (tmp_path / "zlab.schema.json").unlink()
    capsys.readouterr()
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "stale: docs/reference/cli.md" in err and "stale: zlab.schema.json" in err and "spec.md" not in err
    assert not (tmp_path / "zlab.schema.json").exists()  # --check writes nothing


def test_a_new_flag_makes_the_cli_page_stale(gen, tmp_path, monkeypatch):
    gen.main(["--root", str(tmp_path)])
    real = gen.build_parser

    def with_a_new_flag():
        p = real()
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["cost"].add_argument("--currency", help="prices in this currency")
        return p

    monkeypatch.setattr(gen, "build_parser", with_a_new_flag)
    assert gen.stale(tmp_path) == ["docs/reference/cli.md"]
    assert "`--currency CURRENCY` |  | prices in this currency" in gen.cli_md()


def test_every_command_and_spec_field_is_on_its_page(gen):
    cli, spec_page = gen.cli_md(), gen.spec_md()
    for name in ("doctor", "up", "fabric show", "fabric import", "run", "referee", "wiring-check"):
        assert f"## `zlab {name}`" in cli
    for section, props in especs.SCHEMA["properties"].items():
        for key in props.get("properties", {}):
            assert f"| `{section}.{key}` |" in spec_page


def test_every_spec_field_is_described():
    missing = []

    def walk(schema, prefix=""):
        for key, prop in schema.get("properties", {}).items():
            if not prop.get("description"):
                missing.append(prefix + key)
            walk(prop, prefix + key + ".")

    walk(especs.SCHEMA)
    walk(especs.FAILURE_EVENT, "failures.events[].")
    assert not missing


def test_the_exported_schema_validates_the_examples_and_rejects_a_misspelling():
    schema = json.loads((REPO / "zlab.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    assert {p.stem for p in EXAMPLES} >= {"default", "queue-faithful", "failures"}
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        assert not list(validator.iter_errors(doc)), path.name
        especs.load(str(path))  # and zlab accepts it (cross-field checks too)
    bad = yaml.safe_load((REPO / "docs" / "examples" / "failures.yaml").read_text())
    bad["workload"]["reqests"] = bad["workload"].pop("requests")
    assert any("reqests" in e.message for e in validator.iter_errors(bad))


def test_the_default_example_is_the_built_in_default():
    assert especs.load(str(REPO / "docs" / "examples" / "default.yaml")) == especs.load(None)


def test_the_spec_enums_are_the_registries():
    """Values the spec accepts are the ones the code that uses them knows, never retyped."""
    from testbed.emulation.failplan import ACTIONS, RECOVERY_MODES
    from testbed.fabric.kinds import KINDS
    from traffic.workload import MAPPINGS, SCHEDULERS

    d = especs.SCHEMA["properties"]["deployment"]["properties"]
    assert d["mapping"]["enum"] == list(MAPPINGS) and d["scheduler"]["enum"] == list(SCHEDULERS)
    assert set(d["split"]["enum"]) == {p for k in KINDS.values() for p in k.split_policies}
    f = especs.SCHEMA["properties"]["failures"]["properties"]
    assert f["recovery"]["additionalProperties"]["enum"] == list(RECOVERY_MODES)
    assert especs.FAILURE_EVENT["properties"]["action"]["enum"] == list(ACTIONS)
