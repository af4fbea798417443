"""Build `words.txt` and `common5.txt` from Debian's word lists (run by hand, never at runtime).

Needs `apt-get install -y wamerican wamerican-small` and, only while building,
`pip install wordfreq` (it is not a gemkit dependency)::

    python envs/games/data/build_words.py

- `words.txt`: the dictionary (allowed Wordle guesses, Hangman words): every word of
  /usr/share/dict/american-english made of lowercase ascii letters only (no proper nouns, no
  apostrophes, no accents), 4 to 12 letters long, minus roman numerals; sorted.
- `common5.txt`: Wordle answers for `common_only`: five-letter words that are also in the small
  list (american-english-small), are not a plain plural or third-person `-s`/`-es` form of
  another dictionary word, and have a Zipf frequency of at least 2.5 in `wordfreq`; sorted.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent
DICT = Path("/usr/share/dict")
WORD = re.compile(r"^[a-z]{4,12}$")
ROMAN = re.compile(r"^m{0,4}(cm|cd|d?c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})$")
MIN_ZIPF = 2.5


def read(name: str) -> list[str]:
    """The words of one Debian list that pass the dictionary filter."""
    lines = (DICT / name).read_text(encoding="utf-8").splitlines()
    return sorted({w for w in lines if WORD.match(w) and not ROMAN.match(w)})


def is_plural(word: str, known: set[str]) -> bool:
    """True for `cats`/`boxes`-style forms of another known word."""
    return word.endswith("s") and (
        word[:-1] in known or (word.endswith("es") and word[:-2] in known)
    )


def main() -> None:
    """Write both lists next to this script."""
    from wordfreq import zipf_frequency

    words = read("american-english")
    known = set(words)
    common = [
        w
        for w in read("american-english-small")
        if len(w) == 5
        and w in known
        and not is_plural(w, known)
        and zipf_frequency(w, "en") >= MIN_ZIPF
    ]
    (HERE / "words.txt").write_text("\n".join(words) + "\n", encoding="ascii")
    (HERE / "common5.txt").write_text("\n".join(sorted(common)) + "\n", encoding="ascii")


if __name__ == "__main__":
    main()
