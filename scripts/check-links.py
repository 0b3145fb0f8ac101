#!/usr/bin/env python3
"""Check that every relative link and #anchor in the docs resolves.

Files: README.md, docs/**/*.md, packaging/README.md, pep523-ext/README.md.
A relative link must name a file or directory of the source tree; an `#anchor`
(alone, or after a .md file) must be a heading of that file, spelled as GitHub
spells heading anchors. External links (http, https, mailto) are not fetched:
this runs without a network. They are counted, and `--external` lists them.

    scripts/check-links.py              # exit 1, naming each broken link
    scripts/check-links.py --external   # also list the external links
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "packaging/README.md",
    ROOT / "pep523-ext/README.md",
]
FENCE = re.compile(r"^\s*(```|~~~)")
# [text](target) and ![alt](target); target without spaces, optional "title".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def prose_lines(path: Path):
    """(line number, line) outside fenced blocks."""
    inside = False
    for n, line in enumerate(path.read_text().split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield n, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML goes
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path, cache: dict) -> set:
    if path not in cache:
        seen: dict = {}
        found = set()
        for _, line in prose_lines(path):
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        for _, line in prose_lines(path):  # explicit <a name="..."> / id="..." anchors
            found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
        cache[path] = found
    return cache[path]


def main() -> int:
    list_external = "--external" in sys.argv[1:]
    cache: dict = {}
    broken = []
    external = []
    checked = 0
    for path in FILES:
        rel = path.relative_to(ROOT)
        for n, line in prose_lines(path):
            text = INLINE_CODE.sub("", line)
            targets = [m.group(1) for m in LINK.finditer(text)]
            m = REFDEF.match(text)
            if m:
                targets.append(m.group(1))
            for target in targets:
                if EXTERNAL.match(target):
                    external.append(f"{rel}:{n}: {target}")
                    continue
                checked += 1
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                if file_part and not dest.exists():
                    broken.append(f"{rel}:{n}: {target}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
                    continue
                if not dest.is_relative_to(ROOT):
                    broken.append(f"{rel}:{n}: {target}: points outside the source tree")
                    continue
                if anchor:
                    if dest.suffix != ".md" or dest.is_dir():
                        broken.append(f"{rel}:{n}: {target}: an anchor into a file that is not Markdown")
                    elif anchor not in anchors(dest, cache):
                        have = ", ".join(sorted(anchors(dest, cache))[:12])
                        broken.append(f"{rel}:{n}: {target}: no heading #{anchor} in {dest.relative_to(ROOT)} (has: {have}, ...)")
    if list_external:
        for e in external:
            print(f"external (not fetched): {e}")
    for b in broken:
        print(f"check-links: broken: {b}", file=sys.stderr)
    print(
        f"check-links: {checked} relative links in {len(FILES)} files, {len(broken)} broken; "
        f"{len(external)} external links not fetched (no network; --external lists them)"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
