#!/usr/bin/env python3
"""Dump the King James Bible from Debian's bible-kjv packages into a plain-text training corpus.

Source: Debian packages `bible-kjv-text` (the text, /usr/lib/bible.data) and `bible-kjv` (the
`bible` reader program). The KJV text is public domain; see /usr/share/doc/bible-kjv-text/copyright.

Output (default folder .corpus/, which .git/info/exclude ignores):
  train.txt    chapters used for training
  heldout.txt  every 20th chapter (global chapter index % 20 == 19, in canonical order), held out
  meta.json    counts, split rule, package versions, SHA-256 of each file

Format: one verse per line, without its "Ge1:1" reference; chapters separated by one blank line.
Nothing else (no headings). The output is deterministic: the same packages give the same bytes.

Usage: python3 tools/make_corpus.py [--out .corpus] [--heldout-every 20]
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import unicodedata

# Whole Bible as one range, in the reader's own abbreviations (Genesis 1:1 .. Revelation 22:21).
FULL_RANGE = "Ge1:1-Re22:21"
REF_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")
EXPECTED_VERSES = 31102
EXPECTED_BOOKS = 66
EXPECTED_CHAPTERS = 1189


def package_version(pkg):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], check=True,
                             capture_output=True, text=True).stdout.strip()
        return out or None
    except (OSError, subprocess.CalledProcessError):
        return None


def dump_bible():
    # -f: plain formatted output, one verse per line ("Ge1:1 In the beginning ...").
    # A very wide line width keeps each verse on one line whatever $COLUMNS says.
    env = dict(os.environ, COLUMNS="100000")
    proc = subprocess.run(["bible", "-f", "-l100000", FULL_RANGE], check=True,
                          capture_output=True, env=env)
    return proc.stdout.decode("utf-8")


def parse(text):
    """Return a list of chapters; each chapter is (book, chapter_no, [verse texts])."""
    chapters = []
    key = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = REF_RE.match(line)
        if not m:
            sys.exit(f"make_corpus: line {n} has no verse reference: {line[:80]!r}")
        book, chap, verse, body = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        body = unicodedata.normalize("NFC", " ".join(body.split()))
        if (book, chap) != key:
            key = (book, chap)
            chapters.append((book, chap, []))
        chapters[-1][2].append(body)
    return chapters


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".corpus", help="output folder (default .corpus)")
    ap.add_argument("--heldout-every", type=int, default=20,
                    help="hold out chapter i (0-based, canonical order) when i %% N == N-1 (default 20)")
    args = ap.parse_args()

    chapters = parse(dump_bible())
    n_verses = sum(len(c[2]) for c in chapters)
    books = []
    for b, _, _ in chapters:
        if not books or books[-1] != b:
            books.append(b)
    if (n_verses, len(books), len(chapters)) != (EXPECTED_VERSES, EXPECTED_BOOKS, EXPECTED_CHAPTERS):
        sys.exit(f"make_corpus: expected {EXPECTED_VERSES} verses / {EXPECTED_BOOKS} books / "
                 f"{EXPECTED_CHAPTERS} chapters, got {n_verses} / {len(books)} / {len(chapters)}")

    k = args.heldout_every
    train, held = [], []
    held_refs = []
    for i, (book, chap, verses) in enumerate(chapters):
        block = "\n".join(verses) + "\n"
        if i % k == k - 1:
            held.append(block)
            held_refs.append(f"{book}{chap}")
        else:
            train.append(block)

    os.makedirs(args.out, exist_ok=True)
    meta = {
        "source": "Debian packages bible-kjv-text (text) and bible-kjv (`bible` reader)",
        "bible-kjv-text_version": package_version("bible-kjv-text"),
        "bible-kjv_version": package_version("bible-kjv"),
        "command": f"bible -f -l100000 {FULL_RANGE}",
        "format": "one verse per line, no references; chapters separated by one blank line",
        "split": f"chapter index i (0-based, canonical order) held out when i % {k} == {k - 1}",
        "verses": n_verses, "books": len(books), "chapters": len(chapters),
        "train_chapters": len(train), "heldout_chapters": len(held),
        "heldout_refs": held_refs,
        "files": {},
    }
    for name, blocks in (("train.txt", train), ("heldout.txt", held)):
        data = "\n".join(blocks).encode("utf-8")
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
        meta["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"make_corpus: {n_verses} verses, {len(chapters)} chapters -> "
          f"train {len(train)} chapters ({meta['files']['train.txt']['bytes']} bytes), "
          f"held-out {len(held)} chapters ({meta['files']['heldout.txt']['bytes']} bytes) in {args.out}/")


if __name__ == "__main__":
    main()
