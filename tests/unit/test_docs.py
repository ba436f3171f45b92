"""README and docs/ stay true: every measured figure comes from a generated block that is fresh, no
figure is typed by hand, and every page is reachable from README with no broken relative link
(issue 22 item 5, issue 23 item 1). Reads files only: fast."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import docs_figures  # noqa: E402
from docsgen import blocks  # noqa: E402
from docsgen.referee_tables import TABLES  # noqa: E402

# Pages owned by other helpers whose figures are not converted to blocks yet. The lead empties this
# list once they are; never add a page whose figures are generated here.
TYPED_FIGURES_NOT_YET_CONVERTED: set[str] = set()

# Pages other helpers are writing, linked from README and the index before they land. The lead empties this
# list when they are merged; a link to any other missing file fails.
PAGES_NOT_YET_MERGED: set[str] = set()

UNIT = r"(?:%|ms|µs|us|ns|s|min|h|KB|MB|GB|TB|KiB|MiB|GiB|B|Mb/s|Gb/s|Tb/s|km|m|×)"
NUMBER = r"(?<![\w.,/=:-])\d[\d,]*(?:\.\d+)?(?:e-?\d+)?"
TYPED_FIGURE = re.compile(NUMBER + r"\s?" + UNIT + r"(?![\w/])")
ALLOWED = re.compile(r"\b95 % (?:CI|confidence)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+\1")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose_lines(text: str):
    """(line number, text) of what a reader sees as prose: not inside fenced code, a generated block or
    an HTML comment, with inline code spans and link targets removed."""
    inside_fence = inside_block = False
    for i, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            inside_fence = not inside_fence
            continue
        if line.startswith("<!-- figure:"):
            inside_block = True
        if line.startswith("<!-- /figure -->"):
            inside_block = False
            continue
        if inside_fence or inside_block:
            continue
        line = re.sub(r"<!--.*?-->", "", CODE_SPAN.sub("", line))
        yield i, LINK.sub("]", line)


def typed_figures(text: str) -> list[tuple[int, str]]:
    return [(i, m.group(0)) for i, line in prose_lines(text) for m in TYPED_FIGURE.finditer(ALLOWED.sub("", line))]


def pages() -> list[Path]:
    return blocks.markdown_files(ROOT)


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def test_every_figure_block_is_fresh():
    assert docs_figures.problems() == []


def test_a_stale_or_unknown_block_is_detected(tmp_path):
    """The check can fail: an edited figure, an unknown name and a block with no record are named."""
    good = docs_figures.render(ROOT, "cost")
    md = tmp_path / "page.md"
    md.write_text(f"<!-- figure:cost -->\n{good}\n<!-- /figure -->\n")
    assert docs_figures.problems(ROOT, [md]) == []
    md.write_text(
        f"<!-- figure:cost -->\n{good.replace('3072', '3071', 1)}\n<!-- /figure -->\n"
        "<!-- figure:no-such-figure -->\n42 ms\n<!-- /figure -->\n"
    )
    bad = docs_figures.problems(ROOT, [md])
    assert len(bad) == 2 and "'cost' is stale" in bad[0] and "unknown figure 'no-such-figure'" in bad[1]


def test_write_fills_a_block_from_its_record(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("x\n<!-- figure:cost -->\nold\n<!-- /figure -->\n")
    rec = ROOT / "results/reference/records/cost.json"
    (tmp_path / rec.relative_to(ROOT)).parent.mkdir(parents=True)
    (tmp_path / rec.relative_to(ROOT)).write_text(rec.read_text())
    assert docs_figures.write(tmp_path) == 1
    assert docs_figures.problems(tmp_path) == []
    assert "ZCube(n,2)" in (tmp_path / "README.md").read_text()


def test_referee_tables_are_read_from_the_shipped_summaries(tmp_path):
    """The reference-run tables are drawn from results/reference/referee/*/{same,real}.json at render time, so a
    regenerated summary changes the page (nothing is copied into the renderer)."""
    src = ROOT / "results/reference/referee"
    shutil.copytree(src, tmp_path / "referee")
    for scale in ("same", "real"):
        p = tmp_path / "referee" / "queue-faithful" / f"{scale}.json"
        doc = json.loads(p.read_text())
        doc["fabrics"]["zcube"]["kv_p50"]["gap"] = 0.987
        p.write_text(json.dumps(doc))
        assert "98.7 %" in TABLES[f"referee-{scale}"](tmp_path / "referee")
        assert "98.7 %" not in TABLES[f"referee-{scale}"](src)


def test_typed_figure_pattern_catches_figures_and_spares_code_and_ci():
    text = (
        "took 13.8 % and 4.7 s, 1,077 km, 2.9× faster, 20 Mb/s\n"
        "a `19.54 Mb/s` span, the 95 % CI, [a](x/3.5%.md)\n```\n93 s\n```\n"
        "<!-- figure:cost -->\n12 ms\n<!-- /figure -->\nZCube(4,2) with 16 GPUs\n"
    )
    assert [f for _, f in typed_figures(text)] == ["13.8 %", "4.7 s", "1,077 km", "2.9×", "20 Mb/s"]


def test_no_measured_figure_is_typed_by_hand():
    found = []
    for p in pages():
        if rel(p).startswith("docs/reference/") or rel(p) in TYPED_FIGURES_NOT_YET_CONVERTED:
            continue
        found += [f"{rel(p)}:{i}: {fig}" for i, fig in typed_figures(p.read_text())]
    assert found == [], "figures typed by hand (use a generated block or a code span):\n" + "\n".join(found)


def links(p: Path) -> list[str]:
    text = "\n".join(line for _, line in prose_lines_keep_links(p.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


def prose_lines_keep_links(text: str, code: bool = True):
    """Lines outside fenced code; code spans removed unless code is False (headings keep their text)."""
    inside_fence = False
    for i, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            inside_fence = not inside_fence
            continue
        if not inside_fence:
            yield i, CODE_SPAN.sub("", line) if code else line.replace("`", "")


def anchors(page: Path) -> set[str]:
    """The heading anchors a forge gives a Markdown page (GitHub's rule: lower case, punctuation dropped,
    spaces to hyphens)."""
    heads = [
        line.lstrip("#").strip()
        for _, line in prose_lines_keep_links(page.read_text(), code=False)
        if line.startswith("#")
    ]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_every_relative_link_resolves():
    """Files and, for Markdown pages, the heading a #fragment names."""
    broken = []
    for p in pages():
        for target in links(p):
            path, _, frag = target.partition("#")
            resolved = (p.parent / unquote(path)).resolve() if path else p
            pending = resolved.is_relative_to(ROOT) and resolved.relative_to(ROOT).as_posix() in PAGES_NOT_YET_MERGED
            if not resolved.exists():
                if not pending:
                    broken.append(f"{rel(p)}: {target}")
            elif frag and resolved.suffix == ".md" and frag not in anchors(resolved):
                broken.append(f"{rel(p)}: {target} (no such heading)")
    assert broken == []


def test_heading_anchors_follow_the_forge_rule(tmp_path):
    (tmp_path / "a.md").write_text("# Title: `x`\n\n## Flow-level load\n")
    assert anchors(tmp_path / "a.md") == {"title-x", "flow-level-load"}


def test_every_docs_page_is_reachable_from_readme():
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for target in links(p):
            q = (p.parent / unquote(target.split("#", 1)[0])).resolve()
            if q.suffix == ".md" and q.is_file() and q.is_relative_to(ROOT / "docs"):
                todo.append(q)
    unreachable = [rel(p) for p in pages() if p.resolve() not in seen]
    assert unreachable == []


@pytest.mark.parametrize("page", ["README.md"])
def test_readme_is_a_front_page(page):
    n = len((ROOT / page).read_text().splitlines())
    assert n <= 200, f"{page} has {n} lines; the manual is docs/"
