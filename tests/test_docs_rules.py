"""Every rule id the project cites is explained in docs/reference/rules.md (issue 29).

The code, the tests and the docs cite the contract's rules by id (``L6``,
``W5``) and its sections by number (``§13``). A reader has no copy of the
contract, so each id must have an entry on the rules page; a citation of an
id the page does not define is a typo or a rule nobody explained, and fails
here with its file and line.

What counts as a citation, in the text of every file under
``django_leasejobs/``, ``tests/``, ``benchmarks/``, ``example_project/`` and
``docs/`` (text suffixes only; build output, caches and hidden folders left
out), and ``README.md``:

* a rule id: one family letter of ``R L D W S A C O F`` in upper case, then
  one or two digits, standing alone: no letter, digit, underscore or dot
  right before it, no letter, digit or underscore right after it. So
  ``(L6)``, ``W5:``, ``L1/L2``, ``C2 + L10`` and ``f"\\nF2 on"`` cite, while a
  ULID (``01M8KBT5S4``), a dotted name, a three-digit lint code
  (``# noqa: F401``) or a lower-case word do not;
* a range: two ids of one family joined by ``-``, ``--``, an en dash or an
  em dash (``F1-F8``, ``R3-R10``) cites every id from the first to the last;
* a section: ``§`` then one or two digits (``§13``); ``§9-§12`` cites each
  section in between;
* a test named for its rule: in a ``def test_...`` name or a ``test_*.py``
  file name, an underscore-separated word that is a lower-case family letter
  and one or two digits (``test_l6_...``, ``test_f11_side_table_lock.py``).
  ``s<n>`` there may mean the rule S<n> or the section §<n> (``test_s13_...``
  is §13), so it is accepted when either is defined.

The page's own ids cannot be checked against the contract (it is not in the
repository); instead each entry must be well formed: a ``(rule-X<n>)=`` or
``(section-<n>)=`` target followed by a line that starts with that id in
bold, each id once, each rule under its family's heading, each family
numbered from 1 without a gap, as the contract numbers it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES_PAGE = ROOT / "docs" / "reference" / "rules.md"
SCANNED = ("django_leasejobs", "tests", "benchmarks", "example_project", "docs", "README.md")
TEXT_SUFFIXES = frozenset(
    {".py", ".md", ".html", ".txt", ".css", ".js", ".json", ".yml", ".yaml", ".toml", ".ini"}
)
SKIPPED_FOLDERS = frozenset({"_build", "__pycache__", "node_modules", "build", "dist"})

FAMILIES = "RLDWSACOF"
_ID = rf"[{FAMILIES}]\d{{1,2}}"
# Before an id: not a word character or a dot -- or a "\n" / "\t" escape in a string.
_BEFORE = r"(?:(?<![\w.])|(?<=\\[nt]))"
_DASH = r"\s*(?:--?|\u2013|\u2014)\s*"  # -, --, en dash, em dash
RULE = re.compile(rf"{_BEFORE}(?P<id>{_ID})(?!\w)")
RULE_RANGE = re.compile(rf"{_BEFORE}(?P<low>{_ID}){_DASH}(?P<high>{_ID})(?!\w)")
SECTION = re.compile(r"§\s?(?P<number>\d{1,2})(?!\d)")
SECTION_RANGE = re.compile(rf"§\s?(?P<low>\d{{1,2}}){_DASH}§?\s?(?P<high>\d{{1,2}})(?!\d)")
TEST_NAME = re.compile(r"\bdef (test_\w+)")
NAME_WORD = re.compile(rf"^[{FAMILIES.lower()}]\d{{1,2}}$")

TARGET = re.compile(r"^\((?:rule-(?P<rule>[^)]*)|section-(?P<section>[^)]*))\)=$")
WELL_FORMED_RULE = re.compile(rf"^[{FAMILIES}][1-9]\d?$")
WELL_FORMED_SECTION = re.compile(r"^[1-9]\d?$")


def _section(number: str) -> str:
    return f"§{int(number)}"


def _expand(low: str, high: str, prefix: str = "") -> list[str]:
    """Every id of a range, *low* and *high* included (a backwards range cites its ends)."""
    first, last = int(low.lstrip(prefix)), int(high.lstrip(prefix))
    return [f"{prefix}{n}" for n in range(first, last + 1)] or [low, high]


def citations_in_line(line: str) -> list[str]:
    """Return the ids *line* cites: rules as ``L6``, sections as ``§13``."""
    cited = [m["id"] for m in RULE.finditer(line)]
    for m in RULE_RANGE.finditer(line):
        family = m["low"][0]
        if m["high"][0] == family:
            cited += _expand(m["low"], m["high"], family)
    cited += [_section(m["number"]) for m in SECTION.finditer(line)]
    for m in SECTION_RANGE.finditer(line):
        cited += [_section(n) for n in _expand(m["low"], m["high"])]
    for name in TEST_NAME.findall(line):
        cited += _name_citations(name)
    return cited


def _name_citations(name: str) -> list[str]:
    """The ids a test function's or test file's *name* is named for (``s<n>``: see below)."""
    return [
        word.upper() if word[0] != "s" else f"s{int(word[1:])}"
        for word in name.split("_")
        if NAME_WORD.match(word)
    ]


def _is_defined(cited: str, defined: set[str]) -> bool:
    if cited.startswith("s"):  # from a test's name: the rule S<n> or the section §<n>
        return f"S{cited[1:]}" in defined or f"§{cited[1:]}" in defined
    return cited in defined


def _scanned_files() -> Iterator[Path]:
    for top in SCANNED:
        path = ROOT / top
        if path.is_file():
            yield path
            continue
        for folder, subfolders, files in os.walk(path):
            subfolders[:] = sorted(
                name
                for name in subfolders
                if name not in SKIPPED_FOLDERS
                and not name.startswith(".")
                and not name.endswith(".egg-info")
            )
            for name in sorted(files):
                if Path(name).suffix in TEXT_SUFFIXES:
                    yield Path(folder) / name


def citations() -> Iterator[tuple[str, str]]:
    """Yield ``(file:line, id)`` for every citation in the scanned files."""
    for path in _scanned_files():
        where = path.relative_to(ROOT).as_posix()
        if path.name.startswith("test_") and path.suffix == ".py":
            for cited in _name_citations(path.stem):
                yield f"{where}:0 (file name)", cited
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for cited in citations_in_line(line):
                yield f"{where}:{number}", cited


def definitions(text: str) -> tuple[list[str], list[str]]:
    """Return the ids the rules page *text* defines, in order, and what is wrong with them."""
    lines = text.splitlines()
    ids: list[str] = []
    problems: list[str] = []
    heading = ""
    for number, line in enumerate(lines, start=1):
        if line.startswith("## "):
            heading = line[3:]
        target = TARGET.match(line)
        if not target:
            if re.match(rf"^\*\*(?:{_ID}|§\d+)\b", line) and not TARGET.match(lines[number - 2]):
                problems.append(f"line {number}: an entry without a target above it: {line[:20]}")
            continue
        if target["rule"] is not None:
            entry = target["rule"]
            if not WELL_FORMED_RULE.match(entry):
                problems.append(f"line {number}: {entry!r} is not a rule id")
                continue
            if not heading.startswith(f"{entry[0]}:"):
                problems.append(f"line {number}: {entry} is under the heading {heading!r}")
        else:
            if not WELL_FORMED_SECTION.match(target["section"]):
                problems.append(f"line {number}: {target['section']!r} is not a section number")
                continue
            entry = _section(target["section"])
        following = lines[number] if number < len(lines) else ""
        if not following.startswith(f"**{entry} ") or len(following) < len(entry) + 20:
            problems.append(f"line {number}: the target {entry} is not followed by its entry")
        if entry in ids:
            problems.append(f"line {number}: {entry} is defined twice")
        ids.append(entry)
    for family in [*FAMILIES, "§"]:
        numbers = sorted(int(i[1:]) for i in set(ids) if i[0] == family)
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"family {family} is not numbered 1..n without a gap: {numbers}")
    return ids, problems


def test_every_cited_rule_id_is_defined_on_the_rules_page():
    """A reader meeting ``L6`` anywhere in the project finds it explained on one page."""
    defined, _ = definitions(RULES_PAGE.read_text(encoding="utf-8"))
    found = list(citations())
    undefined = [
        f"{where}: {cited}" for where, cited in found if not _is_defined(cited, set(defined))
    ]
    assert not undefined, "cited but not defined in docs/reference/rules.md:\n" + "\n".join(
        undefined
    )
    # The scan itself works: it finds the project's many citations of every family.
    assert {cited[0] for _, cited in found} >= set(FAMILIES) | {"§"}
    assert len(found) > 1000


def test_rules_page_ids_are_well_formed_and_unique():
    """Each entry has a link target, its id once, under its family, numbered without gaps."""
    ids, problems = definitions(RULES_PAGE.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)
    assert {i[0] for i in ids} == set(FAMILIES) | {"§"}


def test_a_citation_of_an_undefined_id_is_caught():
    """The scan would catch a typo: ids, ranges, sections and test names alike.

    The ids out of the contract's range are spelt in pieces, so that this
    file's own text cites none of them.
    """
    defined = {"L1", "L2", "L3", "L6", "F1", "F2", "F3", "S1"}
    bogus_rule, bogus_section = "L" + "42", "§" + "77"
    line = f"(L6) W5: F1\u2013F3, {bogus_rule}; {bogus_section}; "
    line += f"def test_s13_x_{bogus_rule.lower()}():"
    cited = citations_in_line(line)
    assert cited.count("F2") == 1  # from the range
    assert [c for c in cited if not _is_defined(c, defined)] == [
        "W5",
        bogus_rule,
        bogus_section,
        "s13",
        bogus_rule,
    ]
    assert _is_defined("s13", defined | {"§13"})
    # Not citations: a ULID, a dotted name, a lint code, a word.
    assert citations_in_line("01M8KBT5S46CH x.L6 # noqa: F401 ALL6 l6") == []


def test_a_malformed_rules_page_is_caught():
    """A target without its entry, a duplicate, a misplaced id or a gap is reported."""
    page = "\n".join(
        [
            "## L: the lease",
            "(rule-L1)=",
            "**L1 One clock.** Every lease time is the database's.",
            "(rule-L1)=",
            "**L1 One clock.** Every lease time is the database's.",
            "(rule-L3)=",
            "no entry here",
            "(rule-W1)=",
            "**W1 Backlog.** A looping worker drives again at once.",
            "(rule-" + "L" + "0" + "7)=",
        ]
    )
    _, problems = definitions(page)
    assert any("defined twice" in p for p in problems)
    assert any("L3 is not followed" in p for p in problems)
    assert any("W1 is under the heading" in p for p in problems)
    assert any("not a rule id" in p for p in problems)
    assert any("family L is not numbered" in p for p in problems)
